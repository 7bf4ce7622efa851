//! Fair waiting: `--wait` waiters queue and are served in arrival order, a
//! release wakes the head of the queue only, a waiter that dies or gives up
//! leaves the queue, and faults while waiters queue give neither a second
//! holder nor a stuck waiter. And the Redis work of one run does not grow
//! with the number of waiters.

use std::collections::BTreeMap;
use std::fs;
use std::time::{Duration, Instant};

use crate::support::{
    Cluster, Running, START, TempDir, WAIT_FOR_GO, await_marker, base, keys, tempdir, touch,
    wait_until,
};

/// ZCARD of lock `name`'s queue on node `i`.
fn queued(cluster: &Cluster, i: usize, name: &str) -> i64 {
    cluster[i].cmd(redis::cmd("ZCARD").arg(keys(name).queue()))
}

/// Waits until a quorum of the nodes has `n` waiters queued for `name`. (A
/// node where the lock happens to be free grants the head of its queue,
/// which then undoes that minority grant, so the head is not always queued
/// everywhere.)
fn await_queued(cluster: &Cluster, name: &str, n: i64, waiters: &[Running]) {
    let quorum = cluster.len() / 2 + 1;
    let ok = wait_until(START, || {
        (0..cluster.len())
            .filter(|&i| queued(cluster, i, name) == n)
            .count()
            >= quorum
    });
    if !ok {
        let per_node: Vec<i64> = (0..cluster.len())
            .map(|i| queued(cluster, i, name))
            .collect();
        let stderr: Vec<String> = waiters.iter().map(Running::stderr_so_far).collect();
        panic!(
            "want {n} queued on a quorum of the nodes, have {per_node:?}\n{}",
            stderr.join("\n---\n")
        );
    }
}

fn lines(dir: &TempDir, name: &str) -> Vec<String> {
    fs::read_to_string(dir.join(name))
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect()
}

/// A holder, then `n` waiters arriving `gap` apart (each queued before the
/// next starts, unless they do not queue), then the release; returns the
/// order the waiters ran in.
fn staggered(cluster: &Cluster, n: usize, gap: Duration, extra: &[&str]) -> Vec<String> {
    let dir = tempdir();
    let urls = cluster.urls();
    let holder = base(&urls, "fifo", &dir)
        .args(["-c", &format!("touch held; {WAIT_FOR_GO}")])
        .spawn();
    await_marker(&dir, "held", &holder);
    let mut waiters = Vec::new();
    for i in 0..n {
        waiters.push(
            base(&urls, "fifo", &dir)
                .args(["--wait", "60s"])
                .args(extra)
                .args(["-c", &format!("echo {i} >> order; sleep 0.05")])
                .spawn(),
        );
        // Arrival is the waiter's first try: let it happen before the next
        // one starts, however slow the machine.
        if extra.is_empty() {
            await_queued(cluster, "fifo", i as i64 + 1, &waiters);
        }
        std::thread::sleep(gap);
    }
    touch(&dir, "go");
    holder.wait().assert_code(0);
    for w in waiters {
        w.wait().assert_code(0);
    }
    lines(&dir, "order")
}

fn in_order(n: usize) -> Vec<String> {
    (0..n).map(|i| i.to_string()).collect()
}

#[test]
fn eight_staggered_waiters_run_in_arrival_order_on_one_and_three_nodes() {
    for nodes in [1, 3] {
        let cluster = Cluster::new(nodes);
        for round in 0..2 {
            let order = staggered(&cluster, 8, Duration::from_millis(150), &[]);
            assert_eq!(
                order,
                in_order(8),
                "{nodes} node(s), round {round}: not served in arrival order"
            );
        }
        for i in 0..nodes {
            let k = keys("fifo");
            let left: Vec<String> = cluster[i].cmd(
                redis::cmd("ZRANGE")
                    .arg(k.queue())
                    .arg(0)
                    .arg(-1)
                    .arg("WITHSCORES"),
            );
            let lapses: Vec<String> = cluster[i].cmd(redis::cmd("HGETALL").arg(k.waiters()));
            assert!(
                cluster[i].keys().is_empty(),
                "{nodes} node(s): keys left on node {i}: queue {left:?}, waiters {lapses:?}"
            );
        }
    }
}

/// The negative control: waiters that do not queue race for every release,
/// and the same check sees them out of order.
#[test]
fn unfair_waiters_are_not_served_in_arrival_order() {
    let cluster = Cluster::new(1);
    let mut orders = Vec::new();
    for _ in 0..3 {
        let order = staggered(&cluster, 8, Duration::from_millis(150), &["--wait-unfair"]);
        assert_eq!(order.len(), 8, "every waiter ran once");
        orders.push(order);
    }
    assert!(
        orders.iter().any(|o| *o != in_order(8)),
        "--wait-unfair served 3 × 8 waiters in arrival order: the order check cannot fail"
    );
}

/// A waiter killed while queued holds the queue up only until its place
/// lapses; one whose --wait runs out leaves at once.
#[test]
fn dead_and_departed_waiters_leave_the_queue() {
    let cluster = Cluster::new(3);
    let urls = cluster.urls();
    let dir = tempdir();
    let holder = base(&urls, "q", &dir)
        .args(["-c", &format!("touch held; {WAIT_FOR_GO}")])
        .spawn();
    await_marker(&dir, "held", &holder);
    let killed = base(&urls, "q", &dir)
        .args(["--wait", "60s", "-c", "touch killed-ran"])
        .spawn();
    std::thread::sleep(Duration::from_millis(150));
    let gives_up = base(&urls, "q", &dir)
        .args(["--wait", "1s", "-c", "touch gave-up-ran"])
        .spawn();
    std::thread::sleep(Duration::from_millis(150));
    let last = base(&urls, "q", &dir)
        .args(["--wait", "60s", "-c", "date +%s%N > last-ran"])
        .spawn();
    await_queued(&cluster, "q", 3, &[]);
    killed.signal(libc::SIGKILL);
    let out = gives_up.wait();
    out.assert_code(75);
    await_queued(&cluster, "q", 2, &[]);
    let released = Instant::now();
    touch(&dir, "go");
    holder.wait().assert_code(0);
    last.wait().assert_code(0);
    let waited = released.elapsed();
    assert!(!dir.has("killed-ran") && !dir.has("gave-up-ran"));
    // The killed waiter's place lapses 3 s after its last renewal.
    assert!(
        waited < Duration::from_secs(6),
        "the last waiter waited {waited:?} behind a dead one"
    );
    eprintln!("behind a killed waiter: served {waited:?} after the release");
    for i in 0..3 {
        assert_eq!(queued(&cluster, i, "q"), 0, "node {i}: queue not empty");
    }
}

/// Waiters queue on 3 nodes while one node is stopped and continued and
/// another restarted empty: they all run, one at a time, each within its
/// --wait.
#[test]
fn faults_while_waiters_queue_give_no_overlap_and_no_stuck_waiter() {
    let mut cluster = Cluster::new(3);
    let urls = cluster.urls();
    let dir = tempdir();
    // Each section checks that nobody else is inside, then stays a while.
    let section = "if [ -e inside ]; then touch overlap; fi; touch inside; sleep 0.2; \
                   rm inside; echo done >> runs";
    let holder = base(&urls, "faults", &dir)
        .args(["-c", &format!("touch held; {WAIT_FOR_GO}")])
        .spawn();
    await_marker(&dir, "held", &holder);
    let waiters: Vec<Running> = (0..6)
        .map(|_| {
            base(&urls, "faults", &dir)
                .args(["--wait", "30s", "-c", section])
                .spawn()
        })
        .collect();
    await_queued(&cluster, "faults", 6, &waiters);
    cluster[1].stop();
    touch(&dir, "go");
    holder.wait().assert_code(0);
    std::thread::sleep(Duration::from_millis(700));
    cluster[1].cont();
    cluster.node_mut(2).restart();
    let began = Instant::now();
    for w in waiters {
        let out = w.wait();
        out.assert_code(0);
    }
    assert!(!dir.has("overlap"), "two waiters ran at once");
    assert_eq!(lines(&dir, "runs").len(), 6);
    eprintln!(
        "6 waiters through a stopped node and a restart: {:?}",
        began.elapsed()
    );
}

/// Total commands a node has run (INFO commandstats), by command.
fn commandstats(node: &crate::support::RedisNode) -> BTreeMap<String, u64> {
    let info: String = node.cmd(redis::cmd("INFO").arg("commandstats"));
    info.lines()
        .filter_map(|l| {
            let (name, rest) = l.strip_prefix("cmdstat_")?.split_once(':')?;
            let calls = rest.split(',').find_map(|f| f.strip_prefix("calls="))?;
            Some((name.to_string(), calls.parse().ok()?))
        })
        .collect()
}

fn total(stats: &[BTreeMap<String, u64>]) -> u64 {
    stats
        .iter()
        .flat_map(|m| m.iter())
        .filter(|(name, _)| !matches!(name.as_str(), "info" | "ping" | "zcard"))
        .map(|(_, n)| n)
        .sum()
}

/// `n` waiters queued behind a holder on 3 nodes: Redis commands per run,
/// across the nodes.
fn commands_per_run(n: usize) -> f64 {
    let cluster = Cluster::new(3);
    let urls = cluster.urls();
    let dir = tempdir();
    let before: Vec<_> = cluster.iter().map(commandstats).collect();
    let holder = base(&urls, "work", &dir)
        .args(["-c", &format!("touch held; {WAIT_FOR_GO}")])
        .spawn();
    await_marker(&dir, "held", &holder);
    let waiters: Vec<Running> = (0..n)
        .map(|_| {
            base(&urls, "work", &dir)
                .args(["--wait", "60s", "-c", "true"])
                .spawn()
        })
        .collect();
    await_queued(&cluster, "work", n as i64, &waiters);
    touch(&dir, "go");
    holder.wait().assert_code(0);
    for w in waiters {
        w.wait().assert_code(0);
    }
    let after: Vec<_> = cluster.iter().map(commandstats).collect();
    let mut by: BTreeMap<String, u64> = BTreeMap::new();
    for (a, b) in after.iter().zip(&before) {
        for (k, v) in a {
            *by.entry(k.clone()).or_default() += v - b.get(k).copied().unwrap_or(0);
        }
    }
    eprintln!("{n} waiters: {by:?}");
    (total(&after) - total(&before)) as f64 / (n + 1) as f64
}

/// The Redis work of one run is about the same behind 2 waiters as behind
/// 20: a release wakes one waiter, not all of them.
#[test]
fn redis_work_per_run_does_not_grow_with_waiters() {
    let few = commands_per_run(2);
    let many = commands_per_run(20);
    eprintln!("commands per run over 3 nodes: {few:.1} with 2 waiters, {many:.1} with 20");
    assert!(
        many <= few * 1.5 + 3.0,
        "commands per run grew from {few:.1} (2 waiters) to {many:.1} (20 waiters)"
    );
}
