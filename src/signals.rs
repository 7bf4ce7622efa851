//! Which signal arrived, so the command gets that same signal.
//!
//! The forwarded signals are blocked in every thread and read from a
//! signalfd(2) by the loops that wait (see `process::events`, and
//! `option_file` for a wait before the run). No handler ever runs,
//! so no blocking call anywhere (a socket read with a timeout, which the
//! kernel never restarts) fails with EINTR because a signal arrived: a storm
//! of signals cannot cost a node's answer or a heartbeat.
//!
//! The C library's signal sets, masks, dispositions and signalfd have no
//! safe wrapper (rustix leaves them to the C library, whose own signals they
//! must respect): this module is where they are called, each in one small
//! `unsafe` block, and the rest of the crate uses the safe functions below.
//! It depends on nothing of the crate: the log's thread and the option
//! files use it from below the process side.

use std::io;
use std::mem::MaybeUninit;
use std::os::fd::{AsRawFd, FromRawFd, IntoRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};

/// Signals passed on to the command's process tree.
pub(crate) const FORWARDED: [i32; 6] = [
    libc::SIGINT,
    libc::SIGTERM,
    libc::SIGHUP,
    libc::SIGQUIT,
    libc::SIGUSR1,
    libc::SIGUSR2,
];

/// A signal's name for messages (`SIGTERM`), or its number where it has no
/// common one.
pub fn name(sig: i32) -> String {
    let known = [
        (libc::SIGHUP, "SIGHUP"),
        (libc::SIGINT, "SIGINT"),
        (libc::SIGQUIT, "SIGQUIT"),
        (libc::SIGKILL, "SIGKILL"),
        (libc::SIGUSR1, "SIGUSR1"),
        (libc::SIGUSR2, "SIGUSR2"),
        (libc::SIGTERM, "SIGTERM"),
        (libc::SIGCONT, "SIGCONT"),
        (libc::SIGSTOP, "SIGSTOP"),
    ];
    known
        .iter()
        .find(|(n, _)| *n == sig)
        .map_or_else(|| format!("signal {sig}"), |(_, name)| (*name).to_string())
}

/// A set of signals, for a thread's mask or a signalfd.
#[derive(Clone, Copy)]
pub(crate) struct SigSet(libc::sigset_t);

impl SigSet {
    /// The set of `signals`. A number the C library refuses (its own two
    /// signals, 32 and 33, or no signal at all) stays out of it, as it would
    /// stay out of any mask.
    pub(crate) fn of(signals: impl IntoIterator<Item = i32>) -> SigSet {
        let mut set = MaybeUninit::<libc::sigset_t>::uninit();
        // SAFETY: sigemptyset initialises the whole set (it cannot fail with
        // a valid pointer) before it is read; sigaddset writes only inside it.
        unsafe {
            libc::sigemptyset(set.as_mut_ptr());
            let mut set = set.assume_init();
            for sig in signals {
                libc::sigaddset(&mut set, sig);
            }
            SigSet(set)
        }
    }

    /// Every signal, as sigfillset(3) makes it (without the C library's own).
    pub(crate) fn all() -> SigSet {
        let mut set = MaybeUninit::<libc::sigset_t>::uninit();
        // SAFETY: sigfillset initialises the whole set (it cannot fail with a
        // valid pointer) before it is read.
        unsafe {
            libc::sigfillset(set.as_mut_ptr());
            SigSet(set.assume_init())
        }
    }

    /// Whether `sig` is in the set (a number that is no signal is not).
    pub(crate) fn contains(&self, sig: i32) -> bool {
        // SAFETY: reads an initialised set.
        unsafe { libc::sigismember(&self.0, sig) == 1 }
    }
}

/// How `thread_mask` changes the calling thread's mask.
#[derive(Clone, Copy)]
pub(crate) enum How {
    /// The set is added to the mask.
    Block,
    /// The set becomes the mask.
    SetTo,
}

/// Changes the calling thread's signal mask by `set` (only reads it with
/// None); the mask as it was. Async-signal-safe in practice (one system
/// call in glibc): the child of the spawn calls it between its clone and its
/// exec.
pub(crate) fn thread_mask(how: How, set: Option<&SigSet>) -> SigSet {
    let how = match how {
        How::Block => libc::SIG_BLOCK,
        How::SetTo => libc::SIG_SETMASK,
    };
    let new = set.map_or(std::ptr::null(), |s| &raw const s.0);
    let mut old = MaybeUninit::<libc::sigset_t>::uninit();
    // SAFETY: `new` is null or an initialised set; `old` is written whole.
    // pthread_sigmask fails only for a `how` that is none of the three, and
    // these are two of them; it leaves the C library's own signals as they
    // are.
    unsafe {
        libc::pthread_sigmask(how, new, old.as_mut_ptr());
        SigSet(old.assume_init())
    }
}

/// A signalfd(2) for `set`, close-on-exec and non-blocking. The signals must
/// be blocked in the threads that read it, or they are delivered as usual.
pub(crate) fn signalfd(set: &SigSet) -> io::Result<OwnedFd> {
    // SAFETY: an initialised set; a new descriptor or -1 comes back, and the
    // new one is owned by nothing else.
    unsafe {
        let fd = libc::signalfd(-1, &set.0, libc::SFD_CLOEXEC | libc::SFD_NONBLOCK);
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(OwnedFd::from_raw_fd(fd))
    }
}

/// Sets `sig` to be ignored, or to its default action. Async-signal-safe:
/// the child of the spawn calls it between its clone and its exec. Fails
/// only for a number that is no signal, or SIGKILL or SIGSTOP.
pub(crate) fn set_disposition(sig: i32, ignore: bool) -> io::Result<()> {
    let action = if ignore { libc::SIG_IGN } else { libc::SIG_DFL };
    // SAFETY: no handler is installed, only "ignore" or "default", so no
    // code of ours ever runs for a signal.
    if unsafe { libc::signal(sig, action) } == libc::SIG_ERR {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The forwarded signals this process takes, blocked in the calling thread,
/// and the mask as it was before.
pub(crate) struct Blocked {
    set: SigSet,
    original: SigSet,
}

impl Blocked {
    /// The signal mask redlock-run was started with: the command's.
    pub(crate) fn original(&self) -> SigSet {
        self.original
    }

    /// Back to the original mask (for subcommands that hold nothing).
    pub(crate) fn unblock(self) {
        thread_mask(How::SetTo, Some(&self.original));
    }
}

/// Blocks the forwarded signals in the calling thread. Call it before any
/// other thread starts: threads inherit the mask, and a signal sent to the
/// process goes to a thread that does not block it.
///
/// A signal that was ignored when redlock-run started (nohup, a background
/// job of a non-interactive shell) is left out and stays ignored: the command
/// inherits the ignore across exec, as it would without redlock-run.
pub(crate) fn block() -> Blocked {
    let set = SigSet::of(FORWARDED.into_iter().filter(|s| !is_ignored(*s)));
    let original = thread_mask(How::Block, Some(&set));
    Blocked { set, original }
}

/// A signalfd for the blocked signals: the waiting loops read them from
/// it, beside their other wake-ups, with no thread to take them.
pub(crate) fn open(blocked: Blocked) -> io::Result<OwnedFd> {
    signalfd(&blocked.set)
}

/// A signalfd for the forwarded signals that the calling thread blocks now
/// (none before `block`, or after `unblock`: they then act as usual), for a
/// wait that must end when one arrives before the signal thread runs (see
/// `option_file`). A signal read from it is taken: its caller stops.
pub(crate) fn blocked_here() -> io::Result<Option<OwnedFd>> {
    let now = thread_mask(How::Block, None);
    let here: Vec<i32> = FORWARDED.into_iter().filter(|s| now.contains(*s)).collect();
    if here.is_empty() {
        return Ok(None);
    }
    signalfd(&SigSet::of(here)).map(Some)
}

/// The size of one record a signalfd gives.
const SIGINFO: usize = std::mem::size_of::<libc::signalfd_siginfo>();

/// The next pending signal on a signalfd from `open`, if any.
pub(crate) fn take(fd: &OwnedFd) -> Option<i32> {
    let mut info = [0u8; SIGINFO];
    // Nothing pending (EAGAIN, the descriptor being non-blocking) is the
    // usual failure, and any other means the same to the caller: no signal.
    let n = rustix::io::read(fd, &mut info).ok()?;
    // The record starts with the signal's number (`ssi_signo`, a u32).
    (n == SIGINFO).then(|| u32::from_ne_bytes([info[0], info[1], info[2], info[3]]) as i32)
}

/// Blocks every signal in the calling thread, for threads started before
/// `block` (the log thread may be): a signal must never land on them.
pub(crate) fn block_all_here() {
    thread_mask(How::Block, Some(&SigSet::all()));
}

/// Whether `sig` is ignored in this process (glibc's own signals answer
/// EINVAL, so they count as not ignored).
pub(crate) fn is_ignored(sig: i32) -> bool {
    let mut old = MaybeUninit::<libc::sigaction>::uninit();
    // SAFETY: a null new action only reads the disposition; `old` is read
    // only when the call succeeded, which wrote it whole.
    unsafe {
        libc::sigaction(sig, std::ptr::null(), old.as_mut_ptr()) == 0
            && old.assume_init().sa_sigaction == libc::SIG_IGN
    }
}

/// Whether the caller left SIGPIPE ignored, as noted before `main`.
static CALLER_IGNORES_SIGPIPE: AtomicBool = AtomicBool::new(false);

/// Notes the caller's SIGPIPE disposition. To be called before `main`
/// (from `.init_array`): the Rust runtime, where it runs, sets SIGPIPE to
/// ignored for itself before `main`, and the command must get the caller's.
pub fn note_caller_sigpipe() {
    CALLER_IGNORES_SIGPIPE.store(is_ignored(libc::SIGPIPE), Ordering::Relaxed);
}

/// What the Rust runtime does before `main`, less the stack guard (see
/// main.rs): SIGPIPE ignored (a closed pipe is an error, not a death), and
/// /dev/null put on any of descriptors 0-2 that is closed, so that no file
/// opened later becomes standard output. Harmless after the runtime's own.
pub fn start() {
    let _ = set_disposition(libc::SIGPIPE, true);
    let mut fds = [0, 1, 2].map(|fd| libc::pollfd {
        fd,
        events: 0,
        revents: 0,
    });
    // libc's poll, not rustix's: that one takes borrowed descriptors, and
    // these may be closed, which is what is asked.
    // SAFETY: a valid array of three entries; poll only writes `revents`.
    if unsafe { libc::poll(fds.as_mut_ptr(), 3, 0) } < 0 {
        return;
    }
    for closed in fds.iter().filter(|p| p.revents & libc::POLLNVAL != 0) {
        // Not close-on-exec: the command inherits it. The lowest free
        // descriptor is the closed one, since 0-2 are filled in order.
        let null = rustix::fs::open(
            "/dev/null",
            rustix::fs::OFlags::RDWR,
            rustix::fs::Mode::empty(),
        );
        match null {
            Ok(fd) if fd.as_raw_fd() == closed.fd => {
                let _ = fd.into_raw_fd();
            }
            // As the runtime does: no standard descriptors, no run.
            _ => std::process::abort(),
        }
    }
}

/// What the Rust runtime would do after `main`: standard output's buffer
/// written out.
pub fn finish() {
    use std::io::Write;
    let _ = std::io::stdout().flush();
}

/// The caller's SIGPIPE disposition: ignored (true) or default.
pub(crate) fn caller_ignores_sigpipe() -> bool {
    CALLER_IGNORES_SIGPIPE.load(Ordering::Relaxed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sets_hold_what_they_were_made_of() {
        let set = SigSet::of([libc::SIGUSR1, libc::SIGTERM]);
        assert!(set.contains(libc::SIGUSR1) && set.contains(libc::SIGTERM));
        assert!(!set.contains(libc::SIGUSR2));
        assert!(!set.contains(0), "no signal");
        assert!(!SigSet::of([]).contains(libc::SIGINT));
        let all = SigSet::all();
        assert!(FORWARDED.iter().all(|s| all.contains(*s)));
    }

    #[test]
    fn a_blocked_signal_waits_on_its_descriptor() {
        // This test's thread only: the harness's other threads keep theirs.
        let set = SigSet::of([libc::SIGUSR2]);
        let before = thread_mask(How::Block, Some(&set));
        let fd = signalfd(&set).expect("signalfd");
        assert_eq!(take(&fd), None, "nothing pending yet");
        // SAFETY: raise sends to the calling thread, which blocks SIGUSR2:
        // it waits, pending, for the descriptor.
        assert_eq!(unsafe { libc::raise(libc::SIGUSR2) }, 0);
        assert_eq!(take(&fd), Some(libc::SIGUSR2));
        assert_eq!(take(&fd), None, "taken once");
        thread_mask(How::SetTo, Some(&before));
        assert!(!thread_mask(How::Block, None).contains(libc::SIGUSR2));
    }
}
