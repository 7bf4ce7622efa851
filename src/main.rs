use std::process::ExitCode;

fn main() -> ExitCode {
    let code = redlock_run::run::main(std::env::args_os());
    ExitCode::from(code.code())
}
