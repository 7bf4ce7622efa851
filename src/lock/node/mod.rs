//! One node of the quorum: a plain Redis server, a Sentinel group (whichever
//! server its sentinels name primary), or a whole Redis Cluster (the master
//! of the lock's hash slot).
//!
//! There is one way for a request to reach a node, whatever its topology:
//! it is queued on the node's `State`, which writes it on a non-blocking
//! `Link` (redlock-run's own connection: TCP, a Unix socket or TLS) behind
//! whatever that connection has in flight, and its reply is taken when the
//! thread that runs the round (see `quorum`) has polled it in. No node has a
//! thread of its own. Each promise the lock makes of a node is kept in one
//! place: the set-up answered before any request (`link`), one timeout from
//! the moment a request is written (`link`), a release written behind an
//! unanswered acquire on the same connection (`link`), bounded replies
//! (`resp`), the topology followed (`state`).
//!
//! - `url`: the URL forms, and the redaction of their passwords;
//! - `topology`: what a URL names, its addresses and set-ups;
//! - `tls`: the rustls configuration;
//! - `link`: one connection; `resp`: where a reply ends; `broken`: how a
//!   connection went wrong;
//! - `server`: what a server says of itself on each connection;
//! - `state`: a node's connections and requests, discovery and redirects;
//! - `requests`: the lock's requests and their typed answers;
//! - `inquiry`: read-only questions for `check` (INFO, CONFIG GET, TIME...);
//! - `scripts`: the Lua every request runs;
//! - `watch`: a subscription to release announcements;
//! - `place`: two names of one server;
//! - `error`: what a failure says.

mod broken;
mod error;
mod inquiry;
mod link;
mod place;
mod requests;
mod resp;
mod scripts;
mod server;
mod state;
mod tls;
mod topology;
mod url;
mod watch;

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::lock::redlock::{self, Answer};

pub(crate) use error::{Kind, NodeError, refused_by_acl};
pub(crate) use inquiry::*;
pub(crate) use place::same_run_id;
use place::same_server;
pub(crate) use requests::*;
pub(crate) use scripts::RECORD_CAP;
pub(crate) use server::Server;
pub(crate) use url::{check_list, push_masked_authority, redact};

pub(crate) use state::{Answered, Req, State};
use topology::{Names, Topology};

/// The keys one acquire, extension or release touches.
#[derive(Clone, Debug)]
pub(crate) struct KeySet {
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

impl KeySet {
    /// How many queued waiters may take the lock at once: N with --limit N.
    pub(crate) fn front(&self) -> u32 {
        self.limit.unwrap_or(1)
    }

    /// A --limit holder's entry in `slots`, `<N>:<token>`; empty without
    /// --limit (the scripts then leave `slots` alone).
    pub(crate) fn member(&self, token: &str) -> String {
        self.limit.map_or(String::new(), |n| format!("{n}:{token}"))
    }

    /// The key where a script keeps our entry (`member`): `slots` with
    /// --limit. Without, the script names nothing there and the holder
    /// record stands in: a key that exists, in the same hash slot, since a
    /// Cluster whose slot is being moved refuses (TRYAGAIN) a script some of
    /// whose keys are missing, and a heartbeat must get through.
    pub(crate) fn entries(&self) -> &[u8] {
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
pub(crate) enum Refusal {
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
pub(crate) struct Granted {
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
    /// When refused because another token holds the lock: its holder
    /// record (field, value), if it has one.
    pub holder: Vec<(String, String)>,
}

impl crate::lock::redlock::Vote for Granted {
    fn answer(&self) -> Answer {
        self.answer
    }
}

/// What `inspect` found on one node.
#[derive(Clone, Debug, Default)]
pub(crate) struct Inspection {
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
pub(crate) struct Share {
    pub token: Vec<u8>,
    /// Milliseconds until it lapses unless renewed.
    pub left_ms: i64,
    /// Its record's fields (empty when it has none).
    pub record: Vec<(String, String)>,
}

/// One key of a lock on a node, for `status --keys`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct KeyInfo {
    pub key: Vec<u8>,
    /// What TYPE says: string, hash, list, zset...
    pub kind: String,
    /// Milliseconds left; -1 with no expiry.
    pub pttl: i64,
}

/// Why `forget` left a lock alone on a node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum InUse {
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
pub(crate) enum Forget {
    /// Only whether the lock is in use: nothing deleted.
    Check,
    /// Delete the lock's keys unless it is in use.
    Delete,
    /// Delete them all, the lock's own key too, in use or not.
    Force,
}

/// What `forget` found and did on one node.
#[derive(Clone, Debug, Default)]
pub(crate) struct Forgotten {
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
pub(crate) enum Extension {
    Extended,
    /// The key is gone here (expired, or the node restarted empty).
    Absent,
    /// Another token holds it.
    NotOurs,
}

impl crate::lock::redlock::Vote for Extension {
    fn answer(&self) -> Answer {
        match self {
            Extension::Extended => Answer::Granted,
            Extension::Absent | Extension::NotOurs => Answer::Refused,
        }
    }
}

/// What a release found on the node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Released {
    Deleted,
    AlreadyGone,
    /// Another token holds the key: left alone.
    NotOurs,
}

/// What is wrong with how a node is given (its URL, the TLS files it
/// needs): a usage error, found before anything is sent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BadNode {
    /// The URL does not parse, or names what redlock-run cannot use.
    Url { name: String, why: String },
    /// The TLS files cannot be used for it.
    Tls { name: String, why: String },
}

impl BadNode {
    fn url(name: &str, why: &str) -> BadNode {
        BadNode::Url {
            name: name.to_string(),
            why: why.to_string(),
        }
    }
}

impl fmt::Display for BadNode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BadNode::Url { name, why } => write!(f, "invalid Redis URL '{name}': {why}"),
            BadNode::Tls { name, why } => write!(f, "cannot use Redis node '{name}': {why}"),
        }
    }
}

impl std::error::Error for BadNode {}

/// What a node's run looked like, for the report and the closing warning.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Fared {
    /// Every request it got an answer to went fine.
    Answered,
    /// It failed at least once: the first error.
    Failed(String),
    /// It answered, but a vote of its did not count: it had started less
    /// than the restart grace before (the first such answer).
    SatOut(String),
    /// Not a single answer, and none due any more: its requests failed,
    /// or have waited longer than the node timeout.
    Silent,
    /// Not a single answer yet, its oldest request within the node timeout:
    /// the run was shorter than the node had to answer (a TLS handshake, a
    /// busy host), which says nothing against the node. A stopped node is
    /// named by a run that lasts longer than its node timeout.
    Pending,
}

pub struct Node {
    /// Redacted URL: safe for logs and errors.
    name: String,
    timeout: Duration,
    /// --replicas N.
    replicas: u32,
    /// --restart-grace and --durable (see `uncounted`).
    restart_grace: Duration,
    durable: bool,
    topology: Topology,
    tls: tls::Tls,
    /// Names looked up for the run, shared by its nodes.
    names: Arc<Names>,
    /// The passwords in use (every node's, and the options'): no message
    /// shows them, whatever a server repeats of what it was sent.
    secrets: Arc<[String]>,
    state: Mutex<State>,
}

impl Node {
    /// Parses the URL and applies `opts`; no I/O. The error names the node
    /// without its password.
    fn new(
        url: &str,
        opts: &Options,
        names: Arc<Names>,
        secrets: Arc<[String]>,
    ) -> Result<Node, BadNode> {
        let name = redact(url);
        let topology = Topology::new(url::parse(url, &name)?, &name, opts)?;
        let tls = tls::Tls::new(opts);
        if topology.tls() {
            // Bad TLS files are a usage error, found before anything runs.
            tls.config(false).map_err(|e| BadNode::Tls {
                name: name.clone(),
                why: e.to_string(),
            })?;
        }
        Ok(Node {
            name,
            timeout: opts.timeout,
            replicas: opts.replicas,
            restart_grace: opts.restart_grace,
            durable: opts.durable,
            topology,
            tls,
            names,
            secrets,
            state: Mutex::new(State::default()),
        })
    }

    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    pub(crate) fn timeout(&self) -> Duration {
        self.timeout
    }

    /// How long a request may wait to be written before it fails: a
    /// connect and a reply.
    fn expiry(&self) -> Duration {
        redlock::round_limit(self.timeout)
    }

    /// The node's connections and requests, for the one thread driving it.
    pub(crate) fn state(&self) -> MutexGuard<'_, State> {
        lock(&self.state)
    }

    /// What happened to the node's topology since the last call (a Sentinel
    /// group that answered from a new primary), oldest first.
    pub(crate) fn notes(&self) -> Vec<String> {
        std::mem::take(&mut self.state().notes)
    }

    /// When the oldest request still outstanding here was made.
    pub(crate) fn waiting_since(&self) -> Option<Instant> {
        self.state().waiting_since()
    }

    /// A request timed out earlier in this run.
    pub(crate) fn timed_out(&self) -> bool {
        self.state().health.timed_out
    }

    /// How this node has fared in the run so far.
    pub(crate) fn fared(&self) -> Fared {
        let state = self.state();
        let h = &state.health;
        match (&h.first_error, &h.sat_out, h.answered) {
            (Some(e), _, _) => Fared::Failed(e.clone()),
            (None, Some(e), _) => Fared::SatOut(e.clone()),
            (None, None, true) => Fared::Answered,
            (None, None, false) => match state.waiting_since() {
                Some(since) if since.elapsed() < self.timeout => Fared::Pending,
                _ => Fared::Silent,
            },
        }
    }

    /// Whether it answered without an error after it last failed.
    pub(crate) fn recovered(&self) -> bool {
        self.state().health.recovered
    }

    /// `request` for node `index` as the node sends it: its command, and
    /// with `--replicas` a WAIT once a write is answered (see `Req::wait`).
    /// None when it asks nothing here.
    pub(crate) fn packet<R: Request + ?Sized>(
        &self,
        request: &R,
        index: usize,
        ticket: u64,
        alike: Option<&Arc<Vec<u8>>>,
    ) -> Option<Req> {
        let bytes = match alike {
            Some(bytes) => Arc::clone(bytes),
            None => Arc::new(request.command(index)?.get_packed_command()),
        };
        let mut req = Req::new(
            ticket,
            bytes,
            crate::lock::keys::hash_slot(request.key()),
            Instant::now(),
        );
        req.recheck = request.recheck();
        req.last_word = request.last_word();
        req.wait = (self.replicas > 0 && request.writes()).then_some(self.replicas);
        req.durable = self.durable && request.votes();
        Some(req)
    }

    /// The answer of this node (node `index` of the round) to `request`,
    /// from its raw replies.
    pub(crate) fn answer<R: Request + ?Sized>(
        &self,
        request: &R,
        index: usize,
        raw: Result<Answered, NodeError>,
    ) -> Result<R::Answer, NodeError> {
        self.decode(request, index, raw)
            .map_err(|e| e.without(&self.secrets))
    }

    fn decode<R: Request + ?Sized>(
        &self,
        request: &R,
        index: usize,
        raw: Result<Answered, NodeError>,
    ) -> Result<R::Answer, NodeError> {
        let Answered {
            reply,
            acked,
            synced,
            server,
        } = raw?;
        if let redis::Value::ServerError(e) = &reply {
            return Err(match self.topology {
                Topology::Cluster { .. } => error::cluster_error(&self.name, e),
                _ => error::server_error(&self.name, e),
            });
        }
        let wrote = request.wrote(index, &reply);
        let answer = request.decode(index, reply, &self.name)?;
        if !wrote {
            return Ok(answer);
        }
        match acked {
            None => {}
            Some(redis::Value::Int(n)) if n >= i64::from(self.replicas) => {}
            Some(redis::Value::Int(n)) => {
                return request.uncounted(
                    answer,
                    NodeError::new(
                        Kind::Unreplicated,
                        format!(
                            "{}: only {n} of {} replicas acknowledged the write within {} \
                             (--replicas)",
                            self.name,
                            self.replicas,
                            humantime::format_duration(self.timeout)
                        ),
                        true,
                    ),
                );
            }
            Some(redis::Value::ServerError(e)) => return Err(error::server_error(&self.name, &e)),
            Some(other) => return Err(error::unexpected(&self.name, "WAIT", &other)),
        }
        if !request.votes() {
            return Ok(answer);
        }
        match self.uncounted(server.as_deref(), synced, Instant::now()) {
            None => Ok(answer),
            Some(e) => request.uncounted(answer, e),
        }
    }

    /// Why a vote this node wrote must not count: it may forget it. Under
    /// --durable, unless the write is on its disk (WAITAOF said so, or it
    /// syncs every write). Otherwise, while it has been up for less than
    /// the restart grace, unless it syncs every write: a node restarted
    /// without them has forgotten the locks it granted, and one of them
    /// may still be held, for as long as any run's TTL (Redlock's delayed
    /// restart). None: the vote counts.
    fn uncounted(
        &self,
        server: Option<&Server>,
        synced: Option<redis::Value>,
        now: Instant,
    ) -> Option<NodeError> {
        if self.durable {
            return self.undurable(server, synced);
        }
        if self.restart_grace.is_zero() || server.is_some_and(Server::syncs_every_write) {
            return None;
        }
        match server.and_then(|s| s.uptime(now)) {
            Some(up) if up >= self.restart_grace => None,
            up => Some(error::restarted(&self.name, up, self.restart_grace, now)),
        }
    }

    /// --durable: why the write cannot be shown to be on the node's disk.
    fn undurable(
        &self,
        server: Option<&Server>,
        synced: Option<redis::Value>,
    ) -> Option<NodeError> {
        let why = match synced {
            Some(redis::Value::Array(counts)) => match counts.first() {
                Some(redis::Value::Int(n)) if *n >= 1 => return None,
                Some(redis::Value::Int(_)) => format!(
                    "did not write it to its disk within {} (WAITAOF)",
                    humantime::format_duration(self.timeout)
                ),
                _ => {
                    return Some(error::unexpected(
                        &self.name,
                        "WAITAOF",
                        &redis::Value::Array(counts),
                    ));
                }
            },
            Some(redis::Value::ServerError(e)) if format!("{e}").contains("appendonly") => {
                "appendonly no: it keeps no log to replay after a restart".to_string()
            }
            Some(redis::Value::ServerError(e)) => return Some(error::server_error(&self.name, &e)),
            Some(other) => return Some(error::unexpected(&self.name, "WAITAOF", &other)),
            None => match server {
                Some(s) if s.syncs_every_write() => return None,
                Some(s) if s.appendonly == Some(false) => {
                    "appendonly no: it keeps no log to replay after a restart".to_string()
                }
                Some(s) if s.appendonly.is_some() => format!(
                    "appendfsync {} and no WAITAOF ({}): a crash may lose the last second of \
                     writes (set appendfsync always, or use Redis 7.2 or later)",
                    s.appendfsync.as_deref().unwrap_or("?"),
                    s.product.as_deref().unwrap_or("an older server")
                ),
                _ => "cannot tell whether it writes to disk before it answers: CONFIG GET is \
                      refused and it has no WAITAOF (allow +config|get)"
                    .to_string(),
            },
        };
        Some(error::undurable(&self.name, &why))
    }

    /// Why its vote would not count now, going by what its server said
    /// last, when it sits out its restart grace: such a node is not written
    /// to in vain (see `Lock::extend`).
    pub(crate) fn sitting_out(&self) -> Option<NodeError> {
        let server = self.state().server.clone();
        self.uncounted(server.as_deref(), None, Instant::now())
            .filter(|e| e.restarted().is_some())
    }

    /// How long the server that answered last has been up, where it said.
    pub(crate) fn uptime(&self) -> Option<Duration> {
        let server = self.state().server.clone();
        server?.uptime(Instant::now())
    }

    /// A digest of the `run_id` of `server`, the one that answered (see
    /// `Lock::same_voter`). A Cluster's servers are its masters, each
    /// answering for its slots: none stands for the node.
    pub(crate) fn server_digest(&self, server: Option<&Server>) -> Option<u64> {
        use std::hash::{Hash, Hasher};
        if matches!(self.topology, Topology::Cluster { .. }) {
            return None;
        }
        server?.run_id.as_ref().map(|id| {
            let mut h = std::hash::DefaultHasher::new();
            id.hash(&mut h);
            h.finish()
        })
    }

    /// Ends the node's connections without losing what was written on them
    /// (see `Link::close`): before the process ends.
    pub(crate) fn close(&self) {
        self.state().close(Instant::now());
    }
}

/// How fast the nodes of a run answer: one more than the slowest answer any
/// of them gave, in µs; 0 until one has answered.
#[derive(Default)]
pub(crate) struct Pace(AtomicU64);

impl Pace {
    /// Counts the latency of a result. Only a reply from the node tells how
    /// fast nodes answer: a refused connection is the local kernel's speed;
    /// counted, it would make a live node overdue a millisecond after its
    /// peers were refused, and its copy of the key would be left to expire.
    pub(crate) fn note<T>(&self, result: &Result<T, NodeError>, latency: Duration) {
        let answered = match result {
            Ok(_) => true,
            // An error the server answered is an answer, applied or not.
            Err(e) => !e.is_timeout() && (e.maybe_applied() || e.kind() == Kind::Server),
        };
        if answered {
            let us = u64::try_from(latency.as_micros()).unwrap_or(u64::MAX - 1);
            self.0.fetch_max(us + 1, Ordering::Relaxed);
        }
    }

    /// When a request outstanding since `since` makes its node overdue; None
    /// while no node has answered (nothing to be overdue against).
    pub(crate) fn overdue_at(&self, since: Instant) -> Option<Instant> {
        match self.0.load(Ordering::Relaxed) {
            0 => None,
            n => Some(since + Duration::from_micros(n - 1) * 2 + Duration::from_millis(1)),
        }
    }
}

/// The nodes of one run (or one subcommand), with what their rounds share:
/// the names looked up for them, and how fast the fastest have answered.
pub struct Nodes {
    list: Vec<Arc<Node>>,
    names: Arc<Names>,
    pace: Pace,
}

impl std::ops::Deref for Nodes {
    type Target = [Arc<Node>];
    fn deref(&self) -> &[Arc<Node>] {
        &self.list
    }
}

impl Nodes {
    /// The nodes `urls` name, reached as `opts` says; no I/O.
    pub fn new(urls: &[String], opts: &Options) -> Result<Nodes, BadNode> {
        let names = Arc::new(Names::default());
        let passwords = [&opts.password, &opts.sentinel_password];
        let secrets: Arc<[String]> = urls
            .iter()
            .flat_map(|u| url::secrets(u))
            .chain(passwords.into_iter().flatten().cloned())
            .filter(|s| !s.is_empty())
            .collect();
        let list = urls
            .iter()
            .map(|u| Node::new(u, opts, Arc::clone(&names), Arc::clone(&secrets)).map(Arc::new))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Nodes {
            list,
            names,
            pace: Pace::default(),
        })
    }

    /// Looks up every host name of every node at once, within the node
    /// timeout: the first connects use what is found.
    pub(crate) fn prepare(&self) {
        let places: Vec<&topology::Place> =
            self.list.iter().flat_map(|n| n.topology.places()).collect();
        let timeout = self
            .list
            .iter()
            .map(|n| n.timeout)
            .max()
            .unwrap_or_default();
        self.names.prepare(&places, timeout);
    }

    /// Starts connecting to every plain node, so that the handshakes go on
    /// while the run makes its first request (its holder record, its token).
    pub(crate) fn connect(&self) {
        self.prepare();
        let now = Instant::now();
        for node in &self.list {
            node.state().connect(node, now);
        }
    }

    /// How fast the nodes answer (see `quorum`).
    pub(crate) fn pace(&self) -> &Pace {
        &self.pace
    }

    /// Two nodes that are one server (see `place::same_server`), worded.
    pub(crate) fn same_server(&self) -> Option<String> {
        self.prepare();
        same_server(&self.list, &self.names)
    }

    /// Before the process ends: see `Node::close`.
    pub(crate) fn close(&self) {
        for n in &self.list {
            n.close();
        }
    }
}

impl Drop for Nodes {
    /// What was written behind an unanswered request must reach its node
    /// after the process ends (see `Link::close`).
    fn drop(&mut self) {
        self.close();
    }
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
    /// --restart-grace: a node up for less than this gives no vote, unless
    /// it syncs every write (see `Node::uncounted`); zero trusts every node.
    pub restart_grace: Duration,
    /// --durable: a node's vote counts only once it is on its disk.
    pub durable: bool,
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
            .field("restart_grace", &self.restart_grace)
            .field("durable", &self.durable)
            .finish()
    }
}

/// Waits until a descriptor of one of `states` is ready, or the first of
/// their deadlines or `until` passes, then lets each of them progress.
pub(crate) fn step(states: &mut [(&Node, &mut State)], until: Instant) {
    let now = Instant::now();
    let wake = states
        .iter()
        .filter_map(|(n, s)| s.wake(n))
        .fold(until, Instant::min);
    let left = wake.saturating_duration_since(now);
    if !left.is_zero() {
        let interest: Vec<_> = states.iter().flat_map(|(_, s)| s.interest()).collect();
        // Every request written, every node at work: the time to get ready
        // for their replies.
        if interest
            .iter()
            .all(|(_, f)| *f == rustix::event::PollFlags::IN)
        {
            resp::warm();
        }
        let mut fds: Vec<rustix::event::PollFd<'_>> = interest
            .into_iter()
            .map(|(fd, flags)| rustix::event::PollFd::from_borrowed_fd(fd, flags))
            .collect();
        if let Ok(ts) = rustix::event::Timespec::try_from(left) {
            // An error (EINTR: the process was stopped and continued) only
            // ends the wait early.
            let _ = rustix::event::poll(&mut fds, Some(&ts));
        }
    }
    let now = Instant::now();
    for (n, s) in states.iter_mut() {
        s.progress(n, now);
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

/// An error of `kind` for tests elsewhere in the crate.
#[cfg(test)]
pub(crate) fn test_error(kind: Kind, sent: bool) -> NodeError {
    NodeError::new(kind, "test".into(), sent)
}

/// An error that says `msg`, for tests elsewhere in the crate.
#[cfg(test)]
pub(crate) fn test_error_saying(msg: &str) -> NodeError {
    NodeError::new(Kind::Unreachable, msg.into(), false)
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
            let err = Nodes::new(&[url.to_string()], &Options::default())
                .err()
                .expect("must fail");
            assert!(matches!(err, BadNode::Url { .. }), "{err}");
            let err = err.to_string();
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
            if let Err(e) = Nodes::new(&[url.to_string()], &Options::default()) {
                panic!("{url}: {e}");
            }
        }
    }

    fn err(timeout: bool) -> Result<(), NodeError> {
        Err(if timeout {
            test_error(Kind::Timeout, true)
        } else {
            test_error(Kind::Unreachable, false)
        })
    }

    #[test]
    fn no_node_is_overdue_until_one_has_answered() {
        let pace = Pace::default();
        let since = Instant::now();
        assert_eq!(pace.overdue_at(since), None);
        // A refused connection and a timeout tell nothing of the pace.
        pace.note(&err(false), Duration::from_micros(50));
        pace.note(&err(true), Duration::from_secs(1));
        assert_eq!(pace.overdue_at(since), None);
        pace.note(&Ok::<(), NodeError>(()), Duration::from_micros(400));
        assert_eq!(
            pace.overdue_at(since),
            Some(since + Duration::from_micros(800) + Duration::from_millis(1))
        );
        // The slowest answer sets the pace.
        pace.note(&Ok::<(), NodeError>(()), Duration::from_micros(100));
        assert_eq!(
            pace.overdue_at(since),
            Some(since + Duration::from_micros(800) + Duration::from_millis(1))
        );
    }

    #[test]
    fn millis_never_sends_zero() {
        assert_eq!(millis(Duration::from_micros(10)), 1);
        assert_eq!(millis(Duration::from_secs(2)), 2000);
    }
}
