//! The command while it runs: the loop that waits for its whole process
//! tree, passes signals on to every process of it, and stops it (SIGTERM,
//! then SIGKILL) before the lock's validity deadline, at --max-runtime, or, with
//! `--leftovers kill`, once the command's first process has exited.

use std::collections::HashSet;
use std::fs::File;
use std::process::ExitStatus;
use std::sync::mpsc::RecvTimeoutError;
use std::time::Duration;

use crate::cli::{Config, Leftovers};
use crate::clock::{self, Stamp};
use crate::exit::Exit;
use crate::lock::redlock;
use crate::log::{Log, ev};
use crate::process::events::{Event, Inbox};
use crate::process::guard::{self, Report};
use crate::process::heartbeat::Heartbeat;
use crate::process::{spawn, tree};

/// Why the tree is being stopped.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Stop {
    Lost(String),
    Timeout,
    /// `--leftovers kill`: the command's first process exited.
    Leftovers,
    /// The guard died: its orphans, ours now, are killed.
    GuardGone,
}

/// The processes to signal: the whole tree below the guard, or (test builds
/// only, without containment) the command's process group as before.
pub struct Tree {
    /// The process the tree hangs from: the guard, or redlock-run itself
    /// once the guard is gone (its orphans come here).
    pub guard: libc::pid_t,
    pub command: libc::pid_t,
    pub contain: bool,
    /// The command took the terminal's foreground.
    pub terminal: bool,
    /// The guard's control pipe, for each new deadline.
    pub control: Option<File>,
    /// The guard's report pipe, read here while the command runs, until its
    /// last report.
    pub reports: Option<File>,
    /// Members already said to refuse our signals.
    pub told: HashSet<libc::pid_t>,
}

impl Tree {
    /// Sends `sig` to every live process of the tree; how many got it. A
    /// member that refuses (another user's) is named once, at the default
    /// verbosity: the lock is kept while it runs.
    fn signal(&mut self, sig: i32, log: &Log) -> usize {
        if !self.contain {
            let sent = super::pid(self.command)
                .zip(rustix::process::Signal::from_named_raw(sig))
                .is_some_and(|(group, sig)| {
                    rustix::process::kill_process_group(group, sig).is_ok()
                });
            return usize::from(sent);
        }
        let sent = tree::signal_all(self.guard, sig);
        for r in sent.refused {
            if self.told.insert(r.pid) {
                let uid = if r.uid == u32::MAX {
                    "?".to_string()
                } else {
                    r.uid.to_string()
                };
                log.error(
                    ev(
                        "refused",
                        format!(
                            "process {} (uid {uid}) may not be signalled by redlock-run \
                     (signal {sig}: not permitted); the lock is kept while it runs",
                            r.pid
                        ),
                    )
                    .field("pid", r.pid)
                    .field("uid", (r.uid != u32::MAX).then_some(r.uid))
                    .outcome("refused"),
                );
            }
        }
        sent.delivered
    }

    /// SIGTERM, and SIGCONT so that a stopped process gets it (as timeout(1)).
    fn terminate(&mut self, log: &Log) {
        self.signal(libc::SIGTERM, log);
        self.signal(libc::SIGCONT, log);
    }

    /// Passes a new validity deadline on to the guard.
    fn tell_guard(&mut self, deadline: Stamp) {
        if let Some(ctrl) = self.control.as_mut() {
            // A guard that is gone says so on its report pipe.
            let _ = guard::send_deadline(ctrl, deadline);
        }
    }
}

/// Longest the loop sleeps: deadlines are on CLOCK_BOOTTIME but the channel
/// waits on CLOCK_MONOTONIC, which stands still while the host is suspended;
/// waking this often notices a resume promptly.
const SLICE: Duration = Duration::from_millis(100);

/// How often SIGKILL is repeated while processes remain: one forked between
/// a listing and the kill is caught by the next pass.
const KILL_AGAIN: Duration = Duration::from_millis(5);

/// How supervision ended.
pub struct Supervised {
    pub exit: Exit,
    /// The validity deadline as the last heartbeat left it.
    pub deadline: Stamp,
    /// A signal redlock-run received and passed on to the tree, if any.
    pub signalled: Option<i32>,
    /// Processes of the tree may still be alive: the lock must not be
    /// released (it expires by its TTL).
    pub leftover: bool,
}

/// Waits until the command's whole tree is gone, enforcing the lock's
/// deadline, --max-runtime (timed from `started`) and --leftovers.
///
/// Lock: SIGTERM to the tree at `deadline - guard - kill_after`, SIGKILL at
/// `deadline - guard`, unless a heartbeat moved the deadline on first.
/// Timeout and `--leftovers kill`: SIGTERM at once, SIGKILL `kill_after`
/// later. SIGKILL never comes later than `deadline - guard`, whatever the
/// reason. Signals go out before anything is logged.
pub fn supervise(
    tree: &mut Tree,
    config: &Config,
    started: Stamp,
    deadline: Stamp,
    rx: &Inbox,
    heartbeat: &mut Heartbeat,
    log: &Log,
) -> Supervised {
    let mut end = Supervised {
        exit: Exit::Command(1),
        deadline,
        signalled: None,
        leftover: false,
    };
    end.exit = watch(tree, config, started, &mut end, rx, heartbeat, log);
    end
}

fn watch(
    tree: &mut Tree,
    config: &Config,
    started: Stamp,
    end: &mut Supervised,
    rx: &Inbox,
    heartbeat: &mut Heartbeat,
    log: &Log,
) -> Exit {
    let deadline = &mut end.deadline;
    let timeout_at = config.max_runtime.map(|t| started + t);
    let mut stop: Option<Stop> = None;
    // Once stopping: when SIGKILL goes out (capped by `last` below).
    let mut kill_at: Option<Stamp> = None;
    let mut killed = false;
    let mut first: Option<ExitStatus> = None;
    let guard = redlock::kill_guard(config.ttl);
    let me = std::process::id() as libc::pid_t;
    // The guard died before the command's first process exited.
    let mut gone_before_exit = false;
    // The guard stopped the tree at the deadline in redlock-run's place.
    let mut guard_killed = false;
    // Processes said to have been stopped by the terminal and resumed.
    let mut told_resumed: HashSet<libc::pid_t> = HashSet::new();
    loop {
        heartbeat.tick();
        let now = clock::now();
        // The last moment anything of the tree may be alive, a guard before
        // the deadline (see `kill_guard`); everything is scheduled from it.
        let last = deadline.checked_sub(guard).unwrap_or(*deadline);
        let term_at = last.checked_sub(config.kill_after).unwrap_or(last);
        let lost = matches!(stop, Some(Stop::Lost(_)));
        if !lost && now >= term_at {
            begin(
                tree,
                &mut stop,
                &mut kill_at,
                Stop::Lost("no extension succeeded in time".into()),
                last,
                log,
            );
            log_stop(&stop, config, log);
        } else if stop.is_none() && timeout_at.is_some_and(|t| now >= t) {
            begin(
                tree,
                &mut stop,
                &mut kill_at,
                Stop::Timeout,
                now + config.kill_after,
                log,
            );
            log_stop(&stop, config, log);
        }
        let kill_due = kill_at.map(|k| k.min(last));
        if kill_due.is_some_and(|k| now >= k) {
            let n = tree.signal(libc::SIGKILL, log);
            if tree.guard == me {
                // The guard is gone: reaping is ours, and the tree is gone
                // only when waitpid says no child is left.
                if tree::reap_all() {
                    break;
                }
            }
            if !killed {
                killed = true;
                // Said at the default verbosity when anything was left to
                // kill: a job that ignores SIGTERM ends only by this.
                if n > 0 {
                    log.notice(
                        ev(
                            "killed",
                            format!("{n} process(es) still running after SIGTERM: sent SIGKILL"),
                        )
                        .outcome("killed"),
                    );
                }
            }
        }
        let next = if killed {
            now + if tree.told.is_empty() {
                KILL_AGAIN
            } else {
                // Only members that refuse may be left: they can run long.
                SLICE
            }
        } else {
            let mut next = kill_due.map_or(term_at, |k| k.min(term_at));
            if stop.is_none()
                && let Some(t) = timeout_at
            {
                next = next.min(t);
            }
            next
        };
        let next = heartbeat.due().map_or(next, |d| d.min(next));
        let wait = next.saturating_duration_since(clock::now()).min(SLICE);
        match rx.next(&mut tree.reports, wait) {
            Ok(Event::Guard(Report::Exited { status, empty })) => {
                first = Some(status);
                if tree.terminal {
                    spawn::take_terminal_back();
                }
                if empty {
                    break;
                }
                let left = tree::descendants(tree.guard);
                if left.is_empty() {
                    continue;
                }
                if config.leftovers == Leftovers::Kill && stop.is_none() {
                    let at = clock::now() + config.kill_after;
                    begin(tree, &mut stop, &mut kill_at, Stop::Leftovers, at, log);
                }
                if config.leftovers == Leftovers::Kill {
                    log.info(|| {
                        format!(
                            "{} exited ({}); stopping {} process(es) it left behind: {}",
                            config.program.describe(),
                            describe_status(status),
                            left.len(),
                            list(&left)
                        )
                    });
                } else {
                    log.notice(kept_by_leftovers(config, status, &left));
                }
            }
            Ok(Event::Guard(Report::Empty)) => break,
            Ok(Event::Guard(Report::DeadlineKill)) => guard_killed = true,
            Ok(Event::Guard(Report::Resumed { pid, sig })) => {
                // The guard resumed the tree already; a process that keeps
                // reading the terminal from the background is named once.
                if sig == libc::SIGTSTP || told_resumed.insert(pid) {
                    log.notice(resumed(pid, sig));
                }
            }
            Ok(Event::Guard(Report::Gone)) => {
                // The guard died (killed on its own): its orphans are ours now,
                // as redlock-run is a subreaper too. None may run on: they are
                // killed, here, until none is left, while the heartbeat keeps
                // the lock.
                tree.guard = me;
                gone_before_exit = first.is_none();
                log.error("the guard process went away; killing the command's processes");
                if stop.is_none() || stop == Some(Stop::Leftovers) || stop == Some(Stop::Timeout) {
                    if stop.is_none() {
                        tree.terminate(log);
                    }
                    stop = Some(Stop::GuardGone);
                }
                kill_at = Some(clock::now());
            }
            Ok(Event::Signal(sig)) => {
                end.signalled = Some(sig);
                let n = tree.signal(sig, log);
                log.info(|| format!("passed signal {sig} on to {n} process(es)"));
            }
            Ok(Event::Extended(d)) if !matches!(stop, Some(Stop::Lost(_))) => {
                *deadline = d;
                tree.tell_guard(d);
            }
            Ok(Event::Gone(why)) if !matches!(stop, Some(Stop::Lost(_))) => {
                // Someone else may hold it already: stop at once, and never
                // later than our own validity.
                let at = (clock::now() + config.kill_after).min(last);
                begin(tree, &mut stop, &mut kill_at, Stop::Lost(why), at, log);
                log_stop(&stop, config, log);
            }
            Ok(_) | Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => {
                // Nobody can report the tree's end any more: end it ourselves.
                let killed = if tree.contain {
                    tree::kill_all(tree.guard, tree.guard == me, Some(Duration::from_secs(5))).empty
                } else {
                    tree.signal(libc::SIGKILL, log);
                    true
                };
                end.leftover = !killed;
                log.error("lost track of the command; its processes were killed");
                return Exit::Lost;
            }
        }
    }
    if stop.is_none() && guard_killed {
        // redlock-run was held up (stopped, wedged) past the deadline, and
        // the guard stopped the command in its place.
        log.error(
            ev(
                "lost",
                format!(
                    "lock '{}' lost: redlock-run was held up past the lock's validity; the \
                     guard stopped the command",
                    config.name
                ),
            )
            .outcome("lost"),
        );
        return Exit::Lost;
    }
    match (stop, first) {
        (Some(Stop::GuardGone), _) if gone_before_exit => Exit::Lost,
        (Some(Stop::Lost(_)), _) => Exit::Lost,
        (Some(Stop::Timeout), _) => Exit::Timeout,
        (_, Some(s)) => spawn::exit_of(s),
        (_, None) => Exit::Command(1),
    }
}

/// Starts stopping the tree for `why` (SIGTERM now unless a stop is already
/// under way), with SIGKILL due by `kill_by`. A lost lock overrides a
/// timeout or leftovers stop, never the other way round.
fn begin(
    tree: &mut Tree,
    stop: &mut Option<Stop>,
    kill_at: &mut Option<Stamp>,
    why: Stop,
    kill_by: Stamp,
    log: &Log,
) {
    if stop.is_none() {
        tree.terminate(log);
    }
    *kill_at = Some(kill_at.map_or(kill_by, |k| k.min(kill_by)));
    *stop = Some(why);
}

/// The message for a stop just begun: written after the signals went out.
fn log_stop(stop: &Option<Stop>, config: &Config, log: &Log) {
    match stop {
        Some(Stop::Lost(reason)) => log.error(
            ev(
                "lost",
                format!(
                    "lock '{}' lost: {reason}; stopping the command",
                    config.name
                ),
            )
            .outcome("lost"),
        ),
        Some(Stop::Timeout) => log.notice(
            ev(
                "timeout",
                format!(
                    "{} ran past --max-runtime {}: sent SIGTERM, SIGKILL follows in {} \
                     (--kill-after) if anything is left",
                    config.program.describe(),
                    config
                        .max_runtime
                        .map_or("?".into(), |d| humantime::format_duration(d).to_string()),
                    humantime::format_duration(config.kill_after)
                ),
            )
            .outcome("timeout"),
        ),
        Some(Stop::Leftovers | Stop::GuardGone) | None => {}
    }
}

/// Up to ten members as `pid (name)`, and how many more.
fn list(members: &[tree::Member]) -> String {
    let names: Vec<String> = members
        .iter()
        .take(10)
        .map(|m| format!("{} ({})", m.pid, m.name()))
        .collect();
    let more = members.len().saturating_sub(names.len());
    if more > 0 {
        format!("{} and {more} more", names.join(", "))
    } else {
        names.join(", ")
    }
}

/// The line for a command that exited while processes it started keep the
/// lock (`--leftovers wait`): which, and how to stop them.
fn kept_by_leftovers(
    config: &Config,
    status: ExitStatus,
    left: &[tree::Member],
) -> crate::log::Entry {
    let groups: HashSet<Option<libc::pid_t>> = left.iter().map(|m| m.pgid()).collect();
    let how = match groups.into_iter().collect::<Vec<_>>().as_slice() {
        [Some(g)] => format!("kill -- -{g} (their process group)"),
        _ if left.len() <= 10 => format!(
            "kill {}",
            left.iter()
                .map(|m| m.pid.to_string())
                .collect::<Vec<_>>()
                .join(" ")
        ),
        _ => "kill them".to_string(),
    };
    ev(
        "leftovers",
        format!(
            "{} exited ({}); {} process(es) it left behind keep lock '{}' until they exit \
             (--leftovers wait): {}; to stop them: {how}, or run with --leftovers kill",
            config.program.describe(),
            describe_status(status),
            left.len(),
            config.name,
            list(left)
        ),
    )
    .field("leftovers", left.len())
}

/// The line for a process of the tree that the terminal stopped and the
/// guard resumed.
fn resumed(pid: libc::pid_t, sig: i32) -> crate::log::Entry {
    let name = tree::Member { pid }.name();
    let msg = if sig == libc::SIGTSTP {
        format!(
            "a job holding a lock cannot be suspended: process {pid} ({name}), stopped by \
             SIGTSTP (Ctrl-Z), was resumed; Ctrl-C stops it"
        )
    } else {
        // A process reading (or setting) the terminal from a background
        // group stops again at once: it is resumed over and over, holding
        // the lock, until it exits. A background job of a shell ignores
        // SIGINT: Ctrl-C may not end it.
        let what = if sig == libc::SIGTTIN {
            "SIGTTIN (it read the terminal from the background)"
        } else {
            "SIGTTOU (it used the terminal from the background)"
        };
        format!(
            "a job holding a lock cannot be suspended: process {pid} ({name}), stopped by \
             {what}, was resumed, and will be whenever it stops so; it keeps the lock until it \
             exits (kill {pid} stops it)"
        )
    };
    ev("resumed", msg).field("pid", pid).field("signal", sig)
}

fn describe_status(status: ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(c), _) => format!("status {c}"),
        (None, Some(s)) => format!("signal {s}"),
        _ => "?".into(),
    }
}
