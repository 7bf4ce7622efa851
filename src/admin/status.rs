//! `status`: the lock on every node (holder, token, time left) and a
//! verdict; exit 0 free, 1 held, 69 unknown. A semaphore (`--limit N`) is
//! found by the slot count its holders record, so `status -k NAME` needs no
//! `--limit` to say that its slots are taken.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use super::{inspect_all, on_all, record_field, record_of, token_prefix};
use crate::cli::{Resolved, StatusArgs};
use crate::exit::Exit;
use crate::history::Record;
use crate::lock::keys::show;
use crate::lock::node::{Books, Inspection, Node};
use crate::lock::redlock;
use crate::log::{json_object, json_str};

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

/// With --limit (or a slot count found beside the lock), every slot in turn
/// (text), or one object with a `slots` array (JSON). Exit 0 while any slot
/// is free, 1 when all are held.
pub fn run(args: &StatusArgs, lock: &Resolved, nodes: &[Arc<Node>]) -> Exit {
    let limit = args.limit.or_else(|| recorded_limit(lock, nodes));
    let last = super::history::last_run(lock, nodes);
    let last_json = last.as_ref().map_or("null".into(), Record::to_json);
    let Some(n) = limit else {
        let (exit, json) = status_of(args.json, lock, None, nodes);
        if args.json {
            // The lock's object, with the last run as one more field.
            let body = json.strip_suffix('}').unwrap_or(&json);
            let sep = if body.ends_with('{') { "" } else { "," };
            println!("{body}{sep}\"last_run\":{last_json}}}");
        } else if let Some(r) = &last {
            println!("{}", super::history::describe(r));
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
            "{{\"limit\":{n},\"slots\":[{}],\"last_run\":{last_json}}}",
            objects.join(",")
        );
    } else if let Some(r) = &last {
        println!("{}", super::history::describe(r));
    }
    if exits.contains(&Exit::Command(0)) {
        Exit::Command(0)
    } else if exits.contains(&Exit::Unavailable) {
        Exit::Unavailable
    } else {
        Exit::Command(1)
    }
}

/// The slot count a --limit holder recorded beside the lock, if any node has
/// one (the largest: holders of one name should agree).
fn recorded_limit(lock: &Resolved, nodes: &[Arc<Node>]) -> Option<u32> {
    let key: Arc<[u8]> = lock.keys.limit().into();
    on_all(nodes, move |n| n.limit(&key))
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
        } = self;
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
            ("queued", queued.to_string()),
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
