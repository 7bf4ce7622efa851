//! Containment: the lock covers the command's whole process tree, whatever
//! process group or session a descendant moves to, and nothing (a stderr
//! nobody reads included) can delay a stop.
//!
//! The shapes are the ones real scripts take: a background job left behind
//! (`cmd &` and exit), a `setsid`'d helper, a double-forked daemon
//! (`( setsid cmd & )`). Each process writes its own pid to a file, so the
//! test can watch it independently of redlock-run.

use std::fs;
use std::os::fd::{FromRawFd, OwnedFd};
use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::support::cmd::BIN;
use crate::support::stalls::Stalls;
use crate::support::timed::{Proc, instant_ns, late_stops, lock_timeline, margin_ms, sent, timely};
use crate::support::{
    Cluster, FaultProxy, Mode, RedisNode, TempDir, Test, can_run, child_pids, descendant_pids,
    files_closed, kill_if_alive, last_cpus, lock_key, parent_pid, pid_alive, process_name,
    proxied_urls, read_pid_file, tempdir, wait_until, wait_until_every,
};
use crate::support::{START, WAIT_FOR_GO, base, touch};

/// Kills whatever of `pids` is left (cleanup after a failed assertion).
fn reap_all(pids: &[i32]) {
    for &p in pids {
        kill_if_alive(p);
    }
}

/// A command that leaves, each writing its pid: a background job (`bg`), a
/// `setsid`'d process (`sid`), a double-forked daemon in its own session
/// (`daemon`); each runs `pre`, writes its pid, then runs `body`. The command
/// waits until all three pid files exist (so a stop cannot come before a
/// `trap` in `pre` is set), then runs `tail`.
fn tree_script(pre: &str, body: &str, tail: &str) -> String {
    format!(
        "sh -c '{pre} echo $$ > bg.pid; {body}' >/dev/null 2>&1 & \
         setsid sh -c '{pre} echo $$ > sid.pid; {body}' >/dev/null 2>&1 & \
         ( setsid sh -c '{pre} echo $$ > daemon.pid; {body}' >/dev/null 2>&1 & ); \
         while [ ! -e bg.pid ] || [ ! -e sid.pid ] || [ ! -e daemon.pid ]; do sleep 0.01; done; \
         {tail}"
    )
}

fn tree_pids(dir: &TempDir) -> Vec<i32> {
    ["bg.pid", "sid.pid", "daemon.pid"]
        .iter()
        .map(|f| read_pid_file(&dir.join(f), START))
        .collect()
}

#[test]
fn background_job_keeps_the_lock_until_it_ends() {
    let cluster = Cluster::new(3);
    let dir = tempdir();
    let key = lock_key("bg");
    // The command exits 3 at once; its background job runs until `go`.
    let mut running = base(&cluster.urls(), "bg", &dir)
        .args([
            "-c",
            &format!(
                "sh -c 'echo $$ > bg.pid; {WAIT_FOR_GO}; touch done' >/dev/null 2>&1 & exit 3"
            ),
        ])
        .spawn();
    let bg = read_pid_file(&dir.join("bg.pid"), START);
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        !running.has_exited(),
        "redlock-run exited while the background job runs\n{}",
        running.stderr_so_far()
    );
    assert_eq!(
        cluster.holders(&key),
        vec![0, 1, 2],
        "key while the job runs"
    );
    base(&cluster.urls(), "bg", &dir)
        .args(["-c", "touch second"])
        .expect_code(75);
    assert!(
        !dir.has("second"),
        "a contender ran beside the leftover job"
    );
    // Across heartbeats too (TTL 30 s: a few seconds is enough to see that
    // the key is not simply left to a TTL).
    touch(&dir, "go");
    let out = running.wait();
    out.assert_code(3);
    assert!(dir.has("done"), "the job was cut short");
    assert!(!pid_alive(bg));
    assert!(
        cluster.holders(&key).is_empty(),
        "key left after the job ended"
    );
    base(&cluster.urls(), "bg", &dir)
        .args(["-c", "touch third"])
        .expect_code(0);
}

#[test]
fn leftovers_are_kept_across_heartbeats() {
    let cluster = Cluster::new(3);
    let dir = tempdir();
    let key = lock_key("bg-ttl");
    let running = base(&cluster.urls(), "bg-ttl", &dir)
        .args(["-t", "1s"])
        .args([
            "-c",
            &format!("sh -c 'echo $$ > bg.pid; {WAIT_FOR_GO}' >/dev/null 2>&1 &"),
        ])
        .spawn();
    let bg = read_pid_file(&dir.join("bg.pid"), START);
    // Three TTLs: only heartbeats keep the key.
    std::thread::sleep(Duration::from_secs(3));
    let held = cluster.holders(&key);
    touch(&dir, "go");
    let out = running.wait();
    kill_if_alive(bg);
    assert_eq!(
        held,
        vec![0, 1, 2],
        "key after three TTLs of leftovers\n{out}"
    );
    out.assert_code(0);
    assert!(cluster.holders(&key).is_empty());
}

#[test]
fn leftovers_kill_stops_the_whole_tree_within_kill_after_then_releases() {
    let cluster = Cluster::new(3);
    let dir = tempdir();
    let key = lock_key("bg-kill");
    // Every leftover (three shells, each with its sleep) ignores SIGTERM:
    // only the SIGKILL, --kill-after later, ends them.
    let script = tree_script("trap \"\" TERM;", "sleep 30", "exit 4");
    let out = base(&cluster.urls(), "bg-kill", &dir)
        .args([
            "--leftovers",
            "kill",
            "--kill-after",
            "700ms",
            "-v",
            "-c",
            &script,
        ])
        .run();
    // The command's status first: a run that never started it wrote no
    // pid files, and its output says why.
    out.assert_code(4);
    let pids = tree_pids(&dir);
    let gone = pids.iter().all(|&p| !pid_alive(p));
    reap_all(&pids);
    assert!(gone, "leftovers {pids:?} survived --leftovers kill\n{out}");
    assert!(
        out.elapsed >= Duration::from_millis(650) && out.elapsed < Duration::from_secs(3),
        "want about --kill-after (700ms)\n{out}"
    );
    assert!(cluster.holders(&key).is_empty(), "key left\n{out}");
    assert!(
        out.stderr.contains("stopping 6 process(es) it left behind"),
        "-v names what it stops\n{out}"
    );

    // The same tree with the default (wait): redlock-run waits for all three.
    let script = tree_script("", &format!("{WAIT_FOR_GO}; touch done.$$"), "exit 0");
    let mut running = base(&cluster.urls(), "bg-kill", &dir)
        .args(["-v", "-c", &script])
        .spawn();
    for f in ["bg.pid", "sid.pid", "daemon.pid"] {
        let _ = fs::remove_file(dir.join(f));
    }
    let pids = tree_pids(&dir);
    assert!(
        wait_until(START, || running
            .stderr_so_far()
            .contains("process(es) it left behind")),
        "-v names the leftovers\n{}",
        running.stderr_so_far()
    );
    for p in &pids {
        let name = process_name(*p).unwrap_or_default();
        assert!(
            running.stderr_so_far().contains(&format!("{p} ({name})")),
            "leftover {p} ({name}) not named\n{}",
            running.stderr_so_far()
        );
    }
    assert!(!running.has_exited());
    touch(&dir, "go");
    let out = running.wait();
    out.assert_code(0);
    assert!(pids.iter().all(|p| dir.has(format!("done.{p}"))), "{out}");
    assert!(cluster.holders(&key).is_empty());
}

/// Polls `pids` every millisecond until none is alive; when.
fn await_gone(pids: &[i32], limit: Duration) -> Option<Instant> {
    await_gone_from(pids, limit).map(|(gone, _)| gone)
}

/// [`await_gone`], and the CPUs the last of them to die last ran on while
/// seen alive: where a stall could have kept them from dying.
fn await_gone_from(pids: &[i32], limit: Duration) -> Option<(Instant, Vec<usize>)> {
    // It dates the tree's end: see `timely`.
    let real_time = timely(true);
    let seen = polled_gone(pids, limit);
    if real_time {
        timely(false);
    }
    seen
}

fn polled_gone(pids: &[i32], limit: Duration) -> Option<(Instant, Vec<usize>)> {
    let start = Instant::now();
    let mut cpus = Vec::new();
    loop {
        // Stopped once none can run code of its own: SIGKILLed, or on the
        // kernel's exit path, however long the host then takes to free it
        // (beside two busy loops a killed tree took 1 s in its exit).
        let running: Vec<i32> = pids.iter().copied().filter(|&p| can_run(p)).collect();
        if running.is_empty() {
            return Some((Instant::now(), cpus));
        }
        cpus = running.iter().flat_map(|&p| last_cpus(p)).collect();
        if start.elapsed() > limit {
            return None;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Every process of the command's tree under redlock-run `wrapper` (the
/// guard excluded), once all four `sleep 30`s of a [`tree_script`] with body
/// and tail `sleep 30` run: the shells alone would not show a child that
/// outlives its shell.
fn whole_tree(wrapper: i32) -> Vec<i32> {
    let mut tree = Vec::new();
    let complete = wait_until(START, || {
        let guards: Vec<i32> = child_pids(wrapper)
            .into_iter()
            .filter(|&p| process_name(p).as_deref() == Some("redlock-guard"))
            .collect();
        tree = guards.iter().flat_map(|&g| descendant_pids(g)).collect();
        tree.iter()
            .filter(|&&p| process_name(p).as_deref() == Some("sleep"))
            .count()
            >= 4
    });
    assert!(complete, "the tree never had its four sleeps: {tree:?}");
    tree
}

/// Also run on a simulated old kernel (`old_kernel.rs`).
#[test]
pub(crate) fn lost_lock_and_timeout_reach_setsid_and_daemon_processes() {
    let cluster = Cluster::new(3);
    let proxies: Vec<FaultProxy> = cluster.iter().map(|n| FaultProxy::new(n.port())).collect();
    let urls = proxied_urls(&proxies);
    let ttl = Duration::from_secs(1);
    // Judged where redlock-run decided: each stop it says it sent went out
    // before the deadline, with no excuse. The tree, seen gone, is gone
    // before the deadline too, unless a stall of a CPU where it ran covers
    // the kernel's part (from the last stop's signal to its end) but the
    // slack (see `Stalls`). No run is run again.
    let stalls = Stalls::watch();
    let mut margins = Vec::new();
    for ignore_term in [false, true] {
        let dir = tempdir();
        let pre = if ignore_term { "trap \"\" TERM;" } else { "" };
        for p in &proxies {
            p.set_mode(Mode::Pass);
        }
        let args: Vec<String> = [
            "-r",
            &urls,
            "-k",
            &format!("lost-tree-{ignore_term}"),
            "-t",
            "1s",
            "-vv",
            "-c",
            &tree_script(pre, "sleep 30", "sleep 30"),
        ]
        .iter()
        .map(|a| a.to_string())
        .collect();
        let mut a = Proc::spawn(dir.path(), &args);
        tree_pids(&dir);
        let pids = whole_tree(a.pid());
        // Every node black-holed: no extension can succeed.
        for p in &proxies {
            p.set_mode(Mode::BlackHole);
        }
        let gone = await_gone_from(&pids, Duration::from_secs(5));
        let code = a.wait_code(Duration::from_secs(5));
        reap_all(&pids);
        assert!(a.drain(Duration::from_secs(5)), "its stderr stayed open");
        let lines = a.stderr();
        let deadline = lock_timeline(&lines, ttl)
            .1
            .expect("deadline in -vv output");
        let (gone, cpus) = gone
            .unwrap_or_else(|| panic!("tree {pids:?} survived the lost lock\n{}", a.stderr_text()));
        assert_eq!(code, Some(76), "{}", a.stderr_text());
        let said = sent(&lines);
        let late = late_stops(&said);
        assert!(
            late.is_empty(),
            "lost lock (ignore TERM: {ignore_term}): stops decided at or after the deadline: \
             {late:?}\n{}",
            a.stderr_text()
        );
        let m = margin_ms(deadline, gone);
        let stall = said.iter().rev().find(|s| s.stops()).and_then(|last| {
            let signalled = instant_ns(deadline) - (last.lead_ms * 1e6) as i128;
            stalls.excuse(signalled, instant_ns(gone), &cpus)
        });
        assert!(
            m > 0.0 || stall.is_some(),
            "lost lock (ignore TERM: {ignore_term}): tree gone {:.1} ms after the deadline \
             (on CPUs {cpus:?}; longest stall around it: {:?})\n{}",
            -m,
            stalls.longest_within(instant_ns(deadline) - 200_000_000, instant_ns(gone)),
            a.stderr_text()
        );
        let said: Vec<String> = said.iter().map(|s| s.to_string()).collect();
        margins.push(format!("{m:+.1} ms ({}; {stall:?})", said.join(", ")));
    }
    for p in &proxies {
        p.set_mode(Mode::Pass);
    }
    // --max-runtime reaches them too, TERM-ignoring ones by the SIGKILL.
    let dir = tempdir();
    let running = Test::new()
        .current_dir(dir.path())
        .args(["-r", &cluster.urls(), "-k", "timeout-tree"])
        .args(["--max-runtime", "300ms", "--kill-after", "300ms"])
        .args([
            "-c",
            &tree_script("trap \"\" TERM;", "sleep 30", "sleep 30"),
        ])
        .spawn();
    tree_pids(&dir);
    let pids = whole_tree(running.pid());
    let out = running.wait();
    let all_gone = pids.iter().all(|&p| !pid_alive(p));
    reap_all(&pids);
    out.assert_code(124);
    assert!(all_gone, "--timeout left {pids:?}\n{out}");
    eprintln!(
        "lost lock, setsid'd + double-forked tree gone before the validity deadline by \
         {margins:?} (handles TERM, ignores TERM; the signals as redlock-run said them); --timeout: all gone at exit after {:?}",
        out.elapsed
    );
}

/// Also run on a simulated old kernel (`old_kernel.rs`).
#[test]
pub(crate) fn sigkill_of_redlock_run_takes_the_whole_tree_down() {
    let node = RedisNode::start();
    /// One try: from the SIGKILL and from the close of redlock-run's files
    /// to the tree seen gone; that close and end in realtime ns; the CPUs
    /// the last of the tree ran on.
    struct Try {
        from_kill: Duration,
        from_close: Duration,
        closed_ns: i128,
        gone_ns: i128,
        cpus: Vec<usize>,
    }
    let stalls = Stalls::watch();
    let mut tries = Vec::new();
    for i in 0..50 {
        let dir = tempdir();
        let name = format!("sigkill-{i}");
        let running = base(&node.url(), &name, &dir)
            .args([
                "-c",
                "sleep 30 & echo $! > bg.pid; setsid sleep 30 & echo $! > sid.pid; \
                 ( setsid sh -c 'echo $$ > daemon.pid; sleep 30' & ); sleep 30",
            ])
            .spawn();
        let pids = tree_pids(&dir);
        let mut all = pids.clone();
        all.extend(descendant_pids(running.pid()));
        let killed = Instant::now();
        let wrapper = running.pid();
        assert!(
            !files_closed(wrapper),
            "a live redlock-run's files read as closed"
        );
        assert!(crate::support::send_signal(wrapper, libc::SIGKILL));
        // The guard hears of the death when the killed process's exit
        // closes the control pipe, after the kernel has freed its memory:
        // beside two busy loops that exit took up to 1.5 s, and a CI run saw
        // 1 s between its leader's zombie state and the pipe's close. The
        // guard's part is timed from the close.
        let died = wait_until_every(Duration::from_secs(5), Duration::from_millis(1), || {
            files_closed(wrapper)
        });
        let died_at = Instant::now();
        let gone = await_gone_from(&all, Duration::from_secs(2));
        reap_all(&all);
        drop(running);
        assert!(died, "try {i}: redlock-run did not die of SIGKILL in 5 s");
        let (gone, cpus) = gone.unwrap_or_else(|| {
            panic!("try {i}: something of {all:?} outlived a SIGKILLed redlock-run")
        });
        tries.push(Try {
            from_kill: gone.duration_since(killed),
            from_close: gone.saturating_duration_since(died_at),
            closed_ns: instant_ns(died_at),
            gone_ns: instant_ns(gone),
            cpus,
        });
    }
    let pick = |f: fn(&Try) -> Duration| {
        let mut v: Vec<Duration> = tries.iter().map(f).collect();
        v.sort();
        (v[v.len() / 2], v[v.len() - 1], v)
    };
    let (median_all, worst_all, _) = pick(|t| t.from_kill);
    let (median, worst, guard) = pick(|t| t.from_close);
    // A try over the bound passes only if the host stood still: a watcher
    // saw the CPUs the tree last ran on (or every CPU) stalled over all of
    // it but the slack, so that nothing of the suite's, the guard included,
    // could run. The median and the 90th percentile are never excused.
    let bound = Duration::from_secs(1);
    let over: Vec<(bool, String)> = tries
        .iter()
        .filter(|t| t.from_close > bound)
        .map(|t| {
            let d = t.from_close;
            match stalls.excuse(t.closed_ns, t.gone_ns, &t.cpus) {
                Some(stall) => (true, format!("{d:?}, excused: {stall}")),
                None => (
                    false,
                    format!(
                        "{d:?} on CPUs {:?}, not excused (longest stall around it: {:?})",
                        t.cpus,
                        stalls.longest_within(t.closed_ns, t.gone_ns)
                    ),
                ),
            }
        })
        .collect();
    eprintln!(
        "SIGKILL of redlock-run to whole tree gone (background job, setsid'd child, \
         double-forked daemon, the guard), 50 tries: median {median_all:?}, worst \
         {worst_all:?}; from redlock-run's files closing: median {median:?}, worst {worst:?}; \
         over {bound:?}: {over:?}"
    );
    // docs/safety.md states median 6.5 ms, worst 10.7 ms from the kill
    // (release build; this debug build measured 3.8-6.4 ms medians beside
    // the rest of the suite). Allowed from the death: about twice the
    // median; a guard that noticed the death only by its 100 ms poll would
    // fail the median and the 90th percentile.
    // Beside the whole suite (eight tests at work on two cores) one or two
    // tries in 50 took 120 to 360 ms: the median and the 90th percentile
    // carry the bounds, the worst stays far inside any TTL.
    let p90 = guard[guard.len() * 9 / 10];
    assert!(
        median <= Duration::from_millis(15)
            && p90 <= Duration::from_millis(50)
            && over.iter().all(|(excused, _)| *excused),
        "from redlock-run's files closing: median {median:?}, 90th percentile {p90:?}, \
         worst {worst:?}, over {bound:?}: {over:?}: {guard:?}"
    );
}

/// A stderr nobody reads (a hung log shipper): the pipe is full before
/// redlock-run starts, so every log line would block. The lost lock must
/// still stop the whole tree before the validity deadline and exit 76.
#[test]
fn a_blocked_stderr_cannot_delay_a_stop() {
    let cluster = Cluster::new(3);
    let proxies: Vec<FaultProxy> = cluster.iter().map(|n| FaultProxy::new(n.port())).collect();
    let urls = proxied_urls(&proxies);
    let dir = tempdir();
    let mut fds = [0; 2];
    // SAFETY: a valid array for pipe(2).
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    // SAFETY: fresh descriptors, owned here.
    let (read_end, write_end) =
        unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    let mut writer = fs::File::from(write_end);
    // Fill it: a non-blocking writer stops at EAGAIN.
    // SAFETY: fcntl on our own descriptor.
    unsafe {
        let fl = libc::fcntl(fds[1], libc::F_GETFL);
        libc::fcntl(fds[1], libc::F_SETFL, fl | libc::O_NONBLOCK);
    }
    let chunk = [b'x'; 4096];
    let mut filled = 0;
    while let Ok(n) = std::io::Write::write(&mut writer, &chunk) {
        filled += n;
    }
    // SAFETY: back to blocking, as a real pipe to a stuck reader would be.
    unsafe {
        let fl = libc::fcntl(fds[1], libc::F_GETFL);
        libc::fcntl(fds[1], libc::F_SETFL, fl & !libc::O_NONBLOCK);
    }
    let mut command = crate::support::cmd::command(BIN);
    command
        // Default verbosity: the first line it writes is the lost-lock error,
        // the one that used to go out before the signals.
        .args(["-r", &urls, "-k", "stuck-stderr", "-t", "1s"])
        .args(["-c", &tree_script("", "sleep 30", "sleep 30")])
        .current_dir(dir.path())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::from(writer));
    let spawned = Instant::now();
    let mut child = command.spawn().expect("spawn");
    tree_pids(&dir);
    let pids = whole_tree(child.id() as i32);
    for p in &proxies {
        p.set_mode(Mode::BlackHole);
    }
    let gone = await_gone(&pids, Duration::from_secs(5));
    let exited = wait_until(Duration::from_secs(5), || {
        matches!(child.try_wait(), Ok(Some(_)))
    });
    let status = child.try_wait().ok().flatten();
    reap_all(&pids);
    if !exited {
        let _ = child.kill();
        let _ = child.wait();
    }
    drop(read_end);
    // The validity deadline is at most spawn + TTL - drift: the acquire
    // started after the spawn.
    let bound = spawned + Duration::from_millis(1000 - 12);
    let gone = gone.unwrap_or_else(|| panic!("tree {pids:?} survived with stderr blocked"));
    eprintln!(
        "stderr blocked ({filled} bytes in the pipe): tree gone {:.1} ms before the latest \
         possible validity deadline; redlock-run exited: {exited}",
        margin_ms(bound, gone)
    );
    assert!(gone < bound, "the tree outlived the validity deadline");
    assert!(exited, "redlock-run hung on its stderr");
    assert_eq!(status.and_then(|s| s.code()), Some(76));
}

#[test]
fn forwarded_signals_reach_every_process_of_the_tree() {
    let node = RedisNode::start();
    let dir = tempdir();
    let handler = |name: &str| {
        format!(
            "trap \"touch got.{name}; exit 0\" USR1; echo $$ > {name}.pid; while :; do sleep 0.05; done"
        )
    };
    // The main shell sets its trap first: the test signals once the three
    // others have written their pids (a CI run's signal came before a trap
    // set after them).
    let script = format!(
        "trap 'touch got.main' USR1; sh -c '{}' & setsid sh -c '{}' & ( setsid sh -c '{}' & ); {}",
        handler("bg"),
        handler("sid"),
        handler("daemon"),
        "while [ ! -e got.main ]; do sleep 0.05; done; wait"
    );
    let running = base(&node.url(), "signals-tree", &dir)
        .args(["-c", &script])
        .spawn();
    let pids = tree_pids(&dir);
    running.signal(libc::SIGUSR1);
    let out = running.wait();
    reap_all(&pids);
    for name in ["main", "bg", "sid", "daemon"] {
        assert!(
            dir.has(format!("got.{name}")),
            "{name} did not get USR1\n{out}"
        );
    }
    out.assert_code(0);
}

#[test]
fn the_command_keeps_its_own_view() {
    let node = RedisNode::start();
    let dir = tempdir();
    let out = base(&node.url(), "view", &dir)
        .args([
            "-v",
            "-c",
            "echo $$ > pid; ps -o pgid= -p $$ > pgid; ps -o sid= -p $$ > sid; \
             echo $PPID > ppid; ps -p $$ -o comm= > comm; \
             grep -E '^Sig(Blk|Ign)' /proc/self/status > signals",
        ])
        .expect_code(0);
    let read = |f: &str| {
        fs::read_to_string(dir.join(f))
            .expect("file")
            .trim()
            .to_string()
    };
    let pid: i32 = read("pid").parse().expect("pid");
    assert!(pid > 1, "the command sees a real pid, not a namespace's 1");
    assert!(
        out.stderr.contains(&format!("as pid {pid}")),
        "the pid -v reports is the one the command sees\n{out}"
    );
    assert_eq!(read("pgid"), pid.to_string(), "leads its own process group");
    assert_eq!(read("comm"), "sh", "ps sees it");
    // The test starts redlock-run with nothing blocked or ignored; the
    // command must get the same (not the guard's blocked SIGCHLD, not the
    // Rust runtime's ignored SIGPIPE). glibc's posix_spawn sets its two
    // internal signals (32, 33) to SIG_IGN in every child it starts and
    // re-installs its handlers when it needs them: those bits are allowed.
    let signals = read("signals");
    let mask = |name: &str| {
        signals
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
            .unwrap_or_else(|| panic!("no {name} in {signals}"))
    };
    assert_eq!(
        mask("SigBlk:"),
        0,
        "the command starts with a signal blocked"
    );
    let glibc_internal = (1u64 << 31) | (1 << 32);
    assert_eq!(
        mask("SigIgn:") & !glibc_internal,
        0,
        "the command starts with a signal ignored: {signals}"
    );
    let ppid: i32 = read("ppid").parse().expect("ppid");
    assert_ne!(read("sid"), pid.to_string(), "same session as the caller");
    // Its parent is the guard (gone by now); a live check below.
    let _ = ppid;
    let running = base(&node.url(), "view2", &dir)
        .args(["-c", &format!("echo $PPID > ppid2; {WAIT_FOR_GO}")])
        .spawn();
    let guard = read_pid_file(&dir.join("ppid2"), START);
    let name = process_name(guard);
    let guard_parent = parent_pid(guard);
    let wrapper = running.pid();
    touch(&dir, "go");
    running.wait().assert_code(0);
    assert_eq!(name.as_deref(), Some("redlock-guard"));
    assert_eq!(
        guard_parent,
        Some(wrapper),
        "the guard's parent is redlock-run"
    );
}

/// Started with its standard descriptors closed (`<&- >&- 2>&-`, as some
/// daemons and cron lines do), redlock-run puts /dev/null on each before it
/// opens anything: the command gets /dev/null there, not one of redlock-run's
/// own pipes or sockets.
#[test]
fn closed_standard_descriptors_reach_the_command_as_dev_null() {
    let node = RedisNode::start();
    let dir = tempdir();
    let mut command = crate::support::cmd::command("sh");
    command
        .args(["-c", r#"exec "$0" "$@" <&- >&- 2>&-"#])
        .arg(BIN)
        .args(["-r", &node.url(), "-k", "closed-fds"])
        .args(["-c", &format!("echo $$ > pid; {WAIT_FOR_GO}")])
        .current_dir(dir.path());
    let mut child = command.spawn().expect("spawn sh");
    let shell = read_pid_file(&dir.join("pid"), START);
    let fds: Vec<String> = (0..3)
        .map(|fd| match fs::read_link(format!("/proc/{shell}/fd/{fd}")) {
            Ok(target) => target.display().to_string(),
            Err(e) => format!("fd {fd}: {e}"),
        })
        .collect();
    touch(&dir, "go");
    let status = child.wait().expect("wait");
    assert_eq!(fds, ["/dev/null"; 3], "the command's standard descriptors");
    assert_eq!(status.code(), Some(0), "{status}");
    assert!(node.keys().is_empty(), "keys left: {:?}", node.keys());
}

#[test]
fn a_guard_killed_on_its_own_leaves_nothing_running() {
    let node = RedisNode::start();
    let dir = tempdir();
    let key = lock_key("guard-killed");
    let running = base(&node.url(), "guard-killed", &dir)
        .args([
            "-c",
            "echo $PPID > guard.pid; sleep 30 & echo $! > bg.pid; \
             ( setsid sh -c 'echo $$ > daemon.pid; sleep 30' & ); sleep 30",
        ])
        .spawn();
    let guard = read_pid_file(&dir.join("guard.pid"), START);
    let bg = read_pid_file(&dir.join("bg.pid"), START);
    let daemon = read_pid_file(&dir.join("daemon.pid"), START);
    assert!(crate::support::send_signal(guard, libc::SIGKILL));
    let out = running.wait();
    let gone = [bg, daemon].iter().all(|&p| !pid_alive(p));
    reap_all(&[bg, daemon]);
    assert!(gone, "orphans of the killed guard survived\n{out}");
    assert!(node.get(&key).is_none(), "lock not released\n{out}");
    assert!(out.stderr.contains("guard process went away"), "{out}");
}
