//! The lock across all nodes: acquire, extend and release rounds, with the
//! Redlock rules from `redlock` applied to what the nodes answered.

pub mod keys;
pub mod node;
pub mod quorum;
pub mod record;
pub mod redlock;

use std::sync::Arc;
use std::sync::atomic::AtomicUsize;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use crate::clock::{self, Stamp};

use rand::TryRng;
use rand::rngs::SysRng;
use rand::seq::SliceRandom;

use crate::log::{Log, ev};
use keys::Keys;
use node::{Books, Extension, Granted, Node, Released};
use quorum::{Reply, Round, Vote};
use redlock::{Answer, Verdict};

pub struct Lock {
    nodes: Arc<[Arc<Node>]>,
    keys: Keys,
    /// The keys each request touches: the lock's, or with --limit N those of
    /// each of the N slots, each a lock of its own.
    slots: Vec<Arc<Books>>,
    /// The slot taken by the last successful acquire.
    held: AtomicUsize,
    /// Fields of the holder record written beside the lock (`<key>:holder`).
    record: Arc<[(&'static str, String)]>,
    /// --fence: hand out a fencing token with the lock.
    fence: bool,
    /// Nodes that granted / answered with an error in the last acquire
    /// round, for --report (a node not waited for counts in neither).
    last_round: std::sync::Mutex<(usize, usize)>,
    token: Arc<str>,
    ttl: Duration,
    node_timeout: Duration,
}

/// The lock, once taken.
pub struct Held {
    /// When the acquire round started: the heartbeat's schedule starts here.
    pub since: Stamp,
    /// The validity deadline, unless extended.
    pub deadline: Stamp,
    /// With --fence: greater than every earlier holder's.
    pub fence: Option<u64>,
}

/// How an acquire round ended.
pub enum Acquired {
    Yes(Held),
    Busy,
    /// Why the quorum could not be reached, one clause per failed node.
    Unavailable(String),
}

/// How an extension round ended.
pub enum Extended {
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
        nodes: Vec<Node>,
        keys: Keys,
        ttl: Duration,
        node_timeout: Duration,
        record: Vec<(&'static str, String)>,
        fence: bool,
        limit: Option<u32>,
    ) -> std::io::Result<Lock> {
        Ok(Lock {
            nodes: nodes.into_iter().map(Arc::new).collect(),
            slots: match limit {
                None => vec![Arc::new(books(&keys, None))],
                Some(n) => (0..n).map(|i| Arc::new(books(&keys, Some(i)))).collect(),
            },
            keys,
            held: AtomicUsize::new(0),
            record: record.into(),
            fence,
            last_round: std::sync::Mutex::new((0, 0)),
            token: new_token()?.into(),
            ttl,
            node_timeout,
        })
    }

    /// The keys of the lock (or slot) held.
    fn books(&self) -> Arc<Books> {
        Arc::clone(&self.slots[self.held.load(Relaxed)])
    }

    /// With --limit: which slot is held.
    pub fn slot(&self) -> usize {
        self.held.load(Relaxed)
    }

    pub fn token(&self) -> &str {
        &self.token
    }

    /// Nodes that granted and that failed in the last acquire round.
    pub fn last_round(&self) -> (usize, usize) {
        self.last_round.lock().map_or((0, 0), |l| *l)
    }

    fn round_limit(&self) -> Duration {
        redlock::round_limit(self.node_timeout)
    }

    /// Tries the slots in random order (there is one without --limit) until
    /// one is taken. Busy only when every slot is.
    pub fn acquire(&self, log: &Log) -> Acquired {
        let mut order: Vec<usize> = (0..self.slots.len()).collect();
        order.shuffle(&mut rand::rng());
        for slot in order {
            self.held.store(slot, Relaxed);
            match self.acquire_slot(log) {
                Acquired::Busy => continue,
                other => return other,
            }
        }
        Acquired::Busy
    }

    fn acquire_slot(&self, log: &Log) -> Acquired {
        let t0 = clock::now();
        let (books, token, ttl) = (self.books(), Arc::clone(&self.token), self.ttl);
        // When it was taken, for `status`: stamped per attempt, since --wait
        // may try for a long time.
        let mut rec = self.record.to_vec();
        rec.push(("acquired_ms", unix_ms().to_string()));
        let fence = self.fence;
        let round = quorum::decide(
            &self.nodes,
            move |n| n.acquire(&books, &token, ttl, &rec, fence),
            self.round_limit(),
        );
        self.log_round("acquire", &round, log);
        if let Ok(mut last) = self.last_round.lock() {
            let errors = round.replies.iter().filter(|r| r.result.is_err()).count();
            *last = (round.tally.granted(), errors);
        }
        let outcome = match round.verdict {
            Verdict::Quorum => match redlock::validity(self.ttl, round.elapsed) {
                Some(v) => {
                    log.info(|| {
                        ev(
                            "acquired",
                            format!(
                                "acquired on {}/{} nodes in {:.1?}; valid for {:.0?}",
                                round.tally.granted(),
                                self.nodes.len(),
                                round.elapsed,
                                v
                            ),
                        )
                        .ms(round.elapsed)
                        .outcome("acquired")
                    });
                    let deadline = t0 + self.ttl - redlock::drift(self.ttl);
                    if !self.fence {
                        return Acquired::Yes(Held {
                            since: t0,
                            deadline,
                            fence: None,
                        });
                    }
                    match self.commit_fence(&round, deadline, log) {
                        Ok(t) => {
                            return Acquired::Yes(Held {
                                since: t0,
                                deadline,
                                fence: Some(t),
                            });
                        }
                        Err(why) => {
                            // Held, but without a token to show for it: give
                            // it back for real (waiters may go ahead).
                            self.release(log);
                            return Acquired::Unavailable(why);
                        }
                    }
                }
                None => Acquired::Unavailable(format!(
                    "a quorum granted the lock only after {:.0?}, too late for --ttl {}",
                    round.elapsed,
                    humantime::format_duration(self.ttl)
                )),
            },
            Verdict::Refused => Acquired::Busy,
            Verdict::Unavailable => Acquired::Unavailable(format!(
                "fewer than {} of {} nodes answered: {}",
                redlock::quorum(self.nodes.len()),
                self.nodes.len(),
                self.failures(&round)
            )),
        };
        // Not ours after all: undo wherever our SET may have landed, including
        // nodes whose reply we never saw. Quietly: nothing was released.
        self.release_on(&round.maybe_ours(self.nodes.len()), false, log);
        outcome
    }

    /// The second phase of --fence. The acquire round read the counter on
    /// every node that granted (a quorum); t = max + 1 is written back on
    /// those nodes, each only while it still holds our token, and must land
    /// on a quorum. Any later holder's quorum shares a node with this one,
    /// where it will read at least t.
    fn commit_fence(
        &self,
        round: &Round<Granted>,
        deadline: Stamp,
        log: &Log,
    ) -> Result<u64, String> {
        let granted: Vec<(usize, u64)> = round
            .replies
            .iter()
            .filter_map(|r| match &r.result {
                Ok(Granted {
                    answer: Answer::Granted,
                    fence: Some(c),
                }) => Some((r.node, *c)),
                _ => None,
            })
            .collect();
        let t = granted
            .iter()
            .map(|(_, c)| *c)
            .max()
            .unwrap_or(0)
            .checked_add(1)
            .ok_or("the fence counter is at its maximum")?;
        let which: Vec<usize> = granted.iter().map(|(i, _)| *i).collect();
        let (books, token) = (self.books(), Arc::clone(&self.token));
        let replies = quorum::on_each(
            &self.nodes,
            &which,
            move |n| n.commit_fence(&books, &token, t),
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
                "failed"
            })
        });
        if committed < redlock::quorum(self.nodes.len()) {
            return Err(format!(
                "the fencing token was recorded on only {committed} of {} nodes",
                self.nodes.len()
            ));
        }
        if clock::now() >= deadline {
            return Err("recording the fencing token took the whole TTL".into());
        }
        Ok(t)
    }

    /// One heartbeat: compare-and-PEXPIRE on every node. Once a quorum has
    /// extended, nodes that lost the key (restarted empty, expired early) get
    /// it back with SET NX, within the validity just won: a forced unlock,
    /// which deletes the key everywhere, leaves no quorum to re-take from.
    pub fn extend(&self, log: &Log) -> Extended {
        let t0 = clock::now();
        let (books, token, ttl) = (self.books(), Arc::clone(&self.token), self.ttl);
        let round = quorum::decide(
            &self.nodes,
            move |n| n.extend(&books, &token, ttl),
            self.round_limit(),
        );
        self.log_round("extend", &round, log);
        if round.verdict == Verdict::Quorum && redlock::validity(self.ttl, round.elapsed).is_some()
        {
            let lost: Vec<usize> = round
                .replies
                .iter()
                .filter(|r| matches!(r.result, Ok(Extension::Absent)))
                .map(|r| r.node)
                .collect();
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
            self.failures(&round)
        ))
    }

    fn retake(&self, which: &[usize], log: &Log) {
        let (books, token, ttl) = (self.books(), Arc::clone(&self.token), self.ttl);
        let replies = quorum::on_each(
            &self.nodes,
            which,
            move |n| n.retake(&books, &token, ttl),
            self.round_limit(),
        );
        for r in &replies {
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

    /// Compare-and-delete on every node: any of them may hold our token.
    pub fn release(&self, log: &Log) {
        let all: Vec<usize> = (0..self.nodes.len()).collect();
        self.release_on(&all, true, log);
    }

    /// Leaves the lock to expire by itself after `left` (what remains of
    /// --hold), by compare-and-PEXPIRE on every node. Waiters are not woken:
    /// their backoff poll finds the lock free once it expires.
    pub fn hold_for(&self, left: Duration, log: &Log) {
        let all: Vec<usize> = (0..self.nodes.len()).collect();
        let (books, token) = (self.books(), Arc::clone(&self.token));
        let replies = quorum::on_each(
            &self.nodes,
            &all,
            move |n| n.extend(&books, &token, left),
            self.round_limit(),
        );
        for r in &replies {
            let name = self.nodes[r.node].name();
            match &r.result {
                Ok(Extension::Extended) => log.debug(|| {
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
    pub fn mark_once(&self, start: u64, ttl: Duration, log: &Log) -> Verdict {
        let (marker, token) = (self.keys.once(start), Arc::clone(&self.token));
        let round = quorum::decide(
            &self.nodes,
            move |n| n.mark(&marker, &token, ttl),
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
    pub fn unmark_once(&self, start: u64, log: &Log) {
        let all: Vec<usize> = (0..self.nodes.len()).collect();
        self.unmark_on(start, &all, log);
    }

    fn unmark_on(&self, start: u64, which: &[usize], log: &Log) {
        let (marker, token) = (self.keys.once(start), Arc::clone(&self.token));
        let replies = quorum::on_each(
            &self.nodes,
            which,
            move |n| n.drop_ours(&marker, &token),
            self.round_limit(),
        );
        for r in &replies {
            let name = self.nodes[r.node].name();
            match &r.result {
                Ok(true) => log.debug(|| format!("{name}: once-per marker taken back")),
                Ok(false) => {}
                Err(e) => log.info(|| {
                    format!("cannot take the once-per marker back, it expires by itself: {e}")
                }),
            }
        }
    }

    /// Subscribes to this lock's release announcements on every node, calling
    /// `wake` for each. Returns once every subscription stands or failed, or
    /// after the round limit, so that a release right after the caller's next
    /// look cannot be missed.
    pub fn watch_releases(&self, wake: impl Fn() -> bool + Clone + Send + 'static, log: &Log) {
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        for node in self.nodes.iter() {
            let channels = vec![self.keys.released()];
            let (node, wake) = (Arc::clone(node), wake.clone());
            let ready_tx = ready_tx.clone();
            let spawned = std::thread::Builder::new()
                .name("watch".into())
                .spawn(move || {
                    node.watch(&channels, |r| drop(ready_tx.send(r)), wake);
                });
            if let Err(e) = spawned {
                log.info(|| format!("cannot watch for releases: {e}"));
            }
        }
        drop(ready_tx);
        let until = clock::now() + self.round_limit();
        for _ in 0..self.nodes.len() {
            match ready_rx.recv_timeout(until.saturating_duration_since(clock::now())) {
                Ok(Ok(())) => {}
                Ok(Err(e)) => log.debug(|| format!("not woken by releases from {e}")),
                Err(_) => break,
            }
        }
    }

    fn release_on(&self, which: &[usize], announce: bool, log: &Log) {
        if which.is_empty() {
            return;
        }
        let (books, token) = (self.books(), Arc::clone(&self.token));
        let replies = quorum::on_each(
            &self.nodes,
            which,
            move |n| n.release(&books, &token, announce),
            self.round_limit(),
        );
        for r in &replies {
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
        if replies.len() < which.len() {
            log.info(|| {
                format!(
                    "{} node(s) did not confirm the release in time; the key expires within the TTL",
                    which.len() - replies.len()
                )
            });
        }
    }

    fn log_round<T: Vote>(&self, what: &'static str, round: &Round<T>, log: &Log) {
        for r in &round.replies {
            let name = self.nodes[r.node].name();
            log.info(|| match &r.result {
                Ok(a) => {
                    let outcome = match a.answer() {
                        Answer::Granted => "granted",
                        Answer::Refused => "refused",
                        Answer::Failed => "failed",
                    };
                    ev(
                        what,
                        format!("{what} {name}: {outcome} in {:.1?}", r.latency),
                    )
                    .node(name)
                    .ms(r.latency)
                    .outcome(outcome)
                }
                Err(e) => ev(what, format!("{what} {e} (after {:.1?})", r.latency))
                    .node(name)
                    .ms(r.latency)
                    .outcome("error"),
            });
        }
    }

    /// The failed nodes' errors, and the nodes that did not answer in time.
    fn failures<T>(&self, round: &Round<T>) -> String {
        let mut parts: Vec<String> = round
            .replies
            .iter()
            .filter_map(|r: &Reply<T>| r.result.as_ref().err().map(|e| e.to_string()))
            .collect();
        for (i, node) in self.nodes.iter().enumerate() {
            if !round.replies.iter().any(|r| r.node == i) {
                parts.push(format!("{}: no answer yet", node.name()));
            }
        }
        if parts.is_empty() {
            "no node failed".into()
        } else {
            parts.join("; ")
        }
    }
}

/// The keys a holder of `slot` (or of the lock itself) touches.
pub fn books(keys: &Keys, slot: Option<u32>) -> Books {
    Books {
        lock: keys.taken(slot),
        holder: keys.holder(slot),
        fence: keys.fence(),
        released: keys.released(),
    }
}

pub fn unix_ms() -> u64 {
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
}
