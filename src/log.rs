//! Messages on stderr, one line each, prefixed with the program's name.

use std::io::Write;

#[derive(Clone, Copy, Debug)]
pub struct Log {
    verbosity: i8,
}

impl Log {
    pub fn new(verbosity: i8) -> Self {
        Log { verbosity }
    }

    /// Failures: always shown.
    pub fn error(&self, msg: impl AsRef<str>) {
        line(msg.as_ref());
    }

    /// Outcomes a cron job may want silenced (busy): hidden by -q.
    pub fn notice(&self, msg: impl AsRef<str>) {
        if self.verbosity >= 0 {
            line(msg.as_ref());
        }
    }

    /// -v: each decision.
    pub fn info(&self, msg: impl FnOnce() -> String) {
        if self.verbosity >= 1 {
            line(&msg());
        }
    }

    /// -vv: every node, every heartbeat.
    pub fn debug(&self, msg: impl FnOnce() -> String) {
        if self.verbosity >= 2 {
            line(&msg());
        }
    }
}

fn line(msg: &str) {
    // One write per line so lines from threads never interleave; a closed
    // stderr is no reason to fail the run.
    let _ = std::io::stderr()
        .lock()
        .write_all(format!("redlock-run: {msg}\n").as_bytes());
}
