// Without the Rust runtime's start-up, which reads /proc/self/maps to guard
// the main thread's stack (an overflow then ends in a plain SIGSEGV, which the
// guard answers as any death): `signals::start` does the rest of it.
#![cfg_attr(not(test), no_main)]

#[cfg(not(test))]
#[unsafe(no_mangle)]
extern "C" fn main(
    _argc: std::ffi::c_int,
    _argv: *const *const std::ffi::c_char,
) -> std::ffi::c_int {
    redlock_run::signals::start();
    let code = redlock_run::run::main(std::env::args_os());
    // The lock is released (or left to expire) by now: waiting for stderr
    // cannot hurt anyone, but a stderr that is never read must not keep us.
    redlock_run::log::flush(std::time::Duration::from_secs(1));
    redlock_run::signals::finish();
    std::ffi::c_int::from(code.code())
}
