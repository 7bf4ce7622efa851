//! The heartbeat: a thread that extends the lock every TTL/3 while the
//! command's tree runs, and tells the supervisor each new deadline.

use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender};
use std::thread::{self, JoinHandle};

use crate::cli::Config;
use crate::clock;
use crate::lock::redlock;
use crate::lock::{Extended, Held, Lock};
use crate::log::{Log, ev};
use crate::process::supervise::Event;
use crate::report::Stats;

/// Extends the lock every TTL/3 (sooner after a failure) until told to stop
/// or the lock is gone. Never starts a round once the deadline has passed:
/// that could resurrect a lock someone else now holds.
///
/// Rounds are timed from `held.since`, when the acquire round started, not from
/// the command's start: the fence commit and the once-per marker that come
/// in between take time off the same validity. Join the handle before
/// touching the lock again (--hold), so no late extension undoes it.
pub fn start_heartbeat(
    lock: &Arc<Lock>,
    config: &Config,
    held: &Held,
    tx: Sender<Event>,
    stop: Receiver<()>,
    log: Log,
    stats: Arc<Stats>,
) -> Option<JoinHandle<()>> {
    let lock = Arc::clone(lock);
    let interval = redlock::heartbeat_interval(config.ttl);
    let retry = redlock::heartbeat_retry(config.ttl, config.node_timeout);
    let mut next = held.since + interval;
    let mut deadline = held.deadline;
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
