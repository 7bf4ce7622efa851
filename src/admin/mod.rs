//! `status`, `unlock`, `history` and `forget`: the 3 a.m. questions, "who
//! holds my lock?", "its holder is gone, can I clear it?" and "did it run,
//! where, and did it work?", and the clean-up of a lock that is retired.
//! Output goes to stdout; it is the answer, not a log.

// The answer goes to stdout through these, so that a write that fails (a
// full disk) ends the subcommand with one line and a status instead of the
// panic of std's println!. Defined before the modules so that they use them.
macro_rules! println {
    ($($arg:tt)*) => {
        $crate::admin::answer(format_args!($($arg)*), true)
    };
}
macro_rules! print {
    ($($arg:tt)*) => {
        $crate::admin::answer(format_args!($($arg)*), false)
    };
}

pub(crate) mod check;
pub(crate) mod config;
mod forget;
mod history;
mod status;
mod unlock;

use std::borrow::Cow;
use std::sync::Arc;
use std::time::Duration;

use crate::exit::Exit;
use crate::lock::keys::Keys;
use crate::lock::node::{self, Inspection, KeySet, NodeError, Nodes, Request};
use crate::lock::quorum::{self, Reply};
use crate::lock::redlock;
use crate::log::printable;

/// No TTL to scale from here: the run's default for a 30 s lock.
pub(crate) const DEFAULT_NODE_TIMEOUT: Duration = Duration::from_secs(1);

/// Writes part of the answer to stdout. When that fails the subcommand ends
/// there, with one line on stderr and status 74: it holds nothing that needs
/// undoing (keys an unlock or forget removed before stay removed).
pub(crate) fn answer(args: std::fmt::Arguments, newline: bool) {
    use std::io::Write;
    // Each field from a node is escaped where it is shown; this catches any
    // other text from one (a server's error) the same way, line by line.
    let text = std::fmt::format(args);
    let lines: Vec<Cow<str>> = text.split('\n').map(printable).collect();
    let mut out = std::io::stdout().lock();
    let written = out
        .write_all(lines.join("\n").as_bytes())
        .and_then(|()| {
            if newline {
                out.write_all(b"\n")
            } else {
                Ok(())
            }
        })
        .and_then(|()| out.flush());
    if let Err(e) = written {
        crate::log::say(format_args!("cannot write the answer to stdout: {e}"));
        std::process::exit(i32::from(crate::exit::ANSWER_UNWRITTEN));
    }
}

/// The lock a subcommand is about.
pub(crate) struct Subject {
    pub name: String,
    pub keys: Keys,
}

/// What a subcommand is asked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Ask {
    Status {
        json: bool,
        limit: Option<u32>,
        keys: bool,
    },
    /// With a token, where the lock holds it; without (--force), whatever
    /// holds it.
    Unlock {
        token: Option<String>,
    },
    History {
        json: bool,
        count: u32,
    },
    Forget {
        force: bool,
    },
}

/// Why the nodes given cannot be asked: a usage error.
#[derive(Debug)]
pub(crate) enum Unaskable {
    Node(node::BadNode),
    /// Two of them are one server, worded.
    SameServer(String),
}

impl std::fmt::Display for Unaskable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Unaskable::Node(e) => e.fmt(f),
            Unaskable::SameServer(msg) => f.write_str(msg),
        }
    }
}

/// The nodes a subcommand asks: `urls` reached as `options` say (the node
/// timeout unset: a second), each server once.
pub(crate) fn nodes(urls: &[String], mut options: node::Options) -> Result<Nodes, Unaskable> {
    if options.timeout.is_zero() {
        options.timeout = DEFAULT_NODE_TIMEOUT;
    }
    let nodes = Nodes::new(urls, &options).map_err(Unaskable::Node)?;
    match nodes.same_server() {
        Some(msg) => Err(Unaskable::SameServer(msg)),
        None => Ok(nodes),
    }
}

/// For a subcommand, before it writes its answer: when the answer's reader
/// goes away (`status | head -1`, `config | head -1`), end as ls(1) does,
/// killed by SIGPIPE, not with an error line over a write nobody reads. Every
/// subcommand has done its work on the nodes by the time it writes (check's
/// probe is released before its report), and none spawns anything, so the
/// disposition is theirs alone.
pub(crate) fn end_as_ls_on_a_closed_pipe() {
    // SAFETY: signal(2) has no safe form in the tree. Setting a signal to
    // its default disposition installs no handler, and for SIGPIPE it cannot
    // fail (SIG_ERR comes only for a number that is no signal, or SIGKILL
    // and SIGSTOP).
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

/// Runs the subcommand `ask` about `lock` on `nodes`.
pub(crate) fn dispatch(ask: &Ask, lock: &Subject, nodes: &Nodes) -> Exit {
    match ask {
        Ask::Status { json, limit, keys } => status::tell(lock, nodes, *json, *limit, *keys),
        Ask::Unlock { token } => unlock::delete(lock, nodes, token.as_deref()),
        Ask::History { json, count } => history::tell(lock, nodes, *json, *count),
        Ask::Forget { force } => forget::remove(lock, nodes, *force),
    }
}

pub(crate) fn limit(nodes: &Nodes) -> Duration {
    redlock::round_limit(nodes.first().map_or(DEFAULT_NODE_TIMEOUT, |n| n.timeout()))
}

/// How long a node may take to SCAN for a lock's keys (each request is
/// bounded by the node timeout; a keyspace of millions of keys takes
/// thousands of them).
fn scan_limit(nodes: &Nodes) -> Duration {
    limit(nodes).max(SCAN_LIMIT)
}

const SCAN_LIMIT: Duration = Duration::from_secs(60);

/// Each node's answer, in node order: `None` for a node that did not answer
/// in time, the error worded for people.
pub(crate) type PerNode<T> = Vec<Option<Result<T, NodeError>>>;

/// Runs `request` on every node; the answers in node order.
fn on_all<R: Request + 'static>(nodes: &Nodes, request: R) -> PerNode<R::Answer> {
    on_all_within(nodes, limit(nodes), request)
}

/// `on_all`, waiting up to `limit` for the answers.
fn on_all_within<R: Request + 'static>(
    nodes: &Nodes,
    limit: Duration,
    request: R,
) -> PerNode<R::Answer> {
    let all: Vec<usize> = (0..nodes.len()).collect();
    by_node(nodes.len(), quorum::on_each(nodes, &all, request, limit))
}

/// Every key matching `pattern` on each node (on a Cluster, on the master
/// of `near`'s slot), by SCAN from each node's own cursor, a page per
/// round, all nodes at once, within `limit` in all.
fn scan_all(
    nodes: &Nodes,
    pattern: Vec<u8>,
    near: &[u8],
    limit: Duration,
) -> PerNode<Vec<Vec<u8>>> {
    let until = crate::clock::now() + limit;
    let mut found: PerNode<Vec<Vec<u8>>> = (0..nodes.len()).map(|_| Some(Ok(Vec::new()))).collect();
    let mut cursors: Vec<Vec<u8>> = vec![b"0".to_vec(); nodes.len()];
    loop {
        let active: Vec<usize> = (0..nodes.len())
            .filter(|i| !cursors[*i].is_empty())
            .collect();
        if active.is_empty() {
            break;
        }
        let left = until.saturating_duration_since(crate::clock::now());
        let page = node::Scan {
            pattern: pattern.clone(),
            near: near.to_vec(),
            cursors: cursors.clone(),
        };
        let replies = quorum::on_each(nodes, &active, page, left.min(self::limit(nodes)));
        let mut answered = vec![false; nodes.len()];
        for r in replies {
            answered[r.node] = true;
            match r.result {
                Ok((next, keys)) => {
                    if let Some(Ok(list)) = &mut found[r.node] {
                        list.extend(keys);
                    }
                    cursors[r.node] = if next == b"0" { Vec::new() } else { next };
                }
                Err(e) => {
                    found[r.node] = Some(Err(e));
                    cursors[r.node].clear();
                }
            }
        }
        for i in active.into_iter().filter(|i| !answered[*i]) {
            found[i] = None;
            cursors[i].clear();
        }
    }
    for list in found.iter_mut().flatten().flatten() {
        // SCAN may return a key twice (the table was resized meanwhile).
        list.sort();
        list.dedup();
    }
    found
}

/// Every key of the lock on each node but its main key: its helper keys,
/// and those it had in the previous key layout, found by SCAN (see
/// `Keys::pattern`). What `forget` removes and `status --keys` lists.
fn helper_keys(nodes: &Nodes, keys: &Keys, limit: Duration) -> PerNode<Vec<Vec<u8>>> {
    let now = scan_all(nodes, keys.pattern(), keys.lock(), limit);
    let legacy = scan_all(nodes, keys.legacy_pattern(), keys.lock(), limit);
    now.into_iter()
        .zip(legacy)
        .map(|(a, b)| match (a, b) {
            (Some(Ok(mut a)), Some(Ok(b))) => {
                a.extend(b);
                Some(Ok(a))
            }
            (Some(Err(e)), _) | (_, Some(Err(e))) => Some(Err(e)),
            _ => None,
        })
        .collect()
}

fn inspect_all(nodes: &Nodes, key_set: &KeySet) -> PerNode<Inspection> {
    on_all(
        nodes,
        node::Inspect {
            key_set: Arc::new(key_set.clone()),
        },
    )
}

/// Replies in node order; `None` for a node that did not answer in time.
pub(crate) fn by_node<T>(n: usize, replies: Vec<Reply<T>>) -> PerNode<T> {
    let mut out: PerNode<T> = (0..n).map(|_| None).collect();
    for r in replies {
        out[r.node] = Some(r.result);
    }
    out
}

/// A field of a holder record, or "?", as a terminal may show it (see
/// `printable`: whoever can write the lock's keys wrote it).
fn record_field<'a>(record: &'a [(String, String)], name: &str) -> Cow<'a, str> {
    record
        .iter()
        .find(|(k, _)| k == name)
        .map_or("?".into(), |(_, v)| printable(v))
}

/// "ci@runner4 pid 4242 (deploy.sh), token 5c0b1050…": who holds a lock,
/// as `unlock --force` and `forget` say it.
fn holder_line(record: &[(String, String)], token: &[u8]) -> String {
    format!(
        "{}@{} pid {} ({}), token {}…",
        record_field(record, "user"),
        record_field(record, "host"),
        record_field(record, "pid"),
        record_field(record, "command"),
        token_prefix(token)
    )
}

/// The holder record from a node where the lock holds `token`: a record
/// beside another token describes someone else.
fn record_of(found: &PerNode<Inspection>, token: &[u8]) -> Vec<(String, String)> {
    found
        .iter()
        .flatten()
        .flatten()
        .find(|i| i.value.as_deref() == Some(token) && !i.holder.is_empty())
        .map(|i| i.holder.clone())
        .unwrap_or_default()
}

/// The first 8 characters of a token: what `status` shows and `unlock
/// --token` accepts.
fn token_prefix(v: &[u8]) -> String {
    let prefix: String = String::from_utf8_lossy(v).chars().take(8).collect();
    printable(&prefix).into_owned()
}

/// A `--json` answer: one line on stdout.
fn print_json(doc: &impl serde::Serialize) {
    match serde_json::to_string(doc) {
        Ok(json) => println!("{json}"),
        // Not for any document here: serde_json fails only on maps with
        // non-string keys and on failing Serialize impls.
        Err(e) => crate::log::say(format_args!("{e}")),
    }
}
