//! How redlock-run talks to each node when one stops answering, or should
//! not count: a release written behind an unanswered acquire (a flapping
//! node keeps no copy of a finished run's lock), verdicts that say what the
//! nodes really said, one vote per server, and authentication in plain words.
//!
//! A node frozen by SIGSTOP still completes TCP handshakes and takes what is
//! written to it into its socket buffer; it applies that in order once
//! continued (SIGCONT).

use std::time::Duration;

use crate::support::{Cluster, tempdir, wait_until};
use crate::support::{base, lock_key};

/// Every key of lock `name` (history aside) on every node of `cluster`.
fn leftovers(cluster: &Cluster, name: &str) -> Vec<String> {
    let prefix = lock_key(name);
    let mut left = Vec::new();
    for (i, node) in cluster.iter().enumerate() {
        for k in node.keys() {
            if k.starts_with(&prefix) {
                left.push(format!("node {i}: {}", String::from_utf8_lossy(&k)));
            }
        }
    }
    left
}

#[test]
fn a_flapping_node_keeps_no_copy_of_a_finished_run() {
    const RUNS: usize = 12;
    let cluster = Cluster::new(3);
    let dir = tempdir();
    let name = "flapping";
    let mut failures = Vec::new();
    for run in 0..RUNS {
        let stopped = run % 3;
        cluster[stopped].stop();
        let out = base(&cluster.urls(), name, &dir)
            .args(["--node-timeout", "100ms", "-c", "echo ran"])
            .run();
        cluster[stopped].cont();
        if out.code != Some(0) || out.stdout.trim() != "ran" {
            failures.push(format!("run {run} (node {stopped} stopped):\n{out}"));
        }
    }
    // A reply on a fresh connection comes after what the node had queued.
    for node in cluster.iter() {
        assert!(
            wait_until(Duration::from_secs(5), || node.ping()),
            "{} does not answer after SIGCONT",
            node.url()
        );
    }
    assert!(
        failures.is_empty(),
        "{} of {RUNS} runs did not run the command:\n{}",
        failures.len(),
        failures.join("\n")
    );
    let settled = wait_until(Duration::from_secs(2), || {
        leftovers(&cluster, name).is_empty()
    });
    assert!(
        settled,
        "keys of the lock left behind after every node resumed: {:?}",
        leftovers(&cluster, name)
    );
}

#[test]
fn without_a_quorum_the_verdict_is_unavailable_not_busy() {
    let cluster = Cluster::new(3);
    let dir = tempdir();
    cluster[0].stop();
    cluster[1].stop();
    let out = base(&cluster.urls(), "no-quorum", &dir)
        .args(["--node-timeout", "100ms", "-c", "echo ran"])
        .run();
    cluster[0].cont();
    cluster[1].cont();
    out.assert_code(69);
    assert!(!out.stdout.contains("ran"), "{out}");
    assert!(!out.stderr.contains("held elsewhere"), "{out}");
    assert!(!out.stderr.contains("the quorum did without it"), "{out}");
    for node in cluster.iter() {
        assert!(wait_until(Duration::from_secs(5), || node.ping()));
    }
    assert!(
        wait_until(Duration::from_secs(2), || leftovers(&cluster, "no-quorum")
            .is_empty()),
        "{:?}",
        leftovers(&cluster, "no-quorum")
    );
}

#[test]
fn a_split_round_warns_of_no_quorum_it_did_not_reach() {
    // One node holds another token, one is stopped, one grants: a token is
    // really seen (busy), but no quorum agreed on anything.
    let cluster = Cluster::new(3);
    let dir = tempdir();
    let name = "split";
    cluster[0].set(lock_key(name), "someone-else", 30_000);
    cluster[1].stop();
    let out = base(&cluster.urls(), name, &dir)
        .args(["--node-timeout", "100ms", "-c", "echo ran"])
        .run();
    cluster[1].cont();
    out.assert_code(75);
    assert!(!out.stdout.contains("ran"), "{out}");
    assert!(out.stderr.contains("held elsewhere"), "{out}");
    assert!(!out.stderr.contains("the quorum did without it"), "{out}");
    assert!(wait_until(Duration::from_secs(5), || cluster[1].ping()));
    // Only the other holder's copy is left.
    assert!(
        wait_until(Duration::from_secs(2), || leftovers(&cluster, name)
            == vec![format!("node 0: lock:{name}")]),
        "{:?}",
        leftovers(&cluster, name)
    );
}
