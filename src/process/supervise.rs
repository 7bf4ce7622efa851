//! The command while it runs: the loop that waits for its whole process
//! tree, passes signals on to every process of it, and stops it (SIGTERM,
//! then SIGKILL) before the lock's validity deadline, at --max-runtime, or, with
//! `--leftovers kill`, once the command's first process has exited.

use std::collections::HashSet;
use std::fs::File;
use std::process::ExitStatus;
use std::sync::mpsc::RecvTimeoutError;
use std::time::Duration;

use crate::clock::{self, Stamp};
use crate::exit::Exit;
use crate::log::{Log, ev};
use crate::process::events::{Event, Inbox};
use crate::process::guard::{self, Report};
use crate::process::heartbeat::Heartbeat;
use crate::process::{Job, KillAt, Signalled, kill_schedule};
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
    /// redlock-run was asked to stop (SIGINT or SIGTERM) more than once:
    /// SIGTERM to the tree at the second, SIGKILL at the third, and no
    /// SIGKILL unless asked.
    Interrupted,
}

/// The processes to signal: the whole tree below the guard, or (test builds
/// only, without containment) the command's process group as before.
pub(crate) struct Tree {
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
pub(crate) struct Supervised {
    pub exit: Exit,
    /// The validity deadline as the last heartbeat left it.
    pub deadline: Stamp,
    /// A signal redlock-run received and passed on to the tree, if any.
    pub signalled: Option<i32>,
    /// Processes of the tree may still be alive: the lock must not be
    /// released (it expires by its TTL).
    pub leftover: bool,
    /// Every signal redlock-run and its guard sent to the tree, in order.
    pub signals: Vec<Signalled>,
}

/// Waits until the command's whole tree is gone, enforcing the lock's
/// deadline, --max-runtime (timed from `started`) and --leftovers.
///
/// Lock: SIGTERM to the tree at `deadline - guard - kill_after`, SIGKILL at
/// `deadline - guard`, unless a heartbeat moved the deadline on first.
/// Timeout and `--leftovers kill`: SIGTERM at once, SIGKILL `kill_after`
/// later. SIGKILL never comes later than `deadline - guard`, whatever the
/// reason. Signals go out before anything is logged.
pub(crate) fn supervise(
    tree: &mut Tree,
    config: &Job,
    started: Started,
    deadline: Stamp,
    rx: &Inbox,
    heartbeat: &mut Heartbeat,
    log: &Log,
) -> Supervised {
    let mut watch = Watch {
        course: Course::new(
            deadline,
            kill_schedule(config.ttl),
            config.kill_after,
            config.max_runtime.map(|t| started.boot + t),
        ),
        tree,
        config,
        log,
        me: std::process::id() as libc::pid_t,
        told_resumed: HashSet::new(),
        signalled: None,
        asked: 0,
        leftover: false,
        pauses: Pauses::new(started),
        sent: Vec::new(),
    };
    let exit = watch.run(rx, heartbeat);
    Supervised {
        exit,
        deadline: watch.course.deadline,
        signalled: watch.signalled,
        leftover: watch.leftover,
        signals: watch.sent,
    }
}

/// The supervision loop's state apart from the processes: which stop is
/// under way, and when its signals are due. Each change of it is a method
/// here, so that the loop's decisions are tested without a process.
#[derive(Debug)]
struct Course {
    /// The validity deadline as the last extension left it.
    deadline: Stamp,
    /// When the tree must be gone, against the deadline (`kill_schedule`).
    kill: KillAt,
    /// --kill-after: from SIGTERM to SIGKILL.
    kill_after: Duration,
    /// When --max-runtime is reached.
    timeout_at: Option<Stamp>,
    /// Why the tree is being stopped, once it is.
    stop: Option<Stop>,
    /// Once stopping: when SIGKILL goes out (capped by `last`).
    kill_at: Option<Stamp>,
    /// SIGKILL went out at least once.
    killed: bool,
    /// The command's first process's status, once it exited.
    first: Option<ExitStatus>,
    /// The guard died before the command's first process exited.
    gone_before_exit: bool,
    /// The guard stopped the tree at the deadline in redlock-run's place.
    guard_killed: bool,
}

impl Course {
    fn new(
        deadline: Stamp,
        kill: KillAt,
        kill_after: Duration,
        timeout_at: Option<Stamp>,
    ) -> Course {
        Course {
            deadline,
            kill,
            kill_after,
            timeout_at,
            stop: None,
            kill_at: None,
            killed: false,
            first: None,
            gone_before_exit: false,
            guard_killed: false,
        }
    }

    /// The last moment anything of the tree may be alive, a guard before
    /// the deadline (see `kill_guard`); everything is scheduled from it.
    fn last(&self) -> Stamp {
        self.kill.due(self.deadline)
    }

    /// When SIGTERM goes out for want of an extension.
    fn term_at(&self) -> Stamp {
        let last = self.last();
        last.checked_sub(self.kill_after).unwrap_or(last)
    }

    fn lost(&self) -> bool {
        matches!(self.stop, Some(Stop::Lost(_)))
    }

    /// The stop the clock calls for at `now`, and when its SIGKILL is due:
    /// the lock's when no extension came in time (over any other stop), or
    /// --max-runtime's when no stop is under way.
    fn due(&self, now: Stamp) -> Option<(Stop, Stamp)> {
        if !self.lost() && now >= self.term_at() {
            Some((
                Stop::Lost("no extension succeeded in time".into()),
                self.last(),
            ))
        } else if self.stop.is_none() && self.timeout_at.is_some_and(|t| now >= t) {
            Some((Stop::Timeout, now + self.kill_after))
        } else {
            None
        }
    }

    /// Starts stopping the tree for `why`, with SIGKILL due by `kill_by`
    /// (or sooner, if it was due sooner); true when SIGTERM is to go out
    /// now, no stop being under way. A lost lock overrides a timeout or
    /// leftovers stop, never the other way round (`due`, `gone`).
    fn begin(&mut self, why: Stop, kill_by: Stamp) -> bool {
        let term = self.stop.is_none();
        self.kill_at = Some(self.kill_at.map_or(kill_by, |k| k.min(kill_by)));
        self.stop = Some(why);
        term
    }

    /// When SIGKILL is due, never later than `last`.
    fn kill_due(&self) -> Option<Stamp> {
        self.kill_at.map(|k| k.min(self.last()))
    }

    /// When the loop must wake next, the heartbeat aside. Once SIGKILL went
    /// out it is repeated soon, or, when only `refusing` members (another
    /// user's) may be left, which can run long, every slice.
    fn next_wake(&self, now: Stamp, refusing: bool) -> Stamp {
        if self.killed {
            return now + if refusing { SLICE } else { KILL_AGAIN };
        }
        let term_at = self.term_at();
        let next = self.kill_due().map_or(term_at, |k| k.min(term_at));
        match self.timeout_at.filter(|_| self.stop.is_none()) {
            Some(t) => next.min(t),
            None => next,
        }
    }

    /// A new deadline from the heartbeat; false when it comes too late (the
    /// lock counts as lost already) and is ignored.
    fn extend(&mut self, deadline: Stamp) -> bool {
        if self.lost() {
            return false;
        }
        self.deadline = deadline;
        true
    }

    /// The lock is certainly gone, as the heartbeat found at `now`: someone
    /// else may hold it already, so the stop is at once, SIGKILL never later
    /// than our own validity. None when it was lost already.
    fn gone(&self, why: String, now: Stamp) -> Option<(Stop, Stamp)> {
        (!self.lost()).then(|| (Stop::Lost(why), (now + self.kill_after).min(self.last())))
    }

    /// The guard died: its orphans are killed at once (`now`). True when
    /// SIGTERM is to go out first, no stop being under way. A stop for the
    /// lock stays one.
    fn guard_gone(&mut self, now: Stamp) -> bool {
        self.gone_before_exit = self.first.is_none();
        let term = self.stop.is_none();
        if matches!(
            self.stop,
            None | Some(Stop::Leftovers | Stop::Timeout | Stop::Interrupted)
        ) {
            self.stop = Some(Stop::GuardGone);
        }
        self.kill_at = Some(now);
        term
    }

    /// A second request to stop: the tree is stopped from now on (its
    /// leftovers are not waited for), SIGKILL only when asked again. Any
    /// other stop under way stays the reason.
    fn interrupt(&mut self) {
        if self.stop.is_none() {
            self.stop = Some(Stop::Interrupted);
        }
    }

    /// A third request to stop: SIGKILL at `now`, and again until the tree
    /// is gone.
    fn kill_now(&mut self, now: Stamp) {
        self.interrupt();
        self.kill_at = Some(self.kill_at.map_or(now, |k| k.min(now)));
    }

    /// redlock-run was held up (stopped, wedged) past the deadline, and the
    /// guard stopped the command in its place, no stop of ours having begun.
    fn held_up(&self) -> bool {
        self.stop.is_none() && self.guard_killed
    }

    /// How the run ends, once the tree is gone.
    fn ending(&self) -> Exit {
        if self.held_up() {
            return Exit::Lost;
        }
        match (&self.stop, self.first) {
            (Some(Stop::GuardGone), _) if self.gone_before_exit => Exit::Lost,
            (Some(Stop::Lost(_)), _) => Exit::Lost,
            (Some(Stop::Timeout), _) => Exit::Timeout,
            (_, Some(s)) => spawn::exit_of(s),
            (_, None) => Exit::Command(1),
        }
    }
}

/// The supervision loop: its `Course`, and the processes and the log it
/// acts on.
struct Watch<'a> {
    course: Course,
    tree: &'a mut Tree,
    config: &'a Job,
    log: &'a Log,
    /// redlock-run's own pid: the tree hangs from it once the guard is gone.
    me: libc::pid_t,
    /// Processes said to have been stopped by the terminal and resumed.
    told_resumed: HashSet<libc::pid_t>,
    /// A signal redlock-run received and passed on to the tree, if any.
    signalled: Option<i32>,
    /// How many times redlock-run was asked to stop (SIGINT, SIGTERM).
    asked: u32,
    /// Processes of the tree may still be alive.
    leftover: bool,
    /// A time this loop did not run, since the last extension.
    pauses: Pauses,
    /// The signals sent to the tree so far.
    sent: Vec<Signalled>,
}

/// A loop that wakes every `SLICE` and did not run for longer than this was
/// not running: redlock-run was stopped (SIGSTOP, a debugger), or the host
/// was suspended.
const PAUSED: Duration = Duration::from_secs(1);

/// When a command started, on both clocks: a gap between them later tells
/// a suspended host (only CLOCK_BOOTTIME ran) from a stopped redlock-run.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Started {
    pub(crate) boot: Stamp,
    pub(crate) mono: std::time::Instant,
}

impl Started {
    pub(crate) fn now() -> Started {
        Started {
            boot: clock::now(),
            mono: std::time::Instant::now(),
        }
    }
}

/// The loop's own gaps, which explain a lock lost for want of an extension.
struct Pauses {
    /// The last turn of the loop, on CLOCK_BOOTTIME and CLOCK_MONOTONIC
    /// (which stands still while the host is suspended).
    last: (Stamp, std::time::Instant),
    /// The longest gap since the last extension: its length, and whether
    /// the host was suspended (rather than redlock-run stopped).
    seen: Option<(Duration, bool)>,
}

impl Pauses {
    /// From `started`, when the command started: a stop that came before
    /// the loop's first turn is a gap too.
    fn new(started: Started) -> Pauses {
        Pauses {
            last: (started.boot, started.mono),
            seen: None,
        }
    }

    /// A turn of the loop.
    fn turn(&mut self) {
        let now = (clock::now(), std::time::Instant::now());
        let boot = now.0.saturating_duration_since(self.last.0);
        let mono = now.1.saturating_duration_since(self.last.1);
        if boot > PAUSED && self.seen.is_none_or(|(d, _)| boot > d) {
            self.seen = Some((boot, mono < boot / 2));
        }
        self.last = now;
    }

    /// What the pause was, worded to follow a loss.
    fn said(&self) -> Option<String> {
        let (length, suspended) = self.seen?;
        let length = format!("{:.1}s", length.as_secs_f64());
        Some(if suspended {
            format!("the host was suspended for {length}")
        } else {
            format!(
                "redlock-run itself was stopped for {length} (SIGSTOP, a debugger or a frozen \
                 VM), so its heartbeat could not run"
            )
        })
    }
}

impl Watch<'_> {
    fn run(&mut self, rx: &Inbox, heartbeat: &mut Heartbeat) -> Exit {
        loop {
            self.pauses.turn();
            heartbeat.tick();
            let now = clock::now();
            if let Some((why, kill_by)) = self.course.due(now) {
                let why = match (why, self.pauses.said()) {
                    (Stop::Lost(why), Some(pause)) => Stop::Lost(format!("{why}: {pause}")),
                    (why, _) => why,
                };
                self.begin(why, kill_by);
                log_stop(&self.course.stop, self.config, self.log);
            }
            if self.kill_if_due(now) {
                break;
            }
            let next = self.course.next_wake(now, !self.tree.told.is_empty());
            let next = heartbeat.due().map_or(next, |d| d.min(next));
            let wait = next.saturating_duration_since(clock::now()).min(SLICE);
            let done = match rx.next(&mut self.tree.reports, wait) {
                Ok(Event::Guard(report)) => self.on_report(report),
                Ok(Event::Signal(sig)) => {
                    self.on_signal(sig);
                    false
                }
                Ok(Event::Extended(d)) => {
                    if self.course.extend(d) {
                        self.tree.tell_guard(d);
                        self.pauses.seen = None;
                    }
                    false
                }
                Ok(Event::Gone(why)) => {
                    if let Some((why, kill_by)) = self.course.gone(why, clock::now()) {
                        self.begin(why, kill_by);
                        log_stop(&self.course.stop, self.config, self.log);
                    }
                    false
                }
                Ok(Event::Wake) | Err(RecvTimeoutError::Timeout) => false,
                Err(RecvTimeoutError::Disconnected) => return self.lost_track(),
            };
            if done {
                break;
            }
        }
        if self.course.held_up() {
            let why = self
                .pauses
                .said()
                .map_or(String::new(), |p| format!(" ({p})"));
            self.log.error(
                ev(
                    "lost",
                    format!(
                        "lock '{}' lost: redlock-run was held up past the lock's validity{why}; \
                         the guard stopped the command",
                        self.config.name
                    ),
                )
                .outcome("lost"),
            );
        }
        self.course.ending()
    }

    /// Begins a stop (`Course::begin`), with SIGTERM to the tree when it is
    /// the first.
    fn begin(&mut self, why: Stop, kill_by: Stamp) {
        if self.course.begin(why, kill_by) {
            self.terminate();
        }
    }

    /// Sends `sig` to the tree, and notes and (at -vv) says when against the
    /// deadline, after the signals went out; how many processes got it.
    fn send(&mut self, sig: i32) -> usize {
        let n = self.tree.signal(sig, self.log);
        self.note(
            Signalled::new(false, sig, n, self.course.deadline, clock::now()),
            None,
        );
        n
    }

    /// SIGTERM, and SIGCONT so that a stopped process gets it (as
    /// timeout(1)): one line for both.
    fn terminate(&mut self) {
        let n = self.tree.signal(libc::SIGTERM, self.log);
        let term = Signalled::new(false, libc::SIGTERM, n, self.course.deadline, clock::now());
        let n = self.tree.signal(libc::SIGCONT, self.log);
        let cont = Signalled::new(false, libc::SIGCONT, n, self.course.deadline, clock::now());
        self.note(term, Some(libc::SIGCONT));
        if cont.processes > 0 {
            self.sent.push(cont);
        }
    }

    /// Keeps `sent` for the run's report and says it at -vv (`also`: a
    /// signal that went out with it), if it reached any process: one that
    /// found the tree gone, or dying already (the guard's SIGKILL came
    /// first), sent nothing.
    fn note(&mut self, sent: Signalled, also: Option<i32>) {
        if sent.processes == 0 {
            return;
        }
        self.sent.push(sent);
        self.log.debug(|| sent.entry(also));
    }

    /// SIGKILL to the tree once it is due; true when the tree is known to
    /// be gone (redlock-run reaps it itself once the guard is gone).
    fn kill_if_due(&mut self, now: Stamp) -> bool {
        if self.course.kill_due().is_none_or(|k| now < k) {
            return false;
        }
        // Said when it stopped anything: a repeat reaches only a process
        // forked between a listing and the last kill, and the first none
        // when the guard's came first.
        let n = self.send(libc::SIGKILL);
        // The guard is gone: reaping is ours, and the tree is gone only when
        // waitpid says no child is left.
        if self.tree.guard == self.me && tree::reap_all() {
            return true;
        }
        if !self.course.killed {
            self.course.killed = true;
            // Said at the default verbosity when anything was left to kill:
            // a job that ignores SIGTERM ends only by this.
            if n > 0 {
                self.log.notice(
                    ev(
                        "killed",
                        format!("{n} process(es) still running after SIGTERM: sent SIGKILL"),
                    )
                    .outcome("killed"),
                );
            }
        }
        false
    }

    /// A signal to redlock-run: passed on to the tree. Asked to stop again
    /// (SIGINT or SIGTERM), the whole tree gets SIGTERM, whatever each
    /// process ignores; a third time, SIGKILL. At a terminal the first
    /// Ctrl-C reaches the command's group without redlock-run, which sees
    /// only those after the command has exited and given the terminal
    /// back: the first it sees then is the second.
    fn on_signal(&mut self, sig: i32) {
        self.signalled = Some(sig);
        if sig != libc::SIGINT && sig != libc::SIGTERM {
            let n = self.send(sig);
            self.log
                .info(|| format!("passed signal {sig} on to {n} process(es)"));
            return;
        }
        self.asked += 1;
        if self.asked == 1 && self.tree.terminal && self.course.first.is_some() {
            self.asked = 2;
        }
        let name = if sig == libc::SIGINT {
            "SIGINT"
        } else {
            "SIGTERM"
        };
        match self.asked {
            1 => {
                let n = self.send(sig);
                self.log
                    .info(|| format!("passed signal {sig} on to {n} process(es)"));
            }
            2 => {
                self.course.interrupt();
                self.terminate();
                let again = self.again();
                self.log.notice(
                    ev(
                        "interrupted",
                        format!(
                            "{name} again: sent SIGTERM to every process of {}; {again} to kill any \
                             that ignore it",
                            self.config.program.describe()
                        ),
                    )
                    .field("signal", sig),
                );
            }
            _ => {
                // The loop sends it, and again until nothing is left.
                self.course.kill_now(clock::now());
                self.log
                    .info(|| format!("{name} a third time: killing the tree"));
            }
        }
    }

    /// How to ask redlock-run to stop the tree once more.
    fn again(&self) -> &'static str {
        if self.tree.terminal {
            "press Ctrl-C again"
        } else {
            "send SIGINT or SIGTERM again"
        }
    }

    /// How to stop leftovers by asking redlock-run, if that stops them: after
    /// a first request to stop, or at a terminal (whose first Ctrl-C went to
    /// the command's group alone).
    fn stops_them(&self) -> Option<&'static str> {
        (self.asked > 0 || self.tree.terminal).then(|| self.again())
    }

    /// Acts on a report of the guard's; true when the tree is gone.
    fn on_report(&mut self, report: Report) -> bool {
        match report {
            Report::Exited { status, empty } => return self.on_exited(status, empty),
            Report::Empty => return true,
            Report::DeadlineKill { processes, lead_ns } => {
                self.course.guard_killed = true;
                let sent = Signalled {
                    by_guard: true,
                    signal: libc::SIGKILL,
                    processes,
                    lead_ns,
                };
                self.note(sent, None);
            }
            Report::Resumed { pid, sig } => {
                // The guard resumed the tree already; a process that keeps
                // reading the terminal from the background is named once.
                if sig == libc::SIGTSTP || self.told_resumed.insert(pid) {
                    self.log.notice(resumed(pid, sig));
                }
            }
            Report::Gone => {
                // The guard died (killed on its own): its orphans are ours
                // now, as redlock-run is a subreaper too. None may run on:
                // they are killed, here, until none is left, while the
                // heartbeat keeps the lock.
                self.tree.guard = self.me;
                let term = self.course.guard_gone(clock::now());
                self.log
                    .error("the guard process went away; killing the command's processes");
                if term {
                    self.terminate();
                }
            }
        }
        false
    }

    /// The command's first process exited; true when nothing is left of the
    /// tree. What it left behind is named, and stopped with `--leftovers
    /// kill`.
    fn on_exited(&mut self, status: ExitStatus, empty: bool) -> bool {
        self.course.first = Some(status);
        if self.tree.terminal {
            spawn::take_terminal_back();
        }
        if empty {
            return true;
        }
        let left = tree::descendants(self.tree.guard);
        if left.is_empty() {
            return false;
        }
        let config = self.config;
        // Being stopped already (lost lock, --max-runtime, asked twice), what
        // is left goes too: no line that they keep the lock.
        if config.kill_leftovers || self.course.stop.is_some() {
            if self.course.stop.is_none() {
                self.begin(Stop::Leftovers, clock::now() + config.kill_after);
            }
            self.log.info(|| {
                format!(
                    "{} exited ({}); stopping {} process(es) it left behind: {}",
                    config.program.describe(),
                    describe_status(status),
                    left.len(),
                    list(&left)
                )
            });
        } else {
            self.log
                .notice(kept_by_leftovers(config, status, &left, self.stops_them()));
        }
        false
    }

    /// Nobody can report the tree's end any more: it is ended here.
    fn lost_track(&mut self) -> Exit {
        let tree = &mut *self.tree;
        let (killed, n) = if tree.contain {
            let reap = tree.guard == self.me;
            let killed = tree::kill_all(tree.guard, reap, Some(Duration::from_secs(5)));
            (killed.empty, killed.delivered)
        } else {
            (true, tree.signal(libc::SIGKILL, self.log))
        };
        let sent = Signalled::new(false, libc::SIGKILL, n, self.course.deadline, clock::now());
        self.note(sent, None);
        self.leftover = !killed;
        self.log
            .error("lost track of the command; its processes were killed");
        Exit::Lost
    }
}

/// The message for a stop just begun: written after the signals went out.
fn log_stop(stop: &Option<Stop>, config: &Job, log: &Log) {
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
        Some(Stop::Leftovers | Stop::GuardGone | Stop::Interrupted) | None => {}
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
    config: &Job,
    status: ExitStatus,
    left: &[tree::Member],
    again: Option<&str>,
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
    let how = match again {
        Some(again) => format!("{again}, or {how}"),
        None => how,
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::ExitStatusExt;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    /// A moment `n` ms after an arbitrary origin.
    fn at(n: u64) -> Stamp {
        Stamp::from_nanos(1_000_000_000_000) + ms(n)
    }

    /// A lock valid until 30 s, a 1 s guard, --kill-after 2 s.
    fn course(timeout_at: Option<Stamp>) -> Course {
        Course::new(at(30_000), KillAt::guard(ms(1_000)), ms(2_000), timeout_at)
    }

    #[test]
    fn without_an_extension_sigterm_then_sigkill_come_before_the_deadline() {
        let mut c = course(None);
        assert_eq!((c.last(), c.term_at()), (at(29_000), at(27_000)));
        assert_eq!(c.next_wake(at(0), false), at(27_000));
        assert_eq!(c.due(at(26_999)), None);
        let (why, kill_by) = c.due(at(27_000)).expect("due");
        assert_eq!(why, Stop::Lost("no extension succeeded in time".into()));
        assert_eq!(kill_by, at(29_000));
        assert!(c.begin(why, kill_by), "SIGTERM goes out");
        assert_eq!(c.kill_due(), Some(at(29_000)));
        assert_eq!(c.due(at(28_000)), None, "begun once");
        assert_eq!(c.ending(), Exit::Lost);
    }

    #[test]
    fn an_extension_moves_every_stop_on_until_the_lock_is_lost() {
        let mut c = course(None);
        assert!(c.extend(at(40_000)));
        assert_eq!(c.term_at(), at(37_000));
        assert_eq!(c.due(at(30_000)), None);
        let (why, by) = c.due(at(37_000)).expect("due");
        c.begin(why, by);
        assert!(!c.extend(at(50_000)), "too late: the lock counts as lost");
        assert_eq!(c.deadline, at(40_000));
        assert_eq!(
            c.gone("a quorum holds another token".into(), at(38_000)),
            None
        );
    }

    #[test]
    fn a_lost_lock_overrides_a_timeout_never_the_other_way_round() {
        let mut c = course(Some(at(10_000)));
        assert_eq!(c.next_wake(at(0), false), at(10_000), "the timeout first");
        let (why, by) = c.due(at(10_000)).expect("timeout");
        assert_eq!((why.clone(), by), (Stop::Timeout, at(12_000)));
        assert!(c.begin(why, by));
        assert_eq!(c.next_wake(at(10_000), false), at(12_000), "the SIGKILL");
        assert_eq!(c.ending(), Exit::Timeout);
        // The lock is found gone meanwhile: no second SIGTERM, SIGKILL no
        // later than it was, and the run ends as lost.
        let (why, by) = c.gone("gone".into(), at(11_000)).expect("lost");
        assert_eq!(by, at(13_000), "--kill-after from now");
        assert!(!c.begin(why, by), "a stop is under way: no second SIGTERM");
        assert_eq!(c.kill_due(), Some(at(12_000)), "never later than it was");
        assert_eq!(c.ending(), Exit::Lost);
        assert_eq!(c.due(at(11_500)), None, "no timeout over a lost lock");
    }

    #[test]
    fn a_lock_found_gone_is_stopped_at_once_and_never_after_its_validity() {
        let c = course(None);
        let (_, by) = c.gone("why".into(), at(1_000)).expect("stop");
        assert_eq!(by, at(3_000), "--kill-after from now");
        let (_, by) = c.gone("why".into(), at(28_500)).expect("stop");
        assert_eq!(by, at(29_000), "capped by the last moment");
    }

    #[test]
    fn once_killing_the_loop_wakes_soon_and_slower_for_members_that_refuse() {
        let mut c = course(None);
        c.killed = true;
        assert_eq!(c.next_wake(at(5), false), at(5) + KILL_AGAIN);
        assert_eq!(c.next_wake(at(5), true), at(5) + SLICE);
    }

    #[test]
    fn a_guard_that_dies_makes_the_run_lost_only_before_the_command_exited() {
        let mut c = course(Some(at(10_000)));
        assert!(c.guard_gone(at(100)), "SIGTERM first");
        assert_eq!(c.stop, Some(Stop::GuardGone));
        assert_eq!(c.kill_due(), Some(at(100)), "SIGKILL at once");
        assert_eq!(c.ending(), Exit::Lost);
        assert_eq!(c.due(at(10_000)), None, "no timeout after");

        let mut c = course(None);
        c.first = Some(ExitStatus::from_raw(3 << 8));
        assert!(c.guard_gone(at(100)));
        assert_eq!(c.ending(), Exit::Command(3), "the command's own status");

        let mut c = course(None);
        let (why, by) = c.gone("gone".into(), at(50)).expect("lost");
        c.begin(why, by);
        assert!(!c.guard_gone(at(100)), "stopping already");
        assert!(c.lost(), "a lost lock stays lost");
    }

    #[test]
    fn the_ending_follows_the_stop_then_the_command() {
        let mut c = course(None);
        assert_eq!(c.ending(), Exit::Command(1), "no status at all");
        c.first = Some(ExitStatus::from_raw(libc::SIGTERM));
        assert_eq!(c.ending(), Exit::Signal(libc::SIGTERM));
        c.guard_killed = true;
        assert!(c.held_up());
        assert_eq!(
            c.ending(),
            Exit::Lost,
            "the guard stopped it at the deadline"
        );
        c.begin(Stop::Leftovers, at(10));
        assert!(!c.held_up(), "our own stop came first");
        assert_eq!(c.ending(), Exit::Signal(libc::SIGTERM));
    }

    #[test]
    fn asked_twice_the_tree_is_stopped_and_killed_only_when_asked_again() {
        let mut c = course(Some(at(10_000)));
        c.interrupt();
        assert_eq!(c.stop, Some(Stop::Interrupted));
        assert_eq!(c.kill_due(), None, "no SIGKILL unless asked");
        assert_eq!(c.due(at(10_000)), None, "no timeout over it");
        assert_eq!(
            c.next_wake(at(0), false),
            at(27_000),
            "the lock's own schedule still runs"
        );
        c.kill_now(at(500));
        assert_eq!(c.kill_due(), Some(at(500)));
        c.first = Some(ExitStatus::from_raw(libc::SIGINT));
        assert_eq!(
            c.ending(),
            Exit::Signal(libc::SIGINT),
            "the command's status"
        );

        // A lost lock stays the reason, and the run's ending.
        let mut c = course(None);
        let (why, by) = c.gone("gone".into(), at(50)).expect("lost");
        c.begin(why, by);
        c.kill_now(at(100));
        assert!(c.lost());
        assert_eq!(c.kill_due(), Some(at(100)));
        assert_eq!(c.ending(), Exit::Lost);

        // It is overridden by a lost lock, and by a guard that died.
        let mut c = course(None);
        c.interrupt();
        let (why, by) = c.due(at(27_000)).expect("no extension");
        assert!(!c.begin(why, by), "SIGTERM went out already");
        assert!(c.lost());
        let mut c = course(None);
        c.interrupt();
        c.guard_gone(at(10));
        assert_eq!(c.stop, Some(Stop::GuardGone));
    }
}
