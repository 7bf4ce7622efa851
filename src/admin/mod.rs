//! `status` and `unlock`: the 3 a.m. questions, "who holds my lock?" and
//! "its holder is gone, can I clear it?". Output goes to stdout; it is the
//! answer, not a log.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use crate::cli::{Admin, Resolved, StatusArgs, Target, UnlockArgs};
use crate::exit::Exit;
use crate::lock::keys::show;
use crate::lock::node::{Books, Inspection, Node, Released};
use crate::lock::quorum::{self, Reply};
use crate::lock::redlock;
use crate::log::{json_object, json_str};

/// No TTL to scale from here: the run's default for a 30 s lock.
const DEFAULT_NODE_TIMEOUT: Duration = Duration::from_secs(1);

pub fn run(admin: Admin) -> Exit {
    let target = match &admin {
        Admin::Status(a) => &a.target,
        Admin::Unlock(a) => &a.target,
    };
    if target.tls_insecure {
        eprintln!(
            "redlock-run: --tls-insecure: certificates and host names of rediss:// nodes are not checked"
        );
    }
    let (resolved, nodes) = match connect(target) {
        Ok(r) => r,
        Err(msg) => {
            eprintln!("redlock-run: {msg}");
            return Exit::Usage;
        }
    };
    match &admin {
        Admin::Status(a) => status(a, &resolved, &nodes),
        Admin::Unlock(a) => unlock(a, &resolved, &nodes),
    }
}

fn connect(target: &Target) -> Result<(Resolved, Vec<Arc<Node>>), String> {
    let mut resolved = target.resolve()?;
    resolved.options.timeout = target.node_timeout.unwrap_or(DEFAULT_NODE_TIMEOUT);
    let nodes = resolved
        .urls
        .iter()
        .map(|u| Node::new(u, &resolved.options).map(Arc::new))
        .collect::<Result<Vec<_>, _>>()?;
    Ok((resolved, nodes))
}

fn limit(nodes: &[Arc<Node>]) -> Duration {
    // Connect, write, read: each bounded by the node timeout.
    nodes.first().map_or(DEFAULT_NODE_TIMEOUT, |n| n.timeout()) * 3
}

fn inspect_all(nodes: &[Arc<Node>], books: &Books) -> Vec<Option<Result<Inspection, String>>> {
    let all: Vec<usize> = (0..nodes.len()).collect();
    let k = Arc::new(books.clone());
    let replies = quorum::on_each(nodes, &all, move |n| n.inspect(&k), limit(nodes));
    by_node(nodes.len(), replies)
}

/// Replies in node order; `None` for a node that did not answer in time.
fn by_node<T>(n: usize, replies: Vec<Reply<T>>) -> Vec<Option<Result<T, String>>> {
    let mut out: Vec<Option<Result<T, String>>> = (0..n).map(|_| None).collect();
    for r in replies {
        out[r.node] = Some(r.result.map_err(|e| e.to_string()));
    }
    out
}

/// What the nodes say together.
enum Verdict {
    Free,
    /// By this token, on this many nodes.
    Held(Vec<u8>, usize),
    Unknown,
}

fn verdict(n: usize, found: &[Option<Result<Inspection, String>>]) -> Verdict {
    let answered: Vec<&Inspection> = found.iter().flatten().flatten().collect();
    if answered.len() < redlock::quorum(n) {
        return Verdict::Unknown;
    }
    let mut counts: BTreeMap<&[u8], usize> = BTreeMap::new();
    for i in &answered {
        if let Some(v) = &i.value {
            *counts.entry(v.as_slice()).or_default() += 1;
        }
    }
    // Held when any token is present: even a minority holder may be mid-acquire
    // or mid-release, and "free" must mean nobody can be running.
    match counts.into_iter().max_by_key(|(_, c)| *c) {
        Some((token, c)) => Verdict::Held(token.to_vec(), c),
        None => Verdict::Free,
    }
}

fn token_prefix(v: &[u8]) -> String {
    let s = String::from_utf8_lossy(v);
    s.chars().take(8).collect()
}

fn ms(pttl: i64) -> String {
    if pttl < 0 {
        "no expiry".into()
    } else {
        format!("{:.1}s", pttl as f64 / 1000.0)
    }
}

/// The holder record from a node where the lock holds `token`: a record
/// beside another token describes someone else.
fn record_of(found: &[Option<Result<Inspection, String>>], token: &[u8]) -> Vec<(String, String)> {
    found
        .iter()
        .flatten()
        .flatten()
        .find(|i| i.value.as_deref() == Some(token) && !i.holder.is_empty())
        .map(|i| i.holder.clone())
        .unwrap_or_default()
}

/// With --limit, every slot in turn (text), or one object with a `slots`
/// array (JSON). Exit 0 while any slot is free, 1 when all are held.
fn status(args: &StatusArgs, lock: &Resolved, nodes: &[Arc<Node>]) -> Exit {
    let Some(n) = args.limit else {
        let (exit, json) = status_of(args.json, lock, None, nodes);
        if args.json {
            println!("{json}");
        }
        return exit;
    };
    let mut exits = Vec::new();
    let mut objects = Vec::new();
    for i in 0..n {
        let (exit, json) = status_of(args.json, lock, Some(i), nodes);
        exits.push(exit);
        objects.push(json);
    }
    if args.json {
        println!("{{\"slots\":[{}]}}", objects.join(","));
    }
    if exits.contains(&Exit::Command(0)) {
        Exit::Command(0)
    } else if exits.contains(&Exit::Unavailable) {
        Exit::Unavailable
    } else {
        Exit::Command(1)
    }
}

/// One lock: prints the text form, or returns the JSON object unprinted.
fn status_of(
    json: bool,
    lock: &Resolved,
    slot: Option<u32>,
    nodes: &[Arc<Node>],
) -> (Exit, String) {
    let books = crate::lock::books(&lock.keys, slot);
    let found = inspect_all(nodes, &books);
    let verdict = verdict(nodes.len(), &found);
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
        Verdict::Held(..) => Exit::Command(1),
        Verdict::Unknown => Exit::Unavailable,
    };
    let status = Status {
        lock,
        slot,
        books: &books,
        nodes,
        found,
        verdict,
        record,
        ttl_left,
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
    /// With --limit: which slot.
    slot: Option<u32>,
    books: &'a Books,
    nodes: &'a [Arc<Node>],
    found: Vec<Option<Result<Inspection, String>>>,
    verdict: Verdict,
    /// The winning token's holder record, when held.
    record: Vec<(String, String)>,
    ttl_left: Option<i64>,
}

fn record_field<'a>(record: &'a [(String, String)], name: &str) -> &'a str {
    record
        .iter()
        .find(|(k, _)| k == name)
        .map_or("?", |(_, v)| v.as_str())
}

fn held_for(record: &[(String, String)]) -> Option<Duration> {
    let since: u64 = record_field(record, "acquired_ms").parse().ok()?;
    crate::lock::unix_ms()
        .checked_sub(since)
        .map(Duration::from_millis)
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
        } = self;
        let ttl_left = *ttl_left;
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
                Some(Err(e)) => format!("{e} (unreachable)"),
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
                            "held, token {}…, {} left, {who}",
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
        match verdict {
            Verdict::Free => println!("free"),
            Verdict::Unknown => println!("unknown: fewer than a quorum of nodes answered"),
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
                let since = held_for(record)
                    .map_or(String::new(), |d| format!(" for {:.1}s", d.as_secs_f64()));
                println!(
                    "held by {by}{since}, token {}…, on {count}/{} node(s), {} left",
                    token_prefix(token),
                    nodes.len(),
                    ttl_left.map_or("?".into(), ms)
                );
            }
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
        } = self;
        let ttl_left = *ttl_left;
        let record_json = |r: &[(String, String)]| {
            let fields: Vec<(&str, String)> =
                r.iter().map(|(k, v)| (k.as_str(), json_str(v))).collect();
            json_object(&fields)
        };
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
                        }
                        if !i.holder.is_empty() {
                            fields.push(("holder", record_json(&i.holder)));
                        }
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
        ];
        match verdict {
            Verdict::Free => fields.push(("verdict", json_str("free"))),
            Verdict::Unknown => fields.push(("verdict", json_str("unknown"))),
            Verdict::Held(token, count) => {
                fields.push(("verdict", json_str("held")));
                fields.push(("token_prefix", json_str(&token_prefix(token))));
                fields.push(("held_on", count.to_string()));
                if let Some(t) = ttl_left {
                    fields.push(("pttl_ms", t.to_string()));
                }
                if let Some(d) = held_for(record) {
                    fields.push(("held_ms", d.as_millis().to_string()));
                }
                if !record.is_empty() {
                    fields.push(("holder", record_json(record)));
                }
            }
        }
        json_object(&fields)
    }
}

fn unlock(args: &UnlockArgs, lock: &Resolved, nodes: &[Arc<Node>]) -> Exit {
    let all: Vec<usize> = (0..nodes.len()).collect();
    let key = Arc::new(crate::lock::books(&lock.keys, None));
    let lines: Vec<Option<Result<String, String>>> = match &args.token {
        Some(token) => {
            let token: Arc<str> = token.as_str().into();
            let k = Arc::clone(&key);
            let replies = quorum::on_each(
                nodes,
                &all,
                move |n| n.release(&k, &token, true),
                limit(nodes),
            );
            by_node(nodes.len(), replies)
                .into_iter()
                .map(|r| {
                    r.map(|r| {
                        r.map(|x| match x {
                            Released::Deleted => "deleted".to_string(),
                            Released::AlreadyGone => "no lock here".to_string(),
                            Released::NotOurs => "held by another token: left alone".to_string(),
                        })
                    })
                })
                .collect()
        }
        None => {
            let found = inspect_all(nodes, &key);
            if let Verdict::Held(token, _) = verdict(nodes.len(), &found) {
                let record = record_of(&found, &token);
                println!(
                    "was held by {}@{} pid {} ({}), token {}…",
                    record_field(&record, "user"),
                    record_field(&record, "host"),
                    record_field(&record, "pid"),
                    record_field(&record, "command"),
                    token_prefix(&token)
                );
            }
            let k = Arc::clone(&key);
            let replies = quorum::on_each(nodes, &all, move |n| n.force_delete(&k), limit(nodes));
            by_node(nodes.len(), replies)
                .into_iter()
                .map(|r| {
                    r.map(|r| r.map(|d| if d { "deleted" } else { "no lock here" }.to_string()))
                })
                .collect()
        }
    };
    let mut answered = 0;
    for (node, line) in nodes.iter().zip(&lines) {
        let text = match line {
            None => "no answer in time".to_string(),
            Some(Err(e)) => format!("failed: {e}"),
            Some(Ok(t)) => {
                answered += 1;
                t.clone()
            }
        };
        println!("  {}: {text}", node.name());
    }
    if answered < redlock::quorum(nodes.len()) {
        eprintln!("redlock-run: fewer than a quorum of nodes answered; the lock may still be held");
        return Exit::Unavailable;
    }
    Exit::Command(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn held(v: &str) -> Option<Result<Inspection, String>> {
        Some(Ok(Inspection {
            value: Some(v.as_bytes().to_vec()),
            pttl: 1000,
            holder: vec![],
        }))
    }

    fn free() -> Option<Result<Inspection, String>> {
        Some(Ok(Inspection::default()))
    }

    #[test]
    fn verdicts() {
        assert!(matches!(verdict(3, &[free(), free(), None]), Verdict::Free));
        assert!(matches!(
            verdict(3, &[free(), None, None]),
            Verdict::Unknown
        ));
        assert!(matches!(
            verdict(3, &[held("a"), held("a"), free()]),
            Verdict::Held(t, 2) if t == b"a"
        ));
        // A lone key still means someone may be running.
        assert!(matches!(
            verdict(3, &[held("a"), free(), free()]),
            Verdict::Held(_, 1)
        ));
    }
}
