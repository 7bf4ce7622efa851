//! The Redlock arithmetic, free of I/O so every rule here is unit-tested.
//!
//! Times are `Duration`s measured on the monotonic clock by the caller; nothing in
//! this module reads a clock.

use std::time::Duration;

/// Majority of `n` independent nodes: any two quorums share at least one node.
pub(crate) fn quorum(n: usize) -> usize {
    n / 2 + 1
}

/// Clock drift allowance: 1 % of the TTL plus 2 ms for Redis's 1 ms expiry
/// precision and a floor for very short TTLs.
pub(crate) fn drift(ttl: Duration) -> Duration {
    ttl / 100 + Duration::from_millis(2)
}

/// How long the lock is still ours after a round that started `elapsed` ago
/// reached its quorum. `None` means the round took the whole TTL: not acquired.
pub(crate) fn validity(ttl: Duration, elapsed: Duration) -> Option<Duration> {
    ttl.checked_sub(elapsed)?
        .checked_sub(drift(ttl))
        .filter(|v| !v.is_zero())
}

/// Default bound on one node's connect, read and write: a twentieth of the TTL,
/// at least 50 ms (loopback jitter) and at most 1 s (a hung node must not eat the TTL).
pub(crate) fn default_node_timeout(ttl: Duration) -> Duration {
    (ttl / 20).clamp(Duration::from_millis(50), Duration::from_secs(1))
}

/// The node timeout must leave room for several heartbeat rounds inside one TTL.
pub(crate) const MAX_NODE_TIMEOUT_FRACTION: u32 = 10;

pub(crate) fn node_timeout_fits(ttl: Duration, node_timeout: Duration) -> bool {
    !node_timeout.is_zero() && node_timeout * MAX_NODE_TIMEOUT_FRACTION <= ttl
}

/// Longest one node's answer is awaited: a connect, then the reply, each
/// bounded by the node timeout, plus scheduling slack.
pub(crate) fn round_limit(node_timeout: Duration) -> Duration {
    node_timeout * 2 + Duration::from_millis(20)
}

/// Grace between SIGTERM and SIGKILL: a third of the TTL, at most 10 s.
pub(crate) fn default_kill_after(ttl: Duration) -> Duration {
    (ttl / 3).min(Duration::from_secs(10))
}

/// How long before the validity deadline the command's group gets SIGKILL.
/// Killing *at* the deadline would land after it by the timer's wake-up
/// latency (tens of ms on a loaded host) plus the time the kernel takes to
/// tear the group down; the drift allowance alone is too thin a margin for
/// that at short TTLs. A tenth of the TTL, within 50 ms..2 s.
pub fn kill_guard(ttl: Duration) -> Duration {
    (ttl / 10).clamp(Duration::from_millis(50), Duration::from_secs(2))
}

/// Checks that a lock's own schedule can work: the first heartbeat (at
/// TTL/3, taking up to a node timeout) must be able to finish before SIGTERM
/// is due (validity - kill guard - kill-after). Otherwise every run would
/// lose its lock at the first heartbeat. The error says why, in one line.
pub(crate) fn schedule_fits(
    ttl: Duration,
    node_timeout: Duration,
    kill_after: Duration,
) -> Result<(), String> {
    let term_at = ttl
        .checked_sub(drift(ttl))
        .and_then(|d| d.checked_sub(kill_guard(ttl)))
        .and_then(|d| d.checked_sub(kill_after));
    // On the connection the acquire opened, a round is one reply.
    let first = heartbeat_interval(ttl) + node_timeout + Duration::from_millis(20);
    match term_at {
        Some(t) if first <= t => Ok(()),
        _ => Err(format!(
            "--ttl {} is too short for its own schedule: SIGTERM would be due {} after the \
             lock is taken (TTL - {} drift - {} kill guard - --kill-after {}), but the first \
             heartbeat, due at {}, may take until {} to answer (--node-timeout {}); raise \
             --ttl, or lower --kill-after or --node-timeout",
            fmt(ttl),
            term_at.map_or("at once".into(), fmt),
            fmt(drift(ttl)),
            fmt(kill_guard(ttl)),
            fmt(kill_after),
            fmt(heartbeat_interval(ttl)),
            fmt(first),
            fmt(node_timeout),
        )),
    }
}

fn fmt(d: Duration) -> String {
    humantime::format_duration(Duration::from_millis(d.as_millis() as u64)).to_string()
}

/// Heartbeat period: three chances to extend before the TTL runs out.
pub(crate) fn heartbeat_interval(ttl: Duration) -> Duration {
    ttl / 3
}

/// Pause before retrying a failed extension round: soon enough to fit several
/// retries into the remaining validity, slow enough not to hammer a sick node.
pub(crate) fn heartbeat_retry(ttl: Duration, node_timeout: Duration) -> Duration {
    (ttl / 15).max(node_timeout)
}

/// Pause before the next try for a busy lock: "full jitter" exponential
/// backoff, 50 ms doubling up to 1 s, scaled by `unit` in [0, 1). Releases
/// normally wake waiters sooner; this is the fallback for lost announcements
/// and for locks left to expire (--hold).
pub(crate) fn backoff(attempt: u32, unit: f64) -> Duration {
    let cap = Duration::from_millis(50)
        .saturating_mul(1u32 << attempt.min(5))
        .min(Duration::from_secs(1));
    cap.mul_f64(unit.clamp(0.0, 1.0))
}

/// A node's reply that says whether it granted what was asked.
pub(crate) trait Vote {
    fn answer(&self) -> Answer;
}

impl Vote for Answer {
    fn answer(&self) -> Answer {
        *self
    }
}

/// What one node said to a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Answer {
    /// The node did what we asked (SET NX applied, extension applied).
    Granted,
    /// The node answered but refused: another token holds the key.
    Refused,
    /// No usable answer: connection failure, timeout, error reply.
    Failed,
}

/// Outcome of a round once it is certain.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// A quorum granted.
    Quorum,
    /// A quorum can no longer be reached, but a quorum of nodes answered:
    /// the lock is held elsewhere.
    Refused,
    /// A quorum can no longer be reached and fewer than a quorum answered.
    Unavailable,
}

/// Counts answers as they arrive and says as soon as the round's verdict is
/// certain, so the caller need not wait for a slow or dead node.
#[derive(Clone, Debug)]
pub(crate) struct Tally {
    n: usize,
    granted: usize,
    refused: usize,
    failed: usize,
}

impl Tally {
    pub(crate) fn new(n: usize) -> Self {
        Tally {
            n,
            granted: 0,
            refused: 0,
            failed: 0,
        }
    }

    pub(crate) fn record(&mut self, answer: Answer) {
        match answer {
            Answer::Granted => self.granted += 1,
            Answer::Refused => self.refused += 1,
            Answer::Failed => self.failed += 1,
        }
    }

    pub(crate) fn granted(&self) -> usize {
        self.granted
    }

    pub(crate) fn refused(&self) -> usize {
        self.refused
    }

    fn pending(&self) -> usize {
        self.n - self.granted - self.refused - self.failed
    }

    /// `None` while the answers still pending could change the verdict.
    pub(crate) fn verdict(&self) -> Option<Verdict> {
        let q = quorum(self.n);
        if self.granted >= q {
            return Some(Verdict::Quorum);
        }
        if self.granted + self.pending() >= q {
            return None;
        }
        let answered = self.granted + self.refused;
        if answered >= q {
            Some(Verdict::Refused)
        } else if answered + self.pending() < q {
            Some(Verdict::Unavailable)
        } else {
            None
        }
    }

    /// A quorum of nodes says another token (or none) holds the key: no retry
    /// can win it back, the lock is gone.
    pub(crate) fn quorum_refused(&self) -> bool {
        self.refused >= quorum(self.n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn quorum_is_a_strict_majority() {
        assert_eq!(
            [1, 2, 3, 4, 5, 6, 7].map(quorum),
            [1, 2, 2, 3, 3, 4, 4],
            "N/2+1"
        );
        for n in 1..50 {
            assert!(2 * quorum(n) > n, "two quorums of {n} must intersect");
        }
    }

    #[test]
    fn drift_is_one_percent_plus_two_ms() {
        assert_eq!(drift(ms(10_000)), ms(102));
        assert_eq!(drift(ms(1_000)), ms(12));
        assert_eq!(drift(ms(0)), ms(2));
    }

    #[test]
    fn validity_subtracts_elapsed_and_drift() {
        assert_eq!(validity(ms(10_000), ms(50)), Some(ms(10_000 - 50 - 102)));
        assert_eq!(
            validity(ms(1_000), ms(988)),
            None,
            "exactly zero is not held"
        );
        assert_eq!(validity(ms(1_000), ms(987)), Some(ms(1)));
        assert_eq!(
            validity(ms(1_000), ms(5_000)),
            None,
            "took longer than the TTL"
        );
    }

    #[test]
    fn defaults_follow_the_ttl() {
        assert_eq!(default_node_timeout(ms(30_000)), ms(1_000));
        assert_eq!(default_node_timeout(ms(10_000)), ms(500));
        assert_eq!(default_node_timeout(ms(500)), ms(50));
        assert_eq!(default_kill_after(ms(30_000)), ms(10_000));
        assert_eq!(default_kill_after(ms(3_000)), ms(1_000));
        assert_eq!(heartbeat_interval(ms(30_000)), ms(10_000));
        assert_eq!(kill_guard(ms(500)), ms(50));
        assert_eq!(kill_guard(ms(2_000)), ms(200));
        assert_eq!(kill_guard(ms(30_000)), ms(2_000));
        for ttl in [500, 1_000, 2_000, 30_000, 600_000] {
            let ttl = ms(ttl);
            // The command must get some time between TERM and KILL, and the
            // heartbeat must be able to extend before TERM is due.
            let term_before_deadline = default_kill_after(ttl) + kill_guard(ttl);
            assert!(term_before_deadline < ttl - drift(ttl) - heartbeat_interval(ttl));
        }
        for ttl in [500, 1_000, 2_000, 30_000, 600_000] {
            assert!(
                node_timeout_fits(ms(ttl), default_node_timeout(ms(ttl))),
                "the default node timeout for ttl {ttl}ms must be accepted"
            );
        }
        assert!(!node_timeout_fits(ms(1_000), ms(101)));
        assert!(!node_timeout_fits(ms(1_000), ms(0)));
    }

    #[test]
    fn schedules_too_short_for_their_first_heartbeat_are_refused() {
        // -t 100ms --node-timeout 10ms: TERM due 14 ms in, first heartbeat at 33 ms.
        let err = schedule_fits(ms(100), ms(10), default_kill_after(ms(100))).unwrap_err();
        assert!(err.contains("--ttl 100ms is too short"), "{err}");
        assert!(err.contains("13ms after"), "{err}");
        assert!(err.contains("until 63ms"), "{err}");
        // The defaults fit wherever the default node timeout does (500 ms up).
        for ttl in [500, 1_000, 2_000, 30_000, 600_000, 86_400_000] {
            let ttl = ms(ttl);
            assert!(
                schedule_fits(ttl, default_node_timeout(ttl), default_kill_after(ttl)).is_ok(),
                "{ttl:?}"
            );
        }
        assert!(schedule_fits(ms(2_000), ms(100), ms(1_000)).is_err());
        assert!(schedule_fits(ms(2_000), ms(100), ms(800)).is_ok());
        assert!(
            schedule_fits(ms(10), ms(1), ms(1)).is_err(),
            "TERM before the lock exists"
        );
    }

    #[test]
    fn backoff_doubles_to_a_one_second_cap() {
        assert_eq!(backoff(0, 1.0), ms(50));
        assert_eq!(backoff(1, 1.0), ms(100));
        assert_eq!(backoff(4, 1.0), ms(800));
        assert_eq!(backoff(5, 1.0), ms(1000));
        assert_eq!(backoff(60, 1.0), ms(1000));
        assert_eq!(backoff(3, 0.5), ms(200));
        assert_eq!(backoff(3, 0.0), ms(0));
    }

    fn run(n: usize, answers: &[Answer]) -> Vec<Option<Verdict>> {
        let mut t = Tally::new(n);
        answers
            .iter()
            .map(|a| {
                t.record(*a);
                t.verdict()
            })
            .collect()
    }

    use Answer::*;

    #[test]
    fn single_node_decides_on_its_answer() {
        assert_eq!(run(1, &[Granted]), [Some(Verdict::Quorum)]);
        assert_eq!(run(1, &[Refused]), [Some(Verdict::Refused)]);
        assert_eq!(run(1, &[Failed]), [Some(Verdict::Unavailable)]);
    }

    #[test]
    fn three_nodes_decide_without_waiting_for_the_third() {
        assert_eq!(run(3, &[Granted, Granted])[1], Some(Verdict::Quorum));
        assert_eq!(run(3, &[Refused, Refused])[1], Some(Verdict::Refused));
        assert_eq!(run(3, &[Failed, Failed])[1], Some(Verdict::Unavailable));
        // One of each so far: the third decides.
        assert_eq!(run(3, &[Granted, Failed]), [None, None]);
        assert_eq!(
            run(3, &[Granted, Failed, Failed])[2],
            Some(Verdict::Unavailable)
        );
        assert_eq!(
            run(3, &[Granted, Refused, Failed])[2],
            Some(Verdict::Refused)
        );
    }

    #[test]
    fn refused_needs_a_quorum_of_answers() {
        // 5 nodes: 2 refused, 1 failed -> quorum unreachable only once a third
        // node fails or refuses; answered (2) < quorum (3) but one pending may answer.
        let v = run(5, &[Refused, Refused, Failed, Failed]);
        assert_eq!(v, [None, None, None, None]);
        let mut t = Tally::new(5);
        for a in [Refused, Refused, Failed, Failed, Failed] {
            t.record(a);
        }
        assert_eq!(t.verdict(), Some(Verdict::Unavailable));
        let mut t = Tally::new(5);
        for a in [Refused, Refused, Failed, Failed, Refused] {
            t.record(a);
        }
        assert_eq!(t.verdict(), Some(Verdict::Refused));
    }

    #[test]
    fn quorum_refusal_means_lost() {
        let mut t = Tally::new(3);
        t.record(Refused);
        assert!(!t.quorum_refused());
        t.record(Failed);
        assert!(!t.quorum_refused());
        t.record(Refused);
        assert!(t.quorum_refused());
    }

    #[test]
    fn every_complete_round_has_a_verdict() {
        let all = [Granted, Refused, Failed];
        for n in 1..=5usize {
            let mut combos = vec![vec![]];
            for _ in 0..n {
                combos = combos
                    .into_iter()
                    .flat_map(|c: Vec<Answer>| {
                        all.iter().map(move |a| {
                            let mut c = c.clone();
                            c.push(*a);
                            c
                        })
                    })
                    .collect();
            }
            for c in combos {
                let mut t = Tally::new(n);
                let mut first = None;
                for a in &c {
                    t.record(*a);
                    if first.is_none() {
                        first = t.verdict();
                    }
                }
                let last = t.verdict();
                assert!(last.is_some(), "{c:?} left undecided");
                assert_eq!(first, last, "{c:?}: early verdict changed");
            }
        }
    }
}
