//! `forget`: removes every key of a lock that is no longer used, on every
//! node: its helper keys (fence counter, run history, once-per markers, the
//! `--wait` queue, `--limit` slots, holder records) and any it has in the
//! previous key layout; the lock's own key only with `--force`. A retired
//! lock otherwise keeps a fence counter that never expires and weeks of
//! history.
//!
//! Each node is searched by SCAN, the cursor carried from here (see
//! `helper_keys`), and a script given every key found says whether the lock
//! is in use there (held, a slot held, waiters queued). In use on any node,
//! it is left alone on all of them. Otherwise (or with `--force`) the same
//! script, given the same keys, decides again and deletes in one step, so a
//! run that took the lock in between is still seen where it did. All of a
//! lock's keys are in one Cluster slot, so the script runs on one master.

use std::collections::HashSet;

use super::Subject;
use super::{PerNode, by_node, helper_keys, holder_line, scan_limit, token_prefix};
use crate::exit::{self, Exit};
use crate::lock::keys::Keys;
use crate::lock::node::{Forget, ForgetLock, Forgotten, InUse, NodeError, Nodes};
use crate::lock::quorum;
use crate::lock::redlock;

pub(super) fn remove(lock: &Subject, nodes: &Nodes, force: bool) -> Exit {
    let keys = lock.keys.clone();
    let limit = scan_limit(nodes);
    let mut arranged: PerNode<(Vec<Vec<u8>>, usize)> = helper_keys(nodes, &keys, limit)
        .into_iter()
        .map(|r| r.map(|r| r.map(|found| arrange(&keys, found))))
        .collect();
    // First a look on every node, deleting nothing: a lock in use on one
    // node is left alone on all of them (where it is not held, a node
    // missed the holder's acquire), so "left alone" means nothing went.
    if !force {
        let looked = forget(nodes, &keys, &arranged, Forget::Check, limit);
        let seen: Vec<&Forgotten> = looked.iter().flatten().flatten().collect();
        if let Some(line) = in_use(&lock.name, &seen) {
            let lines = looked.iter().map(|r| match r {
                None => None,
                Some(Err(e)) => Some(Err(e.clone())),
                Some(Ok(f)) if f.refused => Some(Ok(left_alone(f))),
                Some(Ok(_)) => Some(Ok("left alone: in use on another node".to_string())),
            });
            report(nodes, lines);
            crate::log::say(format_args!(
                "{line}: left alone (--force removes it anyway)"
            ));
            return unless_unavailable(nodes, &looked, Exit::Command(exit::FORGET_IN_USE));
        }
        // A node that failed the look is searched again.
        if arranged
            .iter()
            .zip(&looked)
            .any(|(a, l)| a.is_some() && !matches!(l, Some(Ok(_))))
        {
            let again = helper_keys(nodes, &keys, limit);
            for ((slot, look), found) in arranged.iter_mut().zip(&looked).zip(again) {
                if !matches!(look, Some(Ok(_))) {
                    *slot = found.map(|r| r.map(|found| arrange(&keys, found)));
                }
            }
        }
    }
    let how = if force { Forget::Force } else { Forget::Delete };
    let results = forget(nodes, &keys, &arranged, how, limit);
    let done: Vec<&Forgotten> = results.iter().flatten().flatten().collect();
    let was = in_use(&lock.name, &done);
    if force && let Some(line) = &was {
        println!("was in use: {line}");
    }
    let removed: i64 = done.iter().map(|f| f.removed).sum();
    let refused = done.iter().any(|f| f.refused);
    report(
        nodes,
        results.iter().map(|r| {
            r.as_ref().map(|r| {
                r.as_ref()
                    .map_err(Clone::clone)
                    .map(|f| match (f.refused, f.removed) {
                        (true, _) => left_alone(f),
                        (false, 0) => "nothing to remove".into(),
                        (false, 1) => "removed 1 key".into(),
                        (false, n) => format!("removed {n} keys"),
                    })
            })
        }),
    );
    // Taken in use between the look and the delete.
    if refused && let Some(line) = &was {
        crate::log::say(format_args!(
            "{line}: left alone there (--force removes it anyway)"
        ));
    }
    let verdict = if refused {
        Exit::Command(exit::FORGET_IN_USE)
    } else if removed > 0 {
        Exit::Command(0)
    } else {
        Exit::Command(exit::FORGET_NOTHING)
    };
    let code = unless_unavailable(nodes, &results, verdict);
    if code == Exit::Command(exit::FORGET_NOTHING) {
        crate::log::say(format_args!(
            "nothing to remove: no key of lock '{}' on any node",
            lock.name
        ));
    }
    code
}

/// What a node where the lock is in use says.
fn left_alone(f: &Forgotten) -> String {
    match f.in_use {
        Some(InUse::Queued) => "waiters queued: left alone".into(),
        Some(InUse::Shared) => "shared by readers: left alone".into(),
        _ => "held: left alone".into(),
    }
}

/// "  redis://lock1:6379: removed 3 keys", a line per node.
fn report(nodes: &Nodes, lines: impl Iterator<Item = Option<Result<String, NodeError>>>) {
    for (node, line) in nodes.iter().zip(lines) {
        let text = match line {
            None => "no answer in time".to_string(),
            Some(Err(e)) => format!("failed: {e}"),
            Some(Ok(t)) => t,
        };
        println!("  {}: {text}", node.name());
    }
}

/// `verdict`, unless fewer than a quorum of the nodes answered.
fn unless_unavailable<T>(
    nodes: &Nodes,
    answers: &[Option<Result<T, NodeError>>],
    verdict: Exit,
) -> Exit {
    let answered = answers.iter().flatten().flatten().count();
    if answered < redlock::quorum(nodes.len()) {
        return crate::error::Error::unavailable(
            "fewer than a quorum of nodes answered; keys of the lock may remain",
        )
        .said();
    }
    verdict
}

/// The script on each node, given the keys `arranged` found there; a node
/// where the search failed keeps that failure.
fn forget(
    nodes: &Nodes,
    keys: &Keys,
    arranged: &PerNode<(Vec<Vec<u8>>, usize)>,
    how: Forget,
    limit: std::time::Duration,
) -> PerNode<Forgotten> {
    let request = ForgetLock {
        near: keys.lock().to_vec(),
        keys: arranged
            .iter()
            .map(|a| a.as_ref().and_then(|r| r.as_ref().ok()).cloned())
            .collect(),
        how,
        released: keys.released(),
    };
    let which: Vec<usize> = (0..nodes.len())
        .filter(|i| matches!(arranged[*i], Some(Ok(_))))
        .collect();
    let mut out = by_node(nodes.len(), quorum::on_each(nodes, &which, request, limit));
    for (slot, a) in out.iter_mut().zip(arranged) {
        if let Some(Err(e)) = a {
            *slot = Some(Err(e.clone()));
        }
    }
    out
}

/// The keys in the order FORGET_LOCK takes them: the lock, its holder
/// record, the slot holders, the queue and its waiters, the readers and
/// their records (whether found or
/// not: a run that takes the lock or queues after the SCAN must still be
/// seen), then each slot key found with its record, then the rest found.
/// The number of pairs beside.
fn arrange(keys: &Keys, found: Vec<Vec<u8>>) -> (Vec<Vec<u8>>, usize) {
    let mut list = vec![
        keys.lock().to_vec(),
        keys.holder(None),
        keys.slots(),
        keys.queue(),
        keys.waiters(),
        keys.readers(),
        keys.reader_records(),
    ];
    let mut pairs = 0;
    for key in &found {
        if keys.kind_of(key).is_some_and(is_slot) {
            let mut record = key.clone();
            record.extend_from_slice(b":holder");
            list.push(key.clone());
            list.push(record);
            pairs += 1;
        }
    }
    let mut listed: HashSet<Vec<u8>> = list.iter().cloned().collect();
    for key in found {
        if listed.insert(key.clone()) {
            list.push(key);
        }
    }
    (list, pairs)
}

/// `slot:<i>`: a --limit slot's own key (not its record).
fn is_slot(kind: &[u8]) -> bool {
    kind.strip_prefix(b"slot:")
        .is_some_and(|i| !i.is_empty() && i.iter().all(u8::is_ascii_digit))
}

/// "lock 'deploy' is in use, held by ci@runner4 pid 4242 (deploy.sh), token
/// 5c0b1050…, and 2 waiting in its queue", from the nodes that found it in
/// use (one with a holder record first); None when none did.
fn in_use(name: &str, done: &[&Forgotten]) -> Option<String> {
    let waiting = done.iter().map(|f| f.waiting).max().unwrap_or(0);
    let holder = done
        .iter()
        .filter(|f| matches!(f.in_use, Some(InUse::Held | InUse::Slot)))
        .max_by_key(|f| !f.holder.is_empty());
    let queue = match waiting {
        0 => String::new(),
        1 => "1 waiting in its queue".into(),
        n => format!("{n} waiting in its queue"),
    };
    let held = holder.map(|f| {
        let whose = if f.in_use == Some(InUse::Slot) {
            "a --limit slot held by"
        } else {
            "held by"
        };
        match (&f.token, f.holder.is_empty()) {
            (Some(t), false) => format!("{whose} {}", holder_line(&f.holder, t)),
            (Some(t), true) => format!("{whose} token {}… (no holder record)", token_prefix(t)),
            (None, _) => format!("{whose} a run without a token here"),
        }
    });
    match (held, queue.is_empty()) {
        (None, true) => None,
        (None, false) => Some(format!("lock '{name}' is in use, {queue}")),
        (Some(h), true) => Some(format!("lock '{name}' is in use, {h}")),
        (Some(h), false) => Some(format!("lock '{name}' is in use, {h}, and {queue}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slot_keys_come_in_pairs_after_the_fixed_keys() {
        let k = Keys::new(b"lock:", b"x").expect("valid");
        let found: Vec<Vec<u8>> = [
            "{lock:x}:fence",
            "{lock:x}:slot:1",
            "{lock:x}:slot:1:holder",
            "{lock:x}:slots",
            "{lock:x}:slot:12",
            "{lock:x}:slot:",
            "{lock:x}:once:3600",
        ]
        .iter()
        .map(|s| s.as_bytes().to_vec())
        .collect();
        let (list, pairs) = arrange(&k, found);
        let list: Vec<String> = list
            .into_iter()
            .map(|b| String::from_utf8(b).expect("ASCII"))
            .collect();
        assert_eq!(pairs, 2);
        assert_eq!(
            list,
            [
                "lock:x",
                "{lock:x}:holder",
                "{lock:x}:slots",
                "{lock:x}:queue",
                "{lock:x}:waiters",
                "{lock:x}:readers",
                "{lock:x}:readers:records",
                "{lock:x}:slot:1",
                "{lock:x}:slot:1:holder",
                "{lock:x}:slot:12",
                "{lock:x}:slot:12:holder",
                "{lock:x}:fence",
                "{lock:x}:slot:",
                "{lock:x}:once:3600",
            ]
        );
    }

    #[test]
    fn in_use_says_who_holds_it_and_who_waits() {
        let held = Forgotten {
            in_use: Some(InUse::Held),
            token: Some(b"5c0b1050ffee".to_vec()),
            holder: vec![
                ("user".into(), "ci".into()),
                ("host".into(), "runner4".into()),
                ("pid".into(), "4242".into()),
                ("command".into(), "deploy.sh".into()),
            ],
            waiting: 2,
            refused: true,
            ..Forgotten::default()
        };
        let bare = Forgotten {
            in_use: Some(InUse::Held),
            token: Some(b"5c0b1050ffee".to_vec()),
            refused: true,
            ..Forgotten::default()
        };
        assert_eq!(
            in_use("deploy", &[&bare, &held]).as_deref(),
            Some(
                "lock 'deploy' is in use, held by ci@runner4 pid 4242 (deploy.sh), token \
                 5c0b1050…, and 2 waiting in its queue"
            )
        );
        let queued = Forgotten {
            in_use: Some(InUse::Queued),
            waiting: 1,
            refused: true,
            ..Forgotten::default()
        };
        assert_eq!(
            in_use("deploy", &[&queued]).as_deref(),
            Some("lock 'deploy' is in use, 1 waiting in its queue")
        );
        assert_eq!(in_use("deploy", &[&Forgotten::default()]), None);
    }
}
