//! How a run ended, in the one set of words every output uses: `--report`'s
//! `outcome`, the history records (`history`, `status`'s last run), the
//! `outcome` label of `redlock_run_runs_total` in `--metrics-file`, and the
//! `exit` line of `--log-format json`. A monitor that matches on one of them
//! matches on all of them: a job whose command exited 3 is `failed`
//! everywhere, never `ran` in one place and `failed` in another.

use crate::exit::Exit;

/// How one run of redlock-run ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Outcome {
    /// The command exited 0.
    Ok,
    /// The command exited non-zero.
    Failed,
    /// The command was killed by a signal, or a signal ended the run.
    Signal,
    /// The command was not found or could not be executed (127, 126).
    NotRun,
    /// The lock was held elsewhere.
    Busy,
    /// `--once-per`, `--once-per-success`: the window's run had already happened.
    AlreadyRan,
    /// Fewer than a quorum of nodes answered.
    Unavailable,
    /// The lock was lost while the command ran; the command was stopped.
    Lost,
    /// The command ran past `--max-runtime` and was stopped.
    Timeout,
    /// A usage error: nothing was attempted.
    Usage,
}

impl Outcome {
    pub(crate) const ALL: [Outcome; 10] = [
        Outcome::Ok,
        Outcome::Failed,
        Outcome::Signal,
        Outcome::NotRun,
        Outcome::Busy,
        Outcome::AlreadyRan,
        Outcome::Unavailable,
        Outcome::Lost,
        Outcome::Timeout,
        Outcome::Usage,
    ];

    /// The outcome of a run that exited with `exit`; `already_ran` tells a
    /// `--once-per` skip from a busy lock, which share an exit status.
    pub(crate) fn of(exit: Exit, already_ran: bool) -> Outcome {
        match exit {
            Exit::Command(0) => Outcome::Ok,
            Exit::Command(_) => Outcome::Failed,
            Exit::Signal(_) => Outcome::Signal,
            Exit::CannotExecute | Exit::NotFound => Outcome::NotRun,
            Exit::Busy(_) if already_ran => Outcome::AlreadyRan,
            Exit::Busy(_) => Outcome::Busy,
            Exit::Unavailable => Outcome::Unavailable,
            Exit::Lost => Outcome::Lost,
            Exit::Timeout => Outcome::Timeout,
            Exit::Usage => Outcome::Usage,
        }
    }

    /// The word, as every output writes it.
    pub(crate) fn word(self) -> &'static str {
        match self {
            Outcome::Ok => "ok",
            Outcome::Failed => "failed",
            Outcome::Signal => "signal",
            Outcome::NotRun => "not-run",
            Outcome::Busy => "busy",
            Outcome::AlreadyRan => "already-ran",
            Outcome::Unavailable => "unavailable",
            Outcome::Lost => "lost",
            Outcome::Timeout => "timeout",
            Outcome::Usage => "usage",
        }
    }

    /// Whether the lock was taken for the command and its status is the
    /// run's (the command started, or was tried: 126 and 127 are its status
    /// too). A run killed by a signal counts, as it did when all of these
    /// were one outcome.
    pub(crate) fn started_command(self) -> bool {
        matches!(
            self,
            Outcome::Ok
                | Outcome::Failed
                | Outcome::Signal
                | Outcome::NotRun
                | Outcome::Lost
                | Outcome::Timeout
        )
    }
}

impl std::fmt::Display for Outcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.word())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_exit_has_its_word() {
        let of = |e, already| Outcome::of(e, already).word();
        assert_eq!(of(Exit::Command(0), false), "ok");
        assert_eq!(of(Exit::Command(3), false), "failed");
        assert_eq!(of(Exit::Signal(15), false), "signal");
        assert_eq!(of(Exit::NotFound, false), "not-run");
        assert_eq!(of(Exit::CannotExecute, false), "not-run");
        assert_eq!(of(Exit::Busy(0), false), "busy");
        assert_eq!(of(Exit::Busy(75), true), "already-ran");
        assert_eq!(of(Exit::Unavailable, false), "unavailable");
        assert_eq!(of(Exit::Lost, false), "lost");
        assert_eq!(of(Exit::Timeout, false), "timeout");
        assert_eq!(of(Exit::Usage, false), "usage");
        let mut words: Vec<&str> = Outcome::ALL.iter().map(|o| o.word()).collect();
        words.sort_unstable();
        words.dedup();
        assert_eq!(words.len(), Outcome::ALL.len(), "one word per outcome");
    }
}
