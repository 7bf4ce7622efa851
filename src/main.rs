use std::process::ExitCode;
use std::time::Duration;

/// Runs before the Rust runtime sets SIGPIPE to ignored (which it does
/// before `main`): the command is to inherit the caller's disposition.
extern "C" fn note_sigpipe() {
    redlock_run::signals::note_caller_sigpipe();
}

#[used]
#[unsafe(link_section = ".init_array")]
static NOTE_SIGPIPE: extern "C" fn() = note_sigpipe;

fn main() -> ExitCode {
    let code = redlock_run::run::main(std::env::args_os());
    // The lock is released (or left to expire) by now: waiting for stderr
    // cannot hurt anyone, but a stderr that is never read must not keep us.
    redlock_run::log::flush(Duration::from_secs(1));
    ExitCode::from(code.code())
}
