//! The lock's bookkeeping: a key layout no lock name can reach, heartbeats
//! timed from the acquisition, once-per markers that are undone, signals
//! that cannot interrupt a node request, durations that cannot overflow,
//! re-taking a node that lost the key, a clock that counts a suspend, what
//! the holder record stores, and files written without following symlinks.
//! Each test here failed before its fix.

use std::fs;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::support::{
    Cluster, FaultProxy, Mode, RedisNode, START, Test, WAIT_FOR_GO, await_marker, base, keys,
    kill_if_alive, lock_key, pid_alive, proxied_urls, read_pid_file, send_signal, tempdir, touch,
    wait_until,
};

// ---------------------------------------------------------------------------
// 1. Key layout
// ---------------------------------------------------------------------------

/// Names whose keys collided in the old layout (`lock:x:holder` was both the
/// record of `x` and the lock `x:holder`).
#[test]
fn helper_keys_never_belong_to_another_lock() {
    let node = RedisNode::start();
    let dir = tempdir();
    let url = node.url();
    // Q holds the lock named `x:holder`.
    let q = base(&url, "x:holder", &dir)
        .args(["-c", &format!("touch q; {WAIT_FOR_GO}")])
        .spawn();
    await_marker(&dir, "q", &q);
    let q_token = node.get(lock_key("x:holder")).expect("Q's key");
    // P takes and releases `x`, with every helper it can have.
    base(&url, "x", &dir)
        .args(["--fence", "--once-per", "1h", "-c", "true"])
        .expect_code(0);
    assert_eq!(
        node.get(lock_key("x:holder")).as_deref(),
        Some(q_token.as_slice()),
        "P's books touched Q's lock"
    );
    // R still finds `x:holder` busy.
    base(&url, "x:holder", &dir)
        .args(["-c", "touch r"])
        .expect_code(75);
    assert!(!dir.has("r"));
    // A held `x:fence` lock survives --fence on `x`; `x:slot:0` is not a
    // slot of `x`.
    let f = base(&url, "x:fence", &dir)
        .args(["-c", &format!("touch f; {WAIT_FOR_GO}")])
        .spawn();
    let s = base(&url, "x:slot:0", &dir)
        .args(["-c", &format!("touch s; {WAIT_FOR_GO}")])
        .spawn();
    await_marker(&dir, "f", &f);
    await_marker(&dir, "s", &s);
    let f_token = node.get(lock_key("x:fence")).expect("F's key");
    let s_token = node.get(lock_key("x:slot:0")).expect("S's key");
    base(&url, "x", &dir)
        .args(["--fence", "-c", "true"])
        .expect_code(0);
    base(&url, "x", &dir)
        .args(["--limit", "1", "-c", "touch slot"])
        .expect_code(0);
    assert!(
        dir.has("slot"),
        "--limit 1 on x ran beside the lock x:slot:0"
    );
    assert_eq!(node.get(lock_key("x:fence")), Some(f_token));
    assert_eq!(node.get(lock_key("x:slot:0")), Some(s_token));
    touch(&dir, "go");
    for running in [q, f, s] {
        running.wait().assert_code(0);
    }
}

/// Every key a lock creates is in its main key's hash slot, as a real
/// cluster-enabled server computes it (CLUSTER KEYSLOT), for names with
/// colons, kinds, glob characters, quotes and spaces; and so is the previous
/// layout's fence counter, which --fence reads beside its own.
#[test]
fn every_key_of_a_lock_is_in_its_hash_slot() {
    let node = RedisNode::start();
    // A cluster port: one whose bus port (P + 10000) exists and is free.
    let slots = RedisNode::start_custom(
        &["--cluster-enabled", "yes"],
        None,
        crate::support::cluster::free_cluster_port,
    );
    let dir = tempdir();
    for name in [
        "report",
        "x:holder",
        "x}:fence",
        "a:b c",
        "*?[x]\\",
        "'quoted\"",
        "~!@#$%^&()",
        "job-2",
    ] {
        // Braces are refused (64): the first is not a name at all.
        if name.contains('}') {
            base(&node.url(), name, &dir)
                .args(["-c", "touch ran"])
                .expect_code(64);
            assert!(!dir.has("ran") && node.all_keys().is_empty());
            continue;
        }
        // A plain holder and a --limit holder exclude each other: one after
        // the other, each checked while it holds.
        let slot_of = |k: &[u8]| -> i64 { slots.cmd(redis::cmd("CLUSTER").arg("KEYSLOT").arg(k)) };
        let main = slot_of(&lock_key(name));
        let mut seen = Vec::new();
        for (args, least) in [
            (&["--fence", "--once-per", "1h"][..], 4),
            (&["--limit", "2"], 3),
        ] {
            for f in ["held", "go"] {
                let _ = fs::remove_file(dir.join(f));
            }
            let a = base(&node.url(), name, &dir)
                .args(args)
                .args(["-c", &format!("touch held; {WAIT_FOR_GO}")])
                .spawn();
            await_marker(&dir, "held", &a);
            assert!(
                wait_until(START, || node.keys().len() >= least),
                "{:?}",
                node.keys()
            );
            let all = node.keys();
            for key in &all {
                assert_eq!(
                    slot_of(key),
                    main,
                    "{} is not in the slot of {name:?}",
                    key.escape_ascii()
                );
            }
            seen.extend(all);
            touch(&dir, "go");
            a.wait().assert_code(0);
        }
        let k = keys(name);
        assert!(
            seen.contains(&k.slots()),
            "{name:?}: no slot holders' set seen"
        );
        assert_eq!(
            slot_of(&k.legacy_fence()),
            main,
            "{name:?}: the previous layout's counter is in another slot"
        );
        // Nothing but the fence counter, the window marker and the run
        // history remains, all in the lock's slot.
        let left: Vec<Vec<u8>> = node.all_keys();
        let mut want = vec![k.fence(), k.once(now_window(3600)), k.history()];
        want.sort();
        assert_eq!(left, want, "{name:?}");
        for key in &left {
            assert_eq!(slot_of(key), main, "{} after the runs", key.escape_ascii());
        }
        let _: () = node.cmd(&redis::cmd("FLUSHALL"));
    }
}

fn now_window(window: u64) -> u64 {
    let now = (crate::support::realtime_ns() / 1_000_000_000) as u64;
    now / window * window
}

// ---------------------------------------------------------------------------
// 2. Heartbeats timed from the acquisition
// ---------------------------------------------------------------------------

/// A healthy node 10 ms away (10-20 ms with the proxy's 10 ms tick): the
/// acquire, fence commit and marker take about 80 ms of a 500 ms TTL. Timed
/// from the command's start, the first heartbeat came after SIGTERM was
/// due, and every run exited 76. A round trip of 20-40 ms leaves a busy
/// machine room within the 50 ms node timeout (the most a 500 ms lock
/// allows); at 22 ms a way it did not.
#[test]
fn a_slow_healthy_node_keeps_a_short_ttl_with_fence_and_once_per() {
    let node = RedisNode::start();
    let proxy = FaultProxy::new(node.port());
    proxy.set_mode(Mode::Delay(Duration::from_millis(10)));
    let dir = tempdir();
    for (i, extra) in [&["--fence"][..], &["--once-per", "1h"]].iter().enumerate() {
        let out = base(&proxy.url(), &format!("slow-{i}"), &dir)
            .args(["--ttl", "500ms", "--node-timeout", "50ms", "-v"])
            .args(*extra)
            .args(["-c", "sleep 1.2"])
            .run();
        out.assert_code(0);
        assert!(
            out.stderr.matches("extended in").count() >= 3,
            "heartbeats should have kept it\n{out}"
        );
    }
}

#[test]
fn a_ttl_too_short_for_its_own_schedule_is_a_usage_error() {
    let out = Test::new()
        .args([
            "-k",
            "x",
            "-t",
            "100ms",
            "--node-timeout",
            "10ms",
            "-c",
            "touch ran",
        ])
        .expect_code(64);
    out.assert_one_error_line();
    assert!(
        out.stderr.contains("too short for its own schedule"),
        "{out}"
    );
    let out = Test::new()
        .args(["-k", "x", "-t", "2s", "--kill-after", "1s", "-c", "true"])
        .expect_code(64);
    out.assert_one_error_line();
}

/// The host suspended right after redlock-run took the lock (simulated in a
/// test build: `REDLOCK_TEST_SUSPEND_FILE` moves CLOCK_BOOTTIME on, see
/// `src/clock.rs`): when it goes on, what is left of the validity cannot
/// cover a stop. It must not start the command (it used to start it and
/// stop it at once, exit 76).
#[test]
fn too_little_validity_left_to_stop_in_time_refuses_to_start() {
    let cluster = Cluster::new(3);
    let proxies: Vec<FaultProxy> = cluster.iter().map(|n| FaultProxy::new(n.port())).collect();
    for p in &proxies {
        p.set_mode(Mode::Delay(Duration::from_millis(40)));
    }
    let dir = tempdir();
    let suspend = dir.join("suspend");
    fs::write(&suspend, "0").expect("suspend file");
    let k = keys("late");
    let running = base(&proxied_urls(&proxies), "late", &dir)
        .env("REDLOCK_TEST_SUSPEND_FILE", &suspend)
        .args([
            "-t",
            "2s",
            "--node-timeout",
            "100ms",
            "--fence",
            "--once-per",
            "1h",
        ])
        .args(["-c", "touch ran"])
        .spawn();
    // The SET lands about 40 ms after it is sent; the rest of the acquire,
    // the fence commit and the marker take 200 ms more: a 1.4 s suspend in
    // there leaves ~400 ms of a 2 s lock, less than a stop needs (--kill-after
    // 666 ms + a 200 ms guard).
    assert!(wait_until(START, || !cluster.holders(k.lock()).is_empty()));
    fs::write(&suspend, "1400").expect("suspend");
    let out = running.wait();
    out.assert_code(69);
    assert!(!dir.has("ran"), "the command ran\n{out}");
    assert!(out.stderr.contains("of its validity left"), "{out}");
    assert!(cluster.holders(k.lock()).is_empty(), "lock left\n{out}");
    let marker = k.once(now_window(3600));
    assert!(cluster.holders(&marker).is_empty(), "window used up\n{out}");
}

// ---------------------------------------------------------------------------
// 3. --once-per markers undone
// ---------------------------------------------------------------------------

/// A user who may take and release the lock `name` on a node (its key, its
/// holder record, its fence counter) but not write its --once-per markers.
fn acl_user_without_markers(node: &RedisNode, name: &str) -> String {
    let k = keys(name);
    // Each key by its name (the name has no glob character).
    let pattern = |key: Vec<u8>| [b"~".as_slice(), &key].concat();
    let reply: String = node.cmd(
        redis::cmd("ACL")
            .arg("SETUSER")
            .arg("narrow")
            .arg("reset")
            .arg("on")
            .arg(">narrow-pw")
            .arg([b"~".as_slice(), k.lock()].concat())
            .arg(pattern(k.holder(None)))
            .arg(pattern(k.fence()))
            .arg(pattern(k.queue()))
            .arg(pattern(k.waiters()))
            // A plain lock looks for --limit holders of its name here, and
            // for --shared readers.
            .arg(pattern(k.slots()))
            .arg(pattern(k.readers()))
            .arg(pattern(k.reader_records()))
            // resetchannels first: Redis 6.2 gives a reset user every channel
            // (acl-pubsub-default allchannels) and then refuses a pattern;
            // 7.0 starts from none, where it changes nothing.
            .arg("resetchannels")
            .arg("&{lock:*")
            .arg("+@all"),
    );
    assert_eq!(reply, "OK");
    format!("redis://narrow:narrow-pw@127.0.0.1:{}", node.port())
}

#[test]
fn a_marker_round_that_fails_leaves_no_marker_behind() {
    let cluster = Cluster::new(3);
    let dir = tempdir();
    let name = "once-undo";
    let k = keys(name);
    // Nodes 1 and 2 let this user take the lock but not write markers: the
    // lock is won, the marker round ends "unavailable".
    let urls = format!(
        "{},{},{}",
        cluster[0].url(),
        acl_user_without_markers(&cluster[1], name),
        acl_user_without_markers(&cluster[2], name)
    );
    let out = base(&urls, name, &dir)
        .args(["--once-per", "1h", "-c", "touch first"])
        .run();
    out.assert_code(69);
    assert!(!dir.has("first"));
    assert!(out.stderr.contains("--once-per window"), "{out}");
    let marker = k.once(now_window(3600));
    assert!(
        cluster.holders(&marker).is_empty(),
        "the failed round left its marker on {:?}",
        cluster.holders(&marker)
    );
    // One node down: node 0's marker would have read as "already ran", and
    // under -q -E 0 the job would have been skipped in silence.
    cluster[2].stop();
    let out = base(&cluster.urls(), name, &dir)
        .args(["-q", "-E", "0", "--once-per", "1h", "-c", "touch second"])
        .run();
    cluster[2].cont();
    out.assert_code(0);
    assert!(
        dir.has("second"),
        "the window's only run was skipped\n{out}"
    );
}

#[test]
fn a_command_that_cannot_start_does_not_use_up_the_window() {
    let node = RedisNode::start();
    let dir = tempdir();
    base(&node.url(), "once-127", &dir)
        .args(["--once-per", "1h", "--", "/nonexistent/job"])
        .expect_code(127);
    base(&node.url(), "once-127", &dir)
        .args(["--once-per", "1h", "-c", "touch ran"])
        .expect_code(0);
    assert!(dir.has("ran"));
    base(&node.url(), "once-127", &dir)
        .args(["--once-per", "1h", "-c", "touch again"])
        .expect_code(75);
}

// ---------------------------------------------------------------------------
// 4. Signal storms
// ---------------------------------------------------------------------------

/// Sends `sig` to `pid` every `every` until dropped; counts what it sent.
struct Storm {
    stop: Arc<AtomicBool>,
    handle: Option<std::thread::JoinHandle<u64>>,
}

impl Storm {
    fn start(pid: i32, sigs: &'static [i32], every: Duration) -> Storm {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let handle = std::thread::spawn(move || {
            let mut sent = 0;
            while !flag.load(Ordering::SeqCst) {
                for &s in sigs {
                    if !send_signal(pid, s) {
                        return sent;
                    }
                    sent += 1;
                }
                std::thread::sleep(every);
            }
            sent
        });
        Storm {
            stop,
            handle: Some(handle),
        }
    }

    fn end(mut self) -> u64 {
        self.stop.store(true, Ordering::SeqCst);
        self.handle.take().map_or(0, |h| h.join().unwrap_or(0))
    }
}

/// USR1 every 2 ms to redlock-run (its command ignores it) through its
/// heartbeats, `--hold` and the release, one node 22 ms away. A handler on a
/// thread blocked in a socket read made that read fail with EINTR: "cannot
/// shorten the hold ... Interrupted system call", and the key expired at the
/// TTL instead of the hold. (A forwarded signal that arrives before the
/// command exists ends the run, 128+N, by design: see the signals tests.)
#[test]
fn a_signal_storm_interrupts_no_node_request() {
    let node = RedisNode::start();
    let proxy = FaultProxy::new(node.port());
    proxy.set_mode(Mode::Delay(Duration::from_millis(11)));
    let dir = tempdir();
    let k = keys("storm");
    let running = base(&proxy.url(), "storm", &dir)
        .args(["-t", "1s", "--hold", "4s", "--fence", "-vv"])
        .args(["-c", "trap '' USR1; touch started; sleep 2"])
        .spawn();
    await_marker(&dir, "started", &running);
    let storm = Storm::start(running.pid(), &[libc::SIGUSR1], Duration::from_millis(2));
    let out = running.wait();
    let sent = storm.end();
    out.assert_code(0);
    assert!(!out.stderr.contains("nterrupted"), "{out}");
    assert!(!out.stderr.contains("error"), "{out}");
    // Held to 4 s from the start: well past the 1 s TTL after a 2 s command.
    let pttl = node.pttl(k.lock());
    let beats = out.stderr.matches("extended in").count();
    eprintln!(
        "signal storm: {sent} USR1 sent to redlock-run; key PTTL after exit {pttl} ms \
         (hold 4 s, TTL 1 s); {beats} heartbeats, none failed"
    );
    assert!(pttl > 1200, "the hold was cut short: PTTL {pttl}\n{out}");
    assert!(beats >= 4, "{out}");
    assert!(
        !out.stderr.contains("extend-failed") && !out.stderr.contains("retrying"),
        "{out}"
    );
    // And a release under the storm.
    let running = base(&proxy.url(), "storm2", &dir)
        .args(["-t", "1s", "-c", "trap '' USR1; touch started2; sleep 0.5"])
        .spawn();
    await_marker(&dir, "started2", &running);
    let storm = Storm::start(running.pid(), &[libc::SIGUSR1], Duration::from_millis(2));
    let out = running.wait();
    storm.end();
    out.assert_code(0);
    assert!(
        node.get(keys("storm2").lock()).is_none(),
        "not released\n{out}"
    );
}

/// Stop-and-continue (Ctrl-Z and `fg`, a cgroup freezer, a debugger) fails
/// a socket read that has a timeout with EINTR, handlers or not: every
/// request is retried on a fresh connection within the node timeout, so a
/// fenced acquire, its heartbeats and the release go through a storm of them
/// (one every 25 ms, each request needing 22 ms; a storm faster than the
/// round trip leaves no reply a chance, handlers or not).
#[test]
fn stop_and_continue_storms_cost_no_request() {
    let node = RedisNode::start();
    let proxy = FaultProxy::new(node.port());
    proxy.set_mode(Mode::Delay(Duration::from_millis(11)));
    let dir = tempdir();
    for i in 0..5 {
        let name = format!("stopcont-{i}");
        let running = base(&proxy.url(), &name, &dir)
            .args(["-t", "2s", "--node-timeout", "200ms", "--fence", "-v"])
            .args(["-c", "sleep 1.5"])
            .spawn();
        let storm = Storm::start(
            running.pid(),
            &[libc::SIGSTOP, libc::SIGCONT],
            Duration::from_millis(25),
        );
        let out = running.wait();
        let sent = storm.end();
        out.assert_code(0);
        assert!(sent > 20, "storm too small: {sent}");
        assert!(
            node.get(keys(&name).lock()).is_none(),
            "not released\n{out}"
        );
    }
}

/// `status` has no handlers, but stop-and-continue (Ctrl-Z, `fg`) still
/// interrupts a socket read with a timeout: it retries on a fresh connection.
#[test]
fn status_survives_being_stopped_and_continued() {
    let node = RedisNode::start();
    let proxy = FaultProxy::new(node.port());
    let dir = tempdir();
    let holder = base(&node.url(), "storm-status", &dir)
        .args(["-c", &format!("touch held; {WAIT_FOR_GO}")])
        .spawn();
    await_marker(&dir, "held", &holder);
    proxy.set_mode(Mode::Delay(Duration::from_millis(11)));
    for _ in 0..5 {
        let status = Test::new()
            .args(["status", "-r", &proxy.url(), "-k", "storm-status"])
            .spawn();
        let storm = Storm::start(
            status.pid(),
            &[libc::SIGSTOP, libc::SIGCONT],
            Duration::from_millis(25),
        );
        let out = status.wait();
        storm.end();
        out.assert_code(1);
        assert!(out.stdout.contains("held by"), "{out}");
    }
    touch(&dir, "go");
    holder.wait().assert_code(0);
}

// ---------------------------------------------------------------------------
// 5. Durations
// ---------------------------------------------------------------------------

#[test]
fn durations_too_long_for_their_option_are_usage_errors() {
    let node = RedisNode::start();
    let dir = tempdir();
    for args in [
        &["--max-runtime", "500000000000years"][..],
        &["--wait", "500000000000years"],
        &["--jitter", "500000000000years"],
        &["--jitter", "2days"],
        &["--ttl", "2days"],
        &["--hold", "400days"],
        &["--once-per", "400days"],
        &["--kill-after", "99999999999999999999s"],
        &["--node-timeout", "1e400"],
    ] {
        let out = base(&node.url(), "long", &dir)
            .args(args)
            .args(["-c", "touch ran"])
            .expect_code(64);
        out.assert_one_error_line();
        assert!(!dir.has("ran"), "{args:?}");
    }
    assert!(node.keys().is_empty(), "a lock was left: {:?}", node.keys());
}

#[test]
fn bare_numbers_are_seconds() {
    let node = RedisNode::start();
    let dir = tempdir();
    let out = base(&node.url(), "bare", &dir)
        .args([
            "--max-runtime",
            "1",
            "--kill-after",
            "0.5",
            "--",
            "sleep",
            "30",
        ])
        .expect_code(124);
    assert!(
        out.elapsed >= Duration::from_millis(900) && out.elapsed < Duration::from_secs(5),
        "{out}"
    );
    base(&node.url(), "bare", &dir)
        .args(["--wait", "5", "-t", "30", "-c", "true"])
        .expect_code(0);
}

// ---------------------------------------------------------------------------
// 6. Re-taking a node that lost the key; a clock that counts a suspend
// ---------------------------------------------------------------------------

/// Nodes 0 and then 1 restart empty while the lock is held: each loss alone
/// leaves a quorum, together they left one node and the command was stopped.
/// The heartbeat now puts the key back on a node that lost it.
#[test]
fn losses_spread_over_a_run_do_not_add_up() {
    let mut cluster = Cluster::new(3);
    let dir = tempdir();
    let k = keys("retake");
    let running = base(&cluster.urls(), "retake", &dir)
        .args(["-t", "1s", "-v", "-c", "touch started; sleep 3"])
        .spawn();
    await_marker(&dir, "started", &running);
    let token = cluster.await_value(2, k.lock());
    cluster.node_mut(0).restart();
    assert!(
        wait_until(Duration::from_secs(2), || cluster[0].get(k.lock()).as_ref()
            == Some(&token)),
        "node 0 never got the key back"
    );
    cluster.node_mut(1).restart();
    assert!(
        wait_until(Duration::from_secs(2), || cluster[1].get(k.lock()).as_ref()
            == Some(&token)),
        "node 1 never got the key back"
    );
    let out = running.wait();
    out.assert_code(0);
    assert!(out.stderr.contains("had lost the key: taken back"), "{out}");
}

/// A forced unlock deletes the key everywhere: nothing may re-take it, the
/// holder stops (exit 76).
#[test]
fn a_forced_unlock_is_not_taken_back() {
    let cluster = Cluster::new(3);
    let dir = tempdir();
    let running = base(&cluster.urls(), "forced", &dir)
        .args(["-t", "1s", "-c", &format!("touch started; {WAIT_FOR_GO}")])
        .spawn();
    await_marker(&dir, "started", &running);
    Test::new()
        .args(["unlock", "-r", &cluster.urls(), "-k", "forced", "--force"])
        .expect_code(0);
    let out = running.wait();
    out.assert_code(76);
    assert!(cluster.holders(keys("forced").lock()).is_empty(), "{out}");
}

/// A host suspended for 10 s: CLOCK_MONOTONIC stands still, CLOCK_BOOTTIME
/// does not. Test builds read the jump from `REDLOCK_TEST_SUSPEND_FILE`
/// (see `src/clock.rs`). The supervisor must stop the command at once, not
/// a heartbeat later.
#[test]
fn a_resumed_host_stops_the_command_at_once() {
    let node = RedisNode::start();
    let dir = tempdir();
    let suspend = dir.join("suspend");
    fs::write(&suspend, "0").expect("suspend file");
    let running = base(&node.url(), "suspend", &dir)
        .env("REDLOCK_TEST_SUSPEND_FILE", &suspend)
        .args([
            "-t",
            "6s",
            "-c",
            "echo $$ > sh.pid; sleep 30 & echo $! > sleep.pid; touch started; wait",
        ])
        .spawn();
    await_marker(&dir, "started", &running);
    let tree = [
        read_pid_file(&dir.join("sh.pid"), START),
        read_pid_file(&dir.join("sleep.pid"), START),
    ];
    let resumed = Instant::now();
    fs::write(&suspend, "10000").expect("suspend");
    let mut running = running;
    let out = running.wait_timeout(Duration::from_secs(1));
    let Some(out) = out else {
        panic!(
            "still running 1 s after a 10 s suspend of a 6 s lock\n{}",
            running.stderr_so_far()
        );
    };
    let stopped = resumed.elapsed();
    let left: Vec<i32> = tree.iter().copied().filter(|&p| pid_alive(p)).collect();
    tree.iter().for_each(|&p| kill_if_alive(p));
    out.assert_code(76);
    assert!(
        left.is_empty(),
        "the command's processes {left:?} outlived the stop\n{out}"
    );
    eprintln!("resumed after a simulated 10 s suspend: stopped {stopped:?} later");
}

// ---------------------------------------------------------------------------
// 7. The holder record
// ---------------------------------------------------------------------------

/// The `command` field of lock `name`'s holder record.
fn recorded_command(node: &RedisNode, name: &str) -> String {
    let record: Vec<(String, String)> =
        node.cmd(redis::cmd("HGETALL").arg(keys(name).holder(None)));
    record
        .into_iter()
        .find(|(f, _)| f == "command")
        .map(|(_, v)| v)
        .unwrap_or_else(|| panic!("no command in the holder record of {name}"))
}

#[test]
fn the_holder_record_masks_credentials() {
    let node = RedisNode::start();
    let dir = tempdir();
    let running = base(&node.url(), "record", &dir)
        .args([
            "--record-command",
            "masked",
            "--",
            "sh",
            "-c",
            &format!("touch held; {WAIT_FOR_GO}"),
            "sh",
            "postgres://u:hunter2@db/app",
            "--password",
            "hunter3",
            "PGPASSWORD=hunter4",
        ])
        .spawn();
    await_marker(&dir, "held", &running);
    let command = recorded_command(&node, "record");
    let status = Test::new()
        .args(["status", "-r", &node.url(), "-k", "record"])
        .run();
    touch(&dir, "go");
    running.wait().assert_code(0);
    for secret in ["hunter2", "hunter3", "hunter4"] {
        assert!(!command.contains(secret), "{secret} stored: {command}");
        assert!(!status.stdout.contains(secret), "{secret} shown: {status}");
    }
    assert!(command.contains("postgres://u:***@db/app"), "{command}");
    // By default, only the program's name.
    let _ = fs::remove_file(dir.join("held"));
    let _ = fs::remove_file(dir.join("go"));
    let running = base(&node.url(), "record", &dir)
        .args(["--", "/bin/sh", "-c"])
        .arg(format!("touch held; {WAIT_FOR_GO}"))
        .arg("postgres://u:hunter2@db/app")
        .spawn();
    await_marker(&dir, "held", &running);
    let command = recorded_command(&node, "record");
    touch(&dir, "go");
    running.wait().assert_code(0);
    assert_eq!(command, "sh");
}

/// Every key's contents on `node`, whatever its type, as one text.
fn everything_on(node: &RedisNode) -> String {
    let mut all = String::new();
    for key in node.all_keys() {
        all.push_str(&String::from_utf8_lossy(&key));
        let kind: String = node.cmd(redis::cmd("TYPE").arg(&key));
        let parts: Vec<Vec<u8>> = match kind.as_str() {
            "string" => vec![node.cmd(redis::cmd("GET").arg(&key))],
            "hash" => node.cmd(redis::cmd("HGETALL").arg(&key)),
            "list" => node.cmd(redis::cmd("LRANGE").arg(&key).arg(0).arg(-1)),
            "zset" => node.cmd(redis::cmd("ZRANGE").arg(&key).arg(0).arg(-1)),
            "set" => node.cmd(redis::cmd("SMEMBERS").arg(&key)),
            other => panic!("a {other} key: {}", key.escape_ascii()),
        };
        for p in parts {
            all.push('\n');
            all.push_str(&String::from_utf8_lossy(&p));
        }
        all.push('\n');
    }
    all
}

/// `-c` lines that hold a secret in each common form, by default and with
/// `--record-command masked`: no node's keys, no `status` output (text or
/// JSON) and no `history` hold any of them, while the lock is held and after.
#[test]
fn no_secret_of_a_shell_line_leaves_the_host() {
    let cluster = Cluster::new(3);
    let urls = cluster.urls();
    let dir = tempdir();
    let secrets = [
        "Pw1redis",
        "Pw2mysql",
        "Pw3curl",
        "Pw4bearer",
        "Pw5aws",
        "Pw6pg",
        "Pw7flag",
        "Pw8key",
    ];
    let line = format!(
        ": redis-cli -a Pw1redis ping; : mysql -pPw2mysql -e 'select 1'; \
         : curl -fsS -u me:Pw3curl https://x; \
         : curl -H 'Authorization: Bearer Pw4bearer' https://x; \
         AWS_SECRET_ACCESS_KEY=Pw5aws true; : psql postgres://u:p/Pw6pg@db/app; \
         : tool --password Pw7flag; : tool --api-key=Pw8key; touch held; {WAIT_FOR_GO}"
    );
    for mode in [&[][..], &["--record-command", "masked"]] {
        for f in ["held", "go"] {
            let _ = fs::remove_file(dir.join(f));
        }
        let running = base(&urls, "secrets", &dir)
            .args(mode)
            .args(["-c", &line])
            .spawn();
        await_marker(&dir, "held", &running);
        cluster.await_on_all(lock_key("secrets"));
        let admin = |args: &[&str]| {
            Test::new()
                .args(args)
                .args(["-r", &urls, "-k", "secrets"])
                .run()
        };
        let mut seen = vec![
            ("status", admin(&["status"]).stdout),
            ("status --json", admin(&["status", "--json"]).stdout),
        ];
        for (i, node) in cluster.iter().enumerate() {
            seen.push((["node 0", "node 1", "node 2"][i], everything_on(node)));
        }
        let command = recorded_command(&cluster[0], "secrets");
        touch(&dir, "go");
        running.wait().assert_code(0);
        seen.push(("history", admin(&["history"]).stdout));
        seen.push(("history --json", admin(&["history", "--json"]).stdout));
        for (i, node) in cluster.iter().enumerate() {
            seen.push((
                ["node 0 after", "node 1 after", "node 2 after"][i],
                everything_on(node),
            ));
        }
        for (place, text) in &seen {
            for secret in secrets {
                assert!(
                    !text.contains(secret),
                    "{mode:?}: {secret} in {place}:\n{text}"
                );
            }
        }
        if mode.is_empty() {
            assert_eq!(command, "/bin/sh -c …", "{mode:?}");
        } else {
            assert!(
                command.contains("redis-cli -a *** ping") && command.contains("Bearer ***'"),
                "{command}"
            );
        }
    }
}

/// `sshpass -p SECRET` (a program known to take its password as the word
/// after `-p`), in a `-c` line and in argv: with `--record-command masked`
/// no key on any node and no `status` output holds SECRET while the lock is
/// held, and the record keeps the rest (`ssh -p 22`, a port, stays).
#[test]
fn sshpass_dash_p_is_masked() {
    const SECRET: &str = "Pw-sshpass-4417";
    let cluster = Cluster::new(3);
    let urls = cluster.urls();
    let dir = tempdir();
    // A stand-in for sshpass, so that the argv form runs (and holds the
    // lock) on a host without it.
    let fake = dir.join("sshpass");
    fs::write(&fake, format!("#!/bin/sh\ntouch held\n{WAIT_FOR_GO}\n")).expect("fake sshpass");
    fs::set_permissions(&fake, std::os::unix::fs::PermissionsExt::from_mode(0o755)).expect("chmod");
    let line = format!(": sshpass -p {SECRET} ssh -p 22 h uptime; touch held; {WAIT_FOR_GO}");
    let forms: [(&str, Vec<String>, &str); 2] = [
        (
            "-c",
            vec!["-c".into(), line],
            "/bin/sh -c : sshpass -p *** ssh -p 22 h uptime;",
        ),
        (
            "argv",
            ["--", "./sshpass", "-p", SECRET, "ssh", "-p", "22", "h"]
                .map(String::from)
                .to_vec(),
            "./sshpass -p *** ssh -p 22 h",
        ),
    ];
    for (form, args, want) in forms {
        for f in ["held", "go"] {
            let _ = fs::remove_file(dir.join(f));
        }
        let running = base(&urls, "sshpass", &dir)
            .args(["--record-command", "masked"])
            .args(&args)
            .spawn();
        await_marker(&dir, "held", &running);
        cluster.await_on_all(lock_key("sshpass"));
        let status = Test::new()
            .args(["status", "-r", &urls, "-k", "sshpass"])
            .run();
        let mut seen = vec![("status".to_string(), status.stdout)];
        for (i, node) in cluster.iter().enumerate() {
            seen.push((format!("node {i}"), everything_on(node)));
        }
        let command = recorded_command(&cluster[0], "sshpass");
        touch(&dir, "go");
        running.wait().assert_code(0);
        for (place, text) in &seen {
            assert!(
                !text.contains(SECRET),
                "[{form}] {SECRET} in {place}:\n{text}"
            );
        }
        assert!(command.starts_with(want), "[{form}] {command}");
    }
}

/// The line a shell runs, given in argv (`-- sh -c '...'`, `-- bash -c
/// '...'`), holds the secrets in the forms a `-c` line or argv would: with
/// `--record-command masked` no key on any node, and no `status` output
/// (text or JSON), holds any of them while the lock is held; the record
/// keeps the line, masked.
#[test]
fn secrets_inside_the_line_a_shell_runs_are_masked() {
    let cluster = Cluster::new(3);
    let urls = cluster.urls();
    let dir = tempdir();
    let hold = format!("touch held; {WAIT_FOR_GO}");
    let forms: [(Vec<String>, &[&str], &str); 4] = [
        (
            vec![
                "sh".into(),
                "-c".into(),
                format!(": mysql -pPw1mysql db; {hold}"),
            ],
            &["Pw1mysql"],
            "sh -c ': mysql -p*** db;",
        ),
        (
            vec![
                "bash".into(),
                "-c".into(),
                format!(": sshpass -p Pw2sshpass ssh h; {hold}"),
            ],
            &["Pw2sshpass"],
            "bash -c ': sshpass -p *** ssh h;",
        ),
        (
            vec![
                "sh".into(),
                "-c".into(),
                format!(
                    ": curl --user=u:Pw3curl https://x; : tool --password=Pw4flag; \
                     : curl -u u:Pw5curl x; PGPASSWORD=Pw6pg true; \
                     : psql postgres://u:Pw7url@db/app; {hold}"
                ),
            ],
            &["Pw3curl", "Pw4flag", "Pw5curl", "Pw6pg", "Pw7url"],
            "sh -c ': curl --user=u:*** https://x; : tool --password=***; : curl -u u:*** x; \
             PGPASSWORD=*** true; : psql postgres://u:***@db/app;",
        ),
        (
            vec![
                "sh".into(),
                "-c".into(),
                hold.clone(),
                "sh".into(),
                "--user=u:Pw8curl".into(),
            ],
            &["Pw8curl"],
            "sh -c 'touch held;",
        ),
    ];
    for (argv, secrets, want) in forms {
        for f in ["held", "go"] {
            let _ = fs::remove_file(dir.join(f));
        }
        let running = base(&urls, "shline", &dir)
            .args(["--record-command", "masked", "--"])
            .args(&argv)
            .spawn();
        await_marker(&dir, "held", &running);
        cluster.await_on_all(lock_key("shline"));
        let status = |extra: &[&str]| {
            Test::new()
                .args(["status", "-r", &urls, "-k", "shline"])
                .args(extra)
                .run()
                .stdout
        };
        let mut seen = vec![
            ("status".to_string(), status(&[])),
            ("status --json".to_string(), status(&["--json"])),
        ];
        for (i, node) in cluster.iter().enumerate() {
            seen.push((format!("node {i}"), everything_on(node)));
        }
        let command = recorded_command(&cluster[0], "shline");
        touch(&dir, "go");
        running.wait().assert_code(0);
        for (place, text) in &seen {
            for secret in secrets {
                assert!(
                    !text.contains(secret),
                    "[{argv:?}] {secret} in {place}:\n{text}"
                );
            }
        }
        assert!(command.starts_with(want), "[{argv:?}] {command}");
    }
}

// ---------------------------------------------------------------------------
// 8. Files written by redlock-run
// ---------------------------------------------------------------------------

/// `--report /tmp/job.json` in a root crontab: anyone could plant a symlink
/// at `/tmp/job.tmp~` (the old temporary name) pointing at a file root owns.
#[test]
fn the_report_never_follows_a_planted_symlink() {
    let node = RedisNode::start();
    let shared = tempdir();
    let victim = shared.join("shadow");
    fs::write(&victim, "root:secret\n").expect("victim");
    for planted in ["job.tmp~", ".job.json.tmp", "job.json.tmp"] {
        std::os::unix::fs::symlink(&victim, shared.join(planted)).expect("symlink");
    }
    let report = shared.join("job.json");
    Test::new()
        .args(["-r", &node.url(), "-k", "report-safe", "--report"])
        .arg(&report)
        .args(["-c", "true"])
        .expect_code(0);
    assert_eq!(
        fs::read_to_string(&victim).expect("victim"),
        "root:secret\n"
    );
    let meta = fs::symlink_metadata(&report).expect("report");
    assert!(meta.file_type().is_file(), "report is not a plain file");
    assert!(
        fs::read_to_string(&report)
            .expect("report")
            .contains("\"outcome\":\"ok\"")
    );
    // A symlink at the report's own path is replaced, not followed.
    fs::remove_file(&report).expect("rm");
    std::os::unix::fs::symlink(&victim, &report).expect("symlink");
    Test::new()
        .args(["-r", &node.url(), "-k", "report-safe", "--report"])
        .arg(&report)
        .args(["-c", "true"])
        .expect_code(0);
    assert_eq!(
        fs::read_to_string(&victim).expect("victim"),
        "root:secret\n"
    );
    assert!(
        fs::symlink_metadata(&report)
            .expect("report")
            .file_type()
            .is_file()
    );
}

/// A `--metrics-file` and a `--report` that belong to another user (as
/// node_exporter's textfile directory often does), 0644, rewritten by a run
/// under umask 077: still 0644, same owner and group. A new one gets 0644
/// unless the umask is stricter. Needs root to give a file away (CI runs as
/// root); the mode part runs as anyone.
#[test]
fn rewritten_files_keep_their_owner_and_mode() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let node = RedisNode::start();
    let dir = tempdir();
    // SAFETY: geteuid cannot fail.
    let root = unsafe { libc::geteuid() } == 0;
    let (uid, gid) = if root {
        (65534, 65534)
    } else {
        crate::support::not_run(
            "bookkeeping::rewritten_files_keep_their_owner_and_mode (the owner)",
            "not root: the files stay ours, only their mode is checked",
        );
        let meta = fs::metadata(dir.path()).expect("dir");
        (meta.uid(), meta.gid())
    };
    let (metrics, report) = (dir.join("jobs.prom"), dir.join("job.json"));
    for file in [&metrics, &report] {
        fs::write(file, "").expect("create");
        fs::set_permissions(file, fs::Permissions::from_mode(0o644)).expect("chmod");
        std::os::unix::fs::chown(file, Some(uid), Some(gid)).expect("chown");
    }
    for _ in 0..2 {
        base(&node.url(), "owned", &dir)
            .umask(0o077)
            .arg("--metrics-file")
            .arg(&metrics)
            .arg("--report")
            .arg(&report)
            .args(["-c", "true"])
            .expect_code(0);
        for file in [&metrics, &report] {
            let meta = fs::metadata(file).expect("meta");
            assert_eq!(
                (meta.mode() & 0o7777, meta.uid(), meta.gid()),
                (0o644, uid, gid),
                "{} lost its mode or owner",
                file.display()
            );
        }
    }
    assert!(
        fs::read_to_string(&metrics)
            .expect("metrics")
            .contains("redlock_run_runs_total{key=\"owned\",outcome=\"ok\"} 2"),
        "the run was not counted"
    );
    // New files: 0644, or what a stricter umask leaves.
    for (umask, want) in [(0o022, 0o644), (0o077, 0o600)] {
        let fresh = dir.join(format!("fresh-{umask:o}.prom"));
        base(&node.url(), "owned", &dir)
            .umask(umask)
            .arg("--metrics-file")
            .arg(&fresh)
            .args(["-c", "true"])
            .expect_code(0);
        let mode = fs::metadata(&fresh).expect("fresh").mode() & 0o7777;
        assert_eq!(mode, want, "a new file under umask {umask:o}: {mode:o}");
    }
}

/// Log lines go through a bounded queue: with nobody reading stderr, lines
/// beyond it are dropped rather than holding redlock-run up, and once
/// stderr is read again redlock-run says how many it dropped.
#[test]
fn lines_dropped_while_stderr_is_not_read_are_counted_once_it_is() {
    use std::io::Read;
    use std::os::fd::{FromRawFd, OwnedFd};
    use std::process::Stdio;
    let node = RedisNode::start();
    let dir = tempdir();
    let mut fds = [0; 2];
    // SAFETY: a valid array for pipe(2).
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    // SAFETY: fresh descriptors, owned here.
    let (read_end, write_end) =
        unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    // The smallest pipe (one page), filled: the first line blocks the log
    // thread, and every line after the queue's 256 is dropped.
    // SAFETY: fcntl on our own descriptor.
    unsafe {
        libc::fcntl(fds[1], libc::F_SETPIPE_SZ, 4096);
        let fl = libc::fcntl(fds[1], libc::F_GETFL);
        libc::fcntl(fds[1], libc::F_SETFL, fl | libc::O_NONBLOCK);
    }
    let mut writer = fs::File::from(write_end);
    let chunk = [b'x'; 512];
    while std::io::Write::write(&mut writer, &chunk).is_ok_and(|n| n > 0) {}
    // SAFETY: back to blocking, as a pipe to a stuck reader would be.
    unsafe {
        let fl = libc::fcntl(fds[1], libc::F_GETFL);
        libc::fcntl(fds[1], libc::F_SETFL, fl & !libc::O_NONBLOCK);
    }
    let mut child = crate::support::cmd::command(crate::support::cmd::BIN)
        .args(["-r", &node.url(), "-k", "dropped", "-v", "-c"])
        .arg("trap : USR1; echo $$ > sh.pid; while [ ! -e go ]; do sleep 0.01; done; exit 0")
        .current_dir(dir.path())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::from(writer))
        .spawn()
        .expect("spawn redlock-run");
    let wrapper = child.id() as i32;
    read_pid_file(&dir.join("sh.pid"), START);
    // Each USR1 is passed on to the command and logged (-v): 600 lines,
    // spaced so that no two signals merge.
    let began = Instant::now();
    for _ in 0..600 {
        send_signal(wrapper, libc::SIGUSR1);
        std::thread::sleep(Duration::from_micros(500));
    }
    let signalling = began.elapsed();
    let reader = std::thread::spawn(move || {
        let mut all = Vec::new();
        let _ = fs::File::from(read_end).read_to_end(&mut all);
        String::from_utf8_lossy(&all).into_owned()
    });
    touch(&dir, "go");
    let exited = wait_until(Duration::from_secs(10), || {
        matches!(child.try_wait(), Ok(Some(_)))
    });
    if !exited {
        let _ = child.kill();
    }
    let status = child.wait().ok().and_then(|s| s.code());
    let text = reader.join().expect("reader");
    let passed = text
        .lines()
        .filter(|l| l.starts_with("redlock-run: passed signal"))
        .count();
    let dropped: Vec<u64> = text
        .lines()
        .filter_map(|l| {
            l.strip_prefix("redlock-run: ")?
                .strip_suffix(" log line(s) dropped: stderr was not being read")?
                .parse()
                .ok()
        })
        .collect();
    eprintln!(
        "stderr not read while 600 signals were passed on ({signalling:?}): {passed} lines \
         written, dropped {dropped:?}"
    );
    assert!(exited, "redlock-run hung on its stderr");
    assert_eq!(status, Some(0));
    // Nothing dropped can have been written: the count is what is missing.
    let total: u64 = dropped.iter().sum();
    assert!(
        !dropped.is_empty() && total > 0,
        "no drop reported for {passed} of 600 lines written\n{text}"
    );
    assert!(
        passed as u64 + total <= 600 && passed >= 100,
        "{passed} lines written and {total} said dropped, of 600 (the queue holds 256)"
    );
}
