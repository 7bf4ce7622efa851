//! A real `redis-server` process per test node.

use std::ffi::OsString;
use std::fs;
use std::net::TcpListener;
use std::ops::Deref;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use redis::FromRedisValue;

use super::{TempDir, tempdir, wait_until};

/// Timeout for every helper connection and command (the helpers are for
/// inspecting a healthy node; a stopped node makes them fail fast).
const HELPER_TIMEOUT: Duration = Duration::from_secs(2);
/// How long a fresh server gets to answer PING.
const START_TIMEOUT: Duration = Duration::from_secs(5);

/// A `redis-server` child process listening on 127.0.0.1 on a free port,
/// with persistence disabled and a private data directory.
///
/// Dropping the node resumes it if stopped, then SIGKILLs and reaps it.
/// The server also gets `PR_SET_PDEATHSIG = SIGKILL`, so it does not outlive
/// the thread that started it if the test process dies abruptly.
pub struct RedisNode {
    port: u16,
    dir: TempDir,
    child: Option<Child>,
    /// Extra server arguments, kept for `restart`.
    extra: Vec<String>,
}

impl RedisNode {
    /// Starts a server on a free port. Panics (never skips) if
    /// `redis-server` is missing or does not come up.
    pub fn start() -> RedisNode {
        RedisNode::start_with(&[])
    }

    /// Starts a server with `extra` arguments after the defaults (for
    /// example `--cluster-enabled yes`).
    pub fn start_with(extra: &[&str]) -> RedisNode {
        let binary = redis_server_binary();
        let dir = tempdir();
        let extra: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
        let mut last_error = String::new();
        for _attempt in 0..5 {
            let port = free_port();
            match spawn_server(&binary, port, &dir, &extra) {
                Ok(child) => {
                    return RedisNode {
                        port,
                        dir,
                        child: Some(child),
                        extra,
                    };
                }
                Err(e) => last_error = e,
            }
        }
        panic!("could not start redis-server after 5 attempts: {last_error}");
    }

    /// `redis://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// Pid of the server process (None after [`RedisNode::kill`]).
    pub fn pid(&self) -> Option<i32> {
        self.child.as_ref().map(|c| c.id() as i32)
    }

    /// Freezes the server (SIGSTOP): connections are accepted by the kernel
    /// but nothing is answered until [`RedisNode::cont`].
    pub fn stop(&self) {
        self.signal(libc::SIGSTOP);
        let pid = self.pid().expect("node is running");
        assert!(
            wait_until(Duration::from_secs(2), || super::process_state(pid)
                == Some('T')),
            "redis-server {pid} did not stop"
        );
    }

    /// Resumes a server frozen by [`RedisNode::stop`].
    pub fn cont(&self) {
        self.signal(libc::SIGCONT);
    }

    /// SIGKILLs and reaps the server; the node stays dead (use
    /// [`RedisNode::restart`] to bring it back on the same port).
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let pid = child.id() as i32;
            super::send_signal(pid, libc::SIGCONT);
            super::send_signal(pid, libc::SIGKILL);
            child.wait().expect("reap killed redis-server");
        }
    }

    /// Kills the server (if running) and starts a fresh, empty one on the
    /// same port.
    pub fn restart(&mut self) {
        self.kill();
        let binary = redis_server_binary();
        // Fresh data: empty the directory (nothing is persisted anyway).
        if let Ok(entries) = fs::read_dir(self.dir.path()) {
            for entry in entries.flatten() {
                let _ = fs::remove_file(entry.path());
            }
        }
        let mut last_error = String::new();
        // The port may linger briefly; retry for a little while.
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            match spawn_server(&binary, self.port, &self.dir, &self.extra) {
                Ok(child) => {
                    self.child = Some(child);
                    return;
                }
                Err(e) => last_error = e,
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!(
            "could not restart redis-server on port {}: {last_error}",
            self.port
        );
    }

    /// Opens a fresh connection with short timeouts.
    pub fn connection(&self) -> redis::RedisResult<redis::Connection> {
        let client = redis::Client::open(self.url())?;
        let con = client.get_connection_with_timeout(HELPER_TIMEOUT)?;
        con.set_read_timeout(Some(HELPER_TIMEOUT))?;
        con.set_write_timeout(Some(HELPER_TIMEOUT))?;
        Ok(con)
    }

    /// Runs `cmd` on a fresh connection, returning the Redis result.
    pub fn try_cmd<T: FromRedisValue>(&self, cmd: &redis::Cmd) -> redis::RedisResult<T> {
        let mut con = self.connection()?;
        cmd.query(&mut con)
    }

    /// Runs `cmd` on a fresh connection; panics with context on error.
    /// Example: `node.cmd::<String>(redis::cmd("PING").arg(()))`.
    pub fn cmd<T: FromRedisValue>(&self, cmd: &redis::Cmd) -> T {
        self.try_cmd(cmd)
            .unwrap_or_else(|e| panic!("redis command on {} failed: {e}", self.url()))
    }

    /// GET key.
    pub fn get(&self, key: impl AsRef<[u8]>) -> Option<Vec<u8>> {
        self.cmd(redis::cmd("GET").arg(key.as_ref()))
    }

    /// EXISTS key.
    pub fn exists(&self, key: impl AsRef<[u8]>) -> bool {
        self.cmd::<i64>(redis::cmd("EXISTS").arg(key.as_ref())) == 1
    }

    /// PTTL key: milliseconds left, -1 without expiry, -2 if absent.
    pub fn pttl(&self, key: impl AsRef<[u8]>) -> i64 {
        self.cmd(redis::cmd("PTTL").arg(key.as_ref()))
    }

    /// SET key val PX px_ms (unconditional overwrite).
    pub fn set(&self, key: impl AsRef<[u8]>, val: impl AsRef<[u8]>, px_ms: u64) {
        let reply: String = self.cmd(
            redis::cmd("SET")
                .arg(key.as_ref())
                .arg(val.as_ref())
                .arg("PX")
                .arg(px_ms),
        );
        assert_eq!(reply, "OK", "SET on {}", self.url());
    }

    /// All keys (KEYS *), sorted.
    pub fn keys(&self) -> Vec<Vec<u8>> {
        let mut keys: Vec<Vec<u8>> = self.cmd(redis::cmd("KEYS").arg("*"));
        keys.sort();
        keys
    }

    /// Whether the server answers PING within the helper timeout.
    pub fn ping(&self) -> bool {
        matches!(self.try_cmd::<String>(&redis::cmd("PING")), Ok(ref s) if s == "PONG")
    }

    /// Contents of the server log (for failure messages).
    pub fn log(&self) -> String {
        fs::read_to_string(self.dir.join("redis.log")).unwrap_or_default()
    }

    fn signal(&self, sig: i32) {
        let pid = self.pid().expect("redis-server is not running (killed?)");
        assert!(
            super::send_signal(pid, sig),
            "kill({pid}, {sig}) failed: {}",
            std::io::Error::last_os_error()
        );
    }
}

impl Drop for RedisNode {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let pid = child.id() as i32;
            super::send_signal(pid, libc::SIGCONT);
            super::send_signal(pid, libc::SIGKILL);
            let _ = child.wait();
        }
    }
}

/// `n` independent nodes plus their comma-joined URL list. Derefs to
/// `[RedisNode]`, so `cluster[0].stop()` and `cluster.iter()` work.
pub struct Cluster {
    nodes: Vec<RedisNode>,
}

impl Cluster {
    pub fn new(n: usize) -> Cluster {
        Cluster {
            nodes: (0..n).map(|_| RedisNode::start()).collect(),
        }
    }

    /// Comma-joined URLs, suitable for one `-r` argument or `REDLOCK_REDIS`.
    pub fn urls(&self) -> String {
        self.nodes
            .iter()
            .map(RedisNode::url)
            .collect::<Vec<_>>()
            .join(",")
    }

    pub fn node_mut(&mut self, i: usize) -> &mut RedisNode {
        &mut self.nodes[i]
    }

    /// Indices of the nodes on which `key` exists.
    pub fn holders(&self, key: impl AsRef<[u8]>) -> Vec<usize> {
        let key = key.as_ref();
        (0..self.nodes.len())
            .filter(|&i| self.nodes[i].exists(key))
            .collect()
    }

    /// Values of `key` on every node, in order.
    pub fn values(&self, key: impl AsRef<[u8]>) -> Vec<Option<Vec<u8>>> {
        let key = key.as_ref();
        self.nodes.iter().map(|n| n.get(key)).collect()
    }
}

impl Deref for Cluster {
    type Target = [RedisNode];

    fn deref(&self) -> &[RedisNode] {
        &self.nodes
    }
}

/// Locates `redis-server` on PATH; panics (tests never skip) if missing.
fn redis_server_binary() -> PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_else(|| OsString::from("/usr/bin:/bin"));
    std::env::split_paths(&path)
        .map(|dir| dir.join("redis-server"))
        .find(|candidate| candidate.is_file())
        .unwrap_or_else(|| {
            panic!(
                "redis-server not found on PATH: install it (apt-get install redis-server); \
                 these tests never skip"
            )
        })
}

/// A port that was free a moment ago (bind port 0, read it, release it).
fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0 to find a port");
    listener
        .local_addr()
        .expect("local_addr of probe listener")
        .port()
}

/// A throwaway redis-server: no persistence, its files and log
/// (`redis.log`) in `dir`, dying with the thread that started it. The caller
/// adds how it listens.
pub fn server_command(binary: &Path, dir: &Path, loglevel: &str) -> Command {
    let log = fs::File::create(dir.join("redis.log")).expect("create redis.log");
    let log_err = log.try_clone().expect("clone redis.log handle");
    let mut command = Command::new(binary);
    command
        .args(["--save", ""])
        .args(["--appendonly", "no"])
        .args(["--daemonize", "no"])
        .args(["--loglevel", loglevel])
        .arg("--dir")
        .arg(dir)
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(log_err);
    // SAFETY: only async-signal-safe calls between fork and exec.
    unsafe {
        command.pre_exec(|| {
            libc::prctl(
                libc::PR_SET_PDEATHSIG,
                libc::SIGKILL as libc::c_ulong,
                0,
                0,
                0,
            );
            Ok(())
        });
    }
    command
}

/// Spawns a server on `port` and waits until it answers PING. On failure the
/// child is killed and an explanation (including the server log) returned.
fn spawn_server(
    binary: &Path,
    port: u16,
    dir: &TempDir,
    extra: &[String],
) -> Result<Child, String> {
    assert_ne!(port, 6379, "never use the default Redis port");
    let log_path = dir.join("redis.log");
    let mut command = server_command(binary, dir.path(), "warning");
    command
        .arg("--port")
        .arg(port.to_string())
        .args(["--bind", "127.0.0.1"])
        .args(extra);
    let mut child = command
        .spawn()
        .map_err(|e| format!("spawn {}: {e}", binary.display()))?;

    let url = format!("redis://127.0.0.1:{port}");
    let deadline = Instant::now() + START_TIMEOUT;
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            let log = fs::read_to_string(&log_path).unwrap_or_default();
            return Err(format!(
                "redis-server on port {port} exited with {status}; log:\n{log}"
            ));
        }
        // Check the answering server is ours (another process could own the
        // port if our server failed to bind and has not exited yet).
        if server_pid(&url) == Some(child.id()) {
            return Ok(child);
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            let log = fs::read_to_string(&log_path).unwrap_or_default();
            return Err(format!(
                "redis-server on port {port} did not answer PING within {START_TIMEOUT:?}; log:\n{log}"
            ));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// `process_id` reported by `INFO server`, if the server answers.
fn server_pid(url: &str) -> Option<u32> {
    let attempt = || -> redis::RedisResult<String> {
        let client = redis::Client::open(url)?;
        let mut con = client.get_connection_with_timeout(Duration::from_millis(200))?;
        con.set_read_timeout(Some(Duration::from_millis(200)))?;
        redis::cmd("INFO").arg("server").query(&mut con)
    };
    let info = attempt().ok()?;
    info.lines()
        .find_map(|line| line.strip_prefix("process_id:"))
        .and_then(|pid| pid.trim().parse().ok())
}
