//! redlock-run on a terminal, and under an inherited signal disposition.
//!
//! `script(1)` (util-linux, Essential in Debian) gives redlock-run a real
//! pseudo-terminal as its controlling terminal and stdin; what the test
//! writes to `script`'s stdin is typed on that terminal, `\x03` included.

use std::fs;
use std::io::Write;
use std::process::{Child, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use crate::support::cmd::BIN;
use crate::support::*;

/// Runs `command` (a shell command line) on a fresh pseudo-terminal.
fn on_terminal(command: &str, dir: &TempDir) -> Child {
    let mut cmd = crate::support::cmd::command("script");
    cmd.args(["-q", "-f", "-e", "-c", command, "/dev/null"])
        // script runs the line with $SHELL -c; sh execs a single command, so
        // redlock-run leads the terminal's foreground process group.
        .env("SHELL", "/bin/sh")
        .current_dir(dir.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    cmd.spawn()
        .expect("script(1) from util-linux (apt-get install bsdutils)")
}

fn wait_with_timeout(child: &mut Child, limit: Duration) -> Option<i32> {
    let start = Instant::now();
    while start.elapsed() < limit {
        if let Ok(Some(status)) = child.try_wait() {
            return status.code();
        }
        thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
    None
}

#[test]
fn command_reads_the_terminal_and_ctrl_c_reaches_it() {
    let node = RedisNode::start();
    let dir = tempdir();

    // Reading: a command in a background process group would be stopped by
    // SIGTTIN here and never finish.
    let line = format!(
        "{BIN} -r {} -k tty -- sh -c 'touch ready; read answer; echo \"got:$answer\" > out'",
        node.url()
    );
    let mut script = on_terminal(&line, &dir);
    assert!(
        wait_until(Duration::from_secs(10), || dir.has("ready")),
        "the command did not start"
    );
    let mut stdin = script.stdin.take().expect("script stdin");
    stdin.write_all(b"hello\n").expect("type on the terminal");
    let code = wait_with_timeout(&mut script, Duration::from_secs(10));
    assert_eq!(
        code,
        Some(0),
        "the command could not read the terminal (stopped by SIGTTIN?)"
    );
    assert_eq!(
        fs::read_to_string(dir.join("out")).expect("out").trim(),
        "got:hello"
    );
    assert!(!node.exists(lock_key("tty")), "lock left after the run");

    // Ctrl-C: the terminal sends SIGINT to its foreground process group,
    // which must be the command's.
    let line = format!(
        "{BIN} -r {} -k tty -- sh -c 'touch started; exec sleep 30'",
        node.url()
    );
    let mut script = on_terminal(&line, &dir);
    assert!(
        wait_until(Duration::from_secs(10), || dir.has("started")),
        "the command did not start"
    );
    thread::sleep(Duration::from_millis(200));
    let mut stdin = script.stdin.take().expect("script stdin");
    stdin.write_all(b"\x03").expect("type Ctrl-C");
    let code = wait_with_timeout(&mut script, Duration::from_secs(10));
    assert_eq!(
        code,
        Some(128 + libc::SIGINT),
        "Ctrl-C did not end the command with SIGINT"
    );
    assert!(!node.exists(lock_key("tty")), "lock left after Ctrl-C");
}

#[test]
fn a_signal_ignored_at_start_stays_ignored_for_the_command() {
    let node = RedisNode::start();
    let dir = tempdir();
    // As under nohup: SIGHUP ignored before redlock-run starts.
    let inner = "echo $$ > child.pid; sleep 1.5; echo done > out";
    let line = format!(
        "trap '' HUP; exec {BIN} -r {} -k hup -- sh -c '{inner}'",
        node.url()
    );
    let mut child = crate::support::cmd::command("/bin/sh")
        .args(["-c", &line])
        .current_dir(dir.path())
        .stdin(Stdio::null())
        .spawn()
        .expect("spawn sh");
    let wrapper = child.id() as i32;
    let pid = read_pid_file(&dir.join("child.pid"), Duration::from_secs(10));
    assert!(send_signal(wrapper, libc::SIGHUP), "HUP to redlock-run");
    assert!(send_signal(pid, libc::SIGHUP), "HUP to the command");
    let code = wait_with_timeout(&mut child, Duration::from_secs(10));
    assert_eq!(
        code,
        Some(0),
        "an ignored SIGHUP must not stop redlock-run or its command"
    );
    assert_eq!(
        fs::read_to_string(dir.join("out")).expect("out").trim(),
        "done"
    );
}

/// With --retry, a later attempt gets the terminal's foreground again, and
/// stdin: the first attempt fails, the second reads what is typed.
#[test]
fn a_retried_attempt_reads_the_terminal_too() {
    let node = RedisNode::start();
    let dir = tempdir();
    let line = format!(
        "{BIN} -r {} -k tty-retry --retry 1 --retry-delay 50ms -- sh -c \
         'n=$(cat n 2>/dev/null || echo 0); n=$((n+1)); echo $n > n; \
          [ $n -ge 2 ] || exit 1; touch ready; read answer; echo \"got:$answer\" > out'",
        node.url()
    );
    let mut script = on_terminal(&line, &dir);
    assert!(
        wait_until(Duration::from_secs(10), || dir.has("ready")),
        "the second attempt did not start"
    );
    let mut stdin = script.stdin.take().expect("script stdin");
    stdin.write_all(b"again\n").expect("type on the terminal");
    let code = wait_with_timeout(&mut script, Duration::from_secs(10));
    assert_eq!(
        code,
        Some(0),
        "the second attempt could not read the terminal (stopped by SIGTTIN?)"
    );
    assert_eq!(
        fs::read_to_string(dir.join("out")).expect("out").trim(),
        "got:again"
    );
    assert!(
        !node.exists(lock_key("tty-retry")),
        "lock left after the run"
    );
}

/// Lines in the heartbeat file the command writes every 50 ms.
fn beats(dir: &TempDir) -> usize {
    fs::read_to_string(dir.join("beat")).map_or(0, |s| s.lines().count())
}

/// A command that writes a heartbeat to `beat` every 50 ms, its pid to
/// `cmd.pid`, under redlock-run on a fresh terminal, with redlock-run's
/// stderr in `err`; and every process of the run (redlock-run, its guard,
/// the command) once the beat has started.
fn heartbeat_on_terminal(node: &RedisNode, key: &str, dir: &TempDir) -> (Child, Vec<i32>) {
    let line = format!(
        "exec {BIN} -r {} -k {key} -- sh -c 'echo $$ > cmd.pid; \
         while :; do echo . >> beat; sleep 0.05; done' 2> err",
        node.url()
    );
    let script = on_terminal(&line, dir);
    let command = read_pid_file(&dir.join("cmd.pid"), Duration::from_secs(10));
    assert!(
        wait_until(Duration::from_secs(10), || beats(dir) >= 3),
        "the command does not beat"
    );
    // script(1) -> sh, exec'd into redlock-run -> guard -> command.
    let guard = parent_pid(command).expect("the command's parent");
    let wrapper = parent_pid(guard).expect("the guard's parent");
    assert_eq!(process_name(guard).as_deref(), Some("redlock-guard"));
    (script, vec![wrapper, guard, command])
}

/// A process's state, process group, its terminal's foreground group and
/// wait channel, for a failure's message.
fn job_state(pid: i32) -> String {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let f: Vec<&str> = stat
        .rfind(')')
        .map_or("", |i| &stat[i + 1..])
        .split_whitespace()
        .collect();
    let wchan = fs::read_to_string(format!("/proc/{pid}/wchan")).unwrap_or_default();
    let pending: Vec<String> = fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .filter(|l| l.starts_with("SigPnd:") || l.starts_with("ShdPnd:"))
        .filter_map(|l| l.split_whitespace().last().map(str::to_string))
        .collect();
    let children: Vec<String> = fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|c| c.parse().ok())
        .map(job_state)
        .collect();
    match (f.first(), f.get(2), f.get(5)) {
        (Some(state), Some(pgrp), Some(tpgid)) => {
            format!(
                "{pid}:{state}:{pgrp}:{tpgid}:{wchan}:pending {pending:?}, children {children:?}"
            )
        }
        _ => format!("{pid}:gone"),
    }
}

/// Ctrl-C typed after Ctrl-Z was answered: the run ends with 130, the lock
/// `key` is gone, and so is every process of `run`.
fn ctrl_c_ends_the_run(
    mut stdin: std::process::ChildStdin,
    script: &mut Child,
    node: &RedisNode,
    key: &str,
    dir: &TempDir,
    run: &[i32],
) {
    stdin.write_all(b"\x03").expect("type Ctrl-C");
    let code = wait_with_timeout(script, Duration::from_secs(10));
    assert_eq!(
        code,
        Some(128 + libc::SIGINT),
        "Ctrl-C after Ctrl-Z did not end the run: {:?}",
        err_text(dir)
    );
    assert!(!node.exists(lock_key(key)), "lock left after Ctrl-C");
    for &pid in run {
        assert!(
            wait_until(Duration::from_secs(5), || !pid_alive(pid)),
            "process {pid} ({:?}) of the run is left",
            process_name(pid)
        );
    }
}

fn err_text(dir: &TempDir) -> String {
    fs::read_to_string(dir.join("err")).unwrap_or_default()
}

const NO_SUSPEND: &str = "a job holding a lock cannot be suspended";

/// Ctrl-Z stops the command's process group, which has the terminal; with
/// nothing resuming it, redlock-run and the shell would wait for ever and
/// Ctrl-C would only queue behind the stop. The guard resumes the tree and
/// redlock-run says why; Ctrl-C then ends the run and frees the lock.
#[test]
fn ctrl_z_is_answered_by_resuming_and_ctrl_c_still_ends_the_run() {
    let node = RedisNode::start();
    let dir = tempdir();
    let (mut script, run) = heartbeat_on_terminal(&node, "tty-z", &dir);
    let command = run[2];
    let mut stdin = script.stdin.take().expect("script stdin");
    stdin.write_all(b"\x1a").expect("type Ctrl-Z");
    let typed = Instant::now();
    if !wait_until(Duration::from_secs(5), || {
        err_text(&dir).contains(NO_SUSPEND)
    }) {
        // Beside busy loops and a safety workload this once saw no word in
        // 5 s: what each process was doing then, and whether the word came
        // late or never, tell a slow host from a lost stop.
        let then: Vec<String> = run.iter().map(|&p| job_state(p)).collect();
        let late = wait_until(Duration::from_secs(20), || {
            err_text(&dir).contains(NO_SUSPEND)
        });
        panic!(
            "no word about Ctrl-Z in 5 s ({}); redlock-run, guard, command 5 s after it \
             (pid:state:pgrp:terminal's foreground group:wchan:pending signals, children): {then:?}; now: {:?}; \
             stderr: {:?}",
            if late {
                format!("it came {:?} after Ctrl-Z", typed.elapsed())
            } else {
                "nor in 20 s more".to_string()
            },
            run.iter().map(|&p| job_state(p)).collect::<Vec<_>>(),
            err_text(&dir)
        );
    }
    let err = err_text(&dir);
    assert_eq!(err.lines().count(), 1, "one line: {err:?}");
    // The command, or, where Ctrl-Z came while the command was in vfork,
    // the child it was starting (sh before its exec, sleep after): see
    // `ctrl_z_during_a_vfork_is_answered_too`.
    let named: Option<i32> = err
        .split("process ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next()?.parse().ok());
    assert!(
        named.is_some_and(|p| p == command || !run.contains(&p))
            && (named != Some(command) || err.contains(&format!("process {command} (sh)")))
            && err.contains("stopped by SIGTSTP (Ctrl-Z), was resumed; Ctrl-C stops it"),
        "{err:?}"
    );
    // It runs on: not stopped, and beating.
    let before = beats(&dir);
    assert!(
        wait_until(Duration::from_secs(5), || beats(&dir) >= before + 5),
        "the command stopped beating after Ctrl-Z (state {:?})",
        process_state(command)
    );
    assert!(node.exists(lock_key("tty-z")), "the lock is held meanwhile");

    ctrl_c_ends_the_run(stdin, &mut script, &node, "tty-z", &dir, &run);
}

/// A process that vforks a child which never execs: the parent waits in
/// the kernel, where no stop reaches it, for as long as the child lives.
/// The child writes its pid to `child.pid` and pauses.
const VFORK_C: &str = r#"
#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>
int main(void) {
    if (vfork() == 0) {
        char pid[16];
        int n = snprintf(pid, sizeof pid, "%d\n", (int)getpid());
        int fd = open("child.pid.tmp", O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd < 0 || write(fd, pid, n) != n || close(fd) != 0) _exit(1);
        rename("child.pid.tmp", "child.pid");
        for (;;) pause();
    }
    return 0;
}
"#;

/// Ctrl-Z that comes while the command is in vfork(2) (a shell starting a
/// program, posix_spawn) stops the child before its exec, and the command,
/// waiting for that exec, cannot stop at all: the guard hears of no stop,
/// and the pair would stay frozen under the lock. It is found (the stop
/// pending on the command), resumed and said; Ctrl-C then ends the run. Seen
/// beside busy loops, where `sleep` took long to exec.
#[test]
fn ctrl_z_during_a_vfork_is_answered_too() {
    let node = RedisNode::start();
    let dir = tempdir();
    fs::write(dir.path().join("vf.c"), VFORK_C).expect("vf.c");
    let out = crate::support::cmd::command("gcc")
        .args(["-O1", "-o", "vf", "vf.c"])
        .current_dir(dir.path())
        .output()
        .expect("gcc is needed to build the vforking command");
    assert!(out.status.success(), "gcc: {:?}", out);
    let line = format!("exec {BIN} -r {} -k tty-vfork -- ./vf 2> err", node.url());
    let mut script = on_terminal(&line, &dir);
    let pid_file = dir.join("child.pid");
    assert!(
        wait_until(Duration::from_secs(20), || pid_file.exists()),
        "the command did not vfork in 20 s: {:?}",
        err_text(&dir)
    );
    let child = read_pid_file(&pid_file, Duration::from_secs(1));
    let command = parent_pid(child).expect("the vfork child's parent");
    let mut stdin = script.stdin.take().expect("script stdin");
    stdin.write_all(b"\x1a").expect("type Ctrl-Z");
    assert!(
        wait_until(Duration::from_secs(5), || err_text(&dir)
            .contains(NO_SUSPEND)),
        "no word about Ctrl-Z during a vfork in 5 s: command {}, child {}, stderr {:?}",
        job_state(command),
        job_state(child),
        err_text(&dir)
    );
    let err = err_text(&dir);
    assert_eq!(err.lines().count(), 1, "one line: {err:?}");
    assert!(
        err.contains(&format!("process {child} (vf)")) && err.contains("SIGTSTP (Ctrl-Z)"),
        "{err:?}"
    );
    assert!(
        wait_until(Duration::from_secs(5), || process_state(child) != Some('T')),
        "the vfork child is still stopped: {}",
        job_state(child)
    );
    assert!(
        node.exists(lock_key("tty-vfork")),
        "the lock is held meanwhile"
    );
    ctrl_c_ends_the_run(
        stdin,
        &mut script,
        &node,
        "tty-vfork",
        &dir,
        &[command, child],
    );
}

/// A SIGSTOP is no terminal's doing: whoever sent it (an operator, a
/// debugger, a test) means the command to stay stopped, under the lock,
/// until they send SIGCONT. Nothing resumes it and nothing is said.
#[test]
fn a_sigstop_from_elsewhere_is_left_alone() {
    let node = RedisNode::start();
    let dir = tempdir();
    let (mut script, run) = heartbeat_on_terminal(&node, "tty-stop", &dir);
    let command = run[2];
    assert!(send_signal(command, libc::SIGSTOP));
    assert!(
        wait_until(Duration::from_secs(5), || process_state(command)
            == Some('T')),
        "SIGSTOP did not stop the command"
    );
    thread::sleep(Duration::from_millis(300));
    let stopped = beats(&dir);
    // Several of the guard's resume gaps and redlock-run's heartbeats.
    thread::sleep(Duration::from_millis(1500));
    assert_eq!(process_state(command), Some('T'), "the command was resumed");
    assert_eq!(beats(&dir), stopped, "the command beat while stopped");
    assert!(node.exists(lock_key("tty-stop")), "the lock is kept");
    assert!(send_signal(command, libc::SIGCONT));
    assert!(
        wait_until(Duration::from_secs(5), || beats(&dir) >= stopped + 3),
        "SIGCONT did not resume the command"
    );
    let mut stdin = script.stdin.take().expect("script stdin");
    stdin.write_all(b"\x03").expect("type Ctrl-C");
    let code = wait_with_timeout(&mut script, Duration::from_secs(10));
    assert_eq!(code, Some(128 + libc::SIGINT), "{:?}", err_text(&dir));
    assert!(!err_text(&dir).contains(NO_SUSPEND), "{:?}", err_text(&dir));
    assert!(!node.exists(lock_key("tty-stop")), "lock left after Ctrl-C");
}

/// CPU time (user + system, in clock ticks) that `pid` has used.
fn cpu_ticks(pid: i32) -> u64 {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let rest = stat.rfind(')').map_or("", |i| &stat[i + 1..]);
    // utime and stime: fields 14 and 15, the 12th and 13th after the name.
    rest.split_whitespace()
        .skip(11)
        .take(2)
        .filter_map(|f| f.parse::<u64>().ok())
        .sum()
}

/// Once the command has exited the terminal is redlock-run's again, and a
/// process it left behind that reads the terminal is stopped by SIGTTIN:
/// it would keep the lock, stopped, for ever. The guard resumes it (it
/// stops again at once: at most every 100 ms, so neither spins), and
/// redlock-run names it once, with how to stop it.
#[test]
fn a_leftover_reading_the_terminal_is_resumed_and_named_once() {
    let node = RedisNode::start();
    let dir = tempdir();
    let line = format!(
        "exec {BIN} -r {} -k tty-bg -- sh -c 'exec 3<&0; \
         (sleep 0.5; read x <&3; echo \"got:$x\" > got) & echo $! > bg.pid' 2> err",
        node.url()
    );
    let mut script = on_terminal(&line, &dir);
    let bg = read_pid_file(&dir.join("bg.pid"), Duration::from_secs(10));
    assert!(
        wait_until(Duration::from_secs(10), || err_text(&dir)
            .contains("stopped by SIGTTIN")),
        "no word about the stopped leftover: {:?}",
        err_text(&dir)
    );
    let guard = parent_pid(bg).expect("the leftover's parent, the guard");
    assert_eq!(process_name(guard).as_deref(), Some("redlock-guard"));
    let ticks = cpu_ticks(guard) + cpu_ticks(bg);
    thread::sleep(Duration::from_millis(1500));
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
    let used = cpu_ticks(guard) + cpu_ticks(bg) - ticks;
    assert!(
        used * 1000 / hz < 500,
        "the guard and the leftover used {used} ticks ({hz}/s) in 1.5 s"
    );
    let err = err_text(&dir);
    let named: Vec<&str> = err.lines().filter(|l| l.contains("SIGTTIN")).collect();
    assert_eq!(named.len(), 1, "named once: {err:?}");
    assert!(
        named[0].contains(&format!("process {bg} (sh), stopped by SIGTTIN"))
            && named[0].contains(&format!(
                "keeps the lock until it exits (kill {bg} stops it)"
            )),
        "{err:?}"
    );
    assert!(
        node.exists(lock_key("tty-bg")),
        "the lock is kept meanwhile"
    );
    assert!(send_signal(bg, libc::SIGTERM), "TERM to the leftover");
    let code = wait_with_timeout(&mut script, Duration::from_secs(10));
    assert_eq!(
        code,
        Some(0),
        "the command's own status: {:?}",
        err_text(&dir)
    );
    assert!(!node.exists(lock_key("tty-bg")), "lock left");
}

/// Ctrl-C at a terminal on a job whose background child ignores SIGINT:
/// the first reaches the command's group alone (the shell ends, the child
/// keeps the lock, and the line says that Ctrl-C again stops it); the
/// second, with the terminal back in redlock-run's hands, sends SIGTERM to
/// the whole tree, and the run ends within a second.
#[test]
fn a_second_ctrl_c_stops_a_background_child_that_ignores_the_first() {
    let node = RedisNode::start();
    let dir = tempdir();
    let line = format!(
        "{BIN} -r {} -k tty-cc -- sh -c 'sleep 20 & echo $! > child; wait' 2> err",
        node.url()
    );
    let mut script = on_terminal(&line, &dir);
    let child = read_pid_file(&dir.join("child"), Duration::from_secs(10));
    thread::sleep(Duration::from_millis(200));
    let mut stdin = script.stdin.take().expect("script stdin");
    stdin.write_all(b"\x03").expect("type Ctrl-C");
    assert!(
        wait_until(Duration::from_secs(5), || err_text(&dir)
            .contains("left behind")),
        "no line about the child that keeps the lock: {:?}",
        err_text(&dir)
    );
    assert!(
        err_text(&dir).contains("press Ctrl-C again, or kill"),
        "{:?}",
        err_text(&dir)
    );
    assert!(pid_alive(child), "the background child ignores SIGINT");
    assert!(node.exists(lock_key("tty-cc")), "kept for the child");
    stdin.write_all(b"\x03").expect("type Ctrl-C again");
    let typed = Instant::now();
    let code = wait_with_timeout(&mut script, Duration::from_secs(10));
    assert!(
        typed.elapsed() < Duration::from_secs(1),
        "{:?} after the second Ctrl-C: {:?}",
        typed.elapsed(),
        err_text(&dir)
    );
    assert_eq!(code, Some(128 + libc::SIGINT), "{:?}", err_text(&dir));
    assert!(
        err_text(&dir).contains("SIGINT again: sent SIGTERM to every process"),
        "{:?}",
        err_text(&dir)
    );
    assert!(!pid_alive(child));
    assert!(!node.exists(lock_key("tty-cc")), "released");
}
