//! Readers and writers (`--shared`): readers run together, a writer runs
//! alone; a waiting writer is not overtaken by readers that come after it;
//! a reader's share expires by its TTL when the reader dies, and a lost
//! share stops the reader's tree (76); `status`, `unlock`, `forget`,
//! `history`, `--report` and `--metrics-file` know readers.

use std::fs;
use std::time::{Duration, Instant};

use crate::support::{
    Cluster, RedisCluster, Running, START, TempDir, WAIT_FOR_GO, base, keys, lock_key, tempdir,
    touch, wait_until,
};

/// A run of `name` with `args` whose command marks `marker` and holds until
/// `go` appears; returned once the marker is there.
fn holding(urls: &str, name: &str, dir: &TempDir, args: &[&str], marker: &str) -> Running {
    let running = base(urls, name, dir)
        .args(args)
        .args(["-c", &format!("touch {marker}; {WAIT_FOR_GO}")])
        .spawn();
    assert!(
        wait_until(START, || dir.has(marker)),
        "{marker} did not run\n{}",
        running.stderr_so_far()
    );
    running
}

/// The live reader entries of `name` on each node.
fn readers_on(cluster: &Cluster, name: &str) -> Vec<Vec<Vec<u8>>> {
    let set = keys(name).readers();
    cluster
        .iter()
        .map(|n| n.cmd(redis::cmd("ZRANGE").arg(&set).arg(0).arg(-1)))
        .collect()
}

/// Asserts that the nodes come to hold `want` live readers of `name`
/// within 5 s: each reader's entry on a quorum of nodes, and no other. A
/// reader starts its command once a quorum has granted, and the last
/// node's grant can land just after (on a busy machine it did, after the
/// test had looked) or not at all (a node overdue is done without, as
/// degraded mode allows: [3, 3, 0] once, and [3, 2, 2] with each reader on
/// two nodes). Counts alone cannot tell the second from a reader missing.
fn assert_readers(cluster: &Cluster, name: &str, want: usize) {
    let quorum = cluster.iter().count() / 2 + 1;
    let fits = |have: &[Vec<Vec<u8>>]| {
        let mut readers: Vec<&Vec<u8>> = have.iter().flatten().collect();
        readers.sort();
        readers.dedup();
        readers.len() == want
            && readers
                .iter()
                .all(|r| have.iter().filter(|node| node.contains(r)).count() >= quorum)
    };
    let mut have = readers_on(cluster, name);
    wait_until(Duration::from_secs(5), || {
        have = readers_on(cluster, name);
        have.iter().all(|node| node.len() == want)
    });
    let counts: Vec<usize> = have.iter().map(Vec::len).collect();
    assert!(
        fits(&have),
        "live reader entries on each node: {counts:?}, want {want} readers, each on a quorum"
    );
}

#[test]
fn readers_run_together_and_a_writer_runs_alone() {
    let cluster = Cluster::new(3);
    let urls = cluster.urls();
    let dir = tempdir();
    let name = "rw";
    let readers: Vec<Running> = (0..3)
        .map(|i| holding(&urls, name, &dir, &["--shared"], &format!("reader{i}")))
        .collect();
    assert_readers(&cluster, name, 3);
    // A writer's single try is busy, and says by whom.
    let out = base(&urls, name, &dir)
        .args(["-c", "touch writer-ran"])
        .run();
    out.assert_code(75);
    assert!(out.stderr.contains("shared by 3 --shared readers"), "{out}");
    assert!(!dir.has("writer-ran"), "a writer ran beside readers");
    // A --limit run is kept out as a writer is.
    base(&urls, name, &dir)
        .args(["--limit", "2", "-c", "touch limit-ran"])
        .expect_code(75);
    assert!(!dir.has("limit-ran"));
    // A fourth reader's single try joins them (short-flag form).
    base(&urls, name, &dir)
        .args(["-s", "-c", "touch fourth"])
        .expect_code(0);
    assert!(dir.has("fourth"));
    touch(&dir, "go");
    for r in readers {
        r.wait().assert_code(0);
    }
    fs::remove_file(dir.join("go")).expect("rm go");
    assert_readers(&cluster, name, 0);

    // A writer holds: a reader's single try is busy, naming the writer.
    let writer = holding(&urls, name, &dir, &[], "writer");
    let out = base(&urls, name, &dir)
        .args(["--shared", "-c", "touch reader-ran"])
        .run();
    out.assert_code(75);
    assert!(out.stderr.contains("held elsewhere, by "), "{out}");
    assert!(!dir.has("reader-ran"), "a reader ran beside a writer");
    // So is another writer.
    base(&urls, name, &dir)
        .args(["-c", "touch writer2-ran"])
        .expect_code(75);
    touch(&dir, "go");
    writer.wait().assert_code(0);
    for (i, node) in cluster.iter().enumerate() {
        let left: Vec<Vec<u8>> = node
            .keys()
            .into_iter()
            .filter(|k| !crate::support::is_history_key(k))
            .collect();
        assert!(left.is_empty(), "node {i}: keys left: {left:?}");
    }
}

#[test]
fn a_waiting_writer_runs_before_readers_that_came_after_it() {
    let cluster = Cluster::new(3);
    let urls = cluster.urls();
    let dir = tempdir();
    let name = "fair";
    let first = holding(&urls, name, &dir, &["--shared"], "first");
    // The writer queues behind the reader.
    let writer = base(&urls, name, &dir)
        .args(["--wait", "60s", "-c", "date +%s%N > writer.at; sleep 0.3"])
        .spawn();
    let queue = keys(name).queue();
    assert!(
        wait_until(START, || cluster
            .iter()
            .filter(|n| n.cmd::<i64>(redis::cmd("ZCARD").arg(&queue)) >= 1)
            .count()
            >= 2),
        "the writer did not queue\n{}",
        writer.stderr_so_far()
    );
    // A reader's single try would pass the waiting writer: it is busy.
    let out = base(&urls, name, &dir)
        .args(["--shared", "-c", "touch jumped"])
        .run();
    out.assert_code(75);
    assert!(!dir.has("jumped"), "a reader's single try passed a writer");
    // Five readers arrive one by one, each after the last has queued.
    let mut later = Vec::new();
    for i in 0..5 {
        later.push(
            base(&urls, name, &dir)
                .args([
                    "--shared",
                    "--wait",
                    "60s",
                    "-c",
                    &format!("date +%s%N > reader{i}.at"),
                ])
                .spawn(),
        );
        let want = 2 + i as i64;
        assert!(
            wait_until(START, || cluster
                .iter()
                .filter(|n| n.cmd::<i64>(redis::cmd("ZCARD").arg(&queue)) >= want)
                .count()
                >= 2),
            "reader {i} did not queue"
        );
    }
    // Meanwhile the first reader still runs alone: nobody went in.
    assert!(!dir.has("writer.at") && !dir.has("reader0.at"));
    touch(&dir, "go");
    first.wait().assert_code(0);
    writer.wait().assert_code(0);
    for r in later {
        r.wait().assert_code(0);
    }
    let at = |f: &str| -> u128 {
        fs::read_to_string(dir.join(f))
            .expect(f)
            .trim()
            .parse()
            .expect("ns")
    };
    let w = at("writer.at");
    let readers: Vec<u128> = (0..5).map(|i| at(&format!("reader{i}.at"))).collect();
    assert!(
        readers.iter().all(|r| *r > w + 250_000_000),
        "a reader went in before the writer was done: writer at {w}, readers at {readers:?}"
    );
}

#[test]
fn readers_queued_together_go_in_together() {
    let cluster = Cluster::new(3);
    let urls = cluster.urls();
    let dir = tempdir();
    let name = "together";
    let writer = holding(&urls, name, &dir, &[], "writer");
    let queue = keys(name).queue();
    let readers: Vec<Running> = (0..3)
        .map(|i| {
            let r = base(&urls, name, &dir)
                .args([
                    "--shared",
                    "--wait",
                    "60s",
                    "-c",
                    &format!("touch in{i}; {}", WAIT_FOR_GO.replace("-e go ", "-e go2 ")),
                ])
                .spawn();
            let want = 1 + i as i64;
            assert!(
                wait_until(START, || cluster
                    .iter()
                    .filter(|n| n.cmd::<i64>(redis::cmd("ZCARD").arg(&queue)) >= want)
                    .count()
                    >= 2),
                "reader {i} did not queue"
            );
            r
        })
        .collect();
    touch(&dir, "go");
    writer.wait().assert_code(0);
    // All three are inside at once.
    assert!(
        wait_until(Duration::from_secs(5), || (0..3)
            .all(|i| dir.has(format!("in{i}")))),
        "the readers did not all go in"
    );
    assert_readers(&cluster, name, 3);
    touch(&dir, "go2");
    for r in readers {
        r.wait().assert_code(0);
    }
}

#[test]
fn a_killed_readers_share_expires_for_a_waiting_writer() {
    let cluster = Cluster::new(3);
    let urls = cluster.urls();
    let dir = tempdir();
    let name = "killed";
    let reader = holding(&urls, name, &dir, &["--shared", "--ttl", "2s"], "reader");
    let writer = base(&urls, name, &dir)
        .args(["--wait", "20s", "-c", "touch writer-ran"])
        .spawn();
    thread_sleep(Duration::from_millis(300));
    assert!(!dir.has("writer-ran"));
    let killed = Instant::now();
    reader.signal(libc::SIGKILL);
    let out = writer.wait();
    out.assert_code(0);
    let waited = killed.elapsed();
    assert!(dir.has("writer-ran"));
    // The share lapses at most a TTL after its last renewal; the waiter
    // looks again within a second. The rest allows for a loaded machine:
    // beside two busy loops the writer got in 3.7 s after the kill.
    assert!(
        waited < Duration::from_millis(2000 + 1000 + 1000),
        "the writer got the lock {waited:?} after the reader was killed\n{out}"
    );
}

fn thread_sleep(d: Duration) {
    std::thread::sleep(d);
}

#[test]
fn a_lost_share_stops_the_reader_with_76() {
    let cluster = Cluster::new(3);
    let urls = cluster.urls();
    let dir = tempdir();
    let name = "lost";
    let a = holding(&urls, name, &dir, &["--shared", "--ttl", "3s"], "a");
    let b = holding(&urls, name, &dir, &["--shared", "--ttl", "3s"], "b");
    // unlock --token removes one reader's share only.
    let status = crate::support::Test::new()
        .args(["status", "-r", &urls, "-k", name, "--json"])
        .run();
    status.assert_code(1);
    let doc: serde_json::Value = serde_json::from_str(&status.stdout).expect("status json");
    assert_eq!(doc["verdict"], "shared", "{status}");
    let shares = doc["readers"].as_array().expect("readers");
    assert_eq!(shares.len(), 2, "{status}");
    let token_a = shares
        .iter()
        .find(|s| s["holder"]["pid"] == a.pid())
        .and_then(|s| s["token_prefix"].as_str())
        .expect("a's share")
        .to_string();
    let unlock = crate::support::Test::new()
        .args(["unlock", "-r", &urls, "-k", name, "--token", &token_a])
        .run();
    unlock.assert_code(0);
    let out = a.wait();
    out.assert_code(76);
    assert!(!dir.has("go"));
    assert_readers(&cluster, name, 1);
    // unlock --force takes every share, naming the reader.
    let force = crate::support::Test::new()
        .args(["unlock", "-r", &urls, "-k", name, "--force"])
        .run();
    force.assert_code(0);
    assert!(
        force.stdout.contains(&format!("pid {} (", b.pid()))
            && force.stdout.contains("was shared by "),
        "{force}"
    );
    b.wait().assert_code(76);
}

#[test]
fn status_shows_each_reader() {
    let cluster = Cluster::new(3);
    let urls = cluster.urls();
    let dir = tempdir();
    let name = "shown";
    let a = holding(&urls, name, &dir, &["--shared"], "a");
    let b = holding(&urls, name, &dir, &["--shared"], "b");
    let out = crate::support::Test::new()
        .args(["status", "-r", &urls, "-k", name])
        .run();
    out.assert_code(1);
    assert!(out.stdout.contains("shared by 2 readers"), "{out}");
    for r in [&a, &b] {
        assert!(
            out.stdout.contains(&format!("pid {} (", r.pid())),
            "reader {} not shown\n{out}",
            r.pid()
        );
    }
    assert!(out.stdout.contains("on 3/3 node(s)"), "{out}");
    touch(&dir, "go");
    a.wait().assert_code(0);
    b.wait().assert_code(0);
    let out = crate::support::Test::new()
        .args(["status", "-r", &urls, "-k", name])
        .run();
    out.assert_code(0);
}

#[test]
fn forget_leaves_a_shared_lock_alone_unless_forced() {
    let cluster = Cluster::new(3);
    let urls = cluster.urls();
    let dir = tempdir();
    let name = "forgotten";
    let reader = holding(&urls, name, &dir, &["--shared"], "reader");
    let out = crate::support::Test::new()
        .args(["forget", "-r", &urls, "-k", name])
        .run();
    out.assert_code(1);
    assert!(
        out.stdout.contains("shared by readers: left alone"),
        "{out}"
    );
    assert_readers(&cluster, name, 1);
    crate::support::Test::new()
        .args(["forget", "-r", &urls, "-k", name, "--force"])
        .expect_code(0);
    assert_readers(&cluster, name, 0);
    reader.wait().assert_code(76);
}

#[test]
fn shared_with_limit_or_fence_is_a_usage_error() {
    let cluster = Cluster::new(1);
    let dir = tempdir();
    for extra in [&["--limit", "2"][..], &["--fence"][..]] {
        let out = base(&cluster.urls(), "mixed", &dir)
            .arg("--shared")
            .args(extra)
            .args(["-c", "touch ran"])
            .run();
        out.assert_code(64);
        out.assert_one_error_line();
        assert!(!dir.has("ran"));
        assert!(cluster[0].keys().is_empty(), "{out}");
    }
}

#[test]
fn history_report_and_metrics_say_which_kind_each_run_was() {
    let cluster = Cluster::new(3);
    let urls = cluster.urls();
    let dir = tempdir();
    let name = "kinds";
    let metrics = dir.join("runs.prom");
    for (shared, report) in [(true, "reader.json"), (false, "writer.json")] {
        let mut t = base(&urls, name, &dir).args([
            "--report",
            report,
            "--metrics-file",
            metrics.to_str().expect("utf-8"),
        ]);
        if shared {
            t = t.arg("--shared");
        }
        t.args(["-c", "true"]).expect_code(0);
        let doc: serde_json::Value =
            serde_json::from_slice(&fs::read(dir.join(report)).expect("report")).expect("json");
        assert_eq!(
            doc["lock"],
            if shared { "shared" } else { "exclusive" },
            "{doc}"
        );
    }
    let out = crate::support::Test::new()
        .args(["history", "-r", &urls, "-k", name, "--json"])
        .run();
    out.assert_code(0);
    let runs: serde_json::Value = serde_json::from_str(&out.stdout).expect("history json");
    let kinds: Vec<&str> = runs
        .as_array()
        .expect("array")
        .iter()
        .filter_map(|r| r["lock"].as_str())
        .collect();
    assert_eq!(kinds, ["exclusive", "shared"], "{out}");
    let text = crate::support::Test::new()
        .args(["history", "-r", &urls, "-k", name])
        .run();
    assert!(text.stdout.contains("LOCK"), "{text}");
    let prom = fs::read_to_string(&metrics).expect("metrics");
    assert!(
        prom.contains(&format!(
            "redlock_run_runs_total{{key=\"{name}\",lock=\"shared\",outcome=\"ok\"}} 1"
        )),
        "{prom}"
    );
    assert!(
        prom.contains(&format!(
            "redlock_run_runs_total{{key=\"{name}\",outcome=\"ok\"}} 1"
        )),
        "{prom}"
    );
}

#[test]
fn readers_and_writers_on_a_redis_cluster() {
    let cluster = RedisCluster::new(3, 0);
    let url = cluster.url();
    let dir = tempdir();
    let name = "clustered";
    let a = holding(&url, name, &dir, &["--shared"], "a");
    let b = holding(&url, name, &dir, &["--shared"], "b");
    base(&url, name, &dir)
        .args(["-c", "touch writer-ran"])
        .expect_code(75);
    assert!(!dir.has("writer-ran"));
    touch(&dir, "go");
    a.wait().assert_code(0);
    b.wait().assert_code(0);
    base(&url, name, &dir)
        .args(["-c", "touch writer-ran"])
        .expect_code(0);
    assert!(dir.has("writer-ran"));
    assert!(
        !cluster.exists(&lock_key(name)),
        "the writer's lock was left"
    );
}

#[test]
fn readers_and_writers_through_a_sentinel_group() {
    let group = crate::support::SentinelGroup::builder().replicas(1).start();
    let url = group.url();
    let dir = tempdir();
    let name = "watched";
    let a = holding(&url, name, &dir, &["--shared"], "a");
    base(&url, name, &dir)
        .args(["--shared", "-c", "touch second"])
        .expect_code(0);
    base(&url, name, &dir)
        .args(["-c", "touch writer-ran"])
        .expect_code(75);
    assert!(dir.has("second") && !dir.has("writer-ran"));
    touch(&dir, "go");
    a.wait().assert_code(0);
    base(&url, name, &dir)
        .args(["-c", "touch writer-ran"])
        .expect_code(0);
    assert!(dir.has("writer-ran"));
}

/// The README's least-privilege ACL line is enough for a reader, and for a
/// writer that a reader keeps out.
#[test]
fn the_readmes_acl_user_can_read_and_write() {
    let node = crate::support::RedisNode::start();
    let dir = tempdir();
    let url = crate::support::readme_acl_user(&node, "locker", &[]);
    let reader = holding(&url, "acl", &dir, &["--shared", "--wait", "5s"], "reader");
    let out = base(&url, "acl", &dir)
        .args(["-c", "touch writer-ran"])
        .run();
    out.assert_code(75);
    assert!(out.stderr.contains("shared by 1 --shared reader"), "{out}");
    touch(&dir, "go");
    reader.wait().assert_code(0);
    base(&url, "acl", &dir)
        .args(["-c", "touch writer-ran"])
        .expect_code(0);
}
