//! A small HTTP(S) server on loopback for the ping tests. It records every
//! request (method, path, query, body, when it came and when it was
//! answered) and answers as told: at once, after a delay, or never (it
//! accepts and reads, and keeps the connection open without a word).
//! [`PingServer::tls`] serves HTTPS with a certificate of the test's
//! [`Certs`]. As a proxy, it answers CONNECT with a tunnel to itself, so
//! that the requests that follow on the connection are recorded too;
//! [`Request::target`] keeps each target as it came (`host:port` for
//! CONNECT).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::Certs;

/// How the server answers each request.
#[derive(Clone, Copy, Debug)]
pub enum Answer {
    /// 200 OK at once.
    Now,
    /// This status at once.
    Status(u16),
    /// 200 OK after this long.
    After(Duration),
    /// Never: the connection stays open, and silent.
    Never,
}

/// One request the server got.
#[derive(Clone, Debug)]
pub struct Request {
    pub method: String,
    /// The request target as sent: a path, or an absolute URL (to a proxy).
    pub target: String,
    /// The target's path, without the query.
    pub path: String,
    /// The query, without `?` ("" for none).
    pub query: String,
    pub body: String,
    /// When its last byte came.
    pub at: Instant,
    /// When it was answered; None if not (yet).
    pub answered: Option<Instant>,
}

impl Request {
    /// The value of `name` in the query.
    pub fn param(&self, name: &str) -> Option<&str> {
        self.query
            .split('&')
            .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))
    }
}

/// The server; it stops (and drops its connections) on drop.
pub struct PingServer {
    port: u16,
    https: bool,
    requests: Arc<Mutex<Vec<Request>>>,
    stop: Arc<AtomicBool>,
}

type Tls = Arc<rustls::ServerConfig>;

impl PingServer {
    /// Plain HTTP, answering 200 at once.
    pub fn start() -> PingServer {
        PingServer::with(Answer::Now)
    }

    /// Plain HTTP, answering as `answer` says.
    pub fn with(answer: Answer) -> PingServer {
        PingServer::serve(answer, None)
    }

    /// HTTPS with `certs`' `server` certificate (for 127.0.0.1 and
    /// localhost, from `ca`).
    pub fn tls(certs: &Certs, answer: Answer) -> PingServer {
        use rustls::pki_types::pem::PemObject;
        use rustls::pki_types::{CertificateDer, PrivateKeyDer};
        let chain = CertificateDer::pem_file_iter(certs.pem("server"))
            .expect("server certificate")
            .collect::<Result<Vec<_>, _>>()
            .expect("server certificate");
        let key = PrivateKeyDer::from_pem_file(certs.key("server")).expect("server key");
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("TLS versions")
            .with_no_client_auth()
            .with_single_cert(chain, key)
            .expect("server TLS configuration");
        PingServer::serve(answer, Some(Arc::new(config)))
    }

    fn serve(answer: Answer, tls: Option<Tls>) -> PingServer {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind a loopback port");
        listener
            .set_nonblocking(true)
            .expect("non-blocking listener");
        let port = listener.local_addr().expect("local address").port();
        let requests = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let server = PingServer {
            port,
            https: tls.is_some(),
            requests: Arc::clone(&requests),
            stop: Arc::clone(&stop),
        };
        std::thread::spawn(move || {
            while !stop.load(Ordering::SeqCst) {
                // In poll(2), not a polling loop; Drop wakes it.
                super::await_readable(listener.as_raw_fd(), Duration::from_millis(200));
                match listener.accept() {
                    Ok(_) if stop.load(Ordering::SeqCst) => break,
                    Ok((stream, _)) => {
                        let (requests, stop, tls) =
                            (Arc::clone(&requests), Arc::clone(&stop), tls.clone());
                        std::thread::spawn(move || {
                            let _ = stream.set_nonblocking(false);
                            connection(stream, tls, answer, &requests, &stop);
                        });
                    }
                    Err(_) => {}
                }
            }
        });
        server
    }

    /// `http(s)://127.0.0.1:PORT/<path>`.
    pub fn url(&self, path: &str) -> String {
        let scheme = if self.https { "https" } else { "http" };
        format!("{scheme}://127.0.0.1:{}/{path}", self.port)
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// Every request so far, in the order they came.
    pub fn requests(&self) -> Vec<Request> {
        self.requests
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// The requests once there are `n` (or after `limit`, whatever came).
    pub fn await_requests(&self, n: usize, limit: Duration) -> Vec<Request> {
        super::wait_until(limit, || self.requests().len() >= n);
        self.requests()
    }
}

impl Drop for PingServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect(("127.0.0.1", self.port));
    }
}

/// Reads requests on one connection and answers them, until it closes.
fn connection(
    stream: TcpStream,
    tls: Option<Tls>,
    answer: Answer,
    requests: &Mutex<Vec<Request>>,
    stop: &AtomicBool,
) {
    let _ = stream.set_read_timeout(Some(Duration::from_millis(200)));
    let io: Box<dyn ReadWrite> = match tls {
        Some(config) => match rustls::ServerConnection::new(config) {
            Ok(conn) => Box::new(rustls::StreamOwned::new(conn, stream)),
            Err(_) => return,
        },
        None => Box::new(stream),
    };
    let mut io = BufReader::new(io);
    while !stop.load(Ordering::SeqCst) {
        let Some(request) = read_request(&mut io, stop) else {
            return;
        };
        let connect = request.method == "CONNECT";
        let index = {
            let mut all = requests.lock().unwrap_or_else(|p| p.into_inner());
            all.push(request);
            all.len() - 1
        };
        if connect {
            // A proxy's tunnel, to this server itself: the requests through
            // it follow on this connection.
            let ok = b"HTTP/1.1 200 Connection established\r\n\r\n";
            if io.get_mut().write_all(ok).is_err() {
                return;
            }
            continue;
        }
        let status = match answer {
            Answer::Now => 200,
            Answer::Status(s) => s,
            Answer::After(d) => {
                std::thread::sleep(d);
                200
            }
            Answer::Never => {
                while !stop.load(Ordering::SeqCst) {
                    std::thread::sleep(Duration::from_millis(20));
                }
                return;
            }
        };
        let reply =
            format!("HTTP/1.1 {status} X\r\nContent-Length: 2\r\nConnection: close\r\n\r\nOK");
        let sent = io
            .get_mut()
            .write_all(reply.as_bytes())
            .and_then(|()| io.get_mut().flush());
        if let Some(r) = requests
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get_mut(index)
        {
            r.answered = Some(Instant::now());
        }
        if sent.is_err() {
            return;
        }
        // Connection: close, as said.
        return;
    }
}

trait ReadWrite: Read + Write + Send {}
impl<T: Read + Write + Send> ReadWrite for T {}

/// One request: its head, then as much body as Content-Length says. None
/// when the connection closes (or the server stops) first.
/// A read that timed out goes on, unless the server is stopping.
fn go_on(e: &std::io::Error, stop: &AtomicBool) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
    ) && !stop.load(Ordering::SeqCst)
}

fn read_request(io: &mut BufReader<Box<dyn ReadWrite>>, stop: &AtomicBool) -> Option<Request> {
    let mut head = Vec::new();
    let mut line = String::new();
    loop {
        line.clear();
        match io.read_line(&mut line) {
            Ok(0) => return None,
            Ok(_) => {
                if line == "\r\n" || line == "\n" {
                    break;
                }
                head.push(line.trim_end().to_string());
            }
            Err(e) if go_on(&e, stop) => {}
            Err(_) => return None,
        }
    }
    let first = head.first()?.clone();
    let mut words = first.split(' ');
    let method = words.next()?.to_string();
    let target = words.next()?.to_string();
    let length: usize = head
        .iter()
        .find_map(|h| {
            let (name, value) = h.split_once(':')?;
            name.eq_ignore_ascii_case("content-length")
                .then(|| value.trim().parse().ok())?
        })
        .unwrap_or(0);
    let mut body = vec![0u8; length.min(1 << 20)];
    let mut read = 0;
    while read < body.len() {
        match io.read(&mut body[read..]) {
            Ok(0) => return None,
            Ok(n) => read += n,
            Err(e) if go_on(&e, stop) => {}
            Err(_) => return None,
        }
    }
    let without_origin = match target.find("://") {
        Some(i) => target[i + 3..]
            .find('/')
            .map_or("/", |j| &target[i + 3 + j..]),
        None => target.as_str(),
    };
    let (path, query) = without_origin
        .split_once('?')
        .unwrap_or((without_origin, ""));
    Some(Request {
        method,
        path: path.to_string(),
        query: query.to_string(),
        target: target.clone(),
        body: String::from_utf8_lossy(&body).into_owned(),
        at: Instant::now(),
        answered: None,
    })
}
