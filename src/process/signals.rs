//! Which signal arrived, so the command gets that same signal.

use std::io;
use std::sync::mpsc::Sender;
use std::thread;

use signal_hook::iterator::Signals;

/// Signals passed on to the command's process group.
pub const FORWARDED: [i32; 6] = [
    libc::SIGINT,
    libc::SIGTERM,
    libc::SIGHUP,
    libc::SIGQUIT,
    libc::SIGUSR1,
    libc::SIGUSR2,
];

/// Starts a thread that sends every forwarded signal to `tx` as `wrap(sig)`.
///
/// A signal that was ignored when redlock-run started (nohup, a background job
/// of a non-interactive shell) is left ignored: the command inherits the
/// ignore across exec, as it would without redlock-run in between.
pub fn listen<E, W>(tx: Sender<E>, wrap: W) -> io::Result<()>
where
    E: Send + 'static,
    W: Fn(i32) -> E + Send + 'static,
{
    let wanted: Vec<i32> = FORWARDED.into_iter().filter(|s| !is_ignored(*s)).collect();
    let mut signals = Signals::new(&wanted)?;
    thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            for sig in signals.forever() {
                if tx.send(wrap(sig)).is_err() {
                    break;
                }
            }
        })?;
    Ok(())
}

fn is_ignored(sig: i32) -> bool {
    // SAFETY: querying a disposition with a null new action changes nothing.
    unsafe {
        let mut old: libc::sigaction = std::mem::zeroed();
        libc::sigaction(sig, std::ptr::null(), &mut old) == 0 && old.sa_sigaction == libc::SIG_IGN
    }
}
