//! redlock-run as a container's PID 1: the init of a new PID namespace
//! (`unshare --pid --fork --mount-proc`), as under `docker run`, a Kubernetes
//! pod without a shell or an init, or a CronJob whose command is redlock-run.
//!
//! Two things differ for PID 1. Every orphan of the namespace is re-parented
//! to it, so it must reap what it did not start; and the kernel delivers to
//! it only the signals it has a handler for or blocks, so a SIGTERM from the
//! runtime (`docker stop`, a pod's deletion) must still reach the command.
//! When PID 1 exits, the kernel kills whatever is left in the namespace: a
//! run that released early would have its background job killed rather than
//! waited for, which is what `bg-done` shows.
//!
//! The tests need root (CI runs as root) or unprivileged user namespaces;
//! without either they fail, saying so, rather than pass untested.

use std::process::Command;
use std::time::{Duration, Instant};

use crate::support::{
    RedisNode, START, TempDir, Test, await_marker, child_pids, descendant_pids, kill_if_alive,
    lock_key, parent_pid, pid_alive, process_state, tempdir, wait_until,
};

const UNSHARE: [&str; 4] = ["unshare", "--pid", "--fork", "--mount-proc"];

/// Fails the test, with what to do, when this machine cannot make a PID
/// namespace.
fn require_pid_namespaces() {
    let out = Command::new(UNSHARE[0])
        .args(&UNSHARE[1..])
        .args(["sh", "-c", "test $$ -eq 1"])
        .output();
    match out {
        Ok(out) if out.status.success() => {}
        Ok(out) => panic!(
            "`unshare --pid --fork --mount-proc` cannot make a PID namespace here ({}): run as \
             root, or enable unprivileged user namespaces; these tests are not skipped\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ),
        Err(e) => panic!(
            "cannot run unshare (util-linux) for the PID-namespace tests: {e}; install \
             util-linux; these tests are not skipped"
        ),
    }
}

/// redlock-run as PID 1 of a new PID namespace, run in `dir`.
fn as_pid1(node: &RedisNode, name: &str, dir: &TempDir) -> Test {
    Test::new()
        .wrapped_in(UNSHARE)
        .current_dir(dir.path())
        .args(["-r", &node.url(), "-k", name])
}

/// The pid, seen from outside, of the namespace's init: unshare's one child.
fn namespace_init(unshare_pid: i32) -> i32 {
    let mut init = None;
    let found = wait_until(START, || {
        init = child_pids(unshare_pid).first().copied();
        init.is_some()
    });
    assert!(found, "unshare {unshare_pid} started no child");
    init.expect("found")
}

/// Zombies anywhere under `ancestor`: processes that exited and that nobody
/// has reaped (a live PID 1 that does not reap leaves them there).
fn zombies_under(ancestor: i32) -> Vec<i32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let all: Vec<(i32, i32)> = entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter_map(|pid| Some((pid, parent_pid(pid)?)))
        .collect();
    let mut under = vec![ancestor];
    let mut i = 0;
    while i < under.len() {
        let p = under[i];
        under.extend(all.iter().filter(|&&(_, pp)| pp == p).map(|&(pid, _)| pid));
        i += 1;
    }
    under
        .into_iter()
        .skip(1)
        .filter(|&pid| process_state(pid) == Some('Z'))
        .collect()
}

fn all_gone(pids: &[i32]) -> bool {
    pids.iter().all(|&p| !pid_alive(p))
}

#[test]
fn as_pid1_it_waits_for_a_background_job_reaps_it_and_passes_the_exit_status() {
    require_pid_namespaces();
    let node = RedisNode::start();
    let dir = tempdir();
    let key = lock_key("pid1-bg");
    // The command exits 7 at once; its background job runs on for a while.
    let mut running = as_pid1(&node, "pid1-bg", &dir)
        .args([
            "-c",
            "sh -c 'touch bg-started; sleep 1; touch bg-done' >/dev/null 2>&1 & \
             while [ ! -e bg-started ]; do sleep 0.01; done; echo $$ > cmd.pid; exit 7",
        ])
        .spawn();
    await_marker(&dir, "bg-started", &running);
    let init = namespace_init(running.pid());
    let mut tree = descendant_pids(running.pid());
    // The command has exited; the job it left behind keeps the lock.
    assert!(
        wait_until(START, || dir.has("cmd.pid")),
        "the command never ran"
    );
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        !running.has_exited(),
        "redlock-run (PID 1) exited while the background job runs\n{}",
        running.stderr_so_far()
    );
    assert!(
        node.exists(&key),
        "the lock was released while the background job runs"
    );
    // The command's shell has exited: it and any other orphan are reaped
    // while the namespace lives on.
    assert!(
        wait_until(Duration::from_secs(2), || zombies_under(running.pid())
            .is_empty()),
        "unreaped processes in the namespace: {:?}",
        zombies_under(running.pid())
    );
    tree.extend(descendant_pids(running.pid()));
    let out = running.wait();
    out.assert_code(7);
    assert!(
        dir.has("bg-done"),
        "PID 1 exited before the background job ended (the kernel then killed it)\n{}",
        out.stderr
    );
    assert!(!node.exists(&key), "the lock is left after the run");
    assert!(
        wait_until(Duration::from_secs(2), || all_gone(&tree)),
        "processes of the namespace left behind: {:?}",
        tree.iter().filter(|&&p| pid_alive(p)).collect::<Vec<_>>()
    );
    assert!(!pid_alive(init), "the namespace's init is still there");
}

#[test]
fn as_pid1_a_sigterm_from_outside_reaches_the_command_and_the_lock_is_released() {
    require_pid_namespaces();
    let node = RedisNode::start();
    let dir = tempdir();
    let key = lock_key("pid1-term");
    // The trap proves the command itself got the signal; the background
    // sleep stands for a job that would otherwise outlive the stop.
    let running = as_pid1(&node, "pid1-term", &dir)
        .timeout(Duration::from_secs(30))
        .args([
            "-c",
            "trap 'touch got-term; exit 3' TERM; sleep 60 & touch started; wait",
        ])
        .spawn();
    await_marker(&dir, "started", &running);
    let init = namespace_init(running.pid());
    let tree = descendant_pids(running.pid());
    assert!(node.exists(&key), "no lock while the command runs");
    // As `docker stop` or a pod's deletion does: to the namespace's init.
    let sent = Instant::now();
    assert!(
        crate::support::send_signal(init, libc::SIGTERM),
        "kill({init}, SIGTERM): {}",
        std::io::Error::last_os_error()
    );
    let out = running.wait();
    let took = sent.elapsed();
    for &p in &tree {
        kill_if_alive(p);
    }
    out.assert_code(3);
    assert!(
        dir.has("got-term"),
        "the command did not get the SIGTERM sent to PID 1\n{}",
        out.stderr
    );
    // Well below the 60 s sleep and the 30 s TTL: the stop did not wait for
    // the sleep or for the lock to expire.
    assert!(
        took < Duration::from_secs(10),
        "the stop took {took:?}\n{}",
        out.stderr
    );
    assert!(!node.exists(&key), "the lock is left after the stop");
    assert!(
        wait_until(Duration::from_secs(2), || all_gone(&tree)),
        "processes of the namespace left behind: {:?}",
        tree.iter().filter(|&&p| pid_alive(p)).collect::<Vec<_>>()
    );
}
