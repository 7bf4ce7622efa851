//! What an operator reads at 3 a.m.: each message says what is true and
//! names what is needed (who holds the slots, which readers a writer waits
//! for, which way a duration counts, what a typo meant), with no hole in it.

use crate::support::{Cluster, Running, Test, WAIT_FOR_GO, await_marker, base, tempdir, touch};

/// A holder of `name` that runs until `go`, started with `extra`, its marker
/// `marker`.
fn holding(
    urls: &str,
    name: &str,
    dir: &crate::support::TempDir,
    extra: &[&str],
    marker: &str,
) -> Running {
    let running = base(urls, name, dir)
        .args(extra)
        .args(["-c", &format!("touch {marker}; {WAIT_FOR_GO}")])
        .spawn();
    await_marker(dir, marker, &running);
    running
}

#[test]
fn a_lost_lock_does_not_say_the_quorum_did_without_the_nodes_it_was_lost_with() {
    let cluster = Cluster::new(3);
    let dir = tempdir();
    let holder = holding(
        &cluster.urls(),
        "lost",
        &dir,
        &["--ttl", "3s", "--node-timeout", "150ms"],
        "held",
    );
    cluster[1].stop();
    cluster[2].stop();
    let out = holder.wait();
    cluster[1].cont();
    cluster[2].cont();
    out.assert_code(76);
    assert!(out.stderr.contains("lost"), "{out}");
    assert!(
        !out.stderr.contains("did without it"),
        "the quorum did not do without them: that is why the lock was lost\n{out}"
    );
}

#[test]
fn limit_and_shared_lines_name_the_holders() {
    let cluster = Cluster::new(3);
    let urls = cluster.urls();
    let dir = tempdir();
    let a = holding(&urls, "enc", &dir, &["--limit", "2"], "a");
    let b = holding(&urls, "enc", &dir, &["--limit", "2"], "b");
    let (pa, pb) = (a.pid(), b.pid());
    // A single try: busy, with the slots and their holders.
    let out = base(&urls, "enc", &dir)
        .args(["--limit", "2", "--", "true"])
        .expect_code(75);
    let line = out.stderr_lines().join("\n");
    assert!(line.contains("in all 2 slots"), "{out}");
    assert!(
        line.contains(&format!("pid {pa}")) && line.contains(&format!("pid {pb}")),
        "both holders named\n{out}"
    );
    // A waiter: no hole in its line.
    let out = base(&urls, "enc", &dir)
        .args(["--limit", "2", "--wait", "1s", "--", "true"])
        .expect_code(75);
    assert!(!out.stderr.contains("held by in"), "{out}");
    assert!(out.stderr.contains("held in all 2 slots, by "), "{out}");
    assert!(out.stderr.contains("held for "), "{out}");
    touch(&dir, "go");
    a.wait().assert_code(0);
    b.wait().assert_code(0);

    // A writer behind --shared readers names them.
    let _ = std::fs::remove_file(dir.join("go"));
    let r = holding(&urls, "db", &dir, &["--shared"], "r");
    let out = base(&urls, "db", &dir)
        .args(["--wait", "1s", "--", "true"])
        .expect_code(75);
    assert!(
        out.stderr.contains("shared by 1 --shared reader: ")
            && out.stderr.contains(&format!("pid {}", r.pid())),
        "the reader is named\n{out}"
    );
    touch(&dir, "go");
    r.wait().assert_code(0);
}

#[test]
fn a_forced_unlock_of_a_live_holder_warns_that_it_runs_on() {
    let cluster = Cluster::new(3);
    let dir = tempdir();
    let holder = holding(&cluster.urls(), "forced", &dir, &["--ttl", "6s"], "held");
    let out = Test::new()
        .args(["unlock", "-r", &cluster.urls(), "-k", "forced", "--force"])
        .expect_code(0);
    assert!(out.stdout.contains("was held by"), "{out}");
    let warning = out
        .stderr_lines()
        .into_iter()
        .find(|l| l.starts_with("redlock-run: warning:"))
        .unwrap_or_else(|| panic!("no warning\n{out}"))
        .to_string();
    assert!(
        warning.contains(&format!("pid {}", holder.pid()))
            && warning.contains("exits 76")
            && warning.contains("every 2s"),
        "{warning}"
    );
    // It does stop, with 76, at its next heartbeat.
    let out = holder.wait();
    out.assert_code(76);
}

#[test]
fn typos_get_what_was_meant() {
    let dir = tempdir();
    let out = Test::new().args(["statsu", "-k", "x"]).expect_code(64);
    out.assert_one_error_line();
    assert!(
        out.stderr.contains(
            "'statsu' is not a subcommand; did you mean 'status'? (to run a program of that \
             name, put it after --)"
        ),
        "{out}"
    );
    let out = base("redis://127.0.0.1:1", "x", &dir)
        .args(["--once-pre", "1h", "--", "true"])
        .expect_code(64);
    assert!(out.stderr.contains("did you mean '--once-per'?"), "{out}");
    let out = base("redis://127.0.0.1:99999", "x", &dir)
        .args(["--", "true"])
        .expect_code(64);
    assert!(out.stderr.contains("port 99999 is out of range"), "{out}");
    let out = base("redis://127.0.0.1:1", "x", &dir)
        .args(["--wait", "5x", "--", "true"])
        .expect_code(64);
    assert!(out.stderr.contains("ms, s, m, h or d"), "{out}");
    assert!(out.stderr.contains("at most 366d"), "{out}");
    assert!(
        !out.stderr.contains("month") && !out.stderr.contains("year"),
        "units no option takes\n{out}"
    );
}

#[test]
fn history_with_no_node_answering_prints_nothing_on_stdout() {
    let cluster = Cluster::new(3);
    for node in cluster.iter() {
        node.stop();
    }
    let out = Test::new()
        .args(["history", "-r", &cluster.urls(), "-k", "report"])
        .args(["--node-timeout", "200ms"])
        .expect_code(69);
    for node in cluster.iter() {
        node.cont();
    }
    assert_eq!(out.stdout, "", "stdout would read as an answer\n{out}");
    out.assert_one_error_line();
    assert!(out.stderr.contains("no node answered"), "{out}");
}

#[test]
fn status_shows_a_used_window_and_counts_that_agree() {
    let cluster = Cluster::new(3);
    let urls = cluster.urls();
    let dir = tempdir();
    let out = base(&urls, "nightly", &dir)
        .args(["--once-per", "1h", "-v", "--", "true"])
        .expect_code(0);
    // Every grant line, then a count that agrees with them.
    let grants = out
        .stderr
        .lines()
        .filter(|l| l.starts_with("redlock-run: acquire ") && l.contains(": granted in "))
        .count();
    assert!(
        out.stderr
            .contains(&format!("acquired: {grants} of 3 nodes granted")),
        "{out}"
    );
    let status = Test::new()
        .args(["status", "-r", &urls, "-k", "nightly"])
        .expect_code(0);
    let line = status
        .stdout
        .lines()
        .find(|l| l.starts_with("once-per window used until "))
        .unwrap_or_else(|| panic!("no window line\n{status}"));
    assert!(
        line.contains(":00:00.000Z, by "),
        "the window's end: {line}"
    );
    assert!(line.contains(" pid "), "{line}");
    let json = Test::new()
        .args(["status", "-r", &urls, "-k", "nightly", "--json"])
        .expect_code(0);
    assert!(
        json.stdout.contains("\"once_per\":{\"used_until\":"),
        "{json}"
    );
    // A lock never run under --once-per has none.
    let plain = Test::new()
        .args(["status", "-r", &urls, "-k", "other", "--json"])
        .expect_code(0);
    assert!(plain.stdout.contains("\"once_per\":null"), "{plain}");
}

/// The pid the command wrote to `file` in `dir`.
fn pid_in(dir: &crate::support::TempDir, file: &str) -> i32 {
    crate::support::read_pid_file(&dir.join(file), crate::support::START)
}

/// Ctrl-C on a job whose background child ignores SIGINT, as a
/// non-interactive shell starts its background jobs: the first SIGINT is
/// passed on, the shell ends, and the child keeps the lock, with a line that
/// says how to stop it; a second SIGINT sends SIGTERM to the whole tree,
/// which is gone within a second, its lock released.
#[test]
fn a_second_sigint_stops_a_tree_whose_child_ignores_sigint() {
    let node = crate::support::RedisNode::start();
    let dir = tempdir();
    let mut running = base(&node.url(), "ctrl-c", &dir)
        .args(["-c", "sleep 20 & echo $! > child; wait"])
        .spawn();
    let child = pid_in(&dir, "child");
    // The shell ignores SIGINT in its background child before the exec: a
    // SIGINT sent before then (a clean-clone CI run) reaches the shell's
    // own handler in the child.
    assert!(
        crate::support::wait_until(crate::support::START, || {
            crate::support::process_name(child).is_some_and(|c| c == "sleep")
        }),
        "the background child never ran sleep"
    );
    running.signal(libc::SIGINT);
    assert!(
        crate::support::wait_until(crate::support::START, || running
            .stderr_so_far()
            .contains("left behind")),
        "no line about the child that keeps the lock\n{}",
        running.stderr_so_far()
    );
    assert!(
        running
            .stderr_so_far()
            .contains("send SIGINT or SIGTERM again, or kill"),
        "the line says that asking again stops it\n{}",
        running.stderr_so_far()
    );
    assert!(
        crate::support::pid_alive(child),
        "SIGINT is ignored by the child"
    );
    assert!(node.exists(crate::support::lock_key("ctrl-c")));
    running.signal(libc::SIGINT);
    let sent = std::time::Instant::now();
    let out = running
        .wait_timeout(std::time::Duration::from_secs(10))
        .expect("a second SIGINT ends the run");
    assert!(
        sent.elapsed() < std::time::Duration::from_secs(1),
        "{:?} after the second SIGINT\n{out}",
        sent.elapsed()
    );
    out.assert_code(130);
    assert!(
        out.stderr
            .contains("SIGINT again: sent SIGTERM to every process"),
        "{out}"
    );
    assert!(!crate::support::pid_alive(child), "{out}");
    assert!(!node.exists(crate::support::lock_key("ctrl-c")), "released");
}

/// A tree that ignores SIGINT and SIGTERM alike: the first SIGTERM is passed
/// on, the second sent to every process again and says that a third kills
/// them, the third kills the whole tree, within a second.
#[test]
fn a_third_sigterm_kills_a_tree_that_ignores_sigterm() {
    let node = crate::support::RedisNode::start();
    let dir = tempdir();
    let mut running = base(&node.url(), "term", &dir)
        .args([
            "-c",
            "trap '' INT TERM; sleep 20 & echo $! > child; echo $$ > shell; wait",
        ])
        .spawn();
    let (child, shell) = (pid_in(&dir, "child"), pid_in(&dir, "shell"));
    running.signal(libc::SIGTERM);
    std::thread::sleep(std::time::Duration::from_millis(200));
    running.signal(libc::SIGTERM);
    assert!(
        crate::support::wait_until(crate::support::START, || running
            .stderr_so_far()
            .contains("send SIGINT or SIGTERM again to kill any that ignore it")),
        "the second SIGTERM says what a third does\n{}",
        running.stderr_so_far()
    );
    assert!(crate::support::pid_alive(child) && crate::support::pid_alive(shell));
    running.signal(libc::SIGTERM);
    let sent = std::time::Instant::now();
    let out = running
        .wait_timeout(std::time::Duration::from_secs(10))
        .expect("a third SIGTERM ends the run");
    assert!(
        sent.elapsed() < std::time::Duration::from_secs(1),
        "{:?} after the third SIGTERM\n{out}",
        sent.elapsed()
    );
    out.assert_code(128 + libc::SIGKILL);
    assert!(!crate::support::pid_alive(child) && !crate::support::pid_alive(shell));
    assert!(!node.exists(crate::support::lock_key("term")), "released");
}

/// A tree redlock-run stops itself (--max-runtime, on a command that
/// ignores SIGTERM) may leave members alive for a moment after the first
/// process's exit: they are being killed, and no line says that they keep
/// the lock, in ten runs.
#[test]
fn a_tree_stopped_by_redlock_run_is_not_said_to_keep_the_lock() {
    let node = crate::support::RedisNode::start();
    let dir = tempdir();
    for _ in 0..10 {
        let out = base(&node.url(), "stopped", &dir)
            .args(["--max-runtime", "300ms", "--kill-after", "100ms"])
            .args(["-c", "trap '' TERM; sleep 30 & sleep 30 & sleep 30 & wait"])
            .expect_code(124);
        assert!(!out.stderr.contains("left behind"), "{out}");
        assert!(out.stderr.contains("--max-runtime"), "{out}");
    }
    assert!(!node.exists(crate::support::lock_key("stopped")));
}

/// A history field of any length (the column width included) is shown,
/// never a panic: 70,000 characters is past what `format!` pads.
#[test]
fn history_and_status_survive_a_field_longer_than_any_format_width() {
    let node = crate::support::RedisNode::start();
    let host = "h".repeat(70_000);
    let record = serde_json::json!({
        "id": "5c0b1050aabbccdd", "host": host, "pid": 1, "user": "u",
        "started_at": "2026-11-30T03:00:00.012Z", "duration_ms": 5, "outcome": "ok",
        "exit_code": 0, "attempts": 1, "fencing_token": null,
    });
    let key = crate::support::keys("long").history();
    let _: i64 = node.cmd(redis::cmd("LPUSH").arg(&key).arg(record.to_string()));
    for extra in [&[][..], &["--json"][..]] {
        let out = Test::new()
            .args(["history", "-r", &node.url(), "-k", "long"])
            .args(extra)
            .run();
        // Longer than a record may be read back (8 KiB): left out, and
        // said so, with no panic.
        assert_eq!(out.code, Some(0), "{extra:?}: {}", out.stderr);
        assert!(
            out.stderr
                .contains("1 history record(s) longer than 8 KiB left out"),
            "{extra:?}: {}",
            out.stderr
        );
    }
    // A key name as long, in `status --keys`' column of names.
    let long_key = format!("{{lock:long}}:{host}");
    node.set(&long_key, "x", 60_000);
    let out = Test::new()
        .args(["status", "--keys", "-r", &node.url(), "-k", "long"])
        .run();
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(out.stdout.contains(&long_key), "the key is not listed");
}

/// A version number of any size is compared as a number: a server that
/// reports `99999999999999999999.1` is not "older than 6.2".
#[test]
fn check_reads_a_version_number_of_any_size() {
    let fake = crate::support::FakeServer::start(crate::support::Script::Info(
        "# Server\r\nredis_version:99999999999999999999.1\r\nrole:master\r\n",
    ));
    let out = Test::new()
        .args(["check", "-r", &fake.url(None), "--node-timeout", "300ms"])
        .run();
    let line = out
        .stdout
        .lines()
        .find(|l| l.contains("99999999999999999999.1"))
        .unwrap_or_else(|| panic!("no version line\n{out}"));
    assert!(line.trim_start().starts_with("ok"), "{line}\n{out}");
    assert!(!out.stdout.contains("older than"), "{out}");
}

/// A Cluster that keeps redirecting (a MOVED loop) is not advised to be
/// given as `redis+cluster://`, which it was.
#[test]
fn moved_on_a_cluster_node_does_not_advise_giving_it_as_a_cluster() {
    let fake = crate::support::FakeServer::start(crate::support::Script::MovedLoop);
    let url = format!("redis+cluster://127.0.0.1:{}", fake.port());
    let dir = tempdir();
    let out = base(&url, "moved", &dir)
        .args(["--node-timeout", "300ms", "-c", "touch ran"])
        .expect_code(69);
    assert!(!dir.has("ran"), "{out}");
    assert!(out.stderr.contains("MOVED"), "{out}");
    assert!(
        !out.stderr.contains("give it as redis+cluster://"),
        "advice to give what was given\n{out}"
    );
    assert!(
        out.stderr.contains("slot"),
        "say what a MOVED loop means\n{out}"
    );
}

/// A server whose certificate file holds 1.7 MB (a chain padded with a
/// whole bundle) sends more than a TLS client reads: that is said, not
/// "does not speak TLS".
#[test]
fn a_server_certificate_too_large_for_tls_is_named_as_such() {
    use crate::support::{Certs, free_port, server_command, server_has_tls};
    if !server_has_tls("a_server_certificate_too_large_for_tls_is_named_as_such") {
        return;
    }
    let certs = Certs::make();
    let dir = tempdir();
    let mut chain = std::fs::read(certs.pem("server")).expect("server.pem");
    let ca = std::fs::read(certs.pem("ca")).expect("ca.pem");
    while chain.len() < 1_700_000 {
        chain.extend_from_slice(&ca);
    }
    let big = dir.join("big-chain.pem");
    std::fs::write(&big, &chain).expect("write the chain");
    let port = free_port();
    let mut command = server_command(dir.path(), "warning");
    command.args([
        "--port",
        "0",
        "--tls-port",
        &port.to_string(),
        "--bind",
        "127.0.0.1",
    ]);
    for (name, value) in certs.node_tls().directives() {
        let value = if name == "tls-cert-file" {
            big.display().to_string()
        } else {
            value
        };
        command.arg(format!("--{name}")).arg(value);
    }
    let mut server = command.spawn().expect("start redis-server");
    // Not through a TLS client, which this certificate defeats: the port
    // accepting is enough.
    let up = crate::support::wait_until(std::time::Duration::from_secs(10), || {
        std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
    });
    let url = format!("rediss://127.0.0.1:{port}");
    let out = up.then(|| {
        base(&url, "big-cert", &dir)
            .args(["--tls-ca", &certs.pem("ca"), "-c", "touch ran"])
            .run()
    });
    let _ = server.kill();
    let _ = server.wait();
    let out = out.expect("redis-server did not listen");
    out.assert_code(69);
    assert!(!dir.has("ran"), "{out}");
    assert!(
        !out.stderr.contains("does not speak TLS"),
        "a TLS server said not to speak TLS\n{out}"
    );
    assert!(
        out.stderr.contains("its certificate file holds too much"),
        "{out}"
    );
}

/// Every node's connection reset under a held lock, and each answered the
/// next request: the run went on with all three, so no line says the
/// quorum did without one (it cannot have done without all three); a node
/// says it answered again. The resets last past a heartbeat (TTL/3), so
/// that a request meets them on every node.
#[test]
fn nodes_that_answered_again_after_a_reset_are_not_said_to_be_done_without() {
    use crate::support::{FaultProxy, Mode, proxied_urls};
    use std::time::Duration;
    let cluster = Cluster::new(3);
    let proxies: Vec<FaultProxy> = cluster.iter().map(|n| FaultProxy::new(n.port())).collect();
    let urls = proxied_urls(&proxies);
    let dir = tempdir();
    let holder = holding(&urls, "reset", &dir, &["--ttl", "3s"], "held");
    for p in &proxies {
        p.set_mode(Mode::Reset);
    }
    std::thread::sleep(Duration::from_millis(1200));
    for p in &proxies {
        p.set_mode(Mode::Pass);
    }
    // Past the extension that goes through again.
    std::thread::sleep(Duration::from_millis(700));
    touch(&dir, "go");
    let out = holder.wait();
    out.assert_code(0);
    assert!(
        !out.stderr.contains("did without it"),
        "the run went on with every node\n{out}"
    );
    let warnings: Vec<&str> = out
        .stderr_lines()
        .into_iter()
        .filter(|l| l.starts_with("redlock-run: warning: "))
        .collect();
    assert!(
        warnings.len() == 3
            && warnings
                .iter()
                .all(|l| l.ends_with("(it answered again after)")),
        "one line per node that failed and came back\n{out}"
    );
}

/// The seconds `out`'s "lock lost" line gives after `lead`.
fn paused_for(out: &crate::support::RunOutput, lead: &str) -> f64 {
    let line = out
        .stderr_lines()
        .into_iter()
        .find(|l| l.contains("lost"))
        .unwrap_or_else(|| panic!("no line says the lock was lost\n{out}"))
        .to_string();
    let said = line
        .split(lead)
        .nth(1)
        .unwrap_or_else(|| panic!("the line does not say {lead:?}\n{out}"));
    said.split('s')
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no length in seconds\n{out}"))
}

/// A redlock-run that was itself stopped (SIGSTOP) past the time it had to
/// extend the lock says that it was stopped, and for how long, not only that
/// no extension succeeded in time; a suspended host (simulated: the test
/// build's CLOCK_BOOTTIME jumps, CLOCK_MONOTONIC does not) says that.
#[test]
fn a_stopped_redlock_run_says_it_was_stopped_and_for_how_long() {
    let cluster = Cluster::new(1);
    let dir = tempdir();
    let holder = holding(&cluster.urls(), "paused", &dir, &["--ttl", "6s"], "held");
    holder.signal(libc::SIGSTOP);
    std::thread::sleep(std::time::Duration::from_secs(4));
    holder.signal(libc::SIGCONT);
    let out = holder.wait();
    out.assert_code(76);
    let secs = paused_for(
        &out,
        "no extension succeeded in time: redlock-run itself was stopped for ",
    );
    assert!((3.5..6.0).contains(&secs), "stopped for {secs}s?\n{out}");

    let suspend = dir.join("suspend");
    std::fs::write(&suspend, "0").expect("suspend file");
    std::fs::remove_file(dir.join("held")).expect("rm");
    let running = base(&cluster.urls(), "suspended", &dir)
        .env("REDLOCK_TEST_SUSPEND_FILE", &suspend)
        .args(["--ttl", "6s", "-c", &format!("touch held; {WAIT_FOR_GO}")])
        .spawn();
    await_marker(&dir, "held", &running);
    std::fs::write(&suspend, "4000").expect("suspend");
    let out = running.wait();
    out.assert_code(76);
    let secs = paused_for(&out, "the host was suspended for ");
    assert!((3.9..5.0).contains(&secs), "suspended for {secs}s?\n{out}");
}

/// flock(1)'s order, the lock's name and then the command: the answer is
/// the `-k NAME -- COMMAND` form of that very line, not a subcommand that
/// happens to be two letters away ("mylock" and "unlock").
#[test]
fn a_lock_name_first_as_flock_takes_it_shows_the_k_form() {
    let out = Test::new()
        .env_remove("REDLOCK_KEY")
        .args(["mylock", "echo", "hi there"])
        .expect_code(64);
    out.assert_one_error_line();
    assert!(
        out.stderr
            .contains("name the lock with -k: redlock-run -k mylock -- echo 'hi there'"),
        "{out}"
    );
    assert!(!out.stderr.contains("unlock"), "{out}");
    let out = Test::new()
        .env_remove("REDLOCK_KEY")
        .args(["nightly", "./report.sh", "--full"])
        .expect_code(64);
    assert!(
        out.stderr
            .contains("redlock-run -k nightly -- ./report.sh --full"),
        "{out}"
    );
    // A near miss followed by options is still a typo of a subcommand.
    let out = Test::new().args(["statsu", "-k", "x"]).expect_code(64);
    assert!(out.stderr.contains("did you mean 'status'?"), "{out}");
}

/// `--timeout` names both readings as options to give, with the unit a
/// bare number has (seconds).
#[test]
fn timeout_says_which_option_each_reading_is_with_units() {
    for (given, shown) in [("10", "10s"), ("1.5", "1s500ms"), ("2m", "2m")] {
        let out = Test::new()
            .args(["-k", "x", "--timeout", given, "--", "true"])
            .expect_code(64);
        out.assert_one_error_line();
        assert!(
            out.stderr.contains(&format!(
                "to wait up to {shown} for a busy lock (flock -w, consul lock -timeout), give \
                 --wait {shown}"
            )) && out.stderr.contains(&format!(
                "to stop the command after it ran {shown} (timeout(1)), give --max-runtime \
                 {shown}"
            )),
            "{given}\n{out}"
        );
    }
}

/// After `kill -9` of a holder, `status` on its own host says that its pid
/// is not running there and how to free the lock; a live holder, and one
/// recorded on another host, are not marked.
#[test]
fn status_marks_a_holder_whose_pid_is_gone_from_this_host() {
    let cluster = Cluster::new(3);
    let urls = cluster.urls();
    let dir = tempdir();
    let status = |name: &str| {
        Test::new()
            .args(["status", "-r", &urls, "-k", name])
            .expect_code(1)
    };
    let live = holding(&urls, "alive", &dir, &[], "alive");
    let out = status("alive");
    assert!(!out.stdout.contains("not running on this host"), "{out}");
    let elsewhere = base(&urls, "elsewhere", &dir)
        .env("REDLOCK_TEST_HOST", "another-host")
        .args(["-c", &format!("touch elsewhere; {WAIT_FOR_GO}")])
        .spawn();
    await_marker(&dir, "elsewhere", &elsewhere);
    let dead = holding(&urls, "dead", &dir, &[], "dead");
    let pid = dead.pid();
    dead.signal(libc::SIGKILL);
    dead.wait();
    elsewhere.signal(libc::SIGKILL);
    elsewhere.wait();
    let out = status("dead");
    let held = out
        .stdout
        .lines()
        .find(|l| l.starts_with("held by"))
        .unwrap_or_else(|| panic!("no held line\n{out}"));
    assert!(
        held.contains(&format!(
            "pid {pid} is not running on this host: `unlock --token "
        )),
        "{out}"
    );
    let out = Test::new()
        .args(["status", "-r", &urls, "-k", "dead", "--json"])
        .expect_code(1);
    assert!(out.stdout.contains("\"holder_gone\":true"), "{out}");
    let out = status("elsewhere");
    assert!(!out.stdout.contains("not running"), "{out}");
    touch(&dir, "go");
    live.wait().assert_code(0);
}

/// One node that does not answer: "the node did not answer", never
/// "fewer than 1 of 1 nodes answered".
#[test]
fn one_node_that_does_not_answer_is_the_node() {
    let dir = tempdir();
    let port = crate::support::free_port();
    let out = base(&format!("redis://127.0.0.1:{port}"), "one", &dir)
        .args(["--", "true"])
        .expect_code(69);
    out.assert_one_error_line();
    assert!(
        out.stderr.contains(&format!(
            "cannot take lock 'one': the node did not answer: redis://127.0.0.1:{port}"
        )),
        "{out}"
    );
    assert!(!out.stderr.contains("fewer than"), "{out}");
}

/// A run whose --once-per window was used already ran nothing: its
/// --report says "acquired": false, with its outcome and status.
#[test]
fn an_already_ran_report_says_not_acquired() {
    let cluster = Cluster::new(3);
    let dir = tempdir();
    let report = dir.join("report.json");
    let run = |code: i32| {
        base(&cluster.urls(), "daily", &dir)
            .args(["--once-per", "1d", "--report"])
            .arg(&report)
            .args(["--", "true"])
            .expect_code(code)
    };
    let fields = || {
        crate::support::python(
            "import json,sys\nd=json.load(sys.stdin)\nprint(d['acquired'], d['outcome'], \
             d['exit_code'], d['attempts'])",
            &std::fs::read_to_string(&report).expect("report"),
        )
    };
    run(0);
    assert_eq!(fields().trim(), "True ok 0 1");
    // The busy status, as a used window is by default.
    run(75);
    assert_eq!(fields().trim(), "False already-ran 75 0");
}
