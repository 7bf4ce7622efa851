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

use crate::support::*;

const BIN: &str = env!("CARGO_BIN_EXE_redlock-run");

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
