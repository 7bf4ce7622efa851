//! After the release: the run's end ping (`--ping`) and `--on-failure`,
//! side by side, both within `--ping-timeout`: a run's extra time is
//! bounded by it, and none of it is spent while the lock is held.

use std::sync::atomic::Ordering::Relaxed;
use std::time::Instant;

use crate::cli::Config;
use crate::log::{Log, ev};
use crate::notify::{End, Pings, Tally};
use crate::outcome::Outcome;
use crate::report::{self, Ended};

/// Sends the end ping and runs `--on-failure` where the run calls for
/// them; the pings' tally when there is a `--ping`.
pub(super) fn after(
    config: &Config,
    ended: &Ended,
    run_id: &str,
    pings: Option<&Pings>,
    log: &Log,
) -> Option<Tally> {
    let outcome = Outcome::of(ended.exit, ended.stats.already_ran.load(Relaxed));
    let held = ended.stats.acquired.load(Relaxed);
    let hook = config
        .on_failure
        .as_deref()
        .filter(|_| failed(outcome, held));
    let deadline = Instant::now() + config.ping_timeout;
    let end = pings
        .and(end_ping(outcome, held, config.ping_busy, ended.exit.code()))
        .map(|end| (end, report::summary(ended)));
    let hook_run = |cmd: &str| {
        let env = [
            ("REDLOCK_KEY", config.name.clone()),
            ("REDLOCK_OUTCOME", outcome.word().to_string()),
            ("REDLOCK_EXIT_STATUS", ended.exit.code().to_string()),
            ("REDLOCK_RUN_ID", run_id.to_string()),
        ];
        run_hook(cmd, &env, deadline, log);
    };
    match (pings, hook) {
        (None, None) => None,
        (None, Some(cmd)) => {
            hook_run(cmd);
            None
        }
        (Some(p), None) => Some(p.finish(end, deadline)),
        (Some(p), Some(cmd)) => Some(std::thread::scope(|s| {
            // The hook waits on a process, the pings on the network: side by side.
            let pinging = std::thread::Builder::new()
                .name("ping".into())
                .spawn_scoped(s, || p.finish(end.clone(), deadline));
            hook_run(cmd);
            match pinging {
                Ok(thread) => thread.join().unwrap_or_default(),
                Err(_) => p.finish(end.clone(), deadline),
            }
        })),
    }
}

/// The ping that ends a run: its exit status for a run that took the lock,
/// `fail` for one that could not run for want of a quorum, `log` for a busy
/// one with `--ping-busy`, and nothing for the rest (a signal while
/// waiting, a usage error).
fn end_ping(outcome: Outcome, held: bool, ping_busy: bool, code: u8) -> Option<End> {
    match outcome {
        Outcome::Usage => None,
        Outcome::Unavailable => Some(End::Fail),
        Outcome::Busy | Outcome::AlreadyRan => ping_busy.then_some(End::Log),
        _ if held => Some(End::Status(code)),
        _ => None,
    }
}

/// Whether `--on-failure` runs: after a run that took the lock and did not
/// end well, or that could not take it for want of a quorum.
fn failed(outcome: Outcome, held: bool) -> bool {
    match outcome {
        Outcome::Unavailable => true,
        Outcome::Failed | Outcome::Signal | Outcome::NotRun | Outcome::Lost | Outcome::Timeout => {
            held
        }
        Outcome::Ok | Outcome::Busy | Outcome::AlreadyRan | Outcome::Usage => false,
    }
}

/// Runs `--on-failure`, saying how it went: a warning when it failed (its
/// command line is not shown: it may hold a webhook's secret).
fn run_hook(cmd: &str, env: &[(&str, String); 4], deadline: Instant, log: &Log) {
    let started = Instant::now();
    match crate::notify::run_hook(cmd, env, &super::locked::secret_env(), deadline) {
        Ok(()) => log.info(|| {
            ev(
                "on-failure",
                format!(
                    "--on-failure ran in {}",
                    crate::log::span(started.elapsed())
                ),
            )
            .outcome("hook-ran")
        }),
        Err(why) => log
            .error(ev("on-failure", format!("warning: --on-failure {why}")).outcome("hook-failed")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_run_that_held_the_lock_pings_its_end() {
        assert_eq!(end_ping(Outcome::Ok, true, false, 0), Some(End::Status(0)));
        assert_eq!(
            end_ping(Outcome::Failed, true, false, 1),
            Some(End::Status(1))
        );
        assert_eq!(
            end_ping(Outcome::Lost, true, false, 76),
            Some(End::Status(76))
        );
        assert_eq!(
            end_ping(Outcome::Timeout, true, false, 124),
            Some(End::Status(124))
        );
        assert_eq!(
            end_ping(Outcome::Signal, true, false, 143),
            Some(End::Status(143))
        );
        assert_eq!(
            end_ping(Outcome::Unavailable, false, false, 69),
            Some(End::Fail)
        );
        assert_eq!(end_ping(Outcome::Busy, false, false, 75), None);
        assert_eq!(end_ping(Outcome::Busy, false, true, 75), Some(End::Log));
        assert_eq!(
            end_ping(Outcome::AlreadyRan, true, true, 75),
            Some(End::Log)
        );
        assert_eq!(end_ping(Outcome::AlreadyRan, true, false, 75), None);
        // A signal while waiting for the lock: nothing was held.
        assert_eq!(end_ping(Outcome::Signal, false, true, 143), None);
        assert_eq!(end_ping(Outcome::Usage, false, true, 64), None);
    }

    #[test]
    fn on_failure_is_for_failed_runs_that_held_the_lock_and_for_no_quorum() {
        assert!(failed(Outcome::Failed, true));
        assert!(failed(Outcome::Lost, true));
        assert!(failed(Outcome::NotRun, true));
        assert!(failed(Outcome::Unavailable, false));
        assert!(!failed(Outcome::Ok, true));
        assert!(!failed(Outcome::Busy, false));
        assert!(!failed(Outcome::AlreadyRan, true));
        assert!(!failed(Outcome::Signal, false));
    }
}
