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
