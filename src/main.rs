// On glibc, without the Rust runtime's start-up, which reads /proc/self/maps
// to guard the main thread's stack (an overflow then ends in a plain SIGSEGV,
// which the guard answers as any death): `signals::start` does the rest of it.
// Elsewhere (musl passes no arguments to .init_array, where the standard
// library reads them without its start-up) the runtime's `main` stays.
#![cfg_attr(all(not(test), target_env = "gnu"), no_main)]

/// Runs before the Rust runtime, where there is one, sets SIGPIPE to
/// ignored: the command is to inherit the caller's disposition.
extern "C" fn note_sigpipe() {
    redlock_run::signals::note_caller_sigpipe();
}

#[used]
#[unsafe(link_section = ".init_array")]
static NOTE_SIGPIPE: extern "C" fn() = note_sigpipe;

#[cfg(all(not(test), target_env = "gnu"))]
#[unsafe(no_mangle)]
extern "C" fn main(
    _argc: std::ffi::c_int,
    _argv: *const *const std::ffi::c_char,
) -> std::ffi::c_int {
    std::ffi::c_int::from(run())
}

#[cfg(not(all(not(test), target_env = "gnu")))]
fn main() -> std::process::ExitCode {
    std::process::ExitCode::from(run())
}

fn run() -> u8 {
    redlock_run::signals::start();
    let code = redlock_run::run::main(std::env::args_os());
    // The lock is released (or left to expire) by now: waiting for stderr
    // cannot hurt anyone, but a stderr that is never read must not keep us.
    redlock_run::log::flush(std::time::Duration::from_secs(1));
    redlock_run::signals::finish();
    code.code()
}
