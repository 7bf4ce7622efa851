//! redlock-run's own connection to a plain Redis server (TCP or a Unix
//! socket, RESP2), for `redis://` and `unix://` nodes and the primaries a
//! Sentinel group names. The crate's connection cannot do two things the
//! lock needs from a node that stops answering:
//!
//! - stay usable after a read timed out: here every request's reply is
//!   counted, and replies owed to requests given up on are read and
//!   discarded before the next request's own;
//! - take a request from another thread while its worker waits for a reply:
//!   the socket's writing half sits in the node's `Line`, so a release can
//!   be written behind an acquire still unanswered, on the same connection,
//!   and a node that resumes applies the two in order (see
//!   `Node::write_behind`).
//!
//! TLS (`rediss://`), `protocol=resp3` and Redis Cluster stay on the crate's
//! connections: a release behind an unanswered request there is queued on
//! the node's worker and lost if the process ends first, so a stopped node
//! keeps that copy of the lock until its TTL.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::net::UnixStream;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use redis::{ConnectionLike, RedisResult, Value};

use super::error::NotRedis;
use super::lock;

/// A connected socket, either kind.
pub(super) enum Stream {
    Tcp(TcpStream),
    Unix(UnixStream),
}

impl Stream {
    fn try_clone(&self) -> io::Result<Stream> {
        Ok(match self {
            Stream::Tcp(s) => Stream::Tcp(s.try_clone()?),
            Stream::Unix(s) => Stream::Unix(s.try_clone()?),
        })
    }

    fn set_read_timeout(&self, d: Duration) -> io::Result<()> {
        let d = Some(d.max(Duration::from_micros(1)));
        match self {
            Stream::Tcp(s) => s.set_read_timeout(d),
            Stream::Unix(s) => s.set_read_timeout(d),
        }
    }

    fn set_write_timeout(&self, d: Duration) -> io::Result<()> {
        let d = Some(d.max(Duration::from_micros(1)));
        match self {
            Stream::Tcp(s) => s.set_write_timeout(d),
            Stream::Unix(s) => s.set_write_timeout(d),
        }
    }

    fn fd(&self) -> RawFd {
        match self {
            Stream::Tcp(s) => s.as_raw_fd(),
            Stream::Unix(s) => s.as_raw_fd(),
        }
    }
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.read(buf),
            Stream::Unix(s) => s.read(buf),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.write(buf),
            Stream::Unix(s) => s.write(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Connects to the first of `addrs` that answers, all of them within
/// `timeout` together: a name with several addresses costs one node timeout
/// at most, not one per address.
pub(super) fn connect_tcp(addrs: &[SocketAddr], timeout: Duration) -> io::Result<Stream> {
    let until = Instant::now() + timeout;
    let mut last = io::Error::new(io::ErrorKind::NotFound, "no address");
    for addr in addrs {
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::Error::new(io::ErrorKind::TimedOut, "connect timed out"));
        }
        match TcpStream::connect_timeout(addr, left) {
            Ok(s) => {
                s.set_nodelay(true)?;
                return Ok(Stream::Tcp(s));
            }
            Err(e) => last = e,
        }
    }
    Err(last)
}

/// A TCP connect under way without blocking, for a round that drives several
/// nodes from one thread (see `node::polled`): each node's handshake runs
/// while the others' do.
pub(super) struct Connecting(socket2::Socket);

impl Connecting {
    /// Starts connecting to `addr`; an error here (no route, refused at once)
    /// is the connect's.
    pub(super) fn start(addr: SocketAddr) -> io::Result<Connecting> {
        let socket = socket2::Socket::new(
            socket2::Domain::for_address(addr),
            socket2::Type::STREAM,
            None,
        )?;
        socket.set_nonblocking(true)?;
        match socket.connect(&addr.into()) {
            Ok(()) => {}
            Err(e) if e.raw_os_error() == Some(libc::EINPROGRESS) => {}
            Err(e) => return Err(e),
        }
        Ok(Connecting(socket))
    }

    pub(super) fn fd(&self) -> RawFd {
        self.0.as_raw_fd()
    }

    /// Once poll(2) says the socket is writable: the connection, or why the
    /// connect failed.
    pub(super) fn finish(self) -> io::Result<Stream> {
        if let Some(e) = self.0.take_error()? {
            return Err(e);
        }
        // Reads and writes from here on block, bounded by their timeouts, as
        // on every other connection.
        self.0.set_nonblocking(false)?;
        self.0.set_tcp_nodelay(true)?;
        Ok(Stream::Tcp(self.0.into()))
    }
}

pub(super) fn connect_unix(path: &std::path::Path) -> io::Result<Stream> {
    UnixStream::connect(path).map(Stream::Unix)
}

/// The writing half of a node's connection, and what the node's requests
/// have put on it (shared by the node and its session).
#[derive(Default)]
pub(super) struct Line {
    writer: Option<Writer>,
    /// Requests of jobs numbered below this must not be written any more: a
    /// release went out behind them (see `Node::write_behind`).
    barrier: u64,
    /// One more than the last job number that has written a request.
    written: u64,
    /// Connections made, to tell a connection's own writer from a later one.
    made: u64,
}

struct Writer {
    stream: Stream,
    of: u64,
    /// Requests written (or held, see `held`) on this connection.
    sent: u64,
    /// The connection's set-up, not written yet: it goes out ahead of the
    /// first request, in the same write. One segment, not several: a node
    /// far away gets the request a round trip sooner than if a set-up
    /// packet and the request could be delayed apart.
    held: Vec<u8>,
}

impl Writer {
    /// Takes `bytes` (`count` requests) to go out with the next write: the
    /// number of the first.
    fn hold(&mut self, bytes: &[u8], count: u64) -> u64 {
        self.held.extend_from_slice(bytes);
        self.sent += count;
        self.sent - count
    }

    /// Writes `bytes`, behind whatever set-up is held.
    fn send(&mut self, bytes: &[u8]) -> io::Result<()> {
        if self.held.is_empty() {
            return self.stream.write_all(bytes);
        }
        let mut all = std::mem::take(&mut self.held);
        all.extend_from_slice(bytes);
        self.stream.write_all(&all)
    }
}

impl Line {
    /// Writes `bytes` for job `job` behind whatever the connection has in
    /// flight, without waiting for the reply, and keeps jobs numbered up to
    /// `job` from writing after it. False when there is no connection to
    /// write on (or the write failed).
    pub(super) fn write_behind(&mut self, job: u64, bytes: &[u8]) -> bool {
        if self.written > job {
            return true;
        }
        let Some(w) = self.writer.as_mut() else {
            // No connection (yet): whatever was submitted before `job` and
            // has not been written must not be any more, or it could land
            // (an acquire whose worker is still connecting) with nothing
            // behind it to undo it; `job` itself stays queued.
            self.barrier = self.barrier.max(job);
            return false;
        };
        if w.send(bytes).is_err() {
            self.writer = None;
            self.barrier = self.barrier.max(job);
            return false;
        }
        w.sent += 1;
        self.barrier = self.barrier.max(job + 1);
        self.written = self.written.max(job + 1);
        true
    }

    /// Whether job `job` has written a request already.
    #[cfg(test)]
    pub(super) fn wrote(&self, job: u64) -> bool {
        self.written > job
    }

    /// Before the process ends: reads (without waiting) what the server
    /// sent and nobody read, then ends our side. Closing a socket with
    /// unread data makes the kernel send a reset, and a reset may make the
    /// server drop what it has received and not yet read: a release just
    /// written behind. With the data read and our side shut, the server gets
    /// the release, then an orderly end.
    pub(super) fn close(&mut self) {
        if let Some(w) = self.writer.take() {
            let fd = w.stream.fd();
            let mut buf = [0u8; 4096];
            loop {
                // SAFETY: fd is an open socket owned by `w`, buf is valid
                // for its length.
                let n = unsafe {
                    libc::recv(fd, buf.as_mut_ptr().cast(), buf.len(), libc::MSG_DONTWAIT)
                };
                if n <= 0 {
                    break;
                }
            }
            // SAFETY: as above; shutdown does not free the descriptor.
            unsafe {
                libc::shutdown(fd, libc::SHUT_WR);
            }
            // The descriptor stays open until exit, with the reading half
            // (the session's) still on it.
            std::mem::forget(w);
        }
    }
}

/// The reading half, held by the node's session: one request at a time.
pub(super) struct Wire {
    stream: Stream,
    line: Arc<Mutex<Line>>,
    of: u64,
    buf: Vec<u8>,
    /// Replies read on this connection.
    read: u64,
    /// The job whose requests this is writing now (see `Line::barrier`).
    pub(super) job: u64,
    /// Bound on each request's reply (the node timeout, or WAIT's longer one).
    pub(super) timeout: Duration,
    /// The last request was refused: a release went out behind it.
    pub(super) superseded: bool,
    db: i64,
    /// The number of the reply that answers `INFO server`, written with the
    /// connection's set-up (see `ask_run_id`).
    info_at: Option<u64>,
    /// The server's `run_id`, once that reply has been read.
    pub(super) run_id: Option<String>,
    /// How the next request is made (see `Mode`).
    pub(super) mode: Mode,
    /// A read error met by `fill`, handed to the next read for its wording.
    failed: Option<io::Error>,
}

/// How a request on the wire is made: at once, or in two halves by a round
/// that drives several nodes from one thread (see `node::polled`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Mode {
    /// Written, and its replies read before the call returns.
    Live,
    /// The first request is written and the call returns `DEFERRED` at once;
    /// its replies are read later, in `Replay`.
    Record,
    /// Requests `first .. first + count` were written in `Record`; any
    /// further request of the same operation is not written.
    Sent { first: u64, count: u64 },
    /// The next request is the one written as `first .. first + count`: it is
    /// not written again, its replies are read (the operation runs a second
    /// time, now with its answer at hand). Later requests are live.
    Replay { first: u64, count: u64 },
}

/// The error a request made in `Mode::Record` ends with: it went out, and
/// its answer is read later.
pub(super) const DEFERRED: &str = "request sent, its reply read later";

impl Wire {
    /// Takes over a fresh connection: its writing half goes to `line`.
    pub(super) fn new(
        stream: Stream,
        line: &Arc<Mutex<Line>>,
        timeout: Duration,
        db: i64,
    ) -> io::Result<Wire> {
        stream.set_write_timeout(timeout)?;
        let writer = stream.try_clone()?;
        let mut l = lock(line);
        l.made += 1;
        let of = l.made;
        l.writer = Some(Writer {
            stream: writer,
            of,
            sent: 0,
            held: Vec::new(),
        });
        drop(l);
        Ok(Wire {
            stream,
            line: Arc::clone(line),
            of,
            buf: Vec::new(),
            read: 0,
            job: 0,
            timeout,
            superseded: false,
            db,
            info_at: None,
            run_id: None,
            mode: Mode::Live,
            failed: None,
        })
    }

    /// The socket, for poll(2).
    pub(super) fn fd(&self) -> RawFd {
        self.stream.fd()
    }

    /// Takes in, without waiting, whatever the server has sent. False once
    /// nothing more will come (the connection ended or failed: the next read
    /// says how).
    pub(super) fn fill(&mut self) -> bool {
        let mut chunk = [0u8; 16 * 1024];
        loop {
            // SAFETY: the descriptor is this wire's open socket, and `chunk`
            // is valid for its length.
            let n = unsafe {
                libc::recv(
                    self.stream.fd(),
                    chunk.as_mut_ptr().cast(),
                    chunk.len(),
                    libc::MSG_DONTWAIT,
                )
            };
            match n {
                0 => return false,
                n if n > 0 => {
                    let n = usize::try_from(n).unwrap_or(0);
                    self.buf.extend_from_slice(&chunk[..n]);
                }
                _ => {
                    let e = io::Error::last_os_error();
                    match e.kind() {
                        io::ErrorKind::WouldBlock => return true,
                        io::ErrorKind::Interrupted => {}
                        _ => {
                            self.failed = Some(e);
                            return false;
                        }
                    }
                }
            }
        }
    }

    /// Whether the replies up to request `upto` (exclusive) are all in the
    /// buffer, or what is there is no Redis reply at all: either way a read
    /// of them returns without waiting.
    pub(super) fn has_replies(&self, upto: u64) -> bool {
        if self.failed.is_some() || not_resp(&self.buf).is_some() {
            return true;
        }
        let (mut at, mut n) = (0, self.read);
        while n < upto {
            match frame_len(&self.buf[at..]) {
                Some(len) => {
                    at += len;
                    n += 1;
                }
                None => return false,
            }
        }
        true
    }

    /// Asks for `INFO server` without waiting for its reply: it comes back
    /// ahead of the reply to the next request on this connection, which
    /// then knows the server's `run_id` at no round trip of its own. False
    /// when the connection is gone (the next request will say why).
    pub(super) fn ask_run_id(&mut self) -> bool {
        let mut l = lock(&self.line);
        let Some(w) = l.writer.as_mut().filter(|w| w.of == self.of) else {
            return false;
        };
        self.info_at = Some(w.hold(INFO_SERVER, 1));
        true
    }

    /// The connection's set-up (`count` requests: AUTH, SELECT), written
    /// and answered before anything else goes out: Redis runs each command
    /// of a pipeline on its own, so a request written behind a refused AUTH
    /// would run as the default user, and one behind a refused SELECT in
    /// database 0. The replies, errors included, in order.
    pub(super) fn setup(&mut self, bytes: &[u8], count: usize) -> RedisResult<Vec<Value>> {
        if count == 0 {
            return Ok(Vec::new());
        }
        self.request(bytes, count)
    }

    /// The session is done with this connection after an error: a reset or
    /// closed one takes its writing half along, so that nothing is written
    /// behind on a dead socket; one that only stopped answering (a Sentinel
    /// group's primary, which is looked up again) leaves it, so that a
    /// release still goes out behind the unanswered request.
    pub(super) fn discard(self, keep_writer: bool) {
        let mut l = lock(&self.line);
        if !keep_writer && l.writer.as_ref().is_some_and(|w| w.of == self.of) {
            l.writer = None;
        }
    }

    /// Writes `bytes` (`count` requests) and returns their replies, reading
    /// past the replies owed to earlier requests given up on.
    fn request(&mut self, bytes: &[u8], count: usize) -> RedisResult<Vec<Value>> {
        let until = Instant::now() + self.timeout;
        let first = match self.mode {
            Mode::Sent { .. } => return Err(io::Error::other(DEFERRED).into()),
            Mode::Replay { first, count: sent } => {
                self.mode = Mode::Live;
                if sent != count as u64 || self.read > first {
                    return Err(io::Error::other("the reply was not kept for this request").into());
                }
                return self.replies(first, count, until);
            }
            Mode::Live | Mode::Record => self.write(bytes, count)?,
        };
        if self.mode == Mode::Record {
            self.mode = Mode::Sent {
                first,
                count: count as u64,
            };
            return Err(io::Error::other(DEFERRED).into());
        }
        self.replies(first, count, until)
    }

    /// Writes `bytes` (`count` requests) behind what the connection has in
    /// flight: the number of the first.
    fn write(&mut self, bytes: &[u8], count: usize) -> RedisResult<u64> {
        self.superseded = false;
        let first = {
            let mut l = lock(&self.line);
            if self.job < l.barrier {
                self.superseded = true;
                return Err(io::Error::other("a release was written behind this request").into());
            }
            let job = self.job;
            let Some(w) = l.writer.as_mut().filter(|w| w.of == self.of) else {
                return Err(
                    io::Error::new(io::ErrorKind::NotConnected, "connection closed").into(),
                );
            };
            let first = w.sent;
            if let Err(e) = w.send(bytes) {
                l.writer = None;
                return Err(e.into());
            }
            w.sent += count as u64;
            l.written = l.written.max(job + 1);
            first
        };
        Ok(first)
    }

    /// The replies to requests `first .. first + count`, read by `until`
    /// past those owed to earlier requests given up on.
    fn replies(&mut self, first: u64, count: usize, until: Instant) -> RedisResult<Vec<Value>> {
        let mut replies = Vec::with_capacity(count);
        while self.read < first + count as u64 {
            let v = self.next(until)?;
            if self.info_at == Some(self.read) {
                self.run_id = run_id_of(&v);
            }
            self.read += 1;
            if self.read > first {
                replies.push(v);
            }
        }
        Ok(replies)
    }

    /// The next whole reply, read by `until`. A timeout leaves what was read
    /// of a reply in the buffer: the connection stays usable.
    fn next(&mut self, until: Instant) -> RedisResult<Value> {
        loop {
            if let Some(what) = not_resp(&self.buf) {
                return Err(io::Error::new(io::ErrorKind::InvalidData, NotRedis(what)).into());
            }
            if let Some(len) = frame_len(&self.buf) {
                let v = redis::parse_redis_value(&self.buf[..len]);
                self.buf.drain(..len);
                return v;
            }
            if let Some(e) = self.failed.take() {
                return Err(e.into());
            }
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(io::Error::new(io::ErrorKind::TimedOut, "read timed out").into());
            }
            self.stream.set_read_timeout(left)?;
            let mut chunk = [0u8; 16 * 1024];
            match self.stream.read(&mut chunk) {
                Ok(0) if self.read == 0 && self.buf.is_empty() => {
                    return Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        NotRedis(format!("closed the connection without a reply: {SILENT}")),
                    )
                    .into());
                }
                Ok(0) => {
                    return Err(
                        io::Error::new(io::ErrorKind::UnexpectedEof, "connection closed").into(),
                    );
                }
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                // Stopped and continued (SIGSTOP/SIGCONT): read on.
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    return Err(io::Error::new(io::ErrorKind::TimedOut, e.to_string()).into());
                }
                Err(e)
                    if e.kind() == io::ErrorKind::ConnectionReset
                        && self.read == 0
                        && self.buf.is_empty() =>
                {
                    return Err(io::Error::new(
                        io::ErrorKind::ConnectionReset,
                        NotRedis(format!("reset the connection without a reply: {SILENT}")),
                    )
                    .into());
                }
                Err(e) => return Err(e.into()),
            }
        }
    }
}

impl ConnectionLike for Wire {
    fn req_packed_command(&mut self, cmd: &[u8]) -> RedisResult<Value> {
        let mut replies = self.request(cmd, 1)?;
        Ok(replies.pop().unwrap_or(Value::Nil))
    }

    fn req_packed_commands(
        &mut self,
        cmd: &[u8],
        offset: usize,
        count: usize,
    ) -> RedisResult<Vec<Value>> {
        let replies = self.request(cmd, offset + count)?;
        Ok(replies.into_iter().skip(offset).collect())
    }

    fn get_db(&self) -> i64 {
        self.db
    }

    fn check_connection(&mut self) -> bool {
        true
    }

    fn is_open(&self) -> bool {
        true
    }
}

const INFO_SERVER: &[u8] = b"*2\r\n$4\r\nINFO\r\n$6\r\nserver\r\n";

/// The `run_id` in a reply to `INFO server`; None from an error (INFO
/// renamed away, or refused by an ACL) or a server that does not say.
pub(super) fn run_id_of(v: &Value) -> Option<String> {
    let Value::BulkString(text) = v else {
        return None;
    };
    std::str::from_utf8(text)
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("run_id:"))
        .map(|id| id.trim().to_string())
        .filter(|id| !id.is_empty())
}

/// What a server that ends a fresh connection without a word may be.
const SILENT: &str = "it does not seem to speak the Redis protocol (another service on that \
                      port, or a TLS port that wants rediss://?)";

/// What is wrong when `buf` starts with what no Redis reply starts with (a
/// web server's `HTTP/1.1 400 Bad Request`, an SSH banner, a TLS alert):
/// one clause, showing the start of the answer.
fn not_resp(buf: &[u8]) -> Option<String> {
    let first = *buf.first()?;
    // RESP2's reply types, and RESP3's.
    if b"+-:$*_,#!=(%~>|".contains(&first) {
        return None;
    }
    if matches!(first, 0x15 | 0x16) && buf.get(1) == Some(&0x03) {
        return Some("answered in TLS: it wants rediss://".into());
    }
    let line = buf
        .split(|b| *b == b'\r' || *b == b'\n')
        .next()
        .unwrap_or(buf);
    let text: String = String::from_utf8_lossy(line)
        .chars()
        .take(60)
        .map(|c| if c.is_control() { '?' } else { c })
        .collect();
    Some(format!(
        "does not speak the Redis protocol: it answered \"{text}\" (another service on that \
         port?)"
    ))
}

/// The length of the first whole RESP2 reply in `buf`, if it is all there.
pub(super) fn frame_len(buf: &[u8]) -> Option<usize> {
    let mut pos = 0;
    // Values still to be read before the reply is whole.
    let mut todo: u64 = 1;
    while todo > 0 {
        let line_end = pos + buf.get(pos..)?.windows(2).position(|w| w == b"\r\n")?;
        let kind = *buf.get(pos)?;
        let head = std::str::from_utf8(&buf[pos + 1..line_end]).ok();
        pos = line_end + 2;
        todo -= 1;
        match kind {
            b'+' | b'-' | b':' => {}
            b'$' => {
                let n: i64 = head?.parse().ok()?;
                if n >= 0 {
                    let n = usize::try_from(n).ok()?;
                    if buf.len() < pos + n + 2 {
                        return None;
                    }
                    pos += n + 2;
                }
            }
            b'*' => {
                let n: i64 = head?.parse().ok()?;
                if n > 0 {
                    todo += u64::try_from(n).ok()?;
                }
            }
            // Not RESP2: hand the rest to the parser, which will say what
            // is wrong with it.
            _ => return Some(buf.len()),
        }
    }
    Some(pos)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_no_redis_reply_starts_with_is_named() {
        assert_eq!(not_resp(b""), None);
        for reply in [
            &b"+OK\r\n"[..],
            b"-ERR x\r\n",
            b":1\r\n",
            b"$-1\r\n",
            b"*0\r\n",
        ] {
            assert_eq!(not_resp(reply), None, "{reply:?}");
        }
        assert_eq!(
            not_resp(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n").as_deref(),
            Some(
                "does not speak the Redis protocol: it answered \"HTTP/1.1 400 Bad Request\" \
                 (another service on that port?)"
            )
        );
        let ssh = not_resp(b"SSH-2.0-OpenSSH_9.2p1\x07\r\n").expect("not redis");
        assert!(ssh.contains("\"SSH-2.0-OpenSSH_9.2p1?\""), "{ssh}");
        assert_eq!(
            not_resp(&[0x15, 0x03, 0x03, 0x00, 0x02, 0x02, 0x32]).as_deref(),
            Some("answered in TLS: it wants rediss://")
        );
    }

    #[test]
    fn frames_are_whole_or_nothing() {
        for whole in [
            &b"+OK\r\n"[..],
            b"-ERR no\r\n",
            b":12\r\n",
            b"$-1\r\n",
            b"$3\r\na\r\n\r\n",
            b"*-1\r\n",
            b"*0\r\n",
            b"*3\r\n:1\r\n$2\r\nab\r\n*2\r\n$0\r\n\r\n:5\r\n",
        ] {
            assert_eq!(frame_len(whole), Some(whole.len()), "{whole:?}");
            for cut in 0..whole.len() {
                assert_eq!(frame_len(&whole[..cut]), None, "{:?}", &whole[..cut]);
            }
            let mut two = whole.to_vec();
            two.extend_from_slice(b":7\r\n");
            assert_eq!(frame_len(&two), Some(whole.len()));
        }
    }

    #[test]
    fn a_timed_out_reply_is_discarded_by_the_next_request() {
        let server = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = server.local_addr().expect("addr");
        let peer = std::thread::spawn(move || {
            let (mut s, _) = server.accept().expect("accept");
            let mut got = Vec::new();
            let mut buf = [0u8; 64];
            // Two requests, then both replies, the first one late.
            while got.windows(2).filter(|w| w == b"\r\n").count() < 2 {
                let n = s.read(&mut buf).expect("read");
                got.extend_from_slice(&buf[..n]);
            }
            s.write_all(b":1\r\n:2\r\n").expect("write");
            got
        });
        let line = Arc::new(Mutex::new(Line::default()));
        let stream = connect_tcp(&[addr], Duration::from_secs(1)).expect("connect");
        let mut wire = Wire::new(stream, &line, Duration::from_millis(30), 0).expect("wire");
        // The server answers nothing until it has both: the first times out.
        let first = wire.req_packed_command(b"A\r\n");
        assert!(first.is_err_and(|e| e.is_timeout()));
        wire.timeout = Duration::from_secs(2);
        assert_eq!(
            wire.req_packed_command(b"B\r\n").expect("reply"),
            Value::Int(2)
        );
        assert_eq!(peer.join().expect("peer"), b"A\r\nB\r\n");
    }

    #[test]
    fn the_run_id_is_read_ahead_of_the_first_reply() {
        let server = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = server.local_addr().expect("addr");
        let peer = std::thread::spawn(move || {
            let (mut s, _) = server.accept().expect("accept");
            let mut got = Vec::new();
            let mut buf = [0u8; 64];
            while !got.ends_with(b"A\r\n") {
                let n = s.read(&mut buf).expect("read");
                got.extend_from_slice(&buf[..n]);
            }
            let info = "# Server\r\nredis_version:7.0.0\r\nrun_id:0123abcd\r\n";
            let reply = format!("${}\r\n{info}\r\n:7\r\n", info.len());
            s.write_all(reply.as_bytes()).expect("write");
            got
        });
        let line = Arc::new(Mutex::new(Line::default()));
        let stream = connect_tcp(&[addr], Duration::from_secs(1)).expect("connect");
        let mut wire = Wire::new(stream, &line, Duration::from_secs(2), 0).expect("wire");
        assert!(wire.ask_run_id());
        assert_eq!(wire.run_id, None);
        assert_eq!(
            wire.req_packed_command(b"A\r\n").expect("reply"),
            Value::Int(7)
        );
        assert_eq!(wire.run_id.as_deref(), Some("0123abcd"));
        let mut sent = INFO_SERVER.to_vec();
        sent.extend_from_slice(b"A\r\n");
        assert_eq!(peer.join().expect("peer"), sent);
        assert_eq!(run_id_of(&Value::SimpleString("OK".into())), None);
    }

    /// A server at a free port that reads until it has seen `requests`
    /// CRLF-ended lines, then answers `reply` at once; what it read.
    fn peer(
        requests: usize,
        reply: &'static [u8],
    ) -> (SocketAddr, std::thread::JoinHandle<Vec<u8>>) {
        let server = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = server.local_addr().expect("addr");
        let peer = std::thread::spawn(move || {
            let (mut s, _) = server.accept().expect("accept");
            let mut got = Vec::new();
            let mut buf = [0u8; 64];
            while got.windows(2).filter(|w| w == b"\r\n").count() < requests {
                let n = s.read(&mut buf).expect("read");
                got.extend_from_slice(&buf[..n]);
            }
            s.write_all(reply).expect("write");
            // Held open until the client has read.
            let _ = s.read(&mut buf);
            got
        });
        (addr, peer)
    }

    #[test]
    fn a_recorded_request_is_written_at_once_and_answered_on_replay() {
        let (addr, peer) = peer(2, b":1\r\n:2\r\n");
        let line = Arc::new(Mutex::new(Line::default()));
        let stream = connect_tcp(&[addr], Duration::from_secs(1)).expect("connect");
        let mut wire = Wire::new(stream, &line, Duration::from_secs(2), 0).expect("wire");
        wire.mode = Mode::Record;
        let err = wire.req_packed_command(b"A\r\n").expect_err("deferred");
        assert!(err.to_string().contains(DEFERRED), "{err}");
        assert_eq!(wire.mode, Mode::Sent { first: 0, count: 1 });
        // A second request of the same operation is not written.
        assert!(wire.req_packed_command(b"X\r\n").is_err());
        wire.mode = Mode::Live;
        // Another request goes out behind it; the server answers both.
        assert!(lock(&line).write_behind(5, b"B\r\n"));
        let until = Instant::now() + Duration::from_secs(2);
        while !wire.has_replies(1) && Instant::now() < until {
            assert!(wire.fill());
        }
        assert!(wire.has_replies(1));
        wire.mode = Mode::Replay { first: 0, count: 1 };
        assert_eq!(
            wire.req_packed_command(b"A\r\n").expect("reply"),
            Value::Int(1)
        );
        assert_eq!(wire.mode, Mode::Live);
        drop(wire);
        lock(&line).close();
        assert_eq!(peer.join().expect("peer"), b"A\r\nB\r\n");
    }

    #[test]
    fn the_setup_is_answered_before_any_request_is_written() {
        let (addr, peer) = peer(1, b"-WRONGPASS invalid username-password pair\r\n");
        let line = Arc::new(Mutex::new(Line::default()));
        let stream = connect_tcp(&[addr], Duration::from_secs(1)).expect("connect");
        let mut wire = Wire::new(stream, &line, Duration::from_secs(2), 0).expect("wire");
        let replies = wire.setup(b"AUTH\r\n", 1).expect("answered");
        assert!(
            matches!(&replies[..], [Value::ServerError(e)] if e.code() == "WRONGPASS"),
            "{replies:?}"
        );
        drop(wire);
        lock(&line).close();
        // Nothing but the set-up reached the server.
        assert_eq!(peer.join().expect("peer"), b"AUTH\r\n");
    }

    #[test]
    fn several_silent_addresses_take_one_timeout_in_all() {
        // TEST-NET-1 (RFC 5737): nothing answers there; a SYN goes unanswered
        // or the network is unreachable at once.
        let silent: Vec<SocketAddr> = (1..=4)
            .map(|i| SocketAddr::from(([192, 0, 2, i], 6379)))
            .collect();
        let started = Instant::now();
        assert!(connect_tcp(&silent, Duration::from_millis(150)).is_err());
        assert!(
            started.elapsed() < Duration::from_millis(400),
            "{:?} for four addresses",
            started.elapsed()
        );
    }

    #[test]
    fn jobs_behind_a_written_release_are_not_written() {
        let server = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = server.local_addr().expect("addr");
        let line = Arc::new(Mutex::new(Line::default()));
        let stream = connect_tcp(&[addr], Duration::from_secs(1)).expect("connect");
        let mut wire = Wire::new(stream, &line, Duration::from_millis(10), 0).expect("wire");
        assert!(lock(&line).write_behind(3, b"R\r\n"));
        assert!(lock(&line).wrote(3));
        wire.job = 2;
        assert!(wire.req_packed_command(b"A\r\n").is_err());
        assert!(wire.superseded);
        let (mut s, _) = server.accept().expect("accept");
        s.set_read_timeout(Some(Duration::from_millis(100)))
            .expect("timeout");
        let mut buf = [0u8; 16];
        let n = s.read(&mut buf).expect("read");
        assert_eq!(&buf[..n], b"R\r\n");
    }
}
