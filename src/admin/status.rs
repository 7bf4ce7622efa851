//! `status`: the lock on every node (holder, token, time left) and a
//! verdict; exit 0 free, 1 held, 69 unknown. A semaphore (`--limit N`) is
//! found by the slot count its holders record, so `status -k NAME` needs no
//! `--limit` to say that its slots are taken. `--keys` lists every key of
//! the lock on each node, found as `forget` finds them.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use super::Subject;
use super::{
    helper_keys, inspect_all, on_all, on_all_within, record_field, record_of, scan_limit,
    token_prefix,
};
use crate::exit::Exit;
use crate::lock::keys::show;
use crate::lock::node::{self, Inspection, KeyInfo, KeySet, Kind, NodeError, Nodes};
use crate::lock::redlock;
use crate::run_record::Record;
use crate::text::pad;

use serde::Serialize;
use serde::ser::SerializeMap;

/// What the nodes say together, by quorum: the lock is held only by a token
/// that a quorum of the nodes holds, as no run can take it then.
enum Verdict {
    Free,
    /// By this token, on this many nodes (a quorum).
    Held(Vec<u8>, usize),
    /// By --shared readers, each on a quorum (no writer holds it).
    Shared,
    /// Fewer than a quorum answered; or a token on fewer than a quorum that
    /// the nodes that did not answer could make a quorum (the token, and on
    /// how many nodes it was seen).
    Unknown(Option<(Vec<u8>, usize)>),
}

/// Each token the answering nodes hold, and on how many, most first.
fn copies(found: &[Option<Result<Inspection, NodeError>>]) -> Vec<(&[u8], usize)> {
    let mut counts: BTreeMap<&[u8], usize> = BTreeMap::new();
    for i in found.iter().flatten().flatten() {
        if let Some(v) = &i.value {
            *counts.entry(v.as_slice()).or_default() += 1;
        }
    }
    let mut all: Vec<(&[u8], usize)> = counts.into_iter().collect();
    all.sort_by_key(|(_, c)| std::cmp::Reverse(*c));
    all
}

fn verdict(n: usize, found: &[Option<Result<Inspection, NodeError>>]) -> Verdict {
    let answered = found.iter().flatten().flatten().count();
    let quorum = redlock::quorum(n);
    if answered < quorum {
        return Verdict::Unknown(None);
    }
    let silent = n - answered;
    match copies(found).first() {
        Some((token, c)) if *c >= quorum => Verdict::Held(token.to_vec(), *c),
        // A copy on a minority of the nodes is no lock: a run takes it past
        // that copy (a holder mid-acquire or mid-release, or one whose
        // release did not reach a node). Unless the silent nodes could hold
        // it too.
        Some((token, c)) if c + silent >= quorum => Verdict::Unknown(Some((token.to_vec(), *c))),
        _ => Verdict::Free,
    }
}

/// Copies of the lock on a minority of the nodes, beside the verdict: each
/// token, on how many nodes, and the longest time it has left (ms, or -1
/// with no expiry).
fn stale_copies(
    n: usize,
    found: &[Option<Result<Inspection, NodeError>>],
    verdict: &Verdict,
) -> Vec<(Vec<u8>, usize, i64)> {
    // Without a quorum's answers no copy is known to be stale.
    let not_stale = match verdict {
        Verdict::Held(t, _) => Some(t.as_slice()),
        Verdict::Unknown(_) => return Vec::new(),
        Verdict::Free | Verdict::Shared => None,
    };
    copies(found)
        .into_iter()
        .filter(|(t, c)| Some(*t) != not_stale && *c < redlock::quorum(n))
        .map(|(t, c)| {
            let left = found
                .iter()
                .flatten()
                .flatten()
                .filter(|i| i.value.as_deref() == Some(t))
                .map(|i| if i.pttl < 0 { i64::MAX } else { i.pttl })
                .max()
                .unwrap_or(0);
            (t.to_vec(), c, if left == i64::MAX { -1 } else { left })
        })
        .collect()
}

/// A --shared reader's share as the nodes hold it together.
struct Reader {
    token: Vec<u8>,
    /// On how many nodes it is live.
    on: usize,
    /// The longest time it has left there (ms).
    left_ms: i64,
    record: Vec<(String, String)>,
}

/// Every reader's share found, by token, most nodes first: a share on a
/// quorum holds, one on a minority is stale (as a copy of the lock is).
fn readers(found: &[Option<Result<Inspection, NodeError>>]) -> Vec<Reader> {
    let mut all: BTreeMap<&[u8], Reader> = BTreeMap::new();
    for share in found.iter().flatten().flatten().flat_map(|i| &i.readers) {
        let r = all.entry(&share.token).or_insert_with(|| Reader {
            token: share.token.clone(),
            on: 0,
            left_ms: 0,
            record: Vec::new(),
        });
        r.on += 1;
        r.left_ms = r.left_ms.max(share.left_ms);
        if r.record.is_empty() {
            r.record = share.record.clone();
        }
    }
    let mut all: Vec<Reader> = all.into_values().collect();
    all.sort_by_key(|r| std::cmp::Reverse(r.on));
    all
}

/// "root@vm pid 812 (backup.sh) for 3.2s, token r5c0b105…, 26.8s left".
fn describe_reader(r: &Reader) -> String {
    let since = ago(&r.record, "acquired_ms")
        .map_or(String::new(), |d| format!(" for {:.1}s", d.as_secs_f64()));
    let who = if r.record.is_empty() {
        "a reader without a record".to_string()
    } else {
        format!(
            "{}@{} pid {} ({}){}",
            record_field(&r.record, "user"),
            record_field(&r.record, "host"),
            record_field(&r.record, "pid"),
            record_field(&r.record, "command"),
            gone_note(&r.record)
        )
    };
    format!(
        "{who}{since}, token {}…, {} left",
        token_prefix(&r.token),
        ms(r.left_ms)
    )
}

/// "stale copy on 1 of 3 nodes, token 5c0b1050…, expires in 18 s".
fn describe_stale(n: usize, (token, on, left): &(Vec<u8>, usize, i64)) -> String {
    let expires = if *left < 0 {
        "with no expiry".to_string()
    } else {
        format!("expires in {} s", (*left as u64).div_ceil(1000))
    };
    format!(
        "stale copy on {on} of {n} nodes, token {}…, {expires}",
        token_prefix(token)
    )
}

/// With --limit (or a slot count found beside the lock), every slot in turn
/// (text), or one object with a `slots` array (JSON). Exit 0 while any slot
/// is free, 1 when all are held.
pub(super) fn tell(
    lock: &Subject,
    nodes: &Nodes,
    json: bool,
    limit: Option<u32>,
    keys: bool,
) -> Exit {
    // One server under two addresses of its own: see `node::same_server`.
    if nodes.len() > 1 {
        let near = lock.keys.lock().to_vec();
        let ids: Vec<Option<String>> = on_all(nodes, node::RunId { near })
            .into_iter()
            .map(|r| r.and_then(Result::ok).flatten())
            .collect();
        let names: Vec<&str> = nodes.iter().map(|n| n.name()).collect();
        if let Some(msg) = crate::lock::node::same_run_id(&names, &ids) {
            return crate::error::Error::usage(msg).said();
        }
    }
    let asked_limit = limit;
    let limit = limit.or_else(|| recorded_limit(lock, nodes));
    let last = super::history::last_run(lock, nodes);
    let window = used_window(lock, nodes, last.as_ref());
    let listed = keys.then(|| key_lists(lock, nodes));
    let keys = || listed.as_ref().map(|l| keys_doc(nodes, l));
    let Some(n) = limit else {
        let (exit, doc) = status_of(json, lock, None, nodes);
        if let Some(lock) = doc {
            super::print_json(&StatusDoc {
                lock,
                once_per: window,
                last_run: last.as_ref(),
                keys: keys(),
            });
        } else {
            print_after(nodes, window.as_ref(), last.as_ref(), listed.as_ref());
        }
        return exit;
    };
    if asked_limit.is_none() && !json {
        println!(
            "lock '{}' is a semaphore of {n} slots (--limit {n}):",
            lock.name
        );
    }
    let mut exits = Vec::new();
    let mut slots = Vec::new();
    for i in 0..n {
        let (exit, doc) = status_of(json, lock, Some((i, n)), nodes);
        exits.push(exit);
        slots.extend(doc);
    }
    if json {
        super::print_json(&SlotsDoc {
            limit: n,
            slots,
            once_per: window,
            last_run: last.as_ref(),
            keys: keys(),
        });
    } else {
        print_after(nodes, window.as_ref(), last.as_ref(), listed.as_ref());
    }
    if exits.contains(&Exit::Command(0)) {
        Exit::Command(0)
    } else if exits.contains(&Exit::Unavailable) {
        Exit::Unavailable
    } else {
        Exit::Command(1)
    }
}

/// The lines after the lock's own: a --once-per window in use, the last run,
/// and with --keys every key.
fn print_after(
    nodes: &Nodes,
    window: Option<&WindowDoc>,
    last: Option<&Record>,
    listed: Option<&KeyLists>,
) {
    if let Some(w) = window {
        println!(
            "once-per window used until {}, by {}; the next run may start then",
            w.used_until, w.by
        );
    }
    if let Some(r) = last {
        println!("{}", super::history::describe(r));
    }
    if let Some(l) = listed {
        print_keys(nodes, l);
    }
}

/// A --once-per window whose run has been: until when it stays used, and
/// by whom.
#[derive(Serialize)]
struct WindowDoc {
    /// RFC 3339: when the marker lapses on enough nodes for a new run to
    /// take a quorum of them.
    used_until: String,
    /// The run that used it ("root@vm pid 4242"), or its token's start.
    by: String,
    /// The first 8 characters of that run's token.
    token: String,
}

/// The --once-per window in use, from the markers a quorum of nodes hold
/// with one token; None when no window is in use (or nobody answers).
fn used_window(lock: &Subject, nodes: &Nodes, last: Option<&Record>) -> Option<WindowDoc> {
    let limit = scan_limit(nodes);
    let found = super::scan_all(nodes, lock.keys.once_pattern(), lock.keys.lock(), limit);
    if found.iter().flatten().flatten().all(Vec::is_empty) {
        return None;
    }
    let request = node::Markers {
        near: lock.keys.lock().to_vec(),
        keys: found
            .iter()
            .map(|f| f.as_ref()?.as_ref().ok().filter(|k| !k.is_empty()).cloned())
            .collect(),
    };
    let markers: Vec<node::Marker> = on_all_within(nodes, limit, request)
        .into_iter()
        .flatten()
        .flatten()
        .flatten()
        .collect();
    let quorum = redlock::quorum(nodes.len());
    // The newest window a quorum holds for one run.
    let mut windows: Vec<(&[u8], &[u8])> = markers
        .iter()
        .map(|m| (m.key.as_slice(), m.token.as_slice()))
        .collect();
    windows.sort_unstable();
    windows.dedup();
    let (key, token) = windows.into_iter().rev().find(|(k, t)| {
        markers
            .iter()
            .filter(|m| m.key == *k && m.token == *t)
            .count()
            >= quorum
    })?;
    let run = last.filter(|r| r.id.as_bytes() == token);
    // The window's end, where its run's record says how long windows are
    // (the marker itself outlives its window, for hosts whose clocks lag);
    // else when the marker lapses on enough nodes for a new run.
    let start = std::str::from_utf8(key)
        .ok()
        .and_then(|k| k.rsplit(':').next()?.parse::<u64>().ok());
    let until = match (start, run.and_then(|r| r.window_s)) {
        (Some(start), Some(w)) => {
            std::time::UNIX_EPOCH + Duration::from_secs(start.saturating_add(w))
        }
        _ => {
            let mut left: Vec<i64> = markers
                .iter()
                .filter(|m| m.key == key && m.token == token)
                .map(|m| m.pttl)
                .collect();
            left.sort_unstable_by(|a, b| b.cmp(a));
            let ms = u64::try_from(left.get(quorum - 1).copied().unwrap_or(0)).unwrap_or(0);
            std::time::SystemTime::now() + Duration::from_millis(ms)
        }
    };
    let by = match run {
        Some(r) => format!(
            "{}@{} pid {}",
            crate::log::printable(&r.user),
            crate::log::printable(&r.host),
            r.pid
        ),
        None => format!("the run with token {}…", token_prefix(token)),
    };
    Some(WindowDoc {
        used_until: crate::wall::rfc3339(until),
        by,
        token: token_prefix(token),
    })
}

/// Each node's answer to `--keys`.
type KeyLists = super::PerNode<Vec<KeyInfo>>;

/// `--keys`: every key of the lock that exists on each node, its main key
/// first, found as `forget` finds them.
fn key_lists(lock: &Subject, nodes: &Nodes) -> KeyLists {
    let keys = &lock.keys;
    let limit = scan_limit(nodes);
    let found = helper_keys(nodes, keys, limit);
    let request = node::Describe {
        near: keys.lock().to_vec(),
        keys: found
            .iter()
            .map(|f| {
                let found = f.as_ref()?.as_ref().ok()?;
                let mut all = vec![keys.lock().to_vec()];
                all.extend(found.iter().cloned());
                Some(all)
            })
            .collect(),
    };
    let mut lists = on_all_within(nodes, limit, request);
    for (list, f) in lists.iter_mut().zip(found) {
        if !matches!(f, Some(Ok(_))) {
            *list = f.map(|f| f.map(|_| Vec::new()));
        }
    }
    lists
}

/// "keys on redis://lock1:6379:" and a line per key: name, type, time left.
fn print_keys(nodes: &Nodes, lists: &KeyLists) {
    for (node, list) in nodes.iter().zip(lists) {
        let name = node.name();
        match list {
            None => println!("keys on {name}: no answer in time"),
            Some(Err(e)) => println!("keys on {name}: failed: {e}"),
            Some(Ok(keys)) if keys.is_empty() => println!("keys on {name}: none"),
            Some(Ok(keys)) => {
                println!("keys on {name}:");
                let shown: Vec<String> = keys.iter().map(|k| show(&k.key)).collect();
                let width = shown.iter().map(|s| s.chars().count()).max().unwrap_or(0);
                let kind = keys.iter().map(|k| k.kind.len()).max().unwrap_or(0);
                for (k, key) in keys.iter().zip(&shown) {
                    println!(
                        "  {}  {}  {}",
                        pad(key, width),
                        pad(&k.kind, kind),
                        left(k.pttl)
                    );
                }
            }
        }
    }
}

/// Time left as people read it: 29.7s, 4m 10s, 5h 2m, 34d 23h; or "no expiry".
fn left(pttl: i64) -> String {
    if pttl < 0 {
        return "no expiry".into();
    }
    let s = pttl / 1000;
    match s {
        0..60 => format!("{:.1}s", pttl as f64 / 1000.0),
        60..3600 => format!("{}m {}s", s / 60, s % 60),
        3600..86400 => format!("{}h {}m", s / 3600, s % 3600 / 60),
        _ => format!("{}d {}h", s / 86400, s % 86400 / 3600),
    }
}

/// `--keys --json`: each node's keys, or why it has none to show.
#[derive(Serialize)]
struct NodeKeys<'a> {
    node: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    keys: Option<Vec<KeyDoc<'a>>>,
}

#[derive(Serialize)]
struct KeyDoc<'a> {
    /// As `show` writes a key: NUL bytes as `\x00`.
    key: String,
    #[serde(rename = "type")]
    kind: &'a str,
    /// -1 with no expiry.
    pttl_ms: i64,
}

fn keys_doc<'a>(nodes: &'a Nodes, lists: &'a KeyLists) -> Vec<NodeKeys<'a>> {
    nodes
        .iter()
        .zip(lists)
        .map(|(node, list)| {
            let mut doc = NodeKeys {
                node: node.name(),
                error: None,
                keys: None,
            };
            match list {
                None => doc.error = Some("no answer in time (--node-timeout)".into()),
                Some(Err(e)) => doc.error = Some(e.to_string()),
                Some(Ok(keys)) => {
                    doc.keys = Some(
                        keys.iter()
                            .map(|k| KeyDoc {
                                key: show(&k.key),
                                kind: &k.kind,
                                pttl_ms: k.pttl,
                            })
                            .collect(),
                    );
                }
            }
            doc
        })
        .collect()
}

/// The --limit N of the holders of the lock's slots, if any node has one
/// (the largest: holders of one name agree, see `scripts::ACQUIRE`).
fn recorded_limit(lock: &Subject, nodes: &Nodes) -> Option<u32> {
    let key_set = Arc::new(crate::lock::key_set(&lock.keys, None, None));
    on_all(nodes, node::LimitOf { key_set })
        .into_iter()
        .flatten()
        .flatten()
        .flatten()
        .max()
}

/// One lock (or slot `i` of `n`): prints the text form, or returns the JSON
/// object unprinted.
fn status_of(
    json: bool,
    lock: &Subject,
    slot: Option<(u32, u32)>,
    nodes: &Nodes,
) -> (Exit, Option<LockDoc>) {
    let key_set = crate::lock::key_set(&lock.keys, slot.map(|s| s.0), slot.map(|s| s.1));
    let found = inspect_all(nodes, &key_set);
    let status = Status::of(lock, slot.map(|s| s.0), &key_set, nodes, found);
    let exit = match status.verdict {
        Verdict::Free => Exit::Command(0),
        Verdict::Held(..) | Verdict::Shared => Exit::Command(1),
        Verdict::Unknown(_) => Exit::Unavailable,
    };
    if json {
        (exit, Some(status.json()))
    } else {
        status.print_text();
        (exit, None)
    }
}

/// What `status` found about one lock, ready to show.
struct Status<'a> {
    lock: &'a Subject,
    slot: Option<u32>,
    key_set: &'a KeySet,
    nodes: &'a Nodes,
    found: Vec<Option<Result<Inspection, NodeError>>>,
    verdict: Verdict,
    /// The winning token's holder record, when held.
    record: Vec<(String, String)>,
    ttl_left: Option<i64>,
    /// Waiters in the --wait queue (the most any node counts).
    queued: i64,
    /// Copies on a minority of the nodes (see `stale_copies`).
    stale: Vec<(Vec<u8>, usize, i64)>,
    /// --shared readers holding shares on a quorum, and shares on fewer.
    readers: Vec<Reader>,
    stale_shares: Vec<Reader>,
}

fn ms(pttl: i64) -> String {
    if pttl < 0 {
        "no expiry".into()
    } else {
        format!("{:.1}s", pttl as f64 / 1000.0)
    }
}

/// How long ago a unix-ms field of the record was.
fn ago(record: &[(String, String)], field: &str) -> Option<Duration> {
    let since: u64 = record_field(record, field).parse().ok()?;
    crate::lock::unix_ms()
        .checked_sub(since)
        .map(Duration::from_millis)
}

/// When --hold keeps a lock whose command has exited: how it exited, when.
fn held_after_exit(record: &[(String, String)]) -> Option<String> {
    let gone = ago(record, "exited_ms")?;
    Some(format!(
        "its command exited (status {}) {:.1}s ago; --hold keeps the lock",
        record_field(record, "exit_code"),
        gone.as_secs_f64()
    ))
}

/// A holder recorded on this very host whose redlock-run is not running
/// (killed with -9, a crash): its lock stays until its TTL runs out, or an
/// `unlock --token` frees it. A zombie counts as gone.
fn gone_here(record: &[(String, String)]) -> bool {
    if record.is_empty() || record_field(record, "host") != crate::host::hostname() {
        return false;
    }
    let Ok(pid) = record_field(record, "pid").parse::<u32>() else {
        return false;
    };
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(e) => e.kind() == std::io::ErrorKind::NotFound,
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
    }
}

/// `gone_here`, said after the holder.
fn gone_note(record: &[(String, String)]) -> &'static str {
    if gone_here(record) {
        " (not running on this host)"
    } else {
        ""
    }
}

/// A holder's (or reader's) record, its fields in the order the node gave
/// them: numbers where the field is one, text otherwise.
struct Holder(Vec<(String, String)>);

impl Serialize for Holder {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(self.0.len()))?;
        for (k, v) in &self.0 {
            let numeric = matches!(
                k.as_str(),
                "pid" | "ttl_ms" | "acquired_ms" | "exited_ms" | "exit_code"
            );
            match v.parse::<u64>() {
                Ok(n) if numeric => map.serialize_entry(k, &n)?,
                _ => map.serialize_entry(k, v)?,
            }
        }
        map.end()
    }
}

fn holder(record: &[(String, String)]) -> Option<Holder> {
    (!record.is_empty()).then(|| Holder(record.to_vec()))
}

/// `status --json` without slots: the lock's object, with the last run
/// and, with --keys, its keys.
#[derive(Serialize)]
struct StatusDoc<'a> {
    #[serde(flatten)]
    lock: LockDoc,
    /// A --once-per window in use, or null.
    once_per: Option<WindowDoc>,
    /// As `history --json` shows it, or null.
    last_run: Option<&'a Record>,
    #[serde(skip_serializing_if = "Option::is_none")]
    keys: Option<Vec<NodeKeys<'a>>>,
}

/// `status --json` of a semaphore: an object per slot.
#[derive(Serialize)]
struct SlotsDoc<'a> {
    limit: u32,
    slots: Vec<LockDoc>,
    once_per: Option<WindowDoc>,
    last_run: Option<&'a Record>,
    #[serde(skip_serializing_if = "Option::is_none")]
    keys: Option<Vec<NodeKeys<'a>>>,
}

/// One lock (or slot) as `status --json` shows it. The fields after
/// `verdict` are there only where that verdict has them.
#[derive(Default, Serialize)]
struct LockDoc {
    /// The lock's name, and `slot N` for a slot.
    name: String,
    key: String,
    quorum: usize,
    nodes: Vec<NodeDoc>,
    queued: i64,
    readers: Vec<ReaderDoc>,
    /// free, held, shared, unknown.
    verdict: &'static str,
    /// The token the verdict is about (held, unknown), on how many nodes.
    #[serde(skip_serializing_if = "Option::is_none")]
    token_prefix: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    held_on: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pttl_ms: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    held_ms: Option<u128>,
    #[serde(skip_serializing_if = "Option::is_none")]
    exited_ms_ago: Option<u128>,
    #[serde(skip_serializing_if = "Option::is_none")]
    holder: Option<Holder>,
    /// The holder was recorded on this host and its pid is not running.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    holder_gone: bool,
    stale: Vec<StaleDoc>,
}

/// One node's answer; what it held only when it answered.
#[derive(Default, Serialize)]
struct NodeDoc {
    node: String,
    reachable: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    held: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    token_prefix: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pttl_ms: Option<i64>,
    /// How long its server has been up, where it said: one restarted
    /// lately sits out runs for their restart grace.
    #[serde(skip_serializing_if = "Option::is_none")]
    uptime_s: Option<u64>,
    /// Whether what it holds is a stale copy (on a minority of the nodes).
    #[serde(skip_serializing_if = "Option::is_none")]
    stale: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    holder: Option<Holder>,
    /// How many --shared readers hold a share there.
    #[serde(skip_serializing_if = "Option::is_none")]
    readers: Option<usize>,
}

/// A --shared reader holding a share on a quorum.
#[derive(Serialize)]
struct ReaderDoc {
    token_prefix: String,
    held_on: usize,
    pttl_ms: i64,
    #[serde(skip_serializing_if = "Option::is_none")]
    held_ms: Option<u128>,
    #[serde(skip_serializing_if = "Option::is_none")]
    holder: Option<Holder>,
}

/// A copy of the lock, or a reader's share, on fewer than a quorum.
#[derive(Serialize)]
struct StaleDoc {
    token_prefix: String,
    /// On how many nodes.
    on: usize,
    pttl_ms: i64,
}

impl<'a> Status<'a> {
    /// What the nodes' answers say together.
    fn of(
        lock: &'a Subject,
        slot: Option<u32>,
        key_set: &'a KeySet,
        nodes: &'a Nodes,
        found: Vec<Option<Result<Inspection, NodeError>>>,
    ) -> Self {
        let quorum = redlock::quorum(nodes.len());
        let (readers, stale_shares): (Vec<Reader>, Vec<Reader>) =
            readers(&found).into_iter().partition(|r| r.on >= quorum);
        let verdict = match verdict(nodes.len(), &found) {
            Verdict::Free if !readers.is_empty() => Verdict::Shared,
            v => v,
        };
        let (record, ttl_left) = match &verdict {
            Verdict::Held(token, _) => (
                record_of(&found, token),
                found
                    .iter()
                    .flatten()
                    .flatten()
                    .filter(|i| i.value.as_deref() == Some(token))
                    .map(|i| i.pttl)
                    .max(),
            ),
            _ => (Vec::new(), None),
        };
        let stale = stale_copies(nodes.len(), &found, &verdict);
        let queued = found
            .iter()
            .flatten()
            .flatten()
            .map(|i| i.queued)
            .max()
            .unwrap_or(0);
        Status {
            lock,
            slot,
            key_set,
            nodes,
            found,
            verdict,
            record,
            ttl_left,
            queued,
            stale,
            readers,
            stale_shares,
        }
    }

    fn print_text(&self) {
        let Status {
            lock,
            slot,
            key_set,
            nodes,
            found,
            verdict,
            record,
            ttl_left,
            queued,
            stale,
            readers,
            stale_shares,
        } = self;
        let n = nodes.len();
        let is_stale = |v: &[u8]| stale.iter().any(|(t, ..)| t == v);
        println!(
            "lock '{}'{} (key {}) on {} node(s), quorum {}",
            lock.name,
            slot.map_or(String::new(), |i| format!(" slot {i}")),
            show(&key_set.lock),
            nodes.len(),
            redlock::quorum(nodes.len())
        );
        for (node, f) in nodes.iter().zip(found) {
            println!("  {}", node_line(node, f, is_stale));
        }
        let mut stale_lines: Vec<String> = stale.iter().map(|s| describe_stale(n, s)).collect();
        stale_lines.extend(stale_shares.iter().map(|r| {
            format!(
                "stale share on {} of {n} nodes, token {}…, expires in {} s",
                r.on,
                token_prefix(&r.token),
                (r.left_ms.max(0) as u64).div_ceil(1000)
            )
        }));
        match verdict {
            Verdict::Shared => {
                println!(
                    "shared by {} reader{} (--shared); a writer waits for the last of them:",
                    readers.len(),
                    if readers.len() == 1 { "" } else { "s" }
                );
                for r in readers {
                    println!("  {}, on {}/{n} node(s)", describe_reader(r), r.on);
                }
            }
            Verdict::Free if stale_lines.is_empty() => println!("free"),
            Verdict::Free => println!("free ({})", stale_lines.join("; ")),
            Verdict::Unknown(None) => println!("unknown: fewer than a quorum of nodes answered"),
            Verdict::Unknown(Some((token, count))) => {
                let silent = n - found.iter().flatten().flatten().count();
                println!(
                    "unknown: token {}… on {count} of {n} nodes, and {silent} node(s) did not \
                     answer: held if they have it too",
                    token_prefix(token)
                );
            }
            Verdict::Held(token, count) => {
                let by = if record.is_empty() {
                    "a holder without a record (another client?)".to_string()
                } else {
                    format!(
                        "{}@{} pid {}",
                        record_field(record, "user"),
                        record_field(record, "host"),
                        record_field(record, "pid")
                    )
                };
                let since = ago(record, "acquired_ms")
                    .map_or(String::new(), |d| format!(" for {:.1}s", d.as_secs_f64()));
                let gone = if gone_here(record) {
                    format!(
                        "; pid {} is not running on this host: `unlock --token {}` frees the \
                         lock now",
                        record_field(record, "pid"),
                        token_prefix(token)
                    )
                } else {
                    String::new()
                };
                println!(
                    "held by {by}{since}, token {}…, on {count}/{} node(s), {} left{}{gone}",
                    token_prefix(token),
                    nodes.len(),
                    ttl_left.map_or("?".into(), ms),
                    held_after_exit(record).map_or(String::new(), |h| format!("; {h}"))
                );
            }
        }
        if !matches!(verdict, Verdict::Free) {
            for line in &stale_lines {
                println!("{line}");
            }
        }
        if *queued > 0 {
            println!("{queued} waiting in the queue");
        }
    }

    fn json(&self) -> LockDoc {
        let Status {
            lock,
            slot,
            key_set,
            nodes,
            found,
            verdict,
            record,
            ttl_left,
            queued,
            stale,
            readers,
            stale_shares,
        } = self;
        let nodes_doc = nodes
            .iter()
            .zip(found)
            .map(|(node, f)| {
                let mut doc = NodeDoc {
                    node: node.name().to_string(),
                    uptime_s: node.uptime().map(|d| d.as_secs()),
                    ..Default::default()
                };
                match f {
                    None => doc.error = Some("no answer in time (--node-timeout)".into()),
                    Some(Err(e)) => doc.error = Some(e.to_string()),
                    Some(Ok(i)) => {
                        doc.reachable = true;
                        doc.held = Some(i.value.is_some());
                        if let Some(v) = &i.value {
                            doc.token_prefix = Some(token_prefix(v));
                            doc.pttl_ms = Some(i.pttl);
                            doc.stale = Some(stale.iter().any(|(t, ..)| t == v));
                        }
                        doc.holder = holder(&i.holder);
                        doc.readers = Some(i.readers.len());
                    }
                }
                doc
            })
            .collect();
        let mut doc = LockDoc {
            name: match slot {
                Some(i) => format!("{} slot {i}", lock.name),
                None => lock.name.clone(),
            },
            key: show(&key_set.lock),
            quorum: redlock::quorum(nodes.len()),
            nodes: nodes_doc,
            queued: *queued,
            readers: readers
                .iter()
                .map(|r| ReaderDoc {
                    token_prefix: token_prefix(&r.token),
                    held_on: r.on,
                    pttl_ms: r.left_ms,
                    held_ms: ago(&r.record, "acquired_ms").map(|d| d.as_millis()),
                    holder: holder(&r.record),
                })
                .collect(),
            verdict: "free",
            stale: stale
                .iter()
                .map(|(t, on, left)| (t, on, left))
                .chain(stale_shares.iter().map(|r| (&r.token, &r.on, &r.left_ms)))
                .map(|(t, on, left)| StaleDoc {
                    token_prefix: token_prefix(t),
                    on: *on,
                    pttl_ms: *left,
                })
                .collect(),
            ..Default::default()
        };
        match verdict {
            Verdict::Free => {}
            Verdict::Shared => doc.verdict = "shared",
            Verdict::Unknown(None) => doc.verdict = "unknown",
            Verdict::Unknown(Some((token, count))) => {
                doc.verdict = "unknown";
                doc.token_prefix = Some(token_prefix(token));
                doc.held_on = Some(*count);
            }
            Verdict::Held(token, count) => {
                doc.verdict = "held";
                doc.token_prefix = Some(token_prefix(token));
                doc.held_on = Some(*count);
                doc.pttl_ms = *ttl_left;
                doc.held_ms = ago(record, "acquired_ms").map(|d| d.as_millis());
                doc.exited_ms_ago = ago(record, "exited_ms").map(|d| d.as_millis());
                doc.holder = holder(record);
                doc.holder_gone = gone_here(record);
            }
        }
        doc
    }
}

/// A node's line: its part, and how long ago its server started when that
/// was lately (it sits out runs for their restart grace).
fn node_line(
    node: &node::Node,
    f: &Option<Result<Inspection, NodeError>>,
    is_stale: impl Fn(&[u8]) -> bool,
) -> String {
    let mut line = match f {
        // The error names the node already.
        Some(Err(_)) => node_state(f, is_stale),
        _ => format!("{}: {}", node.name(), node_state(f, is_stale)),
    };
    if let Some(up) = node.uptime().filter(|up| *up < LATELY) {
        line.push_str(&format!(
            "; started {} ago: a run counts its vote once it has been up for the run's \
             restart grace (by default its TTL)",
            humantime::format_duration(Duration::from_secs(up.as_secs()))
        ));
    }
    line
}

/// A node up for less than this is said to have started lately: longer
/// than any TTL but the rarest.
const LATELY: Duration = Duration::from_secs(3600);

/// One node's part in `status`: free, held (by whom, for how much longer),
/// shared, or why it did not say.
fn node_state(
    f: &Option<Result<Inspection, NodeError>>,
    is_stale: impl Fn(&[u8]) -> bool,
) -> String {
    match f {
        None => "no answer in time (unreachable)".to_string(),
        // A node that answered at all (refused our password, an
        // ACL, a script) is reachable: the error says what it wants.
        Some(Err(e)) if !matches!(e.kind(), Kind::Timeout | Kind::Unreachable) => e.to_string(),
        Some(Err(e)) => format!("{e} (unreachable)"),
        Some(Ok(i)) if i.value.is_none() && !i.readers.is_empty() => {
            let n = i.readers.len();
            format!("shared by {n} reader{}", if n == 1 { "" } else { "s" })
        }
        Some(Ok(i)) => match &i.value {
            None => "free".to_string(),
            Some(v) => {
                let who = if i.holder.is_empty() {
                    "no holder record".to_string()
                } else {
                    let cut = crate::lock::record::cut(&i.holder)
                        .map_or(String::new(), |c| format!(", {c}"));
                    format!(
                        "{} pid {} ({}){cut}",
                        record_field(&i.holder, "host"),
                        record_field(&i.holder, "pid"),
                        record_field(&i.holder, "command")
                    )
                };
                format!(
                    "{}, token {}…, {} left, {who}",
                    if is_stale(v) { "stale copy" } else { "held" },
                    token_prefix(v),
                    ms(i.pttl)
                )
            }
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn held(v: &str) -> Option<Result<Inspection, NodeError>> {
        Some(Ok(Inspection {
            value: Some(v.as_bytes().to_vec()),
            pttl: 1000,
            holder: vec![],
            queued: 0,
            readers: vec![],
        }))
    }

    fn free() -> Option<Result<Inspection, NodeError>> {
        Some(Ok(Inspection::default()))
    }

    #[test]
    fn verdicts_go_by_quorum() {
        assert!(matches!(verdict(3, &[free(), free(), None]), Verdict::Free));
        assert!(matches!(
            verdict(3, &[free(), None, None]),
            Verdict::Unknown(None)
        ));
        assert!(matches!(
            verdict(3, &[held("a"), held("a"), free()]),
            Verdict::Held(t, 2) if t == b"a"
        ));
        // A copy on a minority is no lock: the next run takes it.
        let found = [held("a"), free(), free()];
        let v = verdict(3, &found);
        assert!(matches!(v, Verdict::Free));
        assert_eq!(stale_copies(3, &found, &v), [(b"a".to_vec(), 1, 1000)]);
        assert!(matches!(
            verdict(5, &[held("a"), held("a"), held("b"), free(), free()]),
            Verdict::Free
        ));
        // Unless the node that did not answer could make it a quorum.
        assert!(matches!(
            verdict(3, &[held("a"), free(), None]),
            Verdict::Unknown(Some((t, 1))) if t == b"a"
        ));
        let found = [held("a"), held("a"), held("b")];
        let v = verdict(3, &found);
        assert!(matches!(v, Verdict::Held(_, 2)));
        assert_eq!(stale_copies(3, &found, &v), [(b"b".to_vec(), 1, 1000)]);
        assert_eq!(
            describe_stale(3, &(b"5c0b1050ff".to_vec(), 1, 17_200)),
            "stale copy on 1 of 3 nodes, token 5c0b1050…, expires in 18 s"
        );
    }

    #[test]
    fn time_left_reads_at_every_scale() {
        assert_eq!(left(-1), "no expiry");
        assert_eq!(left(29_700), "29.7s");
        assert_eq!(left(250_000), "4m 10s");
        assert_eq!(left(18_120_000), "5h 2m");
        assert_eq!(left(35 * 86_400_000 - 1), "34d 23h");
    }

    fn fields(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn nodes() -> Nodes {
        let urls = [
            "redis://lock1:6379",
            "redis://:pw@lock2:6379",
            "redis://lock3:6379",
        ]
        .map(String::from);
        Nodes::new(&urls, &Default::default()).expect("nodes")
    }

    fn resolved() -> Subject {
        Subject {
            name: "deploy".into(),
            keys: crate::lock::keys::Keys::new(b"lock:", b"deploy").expect("keys"),
        }
    }

    fn json(doc: &impl Serialize) -> String {
        let text = serde_json::to_string(doc).expect("JSON");
        serde_json::from_str::<serde_json::Value>(&text).expect("reads back");
        text
    }

    #[test]
    fn a_held_lock_with_its_last_run_and_keys_as_json() {
        let holder = fields(&[
            ("host", "web1"),
            ("pid", "4711"),
            ("user", "ci"),
            ("command", "report.sh"),
            ("ttl_ms", "30000"),
            ("version", "0.1.0"),
        ]);
        let found = vec![
            Some(Ok(Inspection {
                value: Some(b"5c0b1050aabbccdd".to_vec()),
                pttl: 29_700,
                holder: holder.clone(),
                queued: 2,
                readers: vec![],
            })),
            Some(Ok(Inspection {
                value: Some(b"5c0b1050aabbccdd".to_vec()),
                pttl: 29_650,
                ..Default::default()
            })),
            Some(Err(crate::lock::node::test_error_saying(
                "redis://lock3:6379: connection refused",
            ))),
        ];
        let (lock, nodes) = (resolved(), nodes());
        let key_set = crate::lock::key_set(&lock.keys, None, None);
        let status = Status::of(&lock, None, &key_set, &nodes, found);
        let last = crate::run_record::Record::from_json(
            "{\"id\":\"9d41c2e0\",\"started_at\":\"2026-11-30T03:00:00.012Z\"}",
        )
        .expect("a record");
        let keys: KeyLists = vec![
            Some(Ok(vec![
                KeyInfo {
                    key: key_set.lock.clone(),
                    kind: "string".into(),
                    pttl: 29_700,
                },
                KeyInfo {
                    key: b"{lock:deploy}\0:fence".to_vec(),
                    kind: "string".into(),
                    pttl: -1,
                },
            ])),
            None,
            Some(Err(crate::lock::node::test_error_saying(
                "redis://lock3:6379: connection refused",
            ))),
        ];
        let doc = StatusDoc {
            once_per: None,
            lock: status.json(),
            last_run: Some(&last),
            keys: Some(keys_doc(&nodes, &keys)),
        };
        let holder = "{\"host\":\"web1\",\"pid\":4711,\"user\":\"ci\",\"command\":\"report.sh\",\
                      \"ttl_ms\":30000,\"version\":\"0.1.0\"}";
        assert_eq!(
            json(&doc),
            format!(
                "{{\"name\":\"deploy\",\"key\":\"lock:deploy\",\"quorum\":2,\"nodes\":[\
                 {{\"node\":\"redis://lock1:6379\",\"reachable\":true,\"held\":true,\
                 \"token_prefix\":\"5c0b1050\",\"pttl_ms\":29700,\"stale\":false,\"holder\":{holder},\
                 \"readers\":0}},\
                 {{\"node\":\"redis://:***@lock2:6379\",\"reachable\":true,\"held\":true,\
                 \"token_prefix\":\"5c0b1050\",\"pttl_ms\":29650,\"stale\":false,\"readers\":0}},\
                 {{\"node\":\"redis://lock3:6379\",\"reachable\":false,\
                 \"error\":\"redis://lock3:6379: connection refused\"}}],\
                 \"queued\":2,\"readers\":[],\"verdict\":\"held\",\"token_prefix\":\"5c0b1050\",\
                 \"held_on\":2,\"pttl_ms\":29700,\"holder\":{holder},\"stale\":[],\
                 \"once_per\":null,\"last_run\":{},\
                 \"keys\":[{{\"node\":\"redis://lock1:6379\",\"keys\":[\
                 {{\"key\":\"lock:deploy\",\"type\":\"string\",\"pttl_ms\":29700}},\
                 {{\"key\":\"{{lock:deploy}}\\\\x00:fence\",\"type\":\"string\",\"pttl_ms\":-1}}]}},\
                 {{\"node\":\"redis://:***@lock2:6379\",\"error\":\"no answer in time (--node-timeout)\"}},\
                 {{\"node\":\"redis://lock3:6379\",\"error\":\"redis://lock3:6379: connection refused\"}}]}}",
                last.to_json().expect("JSON")
            )
        );
        // Without --keys, no `keys`; without a history, `last_run` is null.
        let status = Status::of(&lock, None, &key_set, &nodes, vec![free(), free(), free()]);
        let doc = StatusDoc {
            once_per: None,
            lock: status.json(),
            last_run: None,
            keys: None,
        };
        assert!(
            json(&doc).ends_with(
                ",\"verdict\":\"free\",\"stale\":[],\"once_per\":null,\"last_run\":null}"
            ),
            "{}",
            json(&doc)
        );
    }

    #[test]
    fn a_semaphores_slots_readers_and_stale_copies_as_json() {
        let (lock, nodes) = (resolved(), nodes());
        let reader = |token: &str, left_ms| crate::lock::node::Share {
            token: token.as_bytes().to_vec(),
            left_ms,
            record: fields(&[("host", "web2"), ("pid", "812"), ("command", "backup.sh")]),
        };
        let shares = |readers| {
            Some(Ok(Inspection {
                readers,
                ..Default::default()
            }))
        };
        let slots: Vec<LockDoc> = [
            // A copy on one node of three: free, and a stale copy.
            vec![held("a1b2c3d4e5"), free(), free()],
            // Readers on a quorum, and a share on one node only.
            vec![
                shares(vec![
                    reader("r5c0b105aa", 26_800),
                    reader("r9e8d7c6bb", 900),
                ]),
                shares(vec![reader("r5c0b105aa", 26_700)]),
                None,
            ],
            // A copy the silent node could make a quorum of.
            vec![held("a1b2c3d4e5"), free(), None],
        ]
        .into_iter()
        .enumerate()
        .map(|(i, found)| {
            let slot = u32::try_from(i).expect("few slots");
            let key_set = crate::lock::key_set(&lock.keys, Some(slot), Some(3));
            Status::of(&lock, Some(slot), &key_set, &nodes, found).json()
        })
        .collect();
        let doc = SlotsDoc {
            once_per: None,
            limit: 3,
            slots,
            last_run: None,
            keys: None,
        };
        let node = |n: &str, rest: &str| {
            format!("{{\"node\":\"redis://{n}:6379\",\"reachable\":true,\"held\":{rest}}}")
        };
        let silent = "{\"node\":\"redis://lock3:6379\",\"reachable\":false,\
                      \"error\":\"no answer in time (--node-timeout)\"}";
        let copy = "true,\"token_prefix\":\"a1b2c3d4\",\"pttl_ms\":1000";
        let reader = "{\"token_prefix\":\"r5c0b105\",\"held_on\":2,\"pttl_ms\":26800,\
                      \"holder\":{\"host\":\"web2\",\"pid\":812,\"command\":\"backup.sh\"}}";
        assert_eq!(
            json(&doc),
            format!(
                "{{\"limit\":3,\"slots\":[\
                 {{\"name\":\"deploy slot 0\",\"key\":\"{}\",\"quorum\":2,\"nodes\":[{},{},{}],\
                 \"queued\":0,\"readers\":[],\"verdict\":\"free\",\
                 \"stale\":[{{\"token_prefix\":\"a1b2c3d4\",\"on\":1,\"pttl_ms\":1000}}]}},\
                 {{\"name\":\"deploy slot 1\",\"key\":\"{}\",\"quorum\":2,\"nodes\":[{},{},{silent}],\
                 \"queued\":0,\"readers\":[{reader}],\"verdict\":\"shared\",\
                 \"stale\":[{{\"token_prefix\":\"r9e8d7c6\",\"on\":1,\"pttl_ms\":900}}]}},\
                 {{\"name\":\"deploy slot 2\",\"key\":\"{}\",\"quorum\":2,\"nodes\":[{},{},{silent}],\
                 \"queued\":0,\"readers\":[],\"verdict\":\"unknown\",\"token_prefix\":\"a1b2c3d4\",\
                 \"held_on\":1,\"stale\":[]}}],\
                 \"once_per\":null,\"last_run\":null}}",
                show(&crate::lock::key_set(&lock.keys, Some(0), Some(3)).lock),
                node("lock1", &format!("{copy},\"stale\":true,\"readers\":0")),
                node(":***@lock2", "false,\"readers\":0"),
                node("lock3", "false,\"readers\":0"),
                show(&crate::lock::key_set(&lock.keys, Some(1), Some(3)).lock),
                node("lock1", "false,\"readers\":2"),
                node(":***@lock2", "false,\"readers\":1"),
                show(&crate::lock::key_set(&lock.keys, Some(2), Some(3)).lock),
                node("lock1", &format!("{copy},\"stale\":false,\"readers\":0")),
                node(":***@lock2", "false,\"readers\":0"),
            )
        );
    }

    #[test]
    fn records_give_numbers_as_numbers() {
        let r = vec![
            ("pid".to_string(), "42".to_string()),
            ("host".to_string(), "web1".to_string()),
            ("ttl_ms".to_string(), "30000".to_string()),
        ];
        assert_eq!(
            serde_json::to_string(&Holder(r)).expect("JSON"),
            "{\"pid\":42,\"host\":\"web1\",\"ttl_ms\":30000}"
        );
    }
}
