//! The command's process tree: every live descendant of a process, whatever
//! process group or session it moved to.
//!
//! Descendants are found through `/proc/PID/task/TID/children` (or, on kernels
//! built without it, a scan of `/proc/*/stat`). Each one is pinned with a
//! pidfd and its parent checked again *after* pinning, so a signal can never
//! reach an unrelated process that happened to get a recycled pid between the
//! listing and the kill (pid_max is 32768 on many hosts). A pin is held only
//! while its process is looked at and signalled, not for the whole walk: a
//! tree of thousands of processes must not run out of descriptors (a 1024
//! soft limit is common), which would leave the signal unpinned or unsent.
//!
//! A process is alive while any of its threads is: one whose main thread
//! called `pthread_exit()` shows `Z` for its leader in `/proc/PID/stat`
//! while its other threads run on.

use std::collections::HashSet;
use std::fs;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use rustix::io::Errno;
use rustix::process::{PidfdFlags, Signal, WaitOptions};

use crate::clock;

/// One live descendant, as found by a walk.
#[derive(Debug)]
pub(crate) struct Member {
    pub pid: libc::pid_t,
}

impl Member {
    /// The process's name (`/proc/PID/comm`), for messages.
    pub(crate) fn name(&self) -> String {
        fs::read_to_string(format!("/proc/{}/comm", self.pid))
            .map(|s| s.trim_end().to_string())
            .unwrap_or_else(|_| "?".into())
    }

    /// Its process group, for messages (None if it is gone).
    pub(crate) fn pgid(&self) -> Option<libc::pid_t> {
        Some(state_and_group(self.pid)?.1)
    }
}

/// A live member of the tree that may not be signalled by us (EPERM): it
/// runs as another user, and neither SIGTERM nor SIGKILL of ours reaches it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Unkillable {
    pub pid: libc::pid_t,
    /// Its real user id, or u32::MAX when it could not be read.
    pub uid: u32,
}

/// What one signal to the tree came to.
#[derive(Debug, Default)]
pub(crate) struct Sent {
    /// Live members found.
    pub found: usize,
    /// Members that got the signal.
    pub delivered: usize,
    /// Members passed by: dying of a SIGKILL already (sent before, by us or
    /// the guard, or a fatal signal the kernel made one) or on their way out.
    pub dying: usize,
    /// Members that refused it.
    pub refused: Vec<Unkillable>,
}

/// Set once pidfd_open answers ENOSYS (kernels before 5.3): plain kill(2) then.
static NO_PIDFD: AtomicBool = AtomicBool::new(false);

/// A pin on `pid`, or None where the kernel has no pidfds (Err: the process
/// is gone, or no descriptor is to be had right now).
fn pidfd_open(pid: libc::pid_t) -> Result<Option<OwnedFd>, Errno> {
    if NO_PIDFD.load(Ordering::Relaxed) {
        return Ok(None);
    }
    let Some(target) = super::pid(pid) else {
        return Err(Errno::SRCH);
    };
    match rustix::process::pidfd_open(target, PidfdFlags::empty()) {
        Ok(fd) => Ok(Some(fd)),
        Err(Errno::NOSYS) => {
            NO_PIDFD.store(true, Ordering::Relaxed);
            Ok(None)
        }
        Err(e) => Err(e),
    }
}

/// Sends `sig` through the pin (or by pid where there are no pidfds); the
/// errno on failure.
fn send(pid: libc::pid_t, fd: Option<&OwnedFd>, sig: i32) -> Result<(), Errno> {
    let sig = Signal::from_named_raw(sig).ok_or(Errno::INVAL)?;
    match fd {
        Some(fd) => rustix::process::pidfd_send_signal(fd, sig),
        None => rustix::process::kill_process(super::pid(pid).ok_or(Errno::SRCH)?, sig),
    }
}

/// The real uid of `pid` (`Uid:` in `/proc/PID/status`).
fn uid_of(pid: libc::pid_t) -> u32 {
    fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Uid:"))?
                .split_whitespace()
                .next()?
                .parse()
                .ok()
        })
        .unwrap_or(u32::MAX)
}

/// A small /proc file in one read where it fits: `fs::read` sizes its
/// buffer by the file's length, which /proc reports as 0, and so reads a
/// stat file in five calls growing from 32 bytes. The guard reads one per
/// member, twice per pass of a kill.
fn read_proc(path: &str) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    let mut file = fs::File::open(path)?;
    let mut buf = Vec::with_capacity(1024);
    file.read_to_end(&mut buf)?;
    Ok(buf)
}

/// What a `/proc/PID/stat` (or a task's stat file) says of a process.
struct Stat {
    state: u8,
    ppid: libc::pid_t,
    pgrp: libc::pid_t,
    /// The kernel's `PF_*` flags.
    flags: u64,
}

/// The kernel's flag for a task on its exit path, from which it never
/// returns to its program.
const PF_EXITING: u64 = 0x4;

/// [`Stat`] from the file at `path`.
fn stat_fields(path: &str) -> Option<Stat> {
    let text = read_proc(path).ok()?;
    // The name in parentheses may hold anything, ')' included: the fields
    // that follow start after the last ')'.
    let close = text.iter().rposition(|b| *b == b')')?;
    let mut fields = text[close + 1..]
        .split(|b| *b == b' ')
        .filter(|f| !f.is_empty());
    let state = *fields.next()?.first()?;
    let mut number = || {
        std::str::from_utf8(fields.next()?)
            .ok()?
            .parse::<i64>()
            .ok()
    };
    let ppid = libc::pid_t::try_from(number()?).ok()?;
    let pgrp = libc::pid_t::try_from(number()?).ok()?;
    // session, tty, tpgid, then the flags.
    let flags = (0..3).try_fold(0, |_, _| number()).and_then(|_| number());
    Some(Stat {
        state,
        ppid,
        pgrp,
        flags: flags.and_then(|f| u64::try_from(f).ok()).unwrap_or(0),
    })
}

/// State and parent of `pid` from `/proc/PID/stat` (or a task's stat file).
fn stat_at(path: &str) -> Option<(u8, libc::pid_t)> {
    let st = stat_fields(path)?;
    Some((st.state, st.ppid))
}

/// Whether a signal would be wasted on live process `pid`: it is dying of
/// a SIGKILL already (pending, the kernel's mark of a fatal signal) or its leader
/// is on its way out (a leader that exited alone, `Zl`, leaves its other
/// threads to run: no).
fn dying(pid: libc::pid_t, st: &Stat) -> bool {
    if st.flags & PF_EXITING != 0 && !dead(st.state) {
        return true;
    }
    let Ok(text) = read_proc(&format!("/proc/{pid}/status")) else {
        return false;
    };
    String::from_utf8_lossy(&text)
        .lines()
        .filter_map(|l| {
            l.strip_prefix("SigPnd:")
                .or_else(|| l.strip_prefix("ShdPnd:"))
        })
        .filter_map(|mask| u64::from_str_radix(mask.trim(), 16).ok())
        .any(|mask| mask & (1 << (libc::SIGKILL - 1)) != 0)
}

fn stat(pid: libc::pid_t) -> Option<(u8, libc::pid_t)> {
    stat_at(&format!("/proc/{pid}/stat"))
}

fn dead(state: u8) -> bool {
    state == b'Z' || state == b'X'
}

/// Whether any thread of `pid` still runs (its leader's state says so for
/// most processes; a leader that exited alone leaves the others to look at).
fn alive(pid: libc::pid_t, leader_state: u8) -> bool {
    if !dead(leader_state) {
        return true;
    }
    numbers(&format!("/proc/{pid}/task"))
        .into_iter()
        .any(|tid| stat_at(&format!("/proc/{pid}/task/{tid}/stat")).is_some_and(|(s, _)| !dead(s)))
}

fn numbers(dir: &str) -> Vec<libc::pid_t> {
    fs::read_dir(dir).map_or_else(
        |_| Vec::new(),
        |entries| {
            entries
                .flatten()
                .filter_map(|e| {
                    std::str::from_utf8(e.file_name().as_bytes())
                        .ok()?
                        .parse()
                        .ok()
                })
                .collect()
        },
    )
}

/// Direct children of `pid` (all its threads), or None where the kernel
/// has no `children` files.
fn children(pid: libc::pid_t) -> Option<Vec<libc::pid_t>> {
    let mut out = Vec::new();
    let mut any = false;
    for tid in numbers(&format!("/proc/{pid}/task")) {
        match read_proc(&format!("/proc/{pid}/task/{tid}/children")) {
            Ok(list) => {
                any = true;
                out.extend(
                    String::from_utf8_lossy(&list)
                        .split_whitespace()
                        .filter_map(|p| p.parse::<libc::pid_t>().ok()),
                );
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(_) => any = true,
        }
    }
    // A process whose threads are all listed but without children files.
    if !any && fs::metadata(format!("/proc/{pid}")).is_ok() {
        return None;
    }
    Some(out)
}

/// Every live descendant of `root`, parents before children, and every pid
/// the walk met (zombies included: their children are still ours), `root`
/// too. Each is pinned while its parent is checked, one at a time.
fn walk(root: libc::pid_t) -> (Vec<libc::pid_t>, HashSet<libc::pid_t>) {
    let mut known: HashSet<libc::pid_t> = HashSet::from([root]);
    let mut live = Vec::new();
    let mut queue = vec![root];
    let mut scan: Option<Vec<(libc::pid_t, libc::pid_t)>> = None;
    while let Some(parent) = queue.pop() {
        let kids = match children(parent) {
            Some(k) => k,
            None => {
                // Without children files: one scan of /proc serves the whole walk.
                let all = scan.get_or_insert_with(|| {
                    numbers("/proc")
                        .into_iter()
                        .filter_map(|p| Some((p, stat(p)?.1)))
                        .collect()
                });
                all.iter()
                    .filter(|(_, pp)| *pp == parent)
                    .map(|(p, _)| *p)
                    .collect()
            }
        };
        for pid in kids {
            if known.contains(&pid) {
                continue;
            }
            if let Some(state) = pinned_state(pid, &known) {
                known.insert(pid);
                queue.push(pid);
                if alive(pid, state) {
                    live.push(pid);
                }
            }
        }
    }
    (live, known)
}

/// The state of `pid` if, pinned, its parent is one of `known`: checked
/// after pinning, so a pid recycled before the pin (whose new process's
/// parent is not one of ours) is left alone. The pin is dropped on return.
fn pinned_state(pid: libc::pid_t, known: &HashSet<libc::pid_t>) -> Option<u8> {
    let _pin = pidfd_open(pid).ok()?;
    match stat(pid) {
        Some((state, ppid)) if known.contains(&ppid) => Some(state),
        _ => None,
    }
}

/// A stop of the terminal's that no parent hears of: a member of `root`'s
/// tree stopped while another member of its process group has SIGTSTP,
/// SIGTTIN or SIGTTOU pending, with that signal. Ctrl-Z stops the whole
/// foreground group, but a process in vfork(2) (a shell running a command,
/// posix_spawn) cannot stop until its child has exec'd, and that child,
/// stopped before its exec, never will: the parent waits in the kernel with
/// the stop pending, and the guard, which hears only of its own children's
/// stops, would leave the pair frozen under the lock. A SIGSTOP from
/// elsewhere leaves nothing pending on the others, and is left alone.
pub(crate) fn held_stop(root: libc::pid_t) -> Option<(libc::pid_t, i32)> {
    let members: Vec<(libc::pid_t, u8, libc::pid_t)> = walk(root)
        .0
        .into_iter()
        .filter_map(|pid| {
            let (state, group) = state_and_group(pid)?;
            Some((pid, state, group))
        })
        .collect();
    let stopped: Vec<&(libc::pid_t, u8, libc::pid_t)> = members
        .iter()
        .filter(|(_, state, _)| *state == b'T')
        .collect();
    if stopped.is_empty() {
        return None;
    }
    members
        .iter()
        .filter(|(_, state, _)| *state != b'T')
        .find_map(|&(pid, _, group)| {
            let sig = pending_terminal_stop(pid)?;
            let (held, _, _) = stopped.iter().find(|(_, _, g)| *g == group)?;
            Some((*held, sig))
        })
}

/// State and process group of `pid` from `/proc/PID/stat`.
fn state_and_group(pid: libc::pid_t) -> Option<(u8, libc::pid_t)> {
    let st = stat_fields(&format!("/proc/{pid}/stat"))?;
    Some((st.state, st.pgrp))
}

/// A terminal stop signal pending on `pid` (its own or its process's
/// pending set in `/proc/PID/status`), if any.
fn pending_terminal_stop(pid: libc::pid_t) -> Option<i32> {
    let text = read_proc(&format!("/proc/{pid}/status")).ok()?;
    let pending = String::from_utf8_lossy(&text)
        .lines()
        .filter_map(|l| {
            let mask = l
                .strip_prefix("SigPnd:")
                .or_else(|| l.strip_prefix("ShdPnd:"))?;
            u64::from_str_radix(mask.trim(), 16).ok()
        })
        .fold(0u64, |a, m| a | m);
    [libc::SIGTSTP, libc::SIGTTIN, libc::SIGTTOU]
        .into_iter()
        .find(|&sig| pending & (1u64 << (sig - 1)) != 0)
}

/// Every live descendant of `root`, parents before children.
pub(crate) fn descendants(root: libc::pid_t) -> Vec<Member> {
    walk(root).0.into_iter().map(|pid| Member { pid }).collect()
}

/// Sends `sig` to every live descendant of `root`. The whole tree is listed
/// first: a parent killed before its children were listed would hand them
/// to the subreaper and out of the listing. Each member is then pinned again
/// and its parent checked again (one of the tree's, or the subreaper it was
/// re-parented to) before the signal goes through the pin. It passes by a
/// member that is dying already ([`dying`]), which no signal can reach any
/// more: `delivered` counts the processes it reached, as the log says.
pub(crate) fn signal_all(root: libc::pid_t, sig: i32) -> Sent {
    let (live, known) = walk(root);
    let mut sent = Sent::default();
    for pid in live {
        let fd = match pidfd_open(pid) {
            Ok(fd) => fd,
            Err(Errno::SRCH) => continue,
            // No descriptor for a pin this time: the next round finds it
            // again if it is still there.
            Err(_) => {
                sent.found += 1;
                continue;
            }
        };
        let st = match stat_fields(&format!("/proc/{pid}/stat")) {
            Some(st) if known.contains(&st.ppid) && alive(pid, st.state) => st,
            _ => continue,
        };
        sent.found += 1;
        if dying(pid, &st) {
            sent.dying += 1;
            continue;
        }
        match send(pid, fd.as_ref(), sig) {
            Ok(()) => sent.delivered += 1,
            Err(Errno::PERM) => sent.refused.push(Unkillable {
                pid,
                uid: uid_of(pid),
            }),
            // Gone since (ESRCH).
            Err(_) => {}
        }
    }
    sent
}

/// Reaps every exited child of this process; true once none is left at all
/// (ECHILD).
pub(crate) fn reap_all() -> bool {
    loop {
        // Any child: wait(2)'s -1, not waitpid(None), which is 0 (the
        // caller's own process group only).
        match rustix::process::wait(WaitOptions::NOHANG) {
            Ok(Some(_)) => continue,
            Ok(None) => return false,
            Err(Errno::INTR) => continue,
            Err(Errno::CHILD) => return true,
            Err(_) => return false,
        }
    }
}

/// How a kill of the whole tree ended.
#[derive(Debug)]
pub(crate) struct Killed {
    /// Nothing of the tree is left.
    pub empty: bool,
    /// Processes the SIGKILLs stopped (each once).
    pub delivered: usize,
}

/// SIGKILLs every descendant of `root`, again and again, until none is left
/// or `limit` has passed (None: for as long as it takes): a process that
/// forks between a listing and the kill is found by the next listing, and a
/// SIGKILLed one cannot fork. With `reap` the caller is `root` and reaps:
/// the tree is gone only when waitpid says no child is left (ECHILD), which
/// no listing can miss; otherwise when a listing finds none.
pub(crate) fn kill_all(root: libc::pid_t, reap: bool, limit: Option<Duration>) -> Killed {
    let until = limit.map(|l| clock::now() + l);
    // Short while processes are dying; longer while only refusing or stuck
    // ones (another user's, uninterruptible) remain, which may be for long.
    let mut pause = Duration::from_micros(500);
    let mut delivered = 0;
    loop {
        let sent = signal_all(root, libc::SIGKILL);
        delivered += sent.delivered;
        let empty = if reap { reap_all() } else { sent.found == 0 };
        if empty || until.is_some_and(|u| clock::now() >= u) {
            return Killed { empty, delivered };
        }
        pause = if sent.delivered > 0 {
            Duration::from_micros(500)
        } else if sent.dying > 0 {
            (pause * 2).min(Duration::from_millis(5))
        } else {
            (pause * 2).min(Duration::from_millis(100))
        };
        std::thread::sleep(pause);
    }
}
#[cfg(test)]
mod tests {
    use super::*;
    use std::process::{Command, Stdio};

    #[test]
    fn stat_reads_state_and_parent_despite_odd_names() {
        let me = rustix::process::getpid().as_raw_pid();
        let parent = rustix::process::getppid().map_or(0, |p| p.as_raw_pid());
        let (state, ppid) = stat(me).expect("own stat");
        assert_eq!(ppid, parent);
        assert!(state.is_ascii_uppercase(), "{}", state as char);
        assert_eq!(stat(-5), None);
    }

    #[test]
    fn finds_grandchildren_and_kills_them_all() {
        // A shell that leaves a background job and a setsid'd one behind.
        let mut sh = Command::new("/bin/sh")
            .args(["-c", "sleep 30 & setsid sleep 30 & echo ready; wait"])
            .stdout(Stdio::piped())
            .spawn()
            .expect("spawn sh");
        let mut line = String::new();
        std::io::BufRead::read_line(
            &mut std::io::BufReader::new(sh.stdout.take().expect("piped")),
            &mut line,
        )
        .expect("read");
        let sh_pid = sh.id() as libc::pid_t;
        // The forks may not have exec'd sleep yet.
        let until = clock::now() + Duration::from_secs(5);
        let found = loop {
            let found = descendants(sh_pid);
            if found.len() == 2 && found.iter().all(|m| m.name() == "sleep") || clock::now() > until
            {
                break found;
            }
            std::thread::sleep(Duration::from_millis(5));
        };
        assert_eq!(found.len(), 2, "{found:?}");
        assert!(found.iter().all(|m| m.name() == "sleep"), "{found:?}");
        assert!(kill_all(sh_pid, false, Some(Duration::from_secs(5))).empty);
        assert!(descendants(sh_pid).is_empty());
        let _ = sh.kill();
        let _ = sh.wait();
    }
}
