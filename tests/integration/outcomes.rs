//! Cron outcomes: `--once-per-success` (only a success uses up a window),
//! `--retry` under the lock, the run history kept on every node (`history`,
//! `status`), and `--metrics-file` read back by a real Prometheus parser.
//!
//! Hosts are played by one machine: test builds take the host name from
//! `REDLOCK_TEST_HOST`. Commands run in the test's temp dir and count their
//! attempts in files there, since each attempt is a new process.

use std::collections::BTreeMap;
use std::fs;
use std::thread;
use std::time::{Duration, Instant};

use crate::cron::{align_to_window, line_count, stamp, unix_now};
use crate::metrics_format::require_prometheus_client;
use crate::support::{
    Cluster, FaultProxy, Mode, RedisCluster, RedisNode, RunOutput, Running, TempDir, Test,
    WAIT_FOR_GO, await_marker, base, free_port, keys, lock_key, proxied_urls, python, tempdir,
    touch, wait_until,
};

const BUSY: i32 = 75;
const LOST: i32 = 76;
const TIMED_OUT: i32 = 124;

/// Shell: count this attempt in the file `n` and set `$n` to its number.
const COUNT: &str = "n=$(cat n 2>/dev/null || echo 0); n=$((n+1)); echo $n > n";

fn attempts(dir: &TempDir) -> u32 {
    fs::read_to_string(dir.join("n"))
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0)
}

// ---------------------------------------------------------------------------
// --once-per-success
// ---------------------------------------------------------------------------

/// A failed run leaves the window open, a timed-out and a killed one too; the
/// first success closes it, on every host.
#[test]
fn once_per_success_only_a_success_uses_up_the_window() {
    let cluster = Cluster::new(3);
    let dir = tempdir();
    let urls = cluster.urls();
    let run = |host: &str, extra: &[&str], cmd: &str| {
        base(&urls, "digest", &dir)
            .env("REDLOCK_TEST_HOST", host)
            .args(["--once-per-success", "1h"])
            .args(extra)
            .args(["-c", &format!("echo {host} >> runs; {cmd}")])
            .run()
    };
    run("web1", &[], "exit 3").assert_code(3);
    run("web2", &["--max-runtime", "300ms"], "sleep 5").assert_code(TIMED_OUT);
    run("web3", &[], "kill -TERM $$").assert_code(128 + libc::SIGTERM);
    assert_eq!(line_count(&dir, "runs"), 3, "every failure ran");
    let window = unix_now().as_secs() / 3600 * 3600;
    let marker = keys("digest").once(window);
    assert!(
        cluster.holders(&marker).is_empty(),
        "a failed run left its marker"
    );
    let ok = run("web1", &[], "true");
    ok.assert_code(0);
    assert_eq!(line_count(&dir, "runs"), 4, "the success ran\n{ok}");
    assert!(cluster.holders(&marker).len() >= 2, "no marker on a quorum");
    let refused = run("web2", &[], "true");
    refused.assert_code(BUSY);
    assert!(
        refused.stderr.contains("already succeeded in this window"),
        "{refused}"
    );
    run("web3", &["-q", "-E", "0"], "true").assert_code(0);
    assert_eq!(
        line_count(&dir, "runs"),
        4,
        "ran after the window's success"
    );
    assert_eq!(
        unix_now().as_secs() / 3600 * 3600,
        window,
        "the hour changed during the test; run it again"
    );
    // --once-per and --once-per-success do not combine.
    let both = Test::new()
        .args(["-r", &urls, "-k", "digest", "--once-per", "1h"])
        .args(["--once-per-success", "1h", "-c", "true"])
        .run();
    both.assert_code(64).assert_one_error_line();
}

/// A run whose lock is lost (a forced unlock) exits 76 and gives its window
/// back; while it still ran, the window's marker kept others out.
#[test]
fn once_per_success_a_lost_lock_frees_the_window() {
    let cluster = Cluster::new(3);
    let dir = tempdir();
    let urls = cluster.urls();
    let running = base(&urls, "lossy", &dir)
        .args(["-t", "1s", "--once-per-success", "1h"])
        .args(["-c", &format!("touch started; {WAIT_FOR_GO}")])
        .spawn();
    await_marker(&dir, "started", &running);
    Test::new()
        .args(["unlock", "-r", &urls, "-k", "lossy", "--force"])
        .expect_code(0);
    let out = running.wait();
    out.assert_code(LOST);
    let window = unix_now().as_secs() / 3600 * 3600;
    assert!(
        cluster.holders(keys("lossy").once(window)).is_empty(),
        "the lost run kept its window\n{out}"
    );
    let next = base(&urls, "lossy", &dir)
        .args(["--once-per-success", "1h", "-c", "touch next"])
        .run();
    next.assert_code(0);
    assert!(dir.has("next"), "{next}");
}

/// Two hosts fire every ~100 ms through three windows of 3 s; in each
/// window the command fails twice and then succeeds. Exactly one success per
/// window, whoever wins each firing.
#[test]
fn once_per_success_racing_hosts_get_one_success_per_window() {
    const WINDOW: u64 = 3;
    const WINDOWS: u64 = 3;
    let cluster = Cluster::new(3);
    let dir = tempdir();
    let urls = cluster.urls();
    // The window by the command's own clock; fail the first two tries in it.
    let cmd = format!(
        "b=$(( $(date +%s) / {WINDOW} )); t=$(cat try.$b 2>/dev/null || echo 0); \
         echo $((t+1)) > try.$b; [ $t -ge 2 ] || exit 1; echo \"$b $HOST\" >> successes"
    );
    let first = align_to_window(
        WINDOW,
        0,
        Duration::from_millis(100),
        Duration::from_millis(400),
    );
    let end = first + WINDOW * WINDOWS;
    let outcomes: Vec<Vec<(i32, u64)>> = thread::scope(|s| {
        let hosts: Vec<_> = ["a", "b"]
            .into_iter()
            .map(|host| {
                let (urls, dir, cmd) = (&urls, &dir, &cmd);
                s.spawn(move || {
                    let mut seen = Vec::new();
                    loop {
                        let now = unix_now();
                        if now.as_secs() >= end {
                            return seen;
                        }
                        // Not near a window's end: the command must run in
                        // the window redlock-run marked.
                        let phase = now.as_millis() % u128::from(WINDOW * 1000);
                        if !(100..2000).contains(&phase) {
                            thread::sleep(Duration::from_millis(20));
                            continue;
                        }
                        let out = base(urls, "race", dir)
                            .env("HOST", host)
                            .env("REDLOCK_TEST_HOST", host)
                            .args(["--once-per-success", &format!("{WINDOW}s"), "-c", cmd])
                            .run();
                        seen.push((out.code.unwrap_or(-1), now.as_secs() / WINDOW));
                        thread::sleep(Duration::from_millis(50));
                    }
                })
            })
            .collect();
        hosts
            .into_iter()
            .map(|h| h.join().expect("host thread"))
            .collect()
    });
    let successes = fs::read_to_string(dir.join("successes")).unwrap_or_default();
    let mut per_window: BTreeMap<u64, Vec<&str>> = BTreeMap::new();
    for line in successes.lines() {
        let (b, host) = line.split_once(' ').expect("bucket host");
        per_window
            .entry(b.parse().expect("bucket"))
            .or_default()
            .push(host);
    }
    let all: Vec<(i32, u64)> = outcomes.iter().flatten().copied().collect();
    eprintln!(
        "{} firings; successes per window: {per_window:?}",
        all.len()
    );
    assert!(
        all.iter().all(|(c, _)| [0, 1, BUSY].contains(c)),
        "unexpected statuses: {all:?}"
    );
    let windows: Vec<u64> = (first / WINDOW..end / WINDOW).collect();
    for w in &windows {
        let wins = per_window.get(w).map_or(0, Vec::len);
        assert_eq!(wins, 1, "window {w}: {wins} successes\n{successes}");
        let tried: u32 = fs::read_to_string(dir.join(format!("try.{w}")))
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(0);
        assert_eq!(tried, 3, "window {w}: two failures, then the success");
    }
    assert_eq!(per_window.len(), windows.len(), "{successes}");
    let zeros = all.iter().filter(|(c, _)| *c == 0).count();
    assert_eq!(zeros, windows.len(), "exit 0 once per window: {all:?}");
}

// ---------------------------------------------------------------------------
// --retry
// ---------------------------------------------------------------------------

/// Fails twice, then succeeds: three attempts, one lock, exit 0; -v says so,
/// the report and the history count them.
#[test]
fn retry_succeeds_on_the_third_attempt() {
    let cluster = Cluster::new(3);
    let dir = tempdir();
    let urls = cluster.urls();
    let report = dir.join("report.json");
    let out = base(&urls, "flaky", &dir)
        .args(["-v", "--retry", "2", "--retry-delay", "100ms"])
        .arg("--report")
        .arg(&report)
        .args(["-c", &format!("{COUNT}; echo attempt $n; [ $n -ge 3 ]")])
        .run();
    out.assert_code(0);
    assert_eq!(attempts(&dir), 3, "{out}");
    assert_eq!(
        out.stdout, "attempt 1\nattempt 2\nattempt 3\n",
        "each attempt writes to redlock-run's stdout\n{out}"
    );
    for (i, line) in [
        "attempt 1 of 3 exited with status 1; retrying in",
        "attempt 2 of 3 exited with status 1; retrying in",
        "attempt 3 of 3: running",
    ]
    .iter()
    .enumerate()
    {
        assert!(out.stderr.contains(line), "line {i} missing\n{out}");
    }
    let tokens = python(
        "import json,sys; r=json.load(sys.stdin); print(r['attempts'], r['outcome'])",
        &fs::read_to_string(&report).expect("report"),
    );
    assert_eq!(tokens.trim(), "3 ok");
    let runs = history_runs(&urls, "flaky");
    assert_eq!(runs.len(), 1, "one run, however many attempts");
    assert_eq!((runs[0].attempts, runs[0].exit_code), (3, 0));
    assert!(cluster.holders(lock_key("flaky")).is_empty());
}

/// Every attempt fails: the exit status is the last one's; a first success
/// is not repeated.
#[test]
fn exhausted_retries_return_the_last_status() {
    let node = RedisNode::start();
    let dir = tempdir();
    let out = base(&node.url(), "doomed", &dir)
        .args(["--retry", "2", "--retry-delay", "50ms"])
        .args(["-c", &format!("{COUNT}; exit $((10 + n))")])
        .run();
    out.assert_code(13);
    assert_eq!(attempts(&dir), 3);
    let _ = fs::remove_file(dir.join("n"));
    base(&node.url(), "doomed", &dir)
        .args(["--retry", "5", "-c", COUNT])
        .expect_code(0);
    assert_eq!(attempts(&dir), 1, "a success is not retried");
}

/// Not retried: a lost lock (76), --max-runtime (124), a command killed by a
/// signal, and a command that exits non-zero after redlock-run passed a
/// signal on to it.
#[test]
fn no_retry_after_a_lost_lock_a_timeout_or_a_signal() {
    let cluster = Cluster::new(3);
    let urls = cluster.urls();

    let dir = tempdir();
    let running = base(&urls, "lost", &dir)
        .args(["-t", "1s", "--retry", "3", "--retry-delay", "50ms"])
        .args([
            "-c",
            &format!("{COUNT}; touch started; {WAIT_FOR_GO}; exit 1"),
        ])
        .spawn();
    await_marker(&dir, "started", &running);
    Test::new()
        .args(["unlock", "-r", &urls, "-k", "lost", "--force"])
        .expect_code(0);
    let out = running.wait();
    out.assert_code(LOST);
    assert_eq!(attempts(&dir), 1, "retried after a lost lock\n{out}");

    let dir = tempdir();
    base(&urls, "slow", &dir)
        .args([
            "--retry",
            "3",
            "--retry-delay",
            "50ms",
            "--max-runtime",
            "300ms",
        ])
        .args(["-c", &format!("{COUNT}; sleep 5")])
        .expect_code(TIMED_OUT);
    assert_eq!(attempts(&dir), 1, "retried after --max-runtime");

    let dir = tempdir();
    base(&urls, "killed", &dir)
        .args(["--retry", "3", "--retry-delay", "50ms"])
        .args(["-c", &format!("{COUNT}; kill -KILL $$")])
        .expect_code(128 + libc::SIGKILL);
    assert_eq!(attempts(&dir), 1, "retried a command killed by a signal");

    let dir = tempdir();
    let running = base(&urls, "stopped", &dir)
        .args(["--retry", "3", "--retry-delay", "50ms"])
        .args([
            "-c",
            &format!("trap 'exit 1' TERM; {COUNT}; touch started; {WAIT_FOR_GO}"),
        ])
        .spawn();
    await_marker(&dir, "started", &running);
    running.signal(libc::SIGTERM);
    let out = running.wait();
    out.assert_code(1);
    assert_eq!(attempts(&dir), 1, "retried after SIGTERM\n{out}");
}

/// Between attempts the lock stays held, by the heartbeat: a pause three
/// times the TTL long, and contenders during it find the lock busy.
#[test]
fn the_lock_is_held_between_attempts() {
    let cluster = Cluster::new(3);
    let dir = tempdir();
    let urls = cluster.urls();
    let key = lock_key("held");
    let ours = |token: &[u8]| {
        cluster
            .values(&key)
            .iter()
            .filter(|v| v.as_deref() == Some(token))
            .count()
    };
    let running = base(&urls, "held", &dir)
        .args(["-t", "1s", "--retry", "1", "--retry-delay", "6s"])
        .args([
            "-c",
            &format!("{COUNT}; if [ $n -eq 1 ]; then touch failed; exit 1; fi; touch second"),
        ])
        .spawn();
    await_marker(&dir, "failed", &running);
    let failed_at = Instant::now();
    let token = cluster
        .values(&key)
        .into_iter()
        .flatten()
        .next()
        .expect("held during the pause");
    // Through the pause (3-6 s from the failure): past the TTL several
    // times over. What one round saw counts only if the round ended within
    // 2.9 s of the failure, so that a contender or check slowed down by a
    // loaded machine cannot land after the pause and fail the test.
    let mut tries = 0;
    while failed_at.elapsed() < Duration::from_millis(2500) {
        let out = base(&urls, "held", &dir)
            .args(["-c", "touch contender"])
            .run();
        let on_quorum = ours(&token);
        let second = dir.has("second");
        if failed_at.elapsed() >= Duration::from_millis(2900) {
            break;
        }
        out.assert_code(BUSY);
        tries += 1;
        assert!(
            on_quorum >= 2,
            "our token is not on a quorum during the pause"
        );
        assert!(!second, "the retry came before the pause ended");
        thread::sleep(Duration::from_millis(250));
    }
    let out = running.wait();
    out.assert_code(0);
    assert!(dir.has("second"), "{out}");
    assert!(tries >= 5, "only {tries} contenders tried");
    assert!(cluster.holders(&key).is_empty(), "not released");
}

/// A SIGTERM during the pause ends the run at once with 143, releasing the
/// lock, and the command is not run again.
#[test]
fn a_signal_during_the_retry_pause_ends_the_run_promptly() {
    let cluster = Cluster::new(3);
    let dir = tempdir();
    let urls = cluster.urls();
    let running = base(&urls, "pause", &dir)
        .args(["--retry", "1", "--retry-delay", "20s"])
        .args(["-c", &format!("{COUNT}; touch failed; exit 1")])
        .spawn();
    await_marker(&dir, "failed", &running);
    thread::sleep(Duration::from_millis(200));
    let sent = Instant::now();
    running.signal(libc::SIGTERM);
    let out = running.wait();
    let took = sent.elapsed();
    eprintln!("SIGTERM during the retry pause: exited after {took:?}");
    out.assert_code(128 + libc::SIGTERM);
    assert!(took < Duration::from_secs(2), "took {took:?}\n{out}");
    assert_eq!(attempts(&dir), 1);
    assert!(
        cluster.holders(lock_key("pause")).is_empty(),
        "not released"
    );
    let runs = history_runs(&urls, "pause");
    assert_eq!(
        (
            runs[0].outcome.as_str(),
            runs[0].exit_code,
            runs[0].attempts
        ),
        ("signal", 143, 1)
    );
}

/// Each attempt is a fresh tree, started only once the previous one's tree
/// is gone: what attempt 1 left behind keeps attempt 2 waiting
/// (--leftovers wait) or is stopped (--leftovers kill).
#[test]
fn each_attempt_starts_after_the_last_ones_tree_is_gone() {
    let node = RedisNode::start();
    let cmd = format!(
        "{COUNT}; date +%s%N > start.$n; \
         if [ $n -eq 1 ]; then (sleep 1; date +%s%N > left.end) & exit 1; fi"
    );
    let dir = tempdir();
    base(&node.url(), "tree", &dir)
        .args(["--retry", "1", "--retry-delay", "50ms", "-c", &cmd])
        .expect_code(0);
    assert!(
        wait_until(Duration::from_secs(3), || dir.has("left.end")),
        "attempt 1's background job never ended"
    );
    let gap = stamp(&dir, "start.2")
        .checked_sub(stamp(&dir, "left.end"))
        .unwrap_or_else(|| panic!("attempt 2 started while attempt 1's background job ran"));
    eprintln!("attempt 2 started {gap:?} after attempt 1's leftover ended");

    let dir = tempdir();
    let out = base(&node.url(), "tree", &dir)
        .args([
            "--retry",
            "1",
            "--retry-delay",
            "50ms",
            "--leftovers",
            "kill",
        ])
        .args(["-c", &cmd])
        .run();
    out.assert_code(0);
    assert_eq!(attempts(&dir), 2);
    thread::sleep(Duration::from_millis(1300));
    assert!(
        !dir.has("left.end"),
        "--leftovers kill left it running\n{out}"
    );
}

// ---------------------------------------------------------------------------
// history
// ---------------------------------------------------------------------------

/// One record of `history --json`.
#[derive(Debug, Clone, PartialEq)]
struct HistoryRun {
    id: String,
    host: String,
    pid: u32,
    started_at: String,
    duration_ms: u64,
    outcome: String,
    exit_code: u8,
    attempts: u32,
    fencing_token: Option<u64>,
}

/// Checks `history --json` output with python's JSON parser: an array of
/// objects with every field named in the issue, numbers as numbers.
const HISTORY_FIELDS: &str = r#"
import json, sys
runs = json.load(sys.stdin)
if not isinstance(runs, list):
    sys.exit("not an array")
need = ["id", "host", "pid", "started_at", "duration_ms", "outcome", "exit_code", "attempts",
        "fencing_token"]
for r in runs:
    missing = [k for k in need if k not in r]
    if missing:
        sys.exit(f"fields {missing} missing in {r}")
    for k in ["pid", "duration_ms", "exit_code", "attempts"]:
        if type(r[k]) is not int:
            sys.exit(f"{k} is not an integer in {r}")
    if r["fencing_token"] is not None and type(r["fencing_token"]) is not int:
        sys.exit(f"fencing_token is neither null nor an integer in {r}")
    print("\t".join("" if r[k] is None else str(r[k]) for k in need))
"#;

fn parse_history(json: &str) -> Vec<HistoryRun> {
    python(HISTORY_FIELDS, json)
        .lines()
        .map(|l| {
            let f: Vec<&str> = l.split('\t').collect();
            HistoryRun {
                id: f[0].into(),
                host: f[1].into(),
                pid: f[2].parse().expect("pid"),
                started_at: f[3].into(),
                duration_ms: f[4].parse().expect("duration_ms"),
                outcome: f[5].into(),
                exit_code: f[6].parse().expect("exit_code"),
                attempts: f[7].parse().expect("attempts"),
                fencing_token: (!f[8].is_empty()).then(|| f[8].parse().expect("fence")),
            }
        })
        .collect()
}

fn history(urls: &str, name: &str, extra: &[&str]) -> RunOutput {
    Test::new()
        .args(["history", "-r", urls, "-k", name])
        .args(extra)
        .run()
}

fn history_runs(urls: &str, name: &str) -> Vec<HistoryRun> {
    let out = history(urls, name, &["--json"]);
    out.assert_code(0);
    parse_history(&out.stdout)
}

/// Runs from three "hosts", one with --fence and one with retries: newest
/// first, each once (every node holds every record), with its fields; the
/// text table, -n, and what status says of the last one.
#[test]
fn history_merges_the_runs_of_several_hosts_newest_first() {
    let cluster = Cluster::new(3);
    let dir = tempdir();
    let urls = cluster.urls();
    let mut pids = Vec::new();
    for (host, extra, cmd) in [
        ("web1", &[][..], "true"),
        ("web2", &[][..], "sleep 0.2; exit 3"),
        ("web3", &["--fence"][..], "true"),
        (
            "web1",
            &["--retry", "1", "--retry-delay", "50ms"][..],
            "exit 1",
        ),
    ] {
        let running = base(&urls, "nightly", &dir)
            .env("REDLOCK_TEST_HOST", host)
            .args(extra)
            .args(["-c", cmd])
            .spawn();
        pids.push(running.pid() as u32);
        let _ = running.wait();
        // Distinct start times to the millisecond.
        thread::sleep(Duration::from_millis(5));
    }
    let out = history(&urls, "nightly", &["--json"]);
    out.assert_code(0);
    eprintln!("history --json over 3 nodes took {:?}", out.elapsed);
    let runs = parse_history(&out.stdout);
    let hosts: Vec<&str> = runs.iter().map(|r| r.host.as_str()).collect();
    assert_eq!(hosts, ["web1", "web3", "web2", "web1"], "{}", out.stdout);
    let got: Vec<u32> = runs.iter().map(|r| r.pid).collect();
    let mut want = pids.clone();
    want.reverse();
    assert_eq!(got, want);
    let mut sorted: Vec<&str> = runs.iter().map(|r| r.started_at.as_str()).collect();
    sorted.sort();
    sorted.reverse();
    assert_eq!(
        sorted,
        runs.iter()
            .map(|r| r.started_at.as_str())
            .collect::<Vec<_>>()
    );
    let summary: Vec<(&str, u8, u32)> = runs
        .iter()
        .map(|r| (r.outcome.as_str(), r.exit_code, r.attempts))
        .collect();
    assert_eq!(
        summary,
        [
            ("failed", 1, 2),
            ("ok", 0, 1),
            ("failed", 3, 1),
            ("ok", 0, 1)
        ]
    );
    assert!(runs[2].duration_ms >= 200, "{:?}", runs[2]);
    assert!(runs[1].fencing_token.is_some_and(|t| t >= 1));
    assert!(
        runs.iter()
            .enumerate()
            .all(|(i, r)| (i == 1) == r.fencing_token.is_some())
    );
    assert!(
        runs.iter()
            .all(|r| crate::support::is_token(r.id.as_bytes()))
    );
    assert!(runs[0].started_at.ends_with('Z') && runs[0].started_at.len() == 24);

    let text = history(&urls, "nightly", &["-n", "2"]);
    text.assert_code(0);
    let lines: Vec<&str> = text.stdout.lines().collect();
    assert_eq!(lines.len(), 3, "heading and 2 runs\n{text}");
    assert!(
        lines[0].starts_with("STARTED") && lines[0].contains("HOST"),
        "{text}"
    );
    assert!(
        lines[1].contains("web1") && lines[1].contains("failed"),
        "{text}"
    );
    assert!(
        lines[2].contains("web3") && lines[2].contains(" ok "),
        "{text}"
    );
    let one = parse_history(&history(&urls, "nightly", &["--json", "-n", "1"]).stdout);
    assert_eq!(one, runs[..1]);

    let status = Test::new()
        .args(["status", "-r", &urls, "-k", "nightly"])
        .expect_code(0);
    assert!(
        status
            .stdout
            .lines()
            .last()
            .is_some_and(|l| l.starts_with(&format!(
                "last run: failed (exit 1) on web1 pid {}, started {}",
                runs[0].pid, runs[0].started_at
            )) && l.ends_with(", 2 attempts")),
        "{status}"
    );
    let json = Test::new()
        .args(["status", "-r", &urls, "-k", "nightly", "--json"])
        .expect_code(0);
    let last = python(
        "import json,sys; r=json.load(sys.stdin)['last_run']; print(r['id'], r['host'], r['attempts'])",
        &json.stdout,
    );
    assert_eq!(last.trim(), format!("{} web1 2", runs[0].id));
    let none = Test::new()
        .args(["status", "-r", &urls, "-k", "never", "--json"])
        .expect_code(0);
    python(
        "import json,sys; assert json.load(sys.stdin)['last_run'] is None",
        &none.stdout,
    );
    let empty = history(&urls, "never", &[]);
    empty.assert_code(0);
    assert_eq!(empty.stdout, "no runs of lock 'never' recorded\n");
}

/// A Redis Cluster as the one node, each master with a replica and
/// --replicas 1: the record goes out with the release and with a hold (one
/// script each, in the lock's slot, acknowledged by the replica), and
/// `history` and `status` read it back from the slot's master.
#[test]
fn history_on_a_cluster_is_written_and_read_back() {
    let cluster = RedisCluster::builder().replicas(1).start();
    let url = cluster.url();
    let dir = tempdir();
    for (host, extra, cmd) in [
        ("web1", &[][..], "true"),
        ("web2", &["--fence"][..], "exit 3"),
        ("web3", &["--hold", "30s"][..], "true"),
    ] {
        let code = if cmd == "exit 3" { 3 } else { 0 };
        base(&url, "clustered", &dir)
            .env("REDLOCK_TEST_HOST", host)
            .args(["-v", "--replicas", "1"])
            .args(extra)
            .args(["-c", cmd])
            .expect_code(code);
        thread::sleep(Duration::from_millis(5));
    }
    let k = keys("clustered");
    let slot = cluster.keyslot(k.lock());
    assert_eq!(
        cluster.keyslot(&k.history()),
        slot,
        "history outside the lock's slot"
    );
    let len: i64 = cluster.key_cmd(&k.history(), redis::cmd("LLEN").arg(k.history()));
    assert_eq!(len, 3, "records on the slot's master");
    let master = cluster.master_for_slot(slot);
    for r in cluster.replicas_of(master) {
        let mut conn = cluster.node(r).connection().expect("replica connection");
        let (_, n): (String, i64) = redis::pipe()
            .cmd("READONLY")
            .cmd("LLEN")
            .arg(k.history())
            .query(&mut conn)
            .expect("LLEN on the replica");
        assert_eq!(n, 3, "records on replica {r}");
    }

    let runs = history_runs(&url, "clustered");
    let summary: Vec<(&str, &str, u8)> = runs
        .iter()
        .map(|r| (r.host.as_str(), r.outcome.as_str(), r.exit_code))
        .collect();
    assert_eq!(
        summary,
        [("web3", "ok", 0), ("web2", "failed", 3), ("web1", "ok", 0)]
    );
    assert!(runs[1].fencing_token.is_some_and(|t| t >= 1));
    let status = Test::new()
        .args(["status", "-r", &url, "-k", "clustered"])
        .expect_code(1);
    assert!(
        status
            .stdout
            .lines()
            .last()
            .is_some_and(|l| l.starts_with("last run: ok (exit 0) on web3")),
        "{status}"
    );
}

/// Each node misses some runs (its connections reset while they ran), none
/// misses all; any quorum of nodes still gives the whole history, and fewer
/// say that runs may be missing.
#[test]
fn history_is_complete_from_any_quorum_though_nodes_were_down() {
    let cluster = Cluster::new(3);
    let proxies: Vec<FaultProxy> = cluster.iter().map(|n| FaultProxy::new(n.port())).collect();
    let urls = proxied_urls(&proxies);
    let dir = tempdir();
    let run = |n: usize, down: Option<usize>| {
        for (i, p) in proxies.iter().enumerate() {
            p.set_mode(if Some(i) == down {
                Mode::Reset
            } else {
                Mode::Pass
            });
        }
        let out = base(&urls, "patchy", &dir)
            .env("REDLOCK_TEST_HOST", format!("host{n}"))
            .args(["-c", "true"])
            .run();
        out.assert_code(0);
        thread::sleep(Duration::from_millis(3));
    };
    // Node 0 misses runs 2-3, node 2 runs 4-5, node 1 run 6.
    for (n, down) in [
        (1, None),
        (2, Some(0)),
        (3, Some(0)),
        (4, Some(2)),
        (5, Some(2)),
        (6, Some(1)),
    ] {
        run(n, down);
    }
    let lens: Vec<usize> = cluster
        .iter()
        .map(|n| n.cmd::<usize>(redis::cmd("LLEN").arg(keys("patchy").history())))
        .collect();
    assert_eq!(lens, [4, 5, 4], "what each node recorded");
    let want: Vec<String> = (1..=6).rev().map(|n| format!("host{n}")).collect();
    for down in [None, Some(0), Some(1), Some(2)] {
        for (i, p) in proxies.iter().enumerate() {
            p.set_mode(if Some(i) == down {
                Mode::Reset
            } else {
                Mode::Pass
            });
        }
        let out = history(&urls, "patchy", &["--json"]);
        out.assert_code(0);
        eprintln!("history with node {down:?} down: {:?}", out.elapsed);
        let hosts: Vec<String> = parse_history(&out.stdout)
            .into_iter()
            .map(|r| r.host)
            .collect();
        assert_eq!(hosts, want, "node {down:?} down\n{out}");
        assert_eq!(
            out.stderr.lines().count(),
            usize::from(down.is_some()),
            "one warning per unreachable node\n{out}"
        );
    }
    proxies[0].set_mode(Mode::Reset);
    proxies[1].set_mode(Mode::Reset);
    proxies[2].set_mode(Mode::Pass);
    let out = history(&urls, "patchy", &[]);
    out.assert_code(69);
    assert!(
        out.stderr.contains("only 1 of 3 nodes answered (quorum 2)"),
        "{out}"
    );
    assert!(
        out.stdout.contains("host6"),
        "what one node has is shown\n{out}"
    );
}

/// The list keeps the newest 100 runs and expires weeks after the last one.
#[test]
fn the_history_keeps_the_newest_hundred_runs() {
    let node = RedisNode::start();
    let dir = tempdir();
    let key = keys("capped").history();
    // 100 older runs, as an earlier redlock-run wrote them.
    for i in 0..100 {
        let record = format!(
            "{{\"id\":\"old-{i:03}\",\"host\":\"old\",\"pid\":1,\"user\":\"u\",\
             \"started_at\":\"2020-01-01T00:00:{:02}.{:03}Z\",\"duration_ms\":1,\
             \"outcome\":\"ok\",\"exit_code\":0,\"attempts\":1,\"fencing_token\":null}}",
            i / 10,
            i % 1000
        );
        let _: i64 = node.cmd(redis::cmd("LPUSH").arg(&key).arg(record));
    }
    for _ in 0..5 {
        base(&node.url(), "capped", &dir)
            .args(["-c", "true"])
            .expect_code(0);
    }
    let len: usize = node.cmd(redis::cmd("LLEN").arg(&key));
    assert_eq!(len, 100);
    let oldest: Vec<String> = node.cmd(redis::cmd("LRANGE").arg(&key).arg(-1).arg(-1));
    assert!(oldest[0].contains("old-005"), "{oldest:?}");
    let pttl = node.pttl(&key);
    let day = 24 * 3600 * 1000;
    assert!((34 * day..=35 * day).contains(&pttl), "PTTL {pttl}");
    let runs = parse_history(&history(&node.url(), "capped", &["--json", "-n", "1000"]).stdout);
    assert_eq!(runs.len(), 100);
    assert!(runs[..5].iter().all(|r| r.host != "old"));
    assert_eq!(runs[99].id, "old-005");
}

/// With --hold the record goes out with the hold (in its script), and the
/// lock is kept as before: status says both.
#[test]
fn a_held_run_is_recorded_and_keeps_its_lock() {
    let cluster = Cluster::new(3);
    let dir = tempdir();
    let urls = cluster.urls();
    base(&urls, "kept", &dir)
        .env("REDLOCK_TEST_HOST", "web7")
        .args(["--hold", "5s", "-c", "exit 4"])
        .expect_code(4);
    let key = lock_key("kept");
    assert_eq!(cluster.holders(&key).len(), 3, "--hold let go of the lock");
    assert!(
        cluster
            .iter()
            .all(|n| (3000..=5000).contains(&n.pttl(&key)))
    );
    let runs = history_runs(&urls, "kept");
    assert_eq!(runs.len(), 1);
    assert_eq!((runs[0].host.as_str(), runs[0].exit_code), ("web7", 4));
    let status = Test::new()
        .args(["status", "-r", &urls, "-k", "kept"])
        .expect_code(1);
    let lines: Vec<&str> = status.stdout.lines().collect();
    assert!(
        lines[lines.len() - 2].contains("its command exited (status 4)"),
        "{status}"
    );
    assert!(
        lines[lines.len() - 1].starts_with("last run: failed (exit 4) on web7"),
        "{status}"
    );
}

/// Busy attempts and skipped windows are not runs: not recorded.
#[test]
fn busy_and_skipped_attempts_are_not_recorded() {
    let node = RedisNode::start();
    let dir = tempdir();
    let url = node.url();
    let holder = base(&url, "quiet", &dir)
        .args([
            "--once-per",
            "1h",
            "-c",
            &format!("touch held; {WAIT_FOR_GO}"),
        ])
        .spawn();
    await_marker(&dir, "held", &holder);
    for _ in 0..3 {
        base(&url, "quiet", &dir)
            .args(["-c", "true"])
            .expect_code(BUSY);
    }
    touch(&dir, "go");
    holder.wait().assert_code(0);
    base(&url, "quiet", &dir)
        .args(["--once-per", "1h", "-c", "true"])
        .expect_code(BUSY);
    let runs = history_runs(&url, "quiet");
    assert_eq!(runs.len(), 1, "{runs:?}");
}

/// A node that does not answer (stopped) holds the end of a run up by no
/// more than it would hold up the release; the others record the run.
#[test]
fn a_stopped_node_does_not_hold_up_the_record() {
    let cluster = Cluster::new(3);
    let dir = tempdir();
    let urls = cluster.urls();
    let running = base(&urls, "frozen", &dir)
        .args(["-t", "2s", "-c", &format!("touch held; {WAIT_FOR_GO}")])
        .spawn();
    await_marker(&dir, "held", &running);
    cluster[2].stop();
    touch(&dir, "go");
    let go = Instant::now();
    let out = running.wait();
    let took = go.elapsed();
    cluster[2].cont();
    out.assert_code(0);
    // The command notices `go` within 50 ms; --node-timeout for a 2 s TTL is
    // 100 ms, and nothing waits for the stopped node even that long.
    eprintln!("a run with a stopped node ended {took:?} after go");
    assert!(took < Duration::from_secs(1), "{took:?}\n{out}");
    let runs = history_runs(&urls, "frozen");
    assert_eq!(runs.len(), 1);
}

// ---------------------------------------------------------------------------
// --metrics-file
// ---------------------------------------------------------------------------

/// The file as prometheus_client reads it: family types, and every sample
/// by name and labels (sorted, `k=v,k=v`).
#[derive(Debug, Default)]
struct Metrics {
    types: BTreeMap<String, String>,
    samples: BTreeMap<(String, String), f64>,
}

impl Metrics {
    fn get(&self, name: &str, labels: &str) -> Option<f64> {
        self.samples
            .get(&(name.to_string(), labels.to_string()))
            .copied()
    }

    fn runs(&self, key: &str, outcome: &str) -> f64 {
        self.get(
            "redlock_run_runs_total",
            &format!("key={key},outcome={outcome}"),
        )
        .unwrap_or_else(|| panic!("no runs_total for {key} {outcome}: {self:?}"))
    }
}

const PARSE_METRICS: &str = r#"
import sys
from prometheus_client.parser import text_string_to_metric_families
for f in text_string_to_metric_families(sys.stdin.read()):
    print("TYPE", f.name, f.type, sep="\t")
    for s in f.samples:
        labels = ",".join(f"{k}={v}" for k, v in sorted(s.labels.items()))
        print("SAMPLE", s.name, labels, repr(s.value), sep="\t")
"#;

fn read_metrics(path: &std::path::Path) -> Metrics {
    require_prometheus_client();
    let text = fs::read_to_string(path).expect("metrics file");
    let mut m = Metrics::default();
    for line in python(PARSE_METRICS, &text).lines() {
        let f: Vec<&str> = line.split('\t').collect();
        match f[0] {
            "TYPE" => {
                m.types.insert(f[1].into(), f[2].into());
            }
            _ => {
                m.samples
                    .insert((f[1].into(), f[2].into()), f[3].parse().expect("value"));
            }
        }
    }
    m
}

/// Every outcome counted, for two keys sharing one file; gauges from the
/// runs that started their command only; a key that never succeeded has no
/// last-success series.
#[test]
fn the_metrics_file_counts_every_outcome_for_two_keys() {
    let cluster = Cluster::new(3);
    let dir = tempdir();
    let urls = cluster.urls();
    let path = dir.join("cron.prom");
    let run = |name: &str, urls: &str, extra: &[&str]| {
        base(urls, name, &dir)
            .arg("--metrics-file")
            .arg(&path)
            .args(extra)
            .run()
    };
    run("report", &urls, &["-c", "true"]).assert_code(0);
    run("report", &urls, &["--once-per", "1h", "-c", "true"]).assert_code(0);
    let success = unix_now().as_secs_f64();
    run("report", &urls, &["--once-per", "1h", "-c", "true"]).assert_code(BUSY);
    let holder = base(&urls, "report", &dir)
        .arg("--metrics-file")
        .arg(&path)
        .args(["-t", "1s", "-c", &format!("touch held; {WAIT_FOR_GO}")])
        .spawn();
    await_marker(&dir, "held", &holder);
    run("report", &urls, &["-c", "true"]).assert_code(BUSY);
    Test::new()
        .args(["unlock", "-r", &urls, "-k", "report", "--force"])
        .expect_code(0);
    holder.wait().assert_code(LOST);
    run(
        "report",
        &urls,
        &["--max-runtime", "200ms", "-c", "sleep 5"],
    )
    .assert_code(TIMED_OUT);
    let before = unix_now().as_secs_f64();
    run("report", &urls, &["-c", "sleep 0.3; exit 3"]).assert_code(3);
    let dead = format!("redis://127.0.0.1:{}", free_port());
    run("other", &dead, &["-c", "true"]).assert_code(69);
    run("other", &dead, &["-c", "true"]).assert_code(69);

    let m = read_metrics(&path);
    for (family, kind) in [
        ("redlock_run_degraded_runs", "counter"),
        ("redlock_run_last_duration_seconds", "gauge"),
        ("redlock_run_last_exit_code", "gauge"),
        ("redlock_run_last_nodes_answered", "gauge"),
        ("redlock_run_last_nodes_failed", "gauge"),
        ("redlock_run_last_start_timestamp_seconds", "gauge"),
        ("redlock_run_last_success_timestamp_seconds", "gauge"),
        ("redlock_run_runs", "counter"),
    ] {
        assert_eq!(m.types.get(family).map(String::as_str), Some(kind), "{m:?}");
    }
    for (outcome, n) in [
        ("ok", 2.0),
        ("failed", 1.0),
        ("signal", 0.0),
        ("not-run", 0.0),
        ("busy", 1.0),
        ("already-ran", 1.0),
        ("lost", 1.0),
        ("timeout", 1.0),
        ("unavailable", 0.0),
    ] {
        assert_eq!(m.runs("report", outcome), n, "report {outcome}");
    }
    for (outcome, n) in [("unavailable", 2.0), ("ok", 0.0), ("busy", 0.0)] {
        assert_eq!(m.runs("other", outcome), n, "other {outcome}");
    }
    let k = "key=report";
    // Every node answered every run of report; other's one node never did.
    for (key, answered, failed, degraded) in [("report", 3.0, 0.0, 0.0), ("other", 0.0, 1.0, 2.0)] {
        let labels = format!("key={key}");
        assert_eq!(
            m.get("redlock_run_last_nodes_answered", &labels),
            Some(answered),
            "{key}"
        );
        assert_eq!(
            m.get("redlock_run_last_nodes_failed", &labels),
            Some(failed),
            "{key}"
        );
        assert_eq!(
            m.get("redlock_run_degraded_runs_total", &labels),
            Some(degraded),
            "{key}"
        );
    }
    assert_eq!(m.get("redlock_run_last_exit_code", k), Some(3.0));
    let start = m
        .get("redlock_run_last_start_timestamp_seconds", k)
        .expect("start");
    assert!(
        (before - 1.0..before + 5.0).contains(&start),
        "{start} vs {before}"
    );
    let took = m
        .get("redlock_run_last_duration_seconds", k)
        .expect("duration");
    assert!((0.3..10.0).contains(&took), "{took}");
    let ok = m
        .get("redlock_run_last_success_timestamp_seconds", k)
        .expect("success");
    assert!(
        (success - 5.0..success + 1.0).contains(&ok),
        "{ok} vs {success}"
    );
    assert_eq!(m.get("redlock_run_last_exit_code", "key=other"), None);
    assert_eq!(
        m.get("redlock_run_last_success_timestamp_seconds", "key=other"),
        None
    );
}

/// 20 runs at once, one holder and 19 busy ones finishing together, twice:
/// every increment is in the file, and only the holders moved the gauges.
#[test]
fn concurrent_runs_lose_no_increment() {
    let node = RedisNode::start();
    let dir = tempdir();
    let url = node.url();
    let path = dir.join("cron.prom");
    for (round, code) in [(1.0, 7), (2.0, 0)] {
        let _ = fs::remove_file(dir.join("go"));
        let _ = fs::remove_file(dir.join("held"));
        let holder = base(&url, "crowd", &dir)
            .arg("--metrics-file")
            .arg(&path)
            .args(["-c", &format!("touch held; {WAIT_FOR_GO}; exit {code}")])
            .spawn();
        await_marker(&dir, "held", &holder);
        let started = Instant::now();
        let busy: Vec<Running> = (0..19)
            .map(|_| {
                base(&url, "crowd", &dir)
                    .arg("--metrics-file")
                    .arg(&path)
                    .args(["-c", "true"])
                    .spawn()
            })
            .collect();
        for b in busy {
            b.wait().assert_code(BUSY);
        }
        eprintln!(
            "round {round}: 19 busy runs wrote the file in {:?}",
            started.elapsed()
        );
        touch(&dir, "go");
        holder.wait().assert_code(code);
        let m = read_metrics(&path);
        assert_eq!(m.runs("crowd", "busy"), 19.0 * round, "{m:?}");
        assert_eq!(
            m.runs("crowd", if code == 0 { "ok" } else { "failed" }),
            1.0
        );
        assert_eq!(
            m.get("redlock_run_last_exit_code", "key=crowd"),
            Some(f64::from(code))
        );
        assert_eq!(
            m.get("redlock_run_last_success_timestamp_seconds", "key=crowd")
                .is_some(),
            code == 0
        );
    }
}

/// A path that cannot be written is refused before the lock is taken; a
/// write that fails afterwards is a warning and changes no exit status.
#[test]
fn metrics_file_problems() {
    let node = RedisNode::start();
    let dir = tempdir();
    let out = base(&node.url(), "m", &dir)
        .args([
            "--metrics-file",
            "/nonexistent/dir/cron.prom",
            "-c",
            "touch ran",
        ])
        .run();
    out.assert_code(64).assert_one_error_line();
    assert!(
        out.stderr
            .contains("--metrics-file /nonexistent/dir/cron.prom"),
        "{out}"
    );
    assert!(!dir.has("ran") && node.all_keys().is_empty(), "{out}");
    // The command puts a directory where the file goes.
    let out = base(&node.url(), "m", &dir)
        .args([
            "--metrics-file",
            "cron.prom",
            "-c",
            "mkdir cron.prom; exit 5",
        ])
        .run();
    out.assert_code(5).assert_one_error_line();
    assert!(
        out.stderr
            .starts_with("redlock-run: warning: cannot write --metrics-file"),
        "{out}"
    );
}

/// A `--report` that cannot be written after the run (its file system
/// full: a 16 KiB tmpfs, filled first, in a mount namespace of the run's
/// own) is a warning, like the metrics file's, and the exit status stays the
/// command's.
#[test]
fn a_report_on_a_full_disk_is_a_warning() {
    let node = RedisNode::start();
    let dir = tempdir();
    let full = dir.join("full");
    fs::create_dir(&full).expect("dir");
    // SAFETY: geteuid cannot fail.
    let root = unsafe { libc::geteuid() } == 0;
    let mut unshare = vec!["unshare", "--mount"];
    if !root {
        // A user namespace of its own lets anyone mount a tmpfs.
        unshare.push("--map-root-user");
    }
    let script = r#"mount -t tmpfs -o size=16k tmpfs "$FULL" || exit 99
head -c 1M /dev/zero > "$FULL/fill" 2>/dev/null
exec "$0" "$@""#;
    let out = base(&node.url(), "full", &dir)
        .wrapped_in(unshare.into_iter().chain(["sh", "-c", script]))
        .env("FULL", &full)
        .arg("--report")
        .arg(full.join("report.json"))
        .args(["-c", "touch ran"])
        .run();
    out.assert_code(0).assert_one_error_line();
    assert!(
        out.stderr.starts_with(&format!(
            "redlock-run: warning: cannot write --report {}/report.json: ",
            full.display()
        )),
        "{out}"
    );
    assert!(dir.has("ran"), "{out}");
    assert!(node.keys().is_empty(), "keys left: {:?}", node.keys());
}

// ---------------------------------------------------------------------------
// Node health in --metrics-file
// ---------------------------------------------------------------------------

/// A key's node gauges and degraded-runs counter: (answered, failed, degraded).
fn node_health(m: &Metrics, key: &str) -> (f64, f64, f64) {
    let labels = format!("key={key}");
    let get = |family: &str| {
        m.get(family, &labels)
            .unwrap_or_else(|| panic!("no {family} for {key}: {m:?}"))
    };
    (
        get("redlock_run_last_nodes_answered"),
        get("redlock_run_last_nodes_failed"),
        get("redlock_run_degraded_runs_total"),
    )
}

/// Three nodes, one of them stopped for a run longer than the node timeout:
/// the metrics say 2 answered, 1 failed, and count a degraded run, though
/// `-q` printed nothing; the same node the warning names without `-q`. Once
/// it is back the next run says 3 and 0, and the counter stays. Busy runs,
/// which on most hosts of a fleet are every run, move the gauges too; one
/// that ends before the stopped node's timeout does not count it failed.
#[test]
fn node_health_is_in_the_metrics_for_every_run_that_reached_the_nodes() {
    let cluster = Cluster::new(3);
    let dir = tempdir();
    let urls = cluster.urls();
    let path = dir.join("cron.prom");
    let run = |extra: &[&str]| {
        base(&urls, "health", &dir)
            .args(["--node-timeout", "200ms", "--metrics-file"])
            .arg(&path)
            .args(extra)
            .run()
    };
    let quiet = |extra: &[&str], code: i32| {
        let out = run(&[&["-q"], extra].concat());
        out.assert_code(code);
        assert!(out.stderr.is_empty(), "-q printed something\n{out}");
        read_metrics(&path)
    };

    let m = quiet(&["-c", "true"], 0);
    assert_eq!(node_health(&m, "health"), (3.0, 0.0, 0.0));

    // Runs longer than the node timeout: a node shorter runs end before
    // has had no time to fail.
    cluster[2].stop();
    let m = quiet(&["-c", "touch ran; sleep 0.3"], 0);
    cluster[2].cont();
    assert!(dir.has("ran"));
    assert_eq!(node_health(&m, "health"), (2.0, 1.0, 1.0));

    // Without -q the run says which node; the metrics count that one.
    cluster[2].stop();
    let out = run(&["-c", "sleep 0.3"]);
    cluster[2].cont();
    out.assert_code(0);
    let warnings: Vec<&str> = out
        .stderr_lines()
        .into_iter()
        .filter(|l| l.contains("warning:"))
        .collect();
    assert!(
        warnings.len() == 1 && warnings[0].contains(&cluster[2].url()),
        "{out}"
    );
    assert_eq!(node_health(&read_metrics(&path), "health"), (2.0, 1.0, 2.0));

    let m = quiet(&["-c", "true"], 0);
    assert_eq!(node_health(&m, "health"), (3.0, 0.0, 2.0), "back to health");

    // Busy runs, beside a holder that writes no metrics of its own.
    let holder = base(&urls, "health", &dir)
        .args(["-q", "-c", &format!("touch held; {WAIT_FOR_GO}")])
        .spawn();
    await_marker(&dir, "held", &holder);
    // A busy run ends the moment two nodes refused: a stopped third node
    // had no time to fail, nor has a third that answers a moment after.
    cluster[2].stop();
    let m = quiet(&["-c", "touch busy"], BUSY);
    cluster[2].cont();
    assert_eq!(node_health(&m, "health"), (3.0, 0.0, 2.0), "a busy run");
    let m = quiet(&["-c", "touch busy"], BUSY);
    assert_eq!(node_health(&m, "health"), (3.0, 0.0, 2.0), "a busy run");
    let busy = 2.0;
    touch(&dir, "go");
    holder.wait().assert_code(0);
    assert!(!dir.has("busy"));
    assert_eq!(m.runs("health", "ok"), 4.0);
    assert_eq!(m.runs("health", "busy"), busy);
    // The file as a whole still reads as Prometheus text, with the new
    // families typed.
    assert_eq!(
        m.types
            .get("redlock_run_last_nodes_failed")
            .map(String::as_str),
        Some("gauge")
    );
    assert_eq!(
        m.types.get("redlock_run_degraded_runs").map(String::as_str),
        Some("counter")
    );
}

// ---------------------------------------------------------------------------
// One vocabulary of outcomes
// ---------------------------------------------------------------------------

/// The word one run's outcome is given by `--report`, by the `exit` line of
/// `--log-format json`, by `redlock_run_runs_total` (the one counter the run
/// moved), and by the history (`None` when the run left no record).
fn words_of(
    out: &RunOutput,
    report: &std::path::Path,
    before: &Metrics,
    after: &Metrics,
    record: Option<&HistoryRun>,
) -> [String; 4] {
    let report = python(
        "import json,sys\nprint(json.load(sys.stdin)['outcome'])",
        &fs::read_to_string(report).expect("report"),
    );
    let log = python(
        "import json,sys\n\
         ends=[d for d in map(json.loads, sys.stdin.read().splitlines()) if d['event']=='exit']\n\
         assert len(ends)==1, ends\n\
         print(ends[0]['outcome'])",
        &out.stderr,
    );
    let runs = "redlock_run_runs_total";
    let moved: Vec<&String> = after
        .samples
        .iter()
        .filter(|((name, labels), v)| {
            name == runs && **v != before.get(runs, labels).unwrap_or(0.0)
        })
        .map(|((_, labels), _)| labels)
        .collect();
    assert!(
        moved.len() == 1
            && after.get(runs, moved[0]) == Some(before.get(runs, moved[0]).unwrap_or(0.0) + 1.0),
        "one counter moved, by one: {moved:?}\n{after:?}"
    );
    let metric = moved[0]
        .split(',')
        .find_map(|l| l.strip_prefix("outcome="))
        .expect("outcome label")
        .to_string();
    [
        report.trim().to_string(),
        log.trim().to_string(),
        metric,
        record.map_or("(no record)".into(), |r| r.outcome.clone()),
    ]
}

/// A success, a failure and a busy run, each with `--report`,
/// `--metrics-file` and `--log-format json`: the same word in all of them
/// and, for the runs that took the lock, in `history --json`.
#[test]
fn one_run_has_one_outcome_word_everywhere() {
    let cluster = Cluster::new(3);
    let dir = tempdir();
    let urls = cluster.urls();
    let (report, metrics) = (dir.join("r.json"), dir.join("cron.prom"));
    let run = |command: &str| {
        let _ = fs::remove_file(&report);
        let before = if metrics.exists() {
            read_metrics(&metrics)
        } else {
            Metrics::default()
        };
        let out = base(&urls, "words", &dir)
            .args(["--log-format", "json", "--report"])
            .arg(&report)
            .arg("--metrics-file")
            .arg(&metrics)
            .args(["-c", command])
            .run();
        (out, before, read_metrics(&metrics))
    };
    for (command, code, word) in [
        ("echo $REDLOCK_TOKEN > token", 0, "ok"),
        ("echo $REDLOCK_TOKEN > token; exit 3", 3, "failed"),
    ] {
        let (out, before, after) = run(command);
        out.assert_code(code);
        let token = fs::read_to_string(dir.join("token")).expect("token");
        let runs = history_runs(&urls, "words");
        let record = runs.iter().find(|r| r.id == token.trim());
        assert!(record.is_some(), "no history record of {token}: {runs:?}");
        let words = words_of(&out, &report, &before, &after, record);
        assert_eq!(words, [word; 4], "report, log, metrics, history\n{out}");
    }
    let holder = base(&urls, "words", &dir)
        .args(["-q", "-c", &format!("touch held; {WAIT_FOR_GO}")])
        .spawn();
    await_marker(&dir, "held", &holder);
    let recorded = history_runs(&urls, "words").len();
    let (out, before, after) = run("touch busy");
    out.assert_code(BUSY);
    let words = words_of(&out, &report, &before, &after, None);
    assert_eq!(
        words,
        ["busy", "busy", "busy", "(no record)"],
        "report, log, metrics, history\n{out}"
    );
    assert_eq!(
        history_runs(&urls, "words").len(),
        recorded,
        "a busy run is no run"
    );
    touch(&dir, "go");
    holder.wait().assert_code(0);
    assert!(!dir.has("busy"));
}

// ---------------------------------------------------------------------------
// Output paths checked before the run
// ---------------------------------------------------------------------------

/// Makes a FIFO at `path`.
fn mkfifo(path: &std::path::Path) {
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).expect("cstr");
    // SAFETY: mkfifo on a NUL-terminated path we own.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0, "mkfifo");
}

/// A directory, a FIFO, a missing directory, and a directory this user may
/// not write (as an unprivileged user), for `--report` and for
/// `--metrics-file`: each a usage error, one line naming the flag, the path
/// and what is wrong, before the lock is taken (no key on the node) and
/// before the command runs. Root, who may write anywhere, is not refused.
#[test]
fn unwritable_output_paths_are_usage_errors_before_anything_runs() {
    use std::os::unix::fs::PermissionsExt;
    let node = RedisNode::start();
    let dir = tempdir();
    // The unprivileged user runs the command in here, and may write its marker.
    fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o777)).expect("chmod");
    let sub = dir.join("a-directory");
    fs::create_dir(&sub).expect("dir");
    let fifo = dir.join("a-fifo");
    mkfifo(&fifo);
    let locked = dir.join("locked");
    fs::create_dir(&locked).expect("dir");
    // SAFETY: geteuid cannot fail.
    let root = unsafe { libc::geteuid() } == 0;
    // Root bypasses the mode bits, so as root the refusal is checked as
    // nobody, and the directory may stay 0755; as anyone else, 0555.
    fs::set_permissions(
        &locked,
        fs::Permissions::from_mode(if root { 0o755 } else { 0o555 }),
    )
    .expect("chmod");
    let unprivileged = [
        "setpriv",
        "--reuid=65534",
        "--regid=65534",
        "--clear-groups",
    ];
    let missing = dir.join("no/such/dir");
    for flag in ["--report", "--metrics-file"] {
        for (path, why, as_nobody) in [
            (sub.clone(), "it is a directory".to_string(), false),
            (
                fifo.clone(),
                "it is a FIFO, not a regular file".to_string(),
                false,
            ),
            (
                missing.join("out"),
                format!("its directory {} does not exist", missing.display()),
                false,
            ),
            (
                locked.join("out"),
                format!("this user may not create files in {}", locked.display()),
                root,
            ),
        ] {
            let mut test = base(&node.url(), "paths", &dir);
            if as_nobody {
                test = test.wrapped_in(unprivileged);
            }
            let out = test.arg(flag).arg(&path).args(["-c", "touch ran"]).run();
            out.assert_code(64).assert_one_error_line();
            let want = format!("redlock-run: cannot write {flag} {}: {why}", path.display());
            assert_eq!(out.stderr.trim_end(), want, "{out}");
            assert!(!dir.has("ran"), "the command ran\n{out}");
            assert!(node.all_keys().is_empty(), "{:?}\n{out}", node.all_keys());
        }
    }
    // What stays fine: a new file, an existing one, and, for --report, a
    // symlink (replaced, never followed).
    fs::write(dir.join("existing.json"), "").expect("file");
    std::os::unix::fs::symlink(dir.join("existing.json"), dir.join("link.json")).expect("symlink");
    for (flag, name) in [
        ("--report", "new.json"),
        ("--report", "existing.json"),
        ("--report", "link.json"),
        ("--metrics-file", "new.prom"),
    ] {
        base(&node.url(), "paths", &dir)
            .arg(flag)
            .arg(dir.join(name))
            .args(["-c", "true"])
            .expect_code(0);
        assert!(
            fs::symlink_metadata(dir.join(name))
                .expect("written")
                .is_file()
        );
    }
    if root {
        // Another user's file in a sticky directory (/tmp): nobody may not
        // replace it, though the directory is writable.
        let sticky = dir.join("sticky");
        fs::create_dir(&sticky).expect("dir");
        fs::set_permissions(&sticky, fs::Permissions::from_mode(0o1777)).expect("chmod");
        let theirs = sticky.join("job.json");
        fs::write(&theirs, "").expect("file");
        let keys_before = node.all_keys();
        let history_before = history(&node.url(), "paths", &["--json"]).stdout;
        let out = base(&node.url(), "paths", &dir)
            .wrapped_in(unprivileged)
            .arg("--report")
            .arg(&theirs)
            .args(["-c", "touch ran"])
            .run();
        out.assert_code(64).assert_one_error_line();
        assert!(
            out.stderr.contains(&format!(
                "cannot write --report {}: it belongs to uid 0 in the sticky directory",
                theirs.display()
            )),
            "{out}"
        );
        assert!(!dir.has("ran"), "{out}");
        assert_eq!(node.all_keys(), keys_before, "{out}");
        assert_eq!(
            history(&node.url(), "paths", &["--json"]).stdout,
            history_before
        );
        // Its own file there is fine.
        let mine = sticky.join("mine.json");
        base(&node.url(), "paths", &dir)
            .wrapped_in(unprivileged)
            .arg("--report")
            .arg(&mine)
            .args(["-c", "true"])
            .expect_code(0);
        assert!(mine.exists());
        // Root may write where the mode bits say nobody may: not refused.
        fs::set_permissions(&locked, fs::Permissions::from_mode(0o555)).expect("chmod");
        base(&node.url(), "paths", &dir)
            .arg("--report")
            .arg(locked.join("root.json"))
            .args(["-c", "true"])
            .expect_code(0);
        assert!(locked.join("root.json").exists());
    } else {
        crate::support::not_run(
            "outcomes::unwritable_output_paths_are_usage_errors_before_anything_runs (another \
             user's file in a sticky directory; root not refused)",
            "not root: no other user to run as",
        );
    }
}
