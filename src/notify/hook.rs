//! `--on-failure CMD`: a shell command run after a run that failed, for
//! mail, chat or any service without the ping protocol. It runs after the
//! release, in a process group of its own, and is killed (the whole group)
//! when its time is up.

use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use rustix::process::{Pid, Signal, kill_process_group};

/// How often the command is looked at while it runs.
const POLL: Duration = Duration::from_millis(10);

/// Runs `command` with `/bin/sh -c`, with `env` added and `hide` removed
/// from its environment, until it exits or `deadline` (then it is killed);
/// `Err` says what went wrong, for a warning.
pub(crate) fn run(
    command: &str,
    env: &[(&str, String)],
    hide: &[&str],
    deadline: Instant,
) -> Result<(), String> {
    let mut sh = Command::new("/bin/sh");
    sh.arg("-c")
        .arg(command)
        .stdin(Stdio::null())
        // Its own group: a timeout stops what it started too.
        .process_group(0);
    for name in hide {
        sh.env_remove(name);
    }
    sh.envs(env.iter().map(|(k, v)| (k, v)));
    let started = Instant::now();
    let mut child = sh
        .spawn()
        .map_err(|e| format!("cannot run it: {}", crate::text::os_message(&e)))?;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) => {}
            Err(e) => {
                return Err(format!(
                    "cannot wait for it: {}",
                    crate::text::os_message(&e)
                ));
            }
        }
        let now = Instant::now();
        if now >= deadline {
            if let Some(group) = Pid::from_raw(child.id() as i32) {
                let _ = kill_process_group(group, Signal::KILL);
            }
            let _ = child.wait();
            return Err(format!(
                "still running after {}: killed",
                crate::log::span(started.elapsed())
            ));
        }
        std::thread::sleep(POLL.min(deadline - now));
    };
    match (status.code(), status.signal()) {
        (Some(0), _) => Ok(()),
        (Some(code), _) => Err(format!("exited with status {code}")),
        (None, Some(sig)) => Err(format!("killed by signal {sig}")),
        (None, None) => Err(format!("ended with {status}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn within(secs: f64) -> Instant {
        Instant::now() + Duration::from_secs_f64(secs)
    }

    #[test]
    fn it_gets_its_variables_and_its_status_is_told() {
        let dir = tempfile::tempdir().expect("temp dir");
        let out = dir.path().join("out");
        let cmd = format!(
            "echo \"$REDLOCK_OUTCOME $HIDDEN_X-${{HOME:-none}}\" > {}",
            out.display()
        );
        run(
            &cmd,
            &[("REDLOCK_OUTCOME", "failed".into())],
            &["HOME", "HIDDEN_X"],
            within(5.0),
        )
        .expect("ran");
        assert_eq!(
            std::fs::read_to_string(&out).expect("written"),
            "failed -none\n"
        );
        assert_eq!(
            run("exit 3", &[], &[], within(5.0)),
            Err("exited with status 3".into())
        );
        assert_eq!(
            run("kill -9 $$", &[], &[], within(5.0)),
            Err("killed by signal 9".into())
        );
    }

    #[test]
    fn one_that_runs_too_long_is_killed_with_what_it_started() {
        let dir = tempfile::tempdir().expect("temp dir");
        let pid_file = dir.path().join("pid");
        let cmd = format!("sleep 30 & echo $! > {}; wait", pid_file.display());
        let t = Instant::now();
        let e = run(&cmd, &[], &[], within(0.5)).expect_err("killed");
        assert!(e.starts_with("still running after "), "{e}");
        assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
        let pid: i32 = std::fs::read_to_string(&pid_file)
            .expect("pid")
            .trim()
            .parse()
            .expect("a pid");
        // The sleep was killed with its group: gone, or a zombie of ours.
        let gone = || {
            std::fs::read_to_string(format!("/proc/{pid}/stat")).map_or(true, |s| {
                s.rsplit(") ").next().is_some_and(|r| r.starts_with('Z'))
            })
        };
        let until = Instant::now() + Duration::from_secs(5);
        while !gone() && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(gone(), "the hook's child lives on");
    }
}
