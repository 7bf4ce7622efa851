//! Containment at the edges: no process of the command's tree outlives the
//! lock, whatever it is or does, and whatever happens to redlock-run.
//!
//! The shapes: a process whose main thread has exited while another thread
//! runs on (`ps` shows `Zl`), a descendant that became root under an
//! unprivileged redlock-run, a stopped redlock-run, a guard that dies at each
//! step of starting the command, a tree larger than the descriptor limit.
//! The helpers that need more than a shell are small C programs built with
//! gcc by the test itself. Liveness is judged as the kernel does: a process
//! lives while any of its threads is not a zombie.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::support::cmd::BIN;
use crate::support::timed::{Proc, lock_timeline};
use crate::support::{
    Cluster, RedisNode, START, TempDir, Test, base, lock_key, read_pid_file, send_signal, tempdir,
    wait_until,
};

/// A process whose leader calls `pthread_exit()` while a worker thread
/// writes the wall-clock time (ns) to `argv[1]` every 5 ms (whole, by a
/// rename); its pid goes to
/// `argv[2]` first.
const ZL_C: &str = r#"
#include <pthread.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>
static const char *beat;
static void *work(void *arg) {
    (void)arg;
    for (;;) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        char tmp[4096];
        snprintf(tmp, sizeof tmp, "%s.tmp", beat);
        FILE *f = fopen(tmp, "w");
        if (f) { fprintf(f, "%lld\n", (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec); fclose(f); rename(tmp, beat); }
        usleep(5000);
    }
    return NULL;
}
int main(int argc, char **argv) {
    if (argc < 3) return 2;
    beat = argv[1];
    FILE *p = fopen(argv[2], "w");
    if (!p) return 2;
    fprintf(p, "%d\n", (int)getpid());
    fclose(p);
    pthread_t t;
    pthread_create(&t, NULL, work, NULL);
    pthread_exit(NULL);
}
"#;

/// Installed setuid root: becomes root for good (every uid 0), ignores
/// SIGTERM, writes its pid to `argv[1]`, then the time to `argv[2]` every
/// 5 ms for `argv[3]` milliseconds.
const ROOT_C: &str = r#"
#define _GNU_SOURCE
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
int main(int argc, char **argv) {
    if (argc < 4 || setresgid(0, 0, 0) != 0 || setresuid(0, 0, 0) != 0) return 2;
    signal(SIGTERM, SIG_IGN);
    FILE *p = fopen(argv[1], "w");
    if (!p) return 2;
    fprintf(p, "%d\n", (int)getpid());
    fclose(p);
    long ms = atol(argv[3]);
    for (long i = 0; i < ms / 5; i++) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        char tmp[4096];
        snprintf(tmp, sizeof tmp, "%s.tmp", argv[2]);
        FILE *f = fopen(tmp, "w");
        if (f) { fprintf(f, "%lld\n", (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec); fclose(f); rename(tmp, argv[2]); }
        usleep(5000);
    }
    return 0;
}
"#;

/// Compiles `src` into `dir/name`.
fn build_c(dir: &Path, name: &str, src: &str) -> PathBuf {
    let source = dir.join(format!("{name}.c"));
    let out = dir.join(name);
    fs::write(&source, src).expect("write C source");
    let status = Command::new("gcc")
        .args(["-O1", "-pthread", "-o"])
        .arg(&out)
        .arg(&source)
        .status()
        .expect("run gcc");
    assert!(status.success(), "gcc failed for {name}");
    out
}

/// A temporary directory that the unprivileged user can use too.
fn shared_dir() -> TempDir {
    let dir = tempdir();
    fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o777)).expect("chmod");
    dir
}

fn dead(state: &str) -> bool {
    let state = state
        .rfind(')')
        .and_then(|i| state[i + 1..].split_whitespace().next())
        .unwrap_or("X");
    state == "Z" || state == "X"
}

/// Whether any thread of `pid` is still running.
fn alive(pid: i32) -> bool {
    let Ok(tasks) = fs::read_dir(format!("/proc/{pid}/task")) else {
        return false;
    };
    tasks
        .flatten()
        .any(|t| fs::read_to_string(t.path().join("stat")).is_ok_and(|s| !dead(&s)))
}

/// Live processes whose command line holds the argument `marker`.
fn with_arg(marker: &str) -> Vec<i32> {
    let Ok(entries) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|c| c.split(|b| *b == 0).any(|a| a == marker.as_bytes()))
        })
        .filter(|pid| alive(*pid))
        .collect()
}

/// The wall-clock time (ns) a helper last wrote to `beat`.
fn last_beat(beat: &Path) -> Option<u128> {
    fs::read_to_string(beat).ok()?.trim().parse().ok()
}

fn wall_ns() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos())
}

/// Waits until `pid` has no live thread; how long that took.
fn await_gone(pid: i32, limit: Duration) -> Option<Duration> {
    let start = Instant::now();
    wait_until_every(limit, || !alive(pid)).then(|| start.elapsed())
}

fn wait_until_every(limit: Duration, cond: impl FnMut() -> bool) -> bool {
    crate::support::wait_until_every(limit, Duration::from_millis(1), cond)
}

fn kill_left(pids: &[i32]) {
    for &p in pids {
        if alive(p) {
            send_signal(p, libc::SIGKILL);
        }
    }
}

fn args(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| s.to_string()).collect()
}

#[test]
fn a_process_whose_main_thread_exited_dies_with_a_sigkilled_redlock_run() {
    let cluster = Cluster::new(3);
    let dir = tempdir();
    let zl = build_c(dir.path(), "zl", ZL_C);
    let mut run = Proc::spawn(
        dir.path(),
        &args(&[
            "-r",
            &cluster.urls(),
            "-k",
            "zl-sigkill",
            "--",
            zl.to_str().expect("utf-8 path"),
            "beat",
            "zl.pid",
        ]),
    );
    let pid = read_pid_file(&dir.join("zl.pid"), START);
    assert!(
        wait_until(START, || fs::read_to_string(format!("/proc/{pid}/stat"))
            .is_ok_and(|s| dead(&s))
            && alive(pid)),
        "the helper's leader never exited alone"
    );
    send_signal(run.pid(), libc::SIGKILL);
    let gone = await_gone(pid, Duration::from_secs(5));
    kill_left(&[pid]);
    let _ = run.wait_code(Duration::from_secs(5));
    let gone = gone.unwrap_or_else(|| panic!("the Zl process survived redlock-run's SIGKILL"));
    eprintln!("Zl process gone {gone:?} after SIGKILL of redlock-run");
    assert!(
        gone <= Duration::from_millis(500),
        "gone only after {gone:?}"
    );
}

#[test]
fn a_process_whose_main_thread_exited_is_stopped_at_max_runtime_and_on_a_lost_lock() {
    let cluster = Cluster::new(3);
    let urls = cluster.urls();
    let dir = tempdir();
    let zl = build_c(dir.path(), "zl", ZL_C);
    let zl = zl.to_str().expect("utf-8 path");
    // --max-runtime: 124, and nothing of it left when redlock-run exits.
    let mut run = Proc::spawn(
        dir.path(),
        &args(&[
            "-r",
            &urls,
            "-k",
            "zl-timeout",
            "--max-runtime",
            "500ms",
            "--kill-after",
            "300ms",
            "--",
            zl,
            "beat1",
            "zl1.pid",
        ]),
    );
    let pid = read_pid_file(&dir.join("zl1.pid"), START);
    let code = run.wait_code(Duration::from_secs(10));
    let left = alive(pid);
    kill_left(&[pid]);
    assert_eq!(code, Some(124), "{}", run.stderr_text());
    assert!(!left, "the Zl process outlived --max-runtime");

    // A lost lock (a forced unlock by an operator): gone before the validity
    // deadline the run had when it lost it.
    let ttl = Duration::from_secs(3);
    let mut run = Proc::spawn(
        dir.path(),
        &args(&[
            "-r", &urls, "-k", "zl-lost", "-t", "3s", "-vv", "--", zl, "beat2", "zl2.pid",
        ]),
    );
    let pid = read_pid_file(&dir.join("zl2.pid"), START);
    std::thread::sleep(Duration::from_millis(300));
    Test::new()
        .args(["unlock", "-r", &urls, "-k", "zl-lost", "--force"])
        .expect_code(0);
    let gone_at = wait_until_every(Duration::from_secs(10), || !alive(pid)).then(Instant::now);
    kill_left(&[pid]);
    let code = run.wait_code(Duration::from_secs(10));
    let gone_at = gone_at.unwrap_or_else(|| {
        panic!(
            "the Zl process survived the lost lock\n{}",
            run.stderr_text()
        )
    });
    let deadline = lock_timeline(&run.stderr(), ttl)
        .1
        .expect("deadline in -vv output");
    assert_eq!(code, Some(76), "{}", run.stderr_text());
    assert!(
        gone_at < deadline,
        "gone {:?} after the validity deadline",
        gone_at - deadline
    );
    eprintln!(
        "lost lock: Zl process gone {:?} before the deadline",
        deadline - gone_at
    );
}

#[test]
fn a_stopped_redlock_run_cannot_keep_its_command_past_the_lock() {
    // The command waits for what it forked: the guard kills the command.
    stopped_redlock_run("wait", "41.0101");
}

#[test]
fn a_stopped_redlock_run_cannot_keep_a_leftover_past_the_lock() {
    // The command exits 0 at once and leaves the processes behind: what the
    // guard kills is a leftover, and the run still says the lock was lost.
    stopped_redlock_run("exit 0", "41.0102");
}

/// `mark`: the leftover sleep's argument, one per test (they run at once).
fn stopped_redlock_run(end: &str, mark: &str) {
    let cluster = Cluster::new(3);
    let dir = tempdir();
    let zl = build_c(dir.path(), "zl", ZL_C);
    let key = lock_key("stopped");
    // A plain command and what it forked; the Zl helper writes the beat.
    let script = format!(
        "sleep {mark} & {} beat zl.pid & {end}",
        zl.to_str().expect("utf-8 path")
    );
    let mut run = Proc::spawn(
        dir.path(),
        &args(&[
            "-r",
            &cluster.urls(),
            "-k",
            "stopped",
            "-t",
            "2s",
            "-c",
            &script,
        ]),
    );
    let pid = read_pid_file(&dir.join("zl.pid"), START);
    assert!(wait_until(START, || last_beat(&dir.join("beat")).is_some()));
    // Let a heartbeat or two pass, then stop redlock-run alone (not its
    // group: the guard and the command are not stopped).
    std::thread::sleep(Duration::from_millis(900));
    send_signal(run.pid(), libc::SIGSTOP);
    let stopped = wall_ns();
    // The earliest moment the lock could expire on the nodes (a key's
    // expiry is the latest the run's own deadline can be).
    let expiry = cluster
        .iter()
        .map(|n| n.pttl(&key))
        .filter(|t| *t >= 0)
        .min()
        .expect("key held on the nodes while stopped");
    let expires_at = stopped + expiry as u128 * 1_000_000;
    let gone = await_gone(pid, Duration::from_secs(5));
    // Killed in the same pass: a moment to die.
    wait_until(Duration::from_secs(1), || with_arg(mark).is_empty());
    let sleeps = with_arg(mark);
    let last = last_beat(&dir.join("beat")).expect("beat");
    send_signal(run.pid(), libc::SIGCONT);
    let code = run.wait_code(Duration::from_secs(10));
    kill_left(&[pid]);
    kill_left(&sleeps);
    assert!(
        gone.is_some(),
        "the tree ran on under a stopped redlock-run"
    );
    assert!(sleeps.is_empty(), "left: {sleeps:?}");
    assert!(
        last < expires_at,
        "the command wrote {} ms after the lock could expire",
        (last - expires_at) / 1_000_000
    );
    assert_eq!(
        code,
        Some(76),
        "a run whose tree the guard stopped at the deadline ({end}) must say the lock was lost"
    );
    eprintln!(
        "stopped redlock-run ({end}): last write {} ms before the earliest expiry",
        (expires_at - last) / 1_000_000
    );
}

/// Runs `script` with sh as uid/gid 65534 (CI runs as root), in `dir`, with
/// the signal state a fresh login would give it.
fn unprivileged(dir: &Path, script: &str) -> Command {
    let mut c = Command::new("setpriv");
    c.args([
        "--reuid=65534",
        "--regid=65534",
        "--clear-groups",
        "sh",
        "-c",
        script,
    ])
    .current_dir(dir)
    .env("BIN", BIN)
    .stdin(Stdio::null());
    plain_signals(&mut c);
    for (key, _) in std::env::vars_os() {
        if key.to_string_lossy().starts_with("REDLOCK_") {
            c.env_remove(&key);
        }
    }
    c.env(crate::support::cmd::GRACE_ENV, "0");
    c
}

/// Default dispositions and an empty mask, whatever the harness has.
fn plain_signals(c: &mut Command) {
    // SAFETY: only async-signal-safe calls between fork and exec.
    unsafe {
        c.pre_exec(|| {
            for sig in 1..32 {
                if sig != libc::SIGKILL && sig != libc::SIGSTOP {
                    libc::signal(sig, libc::SIG_DFL);
                }
            }
            let mut empty: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut empty);
            libc::sigprocmask(libc::SIG_SETMASK, &empty, std::ptr::null_mut());
            libc::setpgid(0, 0);
            Ok(())
        });
    }
}

#[test]
fn a_descendant_that_became_root_keeps_the_lock_until_it_ends() {
    let cluster = Cluster::new(3);
    let urls = cluster.urls();
    let dir = shared_dir();
    let helper = build_c(dir.path(), "rooted", ROOT_C);
    fs::set_permissions(&helper, fs::Permissions::from_mode(0o4755)).expect("setuid");
    // Runs 4 s; --max-runtime is 500 ms, and neither SIGTERM nor SIGKILL
    // from the unprivileged redlock-run can reach it.
    let child = unprivileged(
        dir.path(),
        &format!(
            "exec \"$BIN\" -r {urls} -k rooted --max-runtime 500ms --kill-after 200ms -- {} \
             root.pid beat 4000",
            helper.display()
        ),
    )
    .stdout(Stdio::null())
    .stderr(Stdio::piped())
    .spawn()
    .expect("setpriv");
    let pid = read_pid_file(&dir.join("root.pid"), START);
    std::thread::sleep(Duration::from_millis(1500));
    let busy = base(&urls, "rooted", &dir).args(["-c", "true"]).run();
    let running = alive(pid);
    let out = child.wait_with_output().expect("wait");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    kill_left(&[pid]);
    assert!(running, "the helper ended early");
    assert_eq!(
        busy.code,
        Some(75),
        "a second run while the root process lives\n{busy}"
    );
    assert_eq!(out.status.code(), Some(124), "{stderr}");
    assert!(
        stderr.contains(&format!("process {pid} (uid 0)")),
        "stderr does not name the refusing process {pid}:\n{stderr}"
    );
    assert!(
        !stderr.contains("sent SIGKILL"),
        "a refused SIGKILL was reported as sent:\n{stderr}"
    );
    assert!(!alive(pid));
    base(&urls, "rooted", &dir)
        .args(["-c", "true"])
        .expect_code(0);
}

#[test]
fn a_guard_killed_at_any_start_up_step_leaves_nothing_running() {
    let cluster = Cluster::new(3);
    let urls = cluster.urls();
    for (step, expected) in [("request", 69), ("spawned", 69), ("reported", 76)] {
        let dir = tempdir();
        let marker = format!("42.{}", step.len());
        let out = base(&urls, "guard-dies", &dir)
            .env("REDLOCK_TEST_GUARD_DIES", step)
            .args([
                "-c",
                &format!("sleep {marker} & setsid sleep {marker} & sleep {marker}"),
            ])
            .run();
        // The lock is free the moment redlock-run exits: nothing of the
        // tree may be running then, or a second holder would run beside it.
        let left = with_arg(&marker);
        kill_left(&left);
        assert_eq!(out.code, Some(expected), "guard dies at {step}\n{out}");
        assert!(
            left.is_empty(),
            "guard dies at {step}: left {left:?}\n{out}"
        );
        // And nothing appears later (a process still between fork and exec).
        std::thread::sleep(Duration::from_millis(200));
        let late = with_arg(&marker);
        kill_left(&late);
        assert!(late.is_empty(), "guard dies at {step}: late {late:?}");
        base(&urls, "guard-dies", &dir)
            .args(["-c", "true"])
            .expect_code(0);
    }
}

#[test]
fn a_tree_larger_than_the_descriptor_limit_is_killed_whole() {
    // 2000 forks and their kill keep both cores busy for seconds.
    crate::support::room::hog();
    let cluster = Cluster::new(1);
    let dir = tempdir();
    let marker = "43.2000";
    // redlock-run under a 1024-descriptor limit (soft and hard); its
    // command forks 2000 sleeps before saying it is ready.
    let script = format!(
        "ulimit -n 1024; exec \"$BIN\" -r {} -k big -c 'i=0; while [ $i -lt 2000 ]; do \
         sleep {marker} & i=$((i+1)); done; echo ready > ready; wait'",
        cluster.urls()
    );
    let mut sh = Command::new("sh");
    sh.args(["-c", &script])
        .current_dir(dir.path())
        .env("BIN", BIN)
        .env(crate::support::cmd::GRACE_ENV, "0")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    plain_signals(&mut sh);
    let mut child = sh.spawn().expect("sh");
    // The last forks may not have exec'd sleep yet when `ready` is written.
    let ready = wait_until(Duration::from_secs(120), || dir.has("ready"))
        && wait_until(Duration::from_secs(30), || with_arg(marker).len() == 2000);
    let before = with_arg(marker).len();
    send_signal(child.id() as i32, libc::SIGKILL);
    let start = Instant::now();
    let gone = wait_until_every(Duration::from_secs(60), || with_arg(marker).is_empty());
    let took = start.elapsed();
    let left = with_arg(marker);
    kill_left(&left);
    let _ = child.wait();
    assert!(ready, "the command never forked its 2000 processes");
    assert_eq!(before, 2000);
    assert!(gone, "{} of 2000 processes left", left.len());
    eprintln!("2000-process tree gone {took:?} after SIGKILL of redlock-run");
}

/// `SigIgn` and `SigBlk` lines of /proc/self/status as `grep` sees them.
const SIG_LINES: &str = "grep -E '^Sig(Ign|Blk)' /proc/self/status";

#[test]
fn the_command_inherits_the_callers_signal_state_exactly() {
    let node = RedisNode::start();
    for caller in ["", "trap '' PIPE;", "trap '' PIPE INT USR1;"] {
        let dir = tempdir();
        let script = format!(
            "{caller} {SIG_LINES} > plain; \"$BIN\" -r {} -k sigs -- {SIG_LINES} > wrapped",
            node.url()
        );
        let mut sh = Command::new("sh");
        sh.args(["-c", &script])
            .current_dir(dir.path())
            .env("BIN", BIN)
            .env(crate::support::cmd::GRACE_ENV, "0")
            .stdin(Stdio::null());
        plain_signals(&mut sh);
        let out = sh.output().expect("sh");
        assert!(out.status.success(), "{out:?}");
        let plain = fs::read_to_string(dir.join("plain")).expect("plain");
        let wrapped = fs::read_to_string(dir.join("wrapped")).expect("wrapped");
        assert_eq!(
            wrapped, plain,
            "caller {caller:?}: the command's signal state differs"
        );
    }
}

/// Both ways the guard comes to be: forked at the start (it scrubs its own
/// copy of the environment when told what to run), and forked later, for a
/// run whose arguments look like a subcommand's (a lock named `status`).
#[test]
fn the_password_is_in_no_environment_the_command_can_read() {
    let password = "pw-9f3c-not-for-the-command";
    let node = RedisNode::start_with_password(&[], password);
    for name in ["secret", "status"] {
        let dir = tempdir();
        base(&node.url(), name, &dir)
            .env("REDLOCK_PASSWORD", password)
            .args([
                "-c",
                "cat /proc/$PPID/comm > parent; \
                 tr '\\0' '\\n' < /proc/$PPID/environ > guard.env; env > command.env",
            ])
            .expect_code(0);
        let parent = fs::read_to_string(dir.join("parent")).expect("parent");
        assert_eq!(parent.trim(), "redlock-guard", "-k {name}");
        let guard = fs::read_to_string(dir.join("guard.env")).expect("guard.env");
        let command = fs::read_to_string(dir.join("command.env")).expect("command.env");
        assert!(
            guard.contains("PATH="),
            "-k {name}: not the guard's environment:\n{guard}"
        );
        assert!(
            !guard.contains(password),
            "-k {name}: in /proc/$PPID/environ"
        );
        assert!(
            !command.contains(password),
            "-k {name}: in the command's environment"
        );
    }
}

/// A guard that stands still between the grant and the start (stopped here;
/// on a loaded host, swapped out) must not start the command once the tree
/// would already have had to be gone: B waits behind A, its guard is
/// stopped, A ends, B is granted the lock and asks its guard to start the
/// command, and the guard resumes only after B's validity has run out. B
/// exits 76 saying why, the command never ran, and no key is left.
#[test]
fn a_guard_that_stood_still_past_the_deadline_starts_nothing() {
    let node = RedisNode::start();
    let dir = tempdir();
    let a = base(&node.url(), "late", &dir)
        .args(["-c", "touch a.in; sleep 1"])
        .spawn();
    assert!(
        wait_until(START, || dir.join("a.in").exists()),
        "A never started"
    );
    let b = base(&node.url(), "late", &dir)
        .args(["-t", "500ms", "-w", "10s", "-c", "touch b.ran"])
        .spawn();
    let mut guard = None;
    assert!(
        wait_until(START, || {
            guard = crate::support::guard_of(b.pid());
            guard.is_some()
        }),
        "B's guard never appeared"
    );
    let guard = guard.unwrap_or_default();
    send_signal(guard, libc::SIGSTOP);
    a.wait().assert_code(0);
    // B is granted the lock at A's release and waits for its stopped guard;
    // its 500 ms of validity run out meanwhile.
    std::thread::sleep(Duration::from_millis(1500));
    send_signal(guard, libc::SIGCONT);
    let out = b.wait();
    out.assert_code(76);
    assert!(
        out.stderr.contains("validity ran out before")
            && out.stderr.contains("nothing was started"),
        "{out}"
    );
    assert!(
        !dir.join("b.ran").exists(),
        "the command ran without a lock\n{out}"
    );
    assert_eq!(node.keys(), Vec::<Vec<u8>>::new(), "a key was left\n{out}");
}
