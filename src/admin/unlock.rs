//! `unlock`: clears a lock whose holder is gone, only where it holds the
//! given token (or its first 8 or more characters, as `status` shows it), or
//! whatever holds it with `--force`. The exit status says what happened.

use std::sync::Arc;

use super::Subject;
use super::{holder_line, inspect_all, on_all, record_of};
use crate::exit::{self, Exit};
use crate::lock::node::{self, NodeError, Nodes, Released, Share};
use crate::lock::redlock;
use crate::log::printable;

/// Fewest characters of a token `--token` takes: what `status` shows.
const MIN_PREFIX: usize = 8;

/// What one node did.
enum Done {
    Deleted,
    NotOurs,
    Absent,
}

/// `token` given: where the lock holds it; none (--force): whatever holds it.
pub(super) fn delete(lock: &Subject, nodes: &Nodes, token: Option<&str>) -> Exit {
    let key_set = Arc::new(crate::lock::key_set(&lock.keys, None, None));
    let results: Vec<Option<Result<Done, NodeError>>> = match token {
        Some(token) => {
            if token.chars().count() < MIN_PREFIX {
                crate::log::say(format_args!(
                    "--token needs at least {MIN_PREFIX} characters of the token \
                     (status shows the first {MIN_PREFIX})"
                ));
                return Exit::Usage;
            }
            let (token, b): (Arc<str>, _) = (token.into(), Arc::clone(&key_set));
            on_all(
                nodes,
                node::Unlock {
                    key_set: b,
                    prefix: token,
                },
            )
            .into_iter()
            .map(|r| {
                r.map(|r| {
                    r.map(|x| match x {
                        Released::Deleted => Done::Deleted,
                        Released::AlreadyGone => Done::Absent,
                        Released::NotOurs => Done::NotOurs,
                    })
                })
            })
            .collect()
        }
        None => {
            let found = inspect_all(nodes, &key_set);
            if let Some(token) = found
                .iter()
                .flatten()
                .flatten()
                .find_map(|i| i.value.clone())
            {
                let record = record_of(&found, &token);
                println!("was held by {}", holder_line(&record, &token));
                warn_live_holder(&record);
            }
            // Every reader's share goes too: each reader's heartbeat then
            // finds it gone and stops its tree, as a holder's does.
            let mut shares: Vec<&Share> = found
                .iter()
                .flatten()
                .flatten()
                .flat_map(|i| &i.readers)
                .collect();
            shares.sort_by(|a, b| a.token.cmp(&b.token));
            shares.dedup_by(|a, b| a.token == b.token);
            for share in shares {
                println!("was shared by {}", holder_line(&share.record, &share.token));
            }
            let b = Arc::clone(&key_set);
            on_all(nodes, node::ForceDelete { key_set: b })
                .into_iter()
                .map(|r| r.map(|r| r.map(|d| if d { Done::Deleted } else { Done::Absent })))
                .collect()
        }
    };
    let (mut answered, mut deleted, mut other) = (0, 0, 0);
    for (node, r) in nodes.iter().zip(&results) {
        let text = match r {
            None => "no answer in time".to_string(),
            Some(Err(e)) => format!("failed: {e}"),
            Some(Ok(d)) => {
                answered += 1;
                match d {
                    Done::Deleted => {
                        deleted += 1;
                        "deleted".into()
                    }
                    Done::NotOurs => {
                        other += 1;
                        "held by another token: left alone".into()
                    }
                    Done::Absent => "no lock here".into(),
                }
            }
        };
        println!("  {}: {text}", node.name());
    }
    if answered < redlock::quorum(nodes.len()) {
        return crate::error::Error::unavailable(
            "fewer than a quorum of nodes answered; the lock may still be held",
        )
        .said();
    }
    if deleted > 0 {
        Exit::Command(0)
    } else if other > 0 {
        crate::log::say("nothing removed: the lock holds another token");
        Exit::Command(exit::UNLOCK_OTHER_TOKEN)
    } else {
        crate::log::say("nothing removed: there is no such lock");
        Exit::Command(exit::UNLOCK_NO_LOCK)
    }
}

/// A holder whose lock is deleted under it does not know yet: it runs on
/// until its next extension finds the lock gone, then stops its command
/// and exits 76. Meanwhile another run may start beside it.
fn warn_live_holder(record: &[(String, String)]) {
    // A holder that left its lock to expire (--hold) has exited already.
    if record.iter().any(|(k, _)| k == "exited_ms") {
        return;
    }
    let field = |name: &str| super::record_field(record, name).to_string();
    let period = field("ttl_ms")
        .parse::<u64>()
        .ok()
        .map(|ms| humantime::format_duration(std::time::Duration::from_millis(ms / 3)).to_string());
    crate::log::warn(format_args!(
        "{}@{} pid {} may still be running: it keeps running {}, then stops \
         its command and exits 76; another run can take the lock meanwhile",
        printable(&field("user")),
        printable(&field("host")),
        printable(&field("pid")),
        match period {
            Some(p) => format!("until its next heartbeat finds the lock gone (every {p})"),
            None => "until its next heartbeat finds the lock gone (every TTL/3)".to_string(),
        }
    ));
}
