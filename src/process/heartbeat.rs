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
use std::time::Duration;

use crate::clock::{self, Stamp};
use crate::lock::redlock;
use crate::lock::{Extended, Held, Lock};
use crate::log::{Log, ev};
use crate::process::Job;
use crate::process::events::{Event, Events};
use crate::report::Stats;

/// The heartbeat of one held lock: not yet started, or its thread.
pub(crate) struct Heartbeat {
    /// When the thread must run: the first extension is due.
    due: Stamp,
    start: Option<Box<dyn FnOnce() -> Option<JoinHandle<()>>>>,
    thread: Option<JoinHandle<()>>,
}

impl Heartbeat {
    /// When the thread is to be started, or `None` once it was.
    pub(crate) fn due(&self) -> Option<Stamp> {
        self.start.as_ref().map(|_| self.due)
    }

    /// Starts the thread if its first extension is due. Call it from every
    /// loop that waits while the lock is held, waking by `due` at the latest.
    pub(crate) fn tick(&mut self) {
        self.tick_at(clock::now());
    }

    fn tick_at(&mut self, now: Stamp) {
        if now >= self.due
            && let Some(start) = self.start.take()
        {
            self.thread = start();
        }
    }

    /// Waits for the round in flight, if any (a round limit): no late
    /// extension may undo what comes after. Drop the stop sender first.
    pub(crate) fn join(self) {
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
pub(crate) fn heartbeat(
    lock: &Arc<Lock>,
    config: &Job,
    held: &Held,
    tx: Events,
    stop: Receiver<()>,
    log: Log,
    stats: Arc<Stats>,
) -> Heartbeat {
    let lock = Arc::clone(lock);
    let schedule = Schedule::new(
        held.since,
        held.deadline,
        redlock::heartbeat_interval(config.ttl),
        redlock::heartbeat_retry(config.ttl, config.node_timeout),
    );
    let due = schedule.next;
    let start = move || {
        let spawned = thread::Builder::new()
            .name("heartbeat".into())
            .spawn(move || beat(&lock, schedule, &tx, &stop, &log, &stats));
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

/// The heartbeat thread: a round whenever the schedule says, until told to
/// stop (or the stop sender is gone) or the lock is.
fn beat(
    lock: &Lock,
    mut schedule: Schedule,
    tx: &Events,
    stop: &Receiver<()>,
    log: &Log,
    stats: &Stats,
) {
    // A heartbeat that dies must not look like slow nodes: the supervisor
    // hears of it at once and stops the command.
    let _notice = PanicNotice(tx.clone());
    loop {
        match stop.recv_timeout(schedule.next.saturating_duration_since(clock::now())) {
            Err(RecvTimeoutError::Timeout) => {}
            _ => return,
        }
        let start = clock::now();
        if !schedule.may_start(start) {
            return;
        }
        match lock.extend(log) {
            Extended::Yes { deadline } => {
                if !schedule.extended(start, clock::now(), deadline) {
                    return;
                }
                log.info(|| {
                    ev("extended", format!("extended in {:.1?}", start.elapsed()))
                        .ms(start.elapsed())
                        .outcome("extended")
                });
                stats.extensions_done.fetch_add(1, Relaxed);
                if !tx.send(Event::Extended(deadline)) {
                    return;
                }
            }
            Extended::Gone => {
                tx.send(Event::Gone(
                    "a quorum of nodes no longer holds our token".into(),
                ));
                return;
            }
            Extended::Failed(why) => {
                stats.extensions_failed.fetch_add(1, Relaxed);
                log.info(|| {
                    ev("extend-failed", format!("heartbeat: {why}; retrying")).outcome("error")
                });
                schedule.failed(clock::now());
            }
        }
    }
}

/// When the heartbeat's rounds are due: the schedule alone, apart from the
/// lock and the thread, so that it is tested without either.
#[derive(Debug)]
struct Schedule {
    /// From one round's start to the next's (TTL/3).
    interval: Duration,
    /// From a failed round to the next (sooner).
    retry: Duration,
    /// When the next round starts.
    next: Stamp,
    /// The validity deadline as the last extension left it.
    deadline: Stamp,
}

impl Schedule {
    /// Rounds timed from `since`, when the acquire round started.
    fn new(since: Stamp, deadline: Stamp, interval: Duration, retry: Duration) -> Schedule {
        Schedule {
            interval,
            retry,
            next: since + interval,
            deadline,
        }
    }

    /// Whether a round may start at `now`: never once the deadline has
    /// passed, which could resurrect a lock someone else now holds.
    fn may_start(&self, now: Stamp) -> bool {
        now < self.deadline
    }

    /// A round begun at `start` extended the lock to `deadline`, as learnt
    /// at `now`. Kept, and the next round an interval after `start`, unless
    /// it came back after the old deadline: then nobody may count on it,
    /// and the heartbeat ends (false).
    fn extended(&mut self, start: Stamp, now: Stamp, deadline: Stamp) -> bool {
        if now >= self.deadline {
            return false;
        }
        self.deadline = deadline;
        self.next = start + self.interval;
        true
    }

    /// A round failed at `now`: the next one comes sooner, while the old
    /// deadline allows.
    fn failed(&mut self, now: Stamp) {
        self.next = now + self.retry;
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;
    use std::rc::Rc;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    /// A moment `n` ms after an arbitrary origin.
    fn at(n: u64) -> Stamp {
        Stamp::from_nanos(1_000_000_000_000) + ms(n)
    }

    /// Held since 0 until 30 s: rounds every 10 s, 2 s after a failure.
    fn schedule() -> Schedule {
        Schedule::new(at(0), at(30_000), ms(10_000), ms(2_000))
    }

    #[test]
    fn rounds_are_timed_from_the_acquire_and_from_each_rounds_start() {
        let mut s = schedule();
        assert_eq!(s.next, at(10_000), "from the acquire, not the command");
        assert!(s.extended(at(10_000), at(10_300), at(40_300)));
        assert_eq!((s.next, s.deadline), (at(20_000), at(40_300)));
        s.failed(at(20_500));
        assert_eq!(s.next, at(22_500), "sooner after a failure");
        assert!(s.extended(at(22_500), at(22_600), at(52_500)));
        assert_eq!(s.next, at(32_500));
    }

    #[test]
    fn no_round_starts_once_the_deadline_passed_nor_counts_if_it_ends_after() {
        let mut s = schedule();
        assert!(s.may_start(at(29_999)));
        assert!(!s.may_start(at(30_000)));
        assert!(
            !s.extended(at(29_000), at(30_000), at(59_000)),
            "came back too late: the lock may be someone else's"
        );
        assert_eq!(s.deadline, at(30_000), "not taken");
    }

    #[test]
    fn the_thread_starts_once_when_the_first_extension_is_due() {
        let starts = Rc::new(Cell::new(0));
        let counted = Rc::clone(&starts);
        let mut h = Heartbeat {
            due: at(10_000),
            start: Some(Box::new(move || {
                counted.set(counted.get() + 1);
                None
            })),
            thread: None,
        };
        assert_eq!(h.due(), Some(at(10_000)));
        h.tick_at(at(9_999));
        assert_eq!(starts.get(), 0, "not yet: a short command needs none");
        h.tick_at(at(10_000));
        h.tick_at(at(20_000));
        assert_eq!(starts.get(), 1);
        assert_eq!(h.due(), None, "nothing more to wake for");
        h.join();
    }
}
