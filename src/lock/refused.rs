//! What a node refused of the lock's upkeep: a release (at the end, or the
//! undo of a failed attempt), an extension, a clean-up (a --once-per marker
//! taken back, a place in the --wait queue given up). Each is said at once
//! in one warning line, not only under -v: what the node keeps stays until
//! it expires, and the next run finds the lock held by a process that has
//! exited. Each is kept too, for the report, the metrics and the run's
//! history record (see `Lock::refusals`).
//!
//! A refusal is an error the node answered (an ACL that refuses DEL, a
//! server out of memory); a node that did not answer is the closing
//! warning's, which names every failed node.

use std::time::Duration;

use crate::lock::Lock;
use crate::lock::keys;
use crate::lock::node::{self, Extension, Kind, NodeError};
use crate::lock::quorum::{Reply, Round};
use crate::log::{Log, ev};

/// What the node was asked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Step {
    /// A release of the lock, or the undo of a failed attempt.
    Release,
    Extend,
    /// Taking a --once-per marker back.
    Unmark,
    /// Giving up a place in the --wait queue.
    Leave,
}

impl Step {
    /// The word the report and the history record use.
    pub(crate) fn word(self) -> &'static str {
        match self {
            Step::Release => "release",
            Step::Extend => "extend",
            Step::Unmark => "unmark",
            Step::Leave => "leave-queue",
        }
    }
}

/// One refusal.
#[derive(Clone, Debug)]
pub(super) struct Refusal {
    pub node: usize,
    pub step: Step,
    /// What the node answered, in a clause: "the ACL refuses DEL".
    pub said: String,
}

impl Lock {
    /// Says and keeps `e` when it is node `i` refusing `step` (an error it
    /// answered); true then. An extension a node keeps refusing is said
    /// once. `key` names what stays behind, `left` for how long at most
    /// (where known).
    pub(super) fn refused(
        &self,
        i: usize,
        step: Step,
        e: &NodeError,
        (key, left): (&[u8], Option<Duration>),
        log: &Log,
    ) -> bool {
        if e.kind() != Kind::Server {
            return false;
        }
        // A node that refused the acquire with the same error (WRONGTYPE:
        // the key is not a lock) holds nothing of ours: its acquire error
        // names it already.
        if step == Step::Release
            && e.code().is_some()
            && self.acquire_code(i).as_deref() == e.code()
        {
            return true;
        }
        let said = answered(e, self.nodes[i].name());
        {
            let mut kept = self.refusals.lock().unwrap_or_else(|p| p.into_inner());
            if kept.iter().any(|r| r.node == i && r.step == step) && step == Step::Extend {
                return true;
            }
            kept.push(Refusal {
                node: i,
                step,
                said: said.clone(),
            });
        }
        let name = self.nodes[i].name();
        let key = keys::show(key);
        let within = left.map_or(String::new(), |d| {
            format!(", within {}", humantime::format_duration(d))
        });
        let msg = match step {
            Step::Release => format!(
                "warning: {key} stays on {name} until its TTL runs out{within}: the node \
                 refused the release: {said}"
            ),
            Step::Extend => format!(
                "warning: {key} on {name} is not extended and expires by its TTL{within}: the \
                 node refused the extension: {said}"
            ),
            Step::Unmark => format!(
                "warning: the --once-per marker {key} stays on {name} until it expires{within}: \
                 the node refused to take it back: {said}"
            ),
            Step::Leave => format!(
                "warning: our place in the queue {key} stays on {name} until it lapses{within}: \
                 the node refused to give it up: {said}"
            ),
        };
        log.notice(
            ev("refused", msg)
                .node(name)
                .outcome("refused")
                .field("step", step.word()),
        );
        true
    }

    /// The code of the error reply node `i` gave the last acquire, if it
    /// gave one.
    fn acquire_code(&self, i: usize) -> Option<String> {
        let last = self.last_round.lock().unwrap_or_else(|p| p.into_inner());
        let e = last.as_ref()?.reply_of(i)?.result.as_ref().err()?;
        e.code().map(str::to_string)
    }

    /// What node `i` refused in this run, each as `release: the ACL
    /// refuses DEL`.
    pub(crate) fn refusals(&self, i: usize) -> Vec<String> {
        self.refusals
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .filter(|r| r.node == i)
            .map(|r| format!("{}: {}", r.step.word(), r.said))
            .collect()
    }

    /// Every refusal of the run, each naming its node: for the history
    /// record.
    pub(crate) fn all_refusals(&self) -> Vec<String> {
        self.refusals
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .map(|r| {
                format!(
                    "{} {}: {}",
                    r.step.word(),
                    self.nodes[r.node].name(),
                    r.said
                )
            })
            .collect()
    }

    /// `round`, an extension round just decided, with its refusals said;
    /// the previous one's that came after its verdict are said first. When
    /// dropped, the round is kept for its own late ones (the next
    /// extension, or the end of the run, says them).
    pub(super) fn kept(&self, round: Round<Extension>, log: &Log) -> Kept<'_> {
        self.settle_extension(log);
        self.extension_refusals(&round.replies, log);
        Kept {
            lock: self,
            round: Some(round),
        }
    }

    /// Says the refusals among the replies to the last extension that came
    /// after its verdict.
    pub(super) fn settle_extension(&self, log: &Log) {
        let last = self
            .extending
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        if let Some(mut round) = last {
            let late = round.settle(&self.nodes);
            self.extension_refusals(late, log);
        }
    }

    fn extension_refusals(&self, replies: &[Reply<Extension>], log: &Log) {
        for r in replies {
            if let Err(e) = &r.result {
                let what = (&self.key_set().lock[..], Some(self.ttl));
                self.refused(r.node, Step::Extend, e, what, log);
            }
        }
    }

    /// How many refusals the run has kept so far.
    pub(super) fn refusal_count(&self) -> usize {
        self.refusals
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .len()
    }
}

/// What the node answered, without its name: "the ACL refuses DEL" for an
/// ACL's refusal, else the server's words.
fn answered(e: &NodeError, name: &str) -> String {
    let text = e.to_string();
    if node::denied(&text)
        && let Some(command) = node::refused_command(&text)
    {
        return format!("the ACL refuses {command}");
    }
    text.strip_prefix(name)
        .and_then(|t| t.strip_prefix(": "))
        .unwrap_or(&text)
        .to_string()
}

/// An extension round in use, kept by its lock once dropped (see
/// `Lock::kept`).
pub(super) struct Kept<'a> {
    lock: &'a Lock,
    /// Some until dropped.
    round: Option<Round<Extension>>,
}

impl std::ops::Deref for Kept<'_> {
    type Target = Round<Extension>;

    fn deref(&self) -> &Round<Extension> {
        // Taken only by `drop`, after which nothing derefs it.
        self.round
            .as_ref()
            .expect("an extension round until dropped")
    }
}

impl Drop for Kept<'_> {
    fn drop(&mut self) {
        *self
            .lock
            .extending
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = self.round.take();
    }
}
