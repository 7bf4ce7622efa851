//! The run history on the nodes: a list beside the lock (`Keys::history`),
//! one record per run (see `crate::run_record`), newest first, at most
//! [`HISTORY_CAP`] long, expiring [`HISTORY_TTL`] after the last append, so
//! that a retired job's history goes away on its own.
//!
//! A run's record goes to every node in the same script as its release (or
//! `--hold`; see `node::EndRun`), so recording costs no round
//! trip: one request per node, as before, and with `--replicas` the same
//! WAIT covers both. Nodes the lock was never on get the append alone, in
//! parallel. Either way it is information only: an append that a node
//! refuses (an ACL without LPUSH, a full server) is logged under `-v` and
//! changes nothing about the release.

use std::sync::Arc;
use std::time::Duration;

use crate::lock::Lock;
use crate::lock::node::{self, NodeError, Released};
use crate::lock::quorum::{self, Reply};
use crate::lock::redlock::Answer;
use crate::log::{Log, ev};
use crate::run_record::Record;

/// Runs kept per lock, on each node.
pub(crate) const HISTORY_CAP: usize = 100;

/// How long a history outlives its last run: long enough for a monthly job
/// to always find last month's run.
pub(crate) const HISTORY_TTL: Duration = Duration::from_secs(35 * 24 * 3600);

/// How a held lock ends once the command's tree is gone.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Ending {
    /// Compare-and-delete, waking waiters.
    Release,
    /// `--hold`: left to expire in `left`, the record saying how the command
    /// exited.
    Hold { left: Duration, exit_code: u8 },
}

/// What the end of a run did on one node.
pub(crate) struct Ended {
    /// The lock's part, where it was ours to end.
    pub lock: Option<Finish>,
    /// The history's part, when there was a record to append.
    pub recorded: Option<Result<(), NodeError>>,
}

/// The answer of the release or hold script.
pub(crate) enum Finish {
    Released(Released),
    Held(Answer),
}

impl Lock {
    /// Ends a held lock as `ending` says and, with a record, appends it to
    /// the history on every node, in the same request where the lock is
    /// ours, with what nodes refused in the run (see `refused`). Waits for
    /// the nodes as a release does (see `quorum::on_each`). When a node
    /// refuses the release itself, the record is appended again, saying so:
    /// the history's merge takes that one. The nodes that did not append
    /// it, each with why (`check`'s probe reports them).
    pub(crate) fn end(
        &self,
        ending: Ending,
        record: Option<Record>,
        log: &Log,
    ) -> Vec<(usize, String)> {
        // The last extension's refusals that came after its verdict.
        self.settle_extension(log);
        let before = self.refusal_count();
        let entry = |mut r: Record| {
            r.refused = self.all_refusals();
            r.to_json().map(|json| (self.keys.history(), json))
        };
        let unrecorded = self.end_with(ending, record.clone().and_then(entry), log);
        if self.refusal_count() > before
            && let Some(entry) = record.and_then(entry)
        {
            let all: Vec<usize> = (0..self.nodes.len()).collect();
            quorum::on_each(
                &self.nodes,
                &all,
                node::EndRun {
                    key_set: self.key_set(),
                    token: Arc::clone(&self.token),
                    ending,
                    ours: Vec::new(),
                    entry: Some(entry),
                },
                self.round_limit(),
            );
        }
        unrecorded
    }

    fn end_with(
        &self,
        ending: Ending,
        entry: Option<(Vec<u8>, String)>,
        log: &Log,
    ) -> Vec<(usize, String)> {
        let holding = self.holding();
        let which: Vec<usize> = if entry.is_some() {
            (0..self.nodes.len()).collect()
        } else {
            holding.clone()
        };
        if which.is_empty() {
            return Vec::new();
        }
        let replies = quorum::on_each(
            &self.nodes,
            &which,
            node::EndRun {
                key_set: self.key_set(),
                token: Arc::clone(&self.token),
                ending,
                ours: holding.clone(),
                entry,
            },
            self.round_limit(),
        );
        let mut ends: Vec<Reply<Finish>> = Vec::new();
        let mut unrecorded = Vec::new();
        for r in replies {
            let (node, latency, server) = (r.node, r.latency, r.server);
            let name = self.nodes[node].name();
            let mut not_recorded = |e: &NodeError| {
                unrecorded.push((node, e.to_string()));
                log.info(|| {
                    ev("history", format!("run not recorded in the history: {e}"))
                        .node(name)
                        .outcome("error")
                })
            };
            match r.result {
                Ok(ended) => {
                    if let Some(Err(e)) = &ended.recorded {
                        not_recorded(e);
                    }
                    if let Some(f) = ended.lock {
                        ends.push(Reply {
                            node,
                            result: Ok(f),
                            latency,
                            server,
                        });
                    }
                }
                Err(e) if holding.contains(&node) => ends.push(Reply {
                    node,
                    result: Err(e),
                    latency,
                    server,
                }),
                Err(e) => not_recorded(&e),
            }
        }
        match ending {
            Ending::Release => {
                let released = of_kind(ends, |f| match f {
                    Finish::Released(x) => Some(x),
                    Finish::Held(_) => None,
                });
                self.log_releases(&holding, &released, log);
            }
            Ending::Hold { left, .. } => {
                let held = of_kind(ends, |f| match f {
                    Finish::Held(a) => Some(a),
                    Finish::Released(_) => None,
                });
                self.log_holds(&held, left, log);
            }
        }
        unrecorded
    }
}

/// The replies whose lock step is of the kind `pick` takes (errors kept), for
/// the log of that ending.
fn of_kind<T>(ends: Vec<Reply<Finish>>, pick: impl Fn(Finish) -> Option<T>) -> Vec<Reply<T>> {
    ends.into_iter()
        .filter_map(|r| {
            let result = match r.result {
                Ok(f) => Ok(pick(f)?),
                Err(e) => Err(e),
            };
            Some(Reply {
                node: r.node,
                result,
                latency: r.latency,
                server: r.server,
            })
        })
        .collect()
}
