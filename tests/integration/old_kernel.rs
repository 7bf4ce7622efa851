//! Old kernels: the core cases on a simulated Linux 4.18, where every
//! system call added since answers ENOSYS (`support::old_kernel`): no pidfds
//! (5.3), no clone3, close_range, faccessat2, epoll_pwait2, futex_waitv.
//! redlock-run then signals its command's tree with kill(2) after checking
//! each process's parent, and glibc starts its threads with clone.
//!
//! Checked with `strace -f -e trace=execve,clone,clone3,kill,pidfd_open,
//! pidfd_send_signal,close_range,openat2,faccessat2,epoll_pwait2,
//! futex_waitv` over these tests and over containment's own: without the
//! filter redlock-run's only calls newer than 4.18 are pidfd_open,
//! pidfd_send_signal and glibc's clone3 (for its threads); under it, each
//! redlock-run process has its pidfd_open answered ENOSYS once, makes no
//! pidfd call after it and signals by kill(2), and every clone3 answered
//! ENOSYS is followed by a clone; the command's shells have faccessat2
//! refused and go on.
//!
//! The cases are containment's and cron's own tests, run whole under the
//! filter: a lost lock whose tree has `setsid`'d and double-forked
//! processes stopped before the validity deadline (76); a SIGKILLed
//! redlock-run whose guard kills the tree; `--wait` woken by the release.

use std::fs;

use crate::support::old_kernel::OldKernel;
use crate::support::{Cluster, WAIT_FOR_GO, await_marker, base, lock_key, tempdir, touch};

/// The command asks for a pidfd itself: the answer shows the kernel it runs
/// on. `syscall(434)` is pidfd_open on every 64-bit Linux ABI since 5.3.
const PROBE: &str = "python3 -c 'import ctypes, os; \
     libc = ctypes.CDLL(None, use_errno=True); \
     r = libc.syscall(434, os.getpid(), 0); \
     print(r, os.strerror(ctypes.get_errno()) if r < 0 else \"a pidfd\")' > probe";

/// `Seccomp:` of `/proc/PID/status`: 2 under a filter.
fn seccomp_mode(pid: i32) -> Option<String> {
    let status = fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("Seccomp:"))
        .map(|v| v.trim().to_string())
}

#[test]
fn a_run_takes_the_lock_runs_the_command_and_releases() {
    let cluster = Cluster::new(3);
    let dir = tempdir();
    let old = OldKernel::enter();
    let running = base(&cluster.urls(), "old-run", &dir)
        .args([
            "-c",
            &format!("{PROBE}; touch ready; {WAIT_FOR_GO}; exit 3"),
        ])
        .spawn();
    await_marker(&dir, "ready", &running);
    let mode = seccomp_mode(running.pid());
    let held = cluster.holders(lock_key("old-run"));
    touch(&dir, "go");
    let out = running.wait();
    assert_eq!(old.started(), 1);
    assert_eq!(
        mode.as_deref(),
        Some("2"),
        "redlock-run is not under the filter\n{out}"
    );
    let probe = fs::read_to_string(dir.join("probe")).unwrap_or_default();
    assert_eq!(
        probe.trim(),
        "-1 Function not implemented",
        "the command's pidfd_open was not refused\n{out}"
    );
    assert_eq!(held, vec![0, 1, 2], "the lock while the command ran\n{out}");
    out.assert_code(3);
    assert!(
        cluster.holders(lock_key("old-run")).is_empty(),
        "lock left\n{out}"
    );
}

#[test]
fn a_lost_lock_stops_the_tree_before_the_deadline() {
    let old = OldKernel::enter();
    crate::containment::lost_lock_and_timeout_reach_setsid_and_daemon_processes();
    // Two lost locks (TERM handled, TERM ignored) and a --max-runtime, at
    // the least.
    assert!(
        old.started() >= 3,
        "{} runs under the filter",
        old.started()
    );
}

#[test]
fn the_guard_of_a_sigkilled_redlock_run_kills_the_tree() {
    let old = OldKernel::enter();
    crate::containment::sigkill_of_redlock_run_takes_the_whole_tree_down();
    assert_eq!(old.started(), 50);
}

#[test]
fn a_waiter_is_woken_by_the_release() {
    let old = OldKernel::enter();
    crate::cron::waiter_is_woken_by_the_release_not_by_its_poll();
    assert_eq!(old.started(), 10);
}
