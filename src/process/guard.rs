//! The guard: a small process between redlock-run and the command that
//! outlives redlock-run by design.
//!
//! ```text
//! redlock-run (subreaper) ── guard (subreaper, own process group) ── command ── …
//! ```
//!
//! Why a process and not only `PR_SET_PDEATHSIG`: PDEATHSIG reaches only the
//! direct child, so when redlock-run is SIGKILLed whatever the command forked
//! (`sh -c 'pg_dump | gzip'`, a `setsid`'d helper, a double-forked daemon)
//! would run on, unlocked. Why not a PID namespace or a cgroup: both need
//! privileges (or user namespaces, which some distributions restrict), and a
//! PID namespace changes what the command sees (its pid, `ps`, pid files).
//! The guard needs nothing: as a child subreaper (Linux 3.4+) it inherits
//! every orphan of the tree, so no descendant can leave it, and it reaps them
//! all; when redlock-run dies, the guard's control pipe reads end-of-file and
//! it SIGKILLs the whole tree before exiting. The command keeps its own pid,
//! parent relations and process group.
//!
//! The guard is forked while redlock-run still has one thread, so it can use
//! the standard library freely (no lock held by another thread is copied into
//! it). It is forked first of all, before the command line is parsed, and
//! told what to run (its `Orders`) once that is known: a fork of a process
//! that has barely started copies little, and leaves few pages that either
//! side must copy when it writes to them (each such fault costs
//! microseconds). It runs in its own process group so that a group kill aimed at
//! redlock-run (a CI runner killing its job's group) leaves it standing to
//! clean up. redlock-run signals the tree itself (see `tree`); the guard
//! starts the command, reports its exit and the moment the last descendant is
//! gone, and kills what is left if redlock-run goes away.
//!
//! With `--retry` one guard serves every attempt: it can only be forked while
//! redlock-run is single-threaded, which it is no longer once the lock is
//! held. Each attempt starts only after the guard has reaped the previous
//! attempt's whole tree (waitpid said ECHILD), so no two attempts overlap.
//!
//! The guard enforces the lock's deadline too: every request to start the
//! command carries the validity deadline, and redlock-run sends each new one
//! after an extension. When `deadline - kill guard` passes with no newer one
//! come (and a fifth of the kill guard more: see `Serving::new_deadline`),
//! the guard SIGKILLs the tree itself, so a redlock-run that is stopped
//! (SIGSTOP, a debugger) or wedged cannot keep the command running past the
//! lock. Only a paused host (or a paused guard) can.
//!
//! Whatever redlock-run goes through, the guard leaves no member of the tree
//! behind while it lives: on end of file it kills until waitpid says ECHILD,
//! however long that takes (a member under another user that refuses
//! SIGKILL keeps it there, still the tree's subreaper).

use std::ffi::OsString;
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::OwnedFd;
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::time::Duration;

use rustix::event::{PollFd, PollFlags, Timespec};
use rustix::io::Errno;
use rustix::process::{Signal, WaitOptions};

use crate::clock::{self, Stamp};
use crate::process::{KillAt, spawn, tree};
use crate::program::Program;
use crate::signals::{self, How, SigSet};

/// What the guard tells redlock-run.
#[derive(Debug)]
pub(crate) enum Report {
    /// The command's first process exited; `empty`: nothing is left of the
    /// tree (no `Empty` follows).
    Exited { status: ExitStatus, empty: bool },
    /// No descendant is left.
    Empty,
    /// The guard itself went away before saying `Empty`.
    Gone,
    /// The guard killed the tree at the deadline (see `Serving::new_deadline`),
    /// no newer deadline having come: the lock may be gone, whatever the
    /// command's status. How many processes its SIGKILL stopped (none when
    /// redlock-run's own had done it), and how long before the deadline it
    /// had gone out to them (ns; negative: after).
    DeadlineKill { processes: usize, lead_ns: i64 },
    /// A process of the tree was stopped by the terminal (`sig`: SIGTSTP,
    /// SIGTTIN or SIGTTOU) and the guard has resumed the tree (terminal mode
    /// only).
    Resumed { pid: libc::pid_t, sig: i32 },
}

pub(crate) struct Guard {
    pid: libc::pid_t,
    /// Closing it tells the guard that redlock-run is done (or dead).
    ctrl: Option<File>,
    report: File,
}

/// The guard's orders: what it needs to start the command (and every retry
/// of it), sent to it once the command line is parsed.
#[derive(Debug, PartialEq)]
pub(crate) struct Orders {
    pub program: Program,
    /// Variables the command must not see (passwords), which the guard also
    /// scrubs from its own copy of the environment.
    pub remove: Vec<String>,
    /// Hand the terminal's foreground to the command.
    pub terminal: bool,
    /// Track and reap the whole tree (off only in test builds, to show that
    /// the safety checks see what containment prevents).
    pub contain: bool,
    /// More than one command may be started (--retry): the guard keeps the
    /// caller's stdio for them and waits for the next request after each.
    pub again: bool,
    /// When the tree must be gone, against the validity deadline.
    pub kill: KillAt,
}

/// Why a command could not be started.
#[derive(Debug)]
pub(crate) enum SpawnError {
    /// The guard could not start it (not found, not executable, ...).
    Command(io::Error),
    /// The request reached the guard after the tree would have had to be
    /// gone (`deadline - kill guard`): a redlock-run or a guard that stood
    /// still between the grant and the start (a stopped or swapped-out
    /// process) would otherwise start the command without a lock.
    TooLate,
    /// The guard itself went away, possibly after starting it.
    Gone(String),
}

// Frame tags, both directions: [tag][u32 length, little endian][payload].
const ORDERS: u8 = b'I';
const SPAWN: u8 = b'S';
const STARTED: u8 = b'P';
const FAILED: u8 = b'F';
/// The request came after `deadline - kill guard`: nothing was started.
const TOO_LATE: u8 = b'L';
const EXITED: u8 = b'E';
const EXITED_EMPTY: u8 = b'X';
const EMPTY: u8 = b'Z';
const DEADLINE: u8 = b'D';
const DEADLINE_KILL: u8 = b'K';
const RESUMED: u8 = b'C';

/// Fewest milliseconds between two resumes of a tree: a process of it that
/// reads the terminal from a background group is stopped again at once, and
/// must not make the guard and it take turns for a whole CPU.
const RESUME_GAP: Duration = Duration::from_millis(100);

/// How often, in terminal mode, the guard looks through the tree for a stop
/// of the terminal's that it cannot hear of (see `tree::held_stop`): rare
/// (Ctrl-Z caught in a vfork), so a quarter of a second, a walk of the tree
/// each time.
const STOP_SCAN: Duration = Duration::from_millis(250);

/// At most this many `Resumed` frames per command: the rest resume without
/// a word, so that the guard never fills the report pipe (and blocks on it)
/// while redlock-run is not reading.
const RESUMED_FRAMES: u32 = 16;

fn pipe() -> io::Result<(File, File)> {
    let (r, w) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)?;
    Ok((File::from(r), File::from(w)))
}

fn write_frame(w: &mut File, tag: u8, payload: &[u8]) -> io::Result<()> {
    let len = u32::try_from(payload.len()).map_err(|_| io::Error::other("frame too large"))?;
    let mut frame = Vec::with_capacity(5 + payload.len());
    frame.push(tag);
    frame.extend_from_slice(&len.to_le_bytes());
    frame.extend_from_slice(payload);
    // One write: frames up to PIPE_BUF never interleave.
    w.write_all(&frame)
}

fn read_frame(r: &mut File) -> io::Result<(u8, Vec<u8>)> {
    let mut head = [0u8; 5];
    r.read_exact(&mut head)?;
    let len = u32::from_le_bytes([head[1], head[2], head[3], head[4]]) as usize;
    let mut payload = vec![0u8; len];
    r.read_exact(&mut payload)?;
    Ok((head[0], payload))
}

fn int(payload: &[u8]) -> i32 {
    payload
        .get(..4)
        .map_or(-1, |b| i32::from_le_bytes([b[0], b[1], b[2], b[3]]))
}

/// Refuses a fork while other threads run. The guard's side of the fork
/// goes on with the standard library (allocations, the environment), and a
/// lock held by a thread that the child does not have would never be
/// released there: only a fork from a single thread is sound. The early
/// fork comes before anything can start a thread; nothing starts one before
/// the late fork either (the log thread starts with the first line logged),
/// and this check turns a change that would into a clear error before the
/// lock is taken, in every build, rather than a guard that may hang.
///
/// Where /proc cannot be read (a chroot without it) the count cannot be
/// had, and the fork goes ahead as the order of the steps allows.
fn single_threaded() -> io::Result<()> {
    // The directory's link count is two plus its threads: one stat(2)
    // rather than reading the directory.
    let Ok(task) = rustix::fs::stat("/proc/self/task") else {
        return Ok(());
    };
    match task.st_nlink.saturating_sub(2) {
        0 | 1 => Ok(()),
        n => Err(io::Error::other(format!(
            "redlock-run runs {n} threads by now, and the guard may only be forked \
             from one"
        ))),
    }
}

impl Guard {
    /// Forks the guard, which waits for its [`Orders`] (`configure`) and exits
    /// at end of file without one. Call it while this process has a single
    /// thread, as early as it can be; `mask` is the signal mask redlock-run
    /// was started with, for the command.
    pub(crate) fn fork(mask: SigSet) -> io::Result<Guard> {
        single_threaded()?;
        let (ctrl_r, ctrl_w) = pipe()?;
        let (report_r, report_w) = pipe()?;
        // SAFETY: fork(2) has no safe form. This process has one thread
        // (checked just above), so no lock of another thread's is copied
        // into the child, which may go on with the standard library.
        match unsafe { libc::fork() } {
            -1 => Err(io::Error::last_os_error()),
            0 => {
                drop(ctrl_w);
                drop(report_r);
                guard_main(ctrl_r, report_w, mask)
            }
            pid => Ok(Guard {
                pid,
                ctrl: Some(ctrl_w),
                report: report_r,
            }),
        }
    }

    pub(crate) fn pid(&self) -> libc::pid_t {
        self.pid
    }

    /// Tells the guard what it is to run; before the first `spawn`.
    pub(crate) fn configure(&mut self, orders: &Orders) -> io::Result<()> {
        let ctrl = self
            .ctrl
            .as_mut()
            .ok_or_else(|| io::Error::other("no pipe to it"))?;
        write_frame(ctrl, ORDERS, &orders.encode()?)
    }

    /// A second handle on the control pipe, for `send_deadline` while the
    /// guard's reports are watched.
    pub(crate) fn control(&self) -> Option<File> {
        self.ctrl.as_ref().and_then(|c| c.try_clone().ok())
    }

    /// Starts the command with `set` added to its environment; its pid. The
    /// guard kills the tree by `deadline - 0.8 x kill guard` unless told of a newer
    /// deadline.
    pub(crate) fn spawn(
        &mut self,
        set: &[(&str, &str)],
        deadline: Stamp,
    ) -> Result<libc::pid_t, SpawnError> {
        let gone = |e: io::Error| SpawnError::Gone(format!("the guard went away: {e}"));
        let mut payload = stamp_bytes(deadline).to_vec();
        for (k, v) in set {
            for part in [k.as_bytes(), v.as_bytes()] {
                let len = u32::try_from(part.len())
                    .map_err(|_| SpawnError::Command(io::Error::other("too long")))?;
                payload.extend_from_slice(&len.to_le_bytes());
                payload.extend_from_slice(part);
            }
        }
        let Some(ctrl) = self.ctrl.as_mut() else {
            return Err(gone(io::Error::other("no pipe to it")));
        };
        write_frame(ctrl, SPAWN, &payload).map_err(gone)?;
        match read_frame(&mut self.report) {
            Ok((STARTED, p)) => Ok(int(&p)),
            Ok((TOO_LATE, _)) => Err(SpawnError::TooLate),
            Ok((FAILED, p)) => Err(SpawnError::Command(match int(&p) {
                -1 => io::Error::other("cannot start the command"),
                errno => io::Error::from_raw_os_error(errno),
            })),
            // Out of turn: nothing it says can be trusted, the command may
            // be running.
            Ok(_) => Err(gone(io::Error::other("it answered out of turn"))),
            Err(e) => Err(gone(e)),
        }
    }

    /// A second handle on the report pipe, for the supervisor to read the
    /// guard's reports from while the command runs.
    pub(crate) fn reports(&self) -> io::Result<File> {
        self.report.try_clone()
    }
}

impl Report {
    /// Nothing follows it on the pipe for this command.
    pub(crate) fn is_last(&self) -> bool {
        matches!(
            self,
            Report::Exited { empty: true, .. } | Report::Empty | Report::Gone
        )
    }
}

/// The guard's next report on `pipe` (`Gone` at its end). The guard writes
/// each frame in one write of less than PIPE_BUF, so a frame that poll(2)
/// says has begun is read whole without waiting.
pub(crate) fn read_report(pipe: &mut File) -> Report {
    loop {
        match read_frame(pipe) {
            Ok((tag @ (EXITED | EXITED_EMPTY), p)) => {
                return Report::Exited {
                    status: ExitStatus::from_raw(int(&p)),
                    empty: tag == EXITED_EMPTY,
                };
            }
            Ok((EMPTY, _)) => return Report::Empty,
            Ok((DEADLINE_KILL, p)) => {
                let processes = p.get(..4).map_or(0, |_| int(&p).max(0) as usize);
                let lead_ns = p
                    .get(4..12)
                    .and_then(|b| b.try_into().ok())
                    .map_or(0, i64::from_le_bytes);
                return Report::DeadlineKill { processes, lead_ns };
            }
            Ok((RESUMED, p)) => {
                return Report::Resumed {
                    pid: int(&p),
                    sig: p.get(4..).map_or(-1, int),
                };
            }
            // A frame for `spawn` out of turn: not a report.
            Ok(_) => {}
            Err(_) => return Report::Gone,
        }
    }
}

/// Tells the guard the lock's new validity deadline (one frame, so it never
/// interleaves with another writer's).
pub(crate) fn send_deadline(ctrl: &mut File, deadline: Stamp) -> io::Result<()> {
    write_frame(ctrl, DEADLINE, &stamp_bytes(deadline))
}

fn stamp_bytes(at: Stamp) -> [u8; 8] {
    u64::try_from(at.as_nanos())
        .unwrap_or(u64::MAX)
        .to_le_bytes()
}

fn stamp_of(payload: &[u8]) -> Option<Stamp> {
    let bytes: [u8; 8] = payload.get(..8)?.try_into().ok()?;
    Some(Stamp::from_nanos(u64::from_le_bytes(bytes)))
}

impl Drop for Guard {
    fn drop(&mut self) {
        // End of file on the control pipe: the guard kills whatever is left of
        // the tree (nothing, after `Empty`) and exits.
        self.ctrl.take();
    }
}

fn guard_main(mut ctrl: File, report: File, mask: SigSet) -> ! {
    // Its own group, so that a group kill aimed at redlock-run leaves it
    // standing to clean up. A fork's child is no group or session leader,
    // so this cannot fail; if it did, the guard would not be what it claims
    // to be, and it goes: redlock-run finds it gone and runs nothing.
    if rustix::process::setpgid(None, None).is_err() {
        exit_now();
    }
    // Only the name ps(1) shows: nothing depends on it.
    let _ = rustix::thread::set_name(c"redlock-guard");
    // redlock-run parses its command line meanwhile; it says nothing more
    // when it ends without running anything (a usage error, --help).
    let orders = match read_frame(&mut ctrl) {
        Ok((ORDERS, payload)) => match Orders::decode(&payload) {
            Some(orders) => orders,
            None => exit_now(),
        },
        _ => exit_now(),
    };
    // Forked before redlock-run scrubbed its own: /proc/<guard>/environ,
    // which the command could read, shows this copy.
    let names: Vec<&str> = orders.remove.iter().map(String::as_str).collect();
    spawn::scrub_environ(&names);
    let me = rustix::process::getpid();
    // Every orphan of the tree comes to the guard. Linux has had it since
    // 3.4; without it the guard cannot contain the tree, and it goes.
    if orders.contain && rustix::process::set_child_subreaper(Some(me)).is_err() {
        exit_now();
    }
    let me = me.as_raw_pid();
    // Children's exits arrive on a descriptor, so one thread can wait for
    // them and for the control pipe at once.
    let Some(children) = sigchld_fd() else {
        exit_now();
    };
    // The next attempt's command gets the caller's stdio, not /dev/null.
    let stdio = orders.again.then(keep_stdio);
    let mut post = Post {
        me,
        children,
        ctrl,
        report,
        orders,
        mask,
    };
    loop {
        let (deadline, set) = match read_frame(&mut post.ctrl) {
            Ok((SPAWN, payload)) => (
                stamp_of(&payload),
                decode_env(payload.get(8..).unwrap_or_default()),
            ),
            // A deadline sent while the last tree's end was on its way.
            Ok((DEADLINE, _)) => continue,
            // redlock-run is done: without running anything (busy,
            // unavailable), or after the last attempt.
            _ => exit_now(),
        };
        test_hook("request");
        if let Some(saved) = &stdio {
            restore_stdio(saved);
        }
        post.serve(&set, deadline);
        if !post.orders.again {
            exit_now();
        }
    }
}

/// The guard at its post: what it was told, its ends of the pipes, and its
/// descriptor for its children's exits.
struct Post {
    /// The guard's own pid: the tree hangs from it.
    me: libc::pid_t,
    /// The SIGCHLD signalfd.
    children: OwnedFd,
    ctrl: File,
    report: File,
    orders: Orders,
    /// The signal mask redlock-run was started with, for the command.
    mask: SigSet,
}

impl Post {
    /// Starts one command and watches its tree until the last process of it
    /// is gone (and reaped), reporting to redlock-run; exits the guard at
    /// once when redlock-run goes away.
    fn serve(&mut self, set: &[(String, String)], deadline: Option<Stamp>) {
        // Checked here, the last moment before the fork: the lock is only
        // as good as its deadline when the command starts.
        if deadline.is_some_and(|d| clock::now() >= self.orders.kill.due(d)) {
            // Unread only when redlock-run is gone; the control pipe's end
            // of file then ends the guard.
            let _ = write_frame(&mut self.report, TOO_LATE, &[]);
            if !self.orders.again {
                exit_now();
            }
            return;
        }
        let Some(command) = self.start(set) else {
            return;
        };
        let mut serving = Serving::new(command, deadline, &self.orders);
        // The first pass reaps without waiting: a command that exits at
        // once is caught there.
        let mut first_pass = true;
        loop {
            self.enforce(&mut serving);
            let (control, exits) = if std::mem::take(&mut first_pass) {
                (false, false)
            } else {
                match poll_two(&self.ctrl, &self.children, serving.wait(clock::now())) {
                    Ok(ready) => ready,
                    // Interrupted: the next pass polls again.
                    Err(_) => continue,
                }
            };
            if (exits || !control) && self.reap(&mut serving) {
                return;
            }
            if control {
                self.on_control(&mut serving);
            }
        }
    }

    /// Starts the command and tells redlock-run its pid (or why it could
    /// not start, and then goes on to the next request with --retry, or
    /// exits). The guard then lets go of the caller's stdio.
    fn start(&mut self, set: &[(String, String)]) -> Option<libc::pid_t> {
        let set: Vec<(&str, &str)> = set.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        let env = spawn::Env {
            set,
            remove: self.orders.remove.iter().map(String::as_str).collect(),
        };
        // The command gets the signal mask redlock-run was started with
        // (SIGCHLD is blocked here only for the signalfd).
        let started = spawn::start(
            &self.orders.program,
            &env,
            self.orders.terminal,
            self.me,
            &self.mask,
        );
        let command = match started {
            Ok(pid) => pid,
            Err(e) => {
                let errno = e.raw_os_error().unwrap_or(-1);
                // Unread only when redlock-run is gone; the control pipe's
                // end of file then ends the guard.
                let _ = write_frame(&mut self.report, FAILED, &errno.to_le_bytes());
                if self.orders.again {
                    return None;
                }
                exit_now();
            }
        };
        test_hook("spawned");
        if write_frame(&mut self.report, STARTED, &command.to_le_bytes()).is_err() {
            tree::kill_all(self.me, true, None);
            exit_now();
        }
        test_hook("reported");
        release_stdio();
        Some(command)
    }

    /// The deadline's SIGKILL, and the resume of a tree the terminal
    /// stopped, each reported after the signal, never before it. A frame
    /// that cannot be written means redlock-run is gone: the control pipe's
    /// end of file then ends the guard.
    fn enforce(&mut self, serving: &mut Serving) {
        match serving.kill(clock::now()) {
            Kill::First => {
                // No newer deadline came: redlock-run is stopped or wedged,
                // or its stop came too late. The lock may be gone now.
                let sent = tree::signal_all(self.me, libc::SIGKILL);
                let lead = serving
                    .deadline
                    .map_or(0, |d| super::lead_ns(d, clock::now()));
                // redlock-run exits 76 for it even when the command's own
                // status looks like success (a leftover was what the guard
                // stopped), and logs it.
                let processes = u32::try_from(sent.delivered).unwrap_or(u32::MAX);
                let mut p = processes.to_le_bytes().to_vec();
                p.extend_from_slice(&lead.to_le_bytes());
                let _ = write_frame(&mut self.report, DEADLINE_KILL, &p);
            }
            Kill::Again => {
                tree::signal_all(self.me, libc::SIGKILL);
            }
            Kill::No => {}
        }
        if serving.scan_due(clock::now())
            && let Some((pid, sig)) = tree::held_stop(self.me)
        {
            serving.held_stop(pid, sig);
        }
        if let Some(stop) = serving.resume(clock::now()) {
            resume(self.me, serving.command, self.orders.contain);
            if stop.tell {
                let mut p = stop.pid.to_le_bytes().to_vec();
                p.extend_from_slice(&stop.sig.to_le_bytes());
                let _ = write_frame(&mut self.report, RESUMED, &p);
            }
        }
    }

    /// Drains the SIGCHLD descriptor (SIGCHLDs coalesce), reaps every
    /// exited child, and says what that changed; true when the command's
    /// tree is gone.
    fn reap(&mut self, serving: &mut Serving) -> bool {
        while signals::take(&self.children).is_some() {}
        let Some(tag) = serving.reaped(reap(serving.command, self.orders.terminal)) else {
            return false;
        };
        let status = serving.exited.unwrap_or(-1).to_le_bytes();
        let payload: &[u8] = if tag == EMPTY { &[] } else { &status };
        // Unread only when redlock-run is gone (see `enforce`).
        let _ = write_frame(&mut self.report, tag, payload);
        tag != EXITED
    }

    /// Only deadlines come on the control pipe while a command runs: end of
    /// file means redlock-run is finished or was killed, and the tree goes
    /// with the guard.
    fn on_control(&mut self, serving: &mut Serving) {
        match read_frame(&mut self.ctrl) {
            Ok((DEADLINE, p)) => {
                if let Some(d) = stamp_of(&p) {
                    serving.new_deadline(d);
                }
            }
            Ok(_) => {}
            Err(_) => {
                if self.orders.contain {
                    tree::kill_all(self.me, true, None);
                }
                exit_now();
            }
        }
    }
}

/// Whether a pass kills the tree.
#[derive(Debug, PartialEq, Eq)]
enum Kill {
    No,
    /// The deadline (less the kill guard) passed: the first SIGKILL, to be
    /// reported.
    First,
    /// Again until reaped: a process forked between a listing and the kill
    /// is found by the next one.
    Again,
}

/// A stop by the terminal that is undone now.
#[derive(Debug, PartialEq, Eq)]
struct Resume {
    pid: libc::pid_t,
    sig: i32,
    /// Said to redlock-run (at most `RESUMED_FRAMES` per command).
    tell: bool,
}

/// What the guard knows of the command it serves: when the tree must be
/// gone, whether it is being killed, which stop of the terminal's is to be
/// undone. Each change of it is a method, tested without a process.
#[derive(Debug)]
struct Serving {
    command: libc::pid_t,
    contain: bool,
    kill: KillAt,
    /// The command's wait status, once reaped.
    exited: Option<i32>,
    /// The validity deadline redlock-run last sent, and when the tree is
    /// SIGKILLed unless a newer one comes.
    deadline: Option<Stamp>,
    kill_at: Option<Stamp>,
    killing: bool,
    /// Terminal mode: a job holding a lock cannot be suspended. The
    /// terminal stopped the command's group (Ctrl-Z), and redlock-run, which
    /// is not in it, would hold the lock while the shell waits for it and
    /// Ctrl-C (sent to the stopped group) waited too: the tree is resumed,
    /// and redlock-run says so after. The stop not yet undone.
    stop_seen: Option<(libc::pid_t, i32)>,
    resumed_at: Option<Stamp>,
    /// `Resumed` frames written so far.
    frames: u32,
    /// Terminal mode, and when the tree was last looked through for a stop
    /// no parent hears of.
    terminal: bool,
    scanned_at: Option<Stamp>,
}

impl Serving {
    fn new(command: libc::pid_t, deadline: Option<Stamp>, orders: &Orders) -> Serving {
        let mut serving = Serving {
            command,
            contain: orders.contain,
            kill: orders.kill,
            exited: None,
            deadline: None,
            kill_at: None,
            killing: false,
            stop_seen: None,
            resumed_at: None,
            frames: 0,
            terminal: orders.terminal,
            scanned_at: None,
        };
        if let Some(d) = deadline {
            serving.new_deadline(d);
        }
        serving
    }

    /// The lock's validity deadline, as redlock-run last sent it. The guard
    /// kills a fifth of the kill guard after redlock-run would: redlock-run's
    /// own stop normally reaches the tree first (and the guard's SIGKILL then
    /// passes the dying processes by), so that each process is killed once,
    /// by one of them, and the log tells which; the guard is the backstop for
    /// a redlock-run that stood still, four fifths of the guard before the
    /// deadline.
    fn new_deadline(&mut self, deadline: Stamp) {
        self.deadline = Some(deadline);
        self.kill_at = Some(self.kill.due(deadline) + self.kill.before / BACKSTOP_LAG);
    }

    /// Whether this pass, at `now`, SIGKILLs the tree (contained only).
    fn kill(&mut self, now: Stamp) -> Kill {
        if self.killing {
            Kill::Again
        } else if self.contain && self.kill_at.is_some_and(|k| now >= k) {
            self.killing = true;
            Kill::First
        } else {
            Kill::No
        }
    }

    /// The stop to undo at `now`, if one is seen and the last resume is
    /// `RESUME_GAP` ago; none while the tree is being killed.
    fn resume(&mut self, now: Stamp) -> Option<Resume> {
        if self.killing || self.resumed_at.is_some_and(|t| now < t + RESUME_GAP) {
            return None;
        }
        let (pid, sig) = self.stop_seen.take()?;
        self.resumed_at = Some(now);
        let tell = self.frames < RESUMED_FRAMES;
        if tell {
            self.frames += 1;
        }
        Some(Resume { pid, sig, tell })
    }

    /// Whether the tree is to be looked through for a held stop at `now`
    /// (terminal mode, while the command runs and no stop waits to be
    /// undone, every `STOP_SCAN`); noted as done.
    fn scan_due(&mut self, now: Stamp) -> bool {
        let due = self.terminal
            && self.exited.is_none()
            && !self.killing
            && self.stop_seen.is_none()
            && self.scanned_at.is_none_or(|t| now >= t + STOP_SCAN);
        if due {
            self.scanned_at = Some(now);
        }
        due
    }

    /// A held stop the scan found: undone as one the guard heard of.
    fn held_stop(&mut self, pid: libc::pid_t, sig: i32) {
        self.stop_seen = self.stop_seen.or(Some((pid, sig)));
    }

    /// How long the next poll may wait at `now` (None: until a child exits
    /// or redlock-run writes). Slices of the deadline's wait: poll waits on
    /// CLOCK_MONOTONIC, which stands still while the host is suspended, and
    /// the deadline is on BOOTTIME. A resume held back by `RESUME_GAP` is
    /// due at its end.
    fn wait(&self, now: Stamp) -> Option<Duration> {
        if self.killing {
            return Some(KILL_AGAIN);
        }
        let deadline = self
            .kill_at
            .map(|k| k.saturating_duration_since(now).min(SLICE));
        let resume = self
            .resumed_at
            .filter(|_| self.stop_seen.is_some())
            .map(|t| (t + RESUME_GAP).saturating_duration_since(now) + Duration::from_millis(1));
        let scan = (self.terminal && self.exited.is_none()).then(|| {
            self.scanned_at.map_or(Duration::ZERO, |t| {
                (t + STOP_SCAN).saturating_duration_since(now)
            })
        });
        [deadline, resume, scan].into_iter().flatten().min()
    }

    /// What a reap found, as the frame it calls for: `EXITED_EMPTY` for the
    /// command's exit with nothing left (the usual case, one frame for
    /// both; always so uncontained), `EXITED` for its exit with processes
    /// left, `EMPTY` once they are gone too. A stop by the terminal is noted
    /// for `resume`.
    fn reaped(&mut self, r: Reaped) -> Option<u8> {
        if let Some((pid, sig)) = r.stopped.filter(|(_, sig)| terminal_stop(*sig)) {
            self.stop_seen = self.stop_seen.or(Some((pid, sig)));
        }
        if self.exited.is_none()
            && let Some(status) = r.command
        {
            self.exited = Some(status);
            return Some(if r.empty || !self.contain {
                EXITED_EMPTY
            } else {
                EXITED
            });
        }
        (r.empty && self.exited.is_some()).then_some(EMPTY)
    }
}

/// The guard's SIGKILL comes this fraction of the kill guard after
/// redlock-run's (see `Serving::new_deadline`): 10 ms for the smallest
/// guard, more than redlock-run's wake-up takes on a busy machine.
const BACKSTOP_LAG: u32 = 5;

/// The longest a poll waits for the deadline at once (see `Serving::wait`).
const SLICE: Duration = Duration::from_millis(100);

/// How often SIGKILL is repeated until the tree is reaped.
const KILL_AGAIN: Duration = Duration::from_millis(5);

/// Copies of fds 0-2 above them, close-on-exec so that no command inherits
/// the copies. Held only with --retry, until redlock-run closes the control
/// pipe, which it does before it releases the lock: a `$(redlock-run ...)`
/// still ends with redlock-run. A copy that cannot be made (no such fd, or
/// none free) is None.
fn keep_stdio() -> [Option<OwnedFd>; 3] {
    use rustix::stdio::{stderr, stdin, stdout};
    [stdin(), stdout(), stderr()].map(|fd| rustix::io::fcntl_dupfd_cloexec(fd, 3).ok())
}

/// Puts the caller's stdio back on fds 0-2 for the next command. A copy
/// that could not be made, or put back, leaves /dev/null there: the command
/// runs with that, as it would under a caller that closed it.
fn restore_stdio(saved: &[Option<OwnedFd>; 3]) {
    use rustix::stdio::{dup2_stderr, dup2_stdin, dup2_stdout};
    let [stdin, stdout, stderr] = saved;
    if let Some(copy) = stdin {
        let _ = dup2_stdin(copy);
    }
    if let Some(copy) = stdout {
        let _ = dup2_stdout(copy);
    }
    if let Some(copy) = stderr {
        let _ = dup2_stderr(copy);
    }
}

/// A signalfd for SIGCHLD, which is blocked so that only the fd sees it.
fn sigchld_fd() -> Option<OwnedFd> {
    let set = SigSet::of([libc::SIGCHLD]);
    signals::thread_mask(How::Block, Some(&set));
    signals::signalfd(&set).ok()
}

/// One poll(2) for the control pipe and the SIGCHLD descriptor, up to
/// `timeout` (None: until one is ready): which of them is.
fn poll_two(
    ctrl: &File,
    children: &OwnedFd,
    timeout: Option<Duration>,
) -> rustix::io::Result<(bool, bool)> {
    let mut fds = [
        PollFd::new(ctrl, PollFlags::IN),
        PollFd::new(children, PollFlags::IN),
    ];
    let timeout = timeout.map(|t| {
        Timespec::try_from(t).unwrap_or(Timespec {
            tv_sec: i64::MAX,
            tv_nsec: 0,
        })
    });
    rustix::event::poll(&mut fds, timeout.as_ref())?;
    Ok((!fds[0].revents().is_empty(), !fds[1].revents().is_empty()))
}

/// What one pass of `reap` found.
struct Reaped {
    /// The command's wait status, if it exited.
    command: Option<i32>,
    /// No child at all is left.
    empty: bool,
    /// A child that was stopped (with `untraced`), and by which signal.
    stopped: Option<(libc::pid_t, i32)>,
}

/// Reaps every child that has exited: the command's wait status if it was
/// one of them, and whether no child at all is left. With `untraced`, also
/// notes a child that stopped (each stop is reported once).
fn reap(command_pid: libc::pid_t, untraced: bool) -> Reaped {
    let mut r = Reaped {
        command: None,
        empty: false,
        stopped: None,
    };
    let mut flags = WaitOptions::NOHANG;
    if untraced {
        flags |= WaitOptions::UNTRACED;
    }
    loop {
        // Any child: wait(2)'s -1, not waitpid(None), which is 0 (the
        // guard's own process group only, which the command leaves).
        match rustix::process::wait(flags) {
            Ok(Some((pid, status))) => {
                let pid = pid.as_raw_pid();
                if let Some(sig) = status.stopping_signal().filter(|_| status.stopped()) {
                    r.stopped = r.stopped.or(Some((pid, sig)));
                } else if pid == command_pid {
                    r.command = Some(status.as_raw());
                }
            }
            Ok(None) => return r,
            Err(Errno::INTR) => continue,
            // ECHILD: every descendant is gone and reaped.
            Err(_) => {
                r.empty = true;
                return r;
            }
        }
    }
}

/// A stop that comes from the terminal: Ctrl-Z (SIGTSTP), or reading
/// (SIGTTIN) or writing to or setting it (SIGTTOU) from a background group.
/// SIGSTOP is not one: whoever sends it (an operator, a debugger) means it.
fn terminal_stop(sig: i32) -> bool {
    matches!(sig, libc::SIGTSTP | libc::SIGTTIN | libc::SIGTTOU)
}

/// SIGCONT to the whole tree (or, uncontained, to the command's group).
fn resume(me: libc::pid_t, command_pid: libc::pid_t, contain: bool) {
    if contain {
        tree::signal_all(me, libc::SIGCONT);
    } else if let Some(group) = super::pid(command_pid) {
        // The group is gone (ESRCH) when there is nothing left to resume.
        let _ = rustix::process::kill_process_group(group, Signal::CONT);
    }
}

/// The guard holds no terminal or pipe of the caller's once the command has
/// its own copies: a `$(redlock-run ...)` must not wait for the guard. Where
/// /dev/null cannot be opened (or put in place), the fds stay as they were:
/// a caller may then wait for the guard, never the other way round.
fn release_stdio() {
    use rustix::stdio::{dup2_stderr, dup2_stdin, dup2_stdout};
    let Ok(null) = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/null")
    else {
        return;
    };
    let _ = dup2_stdin(&null);
    let _ = dup2_stdout(&null);
    let _ = dup2_stderr(&null);
}

impl Orders {
    /// flags, the kill schedule (before and after, ns), the program's kind, its parts, the names to
    /// remove; every part as [u32 length][bytes].
    fn encode(&self) -> io::Result<Vec<u8>> {
        use std::os::unix::ffi::OsStrExt;
        let flags =
            u8::from(self.terminal) | u8::from(self.contain) << 1 | u8::from(self.again) << 2;
        let mut out = vec![flags];
        for d in [self.kill.before, self.kill.after] {
            let nanos = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
            out.extend_from_slice(&nanos.to_le_bytes());
        }
        let (kind, parts): (u8, Vec<&[u8]>) = match &self.program {
            Program::Shell(script) => (b's', vec![script.as_bytes()]),
            Program::Argv(argv) => (b'a', argv.iter().map(|a| a.as_bytes()).collect()),
        };
        out.push(kind);
        let names: Vec<&[u8]> = self.remove.iter().map(|n| n.as_bytes()).collect();
        for list in [parts, names] {
            put_len(&mut out, list.len())?;
            for part in list {
                put_len(&mut out, part.len())?;
                out.extend_from_slice(part);
            }
        }
        Ok(out)
    }

    fn decode(payload: &[u8]) -> Option<Orders> {
        use std::os::unix::ffi::OsStringExt;
        let (&flags, rest) = payload.split_first()?;
        let (before, rest) = rest.split_first_chunk::<8>()?;
        let (after, rest) = rest.split_first_chunk::<8>()?;
        let (&kind, mut rest) = rest.split_first()?;
        let mut list = || -> Option<Vec<Vec<u8>>> {
            let (n, after) = take_len(rest)?;
            rest = after;
            let mut parts = Vec::with_capacity(n.min(4096));
            for _ in 0..n {
                let (len, after) = take_len(rest)?;
                parts.push(after.get(..len)?.to_vec());
                rest = &after[len..];
            }
            Some(parts)
        };
        let parts = list()?;
        let names = list()?;
        let program = match kind {
            b's' => Program::Shell(String::from_utf8(parts.into_iter().next()?).ok()?),
            b'a' if !parts.is_empty() => {
                Program::Argv(parts.into_iter().map(OsString::from_vec).collect())
            }
            _ => return None,
        };
        Some(Orders {
            program,
            remove: names
                .into_iter()
                .map(String::from_utf8)
                .collect::<Result<_, _>>()
                .ok()?,
            terminal: flags & 1 != 0,
            contain: flags & 2 != 0,
            again: flags & 4 != 0,
            kill: KillAt {
                before: Duration::from_nanos(u64::from_le_bytes(*before)),
                after: Duration::from_nanos(u64::from_le_bytes(*after)),
            },
        })
    }
}

fn put_len(out: &mut Vec<u8>, len: usize) -> io::Result<()> {
    let len = u32::try_from(len).map_err(|_| io::Error::other("too long"))?;
    out.extend_from_slice(&len.to_le_bytes());
    Ok(())
}

fn take_len(bytes: &[u8]) -> Option<(usize, &[u8])> {
    let (len, rest) = bytes.split_first_chunk::<4>()?;
    Some((u32::from_le_bytes(*len) as usize, rest))
}

fn decode_env(mut payload: &[u8]) -> Vec<(String, String)> {
    let mut next = || {
        let len = u32::from_le_bytes(payload.get(..4)?.try_into().ok()?) as usize;
        let part = payload.get(4..4 + len)?;
        payload = &payload[4 + len..];
        Some(String::from_utf8_lossy(part).into_owned())
    };
    let mut out = Vec::new();
    while let (Some(k), Some(v)) = (next(), next()) {
        out.push((k, v));
    }
    out
}

/// Test builds only: the guard dies (SIGKILL) at the step of the start-up
/// protocol named by `REDLOCK_TEST_GUARD_DIES` (`request`: the request read,
/// nothing started; `spawned`: the command started, not yet reported;
/// `reported`: reported, nothing watched yet).
#[cfg(feature = "test-hooks")]
fn test_hook(step: &str) {
    if std::env::var_os("REDLOCK_TEST_GUARD_DIES").is_some_and(|s| s == step) {
        // SIGKILL to ourselves does not return.
        let _ = rustix::process::kill_process(rustix::process::getpid(), Signal::KILL);
    }
}

#[cfg(not(feature = "test-hooks"))]
fn test_hook(_step: &str) {}

fn exit_now() -> ! {
    // SAFETY: _exit skips atexit handlers and stdio flushing, which belong to
    // redlock-run (buffers copied by the fork would be written twice).
    unsafe { libc::_exit(0) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn orders_frames_round_trip() {
        use std::os::unix::ffi::OsStringExt;
        for orders in [
            Orders {
                program: Program::Argv(vec![
                    OsString::from("printf"),
                    OsString::from_vec(b"%s\n\xff".to_vec()),
                    OsString::new(),
                ]),
                remove: vec!["REDLOCK_PASSWORD".into(), "REDLOCK_REDIS".into()],
                terminal: true,
                contain: false,
                again: true,
                kill: KillAt::guard(Duration::from_millis(1500)),
            },
            Orders {
                program: Program::Shell("echo 'a b' | tr a c".into()),
                remove: Vec::new(),
                terminal: false,
                contain: true,
                again: false,
                kill: KillAt {
                    before: Duration::ZERO,
                    after: Duration::from_millis(1),
                },
            },
        ] {
            let bytes = orders.encode().expect("encode");
            assert_eq!(Orders::decode(&bytes), Some(orders));
            for cut in 0..bytes.len() {
                assert_eq!(Orders::decode(&bytes[..cut]), None, "cut at {cut}");
            }
        }
    }

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    /// A moment `n` ms after an arbitrary origin.
    fn at(n: u64) -> Stamp {
        Stamp::from_nanos(1_000_000_000_000) + ms(n)
    }

    fn serving(contain: bool, deadline: Option<Stamp>) -> Serving {
        serving_on(false, contain, deadline)
    }

    fn serving_on(terminal: bool, contain: bool, deadline: Option<Stamp>) -> Serving {
        let orders = Orders {
            program: Program::Shell("true".into()),
            remove: Vec::new(),
            terminal,
            contain,
            again: false,
            kill: KillAt::guard(ms(1_000)),
        };
        Serving::new(4242, deadline, &orders)
    }

    fn reaped(command: Option<i32>, empty: bool, stopped: Option<(i32, i32)>) -> Reaped {
        Reaped {
            command,
            empty,
            stopped,
        }
    }

    #[test]
    fn the_tree_is_killed_four_fifths_of_a_guard_before_the_deadline_unless_a_newer_one_comes() {
        // A 1 s guard: redlock-run kills at 9 s, the guard 200 ms later.
        let mut s = serving(true, Some(at(10_000)));
        assert_eq!(s.wait(at(0)), Some(SLICE), "in slices");
        assert_eq!(s.wait(at(9_150)), Some(ms(50)));
        assert_eq!(s.kill(at(9_199)), Kill::No);
        s.new_deadline(at(20_000));
        assert_eq!(s.kill(at(9_200)), Kill::No, "moved on");
        assert_eq!(s.kill(at(19_200)), Kill::First, "reported once");
        assert_eq!(s.kill(at(19_201)), Kill::Again);
        assert_eq!(s.wait(at(19_201)), Some(KILL_AGAIN));
        s.new_deadline(at(60_000));
        assert_eq!(s.kill(at(19_202)), Kill::Again, "too late: killing goes on");

        let mut s = serving(false, Some(at(10_000)));
        assert_eq!(
            s.kill(at(60_000)),
            Kill::No,
            "uncontained: redlock-run stops it"
        );
        assert_eq!(serving(true, None).wait(at(0)), None, "nothing to time");
    }

    #[test]
    fn terminal_stops_are_undone_at_most_every_gap_and_said_a_bounded_number_of_times() {
        let mut s = serving_on(true, true, None);
        s.scanned_at = Some(at(0));
        assert_eq!(
            s.reaped(reaped(None, false, Some((7, libc::SIGSTOP)))),
            None
        );
        assert_eq!(s.resume(at(0)), None, "SIGSTOP is meant: left alone");
        s.reaped(reaped(None, false, Some((7, libc::SIGTSTP))));
        let first = Resume {
            pid: 7,
            sig: libc::SIGTSTP,
            tell: true,
        };
        assert_eq!(s.resume(at(0)), Some(first));
        assert_eq!(s.resume(at(1)), None, "once per stop");
        s.reaped(reaped(None, false, Some((8, libc::SIGTTIN))));
        assert_eq!(s.resume(at(50)), None, "within the gap");
        assert_eq!(s.wait(at(50)), Some(ms(51)), "woken at its end");
        assert_eq!(s.resume(at(100)).map(|r| r.pid), Some(8));
        let mut told = 2;
        for n in 1..40u64 {
            s.reaped(reaped(None, false, Some((8, libc::SIGTTIN))));
            if s.resume(at(100 + n * 100)).expect("due").tell {
                told += 1;
            }
        }
        assert_eq!(told, RESUMED_FRAMES, "the rest resume without a word");
        s.reaped(reaped(None, false, Some((9, libc::SIGTTOU))));
        assert_eq!(s.kill(at(0)), Kill::No);
        s.killing = true;
        assert_eq!(s.resume(at(60_000)), None, "not while killing");
    }

    #[test]
    fn on_a_terminal_the_tree_is_looked_through_for_held_stops_while_the_command_runs() {
        let mut s = serving_on(true, true, None);
        assert!(s.scan_due(at(0)), "at once");
        assert_eq!(s.wait(at(0)), Some(STOP_SCAN), "then every STOP_SCAN");
        assert!(!s.scan_due(at(249)));
        assert!(s.scan_due(at(250)));
        s.held_stop(11, libc::SIGTSTP);
        assert!(!s.scan_due(at(1_000)), "not while a stop waits");
        assert_eq!(
            s.resume(at(1_000)).map(|r| (r.pid, r.sig, r.tell)),
            Some((11, libc::SIGTSTP, true)),
            "undone and said as one the guard heard of"
        );
        assert!(s.scan_due(at(1_000)));
        s.killing = true;
        assert!(!s.scan_due(at(2_000)), "not while killing");

        let mut s = serving_on(true, true, None);
        s.reaped(reaped(Some(0), false, None));
        assert!(!s.scan_due(at(0)), "not once the command has exited");
        assert_eq!(s.wait(at(0)), None);
        let mut s = serving(true, None);
        assert!(!s.scan_due(at(0)), "not off a terminal");
    }

    #[test]
    fn one_frame_says_exit_and_end_unless_processes_are_left() {
        let mut s = serving(true, None);
        assert_eq!(s.reaped(reaped(None, false, None)), None);
        assert_eq!(
            s.reaped(reaped(Some(3 << 8), true, None)),
            Some(EXITED_EMPTY)
        );
        assert_eq!(s.exited, Some(3 << 8));

        let mut s = serving(true, None);
        assert_eq!(s.reaped(reaped(Some(0), false, None)), Some(EXITED));
        assert_eq!(s.reaped(reaped(None, false, None)), None, "leftovers run");
        assert_eq!(s.reaped(reaped(None, true, None)), Some(EMPTY));

        let mut s = serving(false, None);
        assert_eq!(
            s.reaped(reaped(Some(0), false, None)),
            Some(EXITED_EMPTY),
            "uncontained: the tree is not followed"
        );
    }

    #[test]
    fn no_fork_while_another_thread_runs() {
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        let other = std::thread::spawn(move || {
            let _ = rx.recv();
        });
        let refused = Guard::fork(SigSet::of([])).err().expect("refused");
        assert!(refused.to_string().contains("threads by now"), "{refused}");
        drop(tx);
        other.join().expect("join");
    }

    #[test]
    fn env_frames_round_trip() {
        let mut payload = Vec::new();
        for part in ["REDLOCK_KEY", "a\nb=c", "REDLOCK_TOKEN", ""] {
            payload.extend_from_slice(&(part.len() as u32).to_le_bytes());
            payload.extend_from_slice(part.as_bytes());
        }
        assert_eq!(
            decode_env(&payload),
            [
                ("REDLOCK_KEY".to_string(), "a\nb=c".to_string()),
                ("REDLOCK_TOKEN".to_string(), String::new())
            ]
        );
        assert!(
            decode_env(&payload[..7]).is_empty(),
            "a cut frame is ignored"
        );
    }
}
