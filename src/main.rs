use std::process::ExitCode;
use std::time::Duration;

fn main() -> ExitCode {
    let code = redlock_run::run::main(std::env::args_os());
    // The lock is released (or left to expire) by now: waiting for stderr
    // cannot hurt anyone, but a stderr that is never read must not keep us.
    redlock_run::log::flush(Duration::from_secs(1));
    ExitCode::from(code.code())
}
