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
use std::os::fd::OwnedFd;
use std::sync::Arc;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender, TryRecvError};
use std::time::Duration;

use rustix::event::{EventfdFlags, PollFd, PollFlags, Timespec};
use rustix::io::Errno;

use crate::clock::Stamp;
use crate::process::guard::{self, Report};
use crate::signals::{self, Blocked};

/// Everything the waiting and supervising loops react to.
pub(crate) enum Event {
    /// A report of the guard's, read from its pipe.
    Guard(Report),
    /// A signal redlock-run was sent.
    Signal(i32),
    /// The heartbeat extended the lock to this validity deadline.
    Extended(Stamp),
    /// The lock is certainly gone (a quorum holds another token or none).
    Gone(String),
    /// A release was announced on some node: worth another try.
    Wake,
}

/// The sending side of the supervisor's events; clone it for each thread.
#[derive(Clone)]
pub(crate) struct Events {
    tx: Sender<Event>,
    wake: Arc<OwnedFd>,
}

impl Events {
    /// A new channel and its eventfd, and a signalfd for the `blocked`
    /// signals.
    pub(crate) fn new(blocked: Blocked) -> io::Result<(Events, Inbox)> {
        Events::with_signals(signals::open(blocked)?)
    }

    /// A new channel and its eventfd, beside the signalfd `signals`.
    fn with_signals(signals: OwnedFd) -> io::Result<(Events, Inbox)> {
        let wake = Arc::new(rustix::event::eventfd(
            0,
            EventfdFlags::CLOEXEC | EventfdFlags::NONBLOCK,
        )?);
        let (tx, rx) = mpsc::channel();
        let inbox = Inbox {
            rx,
            wake: Arc::clone(&wake),
            signals,
        };
        Ok((Events { tx, wake }, inbox))
    }

    /// Sends `event`; false once the receiver is gone.
    pub(crate) fn send(&self, event: Event) -> bool {
        if self.tx.send(event).is_err() {
            return false;
        }
        // After the send: a poll woken by this finds the event queued. The
        // write fails only with a full counter (EAGAIN), which cannot come
        // in practice and leaves the eventfd readable, awake anyway.
        let _ = rustix::io::write(&*self.wake, &1u64.to_ne_bytes());
        true
    }
}

/// The receiving side: the supervisor's and the other waiting loops'.
pub(crate) struct Inbox {
    rx: Receiver<Event>,
    wake: Arc<OwnedFd>,
    signals: OwnedFd,
}

impl Inbox {
    /// The next signal or event within `wait` (no guard reports).
    pub(crate) fn recv_timeout(&self, wait: Duration) -> Result<Event, RecvTimeoutError> {
        self.next(&mut None, wait)
    }

    /// A signal or event that is already there, if any.
    pub(crate) fn try_next(&self) -> Option<Event> {
        signals::take(&self.signals)
            .map(Event::Signal)
            .or_else(|| self.rx.try_recv().ok())
    }

    /// Clears the eventfd's count (its events are in the channel).
    fn drain(&self) {
        // Fails only when the count is zero already (EAGAIN): drained.
        let _ = rustix::io::read(&*self.wake, &mut [0u8; 8]);
    }

    /// The next event, or the guard's next report (as `Event::Guard`),
    /// within `wait`. `reports` is the guard's report pipe while it is open;
    /// it is set to `None` once the pipe has said its last.
    pub(crate) fn next(
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
            let left = until.saturating_duration_since(crate::clock::now());
            let timeout = Timespec::try_from(left).unwrap_or(Timespec {
                tv_sec: i64::MAX,
                tv_nsec: 0,
            });
            let ready = match poll_ready(&self.wake, &self.signals, reports.as_ref(), &timeout) {
                Ok(ready) => ready,
                Err(_) if left.is_zero() => return Err(RecvTimeoutError::Timeout),
                Err(Errno::INTR) => continue,
                Err(_) => {
                    // Cannot wait: sleep in short steps rather than spin; the
                    // loop above still sees every event.
                    std::thread::sleep(left.min(Duration::from_millis(5)));
                    continue;
                }
            };
            let Some([wake, signal, report]) = ready else {
                return Err(RecvTimeoutError::Timeout);
            };
            if wake {
                self.drain();
            }
            // A pending signal keeps its signalfd readable: poll finds one
            // that came before the call too.
            if signal && let Some(sig) = signals::take(&self.signals) {
                return Ok(Event::Signal(sig));
            }
            if report && let Some(pipe) = reports.as_mut() {
                let report = guard::read_report(pipe);
                if report.is_last() {
                    *reports = None;
                }
                return Ok(Event::Guard(report));
            }
        }
    }
}

/// One poll(2) for the eventfd, the signalfd and the guard's report pipe
/// while it is open: which of them are readable (or at their end), or None
/// when `timeout` passed first.
fn poll_ready(
    wake: &OwnedFd,
    signals: &OwnedFd,
    reports: Option<&File>,
    timeout: &Timespec,
) -> rustix::io::Result<Option<[bool; 3]>> {
    let mut fds = [
        PollFd::new(wake, PollFlags::IN),
        PollFd::new(signals, PollFlags::IN),
        // Not polled without a pipe (see `len` below).
        PollFd::new(wake, PollFlags::IN),
    ];
    let len = match reports {
        Some(pipe) => {
            fds[2].set_fd(pipe);
            3
        }
        None => 2,
    };
    if rustix::event::poll(&mut fds[..len], Some(timeout))? == 0 {
        return Ok(None);
    }
    let ready = |i: usize| i < len && !fds[i].revents().is_empty();
    Ok(Some([ready(0), ready(1), ready(2)]))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::signals::{How, SigSet};
    use std::io::Write;
    use std::time::Instant;

    /// A channel whose signalfd takes `signals`, which the caller blocks in
    /// its thread.
    fn channel(signals: &[i32]) -> (Events, Inbox) {
        let fd = signals::signalfd(&SigSet::of(signals.iter().copied())).expect("signalfd");
        Events::with_signals(fd).expect("channel")
    }

    #[test]
    fn an_event_from_another_thread_ends_the_wait_at_once() {
        let (tx, inbox) = channel(&[]);
        let sender = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            tx.send(Event::Wake)
        });
        let begun = Instant::now();
        let got = inbox.recv_timeout(Duration::from_secs(30));
        assert!(matches!(got, Ok(Event::Wake)));
        assert!(
            begun.elapsed() < Duration::from_secs(10),
            "{:?}",
            begun.elapsed()
        );
        assert!(sender.join().expect("join"), "delivered");
    }

    #[test]
    fn events_come_in_order_and_a_taken_ones_wake_up_does_not_end_a_wait() {
        let (tx, inbox) = channel(&[]);
        let d = crate::clock::now();
        assert!(tx.send(Event::Extended(d)));
        assert!(tx.send(Event::Gone("why".into())));
        assert!(matches!(inbox.try_next(), Some(Event::Extended(x)) if x == d));
        assert!(matches!(inbox.try_next(), Some(Event::Gone(w)) if w == "why"));
        assert!(inbox.try_next().is_none());
        // The eventfd still counts two: it is drained, and the wait goes on
        // to its end.
        let begun = Instant::now();
        let got = inbox.recv_timeout(Duration::from_millis(50));
        assert!(matches!(got, Err(RecvTimeoutError::Timeout)));
        assert!(begun.elapsed() >= Duration::from_millis(50));
    }

    #[test]
    fn the_wait_ends_disconnected_once_every_sender_is_gone() {
        let (tx, inbox) = channel(&[]);
        let other = tx.clone();
        drop(tx);
        assert!(other.send(Event::Wake));
        drop(other);
        assert!(matches!(
            inbox.recv_timeout(Duration::from_secs(1)),
            Ok(Event::Wake)
        ));
        assert!(matches!(
            inbox.recv_timeout(Duration::from_secs(30)),
            Err(RecvTimeoutError::Disconnected)
        ));
    }

    #[test]
    fn the_guards_reports_are_read_until_its_last() {
        let (_tx, inbox) = channel(&[]);
        let (r, w) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).expect("pipe");
        let mut w = File::from(w);
        let mut reports = Some(File::from(r));
        // As the guard writes them: [tag][u32 length][payload]; a
        // resume of pid 7 after SIGTSTP, then the command's exit (status
        // 3 << 8) with nothing left.
        w.write_all(b"C\x08\x00\x00\x00\x07\x00\x00\x00\x14\x00\x00\x00")
            .expect("write");
        w.write_all(b"X\x04\x00\x00\x00\x00\x03\x00\x00")
            .expect("write");
        let got = inbox.next(&mut reports, Duration::from_secs(30));
        assert!(matches!(
            got,
            Ok(Event::Guard(Report::Resumed {
                pid: 7,
                sig: libc::SIGTSTP
            }))
        ));
        assert!(reports.is_some(), "more to come");
        let got = inbox.next(&mut reports, Duration::from_secs(30));
        let Ok(Event::Guard(Report::Exited {
            status,
            empty: true,
        })) = got
        else {
            panic!("not the exit");
        };
        assert_eq!(status.code(), Some(3));
        assert!(reports.is_none(), "the pipe said its last");
        // A guard that dies says `Gone` by the pipe's end.
        let (r, w) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).expect("pipe");
        drop(w);
        let mut reports = Some(File::from(r));
        let got = inbox.next(&mut reports, Duration::from_secs(30));
        assert!(matches!(got, Ok(Event::Guard(Report::Gone))));
        assert!(reports.is_none());
    }

    #[test]
    fn a_signal_arrives_beside_the_events() {
        // This test's thread only: the harness's other threads keep theirs.
        let before = signals::thread_mask(How::Block, Some(&SigSet::of([libc::SIGUSR1])));
        let (_tx, inbox) = channel(&[libc::SIGUSR1]);
        // SAFETY: raise sends to the calling thread, which blocks SIGUSR1: it
        // waits, pending, for the signalfd.
        assert_eq!(unsafe { libc::raise(libc::SIGUSR1) }, 0);
        let got = inbox.recv_timeout(Duration::from_secs(30));
        signals::thread_mask(How::SetTo, Some(&before));
        assert!(matches!(got, Ok(Event::Signal(libc::SIGUSR1))));
    }
}
