//! One run: parse, acquire (waiting per --jitter and --wait), check
//! --once-per(-success), run the command's attempts (`attempts`), release or
//! hold with the run's history record, write --report and --metrics-file,
//! and pick the exit status.

use std::ffi::OsString;
use std::io;
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::mpsc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use clap::FromArgMatches;

use crate::admin::Ask;
use crate::cli::{self, Cli, Config, Leftovers, Wait};
use crate::clock::{self, Stamp};
use crate::exit::Exit;
use crate::lock::end::Ending;
use crate::lock::node::Queue;
use crate::lock::node::Refusal;
use crate::lock::node::{self, Nodes};
use crate::lock::redlock::{self, Verdict};
use crate::lock::{Acquired, Busy, Held, Holder, Lock, NodeOutcome, record};
use crate::log::{self, Log, ev};
use crate::outcome::Outcome;
use crate::process::Job;
use crate::process::attempts::{self, Attempts, Ran};
use crate::process::events::{Event, Events, Inbox};
use crate::process::guard::{Guard, Orders};
use crate::process::heartbeat::heartbeat;
use crate::process::spawn as child;
use crate::report::{self, Stats};
use crate::signals;
use crate::text::os_message;

pub fn main(args: impl IntoIterator<Item = OsString>) -> Exit {
    // First of all: a signal that arrives from here on is passed on (or
    // acted on) rather than killing us with a lock held. The signal thread
    // that takes them starts later; they wait, pending, until then.
    let blocked = signals::block();
    let args: Vec<OsString> = args.into_iter().collect();
    // Next, while this process is small: the guard (see `guard`). A fork
    // that fails here is tried again, and reported, where the guard is
    // needed.
    let guard = cli::may_run_a_command(&args)
        .then(|| Guard::fork(blocked.original()).ok())
        .flatten();
    let format = log_format_in(&args);
    if let Some(msg) = cli::misplaced_subcommand(&args) {
        Log::new(0, format, "").error(ev("usage", msg).outcome("usage"));
        return Exit::Usage;
    }
    // The configuration file's settings, as options, where the arguments
    // give none (see `config`); `args` stay as given, for `check` and
    // `config`, which show where each setting came from.
    let applied = match crate::config::apply(args.clone()) {
        Ok(a) => a,
        Err(e) => {
            Log::new(0, format, "").error(ev("usage", e.to_string()).outcome("usage"));
            return Exit::Usage;
        }
    };
    let format = log_format_in(&applied.args);
    // The parser and its matches are freed at once: freeing them costs
    // instructions, but the run's later allocations then reuse their memory
    // instead of touching fresh pages, and a first touch costs a page fault
    // of microseconds (wall time and page faults measured both ways).
    let parsed = {
        let mut parser = cli::parser();
        parser
            .try_get_matches_from_mut(&applied.args)
            .and_then(|m| Cli::from_arg_matches(&m))
    };
    let cli = match parsed {
        Ok(cli) => cli,
        Err(e) => return clap_exit(e, near_subcommand(&args), format),
    };
    if let Some(admin) = cli.admin {
        // status and unlock hold nothing: signals act on them as usual.
        blocked.unblock();
        return run_admin(&admin, &args);
    }
    let config = match cli.into_config() {
        Ok(c) => c,
        Err(cli::Unusable::Usage(msg)) => {
            Log::new(0, format, "").error(ev("usage", msg).outcome("usage"));
            return Exit::Usage;
        }
        // Told to stop while an option's file was waited on: nothing is
        // held, so it stops at once, as a signal ends a wait for the lock.
        Err(cli::Unusable::Signal(sig)) => return Exit::Signal(sig),
    };
    run_job(&config, blocked, guard)
}

/// Help and version go to stdout with status 0; every other clap error becomes
/// one line on stderr and status 64.
fn clap_exit(e: clap::Error, near: Option<String>, format: log::Format) -> Exit {
    use clap::error::ErrorKind;
    if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) {
        let _ = e.print();
        return Exit::Command(0);
    }
    // A mistyped subcommand reads as a command to run, and the error would
    // be about something else (--key missing): say what was meant instead.
    let text = near.unwrap_or_else(|| format!("{} (try --help)", one_line(&e.to_string())));
    Log::new(0, format, "").error(ev("usage", text).outcome("usage"));
    Exit::Usage
}

/// "'statsu' is not a subcommand; did you mean 'status'? ...", when the first
/// word of the command line is a near miss of a subcommand.
fn near_subcommand(args: &[OsString]) -> Option<String> {
    let word = args.get(1)?.to_str()?;
    let meant = cli::near_subcommand(word)?;
    Some(format!(
        "'{word}' is not a subcommand; did you mean '{meant}'? (to run a program of that name, \
         put it after --)"
    ))
}

/// `--log-format json` as given on the command line, read before it is
/// parsed, so that a usage error is a JSON line too for whoever asked.
fn log_format_in(args: &[OsString]) -> log::Format {
    let words: Vec<&str> = args.iter().filter_map(|a| a.to_str()).collect();
    let end = words.iter().position(|w| *w == "--").unwrap_or(words.len());
    let json = words[..end]
        .windows(2)
        .any(|w| w[0] == "--log-format" && w[1] == "json")
        || words[..end].contains(&"--log-format=json");
    if json {
        log::Format::Json
    } else {
        log::Format::Text
    }
}

/// Folds clap's multi-line message into one line, dropping usage and tips
/// but for a near miss's ("a similar argument exists: '--once-per'"), which
/// says what was meant.
fn one_line(msg: &str) -> String {
    msg.lines()
        .take_while(|l| !l.starts_with("Usage:") && !l.starts_with("For more information"))
        .map(str::trim)
        .filter(|l| !l.is_empty() && (!l.starts_with("tip:") || l.contains("similar")))
        .map(|l| match l.split_once("a similar argument exists: ") {
            Some((_, arg)) => format!("(did you mean {arg}?)"),
            None => l.to_string(),
        })
        .collect::<Vec<_>>()
        .join(" ")
        .trim_start_matches("error: ")
        .to_string()
}

/// A run of the command under the lock, as `config` says: its output files checked
/// first, and the report and metrics written after.
fn run_job(config: &Config, blocked: signals::Blocked, guard: Option<Guard>) -> Exit {
    // A report or metrics file that cannot be written is a bad argument: say
    // so before the lock is taken and the job runs, not after.
    type Check = fn(&std::path::Path) -> io::Result<()>;
    for (flag, path, check) in [
        (
            "--report",
            &config.report,
            crate::files::check_writable as Check,
        ),
        (
            "--metrics-file",
            &config.metrics_file,
            crate::metrics::check,
        ),
    ] {
        if let Some(path) = path
            && let Err(e) = check(path)
        {
            Log::new(0, config.log_format, &config.name).error(
                ev(
                    "usage",
                    format!("cannot write {flag} {}: {}", path.display(), os_message(&e)),
                )
                .outcome("usage"),
            );
            return Exit::Usage;
        }
    }
    let started = clock::now();
    let started_at = SystemTime::now();
    let stats = Arc::new(Stats::default());
    let exit = run_locked(config, &stats, blocked, guard);
    let log = Log::new(config.verbosity, config.log_format, &config.name);
    log.end(|| {
        let outcome = Outcome::of(exit, stats.already_ran.load(Relaxed)).word();
        ev(
            "exit",
            format!(
                "exit {} ({outcome}) after {:.0?}",
                exit.code(),
                started.elapsed()
            ),
        )
        .ms(started.elapsed())
        .outcome(outcome)
        .field("exit_code", exit.code())
        .field(
            "duration_ms",
            u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
        )
        .field("lock", if config.shared { "shared" } else { "exclusive" })
    });
    // A warning, as for the metrics file: the job's own status is what cron
    // and systemd must see.
    if let Some(path) = &config.report
        && let Err(e) = report::write(
            path,
            &report::Lock {
                name: &config.name,
                keys: &config.keys,
                shared: config.shared,
            },
            &stats,
            exit,
            started_at,
            started.elapsed(),
        )
    {
        Log::new(0, log::Format::Text, "").error(format!(
            "warning: cannot write --report {}: {}",
            path.display(),
            os_message(&e)
        ));
    }
    if let Some(path) = &config.metrics_file {
        record_metrics(path, config, &stats, exit, started_at, started.elapsed());
    }
    exit
}

/// `--metrics-file`: last of all, after the lock is released, so that a slow
/// file system never holds a lock. A failure is a warning: the job's own
/// status is what cron and systemd must see.
fn record_metrics(
    path: &std::path::Path,
    config: &Config,
    stats: &Stats,
    exit: Exit,
    started_at: SystemTime,
    duration: Duration,
) {
    let already_ran = stats.already_ran.load(Relaxed);
    let nodes = stats
        .reached_nodes
        .load(Relaxed)
        .then(|| crate::metrics::Nodes::of(&stats.nodes.lock().unwrap_or_else(|p| p.into_inner())));
    let Some(mut run) = crate::metrics::Run::from_exit(
        &config.name,
        exit,
        already_ran,
        started_at,
        duration,
        nodes,
    ) else {
        return;
    };
    run.shared = config.shared;
    let log = Log::new(0, log::Format::Text, "");
    match crate::metrics::record(path, &run) {
        Ok(recorded) => {
            if let Some(warning) = recorded.warning(path) {
                log.error(format!("warning: --metrics-file {warning}"));
            }
        }
        Err(e) => log.error(format!(
            "warning: cannot write --metrics-file: {}",
            os_message(&e)
        )),
    }
}

/// A subcommand: the lock and its nodes from the command line, then the
/// subcommand itself.
fn run_admin(admin: &cli::Admin, given: &[OsString]) -> Exit {
    // A run's settings, the configuration file's included: each reads them
    // itself, from the arguments as given.
    match admin {
        cli::Admin::Check(a) => return crate::admin::check::run(a, given),
        cli::Admin::Config(a) => return crate::admin::config::run(a, given),
        _ => {}
    }
    let target = admin.target();
    if target.tls_insecure {
        eprintln!(
            "redlock-run: --tls-insecure: certificates and host names of rediss:// nodes are not \
             checked"
        );
    }
    let (subject, nodes) = match target.resolve() {
        Ok(r) => {
            let mut options = r.options;
            options.timeout = target.node_timeout.unwrap_or_default();
            let subject = crate::admin::Subject {
                name: r.name,
                keys: r.keys,
            };
            (subject, crate::admin::nodes(&r.urls, options))
        }
        Err(e) => {
            eprintln!("redlock-run: {e}");
            return Exit::Usage;
        }
    };
    let Some(ask) = ask(admin) else {
        return Exit::Usage;
    };
    match nodes {
        Ok(nodes) => crate::admin::dispatch(&ask, &subject, &nodes),
        Err(msg) => {
            eprintln!("redlock-run: {msg}");
            Exit::Usage
        }
    }
}

/// What the subcommand is asked, in the subcommands' own terms; None for
/// `check` and `config`, which read a run's settings themselves.
fn ask(admin: &cli::Admin) -> Option<Ask> {
    use cli::Admin;
    Some(match admin {
        Admin::Status(a) => Ask::Status {
            json: a.json,
            limit: a.limit,
            keys: a.keys,
        },
        Admin::Unlock(a) => Ask::Unlock {
            token: a.token.clone(),
        },
        Admin::History(a) => Ask::History {
            json: a.json,
            count: a.count,
        },
        Admin::Forget(a) => Ask::Forget { force: a.force },
        Admin::Check(_) | Admin::Config(_) => return None,
    })
}

fn run_locked(
    config: &Config,
    stats: &Arc<Stats>,
    blocked: signals::Blocked,
    guard: Option<Guard>,
) -> Exit {
    let log = Log::new(config.verbosity, config.log_format, &config.name);
    let nodes = match Nodes::new(&config.urls, &config.options) {
        Ok(n) => n,
        Err(msg) => {
            log.error(msg.to_string());
            return Exit::Usage;
        }
    };
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
            return Exit::Unavailable;
        }
    };
    let exit = take_and_run(&lock, config, stats, blocked, guard, &log);
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
/// all: they are why. Silenced by -q.
fn warn_unreachable(outcomes: &[NodeOutcome], lost: bool, log: &Log) {
    let said = if lost {
        "one of the nodes the lock was lost with"
    } else {
        "the quorum did without it"
    };
    for o in outcomes {
        let Some(why) = o.failure() else {
            continue;
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
) -> Exit {
    let log = *log;
    // The guard, if it was not forked at the start, is forked now, while
    // this process has one thread (see `guard`): every later step may start
    // threads.
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
        return Exit::Unavailable;
    }
    let terminal = child::owns_terminal();
    let remove = secret_env();
    // /proc/<pid>/environ shows the environment this process was started
    // with, which the command can read (the guard scrubs its own copy).
    child::scrub_environ(&remove);
    let spec = Orders {
        program: config.program.clone(),
        remove: remove.iter().map(|n| n.to_string()).collect(),
        terminal,
        contain,
        again: config.retry > 0,
        kill_guard: redlock::kill_guard(config.ttl),
    };
    let guard = match guard {
        Some(g) => Ok(g),
        None => Guard::fork(blocked.original()),
    };
    let mut guard = match guard.and_then(|mut g| g.configure(&spec).map(|()| g)) {
        Ok(g) => g,
        Err(e) => {
            log.error(format!(
                "cannot start the guard process: {}",
                os_message(&e)
            ));
            return Exit::Unavailable;
        }
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
    let window = match check_once_per(lock, config, &log) {
        Ok(w) => w,
        Err(exit) => {
            // Skipped, not run: nothing for the history.
            stats.already_ran.store(exit != Exit::Unavailable, Relaxed);
            lock.release(&log);
            return exit;
        }
    };
    let (since, fence) = (held.since, held.fence);
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
        },
    );
    drop(guard);
    let Ran {
        exit,
        attempts,
        started_at,
        duration,
        leftover,
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
    // The window stays used only by a run that started its command and, with
    // --once-per-success, whose command succeeded.
    if let Some(start) = window
        && (attempts == 0 || (config.once_per_success && exit != Exit::Command(0)))
    {
        lock.unmark_once(start, &log);
    }
    let mut record = crate::run_record::Record::of_this_run(
        lock.token(),
        if attempts == 0 { taken_at } else { started_at },
        duration,
        exit,
        attempts,
        fence,
        config.shared,
    );
    record.window_s = config.once_per;
    // --hold keeps a lock whose command ran; one that never started (or
    // could not be watched) is given back for the next firing to try.
    let ran_to_its_end = attempts > 0 && !matches!(exit, Exit::Lost | Exit::Unavailable);
    let ending = match config.hold.and_then(|h| h.checked_sub(since.elapsed())) {
        Some(left) if ran_to_its_end && !left.is_zero() => Ending::Hold {
            left,
            exit_code: exit.code(),
        },
        _ => Ending::Release,
    };
    lock.end(ending, record.to_json(), &log);
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
        log.error(
            ev(
                "unavailable",
                format!(
                    "lock '{}' has only {left:.0?} of its validity left after {:.0?} of \
                     acquiring, less than the {stop_window:.0?} a stop of the command needs \
                     (--kill-after {} and a {} guard); the nodes answer too slowly for --ttl {}: \
                     raise --ttl",
                    config.name,
                    since.elapsed(),
                    humantime::format_duration(config.kill_after),
                    humantime::format_duration(redlock::kill_guard(config.ttl)),
                    humantime::format_duration(config.ttl),
                ),
            )
            .outcome("unavailable"),
        );
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

/// Takes the lock, waiting per --jitter and --wait. Returns when it was taken
/// and its validity deadline, or the exit status when it was not.
fn acquire(
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
    let result = wait_loop(lock, config, tx, rx, log, stats, start, until, &queue);
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

/// The attempts of `acquire`, until the lock is taken or the wait is over.
#[allow(clippy::too_many_arguments)]
fn wait_loop(
    lock: &Lock,
    config: &Config,
    tx: &Events,
    rx: &Inbox,
    log: &Log,
    stats: &Stats,
    start: Stamp,
    until: Option<Stamp>,
    queue: &Queue,
) -> Result<Held, Exit> {
    let fair = matches!(queue, Queue::Join { .. });
    let mut watching = false;
    let mut attempt = 0u32;
    let mut busy = Busy {
        why: Refusal::Held,
        lapse_ahead: None,
    };
    // When a CI log last said that we are waiting.
    let mut told: Option<Stamp> = None;
    // The holders seen while waiting (`user@host pid N`), first seen first.
    let mut behind: Vec<String> = Vec::new();
    // A try failed (busy, or not enough nodes) before the one that took it.
    let mut waited = false;
    loop {
        let tried = clock::now();
        stats.waited_ms.store(
            u64::try_from(tried.saturating_duration_since(start).as_millis()).unwrap_or(u64::MAX),
            Relaxed,
        );
        let failure = match lock.acquire(queue, log) {
            Acquired::Yes(held) => {
                if waited {
                    log.notice(took_after_waiting(&config.name, start.elapsed(), &behind));
                } else if config.wait != Wait::Once {
                    log.info(|| {
                        format!("waited {:.0?} for lock '{}'", start.elapsed(), config.name)
                    });
                }
                return Ok(held);
            }
            Acquired::Busy(Busy {
                why: Refusal::Limit(theirs),
                ..
            }) => {
                log.error(
                    ev(
                        "usage",
                        format!(
                            "lock '{}' is held by runs with --limit {theirs}, and this run \
                             asks for --limit {}: every run of one name needs the same \
                             --limit (a plain run and --limit runs exclude each other)",
                            config.name,
                            config
                                .limit
                                .map_or("none (a plain lock)".into(), |n| n.to_string())
                        ),
                    )
                    .outcome("usage"),
                );
                return Err(Exit::Usage);
            }
            Acquired::SameServer(msg) => {
                log.error(ev("usage", msg).outcome("usage"));
                return Err(Exit::Usage);
            }
            // No later try can do better: not retried under --wait.
            Acquired::FenceExhausted => {
                log.error(
                    ev(
                        "unavailable",
                        format!(
                            "cannot take lock '{}': its fence counter is at its maximum, {}, \
                             the largest integer Redis holds, so no fencing token above it \
                             exists; the command was not run",
                            config.name,
                            crate::lock::FENCE_MAX
                        ),
                    )
                    .outcome("unavailable"),
                );
                return Err(Exit::Unavailable);
            }
            Acquired::Busy(b) => {
                busy = b;
                None
            }
            Acquired::Unavailable(why) => Some(why),
        };
        waited = true;
        // Who holds it came with the refusal: no request of its own.
        let holder = if failure.is_none() && !log.is_quiet() {
            lock.busy_holder()
        } else {
            None
        };
        // Slots and readers are named by a look of its own, once: for the
        // busy line of a single try, or the first line of a wait.
        let holders = (failure.is_none()
            && !log.is_quiet()
            && holder.is_none()
            && told.is_none()
            && matches!(busy.why, Refusal::Held | Refusal::Readers(_)))
        .then(|| lock.who_holds())
        .flatten();
        if let Some(h) = &holder
            && !behind.contains(&h.who)
        {
            behind.push(h.who.clone());
        }
        if until.is_some_and(|u| clock::now() >= u) {
            return Err(match failure {
                None => {
                    let waited = (config.wait != Wait::Once).then(|| start.elapsed());
                    let (text, reason) = busy_text(
                        &config.name,
                        busy.why,
                        waited,
                        holder.as_ref(),
                        holders.as_deref(),
                    );
                    let entry = match waited {
                        None => ev("busy", text),
                        Some(w) => ev("busy", text).ms(w),
                    };
                    let entry = entry.outcome("busy").field("reason", reason);
                    log.notice(match busy.why {
                        Refusal::Queued(n) => entry.field("queued", n),
                        _ => entry,
                    });
                    Exit::Busy(config.busy_exit_code)
                }
                Some(why) => {
                    let failed = lock.failed_nodes();
                    let unset = if config.defaulted {
                        format!(
                            " (no --redis and no REDLOCK_REDIS given, so the default {} was \
                             tried)",
                            cli::DEFAULT_NODE
                        )
                    } else {
                        String::new()
                    };
                    let mut entry = ev(
                        "unavailable",
                        format!("cannot take lock '{}': {why}{unset}", config.name),
                    )
                    .outcome("unavailable")
                    .field("failed_nodes", failed.clone());
                    if let Some(first) = failed.first() {
                        entry = entry.node(first);
                    }
                    log.error(entry);
                    Exit::Unavailable
                }
            });
        }
        // Under -q the note is not shown: no lookup of the holder for it
        // (a request to every node).
        if failure.is_none()
            && !log.is_quiet()
            && told.is_none_or(|t| t.elapsed() >= WAIT_NOTE_EVERY)
        {
            let waited = start.elapsed();
            let by = match busy.why {
                Refusal::Slots(n) => format!(" by runs with --limit {n}"),
                Refusal::Plain => " by a run without --limit".to_string(),
                Refusal::Queued(n) => format!(
                    ": {n} waiter{} queued ahead",
                    if n == 1 { " is" } else { "s are" }
                ),
                _ => match holder
                    .map(|h| format!("by {h}"))
                    .or(holders)
                    .or_else(|| lock.who_holds())
                {
                    Some(h) if h.starts_with("shared") => format!(", {h}"),
                    Some(h) => format!(" {h}"),
                    None => String::new(),
                },
            };
            let limit = match config.wait {
                Wait::For(d) => format!("up to {}", humantime::format_duration(d)),
                _ => "for as long as it takes (--wait forever)".into(),
            };
            log.notice(
                ev(
                    "waiting",
                    if told.is_none() {
                        format!("lock '{}' is held{by}; waiting {limit}", config.name)
                    } else {
                        format!(
                            "still waiting for lock '{}' after {}, held{by}; waiting {limit}",
                            config.name,
                            humantime::format_duration(Duration::from_secs(waited.as_secs()))
                        )
                    },
                )
                .ms(waited)
                .outcome("waiting"),
            );
            told = Some(clock::now());
        }
        if failure.is_none() && !watching {
            // Subscribe, then look again at once: the holder may have released
            // between our try and the subscription.
            let wake_tx = tx.clone();
            lock.watch_releases(fair, move || wake_tx.send(Event::Wake), log);
            watching = true;
            continue;
        }
        // A queued waiter is woken when its turn comes: until then it only
        // renews its place, and looks again the moment a place ahead of it
        // lapses (its waiter may be dead: nobody would wake us). A try that
        // failed for want of nodes, or a waiter that does not queue, backs off.
        let mut pause = if fair && failure.is_none() {
            busy.lapse_ahead
                .map_or(PLACE_RENEW, |l| PLACE_RENEW.min(l + PAST_LAPSE))
        } else {
            redlock::backoff(attempt, rand::random_range(0.0..1.0))
        };
        attempt = attempt.saturating_add(1);
        if let Some(u) = until {
            pause = pause.min(u.saturating_duration_since(clock::now()));
        }
        log.debug(|| format!("busy; next try within {pause:.0?} or on release"));
        if pause_for(pause, rx)? {
            // A fresh release: the backoff starts over, so that waiters who
            // split the nodes' votes between them retry within tens of
            // milliseconds, not the second a long wait had grown to.
            attempt = 0;
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

/// With --once-per or --once-per-success: the first lock holder in a window
/// sets its marker and runs; later ones skip. (With --once-per-success the
/// marker is taken back when the command does not succeed.)
/// `Ok(Some(start))`: marked the window starting at `start`; `Err(exit)`: do
/// not run.
fn check_once_per(lock: &Lock, config: &Config, log: &Log) -> Result<Option<u64>, Exit> {
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
            log.notice(if config.once_per_success {
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
            });
            Err(Exit::Busy(config.busy_exit_code))
        }
        Verdict::Unavailable => {
            log.error(format!(
                "cannot record the {flag} window for '{}': fewer than a quorum of nodes answered",
                config.name
            ));
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

/// Environment variables that may carry a password: the command never sees them.
fn secret_env() -> Vec<&'static str> {
    let mut remove = vec!["REDLOCK_PASSWORD", "REDLOCK_SENTINEL_PASSWORD"];
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
    use super::{one_line, window_text};

    #[test]
    fn once_per_windows_are_utc_times() {
        assert_eq!(
            window_text(1_796_187_600, 3600),
            "from 2026-12-02T05:00:00Z; the next opens at 2026-12-02T06:00:00Z"
        );
        assert!(window_text(u64::MAX, 3600).contains("unix time"));
    }

    #[test]
    fn clap_errors_fold_into_one_line() {
        let msg = "error: the following required arguments were not provided:\n  --key <NAME>\n\nUsage: redlock-run --key <NAME> [COMMAND]...\n\nFor more information, try '--help'.\n";
        assert_eq!(
            one_line(msg),
            "the following required arguments were not provided: --key <NAME>"
        );
        let msg = "error: unexpected argument '--bogus' found\n\n  tip: to pass '--bogus' as a value, use '-- --bogus'\n\nUsage: x\n";
        assert_eq!(one_line(msg), "unexpected argument '--bogus' found");
    }
}
