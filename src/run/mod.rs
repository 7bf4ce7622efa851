//! One run: parse, acquire (waiting per --jitter and --wait), check
//! --once-per(-success), run the command's attempts (`attempts`), release or
//! hold with the run's history record, write --report and --metrics-file,
//! and pick the exit status.
//!
//! `locked` holds what happens once the nodes are known (the guard, the
//! command's attempts, the release), `wait` the acquire under --jitter and
//! --wait.

mod locked;
mod tell;
mod wait;

use locked::run_locked;

use std::ffi::OsString;
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::time::SystemTime;

use clap::FromArgMatches;

use crate::admin::Ask;
use crate::cli::{self, Cli, Config};
use crate::clock;
use crate::error::Error;
use crate::exit::Exit;
use crate::log::{self, Log, ev};
use crate::outcome::Outcome;
use crate::process::guard::Guard;
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
        return Error::usage(msg).end(format);
    }
    // --help and --version read no file: a line that may ask for them is
    // parsed as given first (a word that was an option's value after all
    // makes it go on as usual).
    if cli::may_ask_help_or_version(&args)
        && let Err(e) = cli::parser().try_get_matches_from(&args)
        && matches!(
            e.kind(),
            clap::error::ErrorKind::DisplayHelp | clap::error::ErrorKind::DisplayVersion
        )
    {
        return clap_exit(e, None, format);
    }
    // The configuration file's settings, as options, where the arguments
    // give none (see `config`); `args` stay as given, for `check` and
    // `config`, which show where each setting came from.
    let applied = match crate::config::apply(args.clone()) {
        Ok(a) => a,
        Err(e) => return Error::usage(e).end(format),
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
            // `_mut`: the values are taken, not cloned first.
            .and_then(|mut m| Cli::from_arg_matches_mut(&mut m))
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
        Err(e) => return Error::from(e).end(format),
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
    Error::usage(text).end(format)
}

/// What a command line whose first word is neither an option nor a
/// subcommand meant: flock(1)'s habit, the lock's name and then the command
/// (`redlock-run nightly ./report.sh`), shown as `-k NAME -- COMMAND`; or
/// "'statsu' is not a subcommand; did you mean 'status'? ..." for a near
/// miss followed by options.
fn near_subcommand(args: &[OsString]) -> Option<String> {
    let word = args.get(1)?.to_str()?;
    if word.starts_with('-') || cli::is_subcommand(word) {
        return None;
    }
    let rest = args.get(2..).unwrap_or_default();
    let options_follow = rest
        .first()
        .is_some_and(|w| w.to_string_lossy().starts_with('-'));
    match cli::near_subcommand(word) {
        Some(meant) if options_follow || rest.is_empty() => Some(format!(
            "'{word}' is not a subcommand; did you mean '{meant}'? (to run a program of that \
             name, put it after --)"
        )),
        _ if !options_follow => Some(format!(
            "'{word}' is not a subcommand or an option; to run a command under the lock \
             '{word}', name the lock with -k: {}",
            cli::keyed_form(word, rest)
        )),
        _ => None,
    }
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
    if let Some(msg) = config.unwritable() {
        Log::new(0, config.log_format, &config.name).error(ev("usage", msg).outcome("usage"));
        return Exit::Usage;
    }
    let started = clock::now();
    let started_at = SystemTime::now();
    let stats = Arc::new(Stats::default());
    let log = Log::new(config.verbosity, config.log_format, &config.name);
    let run_id = crate::notify::run_id();
    let pings = config.ping.as_ref().map(|url| {
        crate::notify::Pings::new(
            url.clone(),
            run_id.clone(),
            config.ping_timeout,
            config.options.tls_ca.clone(),
            log,
        )
    });
    let on_start = || {
        if let Some(p) = &pings {
            p.start();
        }
    };
    let exit = run_locked(config, &stats, blocked, guard, &on_start);
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
    let lock = report::Lock {
        name: &config.name,
        keys: &config.keys,
        shared: config.shared,
    };
    let ended = report::Ended {
        lock: &lock,
        stats: &stats,
        exit,
        started_at,
        duration: started.elapsed(),
    };
    // After the release: nothing here holds the lock.
    let pinged = tell::after(config, &ended, &run_id, pings.as_ref(), &log);
    // A warning, as for the metrics file: the job's own status is what cron
    // and systemd must see.
    if let Some(path) = &config.report
        && let Err(e) = report::write(path, &ended)
    {
        Log::new(0, log::Format::Text, "").error(format!(
            "warning: cannot write --report {}: {}",
            path.display(),
            os_message(&e)
        ));
    }
    if let Some(path) = &config.metrics_file {
        record_metrics(path, config, &ended, pinged);
    }
    exit
}

/// `--metrics-file`: last of all, after the lock is released, so that a slow
/// file system never holds a lock. A failure is a warning: the job's own
/// status is what cron and systemd must see.
fn record_metrics(
    path: &std::path::Path,
    config: &Config,
    ended: &report::Ended,
    pinged: Option<crate::notify::Tally>,
) {
    let report::Ended {
        stats,
        exit,
        started_at,
        duration,
        ..
    } = *ended;
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
    run.pings = pinged.map(|t| crate::metrics::Pings {
        sent: t.sent.into(),
        failed: t.failed.into(),
    });
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
    crate::admin::end_as_ls_on_a_closed_pipe();
    // A run's settings, the configuration file's included: each reads them
    // itself, from the arguments as given.
    match admin {
        // Their node timeout is a run's, set as they read a run's settings.
        cli::Admin::Check(a) => return crate::admin::check::run(a, given),
        cli::Admin::Config(a) => return crate::admin::config::run(a, given),
        _ => {}
    }
    let target = admin.target();
    // A subcommand answers within its node timeout: a file an option names
    // (a FIFO nobody writes to) is waited for no longer.
    crate::option_file::wait_at_most(
        target
            .node_timeout
            .unwrap_or(crate::admin::DEFAULT_NODE_TIMEOUT),
    );
    if target.tls_insecure {
        crate::log::say(format_args!(
            "--tls-insecure: certificates and host names of rediss:// nodes are not \
             checked"
        ));
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
        Err(e) => return Error::from(e).said(),
    };
    let Some(ask) = ask(admin) else {
        return Exit::Usage;
    };
    match nodes {
        Ok(nodes) => crate::admin::dispatch(&ask, &subject, &nodes),
        Err(msg) => Error::usage(msg).said(),
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

#[cfg(test)]
mod tests {
    use super::one_line;

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
