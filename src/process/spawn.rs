//! Starting the command: its own process group, tied to the guard's life,
//! owning the terminal while it runs; and how its end maps to our exit status.

use std::io;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Command, ExitStatus};

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
/// By fork and exec, not posix_spawn: glibc's posix_spawn sets its two
/// internal signals (32 and 33) to "ignored" in the child, and no attribute
/// can undo that (sigaddset refuses them), so every command would start with
/// them ignored, unlike under a shell. The guard is small and has one thread,
/// so its fork is cheap: a 1-node run of `true` (release build, hyperfine,
/// 300 runs) took 3.20 ms median with posix_spawn and 3.25 ms with fork. The
/// guard, not PR_SET_PDEATHSIG alone, is what stops the command's tree when
/// redlock-run dies; the PDEATHSIG makes the command die with a guard that
/// is killed on its own.
pub fn start(
    program: &Program,
    env: &Env,
    terminal: bool,
    parent: libc::pid_t,
    mask: &libc::sigset_t,
) -> io::Result<libc::pid_t> {
    let mut cmd = match program {
        Program::Shell(s) => {
            let mut c = Command::new("/bin/sh");
            c.arg("-c").arg(s);
            c
        }
        Program::Argv(argv) => {
            let mut c = Command::new(&argv[0]);
            c.args(&argv[1..]);
            c
        }
    };
    for k in &env.remove {
        cmd.env_remove(k);
    }
    for (k, v) in &env.set {
        cmd.env(k, v);
    }
    cmd.process_group(0);
    let mask = *mask;
    let ignore_pipe = signals::caller_ignores_sigpipe();
    // SAFETY: the closure runs between fork and exec and calls only
    // async-signal-safe functions; it allocates nothing.
    unsafe {
        cmd.pre_exec(move || {
            if terminal {
                // A background group reading the terminal gets SIGTTIN and
                // Ctrl-C would not reach it: hand it the foreground, as a
                // shell does.
                with_sigttou_blocked(|| libc::tcsetpgrp(0, libc::getpid()));
            }
            // The standard library has set SIGPIPE to its default for the
            // child by now: back to ignored if the caller had it so.
            if ignore_pipe {
                libc::signal(libc::SIGPIPE, libc::SIG_IGN);
            }
            libc::pthread_sigmask(libc::SIG_SETMASK, &mask, std::ptr::null_mut());
            tie_to(parent)
        });
    }
    Ok(cmd.spawn()?.id() as libc::pid_t)
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
