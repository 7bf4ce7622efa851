//! One run: parse, acquire, supervise the command while a heartbeat keeps the
//! lock, release, and pick the exit status.

use std::ffi::OsString;
use std::io;
use std::process::ExitStatus;
use std::sync::Arc;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::thread;
use std::time::Instant;

use clap::FromArgMatches;

use crate::child::{self, Env, Supervised};
use crate::cli::{self, Cli, Config};
use crate::exit::Exit;
use crate::lock::{Acquired, Extended, Lock};
use crate::log::Log;
use crate::node::{self, Node};
use crate::redlock;
use crate::signals;

/// Everything the supervising loop reacts to.
enum Event {
    Exited(io::Result<ExitStatus>),
    Signal(i32),
    Extended(Instant),
    /// The lock is certainly gone (a quorum holds another token or none).
    Gone(String),
}

pub fn main(args: impl IntoIterator<Item = OsString>) -> Exit {
    let parsed = cli::command()
        .try_get_matches_from(args)
        .and_then(|m| Cli::from_arg_matches(&m));
    let cli = match parsed {
        Ok(cli) => cli,
        Err(e) => return clap_exit(e),
    };
    let config = match cli.into_config() {
        Ok(c) => c,
        Err(msg) => {
            Log::new(0).error(msg);
            return Exit::Usage;
        }
    };
    run(&config)
}

/// Help and version go to stdout with status 0; every other clap error becomes
/// one line on stderr and status 64.
fn clap_exit(e: clap::Error) -> Exit {
    use clap::error::ErrorKind;
    if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) {
        let _ = e.print();
        return Exit::Command(0);
    }
    Log::new(0).error(format!("{} (try --help)", one_line(&e.to_string())));
    Exit::Usage
}

/// Folds clap's multi-line message into one line, dropping usage and tips.
fn one_line(msg: &str) -> String {
    msg.lines()
        .take_while(|l| !l.starts_with("Usage:") && !l.starts_with("For more information"))
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with("tip:"))
        .collect::<Vec<_>>()
        .join(" ")
        .trim_start_matches("error: ")
        .to_string()
}

fn run(config: &Config) -> Exit {
    let log = Log::new(config.verbosity);
    let nodes = match config
        .urls
        .iter()
        .map(|u| Node::new(u, config.node_timeout))
        .collect::<Result<Vec<_>, _>>()
    {
        Ok(n) => n,
        Err(msg) => {
            log.error(msg);
            return Exit::Usage;
        }
    };
    let lock = match Lock::new(nodes, config.key.clone(), config.ttl, config.node_timeout) {
        Ok(l) => Arc::new(l),
        Err(e) => {
            log.error(e.to_string());
            return Exit::Unavailable;
        }
    };
    let (tx, rx) = mpsc::channel();
    // Before acquiring: a TERM that arrives mid-acquire must still lead to a
    // release rather than kill us with the lock set.
    if let Err(e) = signals::listen(tx.clone(), Event::Signal) {
        log.error(format!("cannot watch signals: {e}"));
        return Exit::Unavailable;
    }

    let deadline = match lock.acquire(&log) {
        Acquired::Yes { deadline } => deadline,
        Acquired::Busy => {
            log.notice(format!("lock '{}' is held elsewhere", config.name));
            return Exit::Busy(config.busy_exit_code);
        }
        Acquired::Unavailable(why) => {
            log.error(format!("cannot take lock '{}': {why}", config.name));
            return Exit::Unavailable;
        }
    };
    if let Some(sig) = rx.try_iter().find_map(|e| match e {
        Event::Signal(s) => Some(s),
        _ => None,
    }) {
        log.info(|| format!("signal {sig} before the command started; releasing"));
        lock.release(&log);
        return Exit::Signal(sig);
    }

    let env = Env {
        set: vec![
            ("REDLOCK_KEY", &config.name),
            ("REDLOCK_TOKEN", lock.token()),
        ],
        remove: secret_env(),
    };
    let (mut child, supervised) = match child::spawn(&config.program, &env) {
        Ok(s) => s,
        Err(e) => {
            log.error(format!(
                "cannot run {}: {}",
                program_name(config),
                os_message(&e)
            ));
            lock.release(&log);
            return child::exit_of_spawn_error(&e);
        }
    };
    let pid = supervised.pid;
    log.info(|| format!("running {} as pid {pid}", program_name(config)));

    let waiter_tx = tx.clone();
    let waiter = thread::Builder::new().name("wait".into()).spawn(move || {
        let _ = waiter_tx.send(Event::Exited(child.wait()));
    });
    if let Err(e) = waiter {
        // Nobody would notice the command's exit: stop it rather than hold the
        // lock blindly.
        log.error(format!("cannot watch the command: {e}"));
        supervised.signal_group(libc::SIGKILL);
        lock.release(&log);
        return Exit::Unavailable;
    }
    let (stop_tx, stop_rx) = mpsc::channel();
    start_heartbeat(&lock, config, deadline, tx, stop_rx, log);
    let exit = supervise(&supervised, config, deadline, &rx, &log);
    drop(stop_tx);
    supervised.restore_terminal();
    lock.release(&log);
    exit
}

/// Waits for the command while enforcing the lock's deadline: SIGTERM to its
/// group at `deadline - kill_after`, SIGKILL at the deadline, unless a
/// heartbeat moved the deadline on. Returns the exit status to report.
fn supervise(
    supervised: &Supervised,
    config: &Config,
    mut deadline: Instant,
    rx: &Receiver<Event>,
    log: &Log,
) -> Exit {
    // Set once the lock is known or feared lost: the command must stop.
    let mut lost: Option<String> = None;
    let mut term_at = deadline.checked_sub(config.kill_after).unwrap_or(deadline);
    let mut kill_at = deadline;
    let (mut term_sent, mut kill_sent) = (false, false);
    let status = loop {
        let now = Instant::now();
        if !kill_sent && now >= kill_at {
            supervised.signal_group(libc::SIGKILL);
            (term_sent, kill_sent) = (true, true);
            lost.get_or_insert_with(|| "its validity ran out".into());
        } else if !term_sent && now >= term_at {
            supervised.signal_group(libc::SIGTERM);
            term_sent = true;
            let why = lost.get_or_insert_with(|| "no extension succeeded in time".into());
            log.error(format!(
                "lock '{}' lost: {why}; stopping the command (SIGKILL in {:.0?})",
                config.name,
                kill_at.saturating_duration_since(now)
            ));
        }
        let next = match (term_sent, kill_sent) {
            (false, _) => Some(term_at),
            (true, false) => Some(kill_at),
            (true, true) => None,
        };
        let event = match next {
            Some(t) => rx.recv_timeout(t.saturating_duration_since(Instant::now())),
            None => rx.recv().map_err(|_| RecvTimeoutError::Disconnected),
        };
        match event {
            Ok(Event::Exited(status)) => break status,
            Ok(Event::Signal(sig)) => {
                log.info(|| format!("passing signal {sig} to the command"));
                supervised.signal_group(sig);
            }
            Ok(Event::Extended(d)) if lost.is_none() => {
                deadline = d;
                term_at = deadline.checked_sub(config.kill_after).unwrap_or(deadline);
                kill_at = deadline;
            }
            Ok(Event::Gone(why)) if lost.is_none() => {
                // Someone else may hold it already: stop at once, and never
                // later than our own validity.
                lost = Some(why);
                term_at = Instant::now();
                kill_at = (term_at + config.kill_after).min(deadline);
            }
            Ok(Event::Extended(_) | Event::Gone(_)) | Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => {
                break Err(io::Error::other("lost track of the command"));
            }
        }
    };
    match (lost, status) {
        (Some(_), _) => {
            // The command's leader is gone; nothing it forked may outlive the lock.
            supervised.signal_group(libc::SIGKILL);
            Exit::Lost
        }
        (None, Ok(s)) => child::exit_of(s),
        (None, Err(e)) => {
            log.error(format!("waiting for the command failed: {e}"));
            Exit::Command(1)
        }
    }
}

/// Extends the lock every TTL/3 (sooner after a failure) until told to stop
/// or the lock is gone. Never starts a round once the deadline has passed:
/// that could resurrect a lock someone else now holds.
fn start_heartbeat(
    lock: &Arc<Lock>,
    config: &Config,
    mut deadline: Instant,
    tx: Sender<Event>,
    stop: Receiver<()>,
    log: Log,
) {
    let lock = Arc::clone(lock);
    let interval = redlock::heartbeat_interval(config.ttl);
    let retry = redlock::heartbeat_retry(config.ttl, config.node_timeout);
    let mut next = Instant::now() + interval;
    let spawned = thread::Builder::new()
        .name("heartbeat".into())
        .spawn(move || {
            loop {
                match stop.recv_timeout(next.saturating_duration_since(Instant::now())) {
                    Err(RecvTimeoutError::Timeout) => {}
                    _ => return,
                }
                let start = Instant::now();
                if start >= deadline {
                    return;
                }
                match lock.extend(&log) {
                    Extended::Yes { deadline: d } if Instant::now() < deadline => {
                        log.debug(|| format!("extended in {:.1?}", start.elapsed()));
                        deadline = d;
                        next = start + interval;
                        if tx.send(Event::Extended(d)).is_err() {
                            return;
                        }
                    }
                    Extended::Yes { .. } => return,
                    Extended::Gone => {
                        let _ = tx.send(Event::Gone(
                            "a quorum of nodes no longer holds our token".into(),
                        ));
                        return;
                    }
                    Extended::Failed(why) => {
                        log.info(|| format!("heartbeat: {why}; retrying"));
                        next = Instant::now() + retry;
                    }
                }
            }
        });
    if let Err(e) = spawned {
        // Without a heartbeat the supervisor still stops the command before
        // the first deadline: safe, only shorter.
        log.error(format!("cannot start the heartbeat: {e}"));
    }
}

/// Environment variables that may carry a password: the command never sees them.
fn secret_env() -> Vec<&'static str> {
    let mut remove = vec!["REDLOCK_PASSWORD"];
    if std::env::var("REDLOCK_REDIS").is_ok_and(|v| v.split(',').any(|u| node::redact(u) != u)) {
        remove.push("REDLOCK_REDIS");
    }
    remove
}

/// The OS's description without Rust's " (os error N)" suffix.
fn os_message(e: &io::Error) -> String {
    let s = e.to_string();
    match s.find(" (os error ") {
        Some(i) => s[..i].to_string(),
        None => s,
    }
}

fn program_name(config: &Config) -> String {
    match &config.program {
        cli::Program::Shell(_) => "/bin/sh -c".into(),
        cli::Program::Argv(argv) => format!("'{}'", argv[0].to_string_lossy()),
    }
}

#[cfg(test)]
mod tests {
    use super::one_line;

    #[test]
    fn clap_errors_fold_into_one_line() {
        let msg = "error: the following required arguments were not provided:\n  --key <NAME>\n\nUsage: redlock-run --key <NAME> [COMMAND]...\n\nFor more information, try '--help'.\n";
        assert_eq!(
            one_line(msg),
            "the following required arguments were not provided: --key <NAME>"
        );
        let msg = "error: unexpected argument '--bogus' found\n\n  tip: to pass '--bogus' as a value, use '-- --bogus'\n\nUsage: x\n";
        assert_eq!(one_line(msg), "unexpected argument '--bogus' found");
    }
}
