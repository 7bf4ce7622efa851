//! One Redis node: a lazily opened connection with every step bounded by the
//! node timeout, and the lock's commands.
//!
//! Each node has one `Session` (its connection) and, once several nodes are
//! in play, one worker thread that runs the node's requests strictly in the
//! order they were submitted. So a release always reaches a node after an
//! acquire still in flight there (a reply we gave up on may still have been
//! applied), and a round costs no thread start.

use std::fmt;
use std::net::{IpAddr, ToSocketAddrs};
use std::sync::mpsc::{self, Sender};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread;
use std::time::Duration;

use redis::{Client, Connection, ConnectionAddr, IntoConnectionInfo, Value};

use crate::lock::redlock::Answer;

// Every script touches the lock's books only while the lock holds our token.
// Calls that only inform (the holder record, the PUBLISH that wakes waiters)
// go through pcall: an ACL that denies them must not cost a lock or a
// release. Keys are passed as KEYS (one hash slot, see `keys`), never spliced
// into the Lua text.

/// Takes the lock: SET NX PX, or, when it already holds our token (a retry
/// after a lost reply), renews it. In the same atomic step: writes the
/// holder record (KEYS[2]) when fields are given from ARGV[5], reads the
/// --fence counter (KEYS[3]) when ARGV[3] is '1', and with --limit records
/// the number of slots (ARGV[4]) in KEYS[4] for `status`.
const ACQUIRE: &str = "\
if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  if redis.call('GET', KEYS[1]) ~= ARGV[1] then
    return {0}
  end
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
if #ARGV > 4 then
  redis.pcall('DEL', KEYS[2])
  redis.pcall('HSET', KEYS[2], unpack(ARGV, 5))
  redis.pcall('PEXPIRE', KEYS[2], ARGV[2])
end
if ARGV[4] ~= '' then
  redis.pcall('SET', KEYS[4], ARGV[4], 'PX', ARGV[2])
end
if ARGV[3] == '1' then
  return {1, redis.call('GET', KEYS[3])}
end
return {1}";

/// Extends only our own lock (its record, and with --limit the slot count,
/// KEYS[3]); never re-creates one (see `retake`). 1 extended, -1 no key
/// here, 0 another token.
const EXTEND: &str = "\
local v = redis.call('GET', KEYS[1])
if v == ARGV[1] then
  redis.pcall('PEXPIRE', KEYS[2], ARGV[2])
  redis.pcall('PEXPIRE', KEYS[3], ARGV[2])
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
elseif v == false then
  return -1
end
return 0";

/// Deletes only our own lock, then wakes waiters subscribed to ARGV[2] (in
/// the same script, so no waiter can miss it); an empty ARGV[2] wakes nobody.
/// -1 tells the log the key had already gone.
pub(crate) const RELEASE: &str = "\
local v = redis.call('GET', KEYS[1])
if v == ARGV[1] then
  redis.call('DEL', KEYS[1])
  redis.pcall('DEL', KEYS[2])
  if ARGV[2] ~= '' then
    redis.pcall('PUBLISH', ARGV[2], '')
  end
  return 1
elseif v == false then
  return -1
end
return 0";

/// Leaves our lock to expire after ARGV[2] ms (--hold), saying so in its
/// record: the command exited (ARGV[3] ms) with status ARGV[4].
pub(crate) const HOLD: &str = "\
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
redis.pcall('HSET', KEYS[2], 'exited_ms', ARGV[3], 'exit_code', ARGV[4])
redis.pcall('PEXPIRE', KEYS[2], ARGV[2])
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1";

/// `unlock --token`: deletes the lock where its token starts with ARGV[1]
/// (the whole token, or the prefix `status` shows), and wakes waiters.
/// A plain byte comparison: no Lua patterns.
const UNLOCK: &str = "\
local v = redis.call('GET', KEYS[1])
if v == false then
  return -1
end
if string.sub(v, 1, #ARGV[1]) ~= ARGV[1] then
  return 0
end
redis.call('DEL', KEYS[1])
redis.pcall('DEL', KEYS[2])
redis.pcall('PUBLISH', ARGV[2], '')
return 1";

/// Deletes a key only while it holds our token (undoing a --once-per marker).
const DROP: &str = "\
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0";

/// --fence, second phase: raise the counter to ARGV[2] (never lower it), only
/// while the lock holds our token here.
const FENCE: &str = "\
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
local c = tonumber(redis.call('GET', KEYS[2]) or '0')
if c < tonumber(ARGV[2]) then
  redis.call('SET', KEYS[2], ARGV[2])
end
return 1";

/// `unlock --force`: deletes whatever holds the lock, and wakes waiters.
const FORCE: &str = "\
local n = redis.call('DEL', KEYS[1])
redis.pcall('DEL', KEYS[2])
if n == 1 then
  redis.pcall('PUBLISH', ARGV[1], '')
end
return n";

/// The keys one acquire, extension or release touches.
#[derive(Clone, Debug)]
pub struct Books {
    pub lock: Vec<u8>,
    pub holder: Vec<u8>,
    pub fence: Vec<u8>,
    pub released: Vec<u8>,
    /// With --limit N: the key that records N, and N.
    pub limit: Option<(Vec<u8>, u32)>,
}

/// An acquire's answer, with the fence counter found beside the lock when asked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Granted {
    pub answer: Answer,
    pub fence: Option<u64>,
}

impl crate::lock::quorum::Vote for Granted {
    fn answer(&self) -> Answer {
        self.answer
    }
}

/// What `inspect` found on one node.
#[derive(Clone, Debug, Default)]
pub struct Inspection {
    pub value: Option<Vec<u8>>,
    /// Milliseconds left; negative as Redis reports (-2 no key, -1 no expiry).
    pub pttl: i64,
    pub holder: Vec<(String, String)>,
}

/// What an extension found on the node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Extension {
    Extended,
    /// The key is gone here (expired, or the node restarted empty).
    Absent,
    /// Another token holds it.
    NotOurs,
}

impl crate::lock::quorum::Vote for Extension {
    fn answer(&self) -> Answer {
        match self {
            Extension::Extended => Answer::Granted,
            Extension::Absent | Extension::NotOurs => Answer::Refused,
        }
    }
}

/// What a release found on the node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Released {
    Deleted,
    AlreadyGone,
    /// Another token holds the key: left alone.
    NotOurs,
}

#[derive(Debug)]
pub struct NodeError {
    msg: String,
    /// The node did not answer in time (as opposed to answering an error or
    /// refusing the connection): not worth waiting for again in this run.
    timeout: bool,
    /// Failed before the request could be written (no connection): the
    /// node cannot have applied it.
    unsent: bool,
}

impl NodeError {
    fn new(msg: String) -> NodeError {
        NodeError {
            msg,
            timeout: false,
            unsent: false,
        }
    }

    pub fn is_timeout(&self) -> bool {
        self.timeout
    }

    /// Whether the request can have reached the node.
    pub fn maybe_applied(&self) -> bool {
        !self.unsent
    }

    fn unsent(mut self) -> NodeError {
        self.unsent = true;
        self
    }
}

impl fmt::Display for NodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.msg)
    }
}

/// How a node has fared in this run, for rounds and reports.
#[derive(Default)]
struct Health {
    /// When each request submitted and not yet answered was submitted,
    /// oldest first.
    pending: std::collections::VecDeque<std::time::Instant>,
    /// A request timed out: rounds that wait for every reply do not wait for
    /// this node again.
    timed_out: bool,
    /// The first error it answered (or its first timeout), for the report.
    first_error: Option<String>,
    /// It answered at least one request without an error.
    answered: bool,
}

/// What a node's run looked like, for the report and the closing warning.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Fared {
    /// Every request it got an answer to went fine.
    Answered,
    /// It failed at least once: the first error.
    Failed(String),
    /// Not a single answer yet.
    Silent,
}

/// A request for a node, run with its session.
pub type Job = Box<dyn FnOnce(&mut Session) + Send>;

pub struct Node {
    /// Redacted URL: safe for logs and errors.
    name: String,
    timeout: Duration,
    client: Client,
    session: Arc<Mutex<Session>>,
    /// Started on the first `submit`.
    worker: Mutex<Option<Sender<Job>>>,
    health: Mutex<Health>,
}

/// One node's connection and what it needs to (re)connect and to word errors.
pub struct Session {
    name: String,
    client: Client,
    timeout: Duration,
    conn: Option<Connection>,
}

impl Node {
    /// Parses the URL and applies `opts`; no I/O. The error names the node
    /// without its password.
    pub fn new(url: &str, opts: &Options) -> Result<Node, String> {
        let name = redact(url);
        let scheme = url.split_once("://").map(|(s, _)| s);
        if !matches!(scheme, Some("redis" | "rediss" | "unix" | "redis+unix")) {
            return Err(format!(
                "invalid Redis URL '{name}': expected redis://HOST[:PORT][/DB], rediss://... or unix:///PATH"
            ));
        }
        let tls = scheme == Some("rediss");
        if tls {
            // The crate's rustls comes without a crypto provider. Installing
            // twice (several rediss:// nodes) is harmless and reported as Err.
            let _ = rustls::crypto::ring::default_provider().install_default();
        }
        let mut url = url.to_string();
        if tls && opts.tls_insecure && !url.contains('#') {
            url.push_str("#insecure");
        }
        let info = url
            .as_str()
            .into_connection_info()
            .map_err(|_| format!("invalid Redis URL '{name}': it does not parse"))?;
        // CLIENT SETINFO would cost an extra round trip per node on every run.
        let mut settings = info.redis_settings().clone().set_skip_set_lib_name();
        // Credentials from a file or the environment fill in for a URL that
        // carries none, so a crontab never needs a password in argv.
        if settings.password().is_none()
            && let Some(password) = &opts.password
        {
            settings = settings.set_password(password);
            if settings.username().is_none()
                && let Some(user) = &opts.username
            {
                settings = settings.set_username(user);
            }
        }
        let tcp = info.tcp_settings().clone().set_nodelay(true);
        let info = info.set_redis_settings(settings).set_tcp_settings(tcp);
        let client = if tls && (opts.tls_ca.is_some() || opts.tls_client.is_some()) {
            Client::build_with_tls(
                info,
                redis::TlsCertificates {
                    client_tls: opts.tls_client.as_ref().map(|(cert, key)| {
                        redis::ClientTlsConfig {
                            client_cert: cert.clone(),
                            client_key: key.clone(),
                        }
                    }),
                    root_cert: opts.tls_ca.clone(),
                },
            )
        } else {
            Client::open(info)
        }
        .map_err(|e| {
            format!(
                "cannot use Redis node '{name}': {}",
                e.detail().unwrap_or("bad TLS files")
            )
        })?;
        Ok(Node {
            session: Arc::new(Mutex::new(Session {
                name: name.clone(),
                client: client.clone(),
                timeout: opts.timeout,
                conn: None,
            })),
            name,
            client,
            timeout: opts.timeout,
            worker: Mutex::new(None),
            health: Mutex::new(Health::default()),
        })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Counts a request as outstanding; `finish` counts its answer.
    pub fn begin(&self) {
        lock(&self.health)
            .pending
            .push_back(std::time::Instant::now());
    }

    pub fn finish<T>(&self, result: &Result<T, NodeError>) {
        let mut h = lock(&self.health);
        h.pending.pop_front();
        match result {
            Ok(_) => h.answered = true,
            Err(e) => {
                h.timed_out |= e.timeout;
                if h.first_error.is_none() {
                    h.first_error = Some(e.to_string());
                }
            }
        }
    }

    /// When the oldest request still outstanding here was submitted.
    pub fn waiting_since(&self) -> Option<std::time::Instant> {
        lock(&self.health).pending.front().copied()
    }

    /// A request timed out earlier in this run.
    pub fn timed_out(&self) -> bool {
        lock(&self.health).timed_out
    }

    /// How this node has fared in the run so far.
    pub fn fared(&self) -> Fared {
        let h = lock(&self.health);
        match (&h.first_error, h.answered) {
            (Some(e), _) => Fared::Failed(e.clone()),
            (None, true) => Fared::Answered,
            (None, false) => Fared::Silent,
        }
    }

    /// Runs `job` on this node's worker thread, after every job submitted
    /// before it. Returns at once.
    pub fn submit(&self, job: Job) {
        let mut worker = lock(&self.worker);
        if worker.is_none() {
            let (tx, rx) = mpsc::channel::<Job>();
            let session = Arc::clone(&self.session);
            let spawned = thread::Builder::new()
                .name(format!("node {}", self.name))
                .spawn(move || {
                    for job in rx {
                        job(&mut lock(&session));
                    }
                });
            if spawned.is_ok() {
                *worker = Some(tx);
            }
        }
        let job = match worker.as_ref() {
            Some(tx) => match tx.send(job) {
                Ok(()) => return,
                Err(mpsc::SendError(job)) => job,
            },
            None => job,
        };
        // No worker thread to be had: run it here, late but in order (we hold
        // the worker slot, so nothing else can be submitted meanwhile).
        job(&mut lock(&self.session));
    }

    /// Runs `f` on the calling thread. For a lock on a single node, where
    /// there is nothing to overlap and a thread hop would only add latency.
    pub fn run<T>(&self, f: impl FnOnce(&mut Session) -> T) -> T {
        f(&mut lock(&self.session))
    }

    /// Blocks on a connection of its own subscribed to `channels`: `ready` once
    /// the subscription stands (or failed), then `wake` for every message,
    /// until the connection fails or `wake` returns false.
    pub fn watch(
        &self,
        channels: &[Vec<u8>],
        ready: impl FnOnce(Result<(), NodeError>),
        mut wake: impl FnMut() -> bool,
    ) {
        // A connection of its own: a subscribed connection can do nothing else.
        let session = Session {
            name: self.name.clone(),
            client: self.client.clone(),
            timeout: self.timeout,
            conn: None,
        };
        let mut conn = match session.connect() {
            Ok(c) => c,
            Err(Failure::Interrupted(e) | Failure::Other(e)) => return ready(Err(e)),
        };
        let mut pubsub = conn.as_pubsub();
        if let Err(e) = pubsub.subscribe(channels) {
            return ready(Err(session.error(&e)));
        }
        ready(Ok(()));
        // Messages may be far apart; a dead node ends the loop through its
        // connection, and the waiter's backoff poll covers the gap.
        if pubsub.set_read_timeout(None).is_err() {
            return;
        }
        while pubsub.get_message().is_ok() && wake() {}
    }
}

impl Session {
    /// Takes `books.lock` for `token` (see ACQUIRE); with a non-empty
    /// `record`, the holder record goes out in the same script, and with
    /// `fence` the counter is read in it.
    pub fn acquire(
        &mut self,
        books: &Books,
        token: &str,
        ttl: Duration,
        record: &[(&str, String)],
        fence: bool,
    ) -> Result<Granted, NodeError> {
        let mut cmd = redis::cmd("EVAL");
        cmd.arg(ACQUIRE)
            .arg(4)
            .arg(&books.lock)
            .arg(&books.holder)
            .arg(&books.fence);
        // Without --limit KEYS[4] is unused: the fence key stands in, in the
        // same hash slot.
        let (limit_key, n) = match &books.limit {
            Some((key, n)) => (key, n.to_string()),
            None => (&books.fence, String::new()),
        };
        cmd.arg(limit_key)
            .arg(token)
            .arg(millis(ttl))
            .arg(u8::from(fence))
            .arg(n);
        for (k, v) in record {
            cmd.arg(*k).arg(v);
        }
        self.take(&cmd, fence)
    }

    /// Sets a --once-per marker (idempotent for the same token).
    pub fn mark(
        &mut self,
        marker: &[u8],
        token: &str,
        ttl: Duration,
    ) -> Result<Granted, NodeError> {
        let mut cmd = redis::cmd("EVAL");
        cmd.arg(ACQUIRE)
            .arg(1)
            .arg(marker)
            .arg(token)
            .arg(millis(ttl))
            .arg("0")
            .arg("");
        self.take(&cmd, false)
    }

    fn take(&mut self, cmd: &redis::Cmd, fence: bool) -> Result<Granted, NodeError> {
        let reply = self.eval(cmd)?;
        let parts = match &reply {
            Value::Array(parts) => parts.as_slice(),
            other => return Err(self.unexpected("acquire script", &format!("{other:?}"))),
        };
        let answer = match parts.first() {
            Some(Value::Int(1)) => Answer::Granted,
            Some(Value::Int(0)) => Answer::Refused,
            other => return Err(self.unexpected("acquire script", &format!("{other:?}"))),
        };
        let fence = match (fence, answer, parts.get(1)) {
            (false, _, _) | (_, Answer::Refused, _) => None,
            (true, _, None | Some(Value::Nil)) => Some(0),
            (true, _, Some(Value::BulkString(b))) => Some(
                std::str::from_utf8(b)
                    .ok()
                    .and_then(|t| t.parse().ok())
                    .ok_or_else(|| self.unexpected("GET fence counter", &format!("{b:?}")))?,
            ),
            (true, _, Some(other)) => {
                return Err(self.unexpected("GET fence counter", &format!("{other:?}")));
            }
        };
        Ok(Granted { answer, fence })
    }

    /// Compare-and-PEXPIRE (the record too): `Refused` when the key no
    /// longer holds our token, `Failed`-free `Absent` when it is gone.
    pub fn extend(
        &mut self,
        books: &Books,
        token: &str,
        ttl: Duration,
    ) -> Result<Extension, NodeError> {
        let mut cmd = redis::cmd("EVAL");
        cmd.arg(EXTEND).arg(3).arg(&books.lock).arg(&books.holder);
        // Without --limit there is no count to refresh: the record again.
        cmd.arg(books.limit.as_ref().map_or(&books.holder, |(k, _)| k));
        cmd.arg(token).arg(millis(ttl));
        match self.eval(&cmd)? {
            Value::Int(1) => Ok(Extension::Extended),
            Value::Int(-1) => Ok(Extension::Absent),
            Value::Int(0) => Ok(Extension::NotOurs),
            other => Err(self.unexpected("extend script", &format!("{other:?}"))),
        }
    }

    /// `SET NX PX` of our token on a node that lost the key (restarted empty,
    /// or expired early by its clock) while a quorum still holds it for us:
    /// so that losses spread over a long run do not add up. Only ever sent
    /// within the validity the extension round just won.
    pub fn retake(&mut self, books: &Books, token: &str, ttl: Duration) -> Result<bool, NodeError> {
        let mut cmd = redis::cmd("SET");
        cmd.arg(&books.lock)
            .arg(token)
            .arg("NX")
            .arg("PX")
            .arg(millis(ttl));
        match self.query(|c| cmd.query::<Value>(c))? {
            Value::Okay => Ok(true),
            Value::Nil => Ok(false),
            Value::ServerError(e) => Err(self.server_error(&e)),
            other => Err(self.unexpected("SET NX", &format!("{other:?}"))),
        }
    }

    /// Compare-and-delete (the record too). `announce` wakes waiters: right
    /// for a lock that was held, wrong for undoing a failed attempt, which
    /// would wake every waiter for nothing (and each of their failed attempts
    /// would wake them all again).
    pub fn release(
        &mut self,
        books: &Books,
        token: &str,
        announce: bool,
    ) -> Result<Released, NodeError> {
        let mut cmd = redis::cmd("EVAL");
        cmd.arg(RELEASE)
            .arg(2)
            .arg(&books.lock)
            .arg(&books.holder)
            .arg(token);
        if announce {
            cmd.arg(&books.released);
        } else {
            cmd.arg("");
        }
        match self.eval(&cmd)? {
            Value::Int(1) => Ok(Released::Deleted),
            Value::Int(-1) => Ok(Released::AlreadyGone),
            Value::Int(0) => Ok(Released::NotOurs),
            other => Err(self.unexpected("release script", &format!("{other:?}"))),
        }
    }

    /// --hold: leaves the lock to expire in `left`, recording the exit.
    pub fn hold(
        &mut self,
        books: &Books,
        token: &str,
        left: Duration,
        exit_code: u8,
    ) -> Result<Answer, NodeError> {
        let mut cmd = redis::cmd("EVAL");
        cmd.arg(HOLD).arg(2).arg(&books.lock).arg(&books.holder);
        cmd.arg(token)
            .arg(millis(left))
            .arg(crate::lock::unix_ms())
            .arg(exit_code);
        match self.eval(&cmd)? {
            Value::Int(1) => Ok(Answer::Granted),
            Value::Int(0) => Ok(Answer::Refused),
            other => Err(self.unexpected("hold script", &format!("{other:?}"))),
        }
    }

    /// `unlock --token`: deletes the lock if its token starts with `prefix`.
    pub fn unlock(&mut self, books: &Books, prefix: &str) -> Result<Released, NodeError> {
        let mut cmd = redis::cmd("EVAL");
        cmd.arg(UNLOCK).arg(2).arg(&books.lock).arg(&books.holder);
        cmd.arg(prefix).arg(&books.released);
        match self.eval(&cmd)? {
            Value::Int(1) => Ok(Released::Deleted),
            Value::Int(-1) => Ok(Released::AlreadyGone),
            Value::Int(0) => Ok(Released::NotOurs),
            other => Err(self.unexpected("unlock script", &format!("{other:?}"))),
        }
    }

    /// With --limit N recorded beside the lock: N.
    pub fn limit(&mut self, key: &[u8]) -> Result<Option<u32>, NodeError> {
        let v: Option<String> = self.query(|c| redis::cmd("GET").arg(key).query(c))?;
        Ok(v.and_then(|v| v.parse().ok()))
    }

    /// Deletes `key` only while it holds our token.
    pub fn drop_ours(&mut self, key: &[u8], token: &str) -> Result<bool, NodeError> {
        let mut cmd = redis::cmd("EVAL");
        cmd.arg(DROP).arg(1).arg(key).arg(token);
        match self.eval(&cmd)? {
            Value::Int(n) => Ok(n == 1),
            other => Err(self.unexpected("drop script", &format!("{other:?}"))),
        }
    }

    /// Raises the fence counter to `t` while the lock holds our token here.
    pub fn commit_fence(
        &mut self,
        books: &Books,
        token: &str,
        t: u64,
    ) -> Result<Answer, NodeError> {
        let mut cmd = redis::cmd("EVAL");
        cmd.arg(FENCE)
            .arg(2)
            .arg(&books.lock)
            .arg(&books.fence)
            .arg(token)
            .arg(t);
        match self.eval(&cmd)? {
            Value::Int(1) => Ok(Answer::Granted),
            Value::Int(0) => Ok(Answer::Refused),
            other => Err(self.unexpected("fence script", &format!("{other:?}"))),
        }
    }

    /// Deletes the lock whoever holds it: true if there was one.
    pub fn force_delete(&mut self, books: &Books) -> Result<bool, NodeError> {
        let mut cmd = redis::cmd("EVAL");
        cmd.arg(FORCE)
            .arg(2)
            .arg(&books.lock)
            .arg(&books.holder)
            .arg(&books.released);
        match self.eval(&cmd)? {
            Value::Int(n) => Ok(n == 1),
            other => Err(self.unexpected("delete script", &format!("{other:?}"))),
        }
    }

    /// The lock's value, its PTTL and its holder record, in one round trip.
    pub fn inspect(&mut self, books: &Books) -> Result<Inspection, NodeError> {
        let mut pipe = redis::pipe();
        pipe.cmd("GET")
            .arg(&books.lock)
            .cmd("PTTL")
            .arg(&books.lock)
            .cmd("HGETALL")
            .arg(&books.holder);
        let (value, pttl, holder): (Option<Vec<u8>>, i64, Vec<(String, String)>) =
            self.query(|c| pipe.query(c))?;
        Ok(Inspection {
            value,
            pttl,
            holder,
        })
    }

    // Plain EVAL rather than EVALSHA: a once-per-run CLI would pay a NOSCRIPT
    // round trip and a SCRIPT LOAD on every fresh node, and the scripts are tiny.
    pub(crate) fn eval(&mut self, cmd: &redis::Cmd) -> Result<Value, NodeError> {
        match self.query(|c| cmd.query::<Value>(c))? {
            Value::ServerError(e) => Err(self.server_error(&e)),
            v => Ok(v),
        }
    }

    /// Runs `f` on this node's connection, connecting first if needed.
    ///
    /// A read or connect interrupted by the process being stopped and
    /// continued (SIGSTOP/SIGCONT, Ctrl-Z and `fg`, a cgroup freezer) fails
    /// with EINTR even without signal handlers; it is retried on a fresh
    /// connection for as long as the node timeout allows. Every request
    /// redlock-run sends gives the same answer when repeated (an acquire for
    /// our own token, a compare-and-delete that finds the key gone), so a
    /// retry cannot change what happened.
    pub(crate) fn query<T>(
        &mut self,
        f: impl Fn(&mut Connection) -> redis::RedisResult<T>,
    ) -> Result<T, NodeError> {
        let until = std::time::Instant::now() + self.timeout;
        let retry = || std::time::Instant::now() < until;
        loop {
            let mut conn = match self.conn.take() {
                Some(c) => c,
                None => match self.connect() {
                    Ok(c) => c,
                    Err(Failure::Interrupted(_)) if retry() => continue,
                    Err(Failure::Interrupted(e) | Failure::Other(e)) => return Err(e.unsent()),
                },
            };
            match f(&mut conn) {
                Ok(v) => {
                    self.conn = Some(conn);
                    return Ok(v);
                }
                // After a timeout a late reply would be read as the answer to
                // the next request: a connection that saw an error is dropped.
                Err(e) if interrupted(&e) && retry() => {}
                Err(e) => return Err(self.error(&e)),
            }
        }
    }

    fn connect(&self) -> Result<Connection, Failure> {
        let conn = match self.client.get_connection_info().addr() {
            // The crate's connect timeout does not cover name resolution: a
            // hung DNS server would hold this node (and its queue) far longer
            // than the node timeout. Resolve here, bounded, and connect to the
            // address found.
            ConnectionAddr::Tcp(host, port) if host.parse::<IpAddr>().is_err() => {
                // Every address in turn, as a resolver-backed connect would:
                // "localhost" is often ::1 first and 127.0.0.1 second.
                let mut last = None;
                for ip in self.resolve(host, *port).map_err(Failure::Other)? {
                    let info = self.client.get_connection_info().clone();
                    match Client::open(info.set_addr(ConnectionAddr::Tcp(ip.to_string(), *port)))
                        .and_then(|c| c.get_connection_with_timeout(self.timeout))
                    {
                        Ok(conn) => {
                            last = Some(Ok(conn));
                            break;
                        }
                        Err(e) => last = Some(Err(e)),
                    }
                }
                match last {
                    Some(result) => result,
                    None => {
                        return Err(Failure::Other(NodeError::new(format!(
                            "{}: {host} has no address",
                            self.name
                        ))));
                    }
                }
            }
            // TLS checks the certificate against the name, so the crate must
            // connect by name; resolving once first still bounds a hung lookup
            // (the crate's own lookup then finds the answer in the resolver's cache
            // where there is one).
            ConnectionAddr::TcpTls { host, port, .. } if host.parse::<IpAddr>().is_err() => {
                self.resolve(host, *port).map_err(Failure::Other)?;
                self.client.get_connection_with_timeout(self.timeout)
            }
            _ => self.client.get_connection_with_timeout(self.timeout),
        }
        .map_err(|e| self.failure(&e))?;
        // The crate bounds only the connect; reads and writes would block forever
        // on a node that is stopped but still completes TCP handshakes.
        conn.set_read_timeout(Some(self.timeout))
            .and_then(|()| conn.set_write_timeout(Some(self.timeout)))
            .map_err(|e| self.failure(&e))?;
        Ok(conn)
    }

    /// The addresses `host` resolves to, within the node timeout.
    fn resolve(&self, host: &str, port: u16) -> Result<Vec<IpAddr>, NodeError> {
        let (tx, rx) = std::sync::mpsc::channel();
        let lookup = (host.trim_matches(['[', ']']).to_string(), port);
        let spawned = std::thread::Builder::new()
            .name("resolve".into())
            .spawn(move || {
                let _ = tx.send(
                    lookup
                        .to_socket_addrs()
                        .map(|a| a.map(|a| a.ip()).collect::<Vec<_>>()),
                );
            });
        if let Err(e) = spawned {
            return Err(NodeError::new(format!(
                "{}: cannot resolve {host}: {e}",
                self.name
            )));
        }
        match rx.recv_timeout(self.timeout) {
            Ok(Ok(addrs)) if !addrs.is_empty() => Ok(addrs),
            Ok(Ok(_)) => Err(NodeError::new(format!(
                "{}: {host} has no address",
                self.name
            ))),
            Ok(Err(e)) => Err(NodeError::new(format!(
                "{}: cannot resolve {host}: {e}",
                self.name
            ))),
            Err(_) => Err(NodeError {
                msg: format!(
                    "{}: {host} did not resolve within {} (--node-timeout)",
                    self.name,
                    humantime::format_duration(self.timeout)
                ),
                timeout: true,
                unsent: false,
            }),
        }
    }

    /// An error reply, worded with the fix where there is one.
    pub(crate) fn server_error(&self, e: &redis::ServerError) -> NodeError {
        let what = match e.code() {
            "NOPERM" => permission_denied(&e.to_string()),
            "NOAUTH" => needs_password(),
            "WRONGPASS" => wrong_password(),
            _ => e.to_string(),
        };
        NodeError::new(format!("{}: {what}", self.name))
    }

    fn failure(&self, e: &redis::RedisError) -> Failure {
        if interrupted(e) {
            Failure::Interrupted(self.error(e))
        } else {
            Failure::Other(self.error(e))
        }
    }

    fn error(&self, e: &redis::RedisError) -> NodeError {
        let timeout = e.is_timeout();
        let what = if timeout {
            format!(
                "no answer within {} (--node-timeout)",
                humantime::format_duration(self.timeout)
            )
        } else if e.is_connection_refusal() {
            "connection refused".to_string()
        } else if e.kind() == redis::ErrorKind::AuthenticationFailed
            || e.code() == Some("WRONGPASS")
        {
            "authentication failed: wrong user name or password (check the URL, \
             --password-file or REDLOCK_PASSWORD)"
                .to_string()
        } else if e.code() == Some("NOPERM") {
            format!(
                "the server's ACL denies this user: {}; see \"Connecting\" in the README for \
                 the commands and keys redlock-run needs",
                e.detail().unwrap_or("no permission")
            )
        } else if is_tls_error(e) {
            format!(
                "TLS handshake failed: {e} (check --tls-ca, that the URL's host name is in the \
                 certificate, and --tls-cert/--tls-key if the server wants a client certificate)"
            )
        } else {
            e.to_string()
        };
        NodeError {
            msg: format!("{}: {what}", self.name),
            timeout,
            unsent: false,
        }
    }

    pub(crate) fn unexpected(&self, what: &str, reply: &str) -> NodeError {
        NodeError::new(format!(
            "{}: unexpected reply to {what}: {reply}",
            self.name
        ))
    }
}

/// A failed connect: worth one more try when it was only interrupted.
enum Failure {
    Interrupted(NodeError),
    Other(NodeError),
}

/// Whether `e` is EINTR from a read, write or connect.
fn interrupted(e: &redis::RedisError) -> bool {
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        if let Some(io) = s.downcast_ref::<std::io::Error>() {
            return io.kind() == std::io::ErrorKind::Interrupted;
        }
        source = s.source();
    }
    e.to_string().contains("(os error 4)")
}

/// How to reach the nodes, beyond what their URLs say.
#[derive(Clone, Default)]
pub struct Options {
    /// Bound on connect (and name resolution), read and write.
    pub timeout: Duration,
    /// For nodes whose URL has no password (from --password-file or
    /// REDLOCK_PASSWORD, REDLOCK_USERNAME).
    pub username: Option<String>,
    pub password: Option<String>,
    /// PEM: a private CA for rediss:// nodes instead of the system roots.
    pub tls_ca: Option<Vec<u8>>,
    /// PEM: client certificate and key, for servers that require them.
    pub tls_client: Option<(Vec<u8>, Vec<u8>)>,
    /// No certificate or host-name checks.
    pub tls_insecure: bool,
}

// By hand, so that no `{:?}` anywhere can print the password or the key.
impl fmt::Debug for Options {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Options")
            .field("timeout", &self.timeout)
            .field("username", &self.username)
            .field("password", &self.password.as_ref().map(|_| "***"))
            .field("tls_ca", &self.tls_ca.is_some())
            .field("tls_client", &self.tls_client.is_some())
            .field("tls_insecure", &self.tls_insecure)
            .finish()
    }
}

fn wrong_password() -> String {
    "authentication failed: wrong user name or password (check the URL, --password-file or \
     REDLOCK_PASSWORD)"
        .to_string()
}

fn needs_password() -> String {
    "authentication required: give the password in the URL, with --password-file or in \
     REDLOCK_PASSWORD"
        .to_string()
}

fn permission_denied(detail: &str) -> String {
    format!(
        "the server's ACL denies this user: {detail}; see \"Connecting\" in the README for the \
         commands and keys redlock-run needs"
    )
}

fn is_tls_error(e: &redis::RedisError) -> bool {
    let text = e.to_string().to_ascii_lowercase();
    [
        "certificate",
        "tls",
        "handshake",
        "unknownissuer",
        "notvalidforname",
        "alert",
        "unknownca",
    ]
    .iter()
    .any(|w| text.contains(w))
}

/// Locks a mutex, shrugging off poisoning: a panic mid-request leaves at
/// worst a connection in an unknown state, and that one is dropped.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX).max(1)
}

/// Appends a URL's authority (`user:password@host:port`) with the password
/// replaced by `***`; a lone user-info (`redis://secret@host`,
/// `https://TOKEN@host`) is taken for a password.
pub fn push_masked_authority(out: &mut String, authority: &str) {
    match authority.rfind('@') {
        Some(at) => {
            let userinfo = &authority[..at];
            match userinfo.find(':') {
                Some(colon) => {
                    out.push_str(&userinfo[..colon]);
                    out.push_str(":***");
                }
                None if userinfo.is_empty() => {}
                None => out.push_str("***"),
            }
            out.push_str(&authority[at..]);
        }
        None => out.push_str(authority),
    }
}

/// The URL with any password replaced by `***`, for logs and errors.
/// Works on text that does not parse, since that is when it gets printed.
pub fn redact(url: &str) -> String {
    let Some(scheme_end) = url.find("://") else {
        return url.to_string();
    };
    let rest = &url[scheme_end + 3..];
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let mut out = url[..scheme_end + 3].to_string();
    push_masked_authority(&mut out, &rest[..authority_end]);
    out.push_str(&rest[authority_end..]);
    // unix:///path?pass=secret
    if let Some(q) = out.find('?') {
        let (base, query) = out.split_at(q + 1);
        let query: Vec<String> = query
            .split('&')
            .map(|kv| match kv.split_once('=') {
                Some((k, _))
                    if k.eq_ignore_ascii_case("pass") || k.eq_ignore_ascii_case("password") =>
                {
                    format!("{k}=***")
                }
                _ => kv.to_string(),
            })
            .collect();
        out = format!("{base}{}", query.join("&"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redact_hides_passwords_only() {
        assert_eq!(redact("redis://127.0.0.1:6379"), "redis://127.0.0.1:6379");
        assert_eq!(redact("redis://:s3cret@h:1/0"), "redis://:***@h:1/0");
        assert_eq!(redact("redis://u:s3cret@h"), "redis://u:***@h");
        assert_eq!(redact("rediss://u:p@ss:w@h/2"), "rediss://u:***@h/2");
        assert_eq!(redact("redis://s3cret@h"), "redis://***@h");
        assert_eq!(
            redact("unix:///run/r.sock?db=1&pass=s3cret"),
            "unix:///run/r.sock?db=1&pass=***"
        );
        assert_eq!(redact("not a url"), "not a url");
        assert_eq!(redact("redis://h/0#frag@x"), "redis://h/0#frag@x");
    }

    #[test]
    fn bad_urls_are_rejected_without_echoing_secrets() {
        for url in ["notaurl://x", "redis://:pw@[::1", "http://h"] {
            let err = Node::new(url, &Options::default())
                .err()
                .expect("must fail");
            assert!(err.starts_with("invalid Redis URL"), "{err}");
            assert!(!err.contains("pw@"), "{err}");
        }
    }

    #[test]
    fn jobs_run_in_submission_order_on_one_thread() {
        let node = Node::new("redis://127.0.0.1:1", &Options::default()).expect("valid url");
        let (tx, rx) = mpsc::channel();
        for i in 0..20 {
            let tx = tx.clone();
            node.submit(Box::new(move |_| {
                // Early jobs take longest: a pool would let later ones overtake.
                thread::sleep(Duration::from_millis(20u64.saturating_sub(i)));
                let _ = tx.send((i, thread::current().id()));
            }));
        }
        let got: Vec<_> = rx.iter().take(20).collect();
        assert_eq!(
            got.iter().map(|(i, _)| *i).collect::<Vec<_>>(),
            (0..20).collect::<Vec<_>>()
        );
        assert!(
            got.iter().all(|(_, t)| *t == got[0].1),
            "one worker thread per node"
        );
    }

    #[test]
    fn millis_never_sends_zero() {
        assert_eq!(millis(Duration::from_micros(10)), 1);
        assert_eq!(millis(Duration::from_secs(2)), 2000);
    }
}
