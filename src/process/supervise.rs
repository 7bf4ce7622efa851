//! The command while it runs: the loop that waits for it, passes signals on,
//! and stops it (SIGTERM, then SIGKILL) before the lock's validity deadline or
//! at --timeout; and the heartbeat that moves that deadline on.

use std::io;
use std::process::ExitStatus;
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender};
use std::thread;
use std::time::Instant;

use crate::cli::Config;
use crate::exit::Exit;
use crate::lock::redlock;
use crate::lock::{Extended, Lock};
use crate::log::{Log, ev};
use crate::process::spawn::{self as child, Supervised};
use crate::report::Stats;

/// Everything the waiting and supervising loops react to.
pub enum Event {
    Exited(io::Result<ExitStatus>),
    Signal(i32),
    Extended(Instant),
    /// The lock is certainly gone (a quorum holds another token or none).
    Gone(String),
    /// A release was announced on some node: worth another try.
    Wake,
}

/// Why the command is being stopped.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Stop {
    Lost(String),
    Timeout,
}

/// Waits for the command while enforcing the lock's deadline and --timeout.
///
/// Lock: SIGTERM to the group at `deadline - guard - kill_after`, SIGKILL at
/// `deadline - guard`, unless a heartbeat moved the deadline on first.
/// Timeout: SIGTERM at start + timeout, SIGKILL `kill_after` later. SIGKILL
/// never comes later than `deadline - guard`, whatever the reason.
pub fn supervise(
    supervised: &Supervised,
    config: &Config,
    mut deadline: Instant,
    rx: &Receiver<Event>,
    log: &Log,
) -> Exit {
    let timeout_at = config.timeout.map(|t| Instant::now() + t);
    let mut stop: Option<Stop> = None;
    // Once stopping: when SIGKILL goes out (capped by `last` below).
    let mut kill_at: Option<Instant> = None;
    let mut killed = false;
    let guard = redlock::kill_guard(config.ttl);
    let status = loop {
        let now = Instant::now();
        // The last moment the command may be alive, a guard before the
        // deadline (see `kill_guard`); everything is scheduled from it.
        let last = deadline.checked_sub(guard).unwrap_or(deadline);
        let term_at = last.checked_sub(config.kill_after).unwrap_or(last);
        let begin = if !matches!(stop, Some(Stop::Lost(_))) && now >= term_at {
            Some((Stop::Lost("no extension succeeded in time".into()), last))
        } else if stop.is_none() && timeout_at.is_some_and(|t| now >= t) {
            Some((Stop::Timeout, now + config.kill_after))
        } else {
            None
        };
        if let Some((why, at)) = begin {
            match &why {
                Stop::Lost(reason) => log.error(
                    ev(
                        "lost",
                        format!(
                            "lock '{}' lost: {reason}; stopping the command",
                            config.name
                        ),
                    )
                    .outcome("lost"),
                ),
                Stop::Timeout => log.notice(
                    ev(
                        "timeout",
                        format!(
                            "{} ran past --timeout; stopping it",
                            config.program.describe()
                        ),
                    )
                    .outcome("timeout"),
                ),
            }
            if stop.is_none() {
                supervised.signal_group(libc::SIGTERM);
            }
            stop = Some(why);
            kill_at = Some(kill_at.map_or(at, |k| k.min(at)));
        }
        let kill_due = kill_at.map(|k| k.min(last));
        if !killed && kill_due.is_some_and(|k| now >= k) {
            supervised.signal_group(libc::SIGKILL);
            killed = true;
        }
        let next = match (&stop, killed) {
            (_, true) => None,
            (None, _) => Some(timeout_at.map_or(term_at, |t| t.min(term_at))),
            (Some(Stop::Timeout), _) => kill_due.map(|k| k.min(term_at)),
            (Some(Stop::Lost(_)), _) => kill_due,
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
            Ok(Event::Extended(d)) if !matches!(stop, Some(Stop::Lost(_))) => deadline = d,
            Ok(Event::Gone(why)) if !matches!(stop, Some(Stop::Lost(_))) => {
                // Someone else may hold it already: stop at once, and never
                // later than our own validity.
                log.error(
                    ev(
                        "lost",
                        format!("lock '{}' lost: {why}; stopping the command", config.name),
                    )
                    .outcome("lost"),
                );
                if stop.is_none() {
                    supervised.signal_group(libc::SIGTERM);
                }
                stop = Some(Stop::Lost(why));
                let at = (Instant::now() + config.kill_after)
                    .min(deadline.checked_sub(guard).unwrap_or(deadline));
                kill_at = Some(kill_at.map_or(at, |k| k.min(at)));
            }
            Ok(_) | Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => {
                break Err(io::Error::other("lost track of the command"));
            }
        }
    };
    if stop.is_some() {
        // The command's leader is gone; nothing it forked may outlive the lock
        // or the timeout.
        supervised.signal_group(libc::SIGKILL);
    }
    match (stop, status) {
        (Some(Stop::Lost(_)), _) => Exit::Lost,
        (Some(Stop::Timeout), _) => Exit::Timeout,
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
pub fn start_heartbeat(
    lock: &Arc<Lock>,
    config: &Config,
    mut deadline: Instant,
    tx: Sender<Event>,
    stop: Receiver<()>,
    log: Log,
    stats: Arc<Stats>,
) {
    let lock = Arc::clone(lock);
    let interval = redlock::heartbeat_interval(config.ttl);
    let retry = redlock::heartbeat_retry(config.ttl, config.node_timeout);
    let mut next = Instant::now() + interval;
    let spawned = thread::Builder::new()
        .name("heartbeat".into())
        .spawn(move || {
            // A heartbeat that dies must not look like slow nodes: the
            // supervisor hears of it at once and stops the command.
            let _notice = PanicNotice(tx.clone());
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
                        log.info(|| {
                            ev("extended", format!("extended in {:.1?}", start.elapsed()))
                                .ms(start.elapsed())
                                .outcome("extended")
                        });
                        deadline = d;
                        next = start + interval;
                        stats.extensions_done.fetch_add(1, Relaxed);
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
                        stats.extensions_failed.fetch_add(1, Relaxed);
                        log.info(|| {
                            ev("extend-failed", format!("heartbeat: {why}; retrying"))
                                .outcome("failed")
                        });
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

/// Sends `Gone` if the heartbeat thread unwinds.
struct PanicNotice(Sender<Event>);

impl Drop for PanicNotice {
    fn drop(&mut self) {
        if thread::panicking() {
            let _ = self
                .0
                .send(Event::Gone("the heartbeat thread failed".into()));
        }
    }
}
