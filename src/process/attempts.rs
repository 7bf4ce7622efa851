//! The command's attempts: the first one, and with `--retry N` up to N more
//! after one that exited non-zero. Each attempt is a fresh process tree,
//! started by the same guard under the same lock, while the heartbeat that
//! was started before the first one goes on extending the lock through the
//! attempts and the pauses between them.
//!
//! An attempt starts only once the previous one's whole tree is gone (the
//! supervisor returns only then, and the guard has reaped it all), so
//! containment, `--leftovers` and `--max-runtime` hold per attempt as they do
//! for a single run. What is not retried: an attempt stopped because the lock
//! was lost or at `--max-runtime`, one that ended by a signal (passed on by
//! redlock-run or sent to the command itself: somebody wants it stopped), and
//! a command that cannot be started at all.

use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::mpsc::RecvTimeoutError;
use std::time::{Duration, SystemTime};

use crate::clock::{self, Stamp};
use crate::exit::Exit;
use crate::lock::redlock;
use crate::log::{Log, ev};
use crate::process::events::{Event, Events, Inbox};
use crate::process::guard::{Guard, SpawnError};
use crate::process::heartbeat::Heartbeat;
use crate::process::spawn as child;
use crate::process::supervise::{Started, Supervised, Tree, supervise};
use crate::process::tree;
use crate::process::{Job, Signalled};
use crate::report::Stats;
use crate::text::os_message;

/// The longest pause between attempts: the longest `--retry-delay` the
/// command line takes, which the doubling never passes either.
const MAX_PAUSE: Duration = Duration::from_secs(24 * 3600);

/// What the attempts need besides the lock's deadline.
pub(crate) struct Attempts<'a> {
    pub guard: &'a mut Guard,
    pub config: &'a Job,
    /// Added to the command's environment.
    pub env: Vec<(&'static str, String)>,
    pub contain: bool,
    pub terminal: bool,
    pub tx: &'a Events,
    pub rx: &'a Inbox,
    pub log: Log,
    pub stats: &'a Arc<Stats>,
    /// Called once, just after the first attempt's command started (the
    /// start ping's thread): never before it, and nothing waits for it.
    pub on_start: &'a dyn Fn(),
}

/// What the attempts came to.
pub(crate) struct Ran {
    pub exit: Exit,
    /// Attempts whose command started; 0 when the first could not start.
    pub attempts: u32,
    /// When the first attempt started (wall clock): the run's start in its
    /// history record.
    pub started_at: SystemTime,
    /// From the first attempt's start until the last one's tree was gone.
    pub duration: Duration,
    /// Processes of the command may still be alive: the lock must not be
    /// released.
    pub leftover: bool,
    /// Every signal sent to the command's trees, attempt after attempt.
    pub signals: Vec<Signalled>,
}

/// Runs the command, and again after a failure while --retry allows.
pub(crate) fn run_with_retries(
    a: &mut Attempts,
    deadline: Stamp,
    heartbeat: &mut Heartbeat,
) -> Ran {
    let first = clock::now();
    let started_at = SystemTime::now();
    let mut deadline = deadline;
    let mut attempts = 0u32;
    let mut leftover = false;
    let mut signals = Vec::new();
    let exit = loop {
        let started = Started::now();
        let pid = match start(a, deadline) {
            Ok(pid) => pid,
            Err(not) => {
                leftover = not.leftover;
                signals.extend(not.signals);
                break not.exit;
            }
        };
        attempts += 1;
        a.stats.attempts.store(attempts, Relaxed);
        log_started(a, attempts, pid);
        if attempts == 1 {
            (a.on_start)();
        }
        let end = match watch(a, pid, started, deadline, heartbeat) {
            Ok(end) => end,
            Err(not) => {
                leftover = not.leftover;
                signals.extend(not.signals);
                break not.exit;
            }
        };
        deadline = end.deadline;
        signals.extend_from_slice(&end.signals);
        if end.leftover {
            leftover = true;
            break end.exit;
        }
        if !retry_after(&end, attempts, a.config.retry) {
            break end.exit;
        }
        if let Some(exit) = pause(a, attempts, end.exit, &mut deadline, heartbeat) {
            break exit;
        }
    };
    Ran {
        exit,
        attempts,
        started_at,
        duration: first.elapsed(),
        leftover,
        signals,
    }
}

/// An attempt that did not run, or could not be watched, and ends the run.
struct Unwatched {
    exit: Exit,
    /// Processes of it may still be alive.
    leftover: bool,
    /// The SIGKILL that stopped what had started of it, if anything had.
    signals: Vec<Signalled>,
}

impl Unwatched {
    /// Nothing started, or nothing to say of it.
    fn ended(exit: Exit) -> Unwatched {
        Unwatched {
            exit,
            leftover: false,
            signals: Vec::new(),
        }
    }

    /// What `killed` stopped, sent by now, against `deadline`: noted, and
    /// said at -vv.
    fn killed(exit: Exit, killed: &tree::Killed, deadline: Stamp, log: &Log) -> Unwatched {
        let sent = (killed.delivered > 0).then(|| {
            let sent = Signalled::new(
                false,
                libc::SIGKILL,
                killed.delivered,
                deadline,
                clock::now(),
            );
            log.debug(|| sent.entry(None));
            sent
        });
        Unwatched {
            exit,
            leftover: !killed.empty,
            signals: sent.into_iter().collect(),
        }
    }
}

/// Has the guard start the command; its pid.
fn start(a: &mut Attempts, deadline: Stamp) -> Result<libc::pid_t, Unwatched> {
    let env: Vec<(&str, &str)> = a.env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    match a.guard.spawn(&env, deadline) {
        Ok(pid) => Ok(pid),
        Err(SpawnError::Command(e)) => {
            a.log.error(format!(
                "cannot run {}: {}",
                a.config.program.describe(),
                os_message(&e)
            ));
            Err(Unwatched::ended(child::exit_of_spawn_error(&e)))
        }
        Err(SpawnError::TooLate) => {
            a.log.error(format!(
                "lock '{}' lost: its validity ran out before {} could start (redlock-run or its \
                 guard stood still); nothing was started",
                a.config.name,
                a.config.program.describe()
            ));
            Err(Unwatched::ended(Exit::Lost))
        }
        Err(SpawnError::Gone(why)) => {
            // It may have started the command before it died: whatever it
            // started is ours now (redlock-run is a subreaper), and is
            // killed before anything else happens.
            let me = std::process::id() as libc::pid_t;
            let killed = tree::kill_all(me, true, Some(Duration::from_secs(5)));
            a.log.error(format!(
                "cannot run {}: {why}; {}",
                a.config.program.describe(),
                if killed.empty {
                    "nothing of it is left"
                } else {
                    "some of its processes would not die: the lock is left to expire"
                }
            ));
            Err(Unwatched::killed(
                Exit::Unavailable,
                &killed,
                deadline,
                &a.log,
            ))
        }
    }
}

fn log_started(a: &Attempts, attempts: u32, pid: libc::pid_t) {
    let config = a.config;
    a.log.info(|| {
        let of = if config.retry > 0 {
            format!("attempt {attempts} of {}: ", config.retry + 1)
        } else {
            String::new()
        };
        ev(
            "started",
            format!("{of}running {} as pid {pid}", config.program.describe()),
        )
        .field("pid", pid)
        .field("attempt", attempts)
        .outcome("started")
    });
}

/// Supervises the attempt started as `pid` until its whole tree is gone.
fn watch(
    a: &mut Attempts,
    pid: libc::pid_t,
    started: Started,
    deadline: Stamp,
    heartbeat: &mut Heartbeat,
) -> Result<Supervised, Unwatched> {
    let reports = match a.guard.reports() {
        Ok(r) => r,
        Err(e) => {
            // Nobody would notice the command's exit: stop it rather than
            // hold the lock blindly.
            let killed = tree::kill_all(a.guard.pid(), false, Some(Duration::from_secs(5)));
            a.log.error(format!("cannot watch the command: {e}"));
            return Err(Unwatched::killed(
                Exit::Unavailable,
                &killed,
                deadline,
                &a.log,
            ));
        }
    };
    let mut tree = Tree {
        guard: a.guard.pid(),
        command: pid,
        contain: a.contain,
        terminal: a.terminal,
        control: a.guard.control(),
        reports: Some(reports),
        told: Default::default(),
    };
    Ok(supervise(
        &mut tree, a.config, started, deadline, a.rx, heartbeat, &a.log,
    ))
}

/// Whether attempt number `attempts`, which ended as `end`, is followed by
/// another: only a command that exited non-zero on its own, while --retry
/// (`retry` more attempts) allows.
fn retry_after(end: &Supervised, attempts: u32, retry: u32) -> bool {
    let failed = matches!(end.exit, Exit::Command(c) if c != 0) && end.signalled.is_none();
    failed && attempts <= retry
}

/// The pause before the next attempt, said and waited out; the run's exit
/// when it ends the run instead (a signal, the lock lost).
fn pause(
    a: &Attempts,
    attempts: u32,
    last: Exit,
    deadline: &mut Stamp,
    heartbeat: &mut Heartbeat,
) -> Option<Exit> {
    let config = a.config;
    let pause = pause_before(config.retry_delay, attempts, rand::random_range(0.0..1.0));
    a.log.info(|| {
        ev(
            "retry",
            format!(
                "attempt {attempts} of {} exited with status {}; retrying in {pause:.0?}",
                config.retry + 1,
                last.code()
            ),
        )
        .ms(pause)
        .field("attempt", attempts)
        .field("exit_code", last.code())
        .outcome("retry")
    });
    match wait_out(pause, deadline, config, a.rx, heartbeat) {
        Ok(()) => None,
        Err(Interrupted::Signal(sig)) => {
            a.log
                .info(|| format!("signal {sig} while waiting to retry; not retrying"));
            Some(Exit::Signal(sig))
        }
        Err(Interrupted::Lost(why)) => {
            a.log.error(
                ev(
                    "lost",
                    format!(
                        "lock '{}' lost while waiting to retry: {why}; not retrying (exit {}, \
                         the last attempt's status)",
                        config.name,
                        last.code()
                    ),
                )
                .outcome("lost"),
            );
            Some(last)
        }
    }
}

/// Why a pause between attempts ended early.
#[derive(Debug, PartialEq, Eq)]
enum Interrupted {
    /// redlock-run got this signal: the run ends with it (128+N).
    Signal(i32),
    /// The lock is gone, or no heartbeat kept it long enough that another
    /// attempt could still be stopped in time.
    Lost(String),
}

/// Sleeps `pause` while the heartbeat goes on, following its deadlines. The
/// lock must still be good for a stop (`--kill-after` and the kill guard)
/// when the pause ends, as it must before the first attempt: the moment
/// that could no longer be so ends the pause, as it would stop a command.
fn wait_out(
    pause: Duration,
    deadline: &mut Stamp,
    config: &Job,
    rx: &Inbox,
    heartbeat: &mut Heartbeat,
) -> Result<(), Interrupted> {
    let until = clock::now() + pause;
    let stop_window = redlock::kill_guard(config.ttl) + config.kill_after;
    loop {
        heartbeat.tick();
        let now = clock::now();
        let give_up = deadline.checked_sub(stop_window).unwrap_or(now);
        if now >= give_up {
            return Err(Interrupted::Lost("no extension succeeded in time".into()));
        }
        if now >= until {
            return Ok(());
        }
        // Short slices, as in the supervisor: the channel waits on
        // CLOCK_MONOTONIC, which stands still while the host is suspended.
        let wait = until
            .min(give_up)
            .min(heartbeat.due().unwrap_or(until))
            .saturating_duration_since(now)
            .min(Duration::from_millis(100));
        match rx.recv_timeout(wait) {
            Ok(Event::Signal(sig)) => return Err(Interrupted::Signal(sig)),
            Ok(Event::Extended(d)) => *deadline = d,
            Ok(Event::Gone(why)) => return Err(Interrupted::Lost(why)),
            Ok(_) | Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => {
                return Err(Interrupted::Lost("the heartbeat went away".into()));
            }
        }
    }
}

/// The pause before retry number `retry` (from 1): `base` doubled for each
/// retry after the first, and of that a random part between half and all
/// (`unit` in [0, 1)), so that jobs failing on a shared dependency spread
/// out. Never longer than a day.
pub(crate) fn pause_before(base: Duration, retry: u32, unit: f64) -> Duration {
    let full = base
        .checked_mul(
            1u32.checked_shl(retry.saturating_sub(1))
                .unwrap_or(u32::MAX),
        )
        .unwrap_or(MAX_PAUSE)
        .min(MAX_PAUSE);
    full / 2 + (full / 2).mul_f64(unit.clamp(0.0, 1.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ended(exit: Exit, signalled: Option<i32>) -> Supervised {
        Supervised {
            exit,
            deadline: clock::now(),
            signalled,
            leftover: false,
            signals: Vec::new(),
        }
    }

    #[test]
    fn only_a_command_that_failed_on_its_own_is_tried_again_while_retry_allows() {
        let failed = ended(Exit::Command(1), None);
        assert!(retry_after(&failed, 1, 2));
        assert!(retry_after(&failed, 2, 2));
        assert!(!retry_after(&failed, 3, 2), "--retry 2: three attempts");
        assert!(!retry_after(&failed, 1, 0), "no --retry");
        assert!(
            !retry_after(&ended(Exit::Command(0), None), 1, 2),
            "success"
        );
        let passed_on = ended(Exit::Command(1), Some(libc::SIGTERM));
        assert!(!retry_after(&passed_on, 1, 2), "somebody wants it stopped");
        for exit in [
            Exit::Signal(libc::SIGKILL),
            Exit::Lost,
            Exit::Timeout,
            Exit::NotFound,
        ] {
            assert!(!retry_after(&ended(exit, None), 1, 2), "{exit:?}");
        }
    }

    #[test]
    fn pauses_double_with_jitter_within_bounds() {
        let s = Duration::from_secs;
        assert_eq!(pause_before(s(1), 1, 0.0), Duration::from_millis(500));
        assert_eq!(pause_before(s(1), 1, 0.5), Duration::from_millis(750));
        assert_eq!(pause_before(s(1), 2, 0.0), s(1));
        assert_eq!(pause_before(s(1), 3, 0.5), s(3));
        assert_eq!(pause_before(s(10), 4, 1.0), s(80));
        for retry in 1..=100 {
            for unit in [0.0, 0.3, 0.99] {
                let p = pause_before(s(1), retry, unit);
                assert!(p <= MAX_PAUSE, "{retry}: {p:?}");
                assert!(p >= MAX_PAUSE.min(s(1) * (1 << (retry - 1).min(20))) / 2);
            }
        }
        assert_eq!(pause_before(s(3600), 100, 1.0), MAX_PAUSE);
        assert_eq!(pause_before(s(1), 0, 0.0), Duration::from_millis(500));
    }
}
