//! Foundation tests: exit codes, usage errors, mutual exclusion, quorum with
//! failed nodes, heartbeat, lost lock, signals, crash cleanup, foreign
//! tokens and hostile key names. Plus self-checks of the fixtures.
//!
//! Commands run with the test's temp dir as working directory, so marker
//! files (`touch ran`) are relative names checked with `dir.has("ran")`.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::time::{Duration, Instant};

use crate::support::{
    Cluster, FaultProxy, Mode, RedisNode, Test, descendant_pids, is_token, kill_if_alive, lock_key,
    pid_alive, process_name, read_pid_file, show, tempdir, wait_until,
};
use crate::support::{START, THREADS, WAIT_FOR_GO, await_marker, base, touch};

// ---------------------------------------------------------------------------
// 1. Exit codes, usage errors, environment of the command
// ---------------------------------------------------------------------------

#[test]
fn exit_code_passthrough() {
    let node = RedisNode::start();
    let dir = tempdir();
    let url = node.url();
    let key = lock_key("codes");

    let cases: [(&[&str], i32); 6] = [
        (&["-c", "exit 0"], 0),
        (&["-c", "exit 7"], 7),
        (&["-c", "touch ran-c; exit 42"], 42),
        (&["--", "sh", "-c", "exit 0"], 0),
        (&["--", "sh", "-c", "exit 7"], 7),
        (&["--", "sh", "-c", "touch ran-argv; exit 3"], 3),
    ];
    for (args, code) in cases {
        base(&url, "codes", &dir).args(args).expect_code(code);
        assert!(!node.exists(&key), "key left behind after {args:?}");
    }
    assert!(
        dir.has("ran-c") && dir.has("ran-argv"),
        "commands did not run"
    );

    // 126: exists but is not executable.
    let script = dir.join("not-executable.sh");
    fs::write(&script, "#!/bin/sh\ntouch ran-126\n").expect("write script");
    fs::set_permissions(&script, fs::Permissions::from_mode(0o644)).expect("chmod 644");
    let out = base(&url, "codes", &dir)
        .arg("--")
        .arg(&script)
        .expect_code(126);
    assert!(!dir.has("ran-126"), "non-executable file ran?\n{out}");
    assert!(!node.exists(&key), "key left behind after 126\n{out}");

    // 127: not found, by path and by PATH lookup.
    for missing in [
        "/nonexistent-dir-redlock/no-such-command",
        "redlock-run-no-such-command-xyz",
    ] {
        let out = base(&url, "codes", &dir)
            .args(["--", missing])
            .expect_code(127);
        assert!(!node.exists(&key), "key left behind after 127\n{out}");
    }
    assert!(node.keys().is_empty(), "keys left: {:?}", node.keys());
}

#[test]
fn usage_errors_exit_64_with_one_line() {
    let node = RedisNode::start();
    let dir = tempdir();
    let url = node.url();
    let mixed = format!("{url},notaurl://x");

    let cases: Vec<(&str, Vec<&str>)> = vec![
        (
            "unknown flag",
            vec!["-r", &url, "-k", "u", "--no-such-flag", "-c", "touch ran"],
        ),
        (
            "bad duration",
            vec!["-r", &url, "-k", "u", "--ttl", "soon", "-c", "touch ran"],
        ),
        (
            "bad url",
            vec!["-r", "notaurl://x", "-k", "u", "-c", "touch ran"],
        ),
        (
            "bad url among good ones",
            vec!["-r", &mixed, "-k", "u", "-c", "touch ran"],
        ),
        ("missing command", vec!["-r", &url, "-k", "u"]),
        ("missing key", vec!["-r", &url, "-c", "touch ran"]),
        (
            "both -c and trailing command",
            vec![
                "-r",
                &url,
                "-k",
                "u",
                "-c",
                "touch ran",
                "--",
                "touch",
                "ran2",
            ],
        ),
        (
            "node-timeout > ttl/10",
            vec![
                "-r",
                &url,
                "-k",
                "u",
                "--ttl",
                "1s",
                "--node-timeout",
                "500ms",
                "-c",
                "touch ran",
            ],
        ),
    ];
    let mut failures = Vec::new();
    for (what, args) in cases {
        let out = Test::new().current_dir(dir.path()).args(&args).run();
        let one_line = out.stderr.starts_with("redlock-run: ")
            && out.stderr.ends_with('\n')
            && out.stderr.matches('\n').count() == 1;
        if out.code != Some(64) || !one_line {
            failures.push(format!(
                "[{what}] want exit 64 and one 'redlock-run: ' stderr line\n{out}"
            ));
        }
        if dir.has("ran") || dir.has("ran2") {
            failures.push(format!("[{what}] the command ran\n{out}"));
        }
        let keys = node.keys();
        if !keys.is_empty() {
            failures.push(format!("[{what}] keys on the node afterwards: {keys:?}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// Parses `env` output, returning the value of `name` (single-line values).
fn env_value(env: &str, name: &str) -> Option<String> {
    env.lines()
        .find_map(|l| l.strip_prefix(&format!("{name}=")))
        .map(str::to_string)
}

#[test]
fn command_sees_key_and_token() {
    let cluster = Cluster::new(3);
    let dir = tempdir();
    let running = base(&cluster.urls(), "envtest", &dir)
        // A token in the caller's environment must not leak through.
        .env("REDLOCK_TOKEN", "00000000000000000000000000000000")
        .args(["-c", &format!("env > env.txt; touch ready; {WAIT_FOR_GO}")])
        .spawn();
    await_marker(&dir, "ready", &running);

    let env = fs::read_to_string(dir.join("env.txt")).expect("read env.txt");
    assert_eq!(
        env_value(&env, "REDLOCK_KEY").as_deref(),
        Some("envtest"),
        "env:\n{env}"
    );
    let token = env_value(&env, "REDLOCK_TOKEN").expect("REDLOCK_TOKEN in env");
    assert!(
        is_token(token.as_bytes()),
        "token {token:?} is not 32 hex chars"
    );
    assert_ne!(token, "00000000000000000000000000000000", "inherited token");
    let values = cluster.values(lock_key("envtest"));
    for (i, v) in values.iter().enumerate() {
        assert_eq!(
            v.as_deref(),
            Some(token.as_bytes()),
            "node {i} holds {:?}, command got {token}",
            v.as_deref().map(show)
        );
    }

    touch(&dir, "go");
    running.wait().assert_code(0);
    assert!(cluster.holders(lock_key("envtest")).is_empty());
}

#[test]
fn configuration_from_environment_and_prefix() {
    let cluster = Cluster::new(3);
    let dir = tempdir();

    // REDLOCK_REDIS (comma-separated) and REDLOCK_KEY instead of flags.
    let running = Test::new()
        .current_dir(dir.path())
        .env("REDLOCK_REDIS", cluster.urls())
        .env("REDLOCK_KEY", "fromenv")
        .args(["-c", &format!("touch ready; {WAIT_FOR_GO}")])
        .spawn();
    await_marker(&dir, "ready", &running);
    cluster.await_on_all(lock_key("fromenv"));
    touch(&dir, "go");
    running.wait().assert_code(0);
    assert!(cluster.holders(lock_key("fromenv")).is_empty());

    // --prefix replaces "lock:"; -r may be repeated.
    fs::remove_file(dir.join("ready")).expect("rm ready");
    fs::remove_file(dir.join("go")).expect("rm go");
    let mut test = Test::new().current_dir(dir.path());
    for node in cluster.iter() {
        test = test.args(["-r", &node.url()]);
    }
    let running = test
        .args(["-k", "pfx", "--prefix", "custom/"])
        .args(["-c", &format!("touch ready; {WAIT_FOR_GO}")])
        .spawn();
    await_marker(&dir, "ready", &running);
    cluster.await_on_all("custom/pfx");
    assert!(cluster.holders(lock_key("pfx")).is_empty());
    touch(&dir, "go");
    running.wait().assert_code(0);
    for node in cluster.iter() {
        assert!(node.keys().is_empty(), "keys left: {:?}", node.keys());
    }
}

// ---------------------------------------------------------------------------
// 2. Mutual exclusion
// ---------------------------------------------------------------------------

#[test]
fn busy_lock_refuses_second_run() {
    let cluster = Cluster::new(3);
    let dir = tempdir();
    let urls = cluster.urls();
    let key = lock_key("busy");
    let holder = base(&urls, "busy", &dir)
        .args(["-c", &format!("touch started; {WAIT_FOR_GO}")])
        .spawn();
    await_marker(&dir, "started", &holder);
    let token = cluster.await_value(0, &key);
    assert!(
        is_token(&token),
        "stored value {} is not a token",
        show(&token)
    );

    let out = base(&urls, "busy", &dir)
        .args(["-c", "touch c1"])
        .expect_code(75);
    out.assert_one_error_line();
    assert!(!dir.has("c1"), "contender's command ran\n{out}");

    let out = base(&urls, "busy", &dir)
        .args(["-E", "3", "-c", "touch c2"])
        .expect_code(3);
    assert!(!dir.has("c2"), "contender's command ran (-E 3)\n{out}");

    let out = base(&urls, "busy", &dir)
        .args(["-q", "-c", "touch c3"])
        .expect_code(75);
    assert_eq!(out.stderr, "", "-q must silence the busy message\n{out}");
    assert!(!dir.has("c3"), "contender's command ran (-q)\n{out}");

    // The refused contenders must not have touched the holder's keys.
    for (i, v) in cluster.values(&key).iter().enumerate() {
        assert_eq!(
            v.as_deref(),
            Some(&token[..]),
            "node {i} value changed by a contender"
        );
    }

    touch(&dir, "go");
    holder.wait().assert_code(0);
    assert!(
        cluster.holders(&key).is_empty(),
        "key left on nodes {:?}",
        cluster.holders(&key)
    );
}

// ---------------------------------------------------------------------------
// 3. Failed nodes
// ---------------------------------------------------------------------------

#[test]
fn one_stopped_node_of_three_is_tolerated() {
    let cluster = Cluster::new(3);
    let dir = tempdir();
    let key = lock_key("stopped1");
    cluster[0].stop();
    let out = base(&cluster.urls(), "stopped1", &dir)
        .args(["--node-timeout", "200ms", "-c", "touch ran"])
        .expect_code(0);
    assert!(dir.has("ran"), "command did not run\n{out}");
    assert!(
        out.elapsed < Duration::from_secs(3),
        "took {:?} with one stopped node\n{out}",
        out.elapsed
    );
    assert!(!cluster[1].exists(&key) && !cluster[2].exists(&key));
    cluster[0].cont();
}

#[test]
fn one_killed_node_of_three_is_tolerated() {
    let mut cluster = Cluster::new(3);
    let dir = tempdir();
    let key = lock_key("killed1");
    let urls = cluster.urls();
    cluster.node_mut(0).kill();
    let out = base(&urls, "killed1", &dir)
        .args(["--node-timeout", "200ms", "-c", "touch ran"])
        .expect_code(0);
    assert!(dir.has("ran"), "command did not run\n{out}");
    assert!(
        out.elapsed < Duration::from_secs(3),
        "took {:?} with one killed node\n{out}",
        out.elapsed
    );
    assert!(!cluster[1].exists(&key) && !cluster[2].exists(&key));
}

#[test]
fn two_stopped_nodes_of_three_is_unavailable() {
    let cluster = Cluster::new(3);
    let dir = tempdir();
    cluster[0].stop();
    cluster[1].stop();
    let out = base(&cluster.urls(), "stopped2", &dir)
        .args(["--node-timeout", "200ms", "-c", "touch ran"])
        .expect_code(69);
    out.assert_one_error_line();
    assert!(!dir.has("ran"), "command ran without quorum\n{out}");
    assert!(
        out.elapsed < Duration::from_secs(3),
        "took {:?}\n{out}",
        out.elapsed
    );
    assert!(
        cluster[2].keys().is_empty(),
        "live node keeps {:?}\n{out}",
        cluster[2].keys()
    );
    // Whatever was queued to the frozen nodes is processed now; the release
    // must leave nothing behind there either.
    cluster[0].cont();
    cluster[1].cont();
    std::thread::sleep(Duration::from_millis(500));
    for (i, node) in cluster.iter().enumerate() {
        assert!(
            node.keys().is_empty(),
            "node {i} keeps {:?} after CONT",
            node.keys()
        );
    }
}

#[test]
fn two_killed_nodes_of_three_is_unavailable() {
    let mut cluster = Cluster::new(3);
    let dir = tempdir();
    let urls = cluster.urls();
    cluster.node_mut(0).kill();
    cluster.node_mut(1).kill();
    let out = base(&urls, "killed2", &dir)
        .args(["--node-timeout", "200ms", "-c", "touch ran"])
        .expect_code(69);
    out.assert_one_error_line();
    assert!(!dir.has("ran"), "command ran without quorum\n{out}");
    assert!(
        out.elapsed < Duration::from_secs(3),
        "took {:?}\n{out}",
        out.elapsed
    );
    assert!(
        cluster[2].keys().is_empty(),
        "live node keeps {:?}\n{out}",
        cluster[2].keys()
    );

    // A single node that is down.
    let mut single = RedisNode::start();
    let url = single.url();
    single.kill();
    let out = base(&url, "killed2", &dir)
        .args(["-c", "touch ran"])
        .expect_code(69);
    out.assert_one_error_line();
    assert!(!dir.has("ran"), "command ran without any node\n{out}");
}

#[test]
fn faulty_connections_via_proxy() {
    let cluster = Cluster::new(3);
    let dir = tempdir();
    let p0 = FaultProxy::new(cluster[0].port());
    let p1 = FaultProxy::new(cluster[1].port());
    let urls = format!("{},{},{}", p0.url(), p1.url(), cluster[2].url());
    let key = lock_key("proxied");
    // A 2 s TTL: what a node that did not answer in time may keep (a
    // minority copy, not waited for) expires within the test.
    let run = |marker: &str| {
        base(&urls, "proxied", &dir)
            .args(["-t", "2s", "--node-timeout", "200ms"])
            .args(["-c", &format!("touch {marker}")])
            .run()
    };

    let out = run("pass");
    out.assert_code(0);
    assert!(dir.has("pass"));

    for (mode, marker) in [
        (Mode::BlackHole, "blackhole"),
        (Mode::Reset, "reset"),
        (Mode::Delay(Duration::from_secs(1)), "delay"),
    ] {
        p0.set_mode(mode);
        let out = run(marker);
        out.assert_code(0);
        assert!(dir.has(marker), "[{mode:?}] command did not run\n{out}");
        assert!(
            out.elapsed < Duration::from_secs(3),
            "[{mode:?}] took {:?}\n{out}",
            out.elapsed
        );
        assert!(
            !cluster[1].exists(&key) && !cluster[2].exists(&key),
            "[{mode:?}] key left on a healthy node"
        );
    }

    // Two of three unusable: unavailable, and nothing is left once the
    // delayed traffic has drained and what it set has expired.
    p0.set_mode(Mode::BlackHole);
    p1.set_mode(Mode::Delay(Duration::from_secs(1)));
    let out = run("no-quorum");
    out.assert_code(69);
    assert!(!dir.has("no-quorum"), "command ran without quorum\n{out}");
    assert!(
        out.elapsed < Duration::from_secs(3),
        "took {:?}\n{out}",
        out.elapsed
    );
    p0.set_mode(Mode::Pass);
    p1.set_mode(Mode::Pass);
    // The delayed SET lands about 1 s in: its copy lives for the 2 s TTL.
    wait_until(Duration::from_secs(4), || {
        cluster.iter().all(|n| n.keys().is_empty())
    });
    for (i, node) in cluster.iter().enumerate() {
        assert!(
            node.keys().is_empty(),
            "node {i} keeps {:?} after the delayed traffic drained",
            node.keys()
        );
    }
}

// ---------------------------------------------------------------------------
// 4. Heartbeat
// ---------------------------------------------------------------------------

#[test]
fn the_heartbeat_thread_starts_when_the_first_extension_is_due() {
    // A command done within TTL/3 needs no heartbeat, and gets no thread for
    // one; a longer one has it from TTL/3 on, and is extended.
    let cluster = Cluster::new(3);
    let dir = tempdir();
    let out = base(&cluster.urls(), "hb-lazy", &dir)
        .args(["--ttl", "3s", "-v", "-c"])
        .arg(format!("{THREADS}; echo --; sleep 1.5; {THREADS}"))
        .run();
    out.assert_code(0);
    let (early, late) = out.stdout.split_once("--\n").expect("two listings");
    assert!(
        early.lines().any(|t| t.starts_with("redlock-run")),
        "the listing must show redlock-run's threads:\n{out}"
    );
    assert!(
        !early.lines().any(|t| t == "heartbeat"),
        "a heartbeat thread before TTL/3:\n{out}"
    );
    // Signals and the guard's reports are read by the waiting loops
    // themselves.
    assert!(
        !early
            .lines()
            .chain(late.lines())
            .any(|t| t == "guard" || t == "signals"),
        "a thread for signals or the guard's reports:\n{out}"
    );
    assert!(
        late.lines().any(|t| t == "heartbeat"),
        "no heartbeat thread after TTL/3:\n{out}"
    );
    assert!(out.stderr.contains("extended in"), "not extended:\n{out}");
}

#[test]
fn heartbeat_keeps_lock_through_several_ttls() {
    let cluster = Cluster::new(3);
    let dir = tempdir();
    let urls = cluster.urls();
    let key = lock_key("hb");
    let mut holder = base(&urls, "hb", &dir)
        .args(["--ttl", "1s", "-c", "touch started; sleep 4"])
        .spawn();
    await_marker(&dir, "started", &holder);
    let token = cluster.await_value(0, &key);
    let t0 = Instant::now();

    let mut probes = 0;
    let mut violations = Vec::new();
    while !holder.has_exited() {
        let tick = Instant::now();
        let out = base(&urls, "hb", &dir)
            .args(["--ttl", "1s", "-c", &format!("touch contender-{probes}")])
            .run();
        let holder_alive = !holder.has_exited();
        if out.code != Some(75) && holder_alive {
            violations.push(format!(
                "t={:?}: contender got {:?} while holder ran\n{out}",
                t0.elapsed(),
                out.code
            ));
        }
        for (i, node) in cluster.iter().enumerate() {
            let pttl = node.pttl(&key);
            let value = node.get(&key);
            if holder.has_exited() {
                break;
            }
            if pttl <= 0 || value.as_deref() != Some(&token[..]) {
                violations.push(format!(
                    "t={:?}: node {i} pttl={pttl} value={:?}",
                    t0.elapsed(),
                    value.as_deref().map(show)
                ));
            }
        }
        probes += 1;
        if let Some(rest) = Duration::from_millis(200).checked_sub(tick.elapsed()) {
            std::thread::sleep(rest);
        }
    }
    let out = holder.wait();
    assert!(
        violations.is_empty(),
        "{}\n\nholder:\n{out}",
        violations.join("\n")
    );
    out.assert_code(0);
    assert!(
        probes >= 5,
        "only {probes} probes in {:?}; the check is too weak",
        t0.elapsed()
    );
    assert!(
        out.elapsed >= Duration::from_secs(4),
        "holder exited early\n{out}"
    );
    assert!(cluster.holders(&key).is_empty());
    eprintln!("heartbeat: {probes} probes, all refused");
}

// ---------------------------------------------------------------------------
// 5. Lost lock
// ---------------------------------------------------------------------------

#[test]
fn lost_lock_kills_command_and_exits_76() {
    let cluster = Cluster::new(3);
    let dir = tempdir();
    let key = lock_key("lost");
    let running = base(&cluster.urls(), "lost", &dir)
        .args([
            "--ttl",
            "2s",
            "-c",
            "sleep 30 & echo $! > grandchild.pid; echo $$ > shell.pid; sleep 30",
        ])
        .spawn();
    let grandchild = read_pid_file(&dir.join("grandchild.pid"), START);
    let shell = read_pid_file(&dir.join("shell.pid"), START);
    cluster.await_on_all(&key);

    cluster[0].stop();
    cluster[1].stop();
    let stopped_at = Instant::now();
    let mut running = running;
    let out = running.wait_timeout(Duration::from_secs(10));
    let since_stop = stopped_at.elapsed();
    cluster[0].cont();
    cluster[1].cont();
    let Some(out) = out else {
        kill_if_alive(grandchild);
        kill_if_alive(shell);
        panic!(
            "still running 10 s after losing quorum\n--- stderr ---\n{}",
            running.stderr_so_far()
        );
    };
    eprintln!(
        "lost lock: exit {:?} {since_stop:?} after stopping two nodes",
        out.code
    );
    let shell_dead = wait_until(Duration::from_secs(1), || !pid_alive(shell));
    let grandchild_dead = wait_until(Duration::from_secs(1), || !pid_alive(grandchild));
    kill_if_alive(grandchild);
    kill_if_alive(shell);

    out.assert_code(76);
    // The last extension started at most TTL/3 before the stop, so the
    // deadline is at least TTL - TTL/3 - drift (1311 ms) after it, and SIGTERM
    // (which ends this command) is due a kill guard (200 ms) and --kill-after
    // (667 ms) before that: 444 ms after the stop at the earliest, 1111 ms at
    // the latest. Allowed: 44 ms early for a round in flight at the stop, and
    // 900 ms late for the release's node timeouts on a loaded machine.
    assert!(
        since_stop < Duration::from_secs(2),
        "exit 76 only {since_stop:?} after the stop\n{out}"
    );
    assert!(
        since_stop > Duration::from_millis(400),
        "gave up after only {since_stop:?}: the lock was still valid\n{out}"
    );
    assert!(shell_dead, "command shell {shell} survived the lost lock");
    assert!(
        grandchild_dead,
        "grandchild {grandchild} survived the lost lock"
    );
    // The node that kept answering got the release.
    assert!(
        !cluster[2].exists(&key),
        "the live node still has the key\n{out}"
    );
    // A stopped node may have applied an extension whose reply it never
    // sent (the round failed without it), so its copy can outlive the
    // validity redlock-run counted on by up to a heartbeat; it still goes
    // within the TTL.
    let gone = wait_until(Duration::from_secs(2), || {
        cluster.iter().all(|node| !node.exists(&key))
    });
    assert!(
        gone,
        "the key is still on nodes {:?} a TTL after the exit\n{out}",
        cluster.holders(&key)
    );
}

#[test]
fn lost_lock_sends_term_then_kill() {
    // The command survives SIGTERM (it traps it), so only the SIGKILL at the
    // validity deadline can end it; TERM must come about kill_after
    // (min(ttl/3, 10s) = 667 ms here) before that.
    let cluster = Cluster::new(3);
    let dir = tempdir();
    let mut running = base(&cluster.urls(), "lost-kill", &dir)
        .args([
            "--ttl",
            "2s",
            "-c",
            "trap 'touch got-term' TERM; echo $$ > shell.pid; while :; do sleep 0.1; done",
        ])
        .spawn();
    let shell = read_pid_file(&dir.join("shell.pid"), START);
    cluster[0].stop();
    cluster[1].stop();
    let stopped_at = Instant::now();
    let mut term_seen = None;
    let mut killed_seen = None;
    let mut out = None;
    while stopped_at.elapsed() < Duration::from_secs(10) {
        if term_seen.is_none() && dir.has("got-term") {
            term_seen = Some(Instant::now());
        }
        if killed_seen.is_none() && !pid_alive(shell) {
            killed_seen = Some(Instant::now());
        }
        out = running.wait_timeout(Duration::from_millis(5));
        if out.is_some() {
            break;
        }
    }
    let exited_at = Instant::now();
    cluster[0].cont();
    cluster[1].cont();
    let shell_dead = wait_until(Duration::from_secs(1), || !pid_alive(shell));
    kill_if_alive(shell);
    let out = out.unwrap_or_else(|| {
        panic!(
            "still running 10 s after losing quorum\n--- stderr ---\n{}",
            running.stderr_so_far()
        )
    });
    out.assert_code(76);
    assert!(shell_dead, "TERM-trapping command {shell} was not killed");
    let term_seen = term_seen
        .or_else(|| dir.has("got-term").then_some(exited_at))
        .unwrap_or_else(|| panic!("the command never got SIGTERM\n{out}"));
    let gap = killed_seen.unwrap_or(exited_at).duration_since(term_seen);
    eprintln!(
        "lost lock (TERM-trapping command): TERM {:?} after stop, SIGKILL {gap:?} after TERM, \
         exit {:?} after stop",
        term_seen.duration_since(stopped_at),
        exited_at.duration_since(stopped_at)
    );
    // SIGKILL goes out --kill-after (min(ttl/3, 10s) = 667 ms) after SIGTERM.
    // Both are seen by polling (every ~5-10 ms; the trap's touch is a fork):
    // allowed 60 ms early and 150 ms late on a loaded machine.
    assert!(
        gap >= Duration::from_millis(607) && gap < Duration::from_millis(817),
        "SIGTERM→SIGKILL gap {gap:?}, expected --kill-after (667 ms)\n{out}"
    );
    assert!(
        exited_at.duration_since(stopped_at) < Duration::from_secs(5),
        "exit 76 too late\n{out}"
    );
}

// ---------------------------------------------------------------------------
// 6. Signals
// ---------------------------------------------------------------------------

/// Waits until a descendant of `pid` named `name` exists; returns its pid.
fn await_child_named(pid: i32, name: &str) -> Option<i32> {
    let mut found = None;
    wait_until(START, || {
        found = descendant_pids(pid)
            .into_iter()
            .find(|&c| process_name(c).as_deref() == Some(name));
        found.is_some()
    });
    found
}

#[test]
fn signals_are_forwarded_and_status_reported() {
    let cluster = Cluster::new(3);
    let dir = tempdir();
    let urls = cluster.urls();
    let signals = [
        (libc::SIGTERM, "TERM"),
        (libc::SIGINT, "INT"),
        (libc::SIGHUP, "HUP"),
        (libc::SIGQUIT, "QUIT"),
        (libc::SIGUSR1, "USR1"),
        (libc::SIGUSR2, "USR2"),
    ];
    let mut failures = Vec::new();
    for (sig, sig_name) in signals {
        let name = format!("sig-{sig_name}");
        let key = lock_key(&name);
        let running = base(&urls, &name, &dir)
            .args(["--", "sleep", "30"])
            .timeout(Duration::from_secs(15))
            .spawn();
        let Some(sleep_pid) = await_child_named(running.pid(), "sleep") else {
            failures.push(format!(
                "[{sig_name}] command never started; stderr: {}",
                running.stderr_so_far()
            ));
            continue;
        };
        let held = cluster.holders(&key);
        if held != vec![0, 1, 2] {
            failures.push(format!("[{sig_name}] key on nodes {held:?} while running"));
        }
        running.signal(sig);
        let out = running.wait();
        let left = cluster.holders(&key);
        if out.code != Some(128 + sig) {
            failures.push(format!("[{sig_name}] want exit {}\n{out}", 128 + sig));
        }
        if !left.is_empty() {
            failures.push(format!(
                "[{sig_name}] key still on nodes {left:?} right after exit"
            ));
        }
        if !wait_until(Duration::from_secs(1), || !pid_alive(sleep_pid)) {
            failures.push(format!("[{sig_name}] command {sleep_pid} survived"));
            kill_if_alive(sleep_pid);
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

#[test]
fn command_trapping_term_decides_exit_status() {
    let cluster = Cluster::new(3);
    let dir = tempdir();
    let key = lock_key("trap");
    let running = base(&cluster.urls(), "trap", &dir)
        .args([
            "-c",
            "trap 'touch trapped; exit 0' TERM; touch ready; while :; do sleep 0.1; done",
        ])
        .timeout(Duration::from_secs(15))
        .spawn();
    await_marker(&dir, "ready", &running);
    running.signal(libc::SIGTERM);
    let out = running.wait();
    out.assert_code(0);
    assert!(dir.has("trapped"), "the command's trap did not run\n{out}");
    assert!(cluster.holders(&key).is_empty());
}

// ---------------------------------------------------------------------------
// 7. SIGKILL of redlock-run
// ---------------------------------------------------------------------------

#[test]
fn sigkill_takes_command_down_and_key_expires() {
    let cluster = Cluster::new(3);
    let dir = tempdir();
    let key = lock_key("kill9");
    let running = base(&cluster.urls(), "kill9", &dir)
        .args(["--ttl", "2s", "-c", "echo $$ > pid; exec sleep 30"])
        .spawn();
    let pid = read_pid_file(&dir.join("pid"), START);
    assert!(
        wait_until(START, || process_name(pid).as_deref() == Some("sleep")),
        "command did not exec sleep"
    );
    cluster.await_on_all(&key);

    running.signal(libc::SIGKILL);
    let killed_at = Instant::now();
    let out = running.wait();
    assert_eq!(out.signal, Some(libc::SIGKILL), "{out}");

    let command_died = wait_until(Duration::from_secs(2), || !pid_alive(pid));
    kill_if_alive(pid);
    assert!(command_died, "command {pid} outlived SIGKILLed redlock-run");
    let expired = wait_until(Duration::from_secs(3), || cluster.holders(&key).is_empty());
    assert!(
        expired,
        "key still on nodes {:?} {:?} after SIGKILL (ttl 2s)",
        cluster.holders(&key),
        killed_at.elapsed()
    );
}

// ---------------------------------------------------------------------------
// 8. Foreign tokens are never touched
// ---------------------------------------------------------------------------

#[test]
fn foreign_key_is_neither_deleted_nor_extended() {
    let node = RedisNode::start();
    let dir = tempdir();
    let key = lock_key("foreign");
    let foreign = b"0123456789abcdef0123456789abcdef";
    node.set(&key, foreign, 10_000);
    let set_at = Instant::now();
    let before = node.pttl(&key);

    let out = base(&node.url(), "foreign", &dir)
        .args(["-c", "touch ran"])
        .expect_code(75);
    assert!(!dir.has("ran"), "command ran although busy\n{out}");
    assert_eq!(node.get(&key).as_deref(), Some(&foreign[..]), "{out}");
    let after = node.pttl(&key);
    let floor = 10_000 - set_at.elapsed().as_millis() as i64 - 500;
    assert!(
        after <= before && after >= floor,
        "foreign pttl went {before} -> {after} (floor {floor})"
    );
}

#[test]
fn partial_grant_is_released_but_foreign_keys_stay() {
    // The foreign holder has two of three nodes: we can only get node 2,
    // must give up (busy), clean node 2 and leave nodes 0 and 1 alone.
    let cluster = Cluster::new(3);
    let dir = tempdir();
    let key = lock_key("partial");
    let foreign = b"0123456789abcdef0123456789abcdef";
    cluster[0].set(&key, foreign, 10_000);
    cluster[1].set(&key, foreign, 10_000);
    let set_at = Instant::now();

    let out = base(&cluster.urls(), "partial", &dir)
        .args(["-c", "touch ran"])
        .expect_code(75);
    assert!(!dir.has("ran"), "command ran without quorum\n{out}");
    let floor = 10_000 - set_at.elapsed().as_millis() as i64 - 500;
    for i in [0, 1] {
        assert_eq!(
            cluster[i].get(&key).as_deref(),
            Some(&foreign[..]),
            "node {i}: foreign value touched\n{out}"
        );
        let pttl = cluster[i].pttl(&key);
        assert!(
            (floor..=10_000).contains(&pttl),
            "node {i}: foreign pttl changed to {pttl}"
        );
    }
    assert!(
        !cluster[2].exists(&key),
        "partial grant on node 2 was not released\n{out}"
    );
}

#[test]
fn overwritten_node_keeps_foreign_value_after_release() {
    let cluster = Cluster::new(3);
    let dir = tempdir();
    let key = lock_key("overwrite");
    let running = base(&cluster.urls(), "overwrite", &dir)
        .args([
            "--ttl",
            "1s",
            "-c",
            &format!("touch started; {WAIT_FOR_GO}"),
        ])
        .spawn();
    await_marker(&dir, "started", &running);
    let token = cluster.await_value(0, &key);

    let intruder = b"ffffffffffffffffffffffffffffffff";
    cluster[1].set(&key, intruder, 10_000);
    let set_at = Instant::now();
    // Several heartbeats (every ttl/3) happen meanwhile.
    std::thread::sleep(Duration::from_millis(1200));
    assert_eq!(cluster[0].get(&key).as_deref(), Some(&token[..]));
    assert_eq!(cluster[2].get(&key).as_deref(), Some(&token[..]));
    assert_eq!(cluster[1].get(&key).as_deref(), Some(&intruder[..]));

    touch(&dir, "go");
    let out = running.wait();
    out.assert_code(0);
    assert_eq!(
        cluster[1].get(&key).as_deref(),
        Some(&intruder[..]),
        "foreign value deleted by release\n{out}"
    );
    let pttl = cluster[1].pttl(&key);
    let expected = 10_000 - set_at.elapsed().as_millis() as i64;
    assert!(
        pttl <= expected + 50 && pttl >= expected - 1000,
        "foreign key's pttl {pttl} was changed (expected about {expected})"
    );
    assert!(!cluster[0].exists(&key) && !cluster[2].exists(&key));
}

// ---------------------------------------------------------------------------
// 9. Hostile key names
// ---------------------------------------------------------------------------

#[test]
fn hostile_key_names_are_plain_data() {
    let node = RedisNode::start();
    let dir = tempdir();
    node.set("decoy", "keep-me", 60_000);
    // Outside printable ASCII, or a brace (helper keys use them): one usage
    // line naming the reason, nothing run, no key written.
    for (name, reason) in [
        ("x\ny", "printable ASCII"),
        ("é", "printable ASCII"),
        ("tab\there", "printable ASCII"),
        ("{x}", "reserved for redlock-run's helper keys"),
        ("a}b", "reserved for redlock-run's helper keys"),
    ] {
        let out = base(&node.url(), name, &dir)
            .args(["-c", "touch ran"])
            .expect_code(64);
        out.assert_one_error_line();
        assert!(out.stderr.contains(reason), "{name:?}\n{out}");
        assert!(!dir.has("ran"), "{name:?} ran");
        assert_eq!(node.all_keys(), vec![b"decoy".to_vec()], "{name:?}");
    }
    let names = [
        "a b",
        "\"quoted'",
        "');redis.call('flushall');--",
        "*",
        "[a-z]?\\",
    ];
    for name in names {
        for marker in ["ready", "go", "keyname"] {
            let _ = fs::remove_file(dir.join(marker));
        }
        let running = base(&node.url(), name, &dir)
            .args([
                "-c",
                &format!("printf %s \"$REDLOCK_KEY\" > keyname; touch ready; {WAIT_FOR_GO}"),
            ])
            .spawn();
        await_marker(&dir, "ready", &running);
        // The lock and its holder record (information for `status`), nothing else.
        let mut expected = vec![
            b"decoy".to_vec(),
            lock_key(name),
            crate::support::keys(name).holder(None),
        ];
        expected.sort();
        assert_eq!(node.keys(), expected, "keys while holding {name:?}");
        let seen = fs::read(dir.join("keyname")).expect("read keyname");
        assert_eq!(seen, name.as_bytes(), "REDLOCK_KEY for {name:?}");
        let value = node.get(lock_key(name)).expect("lock value");
        assert!(is_token(&value), "value {} for {name:?}", show(&value));

        touch(&dir, "go");
        let out = running.wait();
        out.assert_code(0);
        assert_eq!(
            node.keys(),
            vec![b"decoy".to_vec()],
            "keys after {name:?}\n{out}"
        );
        assert_eq!(node.get("decoy").as_deref(), Some(&b"keep-me"[..]));
    }
}

// ---------------------------------------------------------------------------
// Fixture self-checks (independent of the program under test)
// ---------------------------------------------------------------------------

#[test]
fn fixture_redis_node_lifecycle() {
    let mut node = RedisNode::start();
    assert_ne!(node.port(), 6379);
    assert!(node.ping());
    node.set("k", "v", 10_000);
    assert_eq!(node.get("k").as_deref(), Some(&b"v"[..]));
    assert!(node.exists("k"));
    let pttl = node.pttl("k");
    assert!(pttl > 9_000 && pttl <= 10_000, "pttl {pttl}");
    assert_eq!(node.keys(), vec![b"k".to_vec()]);

    node.stop();
    let t = Instant::now();
    assert!(
        node.try_cmd::<String>(&redis::cmd("PING")).is_err(),
        "stopped node answered"
    );
    assert!(t.elapsed() < Duration::from_secs(5));
    node.cont();
    assert!(node.ping(), "node did not resume");

    let port = node.port();
    node.restart();
    assert_eq!(node.port(), port);
    assert!(node.keys().is_empty(), "restart kept data");
    node.kill();
    assert!(!node.ping(), "killed node answered");
    node.restart();
    assert!(node.ping());
}

#[test]
fn fixture_fault_proxy_modes() {
    let node = RedisNode::start();
    let proxy = FaultProxy::new(node.port());
    let ping = |timeout: Duration| -> (bool, Duration) {
        let start = Instant::now();
        let result = (|| -> redis::RedisResult<String> {
            let client = redis::Client::open(proxy.url())?;
            let mut con = client.get_connection_with_timeout(timeout)?;
            con.set_read_timeout(Some(timeout))?;
            redis::cmd("PING").query(&mut con)
        })();
        (matches!(result, Ok(ref s) if s == "PONG"), start.elapsed())
    };

    assert!(ping(Duration::from_secs(2)).0, "Pass");

    proxy.set_mode(Mode::Delay(Duration::from_millis(150)));
    let (ok, took) = ping(Duration::from_secs(2));
    assert!(
        ok && took >= Duration::from_millis(300),
        "Delay: ok={ok} {took:?}"
    );

    proxy.set_mode(Mode::BlackHole);
    let (ok, took) = ping(Duration::from_millis(300));
    assert!(
        !ok && took >= Duration::from_millis(250),
        "BlackHole: ok={ok} {took:?}"
    );

    proxy.set_mode(Mode::Reset);
    let (ok, took) = ping(Duration::from_secs(2));
    assert!(
        !ok && took < Duration::from_secs(1),
        "Reset: ok={ok} {took:?}"
    );

    // Existing connection reset when the mode switches.
    proxy.set_mode(Mode::Pass);
    let client = redis::Client::open(proxy.url()).expect("client");
    let mut con = client
        .get_connection_with_timeout(Duration::from_secs(2))
        .expect("connect through proxy");
    con.set_read_timeout(Some(Duration::from_secs(2)))
        .expect("set timeout");
    let pong: String = redis::cmd("PING").query(&mut con).expect("PING");
    assert_eq!(pong, "PONG");
    proxy.set_mode(Mode::Reset);
    std::thread::sleep(Duration::from_millis(100));
    assert!(
        redis::cmd("PING").query::<String>(&mut con).is_err(),
        "existing connection survived Reset"
    );

    proxy.set_mode(Mode::Pass);
    assert!(ping(Duration::from_secs(2)).0, "Pass again");
    assert!(proxy.accepted() >= 6);
}
