//! The command's side of a run: starting it through the guard, keeping its
//! whole process tree under watch, passing signals on, and stopping it in time.

pub mod attempts;
pub mod events;
pub mod guard;
pub mod heartbeat;
pub mod spawn;
pub mod supervise;
pub mod tree;

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
