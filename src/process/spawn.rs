//! Starting the command: its own process group, tied to the guard's life,
//! owning the terminal while it runs; and how its end maps to our exit status.

use std::ffi::CString;
use std::io;
use std::os::unix::ffi::OsStrExt;
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
/// state redlock-run was started with: `mask` blocked, and every signal that
/// was not ignored then at its default (a signal ignored at start, as by
/// nohup, stays ignored, as across a plain exec).
///
/// Without a terminal to hand over there is nothing to do between fork and
/// exec, so the command starts with posix_spawn, a vfork-style clone that
/// copies no page tables: this is the hot path that races flock(1). The
/// guard, not PR_SET_PDEATHSIG, is what stops the command's tree when
/// redlock-run dies; if the guard itself is killed its orphans go to
/// redlock-run, which is a subreaper too.
pub fn start(
    program: &Program,
    env: &Env,
    terminal: bool,
    parent: libc::pid_t,
    mask: &libc::sigset_t,
) -> io::Result<libc::pid_t> {
    if !terminal {
        match posix_spawn(program, env, mask) {
            // A file without #! line: the shell fallback of execvp(3), which
            // posix_spawnp does not have.
            Err(e) if e.raw_os_error() == Some(libc::ENOEXEC) => {}
            other => return other,
        }
    }
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
            libc::pthread_sigmask(libc::SIG_SETMASK, &mask, std::ptr::null_mut());
            tie_to(parent)
        });
    }
    Ok(cmd.spawn()?.id() as libc::pid_t)
}

fn cstring(bytes: &[u8]) -> io::Result<CString> {
    CString::new(bytes).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))
}

/// posix_spawnp(3) with the attributes `start` describes.
fn posix_spawn(program: &Program, env: &Env, mask: &libc::sigset_t) -> io::Result<libc::pid_t> {
    let argv: Vec<CString> = match program {
        Program::Shell(s) => vec![
            cstring(b"/bin/sh")?,
            cstring(b"-c")?,
            cstring(s.as_bytes())?,
        ],
        Program::Argv(argv) => argv
            .iter()
            .map(|a| cstring(a.as_bytes()))
            .collect::<io::Result<_>>()?,
    };
    let mut envp: Vec<CString> = Vec::new();
    for (k, v) in std::env::vars_os() {
        let name = k.as_bytes();
        if env.remove.iter().any(|r| r.as_bytes() == name)
            || env.set.iter().any(|(s, _)| s.as_bytes() == name)
        {
            continue;
        }
        envp.push(cstring(&[name, b"=", v.as_bytes()].concat())?);
    }
    for (k, v) in &env.set {
        envp.push(cstring(format!("{k}={v}").as_bytes())?);
    }
    let argv_ptrs: Vec<*mut libc::c_char> = argv
        .iter()
        .map(|a| a.as_ptr().cast_mut())
        .chain(std::iter::once(std::ptr::null_mut()))
        .collect();
    let envp_ptrs: Vec<*mut libc::c_char> = envp
        .iter()
        .map(|a| a.as_ptr().cast_mut())
        .chain(std::iter::once(std::ptr::null_mut()))
        .collect();
    // SAFETY: the attribute object is initialised before use and destroyed
    // after; every pointer handed to posix_spawnp outlives the call.
    unsafe {
        let mut defaults: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut defaults);
        for sig in 1..=libc::SIGRTMAX() {
            if sig != libc::SIGKILL && sig != libc::SIGSTOP && !signals::is_ignored(sig) {
                libc::sigaddset(&mut defaults, sig);
            }
        }
        // The Rust runtime ignores SIGPIPE for itself; commands get the
        // default, as every program started by the standard library does.
        libc::sigaddset(&mut defaults, libc::SIGPIPE);
        let mut attr: libc::posix_spawnattr_t = std::mem::zeroed();
        libc::posix_spawnattr_init(&mut attr);
        libc::posix_spawnattr_setflags(
            &mut attr,
            (libc::POSIX_SPAWN_SETPGROUP
                | libc::POSIX_SPAWN_SETSIGMASK
                | libc::POSIX_SPAWN_SETSIGDEF) as libc::c_short,
        );
        libc::posix_spawnattr_setpgroup(&mut attr, 0);
        libc::posix_spawnattr_setsigmask(&mut attr, mask);
        libc::posix_spawnattr_setsigdefault(&mut attr, &defaults);
        let mut pid: libc::pid_t = 0;
        let rc = libc::posix_spawnp(
            &mut pid,
            argv_ptrs[0],
            std::ptr::null(),
            &attr,
            argv_ptrs.as_ptr(),
            envp_ptrs.as_ptr(),
        );
        libc::posix_spawnattr_destroy(&mut attr);
        if rc != 0 {
            return Err(io::Error::from_raw_os_error(rc));
        }
        Ok(pid)
    }
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
