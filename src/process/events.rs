//! How the waiting loops hear of things: the signals redlock-run is sent,
//! the events its threads send (a new deadline, a lost lock, a release
//! announced), and, while the command runs, the guard's reports, all waited
//! for together in one poll(2).
//!
//! Signals come from a signalfd and the guard's reports from its pipe, read
//! by the waiting loop itself rather than by threads that pass them on: the
//! command's end reaches the release with no wake-up in between, and a run
//! starts no thread for either. Events from threads go through a channel,
//! and each one also bumps an eventfd, so that the same poll wakes for them.

use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::Arc;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender, TryRecvError};
use std::time::Duration;

use crate::process::guard;
use crate::process::signals::{self, Blocked};
use crate::process::supervise::Event;

/// The sending side of the supervisor's events; clone it for each thread.
#[derive(Clone)]
pub struct Events {
    tx: Sender<Event>,
    wake: Arc<OwnedFd>,
}

impl Events {
    /// A new channel and its eventfd, and a signalfd for the `blocked`
    /// signals.
    pub fn new(blocked: Blocked) -> io::Result<(Events, Inbox)> {
        let signals = signals::open(blocked)?;
        // SAFETY: eventfd has no memory-safety preconditions.
        let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: a new descriptor, owned by nothing else.
        let wake = Arc::new(unsafe { OwnedFd::from_raw_fd(fd) });
        let (tx, rx) = mpsc::channel();
        let inbox = Inbox {
            rx,
            wake: Arc::clone(&wake),
            signals,
        };
        Ok((Events { tx, wake }, inbox))
    }

    /// Sends `event`; false once the receiver is gone.
    pub fn send(&self, event: Event) -> bool {
        if self.tx.send(event).is_err() {
            return false;
        }
        // After the send: a poll woken by this finds the event queued. The
        // counter cannot overflow in practice; a full one is awake anyway.
        let one = 1u64;
        // SAFETY: an 8-byte write from a live value to our own eventfd.
        unsafe {
            libc::write(
                self.wake.as_raw_fd(),
                (&raw const one).cast(),
                std::mem::size_of::<u64>(),
            );
        }
        true
    }
}

/// The receiving side: the supervisor's and the other waiting loops'.
pub struct Inbox {
    rx: Receiver<Event>,
    wake: Arc<OwnedFd>,
    signals: OwnedFd,
}

impl Inbox {
    /// The next signal or event within `wait` (no guard reports).
    pub fn recv_timeout(&self, wait: Duration) -> Result<Event, RecvTimeoutError> {
        self.next(&mut None, wait)
    }

    /// A signal or event that is already there, if any.
    pub fn try_next(&self) -> Option<Event> {
        signals::take(&self.signals)
            .map(Event::Signal)
            .or_else(|| self.rx.try_recv().ok())
    }

    /// Clears the eventfd's count (its events are in the channel).
    fn drain(&self) {
        let mut n = 0u64;
        // SAFETY: an 8-byte read into a live value from our own eventfd.
        unsafe {
            libc::read(
                self.wake.as_raw_fd(),
                (&raw mut n).cast(),
                std::mem::size_of::<u64>(),
            );
        }
    }

    /// The next event, or the guard's next report (as `Event::Guard`),
    /// within `wait`. `reports` is the guard's report pipe while it is open;
    /// it is set to `None` once the pipe has said its last.
    pub fn next(
        &self,
        reports: &mut Option<File>,
        wait: Duration,
    ) -> Result<Event, RecvTimeoutError> {
        let until = crate::clock::now() + wait;
        loop {
            match self.rx.try_recv() {
                Ok(e) => return Ok(e),
                Err(TryRecvError::Disconnected) => return Err(RecvTimeoutError::Disconnected),
                Err(TryRecvError::Empty) => {}
            }
            let mut fds = [
                libc::pollfd {
                    fd: self.wake.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                },
                libc::pollfd {
                    fd: self.signals.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                },
                libc::pollfd {
                    fd: reports.as_ref().map_or(-1, |r| r.as_raw_fd()),
                    events: libc::POLLIN,
                    revents: 0,
                },
            ];
            let left = until.saturating_duration_since(crate::clock::now());
            let timeout = libc::timespec {
                tv_sec: libc::time_t::try_from(left.as_secs()).unwrap_or(libc::time_t::MAX),
                tv_nsec: left.subsec_nanos() as libc::c_long,
            };
            // SAFETY: three live pollfds, a live timespec, no signal mask change.
            let n = unsafe { libc::ppoll(fds.as_mut_ptr(), 3, &timeout, std::ptr::null()) };
            if n == 0 || (n < 0 && left.is_zero()) {
                return Err(RecvTimeoutError::Timeout);
            }
            if n < 0 {
                if io::Error::last_os_error().kind() != io::ErrorKind::Interrupted {
                    // Cannot wait: sleep in short steps rather than spin; the
                    // loop above still sees every event.
                    std::thread::sleep(left.min(Duration::from_millis(5)));
                }
                continue;
            }
            if fds[0].revents != 0 {
                self.drain();
            }
            // A pending signal keeps its signalfd readable: poll finds one
            // that came before the call too.
            if fds[1].revents != 0
                && let Some(sig) = signals::take(&self.signals)
            {
                return Ok(Event::Signal(sig));
            }
            if fds[2].revents != 0
                && let Some(pipe) = reports.as_mut()
            {
                let report = guard::read_report(pipe);
                if report.is_last() {
                    *reports = None;
                }
                return Ok(Event::Guard(report));
            }
        }
    }
}
