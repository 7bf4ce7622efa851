//! `status`: the lock on every node (holder, token, time left) and a
//! verdict; exit 0 free, 1 held, 69 unknown. A semaphore (`--limit N`) is
//! found by the slot count its holders record, so `status -k NAME` needs no
//! `--limit` to say that its slots are taken. `--keys` lists every key of
//! the lock on each node, found as `forget` finds them.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use super::{
    helper_keys, inspect_all, on_all, on_all_within, record_field, record_of, scan_limit,
    token_prefix,
};
use crate::cli::{Resolved, StatusArgs};
use crate::exit::Exit;
use crate::history::Record;
use crate::lock::keys::show;
use crate::lock::node::{Books, Inspection, KeyInfo, Node};
use crate::lock::redlock;
use crate::log::{json_object, json_str};

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
fn copies(found: &[Option<Result<Inspection, String>>]) -> Vec<(&[u8], usize)> {
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

fn verdict(n: usize, found: &[Option<Result<Inspection, String>>]) -> Verdict {
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
    found: &[Option<Result<Inspection, String>>],
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
fn readers(found: &[Option<Result<Inspection, String>>]) -> Vec<Reader> {
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
            "{}@{} pid {} ({})",
            record_field(&r.record, "user"),
            record_field(&r.record, "host"),
            record_field(&r.record, "pid"),
            record_field(&r.record, "command")
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
pub fn run(args: &StatusArgs, lock: &Resolved, nodes: &[Arc<Node>]) -> Exit {
    // One server under two addresses of its own: see `node::same_server`.
    if nodes.len() > 1 {
        let ids: Vec<Option<String>> = on_all(nodes, |n| n.run_id())
            .into_iter()
            .map(|r| r.and_then(Result::ok).flatten())
            .collect();
        let names: Vec<&str> = nodes.iter().map(|n| n.name()).collect();
        if let Some(msg) = crate::lock::node::same_run_id(&names, &ids) {
            eprintln!("redlock-run: {msg}");
            return Exit::Usage;
        }
    }
    let limit = args.limit.or_else(|| recorded_limit(lock, nodes));
    let last = super::history::last_run(lock, nodes);
    let last_json = last.as_ref().map_or("null".into(), Record::to_json);
    let listed = args.keys.then(|| key_lists(lock, nodes));
    let keys_json = listed.as_ref().map_or(String::new(), |l| {
        format!(",\"keys\":{}", keys_json(nodes, l))
    });
    let Some(n) = limit else {
        let (exit, json) = status_of(args.json, lock, None, nodes);
        if args.json {
            // The lock's object, with the last run as one more field.
            let body = json.strip_suffix('}').unwrap_or(&json);
            let sep = if body.ends_with('{') { "" } else { "," };
            println!("{body}{sep}\"last_run\":{last_json}{keys_json}}}");
        } else {
            if let Some(r) = &last {
                println!("{}", super::history::describe(r));
            }
            if let Some(l) = &listed {
                print_keys(nodes, l);
            }
        }
        return exit;
    };
    if args.limit.is_none() && !args.json {
        println!(
            "lock '{}' is a semaphore of {n} slots (--limit {n}):",
            lock.name
        );
    }
    let mut exits = Vec::new();
    let mut objects = Vec::new();
    for i in 0..n {
        let (exit, json) = status_of(args.json, lock, Some((i, n)), nodes);
        exits.push(exit);
        objects.push(json);
    }
    if args.json {
        println!(
            "{{\"limit\":{n},\"slots\":[{}],\"last_run\":{last_json}{keys_json}}}",
            objects.join(",")
        );
    } else {
        if let Some(r) = &last {
            println!("{}", super::history::describe(r));
        }
        if let Some(l) = &listed {
            print_keys(nodes, l);
        }
    }
    if exits.contains(&Exit::Command(0)) {
        Exit::Command(0)
    } else if exits.contains(&Exit::Unavailable) {
        Exit::Unavailable
    } else {
        Exit::Command(1)
    }
}

/// Each node's answer to `--keys`.
type KeyLists = Vec<Option<Result<Vec<KeyInfo>, String>>>;

/// `--keys`: every key of the lock that exists on each node, its main key
/// first, found as `forget` finds them.
fn key_lists(lock: &Resolved, nodes: &[Arc<Node>]) -> KeyLists {
    let keys = Arc::new(lock.keys.clone());
    on_all_within(nodes, scan_limit(nodes), move |n| {
        let mut all = vec![keys.lock().to_vec()];
        all.extend(helper_keys(n, &keys)?);
        n.describe(&all)
    })
}

/// "keys on redis://lock1:6379:" and a line per key: name, type, time left.
fn print_keys(nodes: &[Arc<Node>], lists: &KeyLists) {
    for (node, list) in nodes.iter().zip(lists) {
        let name = node.name();
        match list {
            None => println!("keys on {name}: no answer in time"),
            Some(Err(e)) => println!("keys on {name}: failed: {e}"),
            Some(Ok(keys)) if keys.is_empty() => println!("keys on {name}: none"),
            Some(Ok(keys)) => {
                println!("keys on {name}:");
                let shown: Vec<String> = keys.iter().map(|k| show(&k.key)).collect();
                let width = shown.iter().map(String::len).max().unwrap_or(0);
                let kind = keys.iter().map(|k| k.kind.len()).max().unwrap_or(0);
                for (k, key) in keys.iter().zip(&shown) {
                    println!("  {key:<width$}  {:<kind$}  {}", k.kind, left(k.pttl));
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

/// `--keys --json`: `[{"node":URL,"keys":[{"key","type","pttl_ms"}...]}]`,
/// or `"error"` in place of `"keys"` for a node that did not answer.
fn keys_json(nodes: &[Arc<Node>], lists: &KeyLists) -> String {
    let per_node: Vec<String> = nodes
        .iter()
        .zip(lists)
        .map(|(node, list)| {
            let mut fields = vec![("node", json_str(node.name()))];
            match list {
                None => fields.push(("error", json_str("no answer in time (--node-timeout)"))),
                Some(Err(e)) => fields.push(("error", json_str(e))),
                Some(Ok(keys)) => {
                    let keys: Vec<String> = keys
                        .iter()
                        .map(|k| {
                            json_object(&[
                                ("key", json_str(&show(&k.key))),
                                ("type", json_str(&k.kind)),
                                ("pttl_ms", k.pttl.to_string()),
                            ])
                        })
                        .collect();
                    fields.push(("keys", format!("[{}]", keys.join(","))));
                }
            }
            json_object(&fields)
        })
        .collect();
    format!("[{}]", per_node.join(","))
}

/// The --limit N of the holders of the lock's slots, if any node has one
/// (the largest: holders of one name agree, see `scripts::ACQUIRE`).
fn recorded_limit(lock: &Resolved, nodes: &[Arc<Node>]) -> Option<u32> {
    let books = Arc::new(crate::lock::books(&lock.keys, None, None));
    on_all(nodes, move |n| n.limit(&books))
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
    lock: &Resolved,
    slot: Option<(u32, u32)>,
    nodes: &[Arc<Node>],
) -> (Exit, String) {
    let books = crate::lock::books(&lock.keys, slot.map(|s| s.0), slot.map(|s| s.1));
    let found = inspect_all(nodes, &books);
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
    let exit = match verdict {
        Verdict::Free => Exit::Command(0),
        Verdict::Held(..) | Verdict::Shared => Exit::Command(1),
        Verdict::Unknown(_) => Exit::Unavailable,
    };
    let stale = stale_copies(nodes.len(), &found, &verdict);
    let queued = found
        .iter()
        .flatten()
        .flatten()
        .map(|i| i.queued)
        .max()
        .unwrap_or(0);
    let status = Status {
        lock,
        slot: slot.map(|s| s.0),
        books: &books,
        nodes,
        found,
        verdict,
        record,
        ttl_left,
        queued,
        stale,
        readers,
        stale_shares,
    };
    if json {
        (exit, status.json())
    } else {
        status.print_text();
        (exit, String::new())
    }
}

/// What `status` found about one lock, ready to show.
struct Status<'a> {
    lock: &'a Resolved,
    slot: Option<u32>,
    books: &'a Books,
    nodes: &'a [Arc<Node>],
    found: Vec<Option<Result<Inspection, String>>>,
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

/// A record as JSON: numbers where the field is one.
fn record_json(r: &[(String, String)]) -> String {
    let fields: Vec<(&str, String)> = r
        .iter()
        .map(|(k, v)| {
            let numeric = matches!(
                k.as_str(),
                "pid" | "ttl_ms" | "acquired_ms" | "exited_ms" | "exit_code"
            ) && v.parse::<u64>().is_ok();
            (k.as_str(), if numeric { v.clone() } else { json_str(v) })
        })
        .collect();
    json_object(&fields)
}

impl Status<'_> {
    fn print_text(&self) {
        let Status {
            lock,
            slot,
            books,
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
            show(&books.lock),
            nodes.len(),
            redlock::quorum(nodes.len())
        );
        for (node, f) in nodes.iter().zip(found) {
            let line = match f {
                None => "no answer in time (unreachable)".to_string(),
                // A node that answered "who are you?" is reachable: the
                // error says what it wants.
                Some(Err(e)) if e.contains("authentication") => e.clone(),
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
                            format!(
                                "{} pid {} ({})",
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
            };
            match f {
                // The error names the node already.
                Some(Err(_)) => println!("  {line}"),
                _ => println!("  {}: {line}", node.name()),
            }
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
                println!(
                    "held by {by}{since}, token {}…, on {count}/{} node(s), {} left{}",
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

    fn json(&self) -> String {
        let Status {
            lock,
            slot,
            books,
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
        let per_node: Vec<String> = nodes
            .iter()
            .zip(found)
            .map(|(node, f)| {
                let mut fields = vec![("node", json_str(node.name()))];
                match f {
                    None => {
                        fields.push(("reachable", "false".into()));
                        fields.push(("error", json_str("no answer in time (--node-timeout)")));
                    }
                    Some(Err(e)) => {
                        fields.push(("reachable", "false".into()));
                        fields.push(("error", json_str(e)));
                    }
                    Some(Ok(i)) => {
                        fields.push(("reachable", "true".into()));
                        fields.push(("held", i.value.is_some().to_string()));
                        if let Some(v) = &i.value {
                            fields.push(("token_prefix", json_str(&token_prefix(v))));
                            fields.push(("pttl_ms", i.pttl.to_string()));
                            let minority = stale.iter().any(|(t, ..)| t == v);
                            fields.push(("stale", minority.to_string()));
                        }
                        if !i.holder.is_empty() {
                            fields.push(("holder", record_json(&i.holder)));
                        }
                        fields.push(("readers", i.readers.len().to_string()));
                    }
                }
                json_object(&fields)
            })
            .collect();
        let name = match slot {
            Some(i) => format!("{} slot {i}", lock.name),
            None => lock.name.clone(),
        };
        let mut fields = vec![
            ("name", json_str(&name)),
            ("key", json_str(&show(&books.lock))),
            ("quorum", redlock::quorum(nodes.len()).to_string()),
            ("nodes", format!("[{}]", per_node.join(","))),
            ("queued", queued.to_string()),
        ];
        let shares: Vec<String> = readers
            .iter()
            .map(|r| {
                let mut f = vec![
                    ("token_prefix", json_str(&token_prefix(&r.token))),
                    ("held_on", r.on.to_string()),
                    ("pttl_ms", r.left_ms.to_string()),
                ];
                if let Some(d) = ago(&r.record, "acquired_ms") {
                    f.push(("held_ms", d.as_millis().to_string()));
                }
                if !r.record.is_empty() {
                    f.push(("holder", record_json(&r.record)));
                }
                json_object(&f)
            })
            .collect();
        fields.push(("readers", format!("[{}]", shares.join(","))));
        match verdict {
            Verdict::Free => fields.push(("verdict", json_str("free"))),
            Verdict::Shared => fields.push(("verdict", json_str("shared"))),
            Verdict::Unknown(None) => fields.push(("verdict", json_str("unknown"))),
            Verdict::Unknown(Some((token, count))) => {
                fields.push(("verdict", json_str("unknown")));
                fields.push(("token_prefix", json_str(&token_prefix(token))));
                fields.push(("held_on", count.to_string()));
            }
            Verdict::Held(token, count) => {
                fields.push(("verdict", json_str("held")));
                fields.push(("token_prefix", json_str(&token_prefix(token))));
                fields.push(("held_on", count.to_string()));
                if let Some(t) = ttl_left {
                    fields.push(("pttl_ms", t.to_string()));
                }
                if let Some(d) = ago(record, "acquired_ms") {
                    fields.push(("held_ms", d.as_millis().to_string()));
                }
                if let Some(d) = ago(record, "exited_ms") {
                    fields.push(("exited_ms_ago", d.as_millis().to_string()));
                }
                if !record.is_empty() {
                    fields.push(("holder", record_json(record)));
                }
            }
        }
        let stale: Vec<String> = stale
            .iter()
            .map(|(t, on, left)| (t, on, left))
            .chain(stale_shares.iter().map(|r| (&r.token, &r.on, &r.left_ms)))
            .map(|(t, on, left)| {
                json_object(&[
                    ("token_prefix", json_str(&token_prefix(t))),
                    ("on", on.to_string()),
                    ("pttl_ms", left.to_string()),
                ])
            })
            .collect();
        fields.push(("stale", format!("[{}]", stale.join(","))));
        json_object(&fields)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn held(v: &str) -> Option<Result<Inspection, String>> {
        Some(Ok(Inspection {
            value: Some(v.as_bytes().to_vec()),
            pttl: 1000,
            holder: vec![],
            queued: 0,
            readers: vec![],
        }))
    }

    fn free() -> Option<Result<Inspection, String>> {
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

    #[test]
    fn records_give_numbers_as_numbers() {
        let r = vec![
            ("pid".to_string(), "42".to_string()),
            ("host".to_string(), "web1".to_string()),
            ("ttl_ms".to_string(), "30000".to_string()),
        ];
        assert_eq!(
            record_json(&r),
            "{\"pid\":42,\"host\":\"web1\",\"ttl_ms\":30000}"
        );
    }
}
