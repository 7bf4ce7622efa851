//! Votes only from nodes that remember: a node restarted without fsync on
//! every write has forgotten the locks it granted, so it gives no vote until
//! it has been up for the restart grace (the TTL by default); `--durable`
//! counts a vote only once the node has it on disk. Real servers, restarted
//! empty on their own ports, and the real binary.
//!
//! Every other test runs with `REDLOCK_RESTART_GRACE=0` (its servers are
//! fresh and have held nothing); these take it away, and so start from
//! nodes that have been up for longer than the grace, as a fleet's have.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::support::cmd::GRACE_ENV;
use crate::support::*;

/// The TTL (and so the grace) of these tests: short, so that nodes come
/// of age quickly, and long enough for a heartbeat and a kill schedule.
const TTL: &str = "4s";
const TTL_D: Duration = Duration::from_secs(4);

/// The holder's command: notes when it starts and when it ends (a SIGTERM
/// ends it too), and otherwise runs for longer than any test waits. Its
/// clock is bash's own (no `date` to fork): on a busy machine the SIGKILL
/// that follows the SIGTERM caught a forked `date` before it wrote.
const HOLD: &str = r#"exec bash -c 'now() { echo "${EPOCHREALTIME/./}000"; }; now > a.start; trap "now > a.end; exit 0" TERM; sleep 60 & wait; now > a.end'"#;

/// A run of lock `job` on `urls` with the grace at its default, in `dir`.
fn run(urls: &str, dir: &TempDir) -> Test {
    base(urls, "job", dir)
        .env_remove(GRACE_ENV)
        .args(["-t", TTL])
}

/// Waits until each node has been up for `age`, as a run reads it: one
/// second less than `uptime_in_seconds` says.
fn come_of_age(nodes: &[&RedisNode], age: Duration) {
    for node in nodes {
        let up = || -> u64 {
            let info: String = node.cmd(redis::cmd("INFO").arg("server"));
            info.lines()
                .find_map(|l| l.strip_prefix("uptime_in_seconds:"))
                .and_then(|v| v.trim().parse().ok())
                .expect("uptime_in_seconds")
        };
        assert!(
            wait_until(age + Duration::from_secs(3), || up() > age.as_secs()),
            "{} is not {age:?} old",
            node.url()
        );
    }
}

/// The nanoseconds since the epoch a command wrote to `file` in `dir`.
fn stamp(dir: &TempDir, file: &str) -> u128 {
    let text = std::fs::read_to_string(dir.join(file)).unwrap_or_else(|e| panic!("{file}: {e}"));
    text.trim()
        .parse()
        .unwrap_or_else(|e| panic!("{file}: {e}"))
}

fn now_ns() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock")
        .as_nanos()
}

/// The heart of it: two of three nodes without persistence restart empty
/// under a held lock. A second run sees them sit out and is busy, naming
/// them, its command never run; a waiter runs only after the holder's
/// command ended, which the holder stopped (76) before its validity ran
/// out. With the grace off (the negative control below) the same steps
/// give two holders.
#[test]
fn two_of_three_nodes_restarted_empty_keep_a_second_run_out() {
    let mut cluster = Cluster::new(3);
    let dir = tempdir();
    come_of_age(&cluster.iter().collect::<Vec<_>>(), TTL_D);
    let urls = cluster.urls();
    let holder = run(&urls, &dir).args(["-c", HOLD]).spawn();
    await_marker(&dir, "a.start", &holder);
    cluster.node_mut(0).restart();
    cluster.node_mut(1).restart();
    let restarted_ns = now_ns();

    let busy = run(&urls, &dir)
        .args(["-c", "date +%s%N > b.start"])
        .expect_code(75);
    assert!(!dir.has("b.start"), "the second run's command ran\n{busy}");
    for (i, node) in cluster.iter().enumerate() {
        let named = busy.stderr.contains(&format!("{}: started", node.url()));
        assert_eq!(named, i < 2, "node {i} named as restarted?\n{busy}");
    }
    assert!(busy.stderr.contains("restart-grace 4s"), "{busy}");

    let waiter = run(&urls, &dir)
        .args(["--wait", "20s", "-c", "date +%s%N > b.start"])
        .expect_code(0);
    let held = holder.wait();
    held.assert_code(76);
    let (a_end, b_start) = (stamp(&dir, "a.end"), stamp(&dir, "b.start"));
    assert!(
        b_start > a_end,
        "the waiter ran {} ms before the holder's command ended\n{waiter}\n{held}",
        (a_end - b_start) / 1_000_000
    );
    // The holder's votes were gone from the restart on: its command was
    // stopped within a TTL of it, before its validity could run out.
    assert!(
        a_end < restarted_ns + TTL_D.as_nanos(),
        "the holder's command ran on {} ms after the restart\n{held}",
        (a_end - restarted_ns) / 1_000_000
    );
}

/// The same steps with the grace off: the restarted nodes' fresh grants
/// count, and the second run runs beside the holder. What the test above
/// would see, were the grace not kept.
#[test]
fn negative_control_restart_grace_off_gives_two_holders() {
    let mut cluster = Cluster::new(3);
    let dir = tempdir();
    let urls = cluster.urls();
    let holder = base(&urls, "job", &dir)
        .args(["-t", TTL, "-c", HOLD])
        .spawn();
    await_marker(&dir, "a.start", &holder);
    cluster.node_mut(0).restart();
    cluster.node_mut(1).restart();
    let second = base(&urls, "job", &dir)
        .args([
            "-t",
            TTL,
            "--restart-grace",
            "0",
            "-c",
            "date +%s%N > b.start",
        ])
        .expect_code(0);
    let held = holder.wait();
    let (a_end, b_start) = (stamp(&dir, "a.end"), stamp(&dir, "b.start"));
    assert!(
        b_start < a_end,
        "no overlap without the grace?\n{second}\n{held}"
    );
}

/// One node of three restarted: the other two are a quorum, and the run
/// goes on at once, with one warning that names the node, how long ago it
/// started and when its vote counts again. The command lasts a moment: a
/// run that ends before the node has answered says nothing of it, as of
/// any node still connecting (a CI run of `true` ended so, in 29 ms).
#[test]
fn one_restarted_node_of_three_is_warned_of_once() {
    let mut cluster = Cluster::new(3);
    let dir = tempdir();
    come_of_age(&cluster.iter().collect::<Vec<_>>(), TTL_D);
    cluster.node_mut(0).restart();
    let out = run(&cluster.urls(), &dir)
        .args(["--", "sleep", "0.5"])
        .expect_code(0);
    assert!(out.elapsed < Duration::from_secs(2), "{out}");
    let lines = out.stderr_lines();
    assert_eq!(lines.len(), 1, "one warning\n{out}");
    let url = cluster[0].url();
    for want in [
        format!("warning: {url}: started 0s ago"),
        "its vote counts again in".to_string(),
        "(--restart-grace 4s)".to_string(),
    ] {
        assert!(lines[0].contains(&want), "{want:?}\n{out}");
    }
    // Its grant was taken back: no key of the run is left anywhere.
    for node in cluster.iter() {
        assert!(
            node.keys().iter().all(|k| is_history_key(k)),
            "{:?}",
            node.keys()
        );
    }
    // -q silences it.
    cluster.node_mut(0).restart();
    let quiet = run(&cluster.urls(), &dir)
        .args(["-q", "--", "true"])
        .expect_code(0);
    assert_eq!(quiet.stderr, "", "{quiet}");
}

/// A lone node, restarted: a waiter takes the lock once the node has been
/// up for the TTL (3 s), not before, woken then rather than polling; with
/// the grace off, at once.
#[test]
fn a_lone_restarted_node_votes_once_it_has_been_up_for_the_ttl() {
    let mut node = RedisNode::start();
    let dir = tempdir();
    node.restart();
    let started = Instant::now();
    let out = base(&node.url(), "job", &dir)
        .env_remove(GRACE_ENV)
        .args(["-t", "3s", "--wait", "20s", "-c", "touch ran"])
        .expect_code(0);
    let took = started.elapsed();
    assert!(dir.has("ran"), "{out}");
    assert!(
        took >= Duration::from_millis(2900) && took < Duration::from_secs(5),
        "took the lock after {took:?}\n{out}"
    );
    assert!(
        out.stderr.contains("too few nodes may vote"),
        "the waiting line says why\n{out}"
    );
    node.restart();
    let now = base(&node.url(), "job", &dir)
        .env_remove(GRACE_ENV)
        .args(["-t", "3s", "--restart-grace", "0", "--", "true"])
        .expect_code(0);
    assert!(now.elapsed < Duration::from_secs(1), "{now}");
}

/// A node that writes every change to disk before it answers comes back
/// with every lock it held: its vote counts at once after a restart.
#[test]
fn a_node_that_syncs_every_write_votes_at_once_after_a_restart() {
    let mut node = RedisNode::start_with(&["--appendonly", "yes", "--appendfsync", "always"]);
    let dir = tempdir();
    node.restart_keeping_data();
    let out = base(&node.url(), "job", &dir)
        .env_remove(GRACE_ENV)
        .args(["--", "true"])
        .expect_code(0);
    assert_eq!(out.stderr, "", "{out}");
}

/// `calls=N` of `cmdstat_<name>` in INFO commandstats (0 when never called).
fn calls(node: &RedisNode, name: &str) -> u64 {
    let stats: String = node.cmd(redis::cmd("INFO").arg("commandstats"));
    stats
        .lines()
        .find_map(|l| l.strip_prefix(&format!("cmdstat_{name}:calls=")))
        .and_then(|rest| rest.split(',').next()?.parse().ok())
        .unwrap_or(0)
}

/// --durable on Valkey with appendfsync everysec: each vote (the acquire,
/// then each extension) waits for the node's disk through WAITAOF. A 3 s
/// TTL gives each WAITAOF 150 ms: a busy CI machine's fsync took over 75.
#[test]
fn durable_waits_for_valkeys_disk_with_waitaof() {
    let node = RedisNode::start_valkey(&["--appendonly", "yes", "--appendfsync", "everysec"]);
    let dir = tempdir();
    let before = calls(&node, "waitaof");
    let out = base(&node.url(), "job", &dir)
        .args(["--durable", "-t", "3s", "-c", "sleep 1.6"])
        .expect_code(0);
    let after = calls(&node, "waitaof");
    assert!(
        after >= before + 2,
        "WAITAOF {before} -> {after}: one for the acquire, one for the extension\n{out}"
    );
}

/// --durable on a server without WAITAOF (Redis 7.0) goes by appendfsync:
/// always is proof enough. On the suite's other servers WAITAOF serves.
#[test]
fn durable_counts_a_node_that_syncs_every_write() {
    let node = RedisNode::start_with(&["--appendonly", "yes", "--appendfsync", "always"]);
    let dir = tempdir();
    base(&node.url(), "job", &dir)
        .args(["--durable", "-c", "touch ran"])
        .expect_code(0);
    assert!(dir.has("ran"));
}

/// --durable against a node without AOF: no vote, 69 naming appendonly,
/// the command not run, no key left.
#[test]
fn durable_refuses_a_node_without_appendonly() {
    let node = RedisNode::start();
    let dir = tempdir();
    let out = base(&node.url(), "job", &dir)
        .args(["--durable", "-c", "touch ran"])
        .expect_code(69);
    assert!(!dir.has("ran"), "{out}");
    out.assert_one_error_line();
    assert!(out.stderr.contains("appendonly no"), "{out}");
    assert!(out.stderr.contains("--durable"), "{out}");
    assert!(
        node.keys().iter().all(|k| is_history_key(k)),
        "{:?}",
        node.keys()
    );
}

/// The README's least-privilege ACL line lets a run read how long a node
/// has been up; without `+info` the node gives no vote while the grace is
/// on, and the run says what to allow.
#[test]
fn the_readmes_acl_user_lets_a_run_read_the_uptime() {
    let node = RedisNode::start();
    let dir = tempdir();
    assert!(readme_acl_rules().iter().any(|r| r == "+info"));
    let locker = readme_acl_user(&node, "locker", &[]);
    let noinfo = readme_acl_user(&node, "noinfo", &["+info"]);
    come_of_age(&[&node], Duration::from_secs(2));
    let out = base(&locker, "acl", &dir)
        .env_remove(GRACE_ENV)
        .args(["-t", "2s", "--", "true"])
        .expect_code(0);
    assert_eq!(out.stderr, "", "{out}");
    let out = base(&noinfo, "acl", &dir)
        .env_remove(GRACE_ENV)
        .args(["-t", "2s", "--", "true"])
        .expect_code(75);
    assert!(out.stderr.contains("allow +info"), "{out}");
}
