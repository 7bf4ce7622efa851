//! A run once its nodes are known: the lock, the guard, the acquire, the
//! --once-per window, the command's attempts under the heartbeat, and the
//! release or --hold with the run's history record.

use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::mpsc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::cli::{Config, Leftovers};
use crate::clock::{self, Stamp};
use crate::exit::Exit;
use crate::lock::end::Ending;
use crate::lock::node::{self, Nodes};
use crate::lock::redlock::{self, Verdict};
use crate::lock::{Held, Lock, NodeOutcome, record};
use crate::log::{Log, ev};
use crate::process::attempts::{self, Attempts, Ran};
use crate::process::events::{Event, Events};
use crate::process::guard::{Guard, Orders};
use crate::process::heartbeat::heartbeat;
use crate::process::spawn as child;
use crate::process::{self, Job};
use crate::report::{self, Stats};
use crate::signals;
use crate::text::os_message;

use super::wait::acquire;

/// The lock over the configured nodes, then the run under it: the nodes'
/// parts go into the report and the closing warning, however it ended.
pub(super) fn run_locked(
    config: &Config,
    stats: &Arc<Stats>,
    blocked: signals::Blocked,
    guard: Option<Guard>,
    on_start: &dyn Fn(),
) -> Exit {
    let log = Log::new(config.verbosity, config.log_format, &config.name);
    let nodes = match Nodes::new(&config.urls, &config.options) {
        Ok(n) => n,
        Err(msg) => {
            log.error(msg.to_string());
            return Exit::Usage;
        }
    };
    // Once the guard is forked (a host name may start a resolver thread):
    // the handshakes then go on while the holder record is made.
    if guard.is_some() {
        nodes.connect();
    }
    let lock = match Lock::new(
        nodes,
        config.keys.clone(),
        config.ttl,
        config.node_timeout,
        record::holder(&config.program, config.record_command, config.ttl),
        config.taking(),
    ) {
        Ok(l) => Arc::new(l),
        Err(e) => {
            log.error(e.to_string());
            stats.not_run_because(&e.to_string());
            return Exit::Unavailable;
        }
    };
    let exit = take_and_run(&lock, config, stats, blocked, guard, &log, on_start);
    // Every node's part, replies that came after a verdict included, however
    // the run ended: the report's counts and the closing warning.
    let outcomes = lock.outcomes(&log);
    if !matches!(exit, Exit::Unavailable | Exit::Usage) && lock.quorum_agreed() {
        warn_unreachable(&outcomes, exit == Exit::Lost, &log);
    }
    *stats.nodes.lock().unwrap_or_else(|p| p.into_inner()) = outcomes;
    stats.reached_nodes.store(lock.tried(), Relaxed);
    exit
}

/// One line per node that did not answer, or failed, in a run that did not
/// end as "unavailable" (whose error names the nodes already) and where a
/// quorum agreed: the lock was taken, or found busy, without it, which is
/// what a quorum is for, but somebody should look at it. When the lock was
/// lost since (`lost`), the quorum did not do without these nodes after
/// all: they are why. A node that answered again after it failed (a
/// connection reset, and the next request went through) was not done
/// without: that is said instead. Silenced by -q.
fn warn_unreachable(outcomes: &[NodeOutcome], lost: bool, log: &Log) {
    for o in outcomes {
        // Said when the lock was taken without it (see `Lock::judge`), or
        // in the busy line.
        if matches!(o.fared, node::Fared::SatOut(_)) {
            continue;
        }
        let Some(why) = o.failure() else {
            continue;
        };
        let said = match (lost, o.recovered) {
            (true, _) => "one of the nodes the lock was lost with",
            (false, true) => "it answered again after",
            (false, false) => "the quorum did without it",
        };
        log.notice(
            ev("unreachable", format!("warning: {why} ({said})"))
                .node(&o.name)
                .outcome("unreachable"),
        );
    }
}

/// Everything after the nodes are known: the guard, the acquire, the
/// command, the release.
fn take_and_run(
    lock: &Arc<Lock>,
    config: &Config,
    stats: &Arc<Stats>,
    blocked: signals::Blocked,
    guard: Option<Guard>,
    log: &Log,
    on_start: &dyn Fn(),
) -> Exit {
    let log = *log;
    let Ready {
        mut guard,
        contain,
        terminal,
    } = match ready_the_guard(config, &blocked, guard, log) {
        Ok(ready) => ready,
        Err(exit) => return exit,
    };
    // After the fork: naming a host may start a resolver thread.
    if let Some(msg) = lock.same_server() {
        log.error(msg);
        return Exit::Usage;
    }
    if config.options.tls_insecure {
        log.error(ev(
            "tls-insecure",
            "--tls-insecure: certificates and host names of rediss:// nodes are not checked",
        ));
    }
    // Before acquiring: a TERM that arrives mid-acquire must still lead to a
    // release rather than kill us with the lock set.
    let (tx, rx) = match Events::new(blocked) {
        Ok(channel) => channel,
        Err(e) => {
            log.error(format!("cannot watch signals: {}", os_message(&e)));
            return Exit::Unavailable;
        }
    };
    let held = match acquire(lock, config, &tx, &rx, &log, stats) {
        Ok(held) => held,
        Err(exit) => return exit,
    };
    stats.acquired.store(true, Relaxed);
    let taken_at = SystemTime::now();
    let window = match check_once_per(lock, config, &log, stats) {
        Ok(w) => w,
        Err(exit) => {
            // Skipped, not run: nothing for the history, and the report
            // says the run did not get the lock for its command.
            let already_ran = exit != Exit::Unavailable;
            stats.already_ran.store(already_ran, Relaxed);
            stats.acquired.store(!already_ran, Relaxed);
            lock.release(&log);
            return exit;
        }
    };
    let taken = Taken {
        at: taken_at,
        since: held.since,
        fence: held.fence,
        window,
    };
    let job = job_of(config);
    let ran = run_held(
        lock,
        held,
        config.limit.is_some(),
        &mut Attempts {
            guard: &mut guard,
            config: &job,
            env: Vec::new(),
            contain,
            terminal,
            tx: &tx,
            rx: &rx,
            log,
            stats,
            on_start,
        },
    );
    drop(guard);
    let_go(lock, config, ran, &taken, log)
}

/// The guard, ready to start the command, and how it will.
struct Ready {
    guard: Guard,
    /// The whole process tree is tracked.
    contain: bool,
    /// The command gets the terminal's foreground.
    terminal: bool,
}

/// Makes this process the tree's subreaper, scrubs the secrets from its
/// environment, and forks the guard (unless it was forked at the start) and
/// tells it what to run. Done while this process has one thread (see
/// `guard`): every later step may start threads.
fn ready_the_guard(
    config: &Config,
    blocked: &signals::Blocked,
    guard: Option<Guard>,
    log: Log,
) -> Result<Ready, Exit> {
    let contain = containment();
    // Orphans of a guard that was killed on its own come here, not to init,
    // where nothing would stop them. Linux has had it since 3.4 (as the
    // guard needs it too): a failure ends the run before the lock is taken.
    if contain && let Err(e) = rustix::process::set_child_subreaper(Some(rustix::process::getpid()))
    {
        log.error(format!(
            "cannot become a subreaper: {}",
            os_message(&e.into())
        ));
        return Err(Exit::Unavailable);
    }
    let terminal = child::owns_terminal();
    let remove = secret_env();
    // /proc/<pid>/environ shows the environment this process was started
    // with, which the command can read (the guard scrubs its own copy).
    child::scrub_environ(&remove);
    let orders = Orders {
        program: config.program.clone(),
        remove: remove.iter().map(|n| n.to_string()).collect(),
        terminal,
        contain,
        again: config.retry > 0,
        kill: process::kill_schedule(config.ttl),
    };
    let guard = match guard {
        Some(g) => Ok(g),
        None => Guard::fork(blocked.original()),
    };
    match guard.and_then(|mut g| g.configure(&orders).map(|()| g)) {
        Ok(guard) => Ok(Ready {
            guard,
            contain,
            terminal,
        }),
        Err(e) => {
            log.error(format!(
                "cannot start the guard process: {}",
                os_message(&e)
            ));
            Err(Exit::Unavailable)
        }
    }
}

/// What the run knew when it took the lock.
struct Taken {
    /// Wall clock: the run's start in its history record when no attempt
    /// started.
    at: SystemTime,
    /// When the acquire round started: --hold counts from it.
    since: Stamp,
    fence: Option<u64>,
    /// The --once-per window this run used.
    window: Option<u64>,
}

/// After the attempts: the lock released, or held (--hold), or left to
/// expire when processes of the command may still run; the --once-per
/// window given back when the command did not run (or, with
/// --once-per-success, failed); the run's history record written.
fn let_go(lock: &Lock, config: &Config, ran: Ran, taken: &Taken, log: Log) -> Exit {
    let Ran {
        exit,
        attempts,
        started_at,
        duration,
        leftover,
        ..
    } = ran;
    if leftover {
        // Deleting the key now would let another holder start beside a
        // process of ours: the key expires by its TTL instead.
        log.error(
            ev(
                "not-released",
                format!(
                    "lock '{}' is not released: processes of the command may still be \
                     running; it expires by its TTL",
                    config.name
                ),
            )
            .outcome("not-released"),
        );
        return exit;
    }
    if let Some(start) = taken.window
        && (attempts == 0 || (config.once_per_success && exit != Exit::Command(0)))
    {
        lock.unmark_once(start, &log);
    }
    let mut record = crate::run_record::Record::of_this_run(
        lock.token(),
        if attempts == 0 { taken.at } else { started_at },
        duration,
        exit,
        attempts,
        taken.fence,
        config.shared,
    );
    record.window_s = config.once_per;
    // --hold keeps a lock whose command ran; one that never started (or
    // could not be watched) is given back for the next firing to try.
    let ran_to_its_end = attempts > 0 && !matches!(exit, Exit::Lost | Exit::Unavailable);
    let ending = match config
        .hold
        .and_then(|h| h.checked_sub(taken.since.elapsed()))
    {
        Some(left) if ran_to_its_end && !left.is_zero() => Ending::Hold {
            left,
            exit_code: exit.code(),
        },
        _ => Ending::Release,
    };
    lock.end(ending, Some(record), &log);
    exit
}

/// The lock is held: checks that a stop could still come in time, then the
/// command's attempts under the heartbeat. Releases nothing.
fn run_held(lock: &Arc<Lock>, held: Held, slotted: bool, a: &mut Attempts) -> Ran {
    let (config, log) = (a.config, a.log);
    let Held {
        since,
        deadline,
        fence,
    } = held;
    let not_run = |exit| Ran {
        exit,
        attempts: 0,
        started_at: SystemTime::now(),
        duration: Duration::ZERO,
        leftover: false,
        signals: Vec::new(),
    };
    if let Some(sig) = std::iter::from_fn(|| a.rx.try_next()).find_map(|e| match e {
        Event::Signal(s) => Some(s),
        _ => None,
    }) {
        log.info(|| format!("signal {sig} before the command started; releasing"));
        return not_run(Exit::Signal(sig));
    }
    // The fence commit and the marker took time off the validity: the
    // command may start only if a stop could still come in time.
    let stop_window = redlock::kill_guard(config.ttl) + config.kill_after;
    let left = deadline.saturating_duration_since(clock::now());
    if left <= stop_window {
        let line = format!(
            "lock '{}' has only {left:.0?} of its validity left after {:.0?} of acquiring, less \
             than the {stop_window:.0?} a stop of the command needs (--kill-after {} and a {} \
             guard); the nodes answer too slowly for --ttl {}: raise --ttl",
            config.name,
            since.elapsed(),
            humantime::format_duration(config.kill_after),
            humantime::format_duration(redlock::kill_guard(config.ttl)),
            humantime::format_duration(config.ttl),
        );
        a.stats.not_run_because(&line);
        log.error(ev("unavailable", line).outcome("unavailable"));
        return not_run(Exit::Unavailable);
    }

    a.env = vec![
        ("REDLOCK_KEY", config.name.clone()),
        ("REDLOCK_TOKEN", lock.token().to_string()),
    ];
    if let Some(t) = fence {
        a.env.push(("REDLOCK_FENCING_TOKEN", t.to_string()));
    }
    if slotted {
        a.env.push(("REDLOCK_SLOT", lock.slot().to_string()));
    }
    let (stop_tx, stop_rx) = mpsc::channel();
    let mut heartbeat = heartbeat(
        lock,
        config,
        &Held {
            since,
            deadline,
            fence: None,
        },
        a.tx.clone(),
        stop_rx,
        log,
        Arc::clone(a.stats),
    );
    let ran = attempts::run_with_retries(a, deadline, &mut heartbeat);
    a.stats
        .note_signals(ran.signals.iter().map(|s| report::Signal {
            by: if s.by_guard { "guard" } else { "redlock-run" },
            signal: signals::name(s.signal),
            processes: s.processes,
            before_deadline_ms: s.lead_ns as f64 / 1e6,
        }));
    if a.terminal {
        // Normally done when the command exits; here too for the paths that
        // end supervision without that.
        child::take_terminal_back();
    }
    drop(stop_tx);
    // At most the round in flight: a round limit.
    heartbeat.join();
    ran
}

/// The settings the process side works with, out of the run's.
fn job_of(config: &Config) -> Job {
    Job {
        name: config.name.clone(),
        program: config.program.clone(),
        ttl: config.ttl,
        node_timeout: config.node_timeout,
        kill_after: config.kill_after,
        max_runtime: config.max_runtime,
        retry: config.retry,
        retry_delay: config.retry_delay,
        kill_leftovers: config.leftovers == Leftovers::Kill,
    }
}

/// Whether the whole process tree is tracked. Always, except in test builds
/// asked not to, so that the safety tests can show that their checks see the
/// overlaps containment prevents.
fn containment() -> bool {
    #[cfg(feature = "test-hooks")]
    if std::env::var_os("REDLOCK_TEST_UNCONTAINED").is_some() {
        return false;
    }
    true
}

/// With --once-per or --once-per-success: the first lock holder in a window
/// sets its marker and runs; later ones skip. (With --once-per-success the
/// marker is taken back when the command does not succeed.)
/// `Ok(Some(start))`: marked the window starting at `start`; `Err(exit)`: do
/// not run.
fn check_once_per(
    lock: &Lock,
    config: &Config,
    log: &Log,
    stats: &Stats,
) -> Result<Option<u64>, Exit> {
    let Some(window) = config.once_per else {
        return Ok(None);
    };
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let start = now / window * window;
    // The marker outlives its window by a window, so hosts whose clocks lag
    // still find it.
    let ttl = Duration::from_secs(window.saturating_mul(2));
    let flag = if config.once_per_success {
        "--once-per-success"
    } else {
        "--once-per"
    };
    match lock.mark_once(start, ttl, log) {
        Verdict::Quorum => Ok(Some(start)),
        Verdict::Refused => {
            let window = window_text(start, window);
            let line = if config.once_per_success {
                // The marker of a run still finishing looks the same: one
                // whose lock was lost takes it back when it ends.
                format!(
                    "lock '{}' already succeeded in this window ({window}), or a run of it is \
                     still finishing",
                    config.name
                )
            } else {
                format!(
                    "lock '{}' already ran in this window ({window})",
                    config.name
                )
            };
            stats.not_run_because(&line);
            log.notice(line);
            Err(Exit::Busy(config.busy_exit_code))
        }
        Verdict::Unavailable => {
            let line = format!(
                "cannot record the {flag} window for '{}': fewer than a quorum of nodes answered",
                config.name
            );
            stats.not_run_because(&line);
            log.error(line);
            Err(Exit::Unavailable)
        }
    }
}

/// A --once-per window that starts at unix time `start` and lasts `window`
/// seconds, in UTC: `from 2026-12-02T05:00:00Z; the next opens at
/// 2026-12-02T06:00:00Z`.
fn window_text(start: u64, window: u64) -> String {
    let at = |secs: u64| {
        // humantime writes years up to 9999 (and fails past them).
        if secs < 253_402_300_800 {
            humantime::format_rfc3339_seconds(UNIX_EPOCH + Duration::from_secs(secs)).to_string()
        } else {
            format!("unix time {secs}")
        }
    };
    format!(
        "from {}; the next opens at {}",
        at(start),
        at(start.saturating_add(window))
    )
}

/// Environment variables that may carry a password (or the ping URL, whose
/// path is one): the command and --on-failure never see them.
pub(super) fn secret_env() -> Vec<&'static str> {
    let mut remove = vec![
        "REDLOCK_PASSWORD",
        "REDLOCK_SENTINEL_PASSWORD",
        "REDLOCK_PING",
    ];
    // Any user-info at all (a password may hold a comma, which splits the
    // list) or a `pass=` that redaction would hide.
    let secret = |v: &str| v.contains('@') || node::redact(v) != v;
    if std::env::var_os("REDLOCK_REDIS").is_some_and(|v| {
        let v = v.to_string_lossy();
        secret(&v) || v.split(',').any(secret)
    }) {
        remove.push("REDLOCK_REDIS");
    }
    remove
}

#[cfg(test)]
mod tests {
    use super::window_text;

    #[test]
    fn once_per_windows_are_utc_times() {
        assert_eq!(
            window_text(1_796_187_600, 3600),
            "from 2026-12-02T05:00:00Z; the next opens at 2026-12-02T06:00:00Z"
        );
        assert!(window_text(u64::MAX, 3600).contains("unix time"));
    }
}
