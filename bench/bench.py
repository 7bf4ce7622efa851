#!/usr/bin/env python3
"""Measurement helpers for bench/run that hyperfine cannot do on its own.

Subcommands (each writes one JSON file given by --out):
  freeports N            print N free loopback TCP ports (never 6379)
  handoff                section 3: release -> next holder's command, with --wait
  memory                 section 4: peak RSS via /usr/bin/time -f %M
  herd                   section 5: N wrappers with --wait on one key, started while it
                         is held; overlap check, Redis commands per run (all, and
                         client requests only; optionally cross-checked by MONITOR)
  scale                  section 6: nodes x contenders, try-once, same key
  redisbench             section 6: raw SET rates of one node (redis-benchmark)
  fleet                  section 10: examples/fleet scenarios with Redis counters and CPU

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
import threading
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


class Resp:
    """A minimal RESP2 client on one kept connection (binary-safe, unlike
    redis-cli arguments), counting every command it sends so that the
    harness's own commands can be taken out of Redis's counters."""

    def __init__(self, port):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=30)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.file = self.sock.makefile("rb")
        self.sent = 0
        self.sent_info = 0
        self.port = port
        self.local_port = self.sock.getsockname()[1]

    def send(self, *args):
        out = [b"*%d\r\n" % len(args)]
        for a in args:
            if isinstance(a, str):
                a = a.encode()
            elif isinstance(a, int):
                a = str(a).encode()
            out.append(b"$%d\r\n%s\r\n" % (len(a), a))
        self.sock.sendall(b"".join(out))
        self.sent += 1
        if args and str(args[0]).upper() == "INFO":
            self.sent_info += 1

    def read(self):
        line = self.file.readline()
        if not line:
            raise ConnectionError("connection closed")
        kind, rest = line[:1], line[1:-2]
        if kind == b"+":
            return rest.decode(errors="replace")
        if kind == b"-":
            raise RuntimeError(rest.decode(errors="replace"))
        if kind == b":":
            return int(rest)
        if kind == b"$":
            n = int(rest)
            if n < 0:
                return None
            data = self.file.read(n + 2)
            return data[:-2]
        if kind == b"*":
            n = int(rest)
            return None if n < 0 else [self.read() for _ in range(n)]
        raise RuntimeError(f"unexpected reply {line!r}")

    def cmd(self, *args):
        self.send(*args)
        return self.read()

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass


# Commands Lua scripts never call (EVAL and the connection/pub-sub
# commands are refused inside a script, or redlock-run's scripts have no
# use for them): counting these in INFO commandstats gives the requests the
# clients sent. Everything else (SET, GET, ZADD, PUBLISH, TIME, ...) is
# counted by Redis whether a client or a script called it.
CLIENT_ONLY = ("eval", "evalsha", "eval_ro", "evalsha_ro", "subscribe", "unsubscribe",
               "psubscribe", "punsubscribe", "hello", "client", "auth", "select", "ping",
               "quit", "reset", "wait", "readonly", "info")


def parse_info(text):
    d, cs = {}, {}
    for line in text.splitlines():
        if ":" not in line or line.startswith("#"):
            continue
        k, v = line.split(":", 1)
        if k.startswith("cmdstat_"):
            calls = 0
            for kv in v.split(","):
                if kv.startswith("calls="):
                    calls = int(kv[6:])
            cs[k[len("cmdstat_"):]] = calls
        else:
            d[k.strip()] = v.strip()
    return d, cs


def snapshot(conn):
    """INFO all (stats, cpu, commandstats) in one command, with how many
    commands this connection had sent before it."""
    sent, sent_info = conn.sent, conn.sent_info
    d, cs = parse_info(conn.cmd("INFO", "all").decode())
    return {"sent": sent, "sent_info": sent_info,
            "commands": int(d.get("total_commands_processed", 0)),
            "connections": int(d.get("total_connections_received", 0)),
            "cpu": float(d.get("used_cpu_sys", 0)) + float(d.get("used_cpu_user", 0)),
            "cmdstats": cs}


def work(before, after):
    """What the clients cost one node between two snapshots, the harness's
    own commands taken out. total_commands_processed counts a command once it
    has run, so the earlier INFO is in the later figure and the later one is
    not: every command this connection sent from the first snapshot up to
    (not including) the second one is ours."""
    ours = after["sent"] - before["sent"]
    cs = {k: v - before["cmdstats"].get(k, 0) for k, v in after["cmdstats"].items()
          if v - before["cmdstats"].get(k, 0) > 0}
    # redlock-run's own INFO (the server's run_id, written with a
    # connection's set-up) is a client request; the harness's INFO
    # snapshots in the window are not.
    info = cs.pop("info", 0) - (after["sent_info"] - before["sent_info"])
    if info > 0:
        cs["info"] = info
    for k in ("pubsub|channels", "pubsub|numsub", "echo", "monitor"):
        cs.pop(k, None)
    client = sum(v for k, v in cs.items() if k.split("|")[0] in CLIENT_ONLY)
    return {"commands": after["commands"] - before["commands"] - ours,
            "client_requests": client,
            "connections": after["connections"] - before["connections"],
            "cpu_s": after["cpu"] - before["cpu"],
            "cmdstats": dict(sorted(cs.items(), key=lambda kv: -kv[1]))}


def sum_work(per_node):
    tot = {"commands": 0, "client_requests": 0, "connections": 0, "cpu_s": 0.0, "cmdstats": {}}
    for w in per_node:
        for k in ("commands", "client_requests", "connections", "cpu_s"):
            tot[k] += w[k]
        for k, v in w["cmdstats"].items():
            tot["cmdstats"][k] = tot["cmdstats"].get(k, 0) + v
    tot["cmdstats"] = dict(sorted(tot["cmdstats"].items(), key=lambda kv: -kv[1]))
    return tot


class Monitor:
    """MONITOR on one node, in a thread: counts the lines a client sent
    (tagged with its address) apart from those a script ran (tagged `lua`),
    leaving out the harness's own connection."""

    def __init__(self, port, exclude_port):
        self.conn = Resp(port)
        self.exclude = f":{exclude_port}]"
        self.marker = f"monitor-end-{random.getrandbits(48):x}"
        self.client, self.lua, self.names = 0, 0, {}
        if self.conn.cmd("MONITOR") != "OK":
            raise RuntimeError("MONITOR refused")
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self):
        while True:
            try:
                line = self.conn.read()
            except (ConnectionError, OSError, RuntimeError):
                return
            if not isinstance(line, str):
                continue
            if self.marker in line:
                return
            tag = line[line.find("[") + 1:line.find("]")]
            name = line[line.find("]") + 3:].split('"', 1)[0].lower()
            if tag.endswith(" lua"):
                self.lua += 1
            elif self.exclude in line[:line.find("]") + 1]:
                continue
            else:
                self.client += 1
                self.names[name] = self.names.get(name, 0) + 1

    def finish(self, conn):
        """Waits for the harness's ECHO (sent on `conn` after its last
        snapshot) to come through: every earlier command is in by then."""
        conn.cmd("ECHO", self.marker)
        self.thread.join(30)
        self.conn.close()
        return {"client_lines": self.client, "lua_lines": self.lua,
                "client_commands": dict(sorted(self.names.items(), key=lambda kv: -kv[1]))}


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


def subscribers(conn):
    """Clients subscribed to any channel on this node (PUBSUB CHANNELS, then
    NUMSUB of each): a fair waiter has its own channel, an unfair one shares
    the lock's."""
    chans = conn.cmd("PUBSUB", "CHANNELS") or []
    if not chans:
        return 0
    r = conn.cmd("PUBSUB", "NUMSUB", *chans)
    return sum(r[1::2])


# The light section: the lightest command that still tells an overlap. flock
# -n exits 1 at once when another process holds the file's lock, so a second
# holder inside while the first one's flock runs shows as exit status 1.
HERD_LIGHT = ["flock", "-n", "{lockfile}", "true"]


def section_cost(argv, env, reps=20):
    """Median wall time (s) of the critical section alone (`sh -c` included
    for the shell section): the herd's floor is count x this."""
    t = []
    for _ in range(reps):
        t0 = time.monotonic_ns()
        subprocess.run(argv, env=env, check=False)
        t.append((time.monotonic_ns() - t0) / 1e9)
    return statistics.median(t)


def herd_once(a, n, conns, url, d, env, command, monitor):
    """One herd: a holder takes the key; n wrappers with --wait 120s are
    started and have all subscribed (so all have queued) before the holder
    lets go. Counters cover the waiters' whole runs and the holder's release."""
    key = (f"herd-{'u' if a.unfair else 'f'}{'m' if monitor else ''}{'l' if a.light else ''}"
           f"-{len(a.ports)}-{n}")
    holder = subprocess.Popen([a.bin, "-q", "-k", key, "-r", url, "--", "head", "-c", "1"],
                              stdin=subprocess.PIPE, stdout=subprocess.DEVNULL)
    deadline = time.monotonic() + 10
    while not all(c.cmd("EXISTS", "lock:" + key) == 1 for c in conns):
        if time.monotonic() > deadline:
            raise RuntimeError("the holder did not take the lock on every node")
        time.sleep(0.002)
    mons = [Monitor(c.port, c.local_port) for c in conns] if monitor else []
    before = [snapshot(c) for c in conns]
    extra = ["--wait-unfair"] if a.unfair else []
    t0 = time.monotonic_ns()
    pids = [spawn([a.bin, "-q", "-k", key, "-r", url, "--wait", "120s", *extra, *command],
                  env=env, stderr=os.path.join(d, f"err-{key}-{i}")) for i in range(n)]
    t_launched = time.monotonic_ns()
    deadline = time.monotonic() + 60 + n
    all_subscribed = True
    while not all(subscribers(c) >= n for c in conns):
        if time.monotonic() > deadline:
            all_subscribed = False
            break
        time.sleep(0.01)
    t_queued = time.monotonic_ns()
    holder.stdin.write(b"x")
    holder.stdin.close()
    t_release = time.monotonic_ns()
    done = reap_all(pids, 180)
    holder.wait(30)
    t_end = time.monotonic_ns()
    after = [snapshot(c) for c in conns]
    mon = [m.finish(c) for m, c in zip(mons, conns)]
    per_node = [work(b, x) for b, x in zip(before, after)]
    tot = sum_work(per_node)
    ends = sorted(t for _, t in done.values())
    codes = [c for c, _ in done.values()]
    res = {
        "count": n, "nodes": len(a.ports), "unfair": a.unfair, "monitored": monitor,
        "light": a.light,
        "all_subscribed_before_release": all_subscribed,
        "hold_s": a.hold,
        "launch_s": (t_launched - t0) / 1e9,
        "queued_s": (t_queued - t0) / 1e9,
        "herd_s": (ends[-1] - t_release) / 1e9 if ends else None,
        "first_s": (ends[0] - t_release) / 1e9 if ends else None,
        "handoffs_per_s": (n - 1) / ((ends[-1] - ends[0]) / 1e9) if n > 1 and ends[-1] > ends[0] else None,
        "ok": sum(1 for c in codes if c == 0),
        "failed": sum(1 for c in codes if c != 0),
        "exit_codes": sorted(set(map(str, codes))),
        "_codes": codes,
        "holder_exit": holder.returncode,
        # Totals over the nodes; the holder's release is in them (one
        # release script per node), its acquire is not.
        "commands": tot["commands"],
        "client_requests": tot["client_requests"],
        "commands_per_run": tot["commands"] / n,
        "client_requests_per_run": tot["client_requests"] / n,
        "connections": tot["connections"],
        "redis_cpu_ms": tot["cpu_s"] * 1e3,
        "cmdstats": tot["cmdstats"],
        "per_node": [{k: w[k] for k in ("commands", "client_requests", "connections", "cpu_s")}
                     for w in per_node],
    }
    if monitor:
        res["monitor"] = {
            "client_lines": sum(m["client_lines"] for m in mon),
            "lua_lines": sum(m["lua_lines"] for m in mon),
            "client_commands": sum_counts(m["client_commands"] for m in mon),
        }
    return res, key


def sum_counts(dicts):
    out = {}
    for d in dicts:
        for k, v in d.items():
            out[k] = out.get(k, 0) + v
    return dict(sorted(out.items(), key=lambda kv: -kv[1]))


def cmd_herd(a):
    url = ",".join(f"redis://127.0.0.1:{p}" for p in a.ports)
    d = tempfile.mkdtemp(prefix="herd.", dir=a.tmp)
    env = dict(os.environ, HERD_CS=os.path.join(d, "cs"),
               HERD_OVERLAPS=os.path.join(d, "overlaps"))
    if a.light:
        argv = [x.format(lockfile=os.path.join(d, "cs.flock")) for x in HERD_LIGHT]
        command, alone = ["--", *argv], argv
    else:
        section = HERD_SECTION.format(hold=a.hold)
        command, alone = ["-c", section], ["sh", "-c", section]
    conns = [Resp(p) for p in a.ports]
    floor = section_cost(alone, env)
    runs = []
    for n in a.counts:
        try:
            os.unlink(env["HERD_OVERLAPS"])
        except OSError:
            pass
        res, key = herd_once(a, n, conns, url, d, env, command, a.monitor)
        codes = res.pop("_codes")
        if a.light:
            # flock -n's refusal, passed on by redlock-run as its own status.
            res["overlaps"] = codes.count(1)
        else:
            try:
                res["overlaps"] = len(open(env["HERD_OVERLAPS"]).read().split())
            except OSError:
                res["overlaps"] = 0
        res["section_s"] = floor
        res["floor_s"] = n * floor
        errs = []
        for i in range(n):
            try:
                e = open(os.path.join(d, f"err-{key}-{i}")).read().strip()
                if e:
                    errs.append(e.splitlines()[-1])
            except OSError:
                pass
        res["stderr_samples"] = sorted(set(errs))[:5]
        runs.append(res)
        short = {k: res[k] for k in ("count", "nodes", "unfair", "herd_s", "overlaps", "ok",
                                     "commands_per_run", "client_requests_per_run", "redis_cpu_ms")}
        if "monitor" in res:
            short["monitor"] = {k: res["monitor"][k] for k in ("client_lines", "lua_lines")}
        print(f"  herd: {short}", file=sys.stderr)
    for c in conns:
        c.close()
    shutil.rmtree(d, ignore_errors=True)
    write(a.out, {"runs": runs})


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


# ---------------------------------------------------------------- fleet

def cmd_fleet(a):
    """Section 10: `examples/fleet` (N hosts as threads of one process, each
    doing a try-once run with redlock-run's own library) for each HOSTSxKEYS
    scenario, with every node's counters and CPU around it."""
    url = ",".join(f"redis://127.0.0.1:{p}" for p in a.ports)
    conns = [Resp(p) for p in a.ports]
    rows = []
    for sc in a.scenarios:
        hosts, keys = (int(x) for x in sc.split("x"))
        for rep in range(a.reps):
            name = f"fleet-{hosts}x{keys}-{rep}"
            before = [snapshot(c) for c in conns]
            t0 = time.monotonic_ns()
            r = subprocess.run([a.fleet, "--redis", url, "--hosts", str(hosts), "--keys", str(keys),
                                "--name", name], capture_output=True, text=True, timeout=600)
            wall = (time.monotonic_ns() - t0) / 1e9
            after = [snapshot(c) for c in conns]
            if r.returncode != 0:
                raise RuntimeError(f"fleet {sc}: exit {r.returncode}: {r.stderr.strip()[-500:]}")
            out = json.loads(r.stdout)
            per_node = [work(b, x) for b, x in zip(before, after)]
            tot = sum_work(per_node)
            out.update({
                "scenario": sc, "rep": rep, "process_wall_s": wall,
                "stderr_tail": r.stderr.strip().splitlines()[-3:],
                "commands": tot["commands"], "client_requests": tot["client_requests"],
                "commands_per_run": tot["commands"] / hosts,
                "client_requests_per_run": tot["client_requests"] / hosts,
                "connections": tot["connections"],
                "cmdstats": tot["cmdstats"],
                "redis_cpu_ms_per_node": [w["cpu_s"] * 1e3 for w in per_node],
                "commands_per_node": [w["commands"] for w in per_node],
                "client_requests_per_node": [w["client_requests"] for w in per_node],
            })
            # Per run, per node: what one invocation costs each Redis.
            cpu = statistics.fmean(out["redis_cpu_ms_per_node"])
            out["redis_cpu_us_per_run_per_node"] = cpu * 1e3 / hosts
            rows.append(out)
            print(f"  fleet {sc} rep {rep}: decision p50 {out['decision_ms'].get('p50')} "
                  f"p99 {out['decision_ms'].get('p99')} ms, winners {out['winners']} "
                  f"(keys with one {out['keys_with_one_winner']}/{keys}), busy {out['busy']}, "
                  f"unavailable {out['unavailable']}, cmds/run {out['commands_per_run']:.1f} "
                  f"(client {out['client_requests_per_run']:.1f}), Redis CPU/node {cpu:.1f} ms",
                  file=sys.stderr)
    for c in conns:
        c.close()
    write(a.out, {"rows": rows, "nofile": a.nofile})


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


def cmd_pool(a):
    """Pools the rounds of one hyperfine benchmark (the same commands in the
    same order in each file) into one hyperfine JSON document."""
    rounds = [json.load(open(f))["results"] for f in sorted(a.files)]
    pooled = []
    for i, first in enumerate(rounds[0]):
        rs = [r[i] for r in rounds]
        if any(r["command"] != first["command"] for r in rs):
            raise SystemExit(f"round files disagree on command {i}: {first['command']}")
        times = [t for r in rs for t in r["times"]]
        runs = [len(r["times"]) for r in rs]
        mean = statistics.fmean(times)
        pooled.append({
            "command": first["command"],
            "mean": mean,
            "stddev": statistics.stdev(times) if len(times) > 1 else None,
            "median": statistics.median(times),
            "user": sum(r["user"] * n for r, n in zip(rs, runs)) / sum(runs),
            "system": sum(r["system"] * n for r, n in zip(rs, runs)) / sum(runs),
            "min": min(times),
            "max": max(times),
            "times": times,
            "exit_codes": [c for r in rs for c in r.get("exit_codes", [])],
            "rounds": len(rs),
        })
    write(a.out, {"results": pooled})


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
    p.add_argument("--counts", type=lambda s: [int(x) for x in s.split(",")], default=[100])
    p.add_argument("--hold", type=float, default=0.005)
    p.add_argument("--unfair", action="store_true", help="the waiters race (--wait-unfair)")
    p.add_argument("--light", action="store_true",
                   help="the critical section is `flock -n FILE true`, not the shell section")
    p.add_argument("--monitor", action="store_true", help="count commands with MONITOR too")

    p = sub.add_parser("scale")
    p.add_argument("--bin", required=True); p.add_argument("--ports", type=lambda s: [int(x) for x in s.split(",")], required=True)
    p.add_argument("--tmp", required=True); p.add_argument("--out", required=True)
    p.add_argument("--nodes", type=lambda s: [int(x) for x in s.split(",")], default=[1, 3, 5])
    p.add_argument("--contenders", type=lambda s: [int(x) for x in s.split(",")], default=[1, 10, 50, 100])
    p.add_argument("--reps", type=int, default=3); p.add_argument("--hold", type=float, default=1.0)

    p = sub.add_parser("fleet")
    p.add_argument("--fleet", required=True, help="the examples/fleet binary")
    p.add_argument("--ports", type=lambda s: [int(x) for x in s.split(",")], required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--scenarios", type=lambda s: s.split(","), default=["1000x1", "1000x50"])
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--nofile", type=int, default=0, help="ulimit -n it ran with, for the report")

    p = sub.add_parser("redisbench")
    p.add_argument("--port", type=int, required=True); p.add_argument("--out", required=True)
    p.add_argument("--n", type=int, default=200000)

    p = sub.add_parser("proxyrtt")
    p.add_argument("--direct", type=int, required=True); p.add_argument("--proxy", type=int, required=True)
    p.add_argument("--out", required=True); p.add_argument("--n", type=int, default=20)

    p = sub.add_parser("profile")
    p.add_argument("--out", required=True); p.add_argument("--reps", type=int, default=100)
    p.add_argument("commands", nargs="+", metavar="NAME=COMMAND")

    p = sub.add_parser("pool")
    p.add_argument("--out", required=True)
    p.add_argument("files", nargs="+", metavar="ROUND.json")

    a = ap.parse_args()
    if a.cmd == "freeports":
        print(" ".join(map(str, freeports(a.n, a.below))))
    else:
        {"handoff": cmd_handoff, "degraded": cmd_degraded, "memory": cmd_memory, "herd": cmd_herd,
         "scale": cmd_scale, "redisbench": cmd_redisbench, "fleet": cmd_fleet,
         "proxyrtt": cmd_proxyrtt, "profile": cmd_profile, "pool": cmd_pool}[a.cmd](a)


if __name__ == "__main__":
    main()
