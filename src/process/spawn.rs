//! The supervised command: its own process group, tied to our life, owning the
//! terminal while it runs.

use std::io;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Child, Command, ExitStatus};
use std::sync::Once;
use std::sync::atomic::{AtomicI32, Ordering};

use crate::cli::Program;
use crate::exit::Exit;

pub struct Supervised {
    /// Also the process group id: the command leads its own group.
    pub pid: libc::pid_t,
    terminal: bool,
}

/// Environment changes for the command.
pub struct Env<'a> {
    pub set: Vec<(&'a str, &'a str)>,
    pub remove: Vec<&'a str>,
}

/// Starts the command. The `Child` is for waiting; `Supervised` for signalling.
pub fn spawn(program: &Program, env: &Env) -> io::Result<(Child, Supervised)> {
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
    // SAFETY: getpid, isatty, tcgetpgrp and getpgrp have no preconditions.
    let parent = unsafe { libc::getpid() };
    let terminal = unsafe { libc::isatty(0) == 1 && libc::tcgetpgrp(0) == libc::getpgrp() };
    // SAFETY: the closure runs between fork and exec and calls only
    // async-signal-safe functions; it allocates nothing.
    unsafe {
        cmd.pre_exec(move || {
            // Its own group, so one kill(2) reaches everything it forks.
            if libc::setpgid(0, 0) != 0 {
                return Err(io::Error::last_os_error());
            }
            if terminal {
                // A background group reading the terminal gets SIGTTIN and Ctrl-C
                // would not reach it: hand it the foreground, as a shell does.
                with_sigttou_blocked(|| libc::tcsetpgrp(0, libc::getpid()));
            }
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(io::Error::last_os_error());
            }
            // We may have died before the prctl: nobody would kill it then.
            if libc::getppid() != parent {
                libc::raise(libc::SIGKILL);
            }
            Ok(())
        });
    }
    guard_against_panics();
    let child = cmd.spawn()?;
    let pid = child.id() as libc::pid_t;
    RUNNING_GROUP.store(pid, Ordering::SeqCst);
    Ok((child, Supervised { pid, terminal }))
}

impl Supervised {
    /// Sends `sig` to the command and everything in its process group.
    pub fn signal_group(&self, sig: i32) {
        // SAFETY: kill has no memory-safety preconditions. ESRCH (all gone) is fine.
        unsafe {
            libc::kill(-self.pid, sig);
        }
    }

    /// Takes the terminal's foreground back after the command exited, and
    /// stops guarding its group.
    pub fn finish(&self) {
        RUNNING_GROUP.store(0, Ordering::SeqCst);
        if !self.terminal {
            return;
        }
        // SAFETY: plain syscalls on fd 0.
        unsafe {
            if libc::tcgetpgrp(0) != libc::getpgrp() {
                with_sigttou_blocked(|| libc::tcsetpgrp(0, libc::getpgrp()));
            }
        }
    }
}

/// The command's process group while it runs, for the panic hook.
static RUNNING_GROUP: AtomicI32 = AtomicI32::new(0);

/// If the main thread panics, nobody supervises the command any more and the
/// lock will lapse: take the whole group down with us. PDEATHSIG alone would
/// reach only the direct child. (Other threads' panics are handled where they
/// happen: a node thread counts as a failed node, the heartbeat reports.)
fn guard_against_panics() {
    static INSTALL: Once = Once::new();
    INSTALL.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let group = RUNNING_GROUP.load(Ordering::SeqCst);
            if group > 0 && std::thread::current().name() == Some("main") {
                // SAFETY: kill has no memory-safety preconditions.
                unsafe {
                    libc::kill(-group, libc::SIGKILL);
                }
            }
            previous(info);
        }));
    });
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
