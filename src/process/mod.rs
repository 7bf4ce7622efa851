//! The command's side of a run: starting it through the guard, keeping its
//! whole process tree under watch, passing signals on, and stopping it in time.

pub(crate) mod attempts;
pub(crate) mod events;
pub(crate) mod guard;
pub(crate) mod heartbeat;
pub(crate) mod spawn;
pub(crate) mod supervise;
pub(crate) mod tree;

use std::time::Duration;

use crate::clock::Stamp;
use crate::log::{Entry, ev};
use crate::program::Program;

/// What the process side needs of a run's settings, as plain values: it
/// sits below the command line and the configuration file, which build it.
#[derive(Clone, Debug)]
pub(crate) struct Job {
    /// The lock's name, for messages.
    pub name: String,
    pub program: Program,
    pub ttl: Duration,
    pub node_timeout: Duration,
    /// Between SIGTERM and SIGKILL when the tree must stop.
    pub kill_after: Duration,
    pub max_runtime: Option<Duration>,
    /// Attempts after the first (--retry) and the base pause between them.
    pub retry: u32,
    pub retry_delay: Duration,
    /// Stop what the command leaves behind (--leftovers kill) instead of
    /// keeping the lock for it.
    pub kill_leftovers: bool,
}

/// When the tree's SIGKILL is due for want of an extension: a kill guard
/// (`redlock::kill_guard`) before the validity deadline. Test builds can
/// plant a later one (`REDLOCK_TEST_KILL_GUARD`), to show that the tests
/// see a kill that comes too late.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KillAt {
    pub before: Duration,
    /// Test builds only: how long after `deadline - before` it comes.
    pub after: Duration,
}

impl KillAt {
    /// The production schedule: `guard` before the deadline.
    pub fn guard(guard: Duration) -> KillAt {
        KillAt {
            before: guard,
            after: Duration::ZERO,
        }
    }

    /// When SIGKILL is due for a lock valid until `deadline`.
    pub fn due(&self, deadline: Stamp) -> Stamp {
        deadline.checked_sub(self.before).unwrap_or(deadline) + self.after
    }
}

/// The kill schedule for a lock of `ttl`: a kill guard before the deadline,
/// or, in test builds told so by `REDLOCK_TEST_KILL_GUARD` (milliseconds,
/// negative: after the deadline), the one planted there.
pub fn kill_schedule(ttl: Duration) -> KillAt {
    #[cfg(feature = "test-hooks")]
    if let Some(ms) = std::env::var("REDLOCK_TEST_KILL_GUARD")
        .ok()
        .and_then(|v| v.parse::<i64>().ok())
    {
        let d = Duration::from_millis(ms.unsigned_abs());
        return if ms >= 0 {
            KillAt::guard(d)
        } else {
            KillAt {
                before: Duration::ZERO,
                after: d,
            }
        };
    }
    KillAt::guard(crate::lock::redlock::kill_guard(ttl))
}

/// A signal sent to the command's tree, and when, against the lock's
/// validity deadline: where a stop was decided, the evidence that it came in
/// time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Signalled {
    /// Sent by the guard (its kill at the deadline), not by redlock-run.
    pub by_guard: bool,
    pub signal: i32,
    /// Processes of the tree it reached.
    pub processes: usize,
    /// How long before the validity deadline it had gone out to all of
    /// them, in nanoseconds (negative: after it).
    pub lead_ns: i64,
}

impl Signalled {
    /// `signal`, sent to `processes` by the time `at`, against `deadline`.
    pub fn new(by_guard: bool, signal: i32, processes: usize, deadline: Stamp, at: Stamp) -> Self {
        Signalled {
            by_guard,
            signal,
            processes,
            lead_ns: lead_ns(deadline, at),
        }
    }

    /// The -vv line: "sent SIGKILL to 3 processes, 49.8 ms before the
    /// validity deadline". `also`: a signal sent with it (SIGCONT after
    /// SIGTERM, so that a stopped process gets it).
    pub fn entry(&self, also: Option<i32>) -> Entry {
        let ms = self.lead_ns as f64 / 1e6;
        let when = if self.lead_ns > 0 { "before" } else { "after" };
        let also = also.map_or(String::new(), |s| {
            format!(" (then {})", crate::signals::name(s))
        });
        ev(
            "signal",
            format!(
                "{}sent {}{also} to {} process{}, {:.1} ms {when} the validity deadline",
                if self.by_guard { "the guard " } else { "" },
                crate::signals::name(self.signal),
                self.processes,
                if self.processes == 1 { "" } else { "es" },
                ms.abs()
            ),
        )
        .field("signal", crate::signals::name(self.signal))
        .field("processes", self.processes)
        .field("before_deadline_ms", (ms * 1000.0).round() / 1000.0)
        .field(
            "by",
            if self.by_guard {
                "guard"
            } else {
                "redlock-run"
            },
        )
    }
}

/// `deadline - at` in nanoseconds, negative when `at` is after it.
pub fn lead_ns(deadline: Stamp, at: Stamp) -> i64 {
    let ns = |d: Duration| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX);
    if at <= deadline {
        ns(deadline.saturating_duration_since(at))
    } else {
        -ns(at.saturating_duration_since(deadline))
    }
}

/// `raw` as a process id for rustix's calls: None for 0 and the negative
/// numbers, which name no single process (kill(2) reads them as groups or
/// "every process", which no caller here means).
fn pid(raw: libc::pid_t) -> Option<rustix::process::Pid> {
    if raw > 0 {
        rustix::process::Pid::from_raw(raw)
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ms: u64) -> Stamp {
        Stamp::from_nanos(1_000_000_000_000) + Duration::from_millis(ms)
    }

    #[test]
    fn a_signal_is_said_with_its_time_before_or_after_the_deadline() {
        let kill = Signalled::new(
            false,
            libc::SIGKILL,
            3,
            at(1_000),
            at(950) + Duration::from_micros(200),
        );
        assert_eq!(kill.lead_ns, 49_800_000);
        let text = |e: Entry| e.message().to_string();
        assert_eq!(
            text(kill.entry(None)),
            "sent SIGKILL to 3 processes, 49.8 ms before the validity deadline"
        );
        let term = Signalled::new(false, libc::SIGTERM, 1, at(1_000), at(1_001));
        assert_eq!(term.lead_ns, -1_000_000);
        assert_eq!(
            text(term.entry(Some(libc::SIGCONT))),
            "sent SIGTERM (then SIGCONT) to 1 process, 1.0 ms after the validity deadline"
        );
        let guard = Signalled {
            by_guard: true,
            ..kill
        };
        assert!(text(guard.entry(None)).starts_with("the guard sent SIGKILL to 3 processes"));
        assert!(
            text(Signalled::new(false, 10, 0, at(5), at(5)).entry(None))
                .starts_with("sent SIGUSR1 to 0 processes, 0.0 ms after"),
            "at the deadline is not before it"
        );
    }

    #[test]
    fn the_kill_is_due_a_guard_before_the_deadline_or_where_a_test_plants_it() {
        let guard = KillAt::guard(Duration::from_millis(50));
        assert_eq!(guard.due(at(1_000)), at(950));
        let late = KillAt {
            before: Duration::ZERO,
            after: Duration::from_millis(1),
        };
        assert_eq!(late.due(at(1_000)), at(1_001));
    }
}
