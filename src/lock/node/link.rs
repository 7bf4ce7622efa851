//! One connection to one Redis server, driven without blocking: TCP or a
//! Unix socket, with TLS through rustls where the URL says `rediss://`.
//!
//! Everything redlock-run says to any server goes through a `Link`: the
//! lock's requests, a sentinel's or a Cluster seed's answer to where the
//! data lives, a subscription. A link keeps three promises the lock rests
//! on:
//!
//! - **Set-up first.** The connection's set-up (AUTH, SELECT, ROLE) is
//!   written alone, and answered and checked before any request follows it:
//!   Redis runs each command of a pipeline on its own, so a request written
//!   behind a refused AUTH would run as the default user, and one behind a
//!   refused SELECT in database 0.
//! - **In order, behind what is unanswered.** Requests are written as they
//!   come, each behind the last, and replies are matched to them in order.
//!   A request not answered in time stays owed: its reply is read when it
//!   comes (and reported late), and the requests behind it are answered
//!   after it. So a release written behind an acquire that a stopped server
//!   never answered reaches that server after the acquire, when it resumes.
//! - **Bounded.** One node timeout from the moment a request is written
//!   (its connection's set-up included) to its reply; what a server sends is
//!   framed within the caps of `resp`. Node timeouts run on the monotonic
//!   clock: a host suspended mid-request is no fault of the node's (the
//!   lock's own deadlines are on CLOCK_BOOTTIME, see `crate::clock`).

use std::collections::VecDeque;
use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::Value;
use rustix::event::PollFlags;

use super::broken::Broken;
use super::resp::{self, Framer};

/// What a reply answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Tag {
    /// The connection's set-up.
    Setup,
    /// A request of the node's, by its ticket.
    Ticket(u64),
}

/// What `Link::progress` found.
#[derive(Debug)]
pub(super) enum Event {
    /// The replies of `tag`, in order.
    Answered(Tag, Vec<Value>),
    /// `tag`'s time ran out: it stays owed, and its reply, if it comes, is
    /// reported then.
    Overdue(Tag),
    /// A message on a subscribed connection.
    Push(Value),
    /// The connection is gone. Each tag still owed, with whether any of its
    /// bytes may have reached the server.
    Failed(Broken, Vec<(Tag, bool)>),
}

/// Where a link goes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Dest {
    /// The addresses of one server, tried in turn.
    Tcp(Vec<SocketAddr>),
    Unix(PathBuf),
}

/// A server's TLS side, for `rediss://`.
#[derive(Clone)]
pub(super) struct TlsTo {
    pub(super) config: Arc<rustls::ClientConfig>,
    pub(super) name: rustls::pki_types::ServerName<'static>,
}

/// The set-up of a connection: its requests as bytes, how many replies
/// they take, and a check of those replies beyond "no error" (a Sentinel
/// group's primary must say it is one).
pub(super) struct Setup {
    pub(super) bytes: Vec<u8>,
    pub(super) replies: usize,
    pub(super) check: fn(&[Value]) -> Result<(), &'static str>,
}

enum Socket {
    Tcp(TcpStream),
    Unix(UnixStream),
}

impl Socket {
    fn fd(&self) -> BorrowedFd<'_> {
        match self {
            Socket::Tcp(s) => s.as_fd(),
            Socket::Unix(s) => s.as_fd(),
        }
    }

    fn shutdown_write(&self) {
        // Nothing to do if it fails: the connection is going either way.
        let _ = match self {
            Socket::Tcp(s) => s.shutdown(Shutdown::Write),
            Socket::Unix(s) => s.shutdown(Shutdown::Write),
        };
    }
}

impl Read for Socket {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Socket::Tcp(s) => s.read(buf),
            Socket::Unix(s) => s.read(buf),
        }
    }
}

impl Write for Socket {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Socket::Tcp(s) => s.write(buf),
            Socket::Unix(s) => s.write(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

enum Phase {
    /// A TCP connect under way to `addrs[at]`, all of them by `until`.
    Connecting {
        socket: socket2::Socket,
        addrs: Vec<SocketAddr>,
        at: usize,
        until: Instant,
    },
    /// Connected; the TLS handshake under way, by `until`.
    Handshaking { until: Instant },
    /// Requests may be written.
    Up,
    /// Failed at the start, with why: said at the first `progress`.
    Stillborn(Broken),
    /// Gone: nothing more happens on it.
    Down,
}

/// A request queued and not yet answered in full.
struct Owed {
    tag: Tag,
    /// Replies it takes.
    replies: usize,
    got: Vec<Value>,
    /// Time its reply may take beyond the timeout (a WAIT's own).
    extra: Duration,
    /// When its time runs out; set when it is written.
    deadline: Option<Instant>,
    /// Where its bytes start in the stream of all bytes queued.
    start: u64,
    overdue: bool,
}

pub(super) struct Link {
    socket: Option<Socket>,
    tls: Option<Box<rustls::ClientConnection>>,
    phase: Phase,
    timeout: Duration,
    /// Bytes waiting to be written: the set-up, then requests.
    out: Vec<u8>,
    /// Requests queued behind a set-up not answered yet.
    held: Vec<u8>,
    /// Bytes queued so far, and of them handed to the socket (or to rustls).
    queued: u64,
    flushed: u64,
    owed: VecDeque<Owed>,
    check: fn(&[Value]) -> Result<(), &'static str>,
    inbuf: Vec<u8>,
    framer: Framer,
    /// A reply has been read on this connection.
    answered: bool,
    /// A subscribed connection: replies nobody asked for are messages.
    push: bool,
}

/// How much is read from a socket at a time.
const CHUNK: usize = 16 * 1024;

impl Link {
    /// Starts connecting to `dest` (TLS through `tls`), `setup` to go first.
    pub(super) fn open(
        dest: &Dest,
        tls: Option<&TlsTo>,
        setup: Setup,
        timeout: Duration,
        now: Instant,
    ) -> Link {
        let mut link = Link {
            socket: None,
            tls: None,
            phase: Phase::Down,
            timeout,
            out: Vec::new(),
            held: Vec::new(),
            queued: 0,
            flushed: 0,
            owed: VecDeque::new(),
            check: setup.check,
            inbuf: Vec::new(),
            framer: Framer::default(),
            answered: false,
            push: false,
        };
        if setup.replies > 0 {
            link.queue(Tag::Setup, &setup.bytes, setup.replies, Duration::ZERO);
        }
        if let Some(t) = tls {
            match rustls::ClientConnection::new(Arc::clone(&t.config), t.name.clone()) {
                Ok(c) => link.tls = Some(Box::new(c)),
                Err(e) => {
                    link.phase = Phase::Stillborn(Broken::Tls(e.to_string()));
                    return link;
                }
            }
        }
        match dest {
            Dest::Unix(path) => match UnixStream::connect(path).and_then(|s| {
                s.set_nonblocking(true)?;
                Ok(s)
            }) {
                Ok(s) => {
                    link.socket = Some(Socket::Unix(s));
                    link.connected(now);
                }
                Err(e) => {
                    link.phase = Phase::Stillborn(Broken::Connect(e.kind(), e.to_string()));
                }
            },
            Dest::Tcp(addrs) => link.connect(addrs.clone(), 0, now + timeout),
        }
        link
    }

    /// Starts connecting to the first of `addrs[at..]` that does not fail
    /// at once.
    fn connect(&mut self, addrs: Vec<SocketAddr>, mut at: usize, until: Instant) {
        let mut last = Broken::Connect(io::ErrorKind::NotFound, "no address".into());
        while let Some(addr) = addrs.get(at) {
            match start_connect(*addr) {
                Ok(socket) => {
                    self.phase = Phase::Connecting {
                        socket,
                        addrs,
                        at,
                        until,
                    };
                    return;
                }
                Err(e) => last = Broken::Connect(e.kind(), e.to_string()),
            }
            at += 1;
        }
        self.phase = Phase::Stillborn(last);
    }

    /// The connect went through: TLS next, if any.
    fn connected(&mut self, now: Instant) {
        self.phase = if self.tls.is_some() {
            Phase::Handshaking {
                until: now + self.timeout,
            }
        } else {
            Phase::Up
        };
    }

    /// Makes this a subscribed connection: replies that answer nothing
    /// asked are messages (see `Event::Push`).
    pub(super) fn subscribed(&mut self) {
        self.push = true;
    }

    /// Queues a request (`replies` of them in `bytes`) behind whatever the
    /// connection has: written as soon as it can be.
    pub(super) fn send(&mut self, tag: Tag, bytes: &[u8], replies: usize, extra: Duration) {
        self.queue(tag, bytes, replies, extra);
    }

    fn queue(&mut self, tag: Tag, bytes: &[u8], replies: usize, extra: Duration) {
        let behind_setup = self.owed.front().is_some_and(|o| o.tag == Tag::Setup);
        self.owed.push_back(Owed {
            tag,
            replies,
            got: Vec::new(),
            extra,
            deadline: None,
            start: self.queued,
            overdue: false,
        });
        self.queued += bytes.len() as u64;
        if behind_setup && tag != Tag::Setup {
            self.held.extend_from_slice(bytes);
        } else {
            self.out.extend_from_slice(bytes);
        }
    }

    /// The server's own certificate (the first it presented), once a TLS
    /// handshake is done: `check` reads when it expires. Read only.
    pub(super) fn peer_certificate(&self) -> Option<Vec<u8>> {
        Some(self.tls.as_ref()?.peer_certificates()?.first()?.to_vec())
    }

    /// Whether the link can still carry requests.
    pub(super) fn alive(&self) -> bool {
        !matches!(self.phase, Phase::Down | Phase::Stillborn(_))
    }

    /// The descriptor to wait on and for what, while there is one.
    pub(super) fn interest(&self) -> Option<(BorrowedFd<'_>, PollFlags)> {
        match &self.phase {
            Phase::Connecting { socket, .. } => Some((socket.as_fd(), PollFlags::OUT)),
            Phase::Handshaking { .. } => {
                let tls = self.tls.as_ref()?;
                let mut flags = PollFlags::empty();
                if tls.wants_read() {
                    flags |= PollFlags::IN;
                }
                if tls.wants_write() {
                    flags |= PollFlags::OUT;
                }
                Some((self.socket.as_ref()?.fd(), flags))
            }
            Phase::Up => {
                let mut flags = PollFlags::IN;
                if !self.out.is_empty() || self.tls.as_ref().is_some_and(|t| t.wants_write()) {
                    flags |= PollFlags::OUT;
                }
                Some((self.socket.as_ref()?.fd(), flags))
            }
            // Said at once, by the next `progress`.
            Phase::Stillborn(_) | Phase::Down => None,
        }
    }

    /// When `progress` must run next even if nothing is ready: a deadline.
    pub(super) fn wake(&self) -> Option<Instant> {
        match &self.phase {
            Phase::Connecting { until, .. } | Phase::Handshaking { until } => Some(*until),
            Phase::Up => self
                .owed
                .iter()
                .filter(|o| !o.overdue)
                .filter_map(|o| o.deadline)
                .min(),
            Phase::Stillborn(_) => Some(Instant::now()),
            Phase::Down => None,
        }
    }

    /// Does what can be done now without waiting: connects, handshakes,
    /// writes, reads, and notices deadlines; what happened goes to `events`.
    pub(super) fn progress(&mut self, now: Instant, events: &mut Vec<Event>) {
        if let Err(broken) = self.step(now, events, true) {
            self.fail(broken, events);
        }
    }

    /// As `progress`, but reads no reply: a request goes onto the wire at
    /// once, and the replies wait for the next `progress`, so that one
    /// node's reply is not read before the other nodes are asked.
    pub(super) fn push(&mut self, now: Instant, events: &mut Vec<Event>) {
        if let Err(broken) = self.step(now, events, false) {
            self.fail(broken, events);
        }
    }

    fn step(&mut self, now: Instant, events: &mut Vec<Event>, read: bool) -> Result<(), Broken> {
        if let Phase::Stillborn(b) = &self.phase {
            return Err(b.clone());
        }
        if matches!(self.phase, Phase::Connecting { .. }) {
            self.finish_connect(now)?;
        }
        if matches!(self.phase, Phase::Handshaking { .. }) {
            self.handshake(now)?;
        }
        if !matches!(self.phase, Phase::Up) {
            return Ok(());
        }
        self.write(now)?;
        if read {
            self.read(events)?;
            // A set-up answered just now lets the requests behind it go.
            self.write(now)?;
        }
        for o in self.owed.iter_mut() {
            if !o.overdue && o.deadline.is_some_and(|d| now >= d) {
                o.overdue = true;
                events.push(Event::Overdue(o.tag));
            }
        }
        Ok(())
    }

    fn finish_connect(&mut self, now: Instant) -> Result<(), Broken> {
        let Phase::Connecting {
            socket,
            addrs,
            at,
            until,
        } = std::mem::replace(&mut self.phase, Phase::Down)
        else {
            return Ok(());
        };
        // Connected, in one system call on the usual path; SO_ERROR says
        // why not.
        let connected = socket.peer_addr().is_ok();
        let failed = if connected {
            None
        } else {
            match socket.take_error() {
                Ok(Some(e)) | Err(e) => Some(e),
                Ok(None) => None,
            }
        };
        match failed {
            None if connected => {
                // Nagle's algorithm would hold a request back for an ACK.
                let _ = socket.set_tcp_nodelay(true);
                self.socket = Some(Socket::Tcp(socket.into()));
                self.connected(now);
                Ok(())
            }
            None if now < until => {
                self.phase = Phase::Connecting {
                    socket,
                    addrs,
                    at,
                    until,
                };
                Ok(())
            }
            None => Err(Broken::ConnectTimeout),
            Some(e) => {
                // Every address in turn, within the one timeout.
                if at + 1 < addrs.len() && now < until {
                    self.connect(addrs, at + 1, until);
                    if let Phase::Stillborn(b) = &self.phase {
                        return Err(b.clone());
                    }
                    return Ok(());
                }
                Err(Broken::Connect(e.kind(), e.to_string()))
            }
        }
    }

    fn handshake(&mut self, now: Instant) -> Result<(), Broken> {
        let (Some(tls), Some(socket)) = (self.tls.as_mut(), self.socket.as_mut()) else {
            return Err(Broken::Tls("no TLS state".into()));
        };
        loop {
            while tls.wants_write() {
                match tls.write_tls(socket) {
                    Ok(_) => {}
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(Broken::Io(e.to_string())),
                }
            }
            if !tls.is_handshaking() {
                self.phase = Phase::Up;
                return Ok(());
            }
            if !tls.wants_read() {
                break;
            }
            match tls.read_tls(socket) {
                Ok(0) => {
                    return Err(Broken::Closed {
                        first: true,
                        reset: false,
                        partial: false,
                    });
                }
                Ok(_) => {
                    if let Err(e) = tls.process_new_packets() {
                        // Tell the server why, as a TLS client should.
                        let _ = tls.write_tls(socket);
                        return Err(Broken::Tls(e.to_string()));
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::ConnectionReset => {
                    return Err(Broken::Closed {
                        first: true,
                        reset: true,
                        partial: false,
                    });
                }
                Err(e) => return Err(Broken::Io(e.to_string())),
            }
        }
        if let Phase::Handshaking { until } = self.phase
            && now >= until
        {
            return Err(Broken::ConnectTimeout);
        }
        Ok(())
    }

    /// Writes what is waiting, as far as the socket takes it, and starts
    /// the clock of each request that went out.
    fn write(&mut self, now: Instant) -> Result<(), Broken> {
        let Some(socket) = self.socket.as_mut() else {
            return Ok(());
        };
        if let Some(tls) = self.tls.as_mut() {
            if !self.out.is_empty() {
                // rustls takes all of it; it counts as written from here.
                tls.writer()
                    .write_all(&self.out)
                    .map_err(|e| Broken::Io(e.to_string()))?;
                self.flushed += self.out.len() as u64;
                self.out.clear();
            }
            while tls.wants_write() {
                match tls.write_tls(socket) {
                    Ok(_) => {}
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(Broken::Io(e.to_string())),
                }
            }
        } else {
            while !self.out.is_empty() {
                match socket.write(&self.out) {
                    Ok(n) => {
                        self.out.drain(..n);
                        self.flushed += n as u64;
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(Broken::Io(e.to_string())),
                }
            }
        }
        self.start_clocks(now);
        Ok(())
    }

    /// Each request whose first byte went out has its deadline from then;
    /// those held behind the set-up, the set-up's (one timeout for both).
    fn start_clocks(&mut self, now: Instant) {
        let setup = self
            .owed
            .front()
            .filter(|o| o.tag == Tag::Setup)
            .and_then(|o| o.deadline);
        let (timeout, flushed) = (self.timeout, self.flushed);
        for o in self.owed.iter_mut().filter(|o| o.deadline.is_none()) {
            if o.start < flushed {
                o.deadline = Some(now + timeout + o.extra);
            } else if let Some(d) = setup {
                o.deadline = Some(d + o.extra);
            }
        }
    }

    /// Reads what the server sent and hands out the whole replies.
    fn read(&mut self, events: &mut Vec<Event>) -> Result<(), Broken> {
        // On the stack: a run's few replies then touch no new heap pages.
        let mut chunk = [0u8; CHUNK];
        loop {
            let n = match self.read_some(&mut chunk) {
                Ok(0) => {
                    return Err(Broken::Closed {
                        first: !self.answered,
                        reset: false,
                        partial: !self.inbuf.is_empty(),
                    });
                }
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) if e.kind() == io::ErrorKind::ConnectionReset => {
                    return Err(Broken::Closed {
                        first: !self.answered,
                        reset: true,
                        partial: !self.inbuf.is_empty(),
                    });
                }
                // rustls's: an alert after the handshake (TLS 1.3 servers
                // refuse a client certificate then).
                Err(e) if self.tls.is_some() && e.kind() == io::ErrorKind::InvalidData => {
                    return Err(Broken::Tls(e.to_string()));
                }
                Err(e) => return Err(Broken::Io(e.to_string())),
            };
            self.inbuf.extend_from_slice(&chunk[..n]);
            while let Some(len) = self.framer.scan(&self.inbuf)? {
                let value = resp::decode(&self.inbuf[..len])?;
                self.inbuf.drain(..len);
                self.answered = true;
                self.deliver(value, events)?;
            }
        }
    }

    /// Plain bytes from the socket, through rustls where there is TLS.
    fn read_some(&mut self, chunk: &mut [u8]) -> io::Result<usize> {
        let Some(socket) = self.socket.as_mut() else {
            return Err(io::ErrorKind::NotConnected.into());
        };
        let Some(tls) = self.tls.as_mut() else {
            return socket.read(chunk);
        };
        loop {
            match tls.reader().read(chunk) {
                Ok(n) => return Ok(n),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                // The server ended TLS without close_notify: as a close.
                Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(0),
                Err(e) => return Err(e),
            }
            match tls.read_tls(socket)? {
                0 => return Ok(0),
                _ => {
                    tls.process_new_packets()
                        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
                }
            }
        }
    }

    fn deliver(&mut self, value: Value, events: &mut Vec<Event>) -> Result<(), Broken> {
        let Some(front) = self.owed.front_mut() else {
            if self.push {
                events.push(Event::Push(value));
                return Ok(());
            }
            return Err(Broken::Unasked);
        };
        front.got.push(value);
        if front.got.len() < front.replies {
            return Ok(());
        }
        let Some(done) = self.owed.pop_front() else {
            return Ok(());
        };
        if done.tag == Tag::Setup {
            let refused = match done.got.iter().any(|v| matches!(v, Value::ServerError(_))) {
                true => Err("the server refused the set-up"),
                false => (self.check)(&done.got),
            };
            if let Err(why) = refused {
                return Err(Broken::Setup(done.got, why));
            }
            // The requests held behind it go now.
            let held = std::mem::take(&mut self.held);
            self.out.extend_from_slice(&held);
            return Ok(());
        }
        events.push(Event::Answered(done.tag, done.got));
        Ok(())
    }

    /// The link is gone: every owed tag is reported, with whether it may
    /// have been applied.
    fn fail(&mut self, broken: Broken, events: &mut Vec<Event>) {
        let flushed = self.flushed;
        let tags = self
            .owed
            .drain(..)
            .filter(|o| o.tag != Tag::Setup)
            .map(|o| (o.tag, o.start < flushed))
            .collect();
        self.phase = Phase::Down;
        self.out.clear();
        self.held.clear();
        self.socket = None;
        self.tls = None;
        events.push(Event::Failed(broken, tags));
    }

    /// Ends the connection without losing what was written on it: writes
    /// what can be written, reads and drops what the server sent, then ends
    /// our side. Closing a socket with unread data makes the kernel send a
    /// reset, and a reset may make the server drop what it has received
    /// and not yet read: a release just written behind an unanswered
    /// request.
    pub(super) fn close(&mut self, now: Instant) {
        self.finish_waits();
        if matches!(self.phase, Phase::Up) {
            let _ = self.write(now);
            if let (Some(tls), Some(socket)) = (self.tls.as_mut(), self.socket.as_mut()) {
                tls.send_close_notify();
                let _ = tls.write_tls(socket);
            }
        }
        if let Some(socket) = self.socket.as_mut() {
            let mut chunk = [0u8; 4096];
            while matches!(socket.read(&mut chunk), Ok(n) if n > 0) {}
            socket.shutdown_write();
        }
        self.phase = Phase::Down;
    }
}

impl Link {
    /// Waits for the WAITs still owed (`--replicas`), each until its
    /// deadline at most: a server blocked in WAIT that reads the end of the
    /// connection drops the client, and with it a release written behind.
    fn finish_waits(&mut self) {
        let mut events = Vec::new();
        loop {
            let until = self
                .owed
                .iter()
                .filter(|o| o.extra > Duration::ZERO && !o.overdue)
                .filter_map(|o| o.deadline)
                .min();
            let (Some(until), true) = (until, matches!(self.phase, Phase::Up)) else {
                return;
            };
            let now = Instant::now();
            if now >= until {
                return;
            }
            if let Some((fd, flags)) = self.interest() {
                let mut fds = [rustix::event::PollFd::from_borrowed_fd(fd, flags)];
                if let Ok(ts) =
                    rustix::event::Timespec::try_from(until.saturating_duration_since(now))
                {
                    let _ = rustix::event::poll(&mut fds, Some(&ts));
                }
            }
            self.progress(Instant::now(), &mut events);
            events.clear();
        }
    }
}

/// A TCP connect to `addr` started without waiting.
fn start_connect(addr: SocketAddr) -> io::Result<socket2::Socket> {
    let socket = socket2::Socket::new(
        socket2::Domain::for_address(addr),
        socket2::Type::STREAM.nonblocking(),
        None,
    )?;
    match socket.connect(&addr.into()) {
        Ok(()) => Ok(socket),
        Err(e) if e.raw_os_error() == Some(rustix::io::Errno::INPROGRESS.raw_os_error()) => {
            Ok(socket)
        }
        Err(e) => Err(e),
    }
}
