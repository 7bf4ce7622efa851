//! Which signal arrived, so the command gets that same signal.
//!
//! The forwarded signals are blocked in every thread and read from a
//! signalfd(2) by the loops that wait (see `events`). No handler ever runs,
//! so no blocking call anywhere (a socket read with a timeout, which the
//! kernel never restarts) fails with EINTR because a signal arrived: a storm
//! of signals cannot cost a node's answer or a heartbeat.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};

/// Signals passed on to the command's process tree.
pub const FORWARDED: [i32; 6] = [
    libc::SIGINT,
    libc::SIGTERM,
    libc::SIGHUP,
    libc::SIGQUIT,
    libc::SIGUSR1,
    libc::SIGUSR2,
];

/// The forwarded signals this process takes, blocked in the calling thread,
/// and the mask as it was before.
pub struct Blocked {
    set: libc::sigset_t,
    original: libc::sigset_t,
}

impl Blocked {
    /// The signal mask redlock-run was started with: the command's.
    pub fn original(&self) -> libc::sigset_t {
        self.original
    }

    /// Back to the original mask (for subcommands that hold nothing).
    pub fn unblock(self) {
        // SAFETY: restoring a mask saved from this thread.
        unsafe {
            libc::pthread_sigmask(libc::SIG_SETMASK, &self.original, std::ptr::null_mut());
        }
    }
}

/// Blocks the forwarded signals in the calling thread. Call it before any
/// other thread starts: threads inherit the mask, and a signal sent to the
/// process goes to a thread that does not block it.
///
/// A signal that was ignored when redlock-run started (nohup, a background
/// job of a non-interactive shell) is left out and stays ignored: the command
/// inherits the ignore across exec, as it would without redlock-run.
pub fn block() -> Blocked {
    // SAFETY: sigset manipulation on a local value; pthread_sigmask affects
    // this thread only.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for sig in FORWARDED.into_iter().filter(|s| !is_ignored(*s)) {
            libc::sigaddset(&mut set, sig);
        }
        let mut original: libc::sigset_t = std::mem::zeroed();
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, &mut original);
        Blocked { set, original }
    }
}

/// A signalfd(2) for the blocked signals: the waiting loops read them from
/// it, beside their other wake-ups, with no thread to take them.
pub fn open(blocked: Blocked) -> io::Result<OwnedFd> {
    // SAFETY: a valid mask; a new descriptor is returned or -1.
    let fd = unsafe { libc::signalfd(-1, &blocked.set, libc::SFD_CLOEXEC | libc::SFD_NONBLOCK) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a new descriptor, owned by nothing else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// A signalfd for the forwarded signals that the calling thread blocks now
/// (none before `block`, or after `unblock`: they then act as usual), for a
/// wait that must end when one arrives before the signal thread runs (see
/// `option_file`). A signal read from it is taken: its caller stops.
pub fn blocked_here() -> io::Result<Option<OwnedFd>> {
    // SAFETY: sigset manipulation on local values; a null new mask only
    // reads this thread's mask.
    let set = unsafe {
        let mut now: libc::sigset_t = std::mem::zeroed();
        libc::pthread_sigmask(libc::SIG_BLOCK, std::ptr::null(), &mut now);
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        let mut any = false;
        for sig in FORWARDED {
            if libc::sigismember(&now, sig) == 1 {
                libc::sigaddset(&mut set, sig);
                any = true;
            }
        }
        if !any {
            return Ok(None);
        }
        set
    };
    // SAFETY: a valid mask; a new descriptor is returned or -1.
    let fd = unsafe { libc::signalfd(-1, &set, libc::SFD_CLOEXEC | libc::SFD_NONBLOCK) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a new descriptor, owned by nothing else.
    Ok(Some(unsafe { OwnedFd::from_raw_fd(fd) }))
}

/// The next pending signal on a signalfd from `open`, if any.
pub fn take(fd: &OwnedFd) -> Option<i32> {
    // SAFETY: a zeroed plain-data struct, read into whole.
    let mut info: libc::signalfd_siginfo = unsafe { std::mem::zeroed() };
    let size = std::mem::size_of::<libc::signalfd_siginfo>();
    // SAFETY: reads at most `size` bytes into `info`.
    let n = unsafe { libc::read(fd.as_raw_fd(), (&raw mut info).cast(), size) };
    (usize::try_from(n).ok() == Some(size)).then_some(info.ssi_signo as i32)
}

/// Blocks every signal in the calling thread, for threads started before
/// `block` (the log thread may be): a signal must never land on them.
pub fn block_all_here() {
    // SAFETY: sigset manipulation on a local value, this thread only.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut set);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
    }
}

/// Whether `sig` is ignored in this process (glibc's own signals answer
/// EINVAL, so they count as not ignored).
pub fn is_ignored(sig: i32) -> bool {
    // SAFETY: querying a disposition with a null new action changes nothing.
    unsafe {
        let mut old: libc::sigaction = std::mem::zeroed();
        libc::sigaction(sig, std::ptr::null(), &mut old) == 0 && old.sa_sigaction == libc::SIG_IGN
    }
}

/// Whether the caller left SIGPIPE ignored, as noted before `main`.
static CALLER_IGNORES_SIGPIPE: AtomicBool = AtomicBool::new(false);

/// Notes the caller's SIGPIPE disposition. To be called before `main`
/// (from `.init_array`): the Rust runtime sets SIGPIPE to ignored for itself
/// before `main` runs, and the command must get the caller's, not that.
pub fn note_caller_sigpipe() {
    CALLER_IGNORES_SIGPIPE.store(is_ignored(libc::SIGPIPE), Ordering::Relaxed);
}

/// The caller's SIGPIPE disposition: ignored (true) or default.
pub fn caller_ignores_sigpipe() -> bool {
    CALLER_IGNORES_SIGPIPE.load(Ordering::Relaxed)
}
