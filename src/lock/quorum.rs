//! Rounds of requests to all nodes at once, decided as soon as the outcome
//! is certain. The thread that makes a round drives it: every node's
//! request goes out at once (each behind whatever its connection has in
//! flight, see `node`), and the replies are taken as they come. A node
//! that has not answered when the round is decided keeps its request: its
//! reply is taken later for the record (`Round::settle`), and any later
//! request to it is written behind it.
//!
//! Degraded mode. A node is *overdue* when a request has been outstanding
//! there for longer than twice the slowest answer any node gave in this run,
//! plus a millisecond (`Pace`): it is stopped, black-holed, or far slower
//! than its peers. A refused connection is not an answer, and until some
//! node has answered no node is overdue. An overdue node is sent each new
//! request all the same (it may come back), but counts as failed at once for
//! a round's verdict, and rounds that wait for every answer (release, undo,
//! fence commit) do not wait for it, nor for a node that timed out earlier
//! in the run; a node that is only busy (its answer is due any moment) is
//! waited for until it would be overdue. A stopped node of three then costs
//! about a millisecond. Its release is written behind its unanswered
//! acquire all the same: once it resumes it holds nothing of a finished run.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::lock::node::{self, Node, NodeError, Nodes, Request};
use crate::lock::redlock::{Answer, Tally, Verdict, Vote};

/// One node's reply within a round.
pub(crate) struct Reply<T> {
    pub node: usize,
    pub result: Result<T, NodeError>,
    pub latency: Duration,
    /// A digest of the `run_id` of the server that answered, where a fresh
    /// connection read it (see `Lock::same_voter`).
    pub server: Option<u64>,
}

/// Whether node `i` is overdue now.
fn overdue(nodes: &Nodes, i: usize, now: Instant) -> bool {
    nodes[i]
        .waiting_since()
        .and_then(|s| nodes.pace().overdue_at(s))
        .is_some_and(|t| now >= t)
}

/// A node not worth waiting for now: it timed out in this run, or is overdue.
pub(crate) fn not_answering(nodes: &Nodes, i: usize) -> bool {
    nodes[i].timed_out() || overdue(nodes, i, Instant::now())
}

/// Reads a node's raw replies as the round's request does.
type Decode<T> = Arc<
    dyn Fn(&Node, usize, Result<node::Answered, NodeError>) -> Result<T, NodeError> + Send + Sync,
>;

/// Requests a round gave up listening for, to be taken later.
struct Late<T> {
    /// (node, ticket) of each request still unanswered.
    pending: Vec<(usize, u64)>,
    /// Replies that came in while the round listened past its verdict.
    heard: Vec<Reply<T>>,
    decode: Decode<T>,
    start: Instant,
    /// A failure a reply means counts in the node's part (see `read`).
    note: bool,
}

/// Sends `request` to the nodes listed in `which` at once and takes their
/// replies until `until` says stop (`None`) or the moment it names passes.
/// With `grace`, the nodes still due are listened to for as long again as
/// the round took (a healthy node's answer is a moment behind the quorum's).
fn fan_out<R, U>(
    nodes: &Nodes,
    which: &[usize],
    request: R,
    mut until: U,
    grace: bool,
) -> (Vec<Reply<R::Answer>>, Late<R::Answer>)
where
    R: Request + 'static,
    U: FnMut(&[Reply<R::Answer>]) -> Option<Instant>,
{
    let start = Instant::now();
    let upkeep = request.upkeep();
    let request = Arc::new(request);
    let decode: Decode<R::Answer> = {
        let r = Arc::clone(&request);
        Arc::new(move |node: &Node, i, raw| node.answer(&*r, i, raw))
    };
    let mut guards: Vec<_> = which.iter().map(|&i| (i, nodes[i].state())).collect();
    let mut pending = Vec::with_capacity(which.len());
    // A command asked of several nodes alike is packed once: an acquire's
    // carries its script, 6 KB.
    let mut last: Option<(usize, Arc<Vec<u8>>)> = None;
    for (i, state) in guards.iter_mut() {
        let node = &nodes[*i];
        let ticket = state.ticket();
        let alike = last.as_ref().filter(|(j, _)| request.asks_alike(*i, *j));
        if let Some(req) = node.packet(&*request, *i, ticket, alike.map(|(_, b)| b)) {
            last = Some((*i, Arc::clone(req.bytes())));
            node_submit(node, state, req);
            pending.push((*i, ticket));
        }
    }
    let (mut replies, mut heard) = (Vec::with_capacity(which.len()), Vec::new());
    let mut stop: Option<Instant> = None;
    loop {
        let mut k = 0;
        while k < pending.len() {
            let (i, ticket) = pending[k];
            let Some((_, state)) = guards.iter_mut().find(|(j, _)| *j == i) else {
                k += 1;
                continue;
            };
            let Some(raw) = state.take(ticket) else {
                k += 1;
                continue;
            };
            let (result, server) = read(&nodes[i], state, i, raw, &decode, !upkeep);
            let reply = answered(nodes, i, result, start, server);
            pending.swap_remove(k);
            match stop {
                None => replies.push(reply),
                Some(_) => heard.push(reply),
            }
        }
        let deadline = match stop {
            Some(t) => Some(t),
            None => match until(&replies) {
                Some(t) => Some(t),
                // As long again as the verdict took: the acquire's wait for
                // a second name of one server (see `Lock::acquire`).
                None if grace => {
                    let now = Instant::now();
                    stop = Some(now + now.saturating_duration_since(start));
                    stop
                }
                None => None,
            },
        };
        let Some(deadline) = deadline else { break };
        if pending.is_empty() || Instant::now() >= deadline {
            break;
        }
        let mut states: Vec<(&Node, &mut node::State)> = guards
            .iter_mut()
            .map(|(i, g)| (&*nodes[*i], &mut **g))
            .collect();
        node::step(&mut states, deadline);
    }
    let late = Late {
        pending,
        heard,
        decode,
        start,
        note: !upkeep,
    };
    (replies, late)
}

/// Node `i`'s answer from its raw replies, and a digest of the server that
/// gave it (see `Lock::same_voter`). With `note`, a failure the reply meant
/// counts in the node's part of the run (see `State::note_failure`).
fn read<T>(
    node: &Node,
    state: &mut node::State,
    i: usize,
    raw: Result<node::Answered, NodeError>,
    decode: &Decode<T>,
    note: bool,
) -> (Result<T, NodeError>, Option<u64>) {
    let answered = raw.is_ok() && note;
    let server = raw
        .as_ref()
        .ok()
        .and_then(|a| node.server_digest(a.server.as_deref()));
    let result = decode(node, i, raw);
    if answered && let Err(e) = &result {
        state.note_failure(e);
    }
    (result, server)
}

fn node_submit(node: &Node, state: &mut node::State, req: node::Req) {
    state.submit(node, req, Instant::now());
}

/// Node `i`'s result for a round started at `start`, its latency noted.
fn answered<T>(
    nodes: &Nodes,
    i: usize,
    result: Result<T, NodeError>,
    start: Instant,
    server: Option<u64>,
) -> Reply<T> {
    let latency = start.elapsed();
    nodes.pace().note(&result, latency);
    Reply {
        node: i,
        result,
        latency,
        server,
    }
}

/// Sends `request` to the nodes of `which` without waiting for their
/// answers: they are read, and dropped, by the node's next round.
pub(crate) fn send<R: Request + 'static>(nodes: &Nodes, which: &[usize], request: R) {
    for &i in which {
        let node = &nodes[i];
        let mut state = node.state();
        let ticket = state.ticket();
        if let Some(req) = node.packet(&request, i, ticket, None) {
            node_submit(node, &mut state, req);
        }
    }
}

/// The tally of `replies`, with `skipped` nodes counted as failed.
fn tally<T: Vote>(n: usize, replies: &[Reply<T>], skipped: &[usize]) -> Tally {
    let mut t = Tally::new(n);
    for r in replies {
        if !skipped.contains(&r.node) {
            t.record(r.result.as_ref().map_or(Answer::Failed, Vote::answer));
        }
    }
    for _ in skipped {
        t.record(Answer::Failed);
    }
    t
}

/// A finished acquire or extend round.
pub(crate) struct Round<T = Answer> {
    pub verdict: Verdict,
    /// When the verdict became certain, measured from the round's start.
    pub elapsed: Duration,
    /// The same moment, on the clock.
    pub decided_at: Instant,
    pub tally: Tally,
    /// Replies heard by the verdict (and, after `settle`, since).
    pub replies: Vec<Reply<T>>,
    /// Nodes counted as failed without waiting: they were overdue when the
    /// round began.
    pub skipped: Vec<usize>,
    /// The round's start plus its limit: `linger` waits no longer.
    deadline: Instant,
    late: Late<T>,
}

impl<T: Vote> Round<T> {
    /// Nodes whose SET may have landed: granted, failed after the request
    /// went out, or not heard from. Only a refusal, or a failure to connect
    /// at all, proves our token is not there.
    pub(crate) fn maybe_ours(&self, n: usize) -> Vec<usize> {
        (0..n)
            .filter(|i| {
                !self.replies.iter().any(|r| {
                    r.node == *i
                        && match &r.result {
                            Ok(v) => v.answer() == Answer::Refused,
                            Err(e) => !e.maybe_applied(),
                        }
                })
            })
            .collect()
    }
}

impl<T> Round<T> {
    /// Takes in the replies that arrived since the round stopped listening,
    /// without waiting; the new ones.
    pub(crate) fn settle(&mut self, nodes: &Nodes) -> &[Reply<T>] {
        let before = self.replies.len();
        self.replies.append(&mut self.late.heard);
        let now = Instant::now();
        let late = &mut self.late;
        let mut k = 0;
        while k < late.pending.len() {
            let (i, ticket) = late.pending[k];
            let mut state = nodes[i].state();
            state.progress(&nodes[i], now);
            match state.take(ticket) {
                Some(raw) => {
                    let (result, server) =
                        read(&nodes[i], &mut state, i, raw, &late.decode, late.note);
                    drop(state);
                    self.replies
                        .push(answered(nodes, i, result, late.start, server));
                    late.pending.swap_remove(k);
                }
                None => k += 1,
            }
        }
        &self.replies[before..]
    }

    /// Waits for the replies still due from nodes that are neither overdue
    /// nor timed out, as long as they are not overdue: a round that failed
    /// can afford a moment, for an error message that names what each node
    /// really did and an undo that knows where the SET landed.
    pub(crate) fn linger(&mut self, nodes: &Nodes) {
        self.linger_until(nodes, self.deadline);
    }

    /// `linger`, waiting no later than `cap`.
    pub(crate) fn linger_until(&mut self, nodes: &Nodes, cap: Instant) {
        let cap = cap.min(self.deadline);
        loop {
            self.settle(nodes);
            let now = Instant::now();
            let due: Vec<(usize, Instant)> = self
                .late
                .pending
                .iter()
                .map(|(i, _)| *i)
                .filter(|i| !self.skipped.contains(i) && !nodes[*i].timed_out())
                .filter_map(|i| {
                    let since = nodes[i].waiting_since()?;
                    let until = nodes.pace().overdue_at(since).map_or(cap, |t| t.min(cap));
                    (until > now).then_some((i, until))
                })
                .collect();
            let Some(until) = due.iter().map(|(_, t)| *t).max() else {
                break;
            };
            let mut guards: Vec<_> = due.iter().map(|(i, _)| (*i, nodes[*i].state())).collect();
            let mut states: Vec<(&Node, &mut node::State)> = guards
                .iter_mut()
                .map(|(i, g)| (&*nodes[*i], &mut **g))
                .collect();
            node::step(&mut states, until);
        }
    }

    /// The reply of node `i`, if it has come.
    pub(crate) fn reply_of(&self, i: usize) -> Option<&Reply<T>> {
        self.replies.iter().find(|r| r.node == i)
    }
}

/// Runs `request` (acquire or extend) on all nodes; stops listening at the
/// verdict.
pub(crate) fn decide<R>(nodes: &Nodes, request: R, limit: Duration) -> Round<R::Answer>
where
    R: Request + 'static,
    R::Answer: Vote,
{
    let n = nodes.len();
    let start = Instant::now();
    let skipped: Vec<usize> = (0..n).filter(|&i| overdue(nodes, i, start)).collect();

    let all: Vec<usize> = (0..n).collect();
    // When the verdict became certain: the round listens a moment longer
    // for the nodes still due, which is no part of it.
    let decided = std::cell::Cell::new(None);
    let (replies, late) = fan_out(
        nodes,
        &all,
        request,
        |r| {
            let open = tally(n, r, &skipped).verdict().is_none();
            if !open && decided.get().is_none() {
                decided.set(Some(Instant::now()));
            }
            open.then_some(start + limit)
        },
        n > 1,
    );
    let decided_at = decided.get().unwrap_or_else(Instant::now);
    let tally = tally(n, &replies, &skipped);
    // Past the limit, whoever has not answered counts as failed.
    let verdict = tally.verdict().unwrap_or_else(|| {
        let mut t = tally.clone();
        let heard = replies
            .iter()
            .filter(|r| !skipped.contains(&r.node))
            .count();
        for _ in heard + skipped.len()..n {
            t.record(Answer::Failed);
        }
        t.verdict().unwrap_or(Verdict::Unavailable)
    });
    Round {
        verdict,
        elapsed: decided_at.saturating_duration_since(start),
        tally,
        replies,
        skipped,
        decided_at,
        deadline: start + limit,
        late,
    }
}

/// Runs `request` on the nodes listed in `which`, waiting for their replies
/// (bounded by `limit`), except from nodes that timed out earlier in this
/// run or are overdue, and from busy ones only until they would be overdue
/// (see the module's documentation). Every node listed gets the request, a
/// node not waited for behind what it has in flight: a node stopped while
/// it had our acquire applies the acquire and then its release when it
/// resumes. Replies carry indexes into `nodes`; whatever has come by the end
/// is among them.
pub(crate) fn on_each<R: Request + 'static>(
    nodes: &Nodes,
    which: &[usize],
    request: R,
    limit: Duration,
) -> Vec<Reply<R::Answer>> {
    let start = Instant::now();
    // Per node: wait for its reply until this moment (None: do not wait).
    let wait: Vec<(usize, Option<Instant>)> = which
        .iter()
        .map(|&i| {
            let until = if nodes[i].timed_out() {
                None
            } else {
                match nodes[i].waiting_since() {
                    None => Some(start + limit),
                    Some(since) => nodes
                        .pace()
                        .overdue_at(since)
                        .map_or(Some(start + limit), |t| (t > start).then_some(t)),
                }
            };
            (i, until.map(|t| t.min(start + limit)))
        })
        .collect();
    let (mut replies, mut late) = fan_out(
        nodes,
        which,
        request,
        |r| {
            let now = Instant::now();
            wait.iter()
                .filter(|(i, _)| !r.iter().any(|x| x.node == *i))
                .filter_map(|(_, until)| *until)
                .filter(|t| *t > now)
                .max()
        },
        false,
    );
    replies.append(&mut late.heard);
    replies
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tally_counts_skipped_nodes_as_failed() {
        let reply = |node, answer| Reply {
            node,
            result: Ok(answer),
            latency: Duration::ZERO,
            server: None,
        };
        let replies = [reply(0, Answer::Granted), reply(1, Answer::Granted)];
        assert_eq!(tally(3, &replies, &[]).verdict(), Some(Verdict::Quorum));
        // A node skipped as overdue does not vote, even if it answered.
        assert_eq!(tally(3, &replies, &[1]).verdict(), None);
        let refused = [reply(0, Answer::Refused), reply(2, Answer::Refused)];
        assert_eq!(tally(3, &refused, &[]).verdict(), Some(Verdict::Refused));
    }
}
