//! A small fake RESP server, for what no real server does: a reply that
//! never ends, a server that answers the set-up and never the request, one
//! that closes in the middle of a reply. Started on a free port like
//! [`RedisNode`](super::RedisNode), stopped on drop.
//!
//! It reads whole requests (RESP arrays of bulk strings, as redlock-run
//! sends them), counts them per connection, and answers as its [`Script`]
//! says.

use std::io::{ErrorKind, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

/// How the fake server answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Script {
    /// Answers the first request with a bulk string of 99 999 999 999
    /// bytes, and streams bytes of it for as long as the client listens.
    EndlessBulk,
    /// Answers the first request with an array of 100 000 000 elements,
    /// and streams `:1` elements for as long as the client listens.
    EndlessArray,
    /// Answers the first request (the set-up: AUTH) with +OK, and never
    /// anything after it.
    SetupThenSilent,
    /// Answers the first request with half a bulk string, then closes.
    CloseMidReply,
    /// Answers the first request with an array of 300 bulk strings of a
    /// megabyte each (a holder record no real one is like), all of it.
    HugeRecord,
    /// Answers every INFO with this text (a server that reports what no
    /// real one does, such as its version), PING with PONG, and every
    /// other request with an error.
    Info(&'static str),
    /// A Cluster's seed stuck in a redirect loop: CLUSTER SLOTS says it
    /// serves every slot, and every other request is answered MOVED to
    /// itself.
    MovedLoop,
}

pub struct FakeServer {
    port: u16,
    stop: Arc<AtomicBool>,
    requests: Arc<AtomicUsize>,
    acceptor: Option<JoinHandle<()>>,
}

impl FakeServer {
    pub fn start(script: Script) -> FakeServer {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind a fake server");
        let port = listener.local_addr().expect("local address").port();
        listener
            .set_nonblocking(true)
            .expect("a non-blocking listener");
        let stop = Arc::new(AtomicBool::new(false));
        let requests = Arc::new(AtomicUsize::new(0));
        let (s, r) = (Arc::clone(&stop), Arc::clone(&requests));
        let acceptor = std::thread::spawn(move || {
            let mut conns = Vec::new();
            while !s.load(Ordering::SeqCst) {
                // In poll(2), not a polling loop; Drop wakes it.
                super::await_readable(listener.as_raw_fd(), Duration::from_millis(200));
                match listener.accept() {
                    Ok(_) if s.load(Ordering::SeqCst) => break,
                    Ok((stream, _)) => {
                        let (s, r) = (Arc::clone(&s), Arc::clone(&r));
                        conns.push(std::thread::spawn(move || serve(stream, script, &s, &r)));
                    }
                    Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                    Err(_) => break,
                }
            }
            for c in conns {
                let _ = c.join();
            }
        });
        FakeServer {
            port,
            stop,
            requests,
            acceptor: Some(acceptor),
        }
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// `redis://127.0.0.1:PORT`, with `userinfo@` when given.
    pub fn url(&self, userinfo: Option<&str>) -> String {
        match userinfo {
            Some(u) => format!("redis://{u}@127.0.0.1:{}", self.port),
            None => format!("redis://127.0.0.1:{}", self.port),
        }
    }

    /// Whole requests read so far, over every connection.
    pub fn requests(&self) -> usize {
        self.requests.load(Ordering::SeqCst)
    }
}

impl Drop for FakeServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = std::net::TcpStream::connect(("127.0.0.1", self.port));
        if let Some(a) = self.acceptor.take() {
            let _ = a.join();
        }
    }
}

/// One connection, as `script` says, until the client goes or the server
/// stops.
fn serve(mut stream: TcpStream, script: Script, stop: &AtomicBool, requests: &AtomicUsize) {
    let _ = stream.set_read_timeout(Some(Duration::from_millis(10)));
    let _ = stream.set_nodelay(true);
    let mut buf = Vec::new();
    let mut answered = 0;
    let mut chunk = [0u8; 4096];
    while !stop.load(Ordering::SeqCst) {
        match stream.read(&mut chunk) {
            Ok(0) => return,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(_) => return,
        }
        while let Some(len) = whole_request(&buf) {
            requests.fetch_add(1, Ordering::SeqCst);
            if let Some(reply) = answer_each(script, &buf[..len], &stream) {
                if stream.write_all(&reply).is_err() {
                    return;
                }
                buf.drain(..len);
                continue;
            }
            buf.drain(..len);
            answered += 1;
            if answered > 1 {
                // The other scripts answer the first request only.
                continue;
            }
            let done = match script {
                Script::EndlessBulk => stream_forever(&mut stream, b"$99999999999\r\n", b"x", stop),
                Script::EndlessArray => {
                    stream_forever(&mut stream, b"*100000000\r\n", b":1\r\n", stop)
                }
                Script::SetupThenSilent => stream.write_all(b"+OK\r\n").is_err(),
                Script::CloseMidReply => {
                    let _ = stream.write_all(b"$10\r\nabc");
                    true
                }
                Script::HugeRecord => {
                    let field = [b'x'; 1 << 20];
                    let mut failed = stream.write_all(b"*300\r\n").is_err();
                    for _ in 0..300 {
                        failed = failed
                            || stream.write_all(b"$1048576\r\n").is_err()
                            || stream.write_all(&field).is_err()
                            || stream.write_all(b"\r\n").is_err();
                    }
                    failed
                }
                Script::Info(_) | Script::MovedLoop => true,
            };
            if done {
                return;
            }
        }
    }
}

/// The answer of the scripts that answer every request (`request` is a
/// whole one), or None for the others.
fn answer_each(script: Script, request: &[u8], stream: &TcpStream) -> Option<Vec<u8>> {
    let words = words_of(request);
    let first = words
        .first()
        .map(|w| w.to_ascii_uppercase())
        .unwrap_or_default();
    let bulk = |text: &[u8]| {
        let mut out = format!("${}\r\n", text.len()).into_bytes();
        out.extend_from_slice(text);
        out.extend_from_slice(b"\r\n");
        out
    };
    match script {
        Script::Info(text) => Some(match first.as_slice() {
            b"INFO" => bulk(text.as_bytes()),
            b"PING" => b"+PONG\r\n".to_vec(),
            _ => b"-ERR unknown command\r\n".to_vec(),
        }),
        Script::MovedLoop => {
            let port = stream.local_addr().ok()?.port();
            let second = words.get(1).map(|w| w.to_ascii_uppercase());
            Some(match (first.as_slice(), second.as_deref()) {
                (b"CLUSTER", Some(b"SLOTS")) => {
                    let mut out = b"*1\r\n*3\r\n:0\r\n:16383\r\n*3\r\n".to_vec();
                    out.extend(bulk(b"127.0.0.1"));
                    out.extend(format!(":{port}\r\n").into_bytes());
                    out.extend(bulk(b"fake-node-id"));
                    out
                }
                (b"PING", _) => b"+PONG\r\n".to_vec(),
                _ => format!("-MOVED 1234 127.0.0.1:{port}\r\n").into_bytes(),
            })
        }
        _ => None,
    }
}

/// The words (bulk strings) of a whole request.
fn words_of(request: &[u8]) -> Vec<Vec<u8>> {
    let mut words = Vec::new();
    let mut rest = request;
    while let Some(end) = rest.windows(2).position(|w| w == b"\r\n") {
        let head = &rest[..end];
        rest = &rest[end + 2..];
        if let Some(len) = head
            .strip_prefix(b"$")
            .and_then(|n| std::str::from_utf8(n).ok())
            .and_then(|n| n.parse::<usize>().ok())
        {
            let Some(word) = rest.get(..len) else { break };
            words.push(word.to_vec());
            rest = rest.get(len + 2..).unwrap_or_default();
        }
    }
    words
}

/// Writes `head`, then `unit` over and over until the client goes or the
/// server stops; true when the connection is done.
fn stream_forever(stream: &mut TcpStream, head: &[u8], unit: &[u8], stop: &AtomicBool) -> bool {
    if stream.write_all(head).is_err() {
        return true;
    }
    let _ = stream.set_write_timeout(Some(Duration::from_millis(10)));
    let block: Vec<u8> = unit.iter().copied().cycle().take(64 * 1024).collect();
    while !stop.load(Ordering::SeqCst) {
        match stream.write(&block) {
            Ok(_) => {}
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(_) => return true,
        }
    }
    true
}

/// The length of the first whole request in `buf` (an array of bulk
/// strings), if it is all there.
fn whole_request(buf: &[u8]) -> Option<usize> {
    let line = |at: usize| -> Option<(usize, &[u8])> {
        let end = buf.get(at..)?.windows(2).position(|w| w == b"\r\n")? + at;
        Some((end + 2, &buf[at..end]))
    };
    let (mut at, head) = line(0)?;
    let n: usize = std::str::from_utf8(head.strip_prefix(b"*")?)
        .ok()?
        .parse()
        .ok()?;
    for _ in 0..n {
        let (next, head) = line(at)?;
        let len: usize = std::str::from_utf8(head.strip_prefix(b"$")?)
            .ok()?
            .parse()
            .ok()?;
        at = next + len + 2;
        if buf.len() < at {
            return None;
        }
    }
    Some(at)
}
