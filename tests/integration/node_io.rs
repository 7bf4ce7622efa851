//! How redlock-run talks to each node when one stops answering, or should
//! not count: a release written behind an unanswered acquire (a flapping
//! node keeps no copy of a finished run's lock), verdicts that say what the
//! nodes really said, one vote per server, and authentication in plain words.
//!
//! A node frozen by SIGSTOP still completes TCP handshakes and takes what is
//! written to it into its socket buffer; it applies that in order once
//! continued (SIGCONT).

use std::time::Duration;

use crate::support::{
    Cluster, FakeServer, FaultProxy, RedisNode, RunOutput, Running, Script, Test, tempdir,
    wait_until,
};
use crate::support::{THREADS, WAIT_FOR_GO, base, lock_key};

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

#[test]
fn one_server_under_three_names_is_a_usage_error() {
    let node = RedisNode::start();
    let dir = tempdir();
    let p = node.port();
    let urls = format!("redis://127.0.0.1:{p},redis://127.0.0.1:{p}/0,redis://localhost:{p}");
    let out = base(&urls, "aliases", &dir).args(["-c", "echo ran"]).run();
    out.assert_code(64);
    assert!(!out.stdout.contains("ran"), "{out}");
    let line = out.stderr.trim();
    assert_eq!(line.lines().count(), 1, "{out}");
    assert!(line.contains("same server"), "{out}");
    assert!(
        line.contains(&format!("redis://127.0.0.1:{p} "))
            && line.contains(&format!("redis://127.0.0.1:{p}/0")),
        "names both: {out}"
    );
    assert!(node.all_keys().is_empty(), "{:?}", node.all_keys());
    // The admin commands refuse the same way.
    for admin in [&["status"][..], &["unlock", "--force"], &["history"]] {
        let out = Test::new()
            .args(admin)
            .args(["-r", &urls, "-k", "aliases"])
            .run();
        out.assert_code(64);
        assert!(out.stderr.contains("same server"), "{admin:?}: {out}");
    }
    // Passwords stay out of the line.
    let secret = RedisNode::start_with_password(&[], "s3cret-pw");
    let q = secret.port();
    let urls = format!("redis://:s3cret-pw@127.0.0.1:{q},redis://:s3cret-pw@localhost:{q}");
    let out = base(&urls, "aliases", &dir).args(["-c", "true"]).run();
    out.assert_code(64);
    assert!(!out.stderr.contains("s3cret-pw"), "{out}");
}

#[test]
fn status_tells_one_server_by_its_run_id() {
    // A second port in front of the same server: two addresses, one run_id.
    let node = RedisNode::start();
    let other = RedisNode::start();
    let proxy = FaultProxy::new(node.port());
    let urls = format!("{},{},{}", node.url(), other.url(), proxy.url());
    let out = Test::new()
        .args(["status", "-r", &urls, "-k", "run-id"])
        .run();
    out.assert_code(64);
    assert!(out.stderr.contains("same server (run_id"), "{out}");
    assert!(
        out.stderr.contains(&node.url()) && out.stderr.contains(&proxy.url()),
        "{out}"
    );
}

#[test]
fn a_run_tells_one_server_behind_a_proxy_by_its_run_id() {
    // Two of three nodes are one server, one of them through a second port:
    // the addresses differ, so only the run_id (read ahead of the acquire's
    // reply) can tell. The third node is stopped, so that the two grants of
    // the one server are what would make the quorum.
    const PW: &str = "proxied-pw";
    let node = RedisNode::start_with_password(&[], PW);
    let other = RedisNode::start_with_password(&[], PW);
    let proxy = FaultProxy::new(node.port());
    let url = |port: u16| format!("redis://:{PW}@127.0.0.1:{port}");
    let urls = format!(
        "{},{},{}",
        url(node.port()),
        url(other.port()),
        url(proxy.port())
    );
    let dir = tempdir();
    other.stop();
    let out = base(&urls, "proxied", &dir)
        .args(["--node-timeout", "500ms", "-c", "touch ran"])
        .run();
    other.cont();
    out.assert_code(64);
    assert!(!dir.has("ran"), "the command ran: {out}");
    let line = out.stderr.trim();
    assert_eq!(line.lines().count(), 1, "{out}");
    let (direct, proxied) = (
        format!("redis://:***@127.0.0.1:{}", node.port()),
        format!("redis://:***@127.0.0.1:{}", proxy.port()),
    );
    assert!(
        line.contains(&format!("{direct} and {proxied} are the same server")),
        "names both: {out}"
    );
    assert!(!out.stderr.contains(PW), "{out}");
    // The stopped node applies the acquire, then its undo written behind it.
    for n in [&node, &other] {
        let clean = wait_until(Duration::from_secs(5), || n.all_keys().is_empty());
        assert!(clean, "{}: {:?}", n.url(), n.all_keys());
    }
}

#[test]
fn a_missing_password_is_named_with_its_fix_everywhere() {
    let node = RedisNode::start_with_password(&[], "pw-needed");
    let url = format!("redis://127.0.0.1:{}", node.port());
    let dir = tempdir();
    const FIX: &str = "authentication required: give the password with --password-file or \
                       REDLOCK_PASSWORD";
    let run = base(&url, "auth", &dir)
        .env_remove("REDLOCK_PASSWORD")
        .args(["-c", "echo ran"])
        .run();
    assert!(!run.stdout.contains("ran"), "{run}");
    assert!(run.stderr.contains(FIX), "run: {run}");
    assert!(!run.stderr.contains("Protocol error"), "run: {run}");
    for admin in [
        &["status"][..],
        &["unlock", "--force"][..],
        &["history"][..],
    ] {
        let out = Test::new()
            .env_remove("REDLOCK_PASSWORD")
            .args(admin)
            .args(["-r", &url, "-k", "auth"])
            .run();
        assert!(
            out.stderr.contains(FIX) || out.stdout.contains(FIX),
            "{admin:?}: {out}"
        );
        assert!(
            !out.stdout.contains("unreachable") && !out.stderr.contains("unreachable"),
            "{admin:?}: {out}"
        );
    }
}

#[test]
fn holds_end_reaches_a_node_that_was_stopped_during_the_run() {
    // --hold leaves the lock for 1 s after the command; a node stopped for
    // the whole run gets that hold behind its acquire, so its copy lapses
    // with the others' rather than after the 30 s TTL.
    let cluster = Cluster::new(3);
    let dir = tempdir();
    let name = "hold-behind";
    cluster[2].stop();
    let out = base(&cluster.urls(), name, &dir)
        .args(["--node-timeout", "100ms", "--ttl", "30s", "--hold", "1s"])
        .args(["-c", "echo ran"])
        .run();
    cluster[2].cont();
    out.assert_code(0);
    assert!(wait_until(Duration::from_secs(5), || cluster[2].ping()));
    let pttl = cluster[2].pttl(lock_key(name));
    assert!(
        pttl <= 1_000,
        "the resumed node keeps the lock for {pttl} ms, not the hold's 1 s\n{out}"
    );
    assert!(
        wait_until(Duration::from_secs(3), || leftovers(&cluster, name)
            .is_empty()),
        "{:?}",
        leftovers(&cluster, name)
    );
}

#[test]
fn a_waiters_withdrawn_requests_are_no_node_failure() {
    // Node 2 answers every request 150 ms late, so a waiter's later tries
    // queue behind an unanswered one there; when the wait runs out, the
    // undo written behind them withdraws those tries unsent. That is the
    // run's own doing: node 2 answered all along, and nothing warns of it.
    let cluster = Cluster::new(3);
    let dir = tempdir();
    let name = "withdrawn";
    for node in cluster.iter() {
        node.set(lock_key(name), "someone-else", 30_000);
    }
    let slow = FaultProxy::new(cluster[2].port());
    slow.set_mode(crate::support::Mode::Delay(Duration::from_millis(150)));
    let urls = format!("{},{},{}", cluster[0].url(), cluster[1].url(), slow.url());
    let out = base(&urls, name, &dir)
        .args(["--wait", "1500ms", "--wait-unfair", "-c", "echo ran"])
        .run();
    out.assert_code(75);
    assert!(!out.stdout.contains("ran"), "{out}");
    let lines = out.stderr_lines();
    assert!(
        lines.len() == 2 && lines[1].contains("held elsewhere"),
        "want the wait and the busy line, no node warning:\n{out}"
    );
}

#[test]
fn nodes_are_driven_from_one_thread() {
    // Each request goes out to every node at once from the thread that makes
    // the round; no node has a thread of its own, healthy or not.
    let cluster = Cluster::new(3);
    let dir = tempdir();
    let out = base(&cluster.urls(), "one-thread", &dir)
        .args(["-c", THREADS])
        .run();
    out.assert_code(0);
    let threads: Vec<&str> = out.stdout.lines().collect();
    assert!(
        threads.iter().any(|t| t.starts_with("redlock-run")),
        "the listing must show redlock-run's own threads:\n{out}"
    );
    let workers = threads.iter().filter(|t| t.starts_with("node ")).count();
    assert_eq!(workers, 0, "no node worker on healthy nodes:\n{out}");

    // Named by host name: the addresses found as the run starts serve its
    // first connects ("localhost" may be ::1 first, where nothing listens).
    let named = cluster.urls().replace("127.0.0.1", "localhost");
    assert!(named.contains("localhost"), "{named}");
    let out = base(&named, "one-thread", &dir).args(["-c", THREADS]).run();
    out.assert_code(0);
    let workers = out
        .stdout
        .lines()
        .filter(|t| t.starts_with("node "))
        .count();
    assert_eq!(workers, 0, "no node worker on nodes named by host:\n{out}");

    // A stopped node's acquire is still unanswered when the quorum has
    // spoken: it stays owed on that node's connection, with no thread of
    // its own either.
    cluster[2].stop();
    let out = base(&cluster.urls(), "one-thread", &dir)
        .args(["--node-timeout", "300ms", "-c", THREADS])
        .run();
    cluster[2].cont();
    out.assert_code(0);
    let workers = out
        .stdout
        .lines()
        .filter(|t| t.starts_with("node "))
        .count();
    assert_eq!(workers, 0, "no node worker for a stopped node:\n{out}");
}

#[test]
fn a_stopped_nodes_wait_is_no_part_of_the_verdicts_time() {
    // The verdict is certain at the second grant. The acquire then listens a
    // moment longer for the stopped node (a second name of one server would
    // answer then), but that wait is neither counted in the verdict's time
    // nor made twice.
    let cluster = Cluster::new(3);
    let dir = tempdir();
    cluster[2].stop();
    let out = base(&cluster.urls(), "verdict-time", &dir)
        .args(["-vv", "-c", "true"])
        .run();
    cluster[2].cont();
    out.assert_code(0);
    let after = |line: &str, marker: &str| {
        let rest = &line[line.find(marker)? + marker.len()..];
        crate::support::timed::parse_debug_duration(rest.split([' ', ';', ')']).next()?)
    };
    let grants: Vec<Duration> = out
        .stderr
        .lines()
        .filter(|l| l.contains(": acquire ") || l.starts_with("redlock-run: acquire "))
        .filter_map(|l| after(l, "granted in "))
        .collect();
    let verdict = out
        .stderr
        .lines()
        .find(|l| l.contains("acquired: "))
        .and_then(|l| after(l, "a quorum within "));
    assert_eq!(grants.len(), 2, "two grants:\n{out}");
    let (Some(verdict), Some(last)) = (verdict, grants.iter().max().copied()) else {
        panic!("no verdict time:\n{out}");
    };
    assert!(
        verdict <= last + last / 2 + Duration::from_millis(1),
        "verdict after {verdict:?}, last grant after {last:?}:\n{out}"
    );
}

#[test]
fn a_refused_setup_leaves_no_key_in_any_database() {
    // Redis runs each command of a pipeline on its own: a request written
    // behind a refused AUTH runs as the default user, one behind a refused
    // SELECT in database 0. The set-up is answered before anything else is
    // written, so a refusal leaves nothing, anywhere.
    let cluster = Cluster::new(3);
    let dir = tempdir();
    let check = |urls: &str, name: &str, wording: &str| {
        let out = base(urls, name, &dir).args(["-c", "echo ran"]).run();
        for node in cluster.iter() {
            let left = node.keys_in_every_db();
            assert!(
                left.is_empty(),
                "{name}: {} keeps {left:?}\n{out}",
                node.url()
            );
        }
        out.assert_code(69);
        assert!(!out.stdout.contains("ran"), "{out}");
        assert_eq!(out.stderr_lines().len(), 1, "one line:\n{out}");
        assert!(out.stderr.contains(wording), "want {wording:?}:\n{out}");
        assert!(!out.stderr.contains("ResponseError"), "{out}");
    };

    // A password given to servers that have none (a roll-out's first step).
    let with_password: Vec<String> = cluster
        .iter()
        .map(|n| format!("redis://:pw@127.0.0.1:{}", n.port()))
        .collect();
    check(
        &with_password.join(","),
        "no-password",
        "the node refused AUTH: it has no password set for the default user",
    );

    // A database the servers do not have.
    let db99: Vec<String> = cluster
        .iter()
        .map(|n| format!("redis://127.0.0.1:{}/99", n.port()))
        .collect();
    check(&db99.join(","), "db99", "the server has no database 99");

    // A user whose ACL denies SELECT, given database 3.
    for node in cluster.iter() {
        let reply: String = node.cmd(
            redis::cmd("ACL")
                .arg("SETUSER")
                .arg("noselect")
                .arg("on")
                .arg(">pw")
                .arg("~*")
                .arg("&*")
                .arg("+@all")
                .arg("-select"),
        );
        assert_eq!(reply, "OK");
    }
    let denied: Vec<String> = cluster
        .iter()
        .map(|n| format!("redis://noselect:pw@127.0.0.1:{}/3", n.port()))
        .collect();
    check(
        &denied.join(","),
        "denied",
        "the server's ACL denies this user SELECT",
    );
}

/// Waits for `running` to end, reading its peak resident memory
/// (`VmHWM`, in KiB) from /proc as it runs.
fn with_peak_rss(mut running: Running) -> (RunOutput, u64) {
    let mut peak = 0;
    loop {
        let status = std::fs::read_to_string(format!("/proc/{}/status", running.pid()));
        if let Some(kb) = status.ok().and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        }) {
            peak = peak.max(kb);
        }
        if let Some(out) = running.wait_timeout(Duration::from_millis(2)) {
            return (out, peak);
        }
        assert!(
            running.elapsed() < Duration::from_secs(30),
            "still running after 30 s"
        );
    }
}

/// What no node may make a run use: 16 MB resident.
const RSS_CAP_KB: u64 = 16 * 1024;

#[test]
fn a_node_cannot_grow_our_memory_or_double_a_timeout() {
    let dir = tempdir();
    // Replies that never end, or end too soon: each is refused for what it
    // is, at once, whatever the timeout, and memory stays small.
    for (script, wording) in [
        (
            Script::EndlessBulk,
            "the server sent a reply of 99999999999 bytes; redlock-run expects at most 1048576",
        ),
        (
            Script::EndlessArray,
            "the server sent a reply of 100000001 values; redlock-run expects at most 65536",
        ),
        (
            Script::CloseMidReply,
            "the server ended the connection in the middle of a reply",
        ),
    ] {
        let fake = FakeServer::start(script);
        let running = base(&fake.url(None), "fake", &dir)
            .args(["--node-timeout", "1s", "-c", "echo ran"])
            .spawn();
        let (out, peak) = with_peak_rss(running);
        out.assert_code(69).assert_one_error_line();
        assert!(
            out.stderr.contains(wording),
            "{script:?}: want {wording:?}\n{out}"
        );
        assert!(!out.stdout.contains("ran"), "{out}");
        assert!(peak < RSS_CAP_KB, "{script:?}: {peak} KiB resident\n{out}");
        assert!(
            out.elapsed < Duration::from_millis(900),
            "{script:?}: {:?}\n{out}",
            out.elapsed
        );
    }

    // The set-up answered, then silence: one node timeout from the set-up's
    // write to the verdict, not one for the set-up and one for the request.
    let fake = FakeServer::start(Script::SetupThenSilent);
    let out = base(&fake.url(Some(":pw")), "fake", &dir)
        .args(["--node-timeout", "500ms", "-c", "echo ran"])
        .run();
    out.assert_code(69).assert_one_error_line();
    assert!(out.stderr.contains("no answer within 500ms"), "{out}");
    assert!(
        fake.requests() >= 2,
        "the request went out behind the set-up"
    );
    assert!(
        out.elapsed >= Duration::from_millis(450) && out.elapsed < Duration::from_millis(900),
        "one timeout, not two: {:?}\n{out}",
        out.elapsed
    );

    // An endless reply from one node of three, for a whole 2 s run that
    // extends the lock twice: the quorum does without it, memory stays small,
    // and nothing is left on the real nodes.
    let cluster = Cluster::new(2);
    let fake = FakeServer::start(Script::EndlessBulk);
    let urls = format!("{},{}", cluster.urls(), fake.url(None));
    let running = base(&urls, "fake3", &dir)
        .args(["--ttl", "3s", "-c", "sleep 2; echo ran"])
        .spawn();
    let (out, peak) = with_peak_rss(running);
    out.assert_code(0);
    assert!(out.stdout.contains("ran"), "{out}");
    assert!(peak < RSS_CAP_KB, "{peak} KiB resident\n{out}");
    assert!(
        fake.requests() >= 2,
        "the fake node was asked again by the heartbeat"
    );
    for node in cluster.iter() {
        assert!(
            node.keys().is_empty(),
            "{} keeps {:?}",
            node.url(),
            node.keys()
        );
    }
}

/// A node stopped while the command runs, on a connection of each kind that
/// is not plain TCP: the heartbeat's extension there goes unanswered, the
/// release is written behind it on the same connection as the command ends,
/// and the node applies both, in order, once it resumes.
#[test]
fn a_stopped_tls_or_cluster_node_applies_the_release_when_it_resumes() {
    let dir = tempdir();
    let stopped_and_resumed = |urls: &str,
                               extra: &[&str],
                               stop: &dyn Fn(),
                               cont: &dyn Fn(),
                               left: &dyn Fn() -> Vec<Vec<u8>>| {
        let holder = base(urls, "behind", &dir)
            .args(["--ttl", "3s", "--node-timeout", "200ms"])
            .args(extra)
            .args(["-c", &format!("touch held; {WAIT_FOR_GO}")])
            .spawn();
        crate::support::await_marker(&dir, "held", &holder);
        stop();
        // The first extension (at 1 s) goes to the stopped node too.
        std::thread::sleep(Duration::from_millis(1500));
        crate::support::touch(&dir, "go");
        let out = holder.wait();
        cont();
        out.assert_code(0);
        // Well before its copy would expire by itself (the extension sets
        // 3 s more as the node resumes).
        assert!(
            wait_until(Duration::from_millis(1000), || left().is_empty()),
            "the resumed node keeps {:?}\n{out}",
            left()
                .iter()
                .map(|k| String::from_utf8_lossy(k).into_owned())
                .collect::<Vec<_>>()
        );
        let _ = std::fs::remove_file(dir.join("held"));
        let _ = std::fs::remove_file(dir.join("go"));
    };

    // Three TLS nodes, the third stopped while the command runs.
    if crate::support::server_has_tls(
        "node_io::a_stopped_tls_or_cluster_node_applies_the_release_when_it_resumes",
    ) {
        let certs = crate::support::Certs::make();
        let tls = certs.node_tls();
        let nodes: Vec<RedisNode> = (0..3)
            .map(|_| RedisNode::start_with_tls(&[], None, Some(&tls), crate::support::free_port))
            .collect();
        let urls: Vec<String> = nodes.iter().map(RedisNode::url).collect();
        let ca = certs.pem("ca");
        stopped_and_resumed(
            &urls.join(","),
            &["--tls-ca", &ca],
            &|| nodes[2].stop(),
            &|| nodes[2].cont(),
            &|| nodes[2].keys(),
        );
    }

    // A Cluster as one node of three, the master of the lock's slot stopped.
    let cluster = crate::support::RedisCluster::new(3, 0);
    let plain = Cluster::new(2);
    let slot = cluster.keyslot(crate::support::keys("behind").lock());
    let master = cluster.master_for_slot(slot);
    let urls = format!("{},{}", cluster.url(), plain.urls());
    stopped_and_resumed(
        &urls,
        &[],
        &|| cluster.stop(master),
        &|| cluster.cont(master),
        &|| cluster.node(master).keys(),
    );
}

/// The run, and the most memory it held (KiB) as the kernel counted it:
/// getrusage of the child, through time(1). Not from this process: a child
/// forked from the harness counts the harness's memory as its own until it
/// execs, and the count survives the exec.
fn peak_rss(test: Test, dir: &crate::support::TempDir) -> (RunOutput, u64) {
    let file = dir.join("maxrss");
    let out = test
        .wrapped_in([
            std::ffi::OsStr::new("/usr/bin/time"),
            "-f".as_ref(),
            "%M".as_ref(),
            "-o".as_ref(),
            file.as_os_str(),
        ])
        .run();
    let kb = std::fs::read_to_string(&file)
        .ok()
        .and_then(|t| t.lines().last()?.trim().parse().ok())
        .unwrap_or_else(|| panic!("/usr/bin/time wrote no %M\n{out}"));
    (out, kb)
}

/// Whatever the nodes hold, no run or subcommand passes 16 MB: holder
/// records and history entries far larger than any redlock-run writes are
/// read back cut, and said so; a node that answers with more than a reply
/// may hold is refused. Peaks are the kernel's count (getrusage).
#[test]
fn records_of_any_size_keep_every_run_and_subcommand_under_16_mb() {
    let nodes = Cluster::new(3);
    let dir = tempdir();
    let k = crate::support::keys("big");
    let field = "x".repeat(900_000);
    let entry = format!("{{\"pad\":\"{}\"}}", "y".repeat(960_000));
    for node in nodes.iter() {
        node.set(k.taken(None), "someone-elses-token", 60_000);
        let mut hset = redis::cmd("HSET");
        hset.arg(k.holder(None));
        for i in 0..100 {
            hset.arg(format!("f{i}")).arg(&field);
        }
        let _: i64 = node.cmd(&hset);
        for _ in 0..100 {
            let _: i64 = node.cmd(redis::cmd("LPUSH").arg(k.history()).arg(&entry));
        }
    }
    let urls = nodes.urls();
    // What the binary takes to run at all (a debug build is most of 16 MB):
    // a run refused at its settings, which forks its guard, reads its
    // configuration and parses its arguments but reaches no node. The
    // records may add little to it.
    let (refused, floor) = peak_rss(
        Test::new().args(["-k", "big", "-r", &urls, "--kill-after", "1h", "--", "true"]),
        &dir,
    );
    refused.assert_code(64);
    let mut over = Vec::new();
    let mut measure = |what: &str, test: Test, code: i32, says: &str| {
        let (out, peak) = peak_rss(test, &dir);
        out.assert_code(code);
        assert!(
            out.stdout.contains(says) || out.stderr.contains(says),
            "{what}: {says:?}\n{out}"
        );
        eprintln!("{what}: {peak} KiB at the peak ({floor} KiB for a refused run)");
        // A debug build takes most of the 16 MB just to run (a release
        // build about 5): there, the growth is what is judged.
        if (peak >= RSS_CAP_KB && !cfg!(debug_assertions)) || peak > floor + 4096 {
            over.push(format!("{what}: {peak} KiB"));
        }
    };
    let cut = "record truncated at 8 KiB";
    measure(
        "busy run",
        base(&urls, "big", &dir).args(["--", "true"]),
        75,
        cut,
    );
    measure(
        "waiter",
        base(&urls, "big", &dir).args(["--wait", "2s", "--", "true"]),
        75,
        cut,
    );
    let admin = |args: &[&str]| {
        Test::new()
            .args(args.iter().copied())
            .args(["-k", "big", "-r", &urls])
    };
    measure("status", admin(&["status"]), 1, cut);
    measure(
        "status --json",
        admin(&["status", "--json"]),
        1,
        "\"truncated\"",
    );
    let left_out = "history record(s) longer than 8 KiB left out";
    measure("history -n 5", admin(&["history", "-n", "5"]), 0, left_out);
    measure("history --json", admin(&["history", "--json"]), 0, left_out);
    measure("forget", admin(&["forget"]), 1, "in use");

    let fake = FakeServer::start(Script::HugeRecord);
    measure(
        "a node answering 300 MB",
        base(&fake.url(None), "fake", &dir).args(["--node-timeout", "2s", "--", "true"]),
        69,
        "bytes in all; redlock-run expects at most 1048576",
    );
    assert!(
        over.is_empty(),
        "over 16 MB (a release build), or over 4 MiB more than a refused run ({floor} KiB): \
         {over:?}"
    );
}
