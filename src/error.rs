//! What stops a run or a subcommand short of its work: one type for the
//! crate, which carries the exit status and is said in one place (`end`,
//! through `log`). Each layer keeps the type its own callers branch on (a
//! node's `NodeError`, the command line's `Unusable`, the configuration
//! file's `config::Error`); where it ends the process, it becomes this.

use std::fmt;

use crate::exit::Exit;
use crate::log::{self, Format, Log, ev};

/// The status to exit with, and the line that says why (none where the
/// status says it all: a signal that stopped a wait).
#[derive(Debug)]
pub(crate) struct Error {
    exit: Exit,
    msg: Option<String>,
}

impl Error {
    pub(crate) fn new(exit: Exit, msg: impl fmt::Display) -> Error {
        Error {
            exit,
            msg: Some(msg.to_string()),
        }
    }

    /// A usage error (64): a bad flag, value, file or URL.
    pub(crate) fn usage(msg: impl fmt::Display) -> Error {
        Error::new(Exit::Usage, msg)
    }

    /// Fewer than a quorum answered (69).
    pub(crate) fn unavailable(msg: impl fmt::Display) -> Error {
        Error::new(Exit::Unavailable, msg)
    }

    /// Told to stop by signal `sig` while nothing was held.
    pub(crate) fn signal(sig: i32) -> Error {
        Error {
            exit: Exit::Signal(sig),
            msg: None,
        }
    }

    /// Says it on stderr, in `format` (a run's --log-format: as JSON, with
    /// the event and outcome the status names), and gives the status.
    pub(crate) fn end(self, format: Format) -> Exit {
        if let Some(msg) = self.msg {
            let word = match self.exit {
                Exit::Usage => "usage",
                Exit::Unavailable => "unavailable",
                _ => "error",
            };
            Log::new(0, format, "").error(ev(word, msg).outcome(word));
        }
        self.exit
    }

    /// `end`, for a subcommand (always text).
    pub(crate) fn said(self) -> Exit {
        if let Some(msg) = &self.msg {
            log::say(msg);
        }
        self.exit
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.msg.as_deref().unwrap_or(""))
    }
}
