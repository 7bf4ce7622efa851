//! The acquire: --jitter, then tries until the lock is taken or --wait is
//! over, woken by releases and queued by the nodes' clocks, with the lines an
//! operator reads while it waits.

use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use crate::cli::{self, Config, Wait};
use crate::clock::{self, Stamp};
use crate::exit::Exit;
use crate::lock::node::Queue;
use crate::lock::node::Refusal;
use crate::lock::redlock;
use crate::lock::{Acquired, Busy, Held, Holder, Lock};
use crate::log::{self, Log, ev};
use crate::process::events::{Event, Events, Inbox};
use crate::report::Stats;

/// Takes the lock, waiting per --jitter and --wait. Returns when it was taken
/// and its validity deadline, or the exit status when it was not.
pub(super) fn acquire(
    lock: &Lock,
    config: &Config,
    tx: &Events,
    rx: &Inbox,
    log: &Log,
    stats: &Stats,
) -> Result<Held, Exit> {
    if let Some(jitter) = config.jitter {
        let pause = Duration::from_micros(rand::random_range(0..jitter.as_micros().max(1) as u64));
        log.info(|| format!("jitter: sleeping {pause:.0?}"));
        pause_for(pause, rx)?;
    }
    let start = clock::now();
    let until = match config.wait {
        Wait::Once => Some(start),
        Wait::For(d) => Some(start + d),
        Wait::Forever => None,
    };
    // Waiters queue, by the nodes' clocks (see `Queue::Join`).
    let queue = match config.wait {
        _ if config.wait_unfair => Queue::Ignore,
        Wait::Once => Queue::Check,
        Wait::For(_) | Wait::Forever => Queue::Join {
            ticket: None,
            lapse: crate::lock::PLACE_LAPSE,
        },
    };
    let fair = matches!(queue, Queue::Join { .. });
    let mut waiting = Waiting {
        lock,
        config,
        log,
        queue: &queue,
        start,
        until,
        watching: false,
        attempt: 0,
        busy: Busy::held(),
        told: None,
        behind: Vec::new(),
        waited: false,
    };
    let result = wait_loop(&mut waiting, tx, rx, stats);
    lock.stop_watching();
    if fair && result.is_err() {
        // Whoever is behind us need not wait for our place to lapse.
        lock.leave_queue(log);
    }
    result
}

/// How often a queued waiter renews its place (and looks, should a wake-up
/// have been missed).
const PLACE_RENEW: Duration = Duration::from_secs(1);

/// How long after a place ahead of ours lapses a waiter looks again: that
/// node's clock has passed it by then.
const PAST_LAPSE: Duration = Duration::from_millis(2);

/// One acquire's tries, and what they have seen so far.
struct Waiting<'a> {
    lock: &'a Lock,
    config: &'a Config,
    log: &'a Log,
    queue: &'a Queue,
    start: Stamp,
    /// When the wait is over; None for --wait forever.
    until: Option<Stamp>,
    /// Subscribed to the lock's releases.
    watching: bool,
    /// Tries since a release was last heard: the backoff's step.
    attempt: u32,
    /// What the last refusal said.
    busy: Busy,
    /// When a CI log last said that we are waiting.
    told: Option<Stamp>,
    /// The holders seen while waiting (`user@host pid N`), first seen first.
    behind: Vec<String>,
    /// A try failed (busy, or not enough nodes) before the one that took it.
    waited: bool,
}

/// What one try came to.
enum Try {
    /// Taken, or refused for good.
    Done(Result<Held, Exit>),
    /// Busy (None), or short of nodes (why), and worth another try.
    Again(Option<String>),
}

/// The tries of `acquire`, until the lock is taken or the wait is over.
fn wait_loop(w: &mut Waiting, tx: &Events, rx: &Inbox, stats: &Stats) -> Result<Held, Exit> {
    let fair = matches!(w.queue, Queue::Join { .. });
    loop {
        stats.waited_ms.store(
            u64::try_from(w.start.elapsed().as_millis()).unwrap_or(u64::MAX),
            Relaxed,
        );
        let failure = match w.try_once() {
            Try::Done(result) => return result,
            Try::Again(failure) => failure,
        };
        w.waited = true;
        let busy = failure.is_none();
        // --ping-busy tells the service who holds the lock, -q or not.
        let quiet = w.log.is_quiet() && !w.config.ping_busy;
        // Who holds it came with the refusal: no request of its own.
        let holder = (busy && !quiet).then(|| w.lock.busy_holder()).flatten();
        // Slots and readers are named by a look of its own, once: for the
        // busy line of a single try, or the first line of a wait.
        let holders = (busy
            && !quiet
            && holder.is_none()
            && w.told.is_none()
            && matches!(w.busy.why, Refusal::Held | Refusal::Readers(_)))
        .then(|| w.lock.who_holds())
        .flatten();
        if let Some(h) = &holder
            && !w.behind.contains(&h.who)
        {
            w.behind.push(h.who.clone());
        }
        if w.until.is_some_and(|u| clock::now() >= u) {
            return Err(match failure {
                None => w.busy_at_the_end(holder.as_ref(), holders.as_deref(), stats),
                Some(why) => w.unavailable(&why, stats),
            });
        }
        // Under -q the note is not shown: no lookup of the holder for it
        // (a request to every node).
        if busy && !quiet && w.told.is_none_or(|t| t.elapsed() >= WAIT_NOTE_EVERY) {
            w.tell_waiting(holder, holders);
        }
        if busy && !w.watching {
            // Subscribe, then look again at once: the holder may have released
            // between our try and the subscription.
            let wake_tx = tx.clone();
            w.lock
                .watch_releases(fair, move || wake_tx.send(Event::Wake), w.log);
            w.watching = true;
            continue;
        }
        let pause = w.pause(fair && busy);
        w.log
            .debug(|| format!("busy; next try within {pause:.0?} or on release"));
        if pause_for(pause, rx)? {
            // A fresh release: the backoff starts over, so that waiters who
            // split the nodes' votes between them retry within tens of
            // milliseconds, not the second a long wait had grown to.
            w.attempt = 0;
        }
    }
}

impl Waiting<'_> {
    /// One acquire round, and whether it settles the matter.
    fn try_once(&mut self) -> Try {
        let name = &self.config.name;
        match self.lock.acquire(self.queue, self.log) {
            Acquired::Yes(held) => {
                if self.waited {
                    self.log
                        .notice(took_after_waiting(name, self.start.elapsed(), &self.behind));
                } else if self.config.wait != Wait::Once {
                    self.log
                        .info(|| format!("waited {:.0?} for lock '{name}'", self.start.elapsed()));
                }
                Try::Done(Ok(held))
            }
            Acquired::Busy(Busy {
                why: Refusal::Limit(theirs),
                ..
            }) => {
                let ours = self
                    .config
                    .limit
                    .map_or("none (a plain lock)".into(), |n| n.to_string());
                self.log.error(
                    ev(
                        "usage",
                        format!(
                            "lock '{name}' is held by runs with --limit {theirs}, and this run \
                             asks for --limit {ours}: every run of one name needs the same \
                             --limit (a plain run and --limit runs exclude each other)"
                        ),
                    )
                    .outcome("usage"),
                );
                Try::Done(Err(Exit::Usage))
            }
            Acquired::SameServer(msg) => {
                self.log.error(ev("usage", msg).outcome("usage"));
                Try::Done(Err(Exit::Usage))
            }
            // No later try can do better: not retried under --wait.
            Acquired::FenceExhausted => {
                self.log.error(
                    ev(
                        "unavailable",
                        format!(
                            "cannot take lock '{name}': its fence counter is at its maximum, \
                             {}, the largest integer Redis holds, so no fencing token above it \
                             exists; the command was not run",
                            crate::lock::FENCE_MAX
                        ),
                    )
                    .outcome("unavailable"),
                );
                Try::Done(Err(Exit::Unavailable))
            }
            Acquired::Busy(b) => {
                self.busy = b;
                Try::Again(None)
            }
            Acquired::Unavailable(why) => Try::Again(Some(why)),
        }
    }

    /// The busy line at the end of a wait (or of a single try), and the exit.
    fn busy_at_the_end(
        &self,
        holder: Option<&Holder>,
        holders: Option<&str>,
        stats: &Stats,
    ) -> Exit {
        let waited = (self.config.wait != Wait::Once).then(|| self.start.elapsed());
        let name = &self.config.name;
        let (text, reason) = match self.busy.sitting_out.as_slice() {
            [] => busy_text(name, self.busy.why, waited, holder, holders),
            nodes => (sitting_out_text(name, nodes, waited, holder), "restarted"),
        };
        stats.not_run_because(&text);
        let entry = match waited {
            None => ev("busy", text),
            Some(w) => ev("busy", text).ms(w),
        };
        let entry = entry.outcome("busy").field("reason", reason);
        self.log.notice(match self.busy.why {
            Refusal::Queued(n) => entry.field("queued", n),
            _ => entry,
        });
        Exit::Busy(self.config.busy_exit_code)
    }

    /// The error when fewer than a quorum answered by the end, and the exit.
    fn unavailable(&self, why: &str, stats: &Stats) -> Exit {
        let failed = self.lock.failed_nodes();
        let unset = if self.config.defaulted {
            format!(
                " (no --redis and no REDLOCK_REDIS given, so the default {} was tried)",
                cli::DEFAULT_NODE
            )
        } else {
            String::new()
        };
        let line = format!("cannot take lock '{}': {why}{unset}", self.config.name);
        stats.not_run_because(&line);
        let mut entry = ev("unavailable", line)
            .outcome("unavailable")
            .field("failed_nodes", failed.clone());
        if let Some(first) = failed.first() {
            entry = entry.node(first);
        }
        self.log.error(entry);
        Exit::Unavailable
    }

    /// The line that says we wait, for whom, and for how long at most; then
    /// again every WAIT_NOTE_EVERY.
    fn tell_waiting(&mut self, holder: Option<Holder>, holders: Option<String>) {
        let waited = self.start.elapsed();
        let by = match self.busy.why {
            _ if !self.busy.sitting_out.is_empty() => format!(
                " or may be: too few nodes may vote ({} restarted a moment ago{})",
                self.busy.sitting_out.len(),
                self.busy.back_in.map_or(String::new(), |d| format!(
                    ", the first counts again in {}",
                    log::span(d)
                ))
            ),
            Refusal::Slots(n) => format!(" by runs with --limit {n}"),
            Refusal::Plain => " by a run without --limit".to_string(),
            Refusal::Queued(n) => format!(
                ": {n} waiter{} queued ahead",
                if n == 1 { " is" } else { "s are" }
            ),
            _ => match holder
                .map(|h| format!("by {h}"))
                .or(holders)
                .or_else(|| self.lock.who_holds())
            {
                Some(h) if h.starts_with("shared") => format!(", {h}"),
                Some(h) => format!(" {h}"),
                None => String::new(),
            },
        };
        let limit = match self.config.wait {
            Wait::For(d) => format!("up to {}", humantime::format_duration(d)),
            _ => "for as long as it takes (--wait forever)".into(),
        };
        let name = &self.config.name;
        let text = if self.told.is_none() {
            format!("lock '{name}' is held{by}; waiting {limit}")
        } else {
            format!(
                "still waiting for lock '{name}' after {}, held{by}; waiting {limit}",
                humantime::format_duration(Duration::from_secs(waited.as_secs()))
            )
        };
        self.log
            .notice(ev("waiting", text).ms(waited).outcome("waiting"));
        self.told = Some(clock::now());
    }

    /// How long to wait for a release before the next try. A queued waiter
    /// (`queued`) is woken when its turn comes: until then it only renews its
    /// place, and looks again the moment a place ahead of it lapses (its
    /// waiter may be dead: nobody would wake us). A try that failed for want
    /// of nodes, or a waiter that does not queue, backs off.
    fn pause(&mut self, queued: bool) -> Duration {
        let pause = if queued {
            self.busy
                .lapse_ahead
                .map_or(PLACE_RENEW, |l| PLACE_RENEW.min(l + PAST_LAPSE))
        } else {
            redlock::backoff(self.attempt, rand::random_range(0.0..1.0))
        };
        // A node that sits out its restart grace counts again at a known
        // moment: the next try is then, whatever else wakes it sooner.
        let pause = match self.busy.back_in {
            Some(back) => pause.min(back + PAST_LAPSE),
            None => pause,
        };
        self.attempt = self.attempt.saturating_add(1);
        match self.until {
            Some(u) => pause.min(u.saturating_duration_since(clock::now())),
            None => pause,
        }
    }
}

/// The busy line's text, after `waited` (when the run waited at all), and
/// its reason for the JSON log.
fn busy_text(
    name: &str,
    why: Refusal,
    waited: Option<Duration>,
    holder: Option<&Holder>,
    holders: Option<&str>,
) -> (String, &'static str) {
    let (still, after) = match waited {
        Some(w) => ("still ", format!(" after waiting {w:.0?}")),
        None => ("", String::new()),
    };
    let held = format!("lock '{name}' is {still}held elsewhere{after}");
    match why {
        Refusal::Held => match (holder, holders) {
            (Some(h), _) => (format!("{held}, by {h}"), "held"),
            (None, Some(h)) => (format!("{held}, {h}"), "held"),
            (None, None) => (held, "held"),
        },
        Refusal::Plain => (format!("{held}, by a run without --limit"), "plain"),
        Refusal::Slots(n) => (format!("{held}, by runs with --limit {n}"), "slots"),
        Refusal::Readers(n) => (
            match holders {
                Some(h) => format!("{held}, {h}"),
                None => format!(
                    "{held}, shared by {n} --shared reader{}",
                    if n == 1 { "" } else { "s" }
                ),
            },
            "readers",
        ),
        Refusal::Queued(n) => (
            format!(
                "lock '{name}' is {still}busy{after}: {n} waiter{} queued",
                if n == 1 { "" } else { "s" }
            ),
            "queued",
        ),
        Refusal::Limit(n) => (format!("{held}, by runs with --limit {n}"), "limit"),
    }
}

/// The busy line when nodes that sit out their restart grace kept a quorum
/// from answering: each node as its error says it, and the holder where one
/// refused.
fn sitting_out_text(
    name: &str,
    nodes: &[String],
    waited: Option<Duration>,
    holder: Option<&Holder>,
) -> String {
    let (still, after) = match waited {
        Some(w) => ("still ", format!(" after waiting {w:.0?}")),
        None => ("", String::new()),
    };
    let held = holder.map_or(String::new(), |h| format!(" (held elsewhere, by {h})"));
    format!(
        "lock '{name}' is {still}busy{after}{held}: no quorum without nodes that restarted a \
         moment ago: {}",
        nodes.join("; ")
    )
}

/// The line for a lock taken after waiting: how long, and behind whom.
fn took_after_waiting(name: &str, waited: Duration, behind: &[String]) -> log::Entry {
    let whom = match behind {
        [] => String::new(),
        [one] => format!(", behind {one}"),
        [first, rest @ ..] => format!(
            ", behind {first} and {} other run{}",
            rest.len(),
            if rest.len() == 1 { "" } else { "s" }
        ),
    };
    ev(
        "waited",
        format!(
            "took lock '{name}' after waiting {}{whom}",
            log::span(waited)
        ),
    )
    .ms(waited)
}

/// How often a waiter says it is still waiting (a CI log must not just stall).
const WAIT_NOTE_EVERY: Duration = Duration::from_secs(60);

/// Sleeps up to `pause`, returning early (`true`) on a release announcement;
/// a signal ends the wait with 128+N (nothing is held while waiting).
fn pause_for(pause: Duration, rx: &Inbox) -> Result<bool, Exit> {
    let until = clock::now() + pause;
    loop {
        match rx.recv_timeout(until.saturating_duration_since(clock::now())) {
            Ok(Event::Signal(sig)) => return Err(Exit::Signal(sig)),
            Ok(Event::Wake) => {
                // Several nodes announce the same release: one try is enough.
                while let Some(e) = rx.try_next() {
                    if let Event::Signal(sig) = e {
                        return Err(Exit::Signal(sig));
                    }
                }
                return Ok(true);
            }
            Ok(_) => {}
            Err(_) => return Ok(false),
        }
    }
}
