//! Shared fixtures for the integration tests.
//!
//! * [`RedisNode`] / [`Cluster`]: real `redis-server` processes on free ports
//!   (the binary [`redis_server_binary`] names: `REDLOCK_TEST_REDIS_SERVER`,
//!   else `redis-server` on PATH); [`server_caps`] says what it can do.
//! * [`RedisCluster`]: a Redis Cluster (masters, replicas, slot migration);
//!   [`SentinelGroup`]: a primary, replicas and three sentinels.
//! * [`Certs`]: a private CA and certificates made per test; [`NodeTls`]:
//!   how fixture nodes serve TLS with them (`ClusterBuilder::tls`,
//!   `SentinelBuilder::tls`).
//! * [`PingServer`]: an HTTP(S) server on loopback that records the pings
//!   it gets and answers them at once, late or never.
//! * [`FaultProxy`]: a userspace TCP proxy that can delay, black-hole or reset
//!   traffic to a node at runtime.
//! * [`Test`]: a builder around the compiled `redlock-run` binary;
//!   [`old_kernel::OldKernel`]: what it starts runs as on Linux 4.18.
//! * Small process/time helpers: [`wait_until`], [`tempdir`], [`pid_alive`],
//!   [`send_signal`], [`child_pids`], [`read_pid_file`].

// The fixtures are shared by several test modules; not every module uses every
// helper (or re-export), so unused items are expected here.
#![allow(dead_code, unused_imports)]

pub mod certs;
pub mod cluster;
pub mod cmd;
pub mod fake;
pub mod http;
pub mod old_kernel;
pub mod proxy;
pub mod redis_node;
pub mod room;
pub mod sentinel;
pub mod stalls;
pub mod timed;

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

pub use certs::{Certs, NodeTls, server_has_tls, tls_provider};
pub use cluster::{ClusterBuilder, RedisCluster, SlotMigration};
pub use cmd::{RunOutput, Running, Test};
pub use fake::{FakeServer, Script};
pub use http::{Answer, PingServer};
pub use proxy::{FaultProxy, Mode};
pub use redis_node::{
    Cluster, RedisNode, SERVER_ENV, ServerCaps, ServerVersion, free_port, free_port_on,
    is_history_key, node_url, redis_cli_binary, redis_server_binary, require, sentinel_command,
    server_caps, server_command, server_version, server_was_chosen,
};
pub use sentinel::{SentinelBuilder, SentinelGroup};
pub use timed::{margin_ms, realtime_ns};

/// Generous bound for "the command has started" (lock acquisition included).
pub const START: Duration = Duration::from_secs(10);

/// A shell snippet that lists the names of redlock-run's threads, as its
/// command sees them (the command's parent is the guard, whose parent is
/// redlock-run).
pub const THREADS: &str = "rr=$(awk '{print $4}' /proc/$PPID/stat); cat /proc/$rr/task/*/comm";

/// Shell snippet: wait (at most ~15 s) until the file `go` exists in the
/// working directory. Lets a test hold the lock exactly as long as it needs.
pub const WAIT_FOR_GO: &str =
    "i=0; while [ ! -e go ] && [ $i -lt 300 ]; do sleep 0.05; i=$((i+1)); done";

/// `redlock-run -r URLS -k NAME` run inside `dir` (commands write their
/// marker files there).
pub fn base(urls: &str, name: &str, dir: &TempDir) -> Test {
    Test::new()
        .current_dir(dir.path())
        .args(["-r", urls, "-k", name])
}

/// Creates the marker file `name` in `dir`.
pub fn touch(dir: &TempDir, name: &str) {
    fs::write(dir.join(name), b"").expect("create marker file");
}

/// Waits for marker `name` in `dir`, panicking with the program's output so
/// far if it does not appear.
pub fn await_marker(dir: &TempDir, name: &str, running: &Running) {
    assert!(
        wait_until(START, || dir.has(name)),
        "marker {name:?} did not appear within {START:?}\n--- stdout ---\n{}\n--- stderr ---\n{}",
        running.stdout_so_far(),
        running.stderr_so_far()
    );
}

/// Default prefix `redlock-run` puts in front of the lock name.
pub const PREFIX: &str = "lock:";

/// The Redis key `redlock-run` uses for lock `name` with the default prefix.
pub fn lock_key(name: &str) -> Vec<u8> {
    let mut key = PREFIX.as_bytes().to_vec();
    key.extend_from_slice(name.as_bytes());
    key
}

/// `redis://` URLs of `proxies`, comma-joined (one quorum through them).
pub fn proxied_urls(proxies: &[FaultProxy]) -> String {
    proxies
        .iter()
        .map(FaultProxy::url)
        .collect::<Vec<_>>()
        .join(",")
}

/// The keys redlock-run keeps for lock `name` under the default prefix, as
/// the program computes them (`src/lock/keys.rs`; its layout is checked on
/// its own by unit tests and against a real cluster's CLUSTER KEYSLOT).
pub fn keys(name: &str) -> redlock_run::lock::keys::Keys {
    redlock_run::lock::keys::Keys::new(PREFIX.as_bytes(), name.as_bytes()).expect("valid name")
}

/// Polls `cond` every 10 ms until it returns true or `timeout` elapses.
/// Returns whether the condition became true (it is checked one last time
/// after the deadline).
pub fn wait_until(timeout: Duration, cond: impl FnMut() -> bool) -> bool {
    wait_until_every(timeout, Duration::from_millis(10), cond)
}

/// [`wait_until`], pausing `every` between checks.
pub fn wait_until_every(
    timeout: Duration,
    every: Duration,
    mut cond: impl FnMut() -> bool,
) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if cond() {
            return true;
        }
        if Instant::now() >= deadline {
            return cond();
        }
        std::thread::sleep(every);
    }
}

/// Waits up to `timeout` for `fd` to be readable (a listener with a
/// connection waiting, a pidfd whose process has exited): where the
/// fixtures would otherwise poll every few milliseconds, each waiting
/// thread wakes when there is something to do.
pub fn await_readable(fd: std::os::fd::RawFd, timeout: Duration) {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    let ms = i32::try_from(timeout.as_millis()).unwrap_or(i32::MAX);
    // SAFETY: one valid pollfd for the duration of the call.
    unsafe { libc::poll(&mut p, 1, ms) };
}

/// A pidfd for `pid` (Linux 5.3+; None before), to wait for its exit with
/// [`await_readable`].
pub fn pidfd(pid: i32) -> Option<std::os::fd::OwnedFd> {
    use std::os::fd::FromRawFd;
    // SAFETY: pidfd_open takes a pid and flags, and returns a new fd or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    // SAFETY: a fresh descriptor, owned here.
    (fd >= 0).then(|| unsafe { std::os::fd::OwnedFd::from_raw_fd(fd as i32) })
}

/// A directory removed (recursively, best effort) on drop.
#[derive(Debug)]
pub struct TempDir {
    path: PathBuf,
}

impl TempDir {
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// `self.path().join(name)`.
    pub fn join(&self, name: impl AsRef<Path>) -> PathBuf {
        self.path.join(name)
    }

    /// Whether `name` exists inside the directory.
    pub fn has(&self, name: impl AsRef<Path>) -> bool {
        self.path.join(name).exists()
    }

    /// The path as a `String` (for use in shell command lines).
    pub fn display(&self) -> String {
        self.path.display().to_string()
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.path);
    }
}

/// Creates a fresh, unique directory under `std::env::temp_dir()`.
pub fn tempdir() -> TempDir {
    room::running();
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    for _ in 0..100 {
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let path = std::env::temp_dir().join(format!(
            "redlock-run-test-{}-{}-{}",
            std::process::id(),
            nanos,
            n
        ));
        match fs::create_dir(&path) {
            Ok(()) => return TempDir { path },
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => panic!("cannot create temp dir {}: {e}", path.display()),
        }
    }
    panic!(
        "cannot create a unique temp dir under {:?}",
        std::env::temp_dir()
    );
}

/// Whether process `pid` exists and is not a zombie.
pub fn pid_alive(pid: i32) -> bool {
    if pid <= 0 {
        return false;
    }
    // SAFETY: kill with signal 0 only checks for existence/permission.
    let rc = unsafe { libc::kill(pid, 0) };
    if rc != 0 && std::io::Error::last_os_error().raw_os_error() != Some(libc::EPERM) {
        return false;
    }
    match process_state(pid) {
        Some(state) => state != 'Z' && state != 'X',
        // /proc entry vanished between the two checks: it is gone.
        None => false,
    }
}

/// Whether any thread of process `pid` is alive. A process whose main
/// thread called `pthread_exit()` shows Z in `/proc/PID/stat` (ps: Zl) while
/// its other threads run on; a zombie's every task is Z.
pub fn any_thread_alive(pid: i32) -> bool {
    if pid <= 0 {
        return false;
    }
    let Ok(tasks) = fs::read_dir(format!("/proc/{pid}/task")) else {
        return false;
    };
    tasks.filter_map(|e| e.ok()).any(|e| {
        fs::read_to_string(e.path().join("stat")).is_ok_and(|stat| {
            stat.rfind(')')
                .and_then(|i| stat[i + 1..].split_whitespace().next())
                .is_some_and(|s| !matches!(s, "Z" | "X"))
        })
    })
}

/// Whether SIGKILL is pending on process `pid`: it is dying, and runs no
/// more code of its own, but has not been given a CPU to finish yet.
pub fn sigkill_pending(pid: i32) -> bool {
    let Ok(status) = fs::read_to_string(format!("/proc/{pid}/status")) else {
        return false;
    };
    status
        .lines()
        .filter_map(|l| {
            l.strip_prefix("SigPnd:")
                .or_else(|| l.strip_prefix("ShdPnd:"))
        })
        .filter_map(|mask| u64::from_str_radix(mask.trim(), 16).ok())
        .any(|mask| mask & (1 << (libc::SIGKILL - 1)) != 0)
}

/// What an observer needs of process `pid` in one look, each /proc file
/// read once: whether it can run code of its own ([`can_run`]), whether any
/// thread of it is alive ([`any_thread_alive`]), and the CPUs its live
/// threads last ran on ([`last_cpus`]).
#[derive(Debug, Default)]
pub struct Look {
    pub can_run: bool,
    pub any_thread_alive: bool,
    pub cpus: Vec<usize>,
}

pub fn look(pid: i32) -> Look {
    const PF_EXITING: u64 = 0x4;
    let mut seen = Look::default();
    let Ok(tasks) = fs::read_dir(format!("/proc/{pid}/task")) else {
        return seen;
    };
    let mut runs = false;
    for e in tasks.filter_map(|e| e.ok()) {
        let Ok(stat) = fs::read_to_string(e.path().join("stat")) else {
            continue;
        };
        let f: Vec<&str> = stat
            .rfind(')')
            .map(|i| stat[i + 1..].split_whitespace().collect())
            .unwrap_or_default();
        if f.len() < 37 || matches!(f[0], "Z" | "X") {
            continue;
        }
        seen.any_thread_alive = true;
        runs |= f[6]
            .parse::<u64>()
            .is_ok_and(|flags| flags & PF_EXITING == 0);
        seen.cpus.extend(f[36].parse::<usize>());
    }
    seen.cpus.sort_unstable();
    seen.cpus.dedup();
    seen.can_run = runs && pid > 0 && !sigkill_pending(pid);
    seen
}

/// Whether process `pid` can still run code of its own: it is not dying of
/// SIGKILL ([`sigkill_pending`]) and a thread of it is alive and not on its
/// way out (`PF_EXITING`, set in `/proc/PID/task/TID/stat`'s flags when the
/// thread enters the kernel's exit path, from which it never returns to the
/// program). On a loaded host a killed process has been seen runnable for
/// two seconds before the scheduler let it die, and an exiting one for
/// seconds in the kernel freeing its memory; what it was doing stopped at
/// the kill or the exit. A thread that called `pthread_exit()` while the
/// others run on (ps: Zl) leaves the process running.
pub fn can_run(pid: i32) -> bool {
    const PF_EXITING: u64 = 0x4;
    if pid <= 0 || sigkill_pending(pid) {
        return false;
    }
    let Ok(tasks) = fs::read_dir(format!("/proc/{pid}/task")) else {
        return false;
    };
    tasks.filter_map(|e| e.ok()).any(|e| {
        fs::read_to_string(e.path().join("stat")).is_ok_and(|stat| {
            let f: Vec<&str> = stat
                .rfind(')')
                .map(|i| stat[i + 1..].split_whitespace().collect())
                .unwrap_or_default();
            // After the command name: state, ppid, pgrp, session, tty_nr,
            // tpgid, flags.
            f.len() > 6
                && !matches!(f[0], "Z" | "X")
                && f[6]
                    .parse::<u64>()
                    .is_ok_and(|flags| flags & PF_EXITING == 0)
        })
    })
}

/// The one-letter state from `/proc/PID/stat` (`R`, `S`, `T`, `Z`, ...).
pub fn process_state(pid: i32) -> Option<char> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name is in parentheses and may itself contain ')' or
    // spaces: the state is the first field after the last ')'.
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().next()?.chars().next()
}

/// Whether every file of `pid` is closed: no thread of it has a descriptor
/// left (or it is gone). A SIGKILLed process's leader turns zombie while
/// its last thread still frees the memory; only after that are its files,
/// and so its pipes, closed.
pub fn files_closed(pid: i32) -> bool {
    let Ok(tasks) = fs::read_dir(format!("/proc/{pid}/task")) else {
        return true;
    };
    tasks
        .filter_map(|e| e.ok())
        .all(|e| fs::read_dir(e.path().join("fd")).map_or(true, |mut fds| fds.next().is_none()))
}

/// The CPU each live thread of `pid` last ran on (field 39 of
/// `/proc/PID/task/TID/stat`): where a stall could have kept it from dying
/// (see `stalls::Stalls::excuse`).
pub fn last_cpus(pid: i32) -> Vec<usize> {
    let Ok(tasks) = fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    let mut cpus: Vec<usize> = tasks
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let stat = fs::read_to_string(e.path().join("stat")).ok()?;
            // After the command name, field 39 is the 37th.
            stat[stat.rfind(')')? + 1..]
                .split_whitespace()
                .nth(36)?
                .parse()
                .ok()
        })
        .collect();
    cpus.sort_unstable();
    cpus.dedup();
    cpus
}

/// A check that cannot run here (it needs root, or real-time priority):
/// said by name, straight to stderr past the harness's capture, so that a
/// run that skipped it shows it; under `CI=true` (CI runs as root, where
/// everything can run) it fails instead.
pub fn not_run(check: &str, why: &str) {
    let line = format!("{check}: SKIPPED: {why}");
    assert!(
        std::env::var("CI").as_deref() != Ok("true"),
        "{line}, and CI=true: in CI every check must run"
    );
    let _ = std::io::Write::write_all(&mut std::io::stderr(), format!("{line}\n").as_bytes());
}

/// Parent pid of `pid` from `/proc/PID/stat`.
pub fn parent_pid(pid: i32) -> Option<i32> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(1)?.parse().ok()
}

/// Command name (`/proc/PID/comm`) of `pid`.
pub fn process_name(pid: i32) -> Option<String> {
    fs::read_to_string(format!("/proc/{pid}/comm"))
        .ok()
        .map(|s| s.trim_end().to_string())
}

/// The guard (`redlock-guard`) of redlock-run `wrapper`, once forked:
/// found among its children in `/proc/PID/task/TID/children` (a scan of all
/// of /proc, which the safety workload's observers would otherwise do once
/// per run, costs milliseconds).
pub fn guard_of(wrapper: i32) -> Option<i32> {
    let tasks = fs::read_dir(format!("/proc/{wrapper}/task")).ok()?;
    let kids: Vec<i32> = tasks
        .filter_map(|e| e.ok())
        .filter_map(|e| fs::read_to_string(e.path().join("children")).ok())
        .flat_map(|list| {
            list.split_whitespace()
                .filter_map(|p| p.parse().ok())
                .collect::<Vec<i32>>()
        })
        .collect();
    kids.into_iter()
        .find(|&p| process_name(p).as_deref() == Some("redlock-guard") && pid_alive(p))
}

/// Live (non-zombie) direct children of `ppid`, found by scanning `/proc`.
pub fn child_pids(ppid: i32) -> Vec<i32> {
    let Ok(entries) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|&pid| parent_pid(pid) == Some(ppid) && pid_alive(pid))
        .collect()
}

/// Live (non-zombie) descendants of `ppid` at any depth, by scanning `/proc`
/// (independently of redlock-run's own walk of the tree).
pub fn descendant_pids(ppid: i32) -> Vec<i32> {
    let Ok(entries) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    let parents: Vec<(i32, i32)> = entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter_map(|pid| Some((pid, parent_pid(pid)?)))
        .collect();
    let mut out = Vec::new();
    let mut queue = vec![ppid];
    while let Some(p) = queue.pop() {
        for &(pid, parent) in &parents {
            if parent == p && !out.contains(&pid) {
                queue.push(pid);
                out.push(pid);
            }
        }
    }
    out.retain(|&pid| pid_alive(pid));
    out
}

/// Sends `sig` to `pid` (use a negative pid for a process group). Returns
/// whether `kill(2)` succeeded.
pub fn send_signal(pid: i32, sig: i32) -> bool {
    // SAFETY: plain kill(2) call.
    unsafe { libc::kill(pid, sig) == 0 }
}

/// Waits (up to `timeout`) until `path` holds a pid (decimal, optional
/// trailing newline) and returns it. Panics with a clear message otherwise.
pub fn read_pid_file(path: &Path, timeout: Duration) -> i32 {
    let mut pid = None;
    let found = wait_until(timeout, || {
        pid = fs::read_to_string(path)
            .ok()
            .and_then(|s| s.trim().parse::<i32>().ok());
        pid.is_some()
    });
    assert!(
        found,
        "pid file {} did not appear within {timeout:?}",
        path.display()
    );
    pid.expect("pid parsed")
}

/// SIGKILLs `pid` if it is still alive (cleanup for processes a test may
/// have leaked when an assertion failed).
pub fn kill_if_alive(pid: i32) {
    if pid_alive(pid) {
        send_signal(pid, libc::SIGKILL);
    }
}

/// Renders bytes for assertion messages.
pub fn show(bytes: &[u8]) -> String {
    format!("{:?}", String::from_utf8_lossy(bytes))
}

/// Whether `s` is a redlock token: exactly 32 lowercase hex characters.
pub fn is_token(s: &[u8]) -> bool {
    s.len() == 32 && s.iter().all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f'))
}

/// Runs a python3 `script` with `input` on its stdin and returns its stdout;
/// panics with python's message (the JSON parser's, say) when it fails.
/// python3 is how the tests parse JSON: the project has no JSON parser.
pub fn python(script: &str, input: &str) -> String {
    use std::io::Write;
    use std::process::{Command, Stdio};
    let mut child = Command::new("python3")
        .args(["-c", script])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python3 is needed to check JSON output");
    child
        .stdin
        .take()
        .expect("stdin piped")
        .write_all(input.as_bytes())
        .expect("write to python3");
    let out = child.wait_with_output().expect("python3 output");
    assert!(
        out.status.success(),
        "python3 rejected the text: {}\n--- text ---\n{input}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8")
}

/// Subscribers to `channel` and to the channels named after it: a waiter
/// in the fair queue listens on `<channel>:<its token>`, one without a
/// place (--wait-unfair) on `channel` itself.
pub fn subscribers(node: &RedisNode, channel: &[u8]) -> i64 {
    let all: Vec<Vec<u8>> = node.cmd(redis::cmd("PUBSUB").arg("CHANNELS"));
    all.iter()
        .filter(|c| c.starts_with(channel))
        .map(|c| {
            let (_, n): (Vec<u8>, i64) = node.cmd(redis::cmd("PUBSUB").arg("NUMSUB").arg(c));
            n
        })
        .sum()
}

/// A shared object that moves the wall clock (CLOCK_REALTIME, gettimeofday,
/// time) of whatever it is preloaded into by `SKEW_SECONDS`, leaving the
/// monotonic and boot clocks alone: a host whose clock is off.
pub fn clock_shim(dir: &TempDir) -> std::path::PathBuf {
    let source = dir.join("skew.c");
    let object = dir.join("skew.so");
    fs::write(
        &source,
        r#"
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdlib.h>
#include <sys/time.h>
#include <time.h>

static long skew(void) {
    const char *s = getenv("SKEW_SECONDS");
    return s ? atol(s) : 0;
}

int clock_gettime(clockid_t id, struct timespec *ts) {
    static int (*real)(clockid_t, struct timespec *);
    if (!real) real = (int (*)(clockid_t, struct timespec *))dlsym(RTLD_NEXT, "clock_gettime");
    int r = real(id, ts);
    if (r == 0 && ts && (id == CLOCK_REALTIME || id == CLOCK_REALTIME_COARSE)) ts->tv_sec += skew();
    return r;
}

int gettimeofday(struct timeval *tv, void *tz) {
    static int (*real)(struct timeval *, void *);
    if (!real) real = (int (*)(struct timeval *, void *))dlsym(RTLD_NEXT, "gettimeofday");
    int r = real(tv, tz);
    if (r == 0 && tv) tv->tv_sec += skew();
    return r;
}

time_t time(time_t *t) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    if (t) *t = ts.tv_sec;
    return ts.tv_sec;
}
"#,
    )
    .expect("write the shim's source");
    let out = std::process::Command::new("gcc")
        .args(["-shared", "-fPIC", "-O2", "-o"])
        .arg(&object)
        .arg(&source)
        .arg("-ldl")
        .output()
        .expect("gcc is needed to build the clock shim");
    assert!(
        out.status.success(),
        "gcc: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    object
}

/// The README's least-privilege ACL line, its rules after the password.
pub fn readme_acl_rules() -> Vec<String> {
    let readme = include_str!("../../../README.md");
    let line = readme
        .lines()
        .find(|l| {
            l.trim_start()
                .starts_with("ACL SETUSER locker on >PASSWORD ")
        })
        .expect("the README's ACL line");
    line.split_whitespace().skip(5).map(String::from).collect()
}

/// A user `name` (password `<name>-pw`) made by the README's ACL line but
/// for the rules in `without`, on `node`; the URL that logs in as it.
pub fn readme_acl_user(node: &RedisNode, name: &str, without: &[&str]) -> String {
    let mut cmd = redis::cmd("ACL");
    cmd.arg("SETUSER")
        .arg(name)
        .arg("reset")
        .arg("on")
        .arg(format!(">{name}-pw"));
    for rule in readme_acl_rules() {
        if !without.contains(&rule.as_str()) {
            cmd.arg(rule);
        }
    }
    let reply: String = node.cmd(&cmd);
    assert_eq!(reply, "OK", "ACL SETUSER {name}");
    format!("redis://{name}:{name}-pw@127.0.0.1:{}", node.port())
}
