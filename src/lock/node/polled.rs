//! A round over several nodes driven from the calling thread with poll(2),
//! instead of a worker thread per node: every node's connect starts at once,
//! each request is written as soon as its connection stands, and each reply
//! is taken in as it comes. A run on three healthy nodes then starts no
//! thread for its requests at all.
//!
//! A node is driven this way only when nothing else is under way on it (no
//! job of its worker queued or running), it is a plain server on
//! redlock-run's own connection (see `wire`) given by address, or by a name
//! whose addresses the run found as it started (`Node::remember`) or that
//! is connected already, and no `--replicas` WAIT follows its writes. The
//! round holds the node's worker slot and its session while it runs, so
//! nothing can be submitted in between: requests reach each node in the
//! order they were made, as on the worker.
//!
//! A request is made in two halves (see `wire::Mode`): the operation runs
//! once with its request written and its reply left unread, and once more
//! when the reply is in, taking it as its answer. What a node has not
//! answered when the round stops listening goes on on its worker thread,
//! exactly as a request sent there would have: its reply still reaches the
//! round's late replies, and the node's next request waits behind it.

use std::net::SocketAddr;
use std::sync::mpsc::Sender;
use std::sync::{Arc, MutexGuard};
use std::time::{Duration, Instant};

use super::conn::Target;
use super::error::{Failure, NodeError};
use super::server::{self, Literal};
use super::wire::{self, Connecting, Mode};
use super::{Job, Node, Session};

/// Where one node's request stands.
enum State {
    /// Connecting, by `until`, with the addresses to try next if this one
    /// fails.
    Connecting {
        conn: Connecting,
        until: Instant,
        rest: Vec<SocketAddr>,
    },
    /// Written as requests `first .. first + count` at `at`.
    Sent { first: u64, count: u64, at: Instant },
    /// Answered (or handed to the worker).
    Done,
}

/// One node of a polled round, held for the round's length.
pub struct Held<'a> {
    pub index: usize,
    node: &'a Node,
    /// The same node, for the worker's job (see `hand_off`).
    shared: Arc<Node>,
    worker: MutexGuard<'a, Option<Sender<Job>>>,
    session: MutexGuard<'a, Session>,
    /// The request's job number (see `Node::write_behind`).
    pub seq: u64,
    state: State,
}

/// What a step of a node's request came to.
pub enum Step<T> {
    /// Still under way (see `Held::poll_for`).
    Waiting,
    Answered(Result<T, NodeError>),
}

/// Takes the nodes of `which` for a round driven from this thread, or None
/// (and nothing held) when one of them cannot be: see the module's text.
pub fn take<'a>(nodes: &'a [Arc<Node>], which: &[usize]) -> Option<Vec<Held<'a>>> {
    let mut held = Vec::with_capacity(which.len());
    for &i in which {
        let node = nodes[i].as_ref();
        if node.replicas != 0 {
            return None;
        }
        let Target::Server(client) = node.target.as_ref() else {
            return None;
        };
        let named = matches!(server::literal(client)?, Literal::Named);
        // Never wait for a slot here: another round holds it, and that one
        // takes the worker's way.
        let worker = node.worker.try_lock().ok()?;
        let mut session = node.session.try_lock().ok()?;
        // A name is connected to only at the addresses found as the run
        // started; a later connect looks it up again, on the worker.
        if named && session.wire().is_none() && super::lock(&node.resolved).is_none() {
            return None;
        }
        if node.done.load(std::sync::atomic::Ordering::Acquire)
            != node.jobs.load(std::sync::atomic::Ordering::Relaxed)
        {
            return None;
        }
        held.push(Held {
            index: i,
            node,
            shared: Arc::clone(&nodes[i]),
            worker,
            session,
            seq: 0,
            state: State::Done,
        });
    }
    Some(held)
}

/// An operation of a round, given the node's index.
pub type Op<T> = dyn Fn(usize, &mut Session) -> Result<T, NodeError> + Send + Sync;

impl Held<'_> {
    /// Starts the node's request: writes it on the connection there is, or
    /// starts connecting.
    pub fn start<T>(&mut self, op: &Op<T>) -> Step<T> {
        self.node.begin();
        self.seq = self
            .node
            .jobs
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.session.job = self.seq;
        if self.session.wire().is_some() {
            return self.send(op);
        }
        let Target::Server(client) = self.node.target.as_ref() else {
            return self.finish(Err(NodeError::new("not a plain server".into())));
        };
        let timeout = self.node.timeout;
        let until = Instant::now() + timeout;
        match server::literal(client) {
            Some(Literal::Tcp(addr)) => self.connect(vec![addr], until),
            Some(Literal::Named) => {
                let addrs = super::lock(&self.node.resolved).take().unwrap_or_default();
                self.connect(addrs, until)
            }
            Some(Literal::Unix(path)) => {
                match wire::connect_unix(&path)
                    .map_err(|e| self.io(e))
                    .and_then(|s| {
                        server::setup(s, client, self.node.name(), timeout, &self.node.line)
                    }) {
                    Ok(w) => {
                        self.session.adopt(w);
                        self.send(op)
                    }
                    Err(f) => self.finish(Err(f.into_error().unsent())),
                }
            }
            None => self.finish(Err(NodeError::new("not reached by address".into()))),
        }
    }

    /// Starts connecting to the first of `addrs` that does not fail at once.
    fn connect<T>(&mut self, addrs: Vec<SocketAddr>, until: Instant) -> Step<T> {
        let mut last = std::io::Error::new(std::io::ErrorKind::NotFound, "no address");
        let mut addrs = addrs.into_iter();
        while let Some(addr) = addrs.next() {
            match Connecting::start(addr) {
                Ok(conn) => {
                    self.state = State::Connecting {
                        conn,
                        until,
                        rest: addrs.collect(),
                    };
                    return Step::Waiting;
                }
                Err(e) => last = e,
            }
        }
        self.failed_connect(last)
    }

    /// The descriptor to poll and for what, while under way.
    pub fn poll_for(&mut self) -> Option<(i32, i16, Instant)> {
        match &self.state {
            State::Connecting { conn, until, .. } => Some((conn.fd(), libc::POLLOUT, *until)),
            State::Sent { at, .. } => {
                let until = *at + self.node.timeout;
                self.session.wire().map(|w| (w.fd(), libc::POLLIN, until))
            }
            State::Done => None,
        }
    }

    /// After poll(2) said the descriptor is ready (or its time is up):
    /// the next step.
    pub fn progress<T>(&mut self, op: &Op<T>, now: Instant) -> Step<T> {
        match std::mem::replace(&mut self.state, State::Done) {
            State::Connecting { conn, until, rest } => {
                let Target::Server(client) = self.node.target.as_ref() else {
                    return self.finish(Err(NodeError::new("not a plain server".into())));
                };
                if now >= until && !ready(conn.fd(), libc::POLLOUT) {
                    return self.failed_connect(std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        "connect timed out",
                    ));
                }
                let timeout = self.node.timeout;
                let stream = match conn.finish() {
                    Ok(s) => s,
                    // Every address in turn, as a blocking connect would.
                    Err(_) if !rest.is_empty() && now < until => {
                        return self.connect(rest, until);
                    }
                    Err(e) => return self.failed_connect(e),
                };
                match server::setup(stream, client, self.node.name(), timeout, &self.node.line) {
                    Ok(w) => {
                        self.session.adopt(w);
                        self.send(op)
                    }
                    Err(f) => self.finish(Err(f.into_error().unsent())),
                }
            }
            State::Sent { first, count, at } => {
                let upto = first + count;
                let Some(w) = self.session.wire() else {
                    return self.finish(Err(NodeError::new("connection lost".into())));
                };
                let open = w.fill();
                if open && !w.has_replies(upto) && now < at + self.node.timeout {
                    self.state = State::Sent { first, count, at };
                    return Step::Waiting;
                }
                // Read now: the replies are in, the connection ended, or its
                // time is up (the read then says "timed out").
                let left = (at + self.node.timeout).saturating_duration_since(now);
                let result = self.replay(op, first, count, left);
                self.finish(result)
            }
            State::Done => Step::Waiting,
        }
    }

    /// Hands what is still under way to the node's worker, which finishes
    /// it as its first job (connecting afresh if the connect had not
    /// come through) and calls `deliver` with the outcome. Returns the job
    /// number that stands for the request (see `Node::write_behind`): the
    /// one it was written under, or the worker's job that will write it.
    pub fn hand_off<T: Send + 'static>(
        &mut self,
        op: Arc<Op<T>>,
        deliver: impl FnOnce(Result<T, NodeError>) + Send + 'static,
    ) -> u64 {
        let (index, timeout) = (self.index, self.node.timeout);
        let node = Arc::clone(&self.shared);
        let deliver = move |result: Result<T, NodeError>| {
            node.finish(&result);
            deliver(result);
        };
        let (job, written): (Job, bool) = match std::mem::replace(&mut self.state, State::Done) {
            State::Sent { first, count, at } => (
                Box::new(move |session: &mut Session| {
                    let left = (at + timeout).saturating_duration_since(Instant::now());
                    deliver(replay_on(session, &*op, index, first, count, left, timeout));
                }),
                true,
            ),
            State::Connecting { .. } => (
                Box::new(move |session: &mut Session| deliver(op(index, session))),
                false,
            ),
            State::Done => return self.seq,
        };
        // This request is done here: the worker's job stands for it.
        self.node
            .done
            .fetch_add(1, std::sync::atomic::Ordering::Release);
        let job = self.node.submit_to(&mut self.worker, job);
        if written { self.seq } else { job }
    }

    /// Runs `op` with its request written and its reply left for later.
    fn send<T>(&mut self, op: &Op<T>) -> Step<T> {
        if let Some(w) = self.session.wire() {
            w.mode = Mode::Record;
        }
        let result = op(self.index, &mut self.session);
        let sent = match self.session.wire() {
            Some(w) => match std::mem::replace(&mut w.mode, Mode::Live) {
                Mode::Sent { first, count } => Some((first, count)),
                _ => None,
            },
            None => None,
        };
        match sent {
            Some((first, count)) => {
                self.state = State::Sent {
                    first,
                    count,
                    at: Instant::now(),
                };
                Step::Waiting
            }
            // It asked nothing of the node, or failed before it could.
            None => self.finish(result),
        }
    }

    fn replay<T>(
        &mut self,
        op: &Op<T>,
        first: u64,
        count: u64,
        left: Duration,
    ) -> Result<T, NodeError> {
        replay_on(
            &mut self.session,
            op,
            self.index,
            first,
            count,
            left,
            self.node.timeout,
        )
    }

    fn finish<T>(&mut self, result: Result<T, NodeError>) -> Step<T> {
        self.state = State::Done;
        self.node.finish(&result);
        self.node
            .done
            .fetch_add(1, std::sync::atomic::Ordering::Release);
        Step::Answered(result)
    }

    fn failed_connect<T>(&mut self, e: std::io::Error) -> Step<T> {
        let f = self.io(e);
        self.finish(Err(f.into_error().unsent()))
    }

    fn io(&self, e: std::io::Error) -> Failure {
        Failure::of(
            self.node.name(),
            self.node.timeout,
            &redis::RedisError::from(e),
        )
    }
}

/// Runs `op` again to take the replies of its request written as
/// `first .. first + count`, waiting for them at most `left`.
fn replay_on<T>(
    session: &mut Session,
    op: &Op<T>,
    index: usize,
    first: u64,
    count: u64,
    left: Duration,
    timeout: Duration,
) -> Result<T, NodeError> {
    match session.wire() {
        Some(w) => {
            w.mode = Mode::Replay { first, count };
            w.timeout = left;
        }
        None => {
            return Err(NodeError::new(format!(
                "{}: connection lost before the reply",
                session.name()
            )));
        }
    }
    let result = op(index, session);
    if let Some(w) = session.wire() {
        w.mode = Mode::Live;
        w.timeout = timeout;
    }
    result
}

/// Whether `fd` is ready for `events` now.
fn ready(fd: i32, events: i16) -> bool {
    let mut p = libc::pollfd {
        fd,
        events,
        revents: 0,
    };
    // SAFETY: one valid pollfd, no wait.
    unsafe { libc::poll(&mut p, 1, 0) > 0 }
}

/// Waits until one of `fds` is ready or `until` passes; EINTR (a stop and
/// continue) just ends the wait early.
pub fn wait(fds: &mut [libc::pollfd], until: Instant) {
    let left = until.saturating_duration_since(Instant::now());
    // Rounded up: a wait cut short by rounding would spin.
    let ms = i32::try_from(left.as_micros().div_ceil(1000)).unwrap_or(i32::MAX);
    let n = libc::nfds_t::try_from(fds.len()).unwrap_or(0);
    // SAFETY: `fds` is a valid slice of pollfd for its length.
    unsafe {
        libc::poll(fds.as_mut_ptr(), n, ms);
    }
}
