//! Starting the command: its own process group, tied to the guard's life,
//! owning the terminal while it runs; and how its end maps to our exit status.

use std::ffi::{CString, OsString};
use std::io;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;

use crate::cli::Program;
use crate::exit::Exit;
use crate::process::signals;

/// Environment changes for the command.
pub struct Env<'a> {
    pub set: Vec<(&'a str, &'a str)>,
    pub remove: Vec<&'a str>,
}

/// Starts the command from the guard (`parent`) in a process group of its
/// own, with the terminal's foreground when `terminal`, and with the signal
/// state redlock-run was started with: `mask` blocked, every signal the
/// caller ignored still ignored (SIGPIPE included, which the Rust runtime
/// ignores for itself before `main`), every other one at its default.
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
pub fn start(
    program: &Program,
    env: &Env,
    terminal: bool,
    parent: libc::pid_t,
    mask: &libc::sigset_t,
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
    let mut request = Exec {
        path: argv[0].as_ptr(),
        argv: argv_ptrs.as_ptr(),
        envp: envp_ptrs.as_ptr(),
        mask: *mask,
        ignore_pipe: signals::caller_ignores_sigpipe(),
        terminal,
        parent,
        errno: 0,
    };
    // The child runs on a stack of its own until it execs; untouched pages
    // of it cost nothing.
    let mut stack: Vec<u8> = Vec::with_capacity(CHILD_STACK);
    // SAFETY: the stack grows down from the end of the allocation, aligned
    // to 16; `request`, `argv`, `envp` and the stack outlive the child's use
    // of them (the guard is suspended until the child execs or exits). Every
    // signal is blocked around the clone so that no handler runs in the
    // child on the shared memory; the child sets the command's own mask.
    let pid = unsafe {
        let top = stack.as_mut_ptr().add(CHILD_STACK) as usize & !15;
        let mut all: libc::sigset_t = std::mem::zeroed();
        let mut old: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut old);
        let pid = libc::clone(
            exec_child,
            top as *mut libc::c_void,
            libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD,
            (&raw mut request).cast(),
        );
        let err = io::Error::last_os_error();
        libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut());
        if pid < 0 {
            return Err(err);
        }
        pid
    };
    drop(stack);
    // SAFETY: the child is gone or has exec'd: nothing writes it any more.
    let errno = unsafe { std::ptr::read_volatile(&raw const request.errno) };
    if errno != 0 {
        let mut status = 0;
        // SAFETY: reaping our own child, which has exited.
        unsafe { libc::waitpid(pid, &mut status, 0) };
        return Err(io::Error::from_raw_os_error(errno));
    }
    Ok(pid)
}

const CHILD_STACK: usize = 256 * 1024;

/// What the child needs, prepared before the clone: it may allocate nothing.
struct Exec {
    path: *const libc::c_char,
    argv: *const *const libc::c_char,
    envp: *const *const libc::c_char,
    mask: libc::sigset_t,
    ignore_pipe: bool,
    terminal: bool,
    parent: libc::pid_t,
    /// Set by the child when it cannot exec.
    errno: libc::c_int,
}

/// The child between clone and exec. It shares the guard's memory, so it
/// calls only async-signal-safe functions and allocates nothing; on a
/// failure it leaves the errno in `Exec::errno` and exits.
extern "C" fn exec_child(arg: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `arg` is the `Exec` the guard prepared, alive while the guard
    // is suspended in `clone`.
    let req = unsafe { &mut *arg.cast::<Exec>() };
    // SAFETY: async-signal-safe calls with valid arguments.
    unsafe {
        let ok = libc::setpgid(0, 0) == 0 && {
            if req.terminal {
                // A background group reading the terminal gets SIGTTIN and
                // Ctrl-C would not reach it: hand it the foreground, as a
                // shell does.
                with_sigttou_blocked(|| libc::tcsetpgrp(0, libc::getpid()));
            }
            // The Rust runtime ignores SIGPIPE for itself: the caller's
            // disposition for the command.
            let pipe = if req.ignore_pipe {
                libc::SIG_IGN
            } else {
                libc::SIG_DFL
            };
            libc::signal(libc::SIGPIPE, pipe);
            tie_to(req.parent).is_ok()
        };
        if ok {
            libc::pthread_sigmask(libc::SIG_SETMASK, &req.mask, std::ptr::null_mut());
            libc::execvpe(req.path, req.argv, req.envp);
        }
        req.errno = *libc::__errno_location();
        if req.errno == 0 {
            req.errno = libc::EINVAL;
        }
        libc::_exit(127)
    }
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
    // SAFETY: prctl, getppid and raise are async-signal-safe.
    unsafe {
        if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
            return Err(io::Error::last_os_error());
        }
        if libc::getppid() != parent {
            libc::raise(libc::SIGKILL);
        }
    }
    Ok(())
}

/// Whether redlock-run is in the terminal's foreground, so the command should be.
pub fn owns_terminal() -> bool {
    // SAFETY: isatty, tcgetpgrp and getpgrp have no preconditions.
    unsafe { libc::isatty(0) == 1 && libc::tcgetpgrp(0) == libc::getpgrp() }
}

/// Takes the terminal's foreground back once the command's first process
/// has exited, as a shell takes it back for its prompt.
pub fn take_terminal_back() {
    // SAFETY: plain syscalls on fd 0.
    unsafe {
        if libc::tcgetpgrp(0) != libc::getpgrp() {
            with_sigttou_blocked(|| libc::tcsetpgrp(0, libc::getpgrp()));
        }
    }
}

/// Runs `f` with SIGTTOU blocked in this thread: tcsetpgrp from a background
/// process group is allowed then, instead of stopping us.
fn with_sigttou_blocked(f: impl FnOnce() -> libc::c_int) -> libc::c_int {
    // SAFETY: sigset manipulation on local values; pthread_sigmask is
    // async-signal-safe in practice and only affects this thread.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        let mut old: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGTTOU);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, &mut old);
        let r = f();
        libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut());
        r
    }
}

/// The command's status as ours: its code, or 128+N for a signal.
pub fn exit_of(status: ExitStatus) -> Exit {
    match (status.code(), status.signal()) {
        (Some(c), _) => Exit::Command(c as u8),
        (None, Some(s)) => Exit::Signal(s),
        (None, None) => Exit::Command(1),
    }
}

/// Maps a spawn failure as env(1) does: 127 not found, 126 anything else.
pub fn exit_of_spawn_error(e: &io::Error) -> Exit {
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
pub fn scrub_environ(names: &[&str]) {
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
