//! Rounds of requests to all nodes at once, decided as soon as the outcome is
//! certain. A node that has not answered by then goes on with the request on
//! its own worker; its reply is dropped, and any later request to that node
//! queues behind it (see `node`).

use std::sync::Arc;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use crate::lock::node::{Node, NodeError, Session};
use crate::lock::redlock::{Answer, Tally, Verdict};

/// One node's reply within a round.
pub struct Reply<T> {
    pub node: usize,
    pub result: Result<T, NodeError>,
    pub latency: Duration,
}

/// Sends `op` to the nodes listed in `which`, in parallel, and collects
/// replies until `done` says stop (or all replied, or `limit` passed).
/// Replies come back in arrival order, carrying indexes into `nodes`.
fn fan_out<T, F, D>(
    nodes: &[Arc<Node>],
    which: &[usize],
    op: F,
    mut done: D,
    limit: Duration,
) -> Vec<Reply<T>>
where
    T: Send + 'static,
    F: Fn(&mut Session) -> Result<T, NodeError> + Send + Sync + 'static,
    D: FnMut(&[Reply<T>]) -> bool,
{
    let start = Instant::now();
    // A lock on one node: no thread, no channel. This is the common case and
    // the one that races flock(1). Only then: with several nodes, a request
    // must queue behind what its node's worker still has in hand.
    if let ([node], [0]) = (nodes, which) {
        let result = node.run(|s| op(s));
        return vec![Reply {
            node: 0,
            result,
            latency: start.elapsed(),
        }];
    }
    let op = Arc::new(op);
    let (tx, rx) = mpsc::channel();
    for &i in which {
        let (tx, op) = (tx.clone(), Arc::clone(&op));
        nodes[i].submit(Box::new(move |session| {
            let result = op(session);
            // The round may have been decided already: nobody listens.
            let _ = tx.send(Reply {
                node: i,
                result,
                latency: start.elapsed(),
            });
        }));
    }
    drop(tx);
    let deadline = start + limit;
    let mut replies = Vec::with_capacity(which.len());
    while replies.len() < which.len() {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(r) => {
                replies.push(r);
                if done(&replies) {
                    break;
                }
            }
            Err(_) => break,
        }
    }
    replies
}

/// A node's reply that says whether it granted what was asked.
pub trait Vote {
    fn answer(&self) -> Answer;
}

impl Vote for Answer {
    fn answer(&self) -> Answer {
        *self
    }
}

fn tally<T: Vote>(n: usize, replies: &[Reply<T>]) -> Tally {
    let mut t = Tally::new(n);
    for r in replies {
        t.record(r.result.as_ref().map_or(Answer::Failed, Vote::answer));
    }
    t
}

/// A finished acquire or extend round.
pub struct Round<T = Answer> {
    pub verdict: Verdict,
    /// When the verdict became certain, measured from the round's start.
    pub elapsed: Duration,
    pub tally: Tally,
    pub replies: Vec<Reply<T>>,
}

impl<T: Vote> Round<T> {
    /// Nodes whose SET may have landed: granted, failed, or not heard from.
    /// Only an explicit refusal proves our token is not there.
    pub fn maybe_ours(&self, n: usize) -> Vec<usize> {
        (0..n)
            .filter(|i| {
                !self.replies.iter().any(|r| {
                    r.node == *i
                        && r.result
                            .as_ref()
                            .is_ok_and(|v| v.answer() == Answer::Refused)
                })
            })
            .collect()
    }
}

/// Runs `op` (acquire or extend) on all nodes; stops listening at the verdict.
pub fn decide<T, F>(nodes: &[Arc<Node>], op: F, limit: Duration) -> Round<T>
where
    T: Vote + Send + 'static,
    F: Fn(&mut Session) -> Result<T, NodeError> + Send + Sync + 'static,
{
    let n = nodes.len();
    let start = Instant::now();
    let all: Vec<usize> = (0..n).collect();
    let replies = fan_out(nodes, &all, op, |r| tally(n, r).verdict().is_some(), limit);
    let elapsed = start.elapsed();
    let tally = tally(n, &replies);
    // Past the limit, whoever has not answered counts as failed.
    let verdict = tally.verdict().unwrap_or_else(|| {
        let mut t = tally.clone();
        for _ in replies.len()..n {
            t.record(Answer::Failed);
        }
        t.verdict().unwrap_or(Verdict::Unavailable)
    });
    Round {
        verdict,
        elapsed,
        tally,
        replies,
    }
}

/// Runs `op` on the nodes listed in `which`, waiting for all of them (bounded
/// by `limit`). Replies carry indexes into `nodes`.
pub fn on_each<T, F>(nodes: &[Arc<Node>], which: &[usize], op: F, limit: Duration) -> Vec<Reply<T>>
where
    T: Send + 'static,
    F: Fn(&mut Session) -> Result<T, NodeError> + Send + Sync + 'static,
{
    fan_out(nodes, which, op, |_| false, limit)
}
