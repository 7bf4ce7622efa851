//! The lock across all nodes: acquire, extend and release rounds, with the
//! Redlock rules from `redlock` applied to what the nodes answered.
//!
//! # The --wait queue, by the nodes' clocks
//!
//! A waiter's first try queues it on every node, scored by that node's own
//! `TIME` (never the waiter's clock, which may be anything). Those scores
//! come back in the answers, and from a quorum of them the waiter takes one
//! *ticket*, their median (the lower one of an even count). Every later try
//! renews its place with that ticket, on every node, so after one renewal
//! each node scores it the same (ties go to the smaller token: a sorted set
//! orders equal scores by member).
//!
//! Order. A waiter whose first try reached every node before another's did
//! has the smaller score on each, hence the smaller median: the arrival order
//! the nodes saw. One node of three whose clock is off, by any amount, is
//! outvoted by the median, and the waiters' own clocks play no part.
//!
//! Liveness. Per-node arrival times alone would not do: tries interleave in
//! different orders on different nodes, and with three waiters on three
//! nodes each node could put a different waiter first; renewals would keep it
//! so, and no waiter would ever be at the front of a quorum. With tickets
//! that cannot last. Within one renewal (`PLACE_RENEW` in `run`) of its
//! first try, every live waiter's place has one score on every node that has
//! it, so all nodes agree on the order of the live waiters. The one with the
//! smallest ticket, H, is then at the front of the queue on every node that
//! holds the queue, and a node that lost it (restarted empty) gets H's place
//! back with H's next renewal, with the same ticket, still ahead of every
//! other. So H passes the queue's gate on every node and, once the lock is
//! free (its release wakes H), takes it as a lone contender would. A waiter
//! that arrives later queues behind H in the same frame: nobody overtakes
//! for ever. If H dies, its place lapses `PLACE_LAPSE` after its last
//! renewal; the waiters behind it were told how soon that is (the earliest
//! lapse ahead of them, `Busy::lapse_ahead`, by the nodes' own clocks) and
//! look again at that moment, so a dead waiter costs the queue its lapse and
//! a few milliseconds. Only between a waiter's first try and its first
//! renewal (one round trip) can its places disagree across nodes, which costs
//! at most one split round.

pub(crate) mod end;
pub mod keys;
pub mod node;
pub(crate) mod quorum;
pub mod record;
pub mod redlock;
pub(crate) mod refused;

use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::atomic::{AtomicBool, AtomicUsize};
use std::time::Duration;

use crate::clock::{self, Stamp};

use rand::TryRng;
use rand::rngs::SysRng;
use rand::seq::SliceRandom;

use crate::log::{Log, ev};
use keys::Keys;
use node::{Extension, Granted, KeySet, Nodes, Queue, Refusal, Released};
use quorum::{Reply, Round};
use redlock::{Answer, Verdict, Vote};
use refused::Step;

/// How long a waiter's place in the queue lasts unless renewed: a waiter that
/// died holds up the queue this long at most.
pub const PLACE_LAPSE: Duration = Duration::from_secs(3);

pub struct Lock {
    nodes: Nodes,
    keys: Keys,
    /// The keys each request touches: the lock's, or with --limit N those of
    /// each of the N slots, each a lock of its own.
    slots: Vec<Arc<KeySet>>,
    /// The slot taken by the last successful acquire.
    held: AtomicUsize,
    /// Fields of the holder record written beside the lock (`<key>:holder`).
    record: Arc<[(&'static str, String)]>,
    /// --fence: hand out a fencing token with the lock.
    fence: bool,
    /// The last acquire round, kept so that replies that came after its
    /// verdict still count in the report and the release.
    last_round: Mutex<Option<Round<Granted>>>,
    /// Nodes where our token may be (not refused at the acquire, or taken
    /// back since): the ones a release goes to.
    may_hold: Vec<AtomicBool>,
    /// Nodes whose restart under the hold was said (once each).
    restart_told: Vec<AtomicBool>,
    /// A queued waiter's ticket: its place's score on every node (see the
    /// module's documentation), once a quorum has scored its first try.
    ticket: Mutex<Option<u64>>,
    /// Set once the waiting is over: the release watchers stop.
    watched: Arc<AtomicBool>,
    /// What nodes refused of the lock's upkeep (see `refused`).
    refusals: Mutex<Vec<refused::Refusal>>,
    /// The last extension round, for the replies that come after its
    /// verdict (see `refused::Kept`).
    extending: Mutex<Option<Round<Extension>>>,
    token: Arc<str>,
    ttl: Duration,
    node_timeout: Duration,
}

/// What a run takes: the lock itself (a writer; with --fence a fencing
/// token too), one of N slots (--limit N), or a reader's share (--shared).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Taking {
    Lock { fence: bool },
    Slot(u32),
    Share,
}

/// The lock, once taken.
pub struct Held {
    /// When the acquire round started: the heartbeat's schedule starts here.
    pub(crate) since: Stamp,
    /// The validity deadline, unless extended.
    pub(crate) deadline: Stamp,
    /// With --fence: greater than every earlier holder's.
    pub fence: Option<u64>,
}

/// How an acquire round ended.
pub enum Acquired {
    Yes(Held),
    Busy(Busy),
    /// Why the quorum could not be reached, one clause per failed node.
    Unavailable(String),
    /// Two nodes answered from one server (see `Lock::same_voter`): a usage
    /// error, worded. Undone on every node.
    SameServer(String),
    /// --fence: the counter is at `FENCE_MAX`, so no token above it can be
    /// handed out, now or on any later try. Released on every node.
    FenceExhausted,
}

/// The largest fencing token: Redis integers are signed 64-bit, so a counter
/// above it could not be INCRed or compared as one by anyone else's tooling.
pub(crate) const FENCE_MAX: u64 = i64::MAX as u64;

/// Why the second phase of --fence handed out no token.
enum Unfenced {
    /// The counter is at `FENCE_MAX` (see `next_fence`).
    Exhausted,
    /// Not recorded on a quorum in time: worded for the log.
    Unrecorded(String),
}

/// The token after the largest counter a quorum read: `None` at the top of
/// the range, where handing out a token would mean one that is not above
/// the counter (or above what Redis can hold as an integer).
fn next_fence(counters: impl IntoIterator<Item = u64>) -> Option<u64> {
    let max = counters.into_iter().max().unwrap_or(0);
    max.checked_add(1).filter(|t| *t <= FENCE_MAX)
}

/// Why the lock was busy, as the refusing nodes said.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Busy {
    /// `Refusal::Limit` is no "busy" at all but a conflict: runs with
    /// another --limit hold the name.
    pub(crate) why: Refusal,
    /// How soon the earliest place ahead of ours in the queue lapses unless
    /// renewed, as a quorum of the nodes counts it: a waiter need not sleep
    /// past it, since that place may be a dead waiter's.
    pub lapse_ahead: Option<Duration>,
    /// Nodes that sat the try out (restarted within their grace), each as
    /// its error says it: without them no quorum could be had.
    pub sitting_out: Vec<String>,
    /// How soon the first of them counts again: a waiter tries then.
    pub back_in: Option<Duration>,
}

impl Busy {
    /// Held by another token, with nothing more known.
    pub(crate) fn held() -> Busy {
        Busy {
            why: Refusal::Held,
            lapse_ahead: None,
            sitting_out: Vec::new(),
            back_in: None,
        }
    }
}

/// How an extension round ended.
pub(crate) enum Extended {
    Yes {
        deadline: Stamp,
    },
    /// Not this time; retry while the old deadline allows.
    Failed(String),
    /// A quorum no longer holds our token: nothing can win it back.
    Gone,
}

impl Lock {
    pub fn new(
        nodes: Nodes,
        keys: Keys,
        ttl: Duration,
        node_timeout: Duration,
        record: Vec<(&'static str, String)>,
        taking: Taking,
    ) -> std::io::Result<Lock> {
        let token = new_token()?;
        let (fence, shared) = (
            taking == Taking::Lock { fence: true },
            taking == Taking::Share,
        );
        let limit = match taking {
            Taking::Slot(n) => Some(n),
            _ => None,
        };
        Ok(Lock {
            may_hold: nodes.iter().map(|_| AtomicBool::new(false)).collect(),
            restart_told: nodes.iter().map(|_| AtomicBool::new(false)).collect(),
            nodes,
            slots: match limit {
                None if shared => vec![Arc::new(KeySet {
                    shared: true,
                    ..key_set(&keys, None, None)
                })],
                None => vec![Arc::new(key_set(&keys, None, None))],
                Some(n) => (0..n)
                    .map(|i| Arc::new(key_set(&keys, Some(i), Some(n))))
                    .collect(),
            },
            keys,
            ticket: Mutex::new(None),
            watched: Arc::new(AtomicBool::new(false)),
            refusals: Mutex::new(Vec::new()),
            extending: Mutex::new(None),
            held: AtomicUsize::new(0),
            record: record.into(),
            fence,
            last_round: Mutex::new(None),
            // A reader's token starts with `r` (hex digits never do): the
            // queue tells readers from writers by it (see `scripts`).
            token: if shared { format!("r{token}") } else { token }.into(),
            ttl,
            node_timeout,
        })
    }

    /// The keys of the lock (or slot) held.
    fn key_set(&self) -> Arc<KeySet> {
        Arc::clone(&self.slots[self.held.load(Relaxed)])
    }

    /// With --limit: which slot is held.
    pub(crate) fn slot(&self) -> usize {
        self.held.load(Relaxed)
    }

    pub(crate) fn token(&self) -> &str {
        &self.token
    }

    /// Every node's answer to the last acquire round, with the replies that
    /// came after its verdict, and how each node fared in the run.
    pub fn outcomes(&self, log: &Log) -> Vec<NodeOutcome> {
        let mut last = self.last_round.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(round) = last.as_mut() {
            let late = round.settle(&self.nodes);
            for r in late {
                self.log_reply("acquire", r, log, " (after the verdict)");
            }
            self.note_holds(round);
        }
        (0..self.nodes.len())
            .map(|i| {
                let acquire = match last.as_ref().and_then(|r| r.reply_of(i)) {
                    None => NodeVote::NoAnswer,
                    Some(r) => match &r.result {
                        Ok(g) if g.answer == Answer::Granted => NodeVote::Granted,
                        Ok(_) => NodeVote::Refused,
                        Err(e) => NodeVote::Error(e.to_string()),
                    },
                };
                NodeOutcome {
                    name: self.nodes[i].name().to_string(),
                    acquire,
                    fared: self.nodes[i].fared(),
                    recovered: self.nodes[i].recovered(),
                    refused: self.refusals(i),
                }
            })
            .collect()
    }

    /// Two nodes that are one server (see `node::same_server`), worded.
    pub(crate) fn same_server(&self) -> Option<String> {
        self.nodes.same_server()
    }

    /// Whether a quorum of nodes agreed in the last acquire round (granted,
    /// or refused): only then did the quorum do without the others. A split
    /// (one granted, one refused, one silent of three) reached none.
    pub(crate) fn quorum_agreed(&self) -> bool {
        let last = self.last_round.lock().unwrap_or_else(|p| p.into_inner());
        let q = redlock::quorum(self.nodes.len());
        last.as_ref()
            .is_some_and(|r| r.tally.granted() >= q || r.tally.refused() >= q)
    }

    /// Whether an acquire round was sent: only then did the run reach the
    /// nodes, and their outcomes say how they fared.
    pub(crate) fn tried(&self) -> bool {
        self.last_round
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_some()
    }

    /// Nodes that failed, or have not answered, the last acquire round.
    pub(crate) fn failed_nodes(&self) -> Vec<String> {
        let mut last = self.last_round.lock().unwrap_or_else(|p| p.into_inner());
        let Some(round) = last.as_mut() else {
            return Vec::new();
        };
        round.settle(&self.nodes);
        (0..self.nodes.len())
            .filter(|&i| {
                round.skipped.contains(&i) || round.reply_of(i).is_none_or(|r| r.result.is_err())
            })
            .map(|i| self.nodes[i].name().to_string())
            .collect()
    }

    /// Records where the round may have left our token.
    fn note_holds(&self, round: &Round<Granted>) {
        for i in round.maybe_ours(self.nodes.len()) {
            self.may_hold[i].store(true, Relaxed);
        }
    }

    fn round_limit(&self) -> Duration {
        redlock::round_limit(self.node_timeout)
    }

    /// Tries the slots in random order (there is one without --limit) until
    /// one is taken. Busy only when every slot is.
    pub fn acquire(&self, queue: &Queue, log: &Log) -> Acquired {
        let mut order: Vec<usize> = (0..self.slots.len()).collect();
        // One slot (no --limit) needs no shuffle, nor the thread's generator
        // seeded for it (its CPU feature check is slow in a VM).
        if order.len() > 1 {
            order.shuffle(&mut rand::rng());
        }
        let mut busy: Option<Busy> = None;
        for slot in order {
            self.held.store(slot, Relaxed);
            match self.acquire_slot(queue, log) {
                // Another --limit holds the name: no other slot will do.
                Acquired::Busy(b) if matches!(b.why, Refusal::Limit(_)) => {
                    return Acquired::Busy(b);
                }
                Acquired::Busy(b) => {
                    busy = Some(match busy {
                        None => b,
                        Some(was) => Busy {
                            // Every slot shares the queue: a single try
                            // turned away by it says so.
                            why: if matches!(was.why, Refusal::Queued(_)) {
                                was.why
                            } else {
                                b.why
                            },
                            lapse_ahead: earliest(was.lapse_ahead, b.lapse_ahead),
                            back_in: earliest(was.back_in, b.back_in),
                            sitting_out: if b.sitting_out.is_empty() {
                                was.sitting_out
                            } else {
                                b.sitting_out
                            },
                        },
                    });
                }
                other => return other,
            }
        }
        Acquired::Busy(busy.unwrap_or_else(Busy::held))
    }

    fn acquire_slot(&self, queue: &Queue, log: &Log) -> Acquired {
        let t0 = clock::now();
        let (key_set, token, ttl) = (self.key_set(), Arc::clone(&self.token), self.ttl);
        // When it was taken, for `status`: stamped per attempt, since --wait
        // may try for a long time.
        let mut rec = self.record.to_vec();
        rec.push(("acquired_ms", unix_ms().to_string()));
        let (fence, place) = (self.fence, self.with_ticket(queue));
        let first_try = matches!(place, Queue::Join { ticket: None, .. });
        let mut round = quorum::decide(
            &self.nodes,
            node::Acquire {
                key_set,
                token,
                ttl,
                record: rec,
                fence,
                queue: place,
            },
            self.round_limit(),
        );
        if round.verdict == Verdict::Unavailable {
            round.linger(&self.nodes);
        }
        // Two grants from one server must not make a quorum (see
        // `same_voter`). Each vote on redlock-run's own connection comes with
        // its server's run_id, read ahead of it, so the votes that made the
        // verdict are checked as they are. The nodes not heard from yet get
        // as long again as the quorum took, so that a second name of a
        // server whose first name granted is heard too in a healthy round
        // (its answer is a moment behind), while a stopped node costs one
        // quorum's time, not its whole overdue time. A quorum that refused
        // waits as long too: a node a moment behind it is not named as
        // silent in a busy run's warning.
        if matches!(round.verdict, Verdict::Quorum | Verdict::Refused) && self.nodes.len() > 1 {
            // The round has listened that long already (see
            // `quorum::fan_out`).
            let cap = round.decided_at + round.elapsed;
            round.linger_until(&self.nodes, cap);
        }
        if let Some(msg) = self.same_voter(&round) {
            self.log_round("acquire", &round, log);
            *self.last_round.lock().unwrap_or_else(|p| p.into_inner()) = Some(round);
            self.release_on(&(0..self.nodes.len()).collect::<Vec<_>>(), false, log);
            return Acquired::SameServer(msg);
        }
        if first_try && round.verdict != Verdict::Quorum {
            self.take_ticket(&mut round);
        }
        self.log_round("acquire", &round, log);
        let outcome = self.judge(&round, t0, log);
        let verdict = round.verdict;
        if verdict == Verdict::Quorum {
            self.note_holds(&round);
        }
        let maybe_ours = round.maybe_ours(self.nodes.len());
        *self.last_round.lock().unwrap_or_else(|p| p.into_inner()) = Some(round);
        match outcome {
            Judged::Held(held) => {
                self.undo_uncounted(log);
                if matches!(queue, Queue::Join { .. }) {
                    self.forget_place(&maybe_ours);
                }
                if !self.fence {
                    return Acquired::Yes(held);
                }
                match self.commit_fence(held.deadline, log) {
                    Ok(t) => Acquired::Yes(Held {
                        fence: Some(t),
                        ..held
                    }),
                    Err(why) => {
                        // Held, but without a token to show for it: give it
                        // back for real (waiters may go ahead).
                        self.release(log);
                        match why {
                            Unfenced::Exhausted => Acquired::FenceExhausted,
                            Unfenced::Unrecorded(why) => Acquired::Unavailable(why),
                        }
                    }
                }
            }
            Judged::Not(outcome) => {
                // Not ours after all: undo wherever our SET may have landed,
                // including nodes whose reply we never saw. Quietly: nothing
                // was released.
                self.release_on(&maybe_ours, false, log);
                outcome
            }
        }
    }

    /// Two nodes of `round` that answered from one server: the same `run_id`
    /// read on redlock-run's own connection ahead of each answer. Such a
    /// server, reached under two addresses of its own or through a proxy,
    /// escapes `node::same_server`, which compares the addresses named.
    /// Always seen when the two make the quorum; when distinct servers made
    /// it first (each granted once, which is sound), only if the second name
    /// has answered by then. A Cluster tells no run_id here (INFO would
    /// describe whichever master answers): for it, only the addresses count.
    fn same_voter(&self, round: &Round<Granted>) -> Option<String> {
        let mut seen: Vec<(usize, u64)> = round
            .replies
            .iter()
            .filter(|r| r.result.is_ok())
            .filter_map(|r| Some((r.node, r.server?)))
            .collect();
        seen.sort_unstable();
        seen.iter().enumerate().find_map(|(k, (i, id))| {
            let (j, _) = seen[k + 1..].iter().find(|(_, other)| other == id)?;
            Some(format!(
                "{} and {} are the same server (both report one run_id): each server counts \
                 once in the quorum, give each node once",
                self.nodes[*i].name(),
                self.nodes[*j].name()
            ))
        })
    }

    /// The queue as this attempt sends it: a waiter that has a ticket renews
    /// its place with it.
    fn with_ticket(&self, queue: &Queue) -> Queue {
        match queue {
            Queue::Join {
                ticket: None,
                lapse,
            } => Queue::Join {
                ticket: *self.ticket.lock().unwrap_or_else(|p| p.into_inner()),
                lapse: *lapse,
            },
            other => other.clone(),
        }
    }

    /// A waiter's ticket, from the places a quorum of nodes gave its first
    /// try: the median (the lower one of an even count), so that a node whose
    /// clock is off cannot move it (see the module's documentation).
    fn take_ticket(&self, round: &mut Round<Granted>) {
        let mut ticket = self.ticket.lock().unwrap_or_else(|p| p.into_inner());
        if ticket.is_some() {
            return;
        }
        // Every node that is answering: the median of three is what makes
        // one skewed clock harmless.
        round.linger(&self.nodes);
        let mut places: Vec<u64> = round
            .replies
            .iter()
            .filter_map(|r| r.result.as_ref().ok().and_then(|g| g.place))
            .collect();
        if places.len() < redlock::quorum(self.nodes.len()) {
            return;
        }
        places.sort_unstable();
        *ticket = Some(places[(places.len() - 1) / 2]);
    }

    /// A queued waiter that took the lock leaves the queue where it was
    /// granted; on the nodes that did not grant it (`granted` lists the
    /// others) its place would stay at the front, refusing the next waiter
    /// there until it lapsed. Sent without waiting for the answers: the
    /// command need not wait for this.
    fn forget_place(&self, granted: &[usize]) {
        let others: Vec<usize> = (0..self.nodes.len())
            .filter(|i| !granted.contains(i))
            .collect();
        quorum::send(
            &self.nodes,
            &others,
            node::Leave {
                key_set: self.key_set(),
                token: Arc::clone(&self.token),
                wake: false,
            },
        );
    }

    /// A node whose grant did not count (its replicas did not acknowledge
    /// it, --replicas; it sits out its restart grace; --durable and not on
    /// its disk), even when a quorum did without it: its copy, which it may
    /// lose, is taken back (an extension may set it again, counted).
    fn undo_uncounted(&self, log: &Log) {
        let which: Vec<usize> = self
            .last_round
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .flat_map(|round| &round.replies)
            .filter(|r| r.result.as_ref().is_err_and(|e| e.is_uncounted()))
            .map(|r| r.node)
            .collect();
        self.release_on(&which, false, log);
    }

    /// What an acquire round's verdict means for us.
    fn judge(&self, round: &Round<Granted>, t0: Stamp, log: &Log) -> Judged {
        let n = self.nodes.len();
        match round.verdict {
            Verdict::Quorum => match redlock::validity(self.ttl, round.elapsed) {
                Some(v) => {
                    log.info(|| {
                        let waiting = n - round.replies.len();
                        // Every grant heard so far, the ones that came after
                        // the verdict too: the count agrees with the lines
                        // above it.
                        let granted = round
                            .replies
                            .iter()
                            .filter(|r| matches!(&r.result, Ok(g) if g.answer == Answer::Granted))
                            .count();
                        ev(
                            "acquired",
                            format!(
                                "acquired: {granted} of {n} nodes granted, a quorum within \
                                 {:.1?} (quorum {}{}); valid for {v:.0?}",
                                round.elapsed,
                                redlock::quorum(n),
                                if waiting > 0 {
                                    format!(", {waiting} not heard from yet")
                                } else {
                                    String::new()
                                }
                            ),
                        )
                        .ms(round.elapsed)
                        .outcome("acquired")
                    });
                    self.warn_sitting_out(round, log);
                    Judged::Held(Held {
                        since: t0,
                        deadline: t0 + self.ttl - redlock::drift(self.ttl),
                        fence: None,
                    })
                }
                None => Judged::Not(Acquired::Unavailable(format!(
                    "a quorum granted the lock only after {:.0?}, too late for --ttl {}",
                    round.elapsed,
                    humantime::format_duration(self.ttl)
                ))),
            },
            Verdict::Refused => Judged::Not(Acquired::Busy(busy_of(round, n))),
            Verdict::Unavailable => match sitting_out(round, n) {
                Some(busy) => Judged::Not(Acquired::Busy(busy)),
                None => Judged::Not(Acquired::Unavailable(self.short_of(round))),
            },
        }
    }

    /// One warning per node whose grant did not count, in a round that
    /// took the lock without it: it started less than the restart grace
    /// ago (its error says when, and when it counts again). Said once, here,
    /// while those times are true; -q silences it.
    fn warn_sitting_out(&self, round: &Round<Granted>, log: &Log) {
        for r in &round.replies {
            let Err(e) = &r.result else { continue };
            if e.restarted().is_some() {
                let name = self.nodes[r.node].name();
                log.notice(
                    ev(
                        "restarted",
                        format!("warning: {e} (the quorum did without it)"),
                    )
                    .node(name)
                    .outcome("sitting-out"),
                );
            }
        }
    }

    /// The second phase of --fence. The acquire round read the counter on
    /// every node that granted (a quorum); t = max + 1 is written back on
    /// those nodes, each only while it still holds our token, and must land
    /// on a quorum. Any later holder's quorum shares a node with this one,
    /// where it will read at least t.
    fn commit_fence(&self, deadline: Stamp, log: &Log) -> Result<u64, Unfenced> {
        let granted: Vec<(usize, u64)> = self
            .last_round
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .flat_map(|round| &round.replies)
            .filter_map(|r| match &r.result {
                Ok(Granted {
                    answer: Answer::Granted,
                    fence: Some(c),
                    ..
                }) => Some((r.node, *c)),
                _ => None,
            })
            .collect();
        let t = next_fence(granted.iter().map(|(_, c)| *c)).ok_or(Unfenced::Exhausted)?;
        let which: Vec<usize> = granted.iter().map(|(i, _)| *i).collect();
        let (key_set, token) = (self.key_set(), Arc::clone(&self.token));
        let replies = quorum::on_each(
            &self.nodes,
            &which,
            node::CommitFence { key_set, token, t },
            self.round_limit(),
        );
        let committed = replies
            .iter()
            .filter(|r| matches!(r.result, Ok(Answer::Granted)))
            .count();
        log.info(|| {
            ev(
                "fence",
                format!(
                    "fencing token {t} recorded on {committed}/{} nodes",
                    self.nodes.len()
                ),
            )
            .outcome(if committed >= redlock::quorum(self.nodes.len()) {
                "committed"
            } else {
                // Not "failed": in the JSON log that word is the run's.
                "error"
            })
        });
        if committed < redlock::quorum(self.nodes.len()) {
            return Err(Unfenced::Unrecorded(format!(
                "the fencing token was recorded on only {committed} of {} nodes",
                self.nodes.len()
            )));
        }
        if clock::now() >= deadline {
            return Err(Unfenced::Unrecorded(
                "recording the fencing token took the whole TTL".into(),
            ));
        }
        Ok(t)
    }

    /// One heartbeat: compare-and-PEXPIRE on every node. Once a quorum has
    /// extended, nodes that lost the key (restarted empty, expired early) get
    /// it back with SET NX, within the validity just won: a forced unlock,
    /// which deletes the key everywhere, leaves no quorum to re-take from.
    pub(crate) fn extend(&self, log: &Log) -> Extended {
        let t0 = clock::now();
        let (key_set, token, ttl) = (self.key_set(), Arc::clone(&self.token), self.ttl);
        let round = quorum::decide(
            &self.nodes,
            node::Extend {
                key_set,
                token,
                ttl,
            },
            self.round_limit(),
        );
        self.log_round("extend", &round, log);
        // Kept past its verdict: a refusal that comes later is said too.
        let round = self.kept(round, log);
        if round.verdict == Verdict::Quorum && redlock::validity(self.ttl, round.elapsed).is_some()
        {
            let lost: Vec<usize> = round
                .replies
                .iter()
                .filter(|r| matches!(r.result, Ok(Extension::Absent)))
                .map(|r| r.node)
                .collect();
            // A node that lost the key by a restart is not given it back
            // while its vote would not count (see `Node::sitting_out`).
            let mut retake = Vec::new();
            for i in lost {
                let node = &self.nodes[i];
                match node.sitting_out() {
                    None => retake.push(i),
                    Some(_) if self.restart_told[i].swap(true, Relaxed) => {}
                    Some(e) => log.notice(
                        ev(
                            "restarted",
                            format!(
                                "warning: {e}; it lost the lock's key, which it is not given \
                                 back before then"
                            ),
                        )
                        .node(node.name())
                        .outcome("sitting-out"),
                    ),
                }
            }
            let lost = retake;
            if !lost.is_empty() {
                self.retake(&lost, log);
            }
            return Extended::Yes {
                deadline: t0 + self.ttl - redlock::drift(self.ttl),
            };
        }
        if round.tally.quorum_refused() {
            return Extended::Gone;
        }
        Extended::Failed(format!(
            "extended on {}/{} nodes in {:.0?}: {}",
            round.tally.granted(),
            self.nodes.len(),
            round.elapsed,
            self.failures(&*round)
        ))
    }

    fn retake(&self, which: &[usize], log: &Log) {
        let (key_set, token, ttl) = (self.key_set(), Arc::clone(&self.token), self.ttl);
        let record = Arc::clone(&self.record);
        let replies = quorum::on_each(
            &self.nodes,
            which,
            node::Retake {
                key_set,
                token,
                ttl,
                record,
            },
            self.round_limit(),
        );
        for r in &replies {
            let landed = match &r.result {
                Ok(took) => *took,
                Err(e) => e.maybe_applied(),
            };
            if landed {
                self.may_hold[r.node].store(true, Relaxed);
            }
            let name = self.nodes[r.node].name();
            let outcome = match &r.result {
                Ok(true) => "retaken",
                Ok(false) => "taken-by-another",
                Err(_) => "error",
            };
            log.info(|| {
                ev(
                    "retake",
                    format!(
                        "{name} had lost the key: {}",
                        match &r.result {
                            Ok(true) => "taken back".to_string(),
                            Ok(false) => "another token holds it now".to_string(),
                            Err(e) => format!("not taken back: {e}"),
                        }
                    ),
                )
                .node(name)
                .outcome(outcome)
            });
        }
    }

    /// Compare-and-delete on every node where our token may be.
    pub fn release(&self, log: &Log) {
        self.release_on(&self.holding(), true, log);
    }

    /// Nodes where our token may be, the replies that came in after the
    /// acquire's verdict included.
    fn holding(&self) -> Vec<usize> {
        let mut last = self.last_round.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(round) = last.as_mut() {
            round.settle(&self.nodes);
            self.note_holds(round);
        }
        (0..self.nodes.len())
            .filter(|&i| self.may_hold[i].load(Relaxed))
            .collect()
    }

    fn log_holds(&self, replies: &[Reply<Answer>], left: Duration, log: &Log) {
        for r in replies {
            let name = self.nodes[r.node].name();
            match &r.result {
                Ok(Answer::Granted) => log.debug(|| {
                    ev("hold", format!("{name}: held for {left:.0?} more"))
                        .node(name)
                        .outcome("held")
                }),
                Ok(_) => log.debug(|| format!("{name}: not ours to hold")),
                Err(e) => log.info(|| {
                    format!("cannot shorten the hold, the key expires within the TTL: {e}")
                }),
            }
        }
    }

    /// Sets the marker of the --once-per window starting at `start` (NX,
    /// expiring after `ttl`) on all nodes. `Quorum`: this run is the window's
    /// first; `Refused`: the window already had its run. Unless `Quorum`, our
    /// markers are taken back at once (see `unmark_once`).
    pub(crate) fn mark_once(&self, start: u64, ttl: Duration, log: &Log) -> Verdict {
        let (marker, token) = (self.keys.once(start), Arc::clone(&self.token));
        let round = quorum::decide(
            &self.nodes,
            node::Mark { marker, token, ttl },
            self.round_limit(),
        );
        self.log_round("once-per marker", &round, log);
        if round.verdict != Verdict::Quorum {
            self.unmark_on(start, &round.maybe_ours(self.nodes.len()), log);
        }
        round.verdict
    }

    /// Takes our --once-per marker back on every node, so that the window is
    /// not used up (the command could not be started).
    pub(crate) fn unmark_once(&self, start: u64, log: &Log) {
        let all: Vec<usize> = (0..self.nodes.len()).collect();
        self.unmark_on(start, &all, log);
    }

    fn unmark_on(&self, start: u64, which: &[usize], log: &Log) {
        let (marker, token) = (self.keys.once(start), Arc::clone(&self.token));
        let replies = quorum::on_each(
            &self.nodes,
            which,
            node::DropOurs {
                key: marker.clone(),
                token,
            },
            self.round_limit(),
        );
        for r in &replies {
            let name = self.nodes[r.node].name();
            match &r.result {
                Ok(true) => log.debug(|| format!("{name}: once-per marker taken back")),
                Ok(false) => {}
                Err(e) if self.refused(r.node, Step::Unmark, e, (&marker, None), log) => {}
                Err(e) => log.info(|| {
                    format!("cannot take the once-per marker back, it expires by itself: {e}")
                }),
            }
        }
    }

    /// Who holds the lock now, as the nodes' records say, in a phrase for a
    /// waiter's or a busy run's line: "by ci@runner4 pid 42, held for 3s,
    /// expires in 27s"; with --limit, every slot's holder ("in all 2 slots,
    /// by A; B"); for --shared readers, them ("shared by 2 --shared
    /// readers: A; B"). None when nobody answers or nothing is recorded.
    pub(crate) fn who_holds(&self) -> Option<String> {
        let all: Vec<usize> = (0..self.nodes.len()).collect();
        let mut held = Vec::new();
        let mut readers: Vec<String> = Vec::new();
        for key_set in &self.slots {
            let replies = quorum::on_each(
                &self.nodes,
                &all,
                node::Inspect {
                    key_set: Arc::clone(key_set),
                },
                self.round_limit(),
            );
            let found: Vec<&node::Inspection> = replies
                .iter()
                .filter_map(|r| r.result.as_ref().ok())
                .collect();
            if let Some(i) = found
                .iter()
                .find(|i| i.value.is_some() && !i.holder.is_empty())
            {
                held.push(Holder::of(&i.holder).with_expiry(i.pttl).to_string());
            }
            for share in found.iter().flat_map(|i| &i.readers) {
                let who = Holder::of(&share.record).to_string();
                if !readers.contains(&who) {
                    readers.push(who);
                }
            }
        }
        let n = self.slots.len();
        match (held.is_empty(), readers.is_empty()) {
            (false, _) if n > 1 => Some(format!("in all {n} slots, by {}", held.join("; "))),
            (false, _) => Some(format!("by {}", held.join("; "))),
            (true, false) => Some(format!(
                "shared by {} --shared reader{}: {}",
                readers.len(),
                if readers.len() == 1 { "" } else { "s" },
                readers.join("; ")
            )),
            (true, true) if n > 1 => Some(format!("in all {n} slots")),
            (true, true) => None,
        }
    }

    /// Who held the lock when the last acquire round was refused, as the
    /// holder record the refusing nodes sent with their answer says (no
    /// request of its own); None with --limit, or when none sent one.
    pub(crate) fn busy_holder(&self) -> Option<Holder> {
        if self.slots.len() > 1 {
            return None;
        }
        let last = self.last_round.lock().unwrap_or_else(|p| p.into_inner());
        let granted = last
            .as_ref()?
            .replies
            .iter()
            .filter_map(|r| r.result.as_ref().ok())
            .find(|g| g.answer == Answer::Refused && !g.holder.is_empty())?;
        Some(Holder::of(&granted.holder))
    }

    /// Gives up our place in the --wait queue on every node that answers
    /// (a lapsed place would leave by itself), waking whoever is at the front
    /// now.
    pub(crate) fn leave_queue(&self, log: &Log) {
        let (key_set, token) = (self.key_set(), Arc::clone(&self.token));
        let all: Vec<usize> = (0..self.nodes.len()).collect();
        let replies = quorum::on_each(
            &self.nodes,
            &all,
            node::Leave {
                key_set,
                token,
                wake: true,
            },
            self.round_limit(),
        );
        let place = (&self.keys.queue()[..], Some(PLACE_LAPSE));
        for r in replies {
            if let Err(e) = r.result
                && !self.refused(r.node, Step::Leave, &e, place, log)
            {
                log.debug(|| format!("leaving the queue: {e}"));
            }
        }
    }

    /// Blocks until every answering node has subscribed (or failed to) to
    /// the release announcements, or the round limit has passed, so that a
    /// release right after the caller's next look cannot be missed: with
    /// `fair`, our own channel (the front of the --wait queue is woken
    /// there), else the lock's, which every release PUBLISHes to. `wake` runs
    /// for each announcement.
    pub(crate) fn watch_releases(
        &self,
        fair: bool,
        wake: impl Fn() -> bool + Clone + Send + 'static,
        log: &Log,
    ) {
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        // Only nodes that are answering in this run are waited for: a
        // stopped one would hold every waiter up for a round limit.
        let mut waited = 0;
        for (i, node) in self.nodes.iter().enumerate() {
            let mut channel = self.keys.released();
            if fair {
                channel.push(b':');
                channel.extend_from_slice(self.token.as_bytes());
            }
            let channels = vec![channel];
            let sick = quorum::not_answering(&self.nodes, i);
            let key = self.keys.lock().to_vec();
            waited += usize::from(!sick);
            let (node, wake) = (Arc::clone(node), wake.clone());
            let ready_tx = ready_tx.clone();
            let (done, over) = (Arc::clone(&self.watched), Arc::clone(&self.watched));
            let spawned = std::thread::Builder::new()
                .name("watch".into())
                .spawn(move || {
                    node.watch(
                        &channels,
                        &key,
                        |r| drop(ready_tx.send((sick, r))),
                        move || !done.load(Relaxed) && wake(),
                        move || !over.load(Relaxed),
                    );
                });
            if let Err(e) = spawned {
                log.info(|| format!("cannot watch for releases: {e}"));
            }
        }
        drop(ready_tx);
        let until = clock::now() + self.round_limit();
        while waited > 0 {
            match ready_rx.recv_timeout(until.saturating_duration_since(clock::now())) {
                Ok((sick, r)) => {
                    waited -= usize::from(!sick);
                    if let Err(e) = r {
                        log.debug(|| format!("not woken by releases from {e}"));
                    }
                }
                Err(_) => break,
            }
        }
    }

    /// The waiting is over: the watchers of `watch_releases` stop (at their
    /// next message, or before they would subscribe again).
    pub(crate) fn stop_watching(&self) {
        self.watched.store(true, Relaxed);
    }

    fn release_on(&self, which: &[usize], announce: bool, log: &Log) {
        if which.is_empty() {
            return;
        }
        let (key_set, token) = (self.key_set(), Arc::clone(&self.token));
        let replies = quorum::on_each(
            &self.nodes,
            which,
            node::Release {
                key_set,
                token,
                announce,
            },
            self.round_limit(),
        );
        self.log_releases(which, &replies, log);
    }

    /// One line per node's release (errors with -v, the rest with -vv), and
    /// one for the nodes in `which` not waited for.
    fn log_releases(&self, which: &[usize], replies: &[Reply<Released>], log: &Log) {
        for r in replies {
            let what = (&self.key_set().lock[..], Some(self.ttl));
            if let Err(e) = &r.result
                && self.refused(r.node, Step::Release, e, what, log)
            {
                continue;
            }
            let name = self.nodes[r.node].name();
            let (outcome, text) = match &r.result {
                Ok(Released::Deleted) => ("released", format!("release {name}: released")),
                Ok(Released::AlreadyGone) => {
                    ("absent", format!("release {name}: nothing to release"))
                }
                Ok(Released::NotOurs) => (
                    "not-ours",
                    format!("release {name}: the key holds another token; left alone"),
                ),
                Err(e) => (
                    "error",
                    format!("release failed, the key expires within the TTL: {e}"),
                ),
            };
            let entry = || {
                ev("release", text.clone())
                    .node(name)
                    .ms(r.latency)
                    .outcome(outcome)
            };
            if r.result.is_err() {
                log.info(entry);
            } else {
                log.debug(entry);
            }
        }
        let silent: Vec<&str> = which
            .iter()
            .filter(|i| !replies.iter().any(|r| r.node == **i))
            .map(|i| self.nodes[*i].name())
            .collect();
        if !silent.is_empty() {
            log.info(|| {
                format!(
                    "not waiting for {} to confirm the release (not answering); its copy of \
                     the key expires within the TTL",
                    silent.join(", ")
                )
            });
        }
    }

    fn log_round<T: Vote>(&self, what: &'static str, round: &Round<T>, log: &Log) {
        for node in self.nodes.iter() {
            for note in node.notes() {
                log.info(|| ev("topology", note).node(node.name()));
            }
        }
        for r in &round.replies {
            self.log_reply(what, r, log, "");
        }
        for &i in &round.skipped {
            let name = self.nodes[i].name();
            log.info(|| {
                ev(
                    what,
                    format!(
                        "{what} {name}: counted as failed, an earlier request is still waiting"
                    ),
                )
                .node(name)
                .outcome("skipped")
            });
        }
    }

    fn log_reply<T: Vote>(&self, what: &'static str, r: &Reply<T>, log: &Log, note: &str) {
        let name = self.nodes[r.node].name();
        log.info(|| match &r.result {
            Ok(a) => {
                let (said, outcome) = match a.answer() {
                    Answer::Granted => ("granted", "granted"),
                    Answer::Refused => ("refused", "refused"),
                    // "failed" is the run's word in the JSON log.
                    Answer::Failed => ("failed", "error"),
                };
                ev(
                    what,
                    format!("{what} {name}: {said} in {:.1?}{note}", r.latency),
                )
                .node(name)
                .ms(r.latency)
                .outcome(outcome)
            }
            Err(e) => ev(what, format!("{what} {e} (after {:.1?}){note}", r.latency))
                .node(name)
                .ms(r.latency)
                .outcome("error"),
        });
    }

    /// Why a round had no quorum, each failed node's part with it.
    fn short_of<T>(&self, round: &Round<T>) -> String {
        let n = self.nodes.len();
        let uncounted = round
            .replies
            .iter()
            .any(|r| r.result.as_ref().is_err_and(|e| e.is_uncounted()));
        let head = match (n, uncounted) {
            (1, false) => "the node did not answer".to_string(),
            (1, true) => "the node's vote does not count".to_string(),
            (_, false) => format!("fewer than {} of {n} nodes answered", redlock::quorum(n)),
            (_, true) => format!(
                "fewer than {} of {n} nodes gave a vote that counts",
                redlock::quorum(n)
            ),
        };
        format!("{head}: {}", self.failures(round))
    }

    /// The failed nodes' errors, and the nodes that did not answer in time.
    fn failures<T>(&self, round: &Round<T>) -> String {
        let mut parts: Vec<String> = round
            .replies
            .iter()
            .filter_map(|r: &Reply<T>| r.result.as_ref().err().map(|e| e.to_string()))
            .collect();
        for (i, node) in self.nodes.iter().enumerate() {
            if round.skipped.contains(&i) {
                parts.push(format!(
                    "{}: no answer to an earlier request yet",
                    node.name()
                ));
            } else if !round.replies.iter().any(|r| r.node == i) {
                parts.push(format!(
                    "{}: no answer within {:.0?}",
                    node.name(),
                    round.elapsed
                ));
            }
        }
        if parts.is_empty() {
            "no node failed".into()
        } else {
            parts.join("; ")
        }
    }
}

/// Who holds the lock, as its holder record says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Holder {
    /// `user@host pid N`
    pub who: String,
    /// Since when it holds the lock, where the record says.
    pub held_for: Option<Duration>,
    /// How soon its lock expires unless extended, where a node said.
    pub expires_in: Option<Duration>,
}

impl Holder {
    fn of(record: &[(String, String)]) -> Holder {
        // Read from a node, shown to a terminal: escaped (see `printable`).
        let field = |name: &str| {
            record
                .iter()
                .find(|(k, _)| k == name)
                .map_or("?".into(), |(_, v)| crate::log::printable(v))
        };
        let cut = record::cut(record).map_or(String::new(), |c| format!(" ({c})"));
        Holder {
            who: format!(
                "{}@{} pid {}{cut}",
                field("user"),
                field("host"),
                field("pid")
            ),
            held_for: field("acquired_ms")
                .parse::<u64>()
                .ok()
                .and_then(|ms| unix_ms().checked_sub(ms))
                .map(|ms| Duration::from_secs(ms / 1000)),
            expires_in: None,
        }
    }

    /// With the time its key has left (PTTL, in ms; none when negative).
    fn with_expiry(mut self, pttl: i64) -> Holder {
        self.expires_in = u64::try_from(pttl)
            .ok()
            .map(|ms| Duration::from_secs(ms.div_ceil(1000)));
        self
    }
}

/// `user@host pid N, held for 3m 12s, expires in 27s`: each duration says
/// which way it counts.
impl std::fmt::Display for Holder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.who)?;
        if let Some(d) = self.held_for {
            write!(f, ", held for {}", humantime::format_duration(d))?;
        }
        if let Some(d) = self.expires_in {
            write!(f, ", expires in {}", humantime::format_duration(d))?;
        }
        Ok(())
    }
}

/// What the nodes that refused an acquire said, together: a conflict of
/// --limit values wherever one is seen; else the reason most of them gave
/// (ties: another holder first, the queue last), and the lapse ahead that a
/// quorum of them has passed.
fn busy_of(round: &Round<Granted>, n: usize) -> Busy {
    let refused: Vec<&Granted> = round
        .replies
        .iter()
        .filter_map(|r| r.result.as_ref().ok())
        .filter(|g| g.answer == Answer::Refused)
        .collect();
    let reasons: Vec<Refusal> = refused.iter().filter_map(|g| g.refusal).collect();
    let rank = |r: &Refusal| match r {
        Refusal::Limit(_) => 0,
        Refusal::Held => 1,
        Refusal::Plain => 2,
        Refusal::Slots(_) => 3,
        Refusal::Readers(_) => 4,
        Refusal::Queued(_) => 5,
    };
    let why = if let Some(conflict) = reasons.iter().find(|r| matches!(r, Refusal::Limit(_))) {
        *conflict
    } else {
        let count = |kind: usize| reasons.iter().filter(|r| rank(r) == kind).count();
        let kind = (1..=5)
            .max_by_key(|k| (count(*k), std::cmp::Reverse(*k)))
            .unwrap_or(1);
        let same = reasons.iter().filter(|r| rank(r) == kind);
        match kind {
            4 => Refusal::Readers(
                same.filter_map(|r| match r {
                    Refusal::Readers(n) => Some(*n),
                    _ => None,
                })
                .max()
                .unwrap_or(0),
            ),
            5 => Refusal::Queued(
                same.filter_map(|r| match r {
                    Refusal::Queued(n) => Some(*n),
                    _ => None,
                })
                .max()
                .unwrap_or(0),
            ),
            _ => same.copied().next().unwrap_or(Refusal::Held),
        }
    };
    let mut lapses: Vec<Duration> = refused.iter().filter_map(|g| g.lapse_ahead).collect();
    lapses.sort_unstable();
    let quorum = redlock::quorum(n);
    Busy {
        why,
        lapse_ahead: lapses
            .get(quorum.saturating_sub(1))
            .or(lapses.last())
            .copied(),
        ..Busy::held()
    }
}

/// A round that reached no verdict for want of the nodes that sat it out
/// (restarted within their grace, see `node::Node::uncounted`): had they
/// answered, a quorum would have. Busy, not unavailable: nothing is wrong
/// that time will not mend, and a waiter tries again when the first of
/// them counts again.
fn sitting_out(round: &Round<Granted>, n: usize) -> Option<Busy> {
    let sitting: Vec<(&node::NodeError, Option<std::time::Instant>)> = round
        .replies
        .iter()
        .filter_map(|r| r.result.as_ref().err())
        .filter_map(|e| Some((e, e.restarted()?)))
        .collect();
    let answered = round.tally.granted() + round.tally.refused();
    if sitting.is_empty() || answered + sitting.len() < redlock::quorum(n) {
        return None;
    }
    let now = std::time::Instant::now();
    let back = sitting.iter().filter_map(|(_, at)| *at).min();
    Some(Busy {
        sitting_out: sitting.iter().map(|(e, _)| e.to_string()).collect(),
        back_in: back.map(|at| at.saturating_duration_since(now)),
        ..if round.tally.refused() > 0 {
            busy_of(round, n)
        } else {
            Busy::held()
        }
    })
}

/// The sooner of two lapses, either of which may be unknown.
fn earliest(a: Option<Duration>, b: Option<Duration>) -> Option<Duration> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// What one acquire round meant.
enum Judged {
    Held(Held),
    Not(Acquired),
}

/// A node's answer to the acquire.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum NodeVote {
    Granted,
    Refused,
    Error(String),
    NoAnswer,
}

/// One node's part in the run, for the report and the closing warning.
#[derive(Clone, Debug)]
pub struct NodeOutcome {
    pub name: String,
    pub(crate) acquire: NodeVote,
    pub(crate) fared: node::Fared,
    /// It answered again after it last failed: the run did not go without it.
    pub recovered: bool,
    /// What it refused of the lock's upkeep (see `refused`): `release: the
    /// ACL refuses DEL`.
    pub refused: Vec<String>,
}

impl NodeOutcome {
    /// Why the node counts as failed in this run: it failed a request, or
    /// never answered the acquire within its node timeout (a run that ended
    /// sooner is no fault of the node's: `Fared::Pending`).
    /// The closing warning names these nodes and `--metrics-file` counts
    /// them: one definition.
    pub(crate) fn failure(&self) -> Option<String> {
        match (&self.fared, &self.acquire) {
            (node::Fared::Failed(e) | node::Fared::SatOut(e), _) => Some(e.clone()),
            (node::Fared::Silent, NodeVote::NoAnswer) => {
                Some(format!("{}: no answer while the run lasted", self.name))
            }
            _ => None,
        }
    }
}

/// The keys a holder of `slot` of `limit` (or of the lock itself) touches.
pub(crate) fn key_set(keys: &Keys, slot: Option<u32>, limit: Option<u32>) -> KeySet {
    KeySet {
        lock: keys.taken(slot),
        holder: keys.holder(slot),
        fence: keys.fence(),
        legacy_fence: keys.legacy_fence(),
        released: keys.released(),
        main: keys.lock().to_vec(),
        slots: keys.slots(),
        limit,
        queue: keys.queue(),
        waiters: keys.waiters(),
        readers: keys.readers(),
        reader_records: keys.reader_records(),
        shared: false,
    }
}

pub(crate) fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// 128 bits from the OS CSPRNG, as 32 lowercase hex digits.
fn new_token() -> std::io::Result<String> {
    let mut bytes = [0u8; 16];
    SysRng
        .try_fill_bytes(&mut bytes)
        .map_err(|e| std::io::Error::other(format!("no randomness from the OS: {e}")))?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_128_bit_hex_and_differ() {
        let a = new_token().expect("os rng");
        let b = new_token().expect("os rng");
        assert_eq!(a.len(), 32);
        assert!(
            a.bytes()
                .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase())
        );
        assert_ne!(a, b);
    }

    #[test]
    fn the_next_fence_is_exact_and_stops_at_the_top() {
        assert_eq!(next_fence([]), Some(1));
        assert_eq!(next_fence([(1 << 53) + 1, 1 << 53]), Some((1 << 53) + 2));
        assert_eq!(next_fence([FENCE_MAX - 1, 3]), Some(FENCE_MAX));
        assert_eq!(next_fence([FENCE_MAX]), None);
        // A counter someone set beyond what Redis holds as an integer.
        assert_eq!(next_fence([u64::MAX]), None);
    }
}
