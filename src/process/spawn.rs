//! Starting the command: its own process group, tied to the guard's life,
//! owning the terminal while it runs; and how its end maps to our exit status.

use std::cell::Cell;
use std::ffi::{CString, OsString};
use std::io;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;

use std::sync::atomic::{AtomicI32, Ordering};

use rustix::process::WaitOptions;

use crate::exit::Exit;
use crate::program::Program;
use crate::signals::{self, How, SigSet};

/// Environment changes for the command.
pub(crate) struct Env<'a> {
    pub set: Vec<(&'a str, &'a str)>,
    pub remove: Vec<&'a str>,
}

/// Starts the command from the guard (`parent`) in a process group of its
/// own, with the terminal's foreground when `terminal`, and with the signal
/// state redlock-run was started with: `mask` blocked, every signal the
/// caller ignored still ignored (SIGPIPE included, which redlock-run
/// ignores for itself from its start), every other one at its default.
///
/// The child shares the guard's memory until it execs (`clone` with
/// `CLONE_VM | CLONE_VFORK`, as posix_spawn does it): no page tables are
/// copied and nothing is copied on write. From the guard's request to the
/// command's exec a fork took 807 µs and posix_spawn 394 µs (medians of 200
/// runs of `true`). Not posix_spawn itself: glibc's posix_spawn sets its two
/// internal signals (32 and 33) to "ignored" in the child, and no attribute
/// can undo that, so every command would start with them ignored, unlike
/// under a shell. The guard, not PR_SET_PDEATHSIG alone, is
/// what stops the command's tree when redlock-run dies; the PDEATHSIG makes
/// the command die with a guard that is killed on its own.
pub(crate) fn start(
    program: &Program,
    env: &Env,
    terminal: bool,
    parent: libc::pid_t,
    mask: &SigSet,
) -> io::Result<libc::pid_t> {
    let argv: Vec<CString> = match program {
        Program::Shell(s) => vec![c_string("/bin/sh")?, c_string("-c")?, c_string(s)?],
        Program::Argv(argv) => argv.iter().map(c_string).collect::<io::Result<_>>()?,
    };
    let mut envp: Vec<CString> = Vec::new();
    for (k, v) in std::env::vars_os() {
        let name = k.to_string_lossy();
        if env.remove.contains(&&*name) || env.set.iter().any(|(s, _)| *s == name) {
            continue;
        }
        let mut entry = k.into_vec();
        entry.push(b'=');
        entry.extend_from_slice(v.as_bytes());
        envp.push(c_string(OsString::from_vec(entry))?);
    }
    for (k, v) in &env.set {
        envp.push(c_string(format!("{k}={v}"))?);
    }
    let argv_ptrs = pointers(&argv);
    let envp_ptrs = pointers(&envp);
    let request = Exec {
        path: argv[0].as_ptr(),
        argv: argv_ptrs.as_ptr(),
        envp: envp_ptrs.as_ptr(),
        mask: *mask,
        ignore_pipe: signals::caller_ignores_sigpipe(),
        terminal,
        parent,
        errno: AtomicI32::new(0),
    };
    // The child runs on a stack of its own until it execs. It grows down
    // from the end, aligned to 16.
    let end = child_stack_end();
    let top = end.wrapping_byte_sub(end as usize % 16);
    // Every signal is blocked around the clone so that no handler runs in
    // the child on the shared memory; the child sets the command's own mask.
    let old = signals::thread_mask(How::SetTo, Some(&SigSet::all()));
    // SAFETY: clone(2) with CLONE_VM | CLONE_VFORK has no safe form: the
    // child runs `exec_child` on this process's memory, on `stack`, until it
    // execs or exits, and this thread is suspended until then. So `request`,
    // the strings it points to and the stack outlive the child's use of
    // them, and nothing else touches them meanwhile.
    let pid = unsafe {
        libc::clone(
            exec_child,
            top.cast(),
            libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD,
            (&raw const request).cast_mut().cast(),
        )
    };
    let err = io::Error::last_os_error();
    signals::thread_mask(How::SetTo, Some(&old));
    if pid < 0 {
        return Err(err);
    }
    // The child is gone or has exec'd: nothing writes it any more.
    let errno = request.errno.load(Ordering::Acquire);
    if errno != 0 {
        // Reaping our own child, which has exited: this cannot fail (the
        // guard catches no signal, so no EINTR), and a child left unreaped
        // would be reaped by the guard's next pass all the same.
        let _ = rustix::process::waitpid(super::pid(pid), WaitOptions::empty());
        return Err(io::Error::from_raw_os_error(errno));
    }
    Ok(pid)
}

const CHILD_STACK: usize = 256 * 1024;

/// The end of the children's stack: made at a thread's first spawn and
/// kept, its untouched pages costing nothing. Unmapping it after each clone
/// had the kernel flush the TLB of the CPU the child ran on, where the
/// command then starts (12-36 µs a run on 3 nodes here). One a thread: the
/// guard spawns from one, one command at a time (the last child is gone or
/// has exec'd when the next comes), but tests spawn from several at once.
fn child_stack_end() -> *mut u8 {
    thread_local! {
        static STACK: Cell<*mut u8> = const { Cell::new(std::ptr::null_mut()) };
    }
    STACK.with(|stack| {
        if stack.get().is_null() {
            let made = Box::leak(Box::<[u8]>::new_uninit_slice(CHILD_STACK));
            stack.set(made.as_mut_ptr().cast());
        }
        stack.get().wrapping_add(CHILD_STACK)
    })
}

/// What the child needs, prepared before the clone: it may allocate nothing.
struct Exec {
    path: *const libc::c_char,
    argv: *const *const libc::c_char,
    envp: *const *const libc::c_char,
    mask: SigSet,
    ignore_pipe: bool,
    terminal: bool,
    parent: libc::pid_t,
    /// Set by the child when it cannot exec.
    errno: AtomicI32,
}

/// The child between clone and exec. It shares the guard's memory, so it
/// calls only async-signal-safe functions (rustix's are bare system calls)
/// and allocates nothing; on a failure it leaves the errno in `Exec::errno`
/// and exits.
extern "C" fn exec_child(arg: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `arg` is the `Exec` the guard prepared, alive and unmoved
    // while the guard is suspended in `clone`; the child only reads it, but
    // for `errno`, an atomic.
    let req = unsafe { &*arg.cast::<Exec>() };
    let ready = prepare(req);
    if ready.is_ok() {
        signals::thread_mask(How::SetTo, Some(&req.mask));
    }
    // SAFETY: execvpe gets NUL-terminated strings in null-terminated arrays,
    // which outlive the child (see `start`), and returns only when it
    // failed; _exit then ends the child without the guard's exit handlers
    // or buffers, which are the guard's own memory.
    unsafe {
        if ready.is_ok() {
            libc::execvpe(req.path, req.argv, req.envp);
        }
        let failed = ready.err().unwrap_or_else(io::Error::last_os_error);
        let errno = failed.raw_os_error().filter(|e| *e != 0);
        req.errno
            .store(errno.unwrap_or(libc::EINVAL), Ordering::Release);
        libc::_exit(127)
    }
}

/// The child's own state before exec: its process group, the terminal's
/// foreground, the caller's SIGPIPE disposition, and its tie to the guard.
fn prepare(req: &Exec) -> io::Result<()> {
    rustix::process::setpgid(None, None)?;
    if req.terminal {
        // A background group reading the terminal gets SIGTTIN and Ctrl-C
        // would not reach it: hand it the foreground, as a shell does. A
        // command that cannot have it (the terminal went away) still runs,
        // as under a shell without job control; the guard resumes it if the
        // terminal stops it.
        let _ = with_sigttou_blocked(|| {
            rustix::termios::tcsetpgrp(rustix::stdio::stdin(), rustix::process::getpid())
        });
    }
    // redlock-run ignores SIGPIPE for itself (`signals::start`): the
    // caller's disposition for the command.
    signals::set_disposition(libc::SIGPIPE, req.ignore_pipe)?;
    tie_to(req.parent)
}

fn c_string(s: impl Into<OsString>) -> io::Result<CString> {
    CString::new(s.into().into_vec())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a NUL byte in the command"))
}

/// A null-terminated array of pointers to `strings`.
fn pointers(strings: &[CString]) -> Vec<*const libc::c_char> {
    strings
        .iter()
        .map(|s| s.as_ptr())
        .chain(std::iter::once(std::ptr::null()))
        .collect()
}

/// SIGKILL when the guard dies, checked against a guard that died already.
/// Async-signal-safe.
fn tie_to(parent: libc::pid_t) -> io::Result<()> {
    use rustix::process::{Signal, getpid, getppid, kill_process};
    rustix::process::set_parent_process_death_signal(Some(Signal::KILL))?;
    if getppid().map(|p| p.as_raw_pid()) != Some(parent) {
        // The guard died before the prctl: nothing would stop the command
        // with it. A SIGKILL to ourselves does not return; if it did, the
        // command must still not start.
        let _ = kill_process(getpid(), Signal::KILL);
        return Err(io::Error::from_raw_os_error(libc::ESRCH));
    }
    Ok(())
}

/// Whether redlock-run is in the terminal's foreground, so the command should be.
pub(crate) fn owns_terminal() -> bool {
    let stdin = rustix::stdio::stdin();
    rustix::termios::isatty(stdin)
        && rustix::termios::tcgetpgrp(stdin).is_ok_and(|g| g == rustix::process::getpgrp())
}

/// Takes the terminal's foreground back once the command's first process
/// has exited, as a shell takes it back for its prompt.
pub(crate) fn take_terminal_back() {
    let stdin = rustix::stdio::stdin();
    let ours = rustix::process::getpgrp();
    if rustix::termios::tcgetpgrp(stdin).ok() != Some(ours) {
        // A failure leaves nothing to do (no terminal any more, or not
        // ours): the shell takes the foreground back itself when
        // redlock-run exits.
        let _ = with_sigttou_blocked(|| rustix::termios::tcsetpgrp(stdin, ours));
    }
}

/// Runs `f` with SIGTTOU blocked in this thread: tcsetpgrp from a background
/// process group is allowed then, instead of stopping us. Async-signal-safe.
fn with_sigttou_blocked<T>(f: impl FnOnce() -> T) -> T {
    let old = signals::thread_mask(How::Block, Some(&SigSet::of([libc::SIGTTOU])));
    let r = f();
    signals::thread_mask(How::SetTo, Some(&old));
    r
}

/// The command's status as ours: its code, or 128+N for a signal.
pub(crate) fn exit_of(status: ExitStatus) -> Exit {
    match (status.code(), status.signal()) {
        (Some(c), _) => Exit::Command(c as u8),
        (None, Some(s)) => Exit::Signal(s),
        (None, None) => Exit::Command(1),
    }
}

/// Maps a spawn failure as env(1) does: 127 not found, 126 anything else.
pub(crate) fn exit_of_spawn_error(e: &io::Error) -> Exit {
    if e.kind() == io::ErrorKind::NotFound {
        Exit::NotFound
    } else {
        Exit::CannotExecute
    }
}

/// Overwrites, where they lie, the values of `names` in the environment this
/// process was started with: /proc/PID/environ shows those bytes to every
/// process of the same user, for this process and for every fork of it,
/// whatever unsetenv does. Call it once the values have been read, while
/// this process has one thread (nothing else reads the environment).
pub(crate) fn scrub_environ(names: &[&str]) {
    unsafe extern "C" {
        static mut environ: *const *mut libc::c_char;
    }
    // SAFETY: single-threaded here (nothing else reads or changes the
    // environment meanwhile); each entry is a NUL-terminated string that
    // this process may write, and only bytes before its NUL are changed.
    unsafe {
        let mut entry = environ;
        if entry.is_null() {
            return;
        }
        while !(*entry).is_null() {
            let text = *entry;
            let len = libc::strlen(text);
            let bytes = std::slice::from_raw_parts_mut(text.cast::<u8>(), len);
            if let Some(eq) = bytes.iter().position(|b| *b == b'=')
                && names.iter().any(|n| n.as_bytes() == &bytes[..eq])
            {
                bytes[eq + 1..].fill(0);
            }
            entry = entry.add(1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::process::tree;
    use rustix::process::{Signal, kill_process, waitpid};
    use std::time::{Duration, Instant};

    #[test]
    fn the_command_starts_in_its_own_group_with_its_environment() {
        let dir = tempfile::tempdir().expect("tempdir");
        let out = dir.path().join("out");
        let script = format!(
            "echo \"$SET_BY_THE_TEST ${{HOME-unset}}\" > '{}'; exec sleep 30",
            out.display()
        );
        let env = Env {
            set: vec![("SET_BY_THE_TEST", "given")],
            remove: vec!["HOME"],
        };
        let me = rustix::process::getpid().as_raw_pid();
        let mask = signals::thread_mask(How::Block, None);
        let pid = start(&Program::Shell(script), &env, false, me, &mask).expect("start");
        let until = Instant::now() + Duration::from_secs(10);
        let written = loop {
            let text = std::fs::read_to_string(&out).unwrap_or_default();
            if text.ends_with('\n') || Instant::now() > until {
                break text;
            }
            std::thread::sleep(Duration::from_millis(5));
        };
        let group = tree::Member { pid }.pgid();
        let child = super::super::pid(pid).expect("a pid");
        kill_process(child, Signal::KILL).expect("kill");
        let (_, status) = waitpid(Some(child), rustix::process::WaitOptions::empty())
            .expect("wait")
            .expect("a status");
        assert_eq!(written, "given unset\n");
        assert_eq!(group, Some(pid), "a process group of its own");
        assert_eq!(status.terminating_signal(), Some(libc::SIGKILL));
    }

    #[test]
    fn a_command_that_cannot_start_says_why_as_env_does() {
        let env = Env {
            set: Vec::new(),
            remove: Vec::new(),
        };
        let me = rustix::process::getpid().as_raw_pid();
        let mask = signals::thread_mask(How::Block, None);
        let missing = Program::Argv(vec![OsString::from("/nonexistent/no-such-command")]);
        let e = start(&missing, &env, false, me, &mask).expect_err("not found");
        assert_eq!(exit_of_spawn_error(&e), Exit::NotFound);
        let dir = tempfile::tempdir().expect("tempdir");
        let not_executable = Program::Argv(vec![dir.path().as_os_str().to_owned()]);
        let e = start(&not_executable, &env, false, me, &mask).expect_err("a directory");
        assert_eq!(exit_of_spawn_error(&e), Exit::CannotExecute);
        let nul = Program::Shell("echo a\0b".into());
        let e = start(&nul, &env, false, me, &mask).expect_err("a NUL byte");
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
    }

    #[test]
    fn statuses_map_as_timeout_and_env_map_them() {
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(exit_of(ExitStatus::from_raw(3 << 8)), Exit::Command(3));
        assert_eq!(
            exit_of(ExitStatus::from_raw(libc::SIGTERM)),
            Exit::Signal(libc::SIGTERM)
        );
    }
}
