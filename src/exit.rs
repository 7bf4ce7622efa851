//! Every exit status redlock-run can produce, defined once. `--help`, the man
//! page and the README all print `TABLE`, which a unit test keeps in step with
//! the enum.

/// Why redlock-run exited, and with which status.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exit {
    /// The command exited with this status.
    Command(u8),
    /// The command was killed by this signal: status 128 + N.
    Signal(i32),
    /// Bad flag, duration, URL, or no command (as sysexits' EX_USAGE).
    Usage,
    /// Fewer than a quorum of nodes answered (EX_UNAVAILABLE).
    Unavailable,
    /// The lock is held elsewhere (or the run was skipped): `-E`, default 75 (EX_TEMPFAIL).
    Busy(u8),
    /// The lock was lost while the command ran; the command was stopped.
    Lost,
    /// The command ran past `--max-runtime` and was stopped (as timeout(1)).
    Timeout,
    /// The command was found but could not be executed (as env(1)).
    CannotExecute,
    /// The command was not found (as env(1)).
    NotFound,
}

/// `unlock`: nothing removed, another token holds the lock.
pub(crate) const UNLOCK_OTHER_TOKEN: u8 = 1;
/// `unlock`: nothing removed, there is no such lock.
pub(crate) const UNLOCK_NO_LOCK: u8 = 3;

/// `forget`: nothing removed where the lock is in use (held, or waiters queued).
pub(crate) const FORGET_IN_USE: u8 = 1;
/// `forget`: no key of the lock on any node.
pub(crate) const FORGET_NOTHING: u8 = 3;

/// `status`, `unlock`, `history`, `forget`: the answer could not be written
/// to stdout (a full disk), as sysexits' EX_IOERR.
pub(crate) const ANSWER_UNWRITTEN: u8 = 74;

pub(crate) const USAGE: u8 = 64;
pub(crate) const UNAVAILABLE: u8 = 69;
pub(crate) const BUSY_DEFAULT: u8 = 75;
pub(crate) const LOST: u8 = 76;
pub(crate) const TIMEOUT: u8 = 124;
pub(crate) const CANNOT_EXECUTE: u8 = 126;
pub(crate) const NOT_FOUND: u8 = 127;

impl Exit {
    pub fn code(self) -> u8 {
        match self {
            Exit::Command(c) => c,
            // Signal numbers on Linux are below 128, so this never wraps.
            Exit::Signal(n) => 128u8.saturating_add(n.clamp(0, 127) as u8),
            Exit::Usage => USAGE,
            Exit::Unavailable => UNAVAILABLE,
            Exit::Busy(c) => c,
            Exit::Lost => LOST,
            Exit::Timeout => TIMEOUT,
            Exit::CannotExecute => CANNOT_EXECUTE,
            Exit::NotFound => NOT_FOUND,
        }
    }
}

/// The exit-status table shown by `--help`, the man page and the README.
pub const TABLE: &str = "\
Exit status:
  N      the command's own exit status
  128+N  the command was killed by signal N
  64     usage error: bad flag, duration or URL, configuration file, or no command
  69     Redis unavailable: fewer than a quorum of nodes answered
  75     lock busy: held elsewhere (change with -E/--busy-exit-code)
  76     lock lost while the command ran; the command was stopped
  124    the command ran past --max-runtime and was stopped
  126    the command was found but could not be executed
  127    the command was not found";

/// `unlock`'s exit statuses, for its help and the man page.
pub const UNLOCK_TABLE: &str = "\
Exit status:
  0      the lock was removed (on every node that answered and had it)
  1      nothing removed: the lock holds another token (--token)
  3      nothing removed: there is no such lock
  64     usage error
  69     fewer than a quorum of nodes answered; the lock may still be held
  74     the answer could not be written to stdout";

/// `forget`'s exit statuses.
pub const FORGET_TABLE: &str = "\
Exit status:
  0      keys of the lock were removed (on every node that answered and had some)
  1      the lock is in use (held, or waiters queued) and was left alone; --force removes it
  3      nothing to remove: no key of the lock on any node
  64     usage error
  69     fewer than a quorum of nodes answered; keys of the lock may remain
  74     the answer could not be written to stdout";

/// `history`'s exit statuses.
pub const HISTORY_TABLE: &str = "\
Exit status:
  0      the runs were read from at least a quorum of nodes
  64     usage error
  69     fewer than a quorum of nodes answered; runs may be missing
  74     the answer could not be written to stdout";

/// `check`: every node answered, and some finding is a warning.
pub(crate) const CHECK_WARNINGS: u8 = 1;

/// `check`'s exit statuses.
pub const CHECK_TABLE: &str = "\
Exit status:
  0      every node is fit
  1      warnings only: something a node should change, or could not be told
  64     usage error, or settings every run would refuse (a file it cannot write, an option file)
  69     a node is unfit (unreachable, a replica, one server twice, the ACL refuses the probe)
  74     the answer could not be written to stdout";

/// `config`'s exit statuses.
pub const CONFIG_TABLE: &str = "\
Exit status:
  0      the settings were printed
  64     usage error: a flag, the configuration file, a value in it, or a file a run writes
  74     the answer could not be written to stdout";

/// `status`'s exit statuses.
pub const STATUS_TABLE: &str = "\
Exit status:
  0      free (with --limit: a slot is free)
  1      held (with --limit: every slot is held)
  64     usage error
  69     unknown: fewer than a quorum of nodes answered
  74     the answer could not be written to stdout";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_lists_every_fixed_code() {
        for e in [
            Exit::Usage,
            Exit::Unavailable,
            Exit::Busy(BUSY_DEFAULT),
            Exit::Lost,
            Exit::Timeout,
            Exit::CannotExecute,
            Exit::NotFound,
        ] {
            let line = format!("\n  {:<7}", e.code());
            assert!(TABLE.contains(&line), "{e:?} ({}) missing", e.code());
        }
    }

    #[test]
    fn signals_map_to_128_plus_n() {
        assert_eq!(Exit::Signal(libc::SIGTERM).code(), 143);
        assert_eq!(Exit::Signal(libc::SIGINT).code(), 130);
        assert_eq!(Exit::Signal(libc::SIGKILL).code(), 137);
    }
}
