//! One node of the quorum: a plain Redis server, a Sentinel group (whichever
//! server its sentinels name primary), or a whole Redis Cluster (the master
//! of the lock's hash slot). Each is reached through one lazily opened
//! connection with every step bounded by the node timeout.
//!
//! Each node has one `Session` (its connection). A round over several idle
//! plain servers reached by address is driven from the calling thread
//! (`polled`): every request goes out at once and replies are taken as they
//! come. Otherwise, and for a request still unanswered when such a round
//! ends, the node has one worker thread that runs its requests strictly in
//! the order they were submitted. Either way a release reaches a node after
//! an acquire still in flight there (a reply we gave up on may still have
//! been applied). A release that must not wait for the worker (the node
//! stopped answering) is written behind the request in flight, on the same
//! connection (`Node::write_behind`).
//!
//! - `url`: the URL forms, and the redaction of their passwords;
//! - `server`, `sentinel`, `cluster`: connecting to each topology;
//! - `conn`: one connection, whichever topology it reaches;
//! - `wire`: redlock-run's own connection to a plain server;
//! - `session`: the lock's requests, and `--replicas`;
//! - `polled`: a round driven from one thread with poll(2);
//! - `scripts`: the Lua every request runs;
//! - `error`: what a failure says.

mod cluster;
mod conn;
mod error;
pub mod polled;
mod scripts;
mod sentinel;
mod server;
mod session;
mod url;
mod wire;

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Sender};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread;
use std::time::{Duration, Instant};

use crate::lock::redlock::Answer;

pub use error::NodeError;
pub use session::{Session, behind};
pub use url::{push_masked_authority, redact};

use conn::Target;
use wire::Line;

/// The keys one acquire, extension or release touches.
#[derive(Clone, Debug)]
pub struct Books {
    /// The key taken: the lock's, or with --limit one of its slots.
    pub lock: Vec<u8>,
    pub holder: Vec<u8>,
    pub fence: Vec<u8>,
    /// The fence counter of the previous key layout, read beside `fence`
    /// (see `Keys::legacy_fence`).
    pub legacy_fence: Vec<u8>,
    pub released: Vec<u8>,
    /// The lock's own key, which a plain run takes: a --limit run keeps
    /// away from it (see `Keys::slots`).
    pub main: Vec<u8>,
    /// The --limit holders of the moment (see `Keys::slots`).
    pub slots: Vec<u8>,
    /// --limit N.
    pub limit: Option<u32>,
    /// The --wait queue and its waiters' lapse times.
    pub queue: Vec<u8>,
    pub waiters: Vec<u8>,
    /// The --shared readers of the moment and their records (see
    /// `Keys::readers`).
    pub readers: Vec<u8>,
    pub reader_records: Vec<u8>,
    /// This run is a reader (--shared): it holds an entry among `readers`,
    /// not the lock's key.
    pub shared: bool,
}

impl Books {
    /// How many queued waiters may take the lock at once: N with --limit N.
    pub fn front(&self) -> u32 {
        self.limit.unwrap_or(1)
    }

    /// A --limit holder's entry in `slots`, `<N>:<token>`; empty without
    /// --limit (the scripts then leave `slots` alone).
    pub fn member(&self, token: &str) -> String {
        self.limit.map_or(String::new(), |n| format!("{n}:{token}"))
    }

    /// The key where a script keeps our entry (`member`): `slots` with
    /// --limit. Without, the script names nothing there and the holder
    /// record stands in: a key that exists, in the same hash slot, since a
    /// Cluster whose slot is being moved refuses (TRYAGAIN) a script some of
    /// whose keys are missing, and a heartbeat must get through.
    pub fn entries(&self) -> &[u8] {
        match self.limit {
            Some(_) => &self.slots,
            None => &self.holder,
        }
    }
}

/// How an acquire treats the --wait queue.
#[derive(Clone, Debug, PartialEq)]
pub enum Queue {
    /// Not at all (--wait-unfair): race whoever else is trying.
    Ignore,
    /// A single try: only when no waiter is queued ahead (with --limit N,
    /// fewer than N).
    Check,
    /// A waiter: take (or renew) a place in the queue, which lapses after
    /// `lapse` unless renewed, and take the lock only from the front of the
    /// queue. The place is scored by `ticket` where the waiter has one (the
    /// same on every node), else by the node's own clock (see
    /// `Lock::acquire`).
    Join {
        ticket: Option<u64>,
        lapse: Duration,
    },
}

/// Why a node refused an acquire.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// Another token holds the key taken (the lock, or the slot).
    Held,
    /// With --limit: a plain holder holds the lock itself.
    Plain,
    /// Without --limit: runs with --limit N hold slots of the lock.
    Slots(u32),
    /// A writer (or a --limit run): this many --shared readers hold shares.
    Readers(u32),
    /// Waiters are queued ahead (this many in the queue).
    Queued(u64),
    /// With --limit N: runs with --limit M (another number) hold slots.
    Limit(u32),
}

/// An acquire's answer, with the fence counter found beside the lock when
/// asked, and for a queued waiter its place.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Granted {
    pub answer: Answer,
    pub fence: Option<u64>,
    /// Why the node refused.
    pub refusal: Option<Refusal>,
    /// A queued waiter's score on the node: its ticket, or the node's time
    /// of its first enqueue there.
    pub place: Option<u64>,
    /// When refused for the queue: how soon the earliest place ahead of
    /// ours lapses unless renewed (a dead waiter's place).
    pub lapse_ahead: Option<Duration>,
    /// Which server answered (a digest of its `run_id`), where redlock-run's
    /// own connection learnt it before this answer (see `same_voter`).
    pub server: Option<u64>,
    /// When refused because another token holds the lock: its holder
    /// record (field, value), if it has one.
    pub holder: Vec<(String, String)>,
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
    /// Waiters in the --wait queue (lapsed places included until pruned).
    pub queued: i64,
    /// The --shared readers holding shares here.
    pub readers: Vec<Share>,
}

/// One reader's share on one node, as `inspect` found it.
#[derive(Clone, Debug, Default)]
pub struct Share {
    pub token: Vec<u8>,
    /// Milliseconds until it lapses unless renewed.
    pub left_ms: i64,
    /// Its record's fields (empty when it has none).
    pub record: Vec<(String, String)>,
}

/// One key of a lock on a node, for `status --keys`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyInfo {
    pub key: Vec<u8>,
    /// What TYPE says: string, hash, list, zset...
    pub kind: String,
    /// Milliseconds left; -1 with no expiry.
    pub pttl: i64,
}

/// Why `forget` left a lock alone on a node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InUse {
    /// The lock's key exists.
    Held,
    /// A --limit slot is held.
    Slot,
    /// A --shared reader holds a share.
    Shared,
    /// Waiters whose places have not lapsed are queued.
    Queued,
}

/// What `forget` asks of a node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Forget {
    /// Only whether the lock is in use: nothing deleted.
    Check,
    /// Delete the lock's keys unless it is in use.
    Delete,
    /// Delete them all, the lock's own key too, in use or not.
    Force,
}

/// What `forget` found and did on one node.
#[derive(Clone, Debug, Default)]
pub struct Forgotten {
    /// Why the lock is in use, if it is (with --force it was, and went).
    pub in_use: Option<InUse>,
    /// The holder's token, when held.
    pub token: Option<Vec<u8>>,
    /// The holder's record, where it has one.
    pub holder: Vec<(String, String)>,
    /// Live waiters in the queue.
    pub waiting: i64,
    /// Keys deleted (0 when refused).
    pub removed: i64,
    /// Left alone: in use, without --force.
    pub refused: bool,
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

/// How a node has fared in this run, for rounds and reports.
#[derive(Default)]
struct Health {
    /// When each request submitted and not yet answered was submitted,
    /// oldest first.
    pending: std::collections::VecDeque<Instant>,
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
    target: Arc<Target>,
    session: Arc<Mutex<Session>>,
    /// Started on the first `submit`.
    worker: Mutex<Option<Sender<Job>>>,
    health: Mutex<Health>,
    /// What the session noticed about the topology (a Sentinel group's new
    /// primary), for the log; see `Node::notes`.
    notes: Arc<Mutex<Vec<String>>>,
    /// The writing half of the session's connection (see `write_behind`).
    line: Arc<Mutex<Line>>,
    /// Jobs submitted so far: the next one's number.
    jobs: AtomicU64,
    /// Jobs finished: the node is idle when it equals `jobs`.
    done: Arc<AtomicU64>,
    /// --replicas N.
    replicas: u32,
    /// The addresses a host name was found at as the run started, for the
    /// node's first connect (see `polled`).
    resolved: Mutex<Option<Vec<std::net::SocketAddr>>>,
}

impl Node {
    /// Parses the URL and applies `opts`; no I/O. The error names the node
    /// without its password.
    pub fn new(url: &str, opts: &Options) -> Result<Node, String> {
        let name = redact(url);
        let passwords = [&opts.password, &opts.sentinel_password];
        for secret in url::secrets(url)
            .iter()
            .chain(passwords.into_iter().flatten())
        {
            error::keep_secret(secret);
        }
        let target = Arc::new(Target::new(url::parse(url, &name)?, &name, opts)?);
        let notes = Arc::new(Mutex::new(Vec::new()));
        let line = Arc::new(Mutex::new(Line::default()));
        Ok(Node {
            session: Arc::new(Mutex::new(Session::new(
                &name,
                Arc::clone(&target),
                opts,
                Arc::clone(&notes),
                Arc::clone(&line),
            ))),
            line,
            jobs: AtomicU64::new(0),
            done: Arc::new(AtomicU64::new(0)),
            replicas: opts.replicas,
            resolved: Mutex::new(None),
            name,
            timeout: opts.timeout,
            target,
            worker: Mutex::new(None),
            health: Mutex::new(Health::default()),
            notes,
        })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// Keeps the addresses `client`'s host name was found at, for the first
    /// connect: looking the name up again a moment later would only cost a
    /// thread and a lookup.
    fn remember(&self, client: &redis::Client, ips: &[std::net::IpAddr]) {
        if let Some((_, port)) = server::host_name(client) {
            let addrs = ips
                .iter()
                .map(|ip| std::net::SocketAddr::new(*ip, port))
                .collect();
            *lock(&self.resolved) = Some(addrs);
        }
    }

    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// What happened to the node's topology since the last call (a Sentinel
    /// group that answered from a new primary), oldest first.
    pub fn notes(&self) -> Vec<String> {
        std::mem::take(&mut *lock(&self.notes))
    }

    /// Counts a request as outstanding; `finish` counts its answer.
    pub fn begin(&self) {
        lock(&self.health).pending.push_back(Instant::now());
    }

    pub fn finish<T>(&self, result: &Result<T, NodeError>) {
        let mut h = lock(&self.health);
        h.pending.pop_front();
        match result {
            Ok(_) => h.answered = true,
            // Withdrawn by this run's own release: not the node's failure.
            Err(e) if e.is_superseded() => {}
            Err(e) => {
                h.timed_out |= e.is_timeout();
                if h.first_error.is_none() {
                    h.first_error = Some(e.to_string());
                }
            }
        }
    }

    /// When the oldest request still outstanding here was submitted.
    pub fn waiting_since(&self) -> Option<Instant> {
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
    /// before it. Returns at once, with the job's number (see
    /// `write_behind`).
    pub fn submit(&self, job: Job) -> u64 {
        self.submit_to(&mut lock(&self.worker), job)
    }

    /// `submit`, with the worker slot already held.
    fn submit_to(&self, worker: &mut Option<Sender<Job>>, job: Job) -> u64 {
        let seq = self.jobs.fetch_add(1, Ordering::Relaxed);
        let done = Arc::clone(&self.done);
        let job: Job = Box::new(move |session: &mut Session| {
            session.job = seq;
            job(session);
            done.fetch_add(1, Ordering::Release);
        });
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
                Ok(()) => return seq,
                Err(mpsc::SendError(job)) => job,
            },
            None => job,
        };
        // No worker thread to be had: run it here, late but in order (we hold
        // the worker slot, so nothing else can be submitted meanwhile).
        job(&mut lock(&self.session));
        seq
    }

    /// Runs `f` on the calling thread. For a lock on a single node, where
    /// there is nothing to overlap and a thread hop would only add latency.
    pub fn run<T>(&self, f: impl FnOnce(&mut Session) -> T) -> T {
        let seq = self.jobs.fetch_add(1, Ordering::Relaxed);
        let mut session = lock(&self.session);
        session.job = seq;
        let out = f(&mut session);
        self.done.fetch_add(1, Ordering::Release);
        out
    }

    /// For job `job`, which has not been answered and may still be waiting
    /// behind an unanswered request on the node's worker: writes its request
    /// `bytes` on the node's connection now, behind what is in flight there,
    /// and does not wait for the reply. The node, when it answers again,
    /// applies the two in the order written: an acquire that was never
    /// answered, then its release. Jobs submitted before `job` and not yet
    /// written are not written any more (the release is the last word on
    /// what they would have done). False when there is no connection of
    /// redlock-run's own to write on (TLS, Cluster, or none yet): the job
    /// then stays queued on the worker.
    pub fn write_behind(&self, job: u64, bytes: &[u8]) -> bool {
        lock(&self.line).write_behind(job, bytes)
    }

    /// Before the process ends, so that what was written behind reaches the
    /// node (see `Line::close`).
    pub fn close(&self) {
        lock(&self.line).close();
    }

    /// Blocks on a connection of its own subscribed to `channels`: `ready` once
    /// the first subscription stands (or failed), then `wake` for every
    /// message, until `wake` returns false or `alive` says the wait is over.
    ///
    /// A subscription that drops (the node restarted, `CLIENT KILL TYPE
    /// pubsub`, a proxy's idle timeout) is made again at once, then with a
    /// pause doubling up to `RESUBSCRIBE_MAX` while the node refuses or the
    /// subscription drops again at once; each new one calls `wake` too, since
    /// a release may have come while nobody listened.
    ///
    /// A release PUBLISHes from the node that held the lock: on a Sentinel
    /// group that is the primary, and on a Cluster any node hears it (Cluster
    /// forwards PUBLISH to every node), so the first seed that answers does.
    pub fn watch(
        &self,
        channels: &[Vec<u8>],
        ready: impl FnOnce(Result<(), NodeError>),
        mut wake: impl FnMut() -> bool,
        alive: impl Fn() -> bool,
    ) {
        let mut ready = Some(ready);
        let mut pause = Duration::ZERO;
        loop {
            // A connection of its own: a subscribed connection can do
            // nothing else.
            let failed = match self.target.plain(&self.name, self.timeout) {
                Err(e) => Some(e),
                Ok(mut conn) => {
                    let mut pubsub = conn.as_pubsub();
                    match pubsub.subscribe(channels) {
                        Err(e) => Some(error::wording(&self.name, self.timeout, &e)),
                        Ok(()) => {
                            let since = Instant::now();
                            let woken = match ready.take() {
                                Some(ready) => {
                                    ready(Ok(()));
                                    true
                                }
                                None => wake(),
                            };
                            // Messages may be far apart: no read timeout. A
                            // dead node ends the loop through its connection,
                            // and the waiter's own renewals cover the gap.
                            if woken && pubsub.set_read_timeout(None).is_ok() {
                                while pubsub.get_message().is_ok() && wake() {}
                            }
                            // Closing the connection ends the subscription:
                            // not the UNSUBSCRIBE the crate sends on drop, a
                            // round trip for nothing that would block on a
                            // node that stopped answering.
                            std::mem::forget(pubsub);
                            if !alive() {
                                return;
                            }
                            // Once at once; a subscription that keeps
                            // dropping as soon as it stands backs off.
                            if since.elapsed() >= RESUBSCRIBE_MAX {
                                pause = Duration::ZERO;
                            } else {
                                pause = (pause * 2).clamp(RESUBSCRIBE_MIN, RESUBSCRIBE_MAX);
                            }
                            None
                        }
                    }
                }
            };
            if let Some(e) = failed {
                if let Some(ready) = ready.take() {
                    ready(Err(e));
                }
                pause = (pause * 2).clamp(RESUBSCRIBE_MIN, RESUBSCRIBE_MAX);
            }
            // A Sentinel group's primary may have moved: ask again.
            self.target.forget();
            if !alive() {
                return;
            }
            thread::sleep(pause);
        }
    }
}

/// Two of `nodes` that are one server under two names: the same address
/// (any of those a name resolves to), port and database, or the same Unix
/// socket. One server must count once in a quorum, or "2 of 3 granted" may
/// come from one machine, with no fault tolerance left.
///
/// By address only, which costs no request (a name is resolved within the
/// node timeout, as the connect would). A server reached under two
/// addresses of its own (loopback and a LAN address, a proxy's port) is one
/// `run_id`: a run learns it on redlock-run's own connection from an
/// `INFO server` written with the connection's set-up, whose reply comes
/// ahead of the acquire's, and refuses two votes from one server when it
/// counts them (`Lock::same_voter`); `status` asks for it in a round of its
/// own, where a round trip costs no run anything. `unlock` and `history`
/// stop here: deleting or reading one server twice does no harm.
pub fn same_server(nodes: &[&Node]) -> Option<String> {
    // Every name is looked up at once, each within its node's timeout; what
    // is found serves the node's first connect too (see `remember`).
    let started = Instant::now();
    let lookups: Vec<Option<server::Lookup>> = nodes
        .iter()
        .map(|n| match n.target.as_ref() {
            Target::Server(client) => server::host_name(client)
                .map(|(host, port)| server::Lookup::start(host, port, &n.name)),
            _ => None,
        })
        .collect();
    let places: Vec<Option<server::Place>> = nodes
        .iter()
        .zip(lookups)
        .map(|(n, lookup)| {
            let Target::Server(client) = n.target.as_ref() else {
                return None;
            };
            let found = match lookup {
                None => None,
                Some(l) => {
                    let ips = l.wait(started + n.timeout, n.timeout).ok()?;
                    n.remember(client, &ips);
                    Some(ips)
                }
            };
            server::place(client, found)
        })
        .collect();
    for (i, a) in places.iter().enumerate() {
        for (j, b) in places.iter().enumerate().skip(i + 1) {
            if let (Some(a), Some(b)) = (a, b)
                && let Some(at) = a.shared(b)
            {
                return Some(format!(
                    "{} and {} are the same server ({at}): each server counts once in the \
                     quorum, give each node once",
                    nodes[i].name, nodes[j].name
                ));
            }
        }
    }
    None
}

/// Two nodes whose servers report the same `run_id` (see `same_server`);
/// `ids` in node order, None where unknown.
pub fn same_run_id(names: &[&str], ids: &[Option<String>]) -> Option<String> {
    for (i, a) in ids.iter().enumerate() {
        for (j, b) in ids.iter().enumerate().skip(i + 1) {
            if let (Some(a), Some(b)) = (a, b)
                && a == b
            {
                return Some(format!(
                    "{} and {} are the same server (run_id {}): each server counts once in \
                     the quorum, give each node once",
                    names[i],
                    names[j],
                    &a[..a.len().min(8)]
                ));
            }
        }
    }
    None
}

/// How soon a dropped subscription is tried again while its node refuses:
/// first at once, then doubling from the first to the second.
const RESUBSCRIBE_MIN: Duration = Duration::from_millis(20);
const RESUBSCRIBE_MAX: Duration = Duration::from_millis(500);

/// How to reach the nodes, beyond what their URLs say.
#[derive(Clone, Default)]
pub struct Options {
    /// Bound on connect (and name resolution), read and write.
    pub timeout: Duration,
    /// For nodes whose URL has no password (from --password-file or
    /// REDLOCK_PASSWORD, REDLOCK_USERNAME).
    pub username: Option<String>,
    pub password: Option<String>,
    /// For the sentinels of a `redis+sentinel://` node (from
    /// --sentinel-password-file or REDLOCK_SENTINEL_PASSWORD,
    /// REDLOCK_SENTINEL_USERNAME); without it they are sent no AUTH.
    pub sentinel_username: Option<String>,
    pub sentinel_password: Option<String>,
    /// PEM: a private CA for rediss:// nodes instead of the system roots.
    pub tls_ca: Option<Vec<u8>>,
    /// PEM: client certificate and key, for servers that require them.
    pub tls_client: Option<(Vec<u8>, Vec<u8>)>,
    /// No certificate or host-name checks.
    pub tls_insecure: bool,
    /// --replicas N: a write counts only once N replicas of the node
    /// acknowledged it (WAIT).
    pub replicas: u32,
}

impl Options {
    fn certificates(&self) -> Option<redis::TlsCertificates> {
        if self.tls_ca.is_none() && self.tls_client.is_none() {
            return None;
        }
        Some(redis::TlsCertificates {
            client_tls: self
                .tls_client
                .as_ref()
                .map(|(cert, key)| redis::ClientTlsConfig {
                    client_cert: cert.clone(),
                    client_key: key.clone(),
                }),
            root_cert: self.tls_ca.clone(),
        })
    }
}

// By hand, so that no `{:?}` anywhere can print a password or the key.
impl fmt::Debug for Options {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Options")
            .field("timeout", &self.timeout)
            .field("username", &self.username)
            .field("password", &self.password.as_ref().map(|_| "***"))
            .field("sentinel_username", &self.sentinel_username)
            .field(
                "sentinel_password",
                &self.sentinel_password.as_ref().map(|_| "***"),
            )
            .field("tls_ca", &self.tls_ca.is_some())
            .field("tls_client", &self.tls_client.is_some())
            .field("tls_insecure", &self.tls_insecure)
            .field("replicas", &self.replicas)
            .finish()
    }
}

/// Locks a mutex, shrugging off poisoning: a panic mid-request leaves at
/// worst a connection in an unknown state, and that one is dropped.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX).max(1)
}

/// The rustls crypto provider, installed before the first TLS connection.
/// The crate's rustls comes without one. Installing twice (several rediss://
/// nodes) is harmless and reported as Err.
fn tls_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_urls_are_rejected_without_echoing_secrets() {
        for url in [
            "notaurl://x",
            "redis://:pw@[::1",
            "http://h",
            "redis+cluster://:pw@",
            "redis+sentinel://:pw@h:1",
            "redis+sentinel://:pw@h:1/",
            "redis+sentinel://:pw@h:x/m",
            "redis+cluster://:pw@h:1,,h:2",
        ] {
            let err = Node::new(url, &Options::default())
                .err()
                .expect("must fail");
            assert!(err.starts_with("invalid Redis URL"), "{err}");
            assert!(!err.contains("pw@"), "{err}");
        }
    }

    #[test]
    fn every_url_form_makes_a_node() {
        for url in [
            "redis://127.0.0.1:1",
            "unix:///run/r.sock",
            "redis+cluster://127.0.0.1:1,127.0.0.1:2",
            "redis+cluster://u:p@[::1]:1",
            "redis+sentinel://127.0.0.1:1,127.0.0.1:2/mymaster",
            "redis+sentinel://:p@h1,h2:3/mymaster/2",
            "rediss+cluster://h:1",
            "rediss+sentinel://h:1/m",
        ] {
            if let Err(e) = Node::new(url, &Options::default()) {
                panic!("{url}: {e}");
            }
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
