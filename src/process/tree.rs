//! The command's process tree: every live descendant of a process, whatever
//! process group or session it moved to.
//!
//! Descendants are found through `/proc/PID/task/TID/children` (or, on kernels
//! built without it, a scan of `/proc/*/stat`). Each one is pinned with a
//! pidfd and its parent checked again *after* pinning, so a signal can never
//! reach an unrelated process that happened to get a recycled pid between the
//! listing and the kill (pid_max is 32768 on many hosts).

use std::collections::HashSet;
use std::fs;
use std::os::fd::{FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::clock;

/// One live descendant.
#[derive(Debug)]
pub struct Member {
    pub pid: libc::pid_t,
    /// Pins the process: signals sent through it reach this process or none.
    fd: Option<OwnedFd>,
}

impl Member {
    /// Sends `sig`; false if the process is already gone.
    pub fn signal(&self, sig: i32) -> bool {
        match &self.fd {
            Some(fd) => {
                use std::os::fd::AsRawFd;
                // SAFETY: pidfd_send_signal with a valid pidfd and no siginfo.
                unsafe {
                    libc::syscall(
                        libc::SYS_pidfd_send_signal,
                        fd.as_raw_fd(),
                        sig,
                        std::ptr::null::<libc::siginfo_t>(),
                        0,
                    ) == 0
                }
            }
            // SAFETY: kill has no memory-safety preconditions.
            None => unsafe { libc::kill(self.pid, sig) == 0 },
        }
    }

    /// The process's name (`/proc/PID/comm`), for messages.
    pub fn name(&self) -> String {
        fs::read_to_string(format!("/proc/{}/comm", self.pid))
            .map(|s| s.trim_end().to_string())
            .unwrap_or_else(|_| "?".into())
    }
}

/// Set once pidfd_open answers ENOSYS (kernels before 5.3): plain kill(2) then.
static NO_PIDFD: AtomicBool = AtomicBool::new(false);

fn pidfd_open(pid: libc::pid_t) -> Option<OwnedFd> {
    if NO_PIDFD.load(Ordering::Relaxed) {
        return None;
    }
    // SAFETY: pidfd_open takes a pid and flags; the fd it returns is ours.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if fd < 0 {
        if std::io::Error::last_os_error().raw_os_error() == Some(libc::ENOSYS) {
            NO_PIDFD.store(true, Ordering::Relaxed);
        }
        return None;
    }
    // SAFETY: a fresh descriptor nobody else owns.
    Some(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

/// State and parent of `pid` from `/proc/PID/stat`.
fn stat(pid: libc::pid_t) -> Option<(u8, libc::pid_t)> {
    let text = fs::read(format!("/proc/{pid}/stat")).ok()?;
    // The name in parentheses may hold anything, ')' included: the fields
    // that follow start after the last ')'.
    let close = text.iter().rposition(|b| *b == b')')?;
    let mut fields = text[close + 1..]
        .split(|b| *b == b' ')
        .filter(|f| !f.is_empty());
    let state = *fields.next()?.first()?;
    let ppid = std::str::from_utf8(fields.next()?).ok()?.parse().ok()?;
    Some((state, ppid))
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
        match fs::read_to_string(format!("/proc/{pid}/task/{tid}/children")) {
            Ok(list) => {
                any = true;
                out.extend(
                    list.split_whitespace()
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

/// Every live (not zombie) descendant of `root`, parents before children.
pub fn descendants(root: libc::pid_t) -> Vec<Member> {
    let mut known: HashSet<libc::pid_t> = HashSet::from([root]);
    let mut out: Vec<Member> = Vec::new();
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
            let fd = pidfd_open(pid);
            // Checked after pinning: if the pid was recycled before the pin,
            // the new process's parent is not one of ours.
            match stat(pid) {
                Some((state, ppid)) if known.contains(&ppid) => {
                    known.insert(pid);
                    queue.push(pid);
                    if state != b'Z' && state != b'X' {
                        out.push(Member { pid, fd });
                    }
                }
                _ => {}
            }
        }
    }
    out
}

/// Sends `sig` to every live descendant of `root`; how many there were.
pub fn signal_all(root: libc::pid_t, sig: i32) -> usize {
    let members = descendants(root);
    for m in &members {
        m.signal(sig);
    }
    members.len()
}

/// SIGKILLs every descendant of `root`, again and again, until none is left
/// alive or `limit` has passed: a process that forks between a listing and
/// the kill is found by the next listing, and a SIGKILLed one cannot fork.
/// True when none is left.
pub fn kill_all(root: libc::pid_t, limit: Duration) -> bool {
    let until = clock::now() + limit;
    loop {
        let members = descendants(root);
        if members.is_empty() {
            return true;
        }
        for m in &members {
            m.signal(libc::SIGKILL);
        }
        if clock::now() >= until {
            return descendants(root).is_empty();
        }
        // Killed processes need a moment to become zombies.
        std::thread::sleep(Duration::from_micros(500));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::{Command, Stdio};

    #[test]
    fn stat_reads_state_and_parent_despite_odd_names() {
        // SAFETY: getpid/getppid cannot fail.
        let (me, parent) = unsafe { (libc::getpid(), libc::getppid()) };
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
        assert!(kill_all(sh_pid, Duration::from_secs(5)));
        assert!(descendants(sh_pid).is_empty());
        let _ = sh.kill();
        let _ = sh.wait();
    }
}
