//! Rounds of requests to all nodes at once, decided as soon as the outcome is
//! certain: from the calling thread where every node allows it (see
//! `node::polled`), else on each node's worker thread. A node that has not
//! answered by then goes on with the request on its own worker; its reply is
//! kept for the record (`Round::settle`), and any later request to that node
//! queues behind it (see `node`).
//!
//! Degraded mode. A node is *overdue* when a request has been outstanding
//! there for longer than twice the slowest answer any node gave in this run,
//! plus a millisecond: it is stopped, black-holed, or far slower than its
//! peers. A refused connection is not an answer, and until some node has
//! answered no node is overdue. An overdue node is sent each new request all
//! the same (it may come back), but counts as failed at once for a round's
//! verdict, and rounds that wait for every answer (release, undo, fence
//! commit) do not wait for it, nor for a node that timed out earlier in the
//! run; a node that is only busy (its answer is due any moment) is waited for
//! until it would be overdue. A stopped node of three then costs about a
//! millisecond. It still gets the release, written behind the unanswered
//! acquire on its connection (see `on_each_behind`): once it resumes it
//! holds nothing of a finished run.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver};
use std::time::{Duration, Instant};

use crate::lock::node::{Node, NodeError, Session, polled};
use crate::lock::redlock::{Answer, Tally, Verdict};

/// One node's reply within a round.
pub struct Reply<T> {
    pub node: usize,
    pub result: Result<T, NodeError>,
    pub latency: Duration,
}

/// Each node's job number in a round (see `Node::write_behind`).
type Jobs = Vec<(usize, u64)>;

/// Replies that may still come in after a round stopped listening.
struct Late<T>(Option<Receiver<Reply<T>>>);

/// One more than the slowest answer any node gave in this run, in µs; 0
/// until a node has answered.
static SLOWEST_US: AtomicU64 = AtomicU64::new(0);

fn note_latency<T>(result: &Result<T, NodeError>, latency: Duration) {
    // Only a reply from the node tells how fast nodes answer. A refused
    // connection is the local kernel's speed: counted, it would make a live
    // node overdue a millisecond after its peers were refused, and its
    // copy of the key would be left to expire.
    let answered = match result {
        Ok(_) => true,
        Err(e) => !e.is_timeout() && e.maybe_applied(),
    };
    if answered {
        let us = u64::try_from(latency.as_micros()).unwrap_or(u64::MAX - 1);
        SLOWEST_US.fetch_max(us + 1, Ordering::Relaxed);
    }
}

/// Node `node`'s reply to a round started at `start`, its latency noted.
fn answered<T>(node: usize, result: Result<T, NodeError>, start: Instant) -> Reply<T> {
    let latency = start.elapsed();
    note_latency(&result, latency);
    Reply {
        node,
        result,
        latency,
    }
}

/// When a request outstanding since `since` makes its node overdue; None
/// while no node has answered (nothing to be overdue against).
fn overdue_at(since: Instant) -> Option<Instant> {
    match SLOWEST_US.load(Ordering::Relaxed) {
        0 => None,
        n => Some(since + Duration::from_micros(n - 1) * 2 + Duration::from_millis(1)),
    }
}

/// Whether `node` is overdue now.
fn overdue(node: &Node, now: Instant) -> bool {
    node.waiting_since()
        .and_then(overdue_at)
        .is_some_and(|t| now >= t)
}

/// A node not worth waiting for now: it timed out in this run, or is overdue.
pub fn not_answering(node: &Node) -> bool {
    node.timed_out() || overdue(node, Instant::now())
}

/// Sends `op` (given each node's index) to the nodes listed in `which`, in
/// parallel, and collects replies until `until` says stop (`None`) or the
/// moment it names passes.
/// Replies come back in arrival order, carrying indexes into `nodes`; the
/// receiver for the ones still to come is returned beside them, and each
/// node's job number (see `Node::write_behind`).
fn fan_out<T, F, U>(
    nodes: &[Arc<Node>],
    which: &[usize],
    op: F,
    mut until: U,
    grace: bool,
) -> (Vec<Reply<T>>, Late<T>, Jobs)
where
    T: Send + 'static,
    F: Fn(usize, &mut Session) -> Result<T, NodeError> + Send + Sync + 'static,
    U: FnMut(&[Reply<T>]) -> Option<Instant>,
{
    let start = Instant::now();
    // A lock on one node: no thread, no channel. This is the common case and
    // the one that races flock(1). Only then: with several nodes, a request
    // must queue behind what its node's worker still has in hand.
    if let ([node], [0]) = (nodes, which) {
        node.begin();
        let result = node.run(|s| op(0, s));
        node.finish(&result);
        return (vec![answered(0, result, start)], Late(None), Vec::new());
    }
    let op = Arc::new(op);
    if let Some(held) = polled::take(nodes, which) {
        return drive(held, op, until, start, grace);
    }
    let (tx, rx) = mpsc::channel();
    let mut jobs = Vec::with_capacity(which.len());
    for &i in which {
        let (tx, op, node) = (tx.clone(), Arc::clone(&op), Arc::clone(&nodes[i]));
        nodes[i].begin();
        let job = nodes[i].submit(Box::new(move |session| {
            let result = op(i, session);
            node.finish(&result);
            // The round may have been decided already: nobody listens then,
            // or only `settle` will.
            let _ = tx.send(answered(i, result, start));
        }));
        jobs.push((i, job));
    }
    drop(tx);
    let mut replies = Vec::with_capacity(which.len());
    while replies.len() < which.len() {
        let Some(deadline) = until(&replies) else {
            break;
        };
        match rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            Ok(r) => replies.push(r),
            Err(mpsc::RecvTimeoutError::Timeout) if Instant::now() < deadline => {}
            Err(_) => break,
        }
    }
    (replies, Late(Some(rx)), jobs)
}

/// `fan_out` from this thread (see `node::polled`): every node's request
/// goes out at once, and replies are taken as they come until `until` says
/// stop. With `grace`, the nodes still due are listened to for as long
/// again as the round took (a healthy node's answer is a moment behind the
/// quorum's); whatever is still under way then goes on on its node's
/// worker, and its reply to the round's late replies.
fn drive<T, F, U>(
    mut held: Vec<polled::Held<'_>>,
    op: Arc<F>,
    mut until: U,
    start: Instant,
    grace: bool,
) -> (Vec<Reply<T>>, Late<T>, Jobs)
where
    T: Send + 'static,
    F: Fn(usize, &mut Session) -> Result<T, NodeError> + Send + Sync + 'static,
    U: FnMut(&[Reply<T>]) -> Option<Instant>,
{
    let op: Arc<polled::Op<T>> = op;
    let mut replies = Vec::with_capacity(held.len());
    let mut late = Vec::new();
    for h in held.iter_mut() {
        if let polled::Step::Answered(r) = h.start(&*op) {
            replies.push(answered(h.index, r, start));
        }
    }
    let mut stop: Option<Instant> = None;
    loop {
        let deadline = match stop {
            Some(t) => Some(t),
            None => match until(&replies) {
                Some(t) => Some(t),
                // As long again as the verdict took: the acquire's wait
                // for a second name of one server (see `Lock::acquire`).
                None if grace => {
                    let now = Instant::now();
                    stop = Some(now + (now - start));
                    stop
                }
                None => None,
            },
        };
        let Some(deadline) = deadline else { break };
        let mut fds = Vec::with_capacity(held.len());
        let mut polled_nodes = Vec::with_capacity(held.len());
        let mut wake = deadline;
        for (k, h) in held.iter_mut().enumerate() {
            if let Some((fd, events, due)) = h.poll_for() {
                fds.push(libc::pollfd {
                    fd,
                    events,
                    revents: 0,
                });
                polled_nodes.push(k);
                wake = wake.min(due);
            }
        }
        let now = Instant::now();
        if fds.is_empty() || now >= deadline {
            break;
        }
        polled::wait(&mut fds, wake);
        let now = Instant::now();
        for (fd, k) in fds.iter().zip(polled_nodes) {
            let h = &mut held[k];
            let due = h.poll_for().map_or(now, |(_, _, due)| due);
            if fd.revents == 0 && now < due {
                continue;
            }
            if let polled::Step::Answered(r) = h.progress(&*op, now) {
                let reply = answered(h.index, r, start);
                match stop {
                    None => replies.push(reply),
                    Some(_) => late.push(reply),
                }
            }
        }
    }
    let (tx, rx) = mpsc::channel();
    for reply in late {
        let _ = tx.send(reply);
    }
    let mut jobs = Vec::with_capacity(held.len());
    for h in held.iter_mut() {
        let (tx, i) = (tx.clone(), h.index);
        let job = h.hand_off(Arc::clone(&op), move |result| {
            let _ = tx.send(answered(i, result, start));
        });
        jobs.push((i, job));
    }
    (replies, Late(Some(rx)), jobs)
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
pub struct Round<T = Answer> {
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
    pub fn maybe_ours(&self, n: usize) -> Vec<usize> {
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
    pub fn settle(&mut self) -> &[Reply<T>] {
        let before = self.replies.len();
        if let Some(rx) = &self.late.0 {
            self.replies.extend(rx.try_iter());
        }
        &self.replies[before..]
    }

    /// Waits for the replies still due from nodes that are neither overdue
    /// nor timed out, as long as they are not overdue: a round that failed
    /// can afford a moment, for an error message that names what each node
    /// really did and an undo that knows where the SET landed.
    pub fn linger(&mut self, nodes: &[Arc<Node>]) {
        self.linger_until(nodes, self.deadline);
    }

    /// `linger`, waiting no later than `cap`.
    pub fn linger_until(&mut self, nodes: &[Arc<Node>], cap: Instant) {
        let Some(rx) = &self.late.0 else {
            return;
        };
        let cap = cap.min(self.deadline);
        loop {
            let now = Instant::now();
            let due = (0..nodes.len())
                .filter(|i| !self.skipped.contains(i) && !self.replies.iter().any(|r| r.node == *i))
                .filter(|&i| !nodes[i].timed_out())
                .filter_map(|i| nodes[i].waiting_since())
                .map(|since| overdue_at(since).map_or(cap, |t| t.min(cap)))
                .filter(|t| *t > now)
                .max();
            let Some(until) = due else {
                break;
            };
            match rx.recv_timeout(until.saturating_duration_since(now)) {
                Ok(r) => self.replies.push(r),
                Err(mpsc::RecvTimeoutError::Timeout) => {}
                Err(_) => break,
            }
        }
        self.replies.extend(rx.try_iter());
    }

    /// The reply of node `i`, if it has come.
    pub fn reply_of(&self, i: usize) -> Option<&Reply<T>> {
        self.replies.iter().find(|r| r.node == i)
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
    let skipped: Vec<usize> = all
        .iter()
        .copied()
        .filter(|&i| overdue(&nodes[i], start))
        .collect();
    // When the verdict became certain: a polled round listens a moment
    // longer for the nodes still due (see `drive`), which is no part of it.
    let decided = std::cell::Cell::new(None);
    let (replies, late, _) = fan_out(
        nodes,
        &all,
        move |_, s| op(s),
        |r| {
            let open = tally(n, r, &skipped).verdict().is_none();
            if !open && decided.get().is_none() {
                decided.set(Some(Instant::now()));
            }
            open.then_some(start + limit)
        },
        true,
    );
    let decided_at = decided.get().unwrap_or_else(Instant::now);
    let elapsed = decided_at - start;
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
        elapsed,
        tally,
        replies,
        skipped,
        decided_at,
        deadline: start + limit,
        late,
    }
}

/// Runs `op` on the nodes listed in `which`, waiting for their replies
/// (bounded by `limit`), except from nodes that timed out earlier in this run
/// or are overdue, and from busy ones only until they would be overdue (see
/// the module's documentation). Every node listed gets the request. Replies
/// carry indexes into `nodes`.
pub fn on_each<T, F>(nodes: &[Arc<Node>], which: &[usize], op: F, limit: Duration) -> Vec<Reply<T>>
where
    T: Send + 'static,
    F: Fn(&mut Session) -> Result<T, NodeError> + Send + Sync + 'static,
{
    on_each_indexed(nodes, which, move |_, s| op(s), limit)
}

/// `on_each` with a request that depends on the node: `op` is given the
/// node's index into `nodes`.
pub fn on_each_indexed<T, F>(
    nodes: &[Arc<Node>],
    which: &[usize],
    op: F,
    limit: Duration,
) -> Vec<Reply<T>>
where
    T: Send + 'static,
    F: Fn(usize, &mut Session) -> Result<T, NodeError> + Send + Sync + 'static,
{
    on_each_behind(nodes, which, op, |_| None, limit)
}

/// `on_each_indexed` for the requests that must reach a node even when it
/// is not waited for: the end of a run, the undo of a failed attempt. A node
/// that has not answered when the waiting ends gets `behind(i)`, the same
/// request as bytes, written behind whatever it has in flight, at once (see
/// `Node::write_behind`); queued on its worker, the request would wait there
/// for the unanswered one and die with the process. So a node stopped while
/// it had our acquire applies the acquire and then its release when it
/// resumes, and holds no copy of a finished run's lock.
pub fn on_each_behind<T, F, B>(
    nodes: &[Arc<Node>],
    which: &[usize],
    op: F,
    behind: B,
    limit: Duration,
) -> Vec<Reply<T>>
where
    T: Send + 'static,
    F: Fn(usize, &mut Session) -> Result<T, NodeError> + Send + Sync + 'static,
    B: Fn(usize) -> Option<Vec<u8>>,
{
    let start = Instant::now();
    // Per node: wait for its reply until this moment (None: do not wait).
    let wait: Vec<(usize, Option<Instant>)> = which
        .iter()
        .map(|&i| {
            let node = &nodes[i];
            let until = if node.timed_out() {
                None
            } else {
                match node.waiting_since() {
                    None => Some(start + limit),
                    Some(since) => {
                        overdue_at(since).map_or(Some(start + limit), |t| (t > start).then_some(t))
                    }
                }
            };
            (i, until.map(|t| t.min(start + limit)))
        })
        .collect();
    let (mut replies, late, jobs) = fan_out(
        nodes,
        which,
        op,
        |r| {
            wait.iter()
                .filter(|(i, _)| !r.iter().any(|x| x.node == *i))
                .filter_map(|(_, until)| *until)
                .filter(|t| *t > Instant::now())
                .max()
        },
        false,
    );
    // Whatever the others have answered by now is worth reporting.
    if let Some(rx) = &late.0 {
        replies.extend(rx.try_iter());
    }
    for (i, job) in jobs {
        if !replies.iter().any(|r| r.node == i)
            && let Some(bytes) = behind(i)
        {
            nodes[i].write_behind(job, &bytes);
        }
    }
    replies
}
