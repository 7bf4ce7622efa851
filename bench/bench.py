#!/usr/bin/env python3
"""Measurement helpers for bench/run that hyperfine cannot do on its own.

Subcommands (each writes one JSON file given by --out):
  freeports N            print N free loopback TCP ports (never 6379)
  handoff                section 3: release -> next holder's command, with --wait
  memory                 section 4: peak RSS via /usr/bin/time -f %M
  herd                   section 5: M wrappers with --wait on one key, overlap check
  scale                  section 6: nodes x contenders, try-once, same key
  redisbench             section 6: raw SET rates of one node (redis-benchmark)

Only the standard library is used. Times come from CLOCK_MONOTONIC
(time.monotonic_ns) in this process, or from `date +%s%N` (CLOCK_REALTIME)
printed by the locked commands themselves where the moment lives inside
another process; both clocks tick together on one machine over seconds.
"""

import argparse
import json
import os
import re
import shutil
import signal
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import time


# ---------------------------------------------------------------- helpers

def freeports(n, below=None):
    """n ports free a moment ago; with `below`, from 10000..below (a Cluster
    node's bus port is port + 10000 and must not land in the ephemeral range,
    where the kernel hands ports out to other connections)."""
    socks, ports = [], []
    candidates = iter(random.sample(range(10000, below), below - 10000)) if below else None
    while len(ports) < n:
        s = socket.socket()
        try:
            if candidates is None:
                s.bind(("127.0.0.1", 0))
            else:
                p = next(candidates)
                s.bind(("127.0.0.1", p))
                probe = socket.socket()
                probe.bind(("127.0.0.1", p + 10000))
                socks.append(probe)
        except OSError:
            s.close()
            continue
        p = s.getsockname()[1]
        socks.append(s)
        if p != 6379:
            ports.append(p)
    for s in socks:
        s.close()
    return ports


def pct(values, p):
    """Nearest-rank percentile; p in 0..100."""
    if not values:
        return None
    v = sorted(values)
    k = max(0, min(len(v) - 1, int(-(-p * len(v) // 100)) - 1))
    return v[k]


def summary(values):
    if not values:
        return {"n": 0}
    return {
        "n": len(values),
        "median": statistics.median(values),
        "mean": statistics.fmean(values),
        "p90": pct(values, 90),
        "p99": pct(values, 99),
        "min": min(values),
        "max": max(values),
        "stddev": statistics.stdev(values) if len(values) > 1 else 0.0,
    }


def redis_cli(port, *args):
    r = subprocess.run(["redis-cli", "-p", str(port), *args],
                       capture_output=True, text=True, timeout=10)
    return r.stdout.strip()


def redis_cmdstats(port):
    """{command: calls} from INFO commandstats."""
    d = {}
    for line in redis_cli(port, "INFO", "commandstats").splitlines():
        if line.startswith("cmdstat_"):
            name, rest = line[len("cmdstat_"):].split(":", 1)
            for kv in rest.split(","):
                if kv.startswith("calls="):
                    d[name] = int(kv[6:])
    return d


def cmdstats_delta(after, before):
    out = {k: v - before.get(k, 0) for k, v in after.items() if v - before.get(k, 0) > 0}
    out.pop("info", None)
    return dict(sorted(out.items(), key=lambda kv: -kv[1]))


def redis_stats(port):
    out = redis_cli(port, "INFO", "stats")
    d = {}
    for line in out.splitlines():
        if ":" in line:
            k, v = line.split(":", 1)
            d[k.strip()] = v.strip()
    return {
        "commands": int(d.get("total_commands_processed", 0)),
        "connections": int(d.get("total_connections_received", 0)),
    }


def spawn(argv, env=None, stdout=None, stderr=None):
    """posix_spawn: cheaper than subprocess.Popen when starting 100 at once."""
    fa = []
    if stdout is not None:
        fa.append((os.POSIX_SPAWN_OPEN, 1, stdout, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644))
    if stderr is not None:
        fa.append((os.POSIX_SPAWN_OPEN, 2, stderr, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644))
    path = shutil.which(argv[0]) or argv[0]
    return os.posix_spawn(path, argv, env if env is not None else os.environ, file_actions=fa)


def reap_all(pids, timeout):
    """Wait for every pid; returns {pid: (exit_code, monotonic_ns_at_reap)}.
    Kills what is left after `timeout` seconds (code None)."""
    left, done = set(pids), {}
    deadline = time.monotonic() + timeout
    while left:
        if time.monotonic() > deadline:
            for p in left:
                try:
                    os.kill(p, 9)
                except ProcessLookupError:
                    pass
            for p in list(left):
                os.waitpid(p, 0)
                done[p] = (None, time.monotonic_ns())
            break
        pid, status = os.waitpid(-1, os.WNOHANG)
        if pid == 0:
            time.sleep(0.0005)
            continue
        if pid in left:
            left.discard(pid)
            done[pid] = (os.waitstatus_to_exitcode(status), time.monotonic_ns())
    return done


def write(path, obj):
    with open(path, "w") as f:
        json.dump(obj, f, indent=1)


def wait_for_key(port, key, timeout=5.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if redis_cli(port, "EXISTS", key) == "1":
            return True
        time.sleep(0.002)
    return False


# ---------------------------------------------------------------- handoff

def handoff_rounds(bin_, ports, n, rounds, holder_sleep, tmp, tag=""):
    """Runs `rounds` holder + n waiters rounds on nodes `ports`; the gaps
    (ms) between consecutive command starts, and counters."""
    url = ",".join(f"redis://127.0.0.1:{p}" for p in ports)
    gaps, first_gaps, failures, late, margins = [], [], 0, 0, []
    for r in range(rounds):
        key = f"handoff{tag}-{n}-{r}"
        hout = os.path.join(tmp, f"h{tag}-{n}-{r}")
        holder = spawn([bin_, "-q", "-k", key, "-r", url, "-c",
                        f"sleep {holder_sleep}; exec date +%s%N"], stdout=hout)
        if not wait_for_key(ports[0], "lock:" + key):
            failures += 1
            reap_all([holder], 10)
            continue
        outs, pids = [], []
        for i in range(n):
            o = os.path.join(tmp, f"w{tag}-{n}-{r}-{i}")
            outs.append(o)
            pids.append(spawn([bin_, "-q", "-k", key, "-r", url, "--wait", "30s",
                               "--", "date", "+%s%N"], stdout=o,
                              stderr=o + ".err"))
        launched = time.time_ns()
        done = reap_all([holder] + pids, 60 + n)
        codes = [done[p][0] for p in pids]
        failures += sum(1 for c in codes if c != 0)
        try:
            h = int(open(hout).read().split()[0])
        except (OSError, ValueError, IndexError):
            failures += 1
            continue
        margins.append((h - launched) / 1e6)
        if launched > h:
            late += 1  # some waiters started after the holder's release
        stamps = []
        for o in outs:
            try:
                stamps.append(int(open(o).read().split()[0]))
            except (OSError, ValueError, IndexError):
                pass
        seq = sorted([h] + stamps)
        diffs = [(b - x) / 1e6 for x, b in zip(seq, seq[1:])]
        if diffs:
            first_gaps.append(diffs[0])
        gaps.extend(diffs)
    return gaps, first_gaps, failures, late, margins


def cmd_handoff(a):
    ports = a.ports or [a.port]
    tmp = tempfile.mkdtemp(prefix="handoff.", dir=a.tmp)
    results = {"holder_sleep_s": a.holder_sleep, "configs": []}
    for n, rounds in zip(a.waiters, a.rounds):
        gaps, first_gaps, failures, late, margins = handoff_rounds(
            a.bin, ports, n, rounds, a.holder_sleep, tmp)
        results["configs"].append({
            "waiters": n, "rounds": rounds,
            "handoff_ms": summary(gaps),
            "first_handoff_ms": summary(first_gaps),
            "failures": failures,
            "rounds_with_late_waiters": late,
            "queue_margin_ms": summary(margins),
        })
        print(f"  handoff waiters={n}: {summary(gaps)}", file=sys.stderr)
    shutil.rmtree(tmp, ignore_errors=True)
    write(a.out, results)


# ---------------------------------------------------------------- degraded

def cmd_degraded(a):
    """A run and a hand-off over 3 nodes, healthy and with node `--stop-pid`
    SIGSTOPped (maintenance, a hung VM): what a quorum is for."""
    url = ",".join(f"redis://127.0.0.1:{p}" for p in a.ports)
    tmp = tempfile.mkdtemp(prefix="degraded.", dir=a.tmp)

    def runs(tag):
        out = os.path.join(tmp, f"{tag}.json")
        subprocess.run(["hyperfine", "-N", "--style", "none", "--warmup", str(a.warmup),
                        "--runs", str(a.runs), "--export-json", out,
                        f"{a.bin} -q -k degraded-{tag} -r {url} -- true"],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        r = json.load(open(out))["results"][0]
        return {"median_ms": r["median"] * 1e3, "mean_ms": r["mean"] * 1e3,
                "max_ms": r["max"] * 1e3, "runs": len(r["times"])}

    def handoffs(tag):
        # The first node is a healthy one: the harness watches it for the key.
        gaps, _, failures, _, _ = handoff_rounds(a.bin, a.ports, 1, a.rounds, 0.2, tmp, tag)
        return {"handoff_ms": summary(gaps), "failures": failures}

    healthy = {"run": runs("healthy"), "handoff": handoffs("healthy")}
    os.kill(a.stop_pid, signal.SIGSTOP)
    try:
        stopped = {"run": runs("stopped"), "handoff": handoffs("stopped")}
    finally:
        os.kill(a.stop_pid, signal.SIGCONT)
    ratio_run = stopped["run"]["median_ms"] / healthy["run"]["median_ms"]
    ratio_handoff = (stopped["handoff"]["handoff_ms"]["median"]
                     / healthy["handoff"]["handoff_ms"]["median"])
    result = {"healthy": healthy, "one_stopped": stopped,
              "ratio_run": ratio_run, "ratio_handoff": ratio_handoff}
    print(f"  degraded: run {healthy['run']['median_ms']:.2f} -> "
          f"{stopped['run']['median_ms']:.2f} ms ({ratio_run:.2f}x), handoff "
          f"{healthy['handoff']['handoff_ms']['median']:.2f} -> "
          f"{stopped['handoff']['handoff_ms']['median']:.2f} ms ({ratio_handoff:.2f}x)",
          file=sys.stderr)
    shutil.rmtree(tmp, ignore_errors=True)
    write(a.out, result)


# ---------------------------------------------------------------- memory

def peak_rss_kb(argv, reps):
    vals, fails = [], 0
    for _ in range(reps):
        with tempfile.NamedTemporaryFile("r", suffix=".rss") as f:
            r = subprocess.run(["/usr/bin/time", "-f", "%M", "-o", f.name, *argv],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                               timeout=60)
            if r.returncode != 0:
                fails += 1
            try:
                vals.append(int(f.read().strip().splitlines()[-1]))
            except (ValueError, IndexError):
                fails += 1
    return {"kb": summary(vals), "failures": fails}


def cmd_memory(a):
    urls = [f"redis://127.0.0.1:{p}" for p in a.ports]
    lockfile = os.path.join(a.tmp, "mem.flock")
    rows = []

    def add(name, argv, note=""):
        r = peak_rss_kb(argv, a.reps)
        r.update(name=name, argv=" ".join(argv), note=note)
        rows.append(r)
        print(f"  rss {name}: {r['kb'].get('median')} kB", file=sys.stderr)

    add("true (baseline process)", ["true"])
    for n in (1, 3, 5):
        add(f"redlock-run, {n} node{'s' if n > 1 else ''}, true",
            [a.bin, "-k", f"mem{n}", "-r", ",".join(urls[:n]), "--", "true"])
    add("redlock-run, 3 nodes, sleep 2 (heartbeat thread running, TTL 1s)",
        [a.bin, "-k", "memhb", "-t", "1s", "-r", ",".join(urls[:3]), "--", "sleep", "2"],
        "the sleep child is smaller than the wrapper, so %M is the wrapper's")
    if a.wait_supported:
        # A waiter: hold the key for 1 s, then measure a --wait run behind it.
        holder = subprocess.Popen([a.bin, "-q", "-k", "memwait", "-r", urls[0], "--", "sleep", "1"])
        wait_for_key(a.ports[0], "lock:memwait")
        add("redlock-run --wait (queued ~1 s behind a holder), 1 node",
            [a.bin, "-k", "memwait", "-r", urls[0], "--wait", "30s", "--", "true"])
        holder.wait()
    add("flock", ["flock", lockfile, "true"])
    if a.etcd:
        add("etcdctl lock", ["etcdctl", f"--endpoints={a.etcd}", "lock", "memlock", "true"])
    add("redis-cli SET (one call)", ["redis-cli", "-p", str(a.ports[0]), "SET", "memk", "v", "NX", "PX", "1000"])
    add("seeds' script (bash + 2x redis-cli), peak of any one process",
        ["bash", a.seed, str(a.ports[0])])
    write(a.out, {"reps": a.reps, "rows": rows})


# ---------------------------------------------------------------- herd

HERD_SECTION = (
    'mkdir "$HERD_CS" 2>/dev/null || echo overlap >> "$HERD_OVERLAPS"; '
    'sleep {hold}; rmdir "$HERD_CS" 2>/dev/null || echo overlap >> "$HERD_OVERLAPS"'
)


def cmd_herd(a):
    url = ",".join(f"redis://127.0.0.1:{p}" for p in a.ports)
    d = tempfile.mkdtemp(prefix="herd.", dir=a.tmp)
    env = dict(os.environ, HERD_CS=os.path.join(d, "cs"),
               HERD_OVERLAPS=os.path.join(d, "overlaps"))
    section = HERD_SECTION.format(hold=a.hold)
    before = [redis_stats(p) for p in a.ports]
    before_cs = [redis_cmdstats(p) for p in a.ports]
    t0 = time.monotonic_ns()
    pids = [spawn([a.bin, "-q", "-k", "herd", "-r", url, "--wait", "120s", "-c", section],
                  env=env, stderr=os.path.join(d, f"err{i}")) for i in range(a.count)]
    t_launched = time.monotonic_ns()
    done = reap_all(pids, 180)
    t1 = time.monotonic_ns()
    after = [redis_stats(p) for p in a.ports]
    after_cs = [redis_cmdstats(p) for p in a.ports]
    try:
        overlaps = len(open(env["HERD_OVERLAPS"]).read().split())
    except OSError:
        overlaps = 0
    codes = [c for c, _ in done.values()]
    total = (t1 - t0) / 1e9
    ends = sorted(t for _, t in done.values())
    res = {
        "count": a.count, "nodes": len(a.ports), "hold_s": a.hold,
        "launch_s": (t_launched - t0) / 1e9,
        "total_s": total,
        "handoffs_per_s": (a.count - 1) / ((ends[-1] - ends[0]) / 1e9) if len(ends) > 1 and ends[-1] > ends[0] else None,
        "runs_per_s": a.count / total,
        "floor_s": a.count * a.hold,
        "overlaps": overlaps,
        "ok": sum(1 for c in codes if c == 0),
        "failed": sum(1 for c in codes if c != 0),
        "exit_codes": sorted(set(map(str, codes))),
        "redis_commands_per_node": [x["commands"] - y["commands"] - 1 for x, y in zip(after, before)],
        "redis_connections_per_node": [x["connections"] - y["connections"] - 1 for x, y in zip(after, before)],
        "redis_commandstats_node0": cmdstats_delta(after_cs[0], before_cs[0]),
    }
    errs = []
    for i in range(a.count):
        try:
            e = open(os.path.join(d, f"err{i}")).read().strip()
            if e:
                errs.append(e.splitlines()[-1])
        except OSError:
            pass
    res["stderr_samples"] = sorted(set(errs))[:5]
    print(f"  herd: {res}", file=sys.stderr)
    shutil.rmtree(d, ignore_errors=True)
    write(a.out, res)


# ---------------------------------------------------------------- scale

def cmd_scale(a):
    rows = []
    allurls = [f"redis://127.0.0.1:{p}" for p in a.ports]
    d = tempfile.mkdtemp(prefix="scale.", dir=a.tmp)
    for n in a.nodes:
        urls = ",".join(allurls[:n])
        for c in a.contenders:
            lat, walls, winners, busy, other, cmds, conns = [], [], [], 0, 0, [], []
            for rep in range(a.reps):
                key = f"scale-{n}-{c}-{rep}"
                before = [redis_stats(p) for p in a.ports[:n]]
                starts = {}
                t0 = time.monotonic_ns()
                for i in range(c):
                    s = time.monotonic_ns()
                    # The winner holds the lock for a while so every other
                    # contender meets it: the cron-at-:00 pattern.
                    pid = spawn([a.bin, "-q", "-k", key, "-r", urls, "--", "sleep", str(a.hold)],
                                stderr=os.devnull)
                    starts[pid] = s
                done = reap_all(list(starts), 60)
                t1 = time.monotonic_ns()
                after = [redis_stats(p) for p in a.ports[:n]]
                win = 0
                for pid, (code, t) in done.items():
                    if code == 0:
                        win += 1
                    elif code == 75:
                        busy += 1
                        lat.append((t - starts[pid]) / 1e6)
                    else:
                        other += 1
                winners.append(win)
                walls.append((t1 - t0) / 1e6)
                # -1: our own INFO call; the rest are redlock-run's.
                cmds.append(statistics.fmean(x["commands"] - y["commands"] - 1 for x, y in zip(after, before)) / c)
                conns.append(statistics.fmean(x["connections"] - y["connections"] - 1 for x, y in zip(after, before)) / c)
            rows.append({
                "nodes": n, "contenders": c, "reps": a.reps,
                "busy_latency_ms": summary(lat),
                "wall_ms": summary(walls),
                "winners_per_rep": winners,
                "busy": busy, "other_exit": other,
                "commands_per_contender_per_node": statistics.fmean(cmds),
                "connections_per_contender_per_node": statistics.fmean(conns),
            })
            print(f"  scale n={n} c={c}: busy p50={rows[-1]['busy_latency_ms'].get('median')} "
                  f"winners={winners}", file=sys.stderr)
    shutil.rmtree(d, ignore_errors=True)
    write(a.out, {"hold_s": a.hold, "rows": rows})


# ---------------------------------------------------------------- redis-benchmark

def cmd_redisbench(a):
    res = {}
    if not shutil.which("redis-benchmark"):
        write(a.out, {"skipped": "redis-benchmark not installed"})
        return
    for name, extra, n in (("SET, kept connections (50 clients)", ["-k", "1"], a.n),
                           ("connect + SET + close (50 clients)", ["-k", "0"], a.n // 4)):
        r = subprocess.run(["redis-benchmark", "-p", str(a.port), "-t", "set", "-n", str(n),
                            "-c", "50", "-q", *extra], capture_output=True, text=True, timeout=300)
        m = re.findall(r"SET: ([\d.]+) requests per second", r.stdout.replace("\r", "\n"))
        res[name] = float(m[-1]) if m else None
        print(f"  redis-benchmark {name}: {res[name]}", file=sys.stderr)
    write(a.out, {"rates": res})


# ---------------------------------------------------------------- proxy calibration

def cmd_proxyrtt(a):
    """PING/PONG round trips through the delay proxy on one kept connection,
    so the fan-out numbers can be read against what the proxy really adds."""
    res = {}
    for label, port in (("direct", a.direct), ("through proxy", a.proxy)):
        s = socket.create_connection(("127.0.0.1", port))
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        t = []
        for _ in range(a.n):
            t0 = time.monotonic_ns()
            s.sendall(b"PING\r\n")
            buf = b""
            while not buf.endswith(b"\r\n"):
                buf += s.recv(64)
            t.append((time.monotonic_ns() - t0) / 1e6)
        s.close()
        # a fresh connection: connect + first PING
        t0 = time.monotonic_ns()
        s = socket.create_connection(("127.0.0.1", port))
        s.sendall(b"PING\r\n")
        s.recv(64)
        first = (time.monotonic_ns() - t0) / 1e6
        s.close()
        res[label] = {"rtt_ms": summary(t), "connect_and_first_ping_ms": first}
        print(f"  {label}: rtt median {res[label]['rtt_ms']['median']:.2f} ms", file=sys.stderr)
    write(a.out, res)


# ---------------------------------------------------------------- profile

def cmd_profile(a):
    """perf stat (CPU time, context switches, page faults) and strace -f -c
    (threads and processes created, syscalls) for each command."""
    rows = []
    for spec in a.commands:
        name, cmd = spec.split("=", 1)
        argv = cmd.split()
        row = {"name": name, "argv": cmd}
        if shutil.which("perf"):
            r = subprocess.run(["perf", "stat", "-x", ",", "-r", str(a.reps), "-e",
                                "task-clock,context-switches,cpu-migrations,page-faults", "--", *argv],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, timeout=300)
            for line in r.stderr.splitlines():
                f = line.split(",")
                if len(f) >= 3 and f[2] in ("task-clock", "context-switches", "cpu-migrations", "page-faults"):
                    try:
                        row[f[2]] = float(f[0])
                    except ValueError:
                        pass
        if shutil.which("strace"):
            with tempfile.NamedTemporaryFile("r", suffix=".strace") as f:
                subprocess.run(["strace", "-f", "-c", "-o", f.name, *argv],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=60)
                calls = {}
                for line in f.read().splitlines():
                    p = line.split()
                    if len(p) >= 5 and p[0][0].isdigit() and p[-1].isidentifier():
                        calls[p[-1]] = int(p[3])
                row["threads_created"] = calls.get("clone3", 0)
                row["processes_forked"] = calls.get("clone", 0) + calls.get("fork", 0) + calls.get("vfork", 0)
                row["syscalls"] = calls.get("total", sum(v for k, v in calls.items() if k != "total"))
                row["futex"] = calls.get("futex", 0)
        rows.append(row)
        print(f"  profile {name}: {row}", file=sys.stderr)
    write(a.out, {"reps": a.reps, "rows": rows})


# ---------------------------------------------------------------- main

def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("freeports"); p.add_argument("n", type=int)
    p.add_argument("--below", type=int)

    p = sub.add_parser("handoff")
    p.add_argument("--bin", required=True); p.add_argument("--port", type=int)
    p.add_argument("--ports", type=lambda s: [int(x) for x in s.split(",")])
    p.add_argument("--tmp", required=True); p.add_argument("--out", required=True)
    p.add_argument("--waiters", type=lambda s: [int(x) for x in s.split(",")], default=[1, 8, 32])
    p.add_argument("--rounds", type=lambda s: [int(x) for x in s.split(",")], default=[60, 12, 4])
    p.add_argument("--holder-sleep", type=float, default=0.3)

    p = sub.add_parser("degraded")
    p.add_argument("--bin", required=True)
    p.add_argument("--ports", type=lambda s: [int(x) for x in s.split(",")], required=True)
    p.add_argument("--stop-pid", type=int, required=True)
    p.add_argument("--tmp", required=True); p.add_argument("--out", required=True)
    p.add_argument("--runs", type=int, default=200); p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--rounds", type=int, default=40)

    p = sub.add_parser("memory")
    p.add_argument("--bin", required=True); p.add_argument("--ports", type=lambda s: [int(x) for x in s.split(",")], required=True)
    p.add_argument("--tmp", required=True); p.add_argument("--out", required=True)
    p.add_argument("--etcd", default=""); p.add_argument("--seed", required=True)
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--wait-supported", action="store_true")

    p = sub.add_parser("herd")
    p.add_argument("--bin", required=True); p.add_argument("--ports", type=lambda s: [int(x) for x in s.split(",")], required=True)
    p.add_argument("--tmp", required=True); p.add_argument("--out", required=True)
    p.add_argument("--count", type=int, default=100); p.add_argument("--hold", type=float, default=0.005)

    p = sub.add_parser("scale")
    p.add_argument("--bin", required=True); p.add_argument("--ports", type=lambda s: [int(x) for x in s.split(",")], required=True)
    p.add_argument("--tmp", required=True); p.add_argument("--out", required=True)
    p.add_argument("--nodes", type=lambda s: [int(x) for x in s.split(",")], default=[1, 3, 5])
    p.add_argument("--contenders", type=lambda s: [int(x) for x in s.split(",")], default=[1, 10, 50, 100])
    p.add_argument("--reps", type=int, default=3); p.add_argument("--hold", type=float, default=1.0)

    p = sub.add_parser("redisbench")
    p.add_argument("--port", type=int, required=True); p.add_argument("--out", required=True)
    p.add_argument("--n", type=int, default=200000)

    p = sub.add_parser("proxyrtt")
    p.add_argument("--direct", type=int, required=True); p.add_argument("--proxy", type=int, required=True)
    p.add_argument("--out", required=True); p.add_argument("--n", type=int, default=20)

    p = sub.add_parser("profile")
    p.add_argument("--out", required=True); p.add_argument("--reps", type=int, default=100)
    p.add_argument("commands", nargs="+", metavar="NAME=COMMAND")

    a = ap.parse_args()
    if a.cmd == "freeports":
        print(" ".join(map(str, freeports(a.n, a.below))))
    else:
        {"handoff": cmd_handoff, "degraded": cmd_degraded, "memory": cmd_memory, "herd": cmd_herd,
         "scale": cmd_scale, "redisbench": cmd_redisbench,
         "proxyrtt": cmd_proxyrtt, "profile": cmd_profile}[a.cmd](a)


if __name__ == "__main__":
    main()
