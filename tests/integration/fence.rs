//! `--fence` (fencing tokens) and `--limit N` (a semaphore of N slots).
//!
//! Fencing: every holder of a name gets REDLOCK_FENCING_TOKEN, strictly
//! greater than every earlier holder's as long as the nodes keep their data.
//! The hard case is a sequence of quorums that never all overlap: {A,B},
//! {A,C}, ..., then {B,C}. A per-node counter bumped only on the quorum's
//! nodes (max of INCRs) goes backwards there; the two-phase scheme (read the
//! counters with the SET NX, commit max+1 on a quorum) must not. The tests
//! build that sequence by SIGSTOPping one node at a time, and show with a
//! second key on the same nodes that the naive scheme does fail on it.
//!
//! A node frozen by SIGSTOP still accepts connections (the kernel completes
//! the handshake), so the SETs of runs that gave up on it are queued and
//! applied when it resumes. The harness therefore waits, after resuming a
//! node, until that stale lock has expired (its TTL is the runs' short
//! `--ttl`) before freezing the next node: otherwise the next run would find
//! one node refusing and one frozen, which is "busy", not a failure of the
//! fencing scheme.
//!
//! Limits: the commands stamp `date +%s%N` when they start and end, and the
//! test checks the intervals (how many at once, which slot).
//!
//! Commands run with the test's temp dir as working directory.

use std::collections::BTreeSet;
use std::fs;
use std::time::Duration;

use crate::support::{
    Cluster, RedisNode, RunOutput, Running, TempDir, Test, lock_key, python, tempdir, wait_until,
};
use crate::support::{START, WAIT_FOR_GO, base};

/// Usage error.
const USAGE: i32 = 64;
/// Fast fenced runs for the stopped-node sequences: a frozen node costs one
/// round limit (3 x node timeout) on release, and its stale lock expires
/// within the TTL after it resumes. `--wait` only absorbs a live node that
/// misses the 50 ms node timeout on a loaded machine (the attempt is retried,
/// and a retried attempt must not break the fencing order either); a run that
/// still cannot get its token exits 69 and fails the test.
const FAST_FENCE: [&str; 8] = [
    "--fence",
    "--node-timeout",
    "50ms",
    "--ttl",
    "1s",
    "--wait",
    "10s",
    "-v",
];

/// The fence counter's key for lock `name` (default prefix).
fn fence_key(name: &str) -> Vec<u8> {
    crate::support::keys(name).fence()
}

/// The fence counter on one node (0 when absent).
fn counter(node: &RedisNode, name: &str) -> u64 {
    node.get(fence_key(name))
        .map(|v| {
            String::from_utf8_lossy(&v)
                .parse()
                .unwrap_or_else(|e| panic!("fence counter {v:?} on {}: {e}", node.url()))
        })
        .unwrap_or(0)
}

/// The token a run's command echoed (`echo $REDLOCK_FENCING_TOKEN`).
fn echoed_token(out: &RunOutput) -> u64 {
    out.stdout
        .trim()
        .parse()
        .unwrap_or_else(|e| panic!("stdout is no fencing token ({e})\n{out}"))
}

/// Nodes (URLs) that `-v` says granted the acquire.
fn granted_nodes(out: &RunOutput) -> BTreeSet<String> {
    out.stderr
        .lines()
        .filter_map(|l| l.split_once("acquire ")?.1.split_once(": granted"))
        .map(|(url, _)| url.to_string())
        .collect()
}

/// The `(T, k)` of the last "fencing token T recorded on k/N nodes" line in
/// `-v` output (the one of the attempt that won).
fn recorded(out: &RunOutput, n: usize) -> (u64, usize) {
    let suffix = format!("/{n} nodes");
    let line = out
        .stderr
        .lines()
        .rev()
        .find(|l| l.contains("fencing token ") && l.ends_with(&suffix))
        .unwrap_or_else(|| panic!("no 'fencing token T recorded on k/{n} nodes' line\n{out}"));
    let rest = &line[line.find("fencing token ").expect("found") + "fencing token ".len()..];
    let (t, rest) = rest.split_once(" recorded on ").expect("line format");
    let k = rest.strip_suffix(&suffix).expect("suffix");
    (
        t.parse().unwrap_or_else(|e| panic!("{line:?}: {e}")),
        k.parse().unwrap_or_else(|e| panic!("{line:?}: {e}")),
    )
}

/// Resumes a node frozen by `stop()` and waits until the writes queued on
/// it while frozen are applied and the stale lock they left has expired.
fn resume(node: &RedisNode, name: &str) {
    node.cont();
    // A reply on a fresh connection comes after the connections accepted
    // before it were read: the queued SETs have landed by then.
    assert!(
        wait_until(Duration::from_secs(5), || node.ping()) && node.ping(),
        "{} does not answer after SIGCONT",
        node.url()
    );
    let key = lock_key(name);
    assert!(
        wait_until(Duration::from_secs(5), || !node.exists(&key)),
        "stale lock on resumed {} did not expire (PTTL {})",
        node.url(),
        node.pttl(&key)
    );
}

/// Leaves exactly node `target` frozen (resuming the one frozen before).
fn freeze_only(cluster: &Cluster, frozen: &mut Option<usize>, target: usize, name: &str) {
    if *frozen == Some(target) {
        return;
    }
    if let Some(prev) = frozen.take() {
        resume(&cluster[prev], name);
    }
    cluster[target].stop();
    *frozen = Some(target);
}

/// One fast fenced run with node `frozen` stopped: exit 0, the quorum is the
/// other two nodes, the echoed token is the one `-v` says was recorded (on
/// 2/3 nodes). Returns the token.
fn fenced_run_without(cluster: &Cluster, frozen: usize, name: &str, dir: &TempDir) -> u64 {
    let out = base(&cluster.urls(), name, dir)
        .args(FAST_FENCE)
        .args(["-c", "echo $REDLOCK_FENCING_TOKEN"])
        .run();
    out.assert_code(0);
    let t = echoed_token(&out);
    let want: BTreeSet<String> = (0..3)
        .filter(|&i| i != frozen)
        .map(|i| cluster[i].url())
        .collect();
    assert_eq!(
        granted_nodes(&out),
        want,
        "with node {frozen} frozen the quorum must be the other two\n{out}"
    );
    assert_eq!(
        recorded(&out, 3),
        (t, 2),
        "the command's token must be the one recorded on the quorum\n{out}"
    );
    t
}

fn assert_strictly_increasing(tokens: &[u64], what: &str) {
    for (i, w) in tokens.windows(2).enumerate() {
        assert!(
            w[0] < w[1],
            "{what}: token #{} ({}) is not greater than token #{i} ({})\nall: {tokens:?}",
            i + 1,
            w[1],
            w[0]
        );
    }
}

// ---------------------------------------------------------------------------
// 1. Fencing tokens across changing quorums
// ---------------------------------------------------------------------------

/// What can break the order is a change of quorum: the first runs after
/// the frozen node moves. Six phases put each node in two of them and cover
/// every change (0 to 1, 1 to 2, 2 to 0) twice; a few runs per phase are
/// enough to show the order holds within one quorum too.
#[test]
fn fence_tokens_increase_while_the_frozen_node_rotates() {
    const PER_PHASE: usize = 4;
    const RUNS: usize = 6 * PER_PHASE;
    let cluster = Cluster::new(3);
    let dir = tempdir();
    let name = "fence-rotate";
    let mut frozen = None;
    let mut tokens = Vec::with_capacity(RUNS);
    for run in 0..RUNS {
        let target = (run / PER_PHASE) % 3;
        freeze_only(&cluster, &mut frozen, target, name);
        let t = fenced_run_without(&cluster, target, name, &dir);
        if let Some(&last) = tokens.last() {
            assert!(
                t > last,
                "run {run} (node {target} frozen) got token {t}, not above the previous {last}\n\
                 all so far: {tokens:?}"
            );
        }
        tokens.push(t);
    }
    if let Some(prev) = frozen {
        resume(&cluster[prev], name);
    }
    assert_strictly_increasing(&tokens, "rotating frozen node");
    let last = *tokens.last().expect("runs");
    let counters: Vec<u64> = cluster.iter().map(|n| counter(n, name)).collect();
    assert_eq!(
        counters.iter().max(),
        Some(&last),
        "the highest counter must be the last token handed out: {counters:?}"
    );
    println!(
        "{RUNS} fenced runs, frozen node rotating every {PER_PHASE}: tokens {}..={last}, \
         counters per node {counters:?}",
        tokens[0]
    );
}

#[test]
fn fence_survives_quorums_that_never_all_overlap() {
    const A: usize = 0;
    const B: usize = 1;
    const C: usize = 2;
    let cluster = Cluster::new(3);
    let dir = tempdir();
    let name = "fence-disjoint";
    // The naive scheme's counter: a separate key on the same nodes.
    let naive_key = "naive:fence-disjoint";

    // {A,B}, {A,C} three times, then {B,C}: A is in six quorums, B and C in
    // three each (plus the last).
    let mut sequence: Vec<[usize; 2]> = Vec::new();
    for _ in 0..3 {
        sequence.push([A, B]);
        sequence.push([A, C]);
    }
    sequence.push([B, C]);

    let mut frozen = None;
    let mut tokens = Vec::new();
    let mut naive = Vec::new();
    for quorum in &sequence {
        let target = (0..3).find(|i| !quorum.contains(i)).expect("one left out");
        freeze_only(&cluster, &mut frozen, target, name);
        let t = fenced_run_without(&cluster, target, name, &dir);
        if let Some(&max) = tokens.iter().max() {
            assert!(
                t > max,
                "quorum {quorum:?} got token {t}, not above every earlier one ({tokens:?})"
            );
        }
        tokens.push(t);
        // What "max over the quorum of per-node INCR" would have handed out.
        let n = quorum
            .iter()
            .map(|&i| cluster[i].cmd::<u64>(redis::cmd("INCR").arg(naive_key)))
            .max()
            .expect("two nodes");
        naive.push(n);
    }
    if let Some(prev) = frozen {
        resume(&cluster[prev], name);
    }
    println!("quorums {sequence:?}\n  fencing tokens {tokens:?}\n  naive max-of-INCR {naive:?}");

    assert_strictly_increasing(&tokens, "{A,B},{A,C} x3, {B,C}");
    // The last quorum, {B,C}, saw the others' tokens only through the node
    // each shared with A's quorums: B holds the last {A,B} token, C the last
    // {A,C} one, A the last {A,C} one too.
    let counters: Vec<u64> = cluster.iter().map(|n| counter(n, name)).collect();
    let last = tokens[tokens.len() - 1];
    assert_eq!(
        counters,
        vec![tokens[tokens.len() - 2], last, last],
        "counters on A, B, C after the sequence (tokens {tokens:?})"
    );

    // Negative control: the same sequence defeats the naive scheme, so the
    // scenario above is the hard one.
    let naive_last = naive[naive.len() - 1];
    let naive_before = naive[..naive.len() - 1].iter().max().copied().unwrap_or(0);
    assert!(
        naive_last <= naive_before,
        "the naive max-of-INCR scheme should go backwards on {{B,C}}: {naive:?}"
    );
    let per_node: Vec<u64> = cluster
        .iter()
        .map(|n| {
            n.get(naive_key)
                .map(|v| String::from_utf8_lossy(&v).parse().expect("integer"))
                .unwrap_or(0)
        })
        .collect();
    assert_eq!(per_node, vec![6, 4, 4], "naive counters on A, B, C");
}

#[test]
fn concurrent_fenced_waiters_get_increasing_tokens_in_completion_order() {
    const RUNS: usize = 12;
    let cluster = Cluster::new(3);
    let dir = tempdir();
    let urls = cluster.urls();
    let script = "s=$(date +%s%N); sleep 0.05; \
                  echo \"$REDLOCK_FENCING_TOKEN $s $(date +%s%N)\" >> log";
    let running: Vec<Running> = (0..RUNS)
        .map(|_| {
            base(&urls, "fence-wait", &dir)
                .args(["--fence", "--wait", "60s", "--ttl", "5s", "-c", script])
                .timeout(Duration::from_secs(90))
                .spawn()
        })
        .collect();
    for r in running {
        r.wait().assert_code(0);
    }
    let log = fs::read_to_string(dir.join("log")).expect("log written");
    let mut entries: Vec<(u64, u128, u128)> = log
        .lines()
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            assert_eq!(f.len(), 3, "log line {l:?}\n{log}");
            (
                f[0].parse()
                    .unwrap_or_else(|e| panic!("token in {l:?}: {e}")),
                f[1].parse().expect("start ns"),
                f[2].parse().expect("end ns"),
            )
        })
        .collect();
    assert_eq!(entries.len(), RUNS, "one line per run\n{log}");
    entries.sort_by_key(|e| e.2);
    let tokens: Vec<u64> = entries.iter().map(|e| e.0).collect();
    println!("tokens in completion order: {tokens:?}");
    let unique: BTreeSet<u64> = tokens.iter().copied().collect();
    assert_eq!(unique.len(), RUNS, "tokens must be unique: {tokens:?}");
    assert_strictly_increasing(&tokens, "completion order");
    for w in entries.windows(2) {
        assert!(
            w[1].1 > w[0].2,
            "token {} started before token {} ended: the lock was shared\n{log}",
            w[1].0,
            w[0].0
        );
    }
}

// ---------------------------------------------------------------------------
// 2. The fence counter itself, and --fence with --limit
// ---------------------------------------------------------------------------

#[test]
fn fence_counter_has_no_ttl() {
    let cluster = Cluster::new(3);
    let dir = tempdir();
    let name = "fence-ttl";
    let mut tokens = Vec::new();
    for _ in 0..2 {
        let out = base(&cluster.urls(), name, &dir)
            .args([
                "--fence",
                "--ttl",
                "2s",
                "-v",
                "-c",
                "echo $REDLOCK_FENCING_TOKEN",
            ])
            .expect_code(0);
        let t = echoed_token(&out);
        let (recorded_t, k) = recorded(&out, 3);
        assert_eq!(recorded_t, t, "{out}");
        assert!(k >= 2, "recorded on fewer than a quorum\n{out}");
        tokens.push(t);
    }
    assert_eq!(tokens, vec![1, 2], "fresh nodes: tokens start at 1");
    let key = fence_key(name);
    for node in cluster.iter() {
        assert!(!node.exists(lock_key(name)), "lock left on {}", node.url());
        let value = counter(node, name);
        if value == 0 {
            // A node outside a quorum may never have been written; it must
            // then have no key at all, not an expiring one.
            assert_eq!(node.pttl(&key), -2, "{}", node.url());
            continue;
        }
        assert_eq!(
            node.pttl(&key),
            -1,
            "the fence counter on {} must not expire",
            node.url()
        );
    }
    let written = cluster.iter().filter(|n| counter(n, name) == 2).count();
    assert!(written >= 2, "the last token is on fewer than a quorum");
}

#[test]
fn fence_with_limit_is_a_usage_error() {
    let node = RedisNode::start();
    let dir = tempdir();
    for args in [["--fence", "--limit", "2"], ["--limit", "2", "--fence"]] {
        let out = base(&node.url(), "fence-limit", &dir)
            .args(args)
            .args(["-c", "touch ran"])
            .expect_code(USAGE);
        out.assert_one_error_line();
        assert!(!dir.has("ran"), "the command ran\n{out}");
    }
    assert!(node.keys().is_empty(), "keys written: {:?}", node.keys());
}

// ---------------------------------------------------------------------------
// 3. --limit N
// ---------------------------------------------------------------------------

#[test]
fn limit_two_runs_at_most_two_at_once() {
    const CONTENDERS: usize = 6;
    let cluster = Cluster::new(3);
    let dir = tempdir();
    let urls = cluster.urls();
    let running: Vec<Running> = (0..CONTENDERS)
        .map(|i| {
            let script = format!(
                "echo start $(date +%s%N) $REDLOCK_SLOT {i} >> log; sleep 1; \
                 echo end $(date +%s%N) $REDLOCK_SLOT {i} >> log"
            );
            base(&urls, "limit-two", &dir)
                .args([
                    "--limit", "2", "--wait", "60s", "--ttl", "5s", "-c", &script,
                ])
                .timeout(Duration::from_secs(90))
                .spawn()
        })
        .collect();
    for r in running {
        r.wait().assert_code(0);
    }
    let log = fs::read_to_string(dir.join("log")).expect("log written");
    // (start, end, slot) per contender.
    let mut runs: Vec<(Option<u128>, Option<u128>, Option<u32>)> = vec![(None, None, None); 6];
    for l in log.lines() {
        let f: Vec<&str> = l.split_whitespace().collect();
        assert_eq!(f.len(), 4, "log line {l:?}\n{log}");
        let ns: u128 = f[1].parse().expect("stamp");
        let slot: u32 = f[2]
            .parse()
            .unwrap_or_else(|e| panic!("REDLOCK_SLOT in {l:?}: {e}"));
        let i: usize = f[3].parse().expect("contender");
        let run = &mut runs[i];
        assert!(run.2.is_none_or(|s| s == slot), "slot changed\n{log}");
        run.2 = Some(slot);
        match f[0] {
            "start" => run.0 = Some(ns),
            "end" => run.1 = Some(ns),
            other => panic!("log line {other:?}\n{log}"),
        }
    }
    let runs: Vec<(u128, u128, u32)> = runs
        .iter()
        .enumerate()
        .map(|(i, r)| match *r {
            (Some(s), Some(e), Some(slot)) => (s, e, slot),
            _ => panic!("contender {i} did not start and end\n{log}"),
        })
        .collect();
    let slots: BTreeSet<u32> = runs.iter().map(|r| r.2).collect();
    assert!(
        slots.iter().all(|&s| s < 2),
        "slots must be 0 or 1: {slots:?}\n{log}"
    );
    // Sweep: +1 at each start, -1 at each end (an end sorts before a start
    // at the same nanosecond).
    let mut events: Vec<(u128, i32)> = runs.iter().flat_map(|r| [(r.0, 1), (r.1, -1)]).collect();
    events.sort();
    let (mut now, mut peak) = (0, 0);
    for (_, d) in &events {
        now += d;
        peak = peak.max(now);
    }
    assert!(peak <= 2, "{peak} ran at once under --limit 2\n{log}");
    assert_eq!(peak, 2, "two never ran at once under --limit 2\n{log}");
    for (i, a) in runs.iter().enumerate() {
        for b in &runs[i + 1..] {
            let overlap = a.0 < b.1 && b.0 < a.1;
            assert!(
                !(overlap && a.2 == b.2),
                "slot {} held by two at once\n{log}",
                a.2
            );
        }
    }
}

/// The `verdict` of each slot in `status --limit N --json` output, parsed by
/// python3's json module (which also checks the whole text is one object).
fn json_verdicts(text: &str) -> Vec<String> {
    const PY: &str = "import json, sys\n\
                      d = json.load(sys.stdin)\n\
                      assert list(d) == ['limit', 'slots', 'once_per', 'last_run'], list(d)\n\
                      assert d['limit'] == len(d['slots']), d['limit']\n\
                      print(' '.join(s['verdict'] for s in d['slots']))\n";
    python(PY, text)
        .split_whitespace()
        .map(str::to_string)
        .collect()
}

/// The verdict lines of text `status --limit N`: `free`, or `held ...`.
fn text_verdicts(out: &RunOutput) -> Vec<&str> {
    out.stdout
        .lines()
        .filter(|l| *l == "free" || l.starts_with("held by "))
        .map(|l| if l == "free" { "free" } else { "held" })
        .collect()
}

fn sorted(mut v: Vec<&str>) -> Vec<&str> {
    v.sort();
    v
}

#[test]
fn status_with_limit_shows_each_slot() {
    let cluster = Cluster::new(3);
    let dir = tempdir();
    let urls = cluster.urls();
    let name = "limit-status";
    let status = |json: bool| {
        let mut t = Test::new().args(["status", "-r", &urls, "-k", name, "--limit", "2"]);
        if json {
            t = t.arg("--json");
        }
        t.run()
    };
    let holder = |marker: &str| {
        base(&urls, name, &dir)
            .args(["--limit", "2", "--ttl", "5s", "-c"])
            .arg(format!("touch {marker}; {WAIT_FOR_GO}"))
            .spawn()
    };

    let first = holder("one");
    assert!(
        wait_until(START, || dir.has("one")),
        "first holder did not start\n{}",
        first.stderr_so_far()
    );
    let out = status(false);
    out.assert_code(0);
    assert_eq!(sorted(text_verdicts(&out)), ["free", "held"], "{out}");
    let out = status(true);
    out.assert_code(0);
    let v = json_verdicts(&out.stdout);
    assert_eq!(
        sorted(v.iter().map(String::as_str).collect()),
        ["free", "held"],
        "{out}"
    );

    let second = holder("two");
    assert!(
        wait_until(START, || dir.has("two")),
        "second holder did not start\n{}",
        second.stderr_so_far()
    );
    let out = status(false);
    out.assert_code(1);
    assert_eq!(text_verdicts(&out), ["held", "held"], "{out}");
    let out = status(true);
    out.assert_code(1);
    assert_eq!(json_verdicts(&out.stdout), ["held", "held"], "{out}");

    fs::write(dir.join("go"), b"").expect("create go");
    first.wait().assert_code(0);
    second.wait().assert_code(0);
    let out = status(true);
    out.assert_code(0);
    assert_eq!(json_verdicts(&out.stdout), ["free", "free"], "{out}");
}

// ---------------------------------------------------------------------------
// 4. Counters past 2^53 and at the top of the 64-bit range
// ---------------------------------------------------------------------------

/// Unavailable: the lock cannot be taken with a token (EX_UNAVAILABLE).
const UNAVAILABLE: i32 = 69;

/// Sets the fence counter of `name` to `value` (no expiry) on every node.
fn seed_counter(cluster: &Cluster, name: &str, value: u64) {
    for node in cluster.iter() {
        let reply: String = node.cmd(redis::cmd("SET").arg(fence_key(name)).arg(value));
        assert_eq!(reply, "OK", "seed the counter on {}", node.url());
    }
}

/// One fenced run that echoes its token.
fn fenced(cluster: &Cluster, name: &str, dir: &TempDir) -> RunOutput {
    base(&cluster.urls(), name, dir)
        .args(["--fence", "--ttl", "5s", "-v", "-c"])
        .arg("echo $REDLOCK_FENCING_TOKEN; touch ran")
        .run()
}

/// A Lua number is a double, exact only up to 2^53: a counter compared and
/// raised as one stops rising there (2^53 + 1 rounds to 2^53), and the same
/// token is handed out again and again. Counters seeded from a clock or an
/// ID generator live in this range.
#[test]
fn fence_tokens_keep_rising_past_two_to_the_53() {
    const START_AT: u64 = (1 << 53) - 1;
    let cluster = Cluster::new(3);
    let dir = tempdir();
    let name = "fence-2-53";
    seed_counter(&cluster, name, START_AT);
    let mut tokens = Vec::new();
    for _ in 0..4 {
        let out = fenced(&cluster, name, &dir);
        out.assert_code(0);
        let t = echoed_token(&out);
        assert_eq!(recorded(&out, 3).0, t, "{out}");
        tokens.push(t);
    }
    println!("counter at 2^53-1 = {START_AT}: tokens {tokens:?}");
    assert_eq!(
        tokens,
        (START_AT + 1..=START_AT + 4).collect::<Vec<u64>>(),
        "tokens after {START_AT}"
    );
    let counters: Vec<u64> = cluster.iter().map(|n| counter(n, name)).collect();
    assert_eq!(
        counters.iter().max(),
        Some(&tokens[3]),
        "the counter must equal the last token: {counters:?}"
    );
}

/// The previous layout's counter is compared as an integer too: 2^53 + 1
/// beside 2^53 (the same double) is the larger, and the next token is above
/// it.
#[test]
fn the_legacy_counter_is_compared_as_an_integer() {
    let cluster = Cluster::new(3);
    let dir = tempdir();
    let name = "fence-legacy-2-53";
    seed_counter(&cluster, name, 1 << 53);
    let legacy = crate::support::keys(name).legacy_fence();
    for node in cluster.iter() {
        let reply: String = node.cmd(redis::cmd("SET").arg(&legacy).arg((1u64 << 53) + 1));
        assert_eq!(reply, "OK");
    }
    let out = fenced(&cluster, name, &dir);
    out.assert_code(0);
    assert_eq!(echoed_token(&out), (1 << 53) + 2, "{out}");
}

/// Redis integers are signed 64-bit: the counter's last value is i64::MAX.
/// From 2^63 - 2 one more run gets i64::MAX; the next is refused (69, one
/// line saying why), its command does not run, and the lock is given back.
#[test]
fn fence_tokens_never_repeat_at_the_top_of_the_range() {
    const START_AT: u64 = i64::MAX as u64 - 1;
    let cluster = Cluster::new(3);
    let dir = tempdir();
    let name = "fence-2-63";
    seed_counter(&cluster, name, START_AT);
    let first = fenced(&cluster, name, &dir);
    first.assert_code(0);
    assert_eq!(echoed_token(&first), i64::MAX as u64, "{first}");
    fs::remove_file(dir.join("ran")).expect("the first run's marker");
    let mut tokens = vec![echoed_token(&first)];
    for _ in 0..2 {
        let out = fenced(&cluster, name, &dir);
        assert!(
            !dir.has("ran"),
            "a run past the top of the range ran its command\n{out}"
        );
        if out.code == Some(0) {
            tokens.push(echoed_token(&out));
        }
        out.assert_code(UNAVAILABLE);
        let line = out
            .stderr_lines()
            .into_iter()
            .find(|l| l.starts_with("redlock-run: ") && l.contains("maximum"))
            .unwrap_or_else(|| panic!("no line saying the counter is at its maximum\n{out}"));
        assert!(line.contains("9223372036854775807"), "{line}");
    }
    let unique: BTreeSet<u64> = tokens.iter().copied().collect();
    assert_eq!(unique.len(), tokens.len(), "a token repeated: {tokens:?}");
    // The first run was decided by a quorum: on a busy machine a node's
    // answer can come after the verdict, and that node keeps its old value.
    for node in cluster.iter() {
        assert!(!node.exists(lock_key(name)), "lock left on {}", node.url());
    }
    let at_top: Vec<String> = cluster
        .iter()
        .filter(|node| counter(node, name) == i64::MAX as u64)
        .map(|node| node.url())
        .collect();
    assert!(
        at_top.len() >= 2,
        "i64::MAX on fewer than a quorum: {at_top:?}"
    );
}
