//! The heartbeat: a thread that extends the lock every TTL/3 while the
//! command's tree runs, and tells the supervisor each new deadline.
//!
//! The thread starts when the first extension is due, not with the command:
//! a command that is done within TTL/3 (many cron jobs, every benchmark)
//! never needs one, and a thread start is a tenth of a millisecond of a run
//! that costs a few. The loops that wait while the lock is held (the
//! supervisor, the pause between attempts) start it on time.

use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::thread::{self, JoinHandle};

use crate::cli::Config;
use crate::clock::{self, Stamp};
use crate::lock::redlock;
use crate::lock::{Extended, Held, Lock};
use crate::log::{Log, ev};
use crate::process::events::{Event, Events};
use crate::report::Stats;

/// The heartbeat of one held lock: not yet started, or its thread.
pub struct Heartbeat {
    /// When the thread must run: the first extension is due.
    due: Stamp,
    start: Option<Box<dyn FnOnce() -> Option<JoinHandle<()>>>>,
    thread: Option<JoinHandle<()>>,
}

impl Heartbeat {
    /// When the thread is to be started, or `None` once it was.
    pub fn due(&self) -> Option<Stamp> {
        self.start.as_ref().map(|_| self.due)
    }

    /// Starts the thread if its first extension is due. Call it from every
    /// loop that waits while the lock is held, waking by `due` at the latest.
    pub fn tick(&mut self) {
        if clock::now() >= self.due
            && let Some(start) = self.start.take()
        {
            self.thread = start();
        }
    }

    /// Waits for the round in flight, if any (a round limit): no late
    /// extension may undo what comes after. Drop the stop sender first.
    pub fn join(self) {
        if let Some(h) = self.thread {
            let _ = h.join();
        }
    }
}

/// The heartbeat of `held`, started by `Heartbeat::tick` once due.
///
/// It extends the lock every TTL/3 (sooner after a failure) until told to
/// stop or the lock is gone. Never starts a round once the deadline has passed:
/// that could resurrect a lock someone else now holds.
///
/// Rounds are timed from `held.since`, when the acquire round started, not from
/// the command's start: the fence commit and the once-per marker that come
/// in between take time off the same validity. `Heartbeat::join` it before
/// touching the lock again (--hold), so no late extension undoes it.
pub fn heartbeat(
    lock: &Arc<Lock>,
    config: &Config,
    held: &Held,
    tx: Events,
    stop: Receiver<()>,
    log: Log,
    stats: Arc<Stats>,
) -> Heartbeat {
    let lock = Arc::clone(lock);
    let interval = redlock::heartbeat_interval(config.ttl);
    let retry = redlock::heartbeat_retry(config.ttl, config.node_timeout);
    let mut next = held.since + interval;
    let mut deadline = held.deadline;
    let due = next;
    let start = move || {
        let spawned = thread::Builder::new()
            .name("heartbeat".into())
            .spawn(move || {
                // A heartbeat that dies must not look like slow nodes: the
                // supervisor hears of it at once and stops the command.
                let _notice = PanicNotice(tx.clone());
                loop {
                    match stop.recv_timeout(next.saturating_duration_since(clock::now())) {
                        Err(RecvTimeoutError::Timeout) => {}
                        _ => return,
                    }
                    let start = clock::now();
                    if start >= deadline {
                        return;
                    }
                    match lock.extend(&log) {
                        Extended::Yes { deadline: d } if clock::now() < deadline => {
                            log.info(|| {
                                ev("extended", format!("extended in {:.1?}", start.elapsed()))
                                    .ms(start.elapsed())
                                    .outcome("extended")
                            });
                            deadline = d;
                            next = start + interval;
                            stats.extensions_done.fetch_add(1, Relaxed);
                            if !tx.send(Event::Extended(d)) {
                                return;
                            }
                        }
                        Extended::Yes { .. } => return,
                        Extended::Gone => {
                            tx.send(Event::Gone(
                                "a quorum of nodes no longer holds our token".into(),
                            ));
                            return;
                        }
                        Extended::Failed(why) => {
                            stats.extensions_failed.fetch_add(1, Relaxed);
                            log.info(|| {
                                ev("extend-failed", format!("heartbeat: {why}; retrying"))
                                    .outcome("error")
                            });
                            next = clock::now() + retry;
                        }
                    }
                }
            });
        match spawned {
            Ok(h) => Some(h),
            Err(e) => {
                // Without a heartbeat the supervisor still stops the command
                // before the first deadline: safe, only shorter.
                log.error(format!("cannot start the heartbeat: {e}"));
                None
            }
        }
    };
    Heartbeat {
        due,
        start: Some(Box::new(start)),
        thread: None,
    }
}

/// Sends `Gone` if the heartbeat thread unwinds.
struct PanicNotice(Events);

impl Drop for PanicNotice {
    fn drop(&mut self) {
        if thread::panicking() {
            let _ = self
                .0
                .send(Event::Gone("the heartbeat thread failed".into()));
        }
    }
}
