//! A userspace TCP proxy with switchable faults, built on std threads.
//!
//! ```text
//! redlock-run ──► 127.0.0.1:proxy.port() ──► 127.0.0.1:target
//! ```
//!
//! Modes (switch at any time with [`FaultProxy::set_mode`]):
//! * [`Mode::Pass`]: forward bytes both ways.
//! * [`Mode::Delay`]: forward each chunk (both directions) after a delay.
//! * [`Mode::BlackHole`]: keep connections open, read and discard, never
//!   answer. Connections accepted while black-holed are never connected
//!   upstream (they stay black-holed even if the mode changes later);
//!   existing connections resume forwarding when the mode changes back.
//! * [`Mode::Reset`]: existing connections are reset (RST) within ~10 ms;
//!   new ones are reset right after accept.
//!
//! Every thread polls a shutdown flag (sockets use 10 ms read timeouts), and
//! dropping the proxy joins them all and closes every socket.

use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

const TICK: Duration = Duration::from_millis(10);

/// What the proxy does with traffic.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Pass,
    Delay(Duration),
    BlackHole,
    Reset,
}

struct Shared {
    mode: Mutex<Mode>,
    shutdown: AtomicBool,
    workers: Mutex<Vec<JoinHandle<()>>>,
    accepted: AtomicUsize,
}

impl Shared {
    fn mode(&self) -> Mode {
        *lock(&self.mode)
    }

    fn stopping(&self) -> bool {
        self.shutdown.load(Ordering::SeqCst)
    }

    /// Sleeps `d` in ticks; returns false if shutdown was requested or the
    /// mode switched to Reset meanwhile.
    fn sleep(&self, d: Duration) -> bool {
        let deadline = Instant::now() + d;
        loop {
            if self.stopping() || self.mode() == Mode::Reset {
                return false;
            }
            let now = Instant::now();
            if now >= deadline {
                return true;
            }
            std::thread::sleep(TICK.min(deadline - now));
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The proxy. See the module documentation.
pub struct FaultProxy {
    port: u16,
    target: u16,
    shared: Arc<Shared>,
    acceptor: Option<JoinHandle<()>>,
}

impl FaultProxy {
    /// Listens on a free 127.0.0.1 port and forwards to 127.0.0.1:`target`.
    pub fn new(target: u16) -> FaultProxy {
        let listener = TcpListener::bind("127.0.0.1:0").expect("proxy: bind 127.0.0.1:0");
        listener
            .set_nonblocking(true)
            .expect("proxy: set listener non-blocking");
        let port = listener.local_addr().expect("proxy: local_addr").port();
        let shared = Arc::new(Shared {
            mode: Mutex::new(Mode::Pass),
            shutdown: AtomicBool::new(false),
            workers: Mutex::new(Vec::new()),
            accepted: AtomicUsize::new(0),
        });
        let target_addr = SocketAddr::from(([127, 0, 0, 1], target));
        let acceptor = {
            let shared = Arc::clone(&shared);
            std::thread::Builder::new()
                .name(format!("proxy-accept-{port}"))
                .spawn(move || accept_loop(listener, target_addr, shared))
                .expect("proxy: spawn acceptor thread")
        };
        FaultProxy {
            port,
            target,
            shared,
            acceptor: Some(acceptor),
        }
    }

    /// `redis://127.0.0.1:PORT` of the proxy's listening side.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn target_port(&self) -> u16 {
        self.target
    }

    pub fn mode(&self) -> Mode {
        self.shared.mode()
    }

    pub fn set_mode(&self, mode: Mode) {
        *lock(&self.shared.mode) = mode;
    }

    /// Number of client connections accepted so far.
    pub fn accepted(&self) -> usize {
        self.shared.accepted.load(Ordering::SeqCst)
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.shared.shutdown.store(true, Ordering::SeqCst);
        // Wakes the acceptor from its poll at once.
        let _ = TcpStream::connect_timeout(
            &SocketAddr::from(([127, 0, 0, 1], self.port)),
            Duration::from_secs(1),
        );
        if let Some(acceptor) = self.acceptor.take() {
            let _ = acceptor.join();
        }
        // The acceptor is gone, so no new workers can be registered.
        let workers = std::mem::take(&mut *lock(&self.shared.workers));
        for worker in workers {
            let _ = worker.join();
        }
    }
}

fn spawn_worker(shared: &Arc<Shared>, name: String, f: impl FnOnce() + Send + 'static) {
    match std::thread::Builder::new().name(name).spawn(f) {
        Ok(handle) => lock(&shared.workers).push(handle),
        Err(e) => eprintln!("proxy: cannot spawn worker thread: {e}"),
    }
}

fn accept_loop(listener: TcpListener, target: SocketAddr, shared: Arc<Shared>) {
    while !shared.stopping() {
        // Waits in poll(2) rather than polling accept: a proxy idle for most
        // of a test must not cost wake-ups (every 2 ms, over the suite's
        // hundreds of proxies, was CPU the timing tests then lacked). Drop
        // wakes it with a connection of its own.
        super::await_readable(listener.as_raw_fd(), Duration::from_millis(200));
        match listener.accept() {
            Ok(_) if shared.stopping() => return,
            Ok((client, _)) => {
                shared.accepted.fetch_add(1, Ordering::SeqCst);
                handle_connection(client, target, &shared);
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock || e.kind() == ErrorKind::Interrupted => {}
            Err(e) => {
                eprintln!("proxy: accept failed: {e}");
                std::thread::sleep(TICK);
            }
        }
    }
}

fn handle_connection(client: TcpStream, target: SocketAddr, shared: &Arc<Shared>) {
    if client.set_nonblocking(false).is_err() || client.set_read_timeout(Some(TICK)).is_err() {
        return;
    }
    let _ = client.set_nodelay(true);
    match shared.mode() {
        Mode::Reset => reset(&client),
        Mode::BlackHole => {
            let shared2 = Arc::clone(shared);
            spawn_worker(shared, "proxy-blackhole".into(), move || {
                black_hole(client, &shared2)
            });
        }
        Mode::Pass | Mode::Delay(_) => {
            let upstream = match TcpStream::connect_timeout(&target, Duration::from_secs(1)) {
                Ok(s) => s,
                Err(_) => {
                    // Target is down: behave like it (connection reset).
                    reset(&client);
                    return;
                }
            };
            if upstream.set_read_timeout(Some(TICK)).is_err() {
                return;
            }
            let _ = upstream.set_nodelay(true);
            let _ = upstream.set_write_timeout(Some(Duration::from_secs(1)));
            let _ = client.set_write_timeout(Some(Duration::from_secs(1)));
            let (Ok(client2), Ok(upstream2)) = (client.try_clone(), upstream.try_clone()) else {
                reset(&client);
                return;
            };
            let s1 = Arc::clone(shared);
            spawn_worker(shared, "proxy-up".into(), move || {
                pump(client, upstream, &s1)
            });
            let s2 = Arc::clone(shared);
            spawn_worker(shared, "proxy-down".into(), move || {
                pump(upstream2, client2, &s2)
            });
        }
    }
}

/// Makes the next close of `stream` send RST instead of FIN.
fn set_linger_zero(stream: &TcpStream) {
    let linger = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    // SAFETY: valid fd and a correctly sized `linger` struct.
    unsafe {
        libc::setsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            (&linger as *const libc::linger).cast(),
            std::mem::size_of::<libc::linger>() as libc::socklen_t,
        );
    }
}

/// Resets the connection once every handle to it is closed (the caller's
/// handle is closed when it is dropped).
fn reset(stream: &TcpStream) {
    set_linger_zero(stream);
}

fn black_hole(mut client: TcpStream, shared: &Shared) {
    let mut buf = [0u8; 4096];
    while !shared.stopping() {
        if shared.mode() == Mode::Reset {
            reset(&client);
            return;
        }
        match client.read(&mut buf) {
            Ok(0) => return,
            Ok(_) => {}
            Err(e) if is_timeout(&e) => {}
            Err(_) => return,
        }
    }
}

/// Copies `from` → `to` according to the current mode until EOF, error,
/// Reset mode or shutdown.
fn pump(mut from: TcpStream, mut to: TcpStream, shared: &Shared) {
    let mut buf = [0u8; 16 * 1024];
    loop {
        if shared.stopping() {
            let _ = from.shutdown(Shutdown::Both);
            let _ = to.shutdown(Shutdown::Both);
            return;
        }
        if shared.mode() == Mode::Reset {
            reset(&from);
            reset(&to);
            return;
        }
        let n = match from.read(&mut buf) {
            Ok(0) => {
                // Half-close: pass the EOF on.
                let _ = to.shutdown(Shutdown::Write);
                return;
            }
            Ok(n) => n,
            Err(e) if is_timeout(&e) => continue,
            Err(_) => {
                let _ = to.shutdown(Shutdown::Both);
                return;
            }
        };
        let forward = match shared.mode() {
            Mode::Pass => true,
            Mode::Delay(d) => shared.sleep(d),
            Mode::BlackHole => false,
            Mode::Reset => false,
        };
        if !forward {
            continue; // discarded (black hole), or Reset/shutdown handled above
        }
        if to.write_all(&buf[..n]).is_err() {
            let _ = from.shutdown(Shutdown::Both);
            return;
        }
    }
}

fn is_timeout(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted
    )
}
