//! An old kernel, simulated: a seccomp filter under which every system call
//! Linux gained after 4.18 (RHEL 8's kernel) answers ENOSYS, as it would
//! there.
//!
//! ```ignore
//! let old = OldKernel::enter();
//! // every redlock-run this thread starts from here on (`Test::spawn`,
//! // `Proc::spawn`) runs under the filter, and so does all it starts
//! assert!(old.started() > 0);
//! ```
//!
//! The filter is a classic BPF program installed between fork and exec
//! (`PR_SET_NO_NEW_PRIVS`, then `PR_SET_SECCOMP`); the kernel keeps it across
//! every later fork and exec, so the guard, the command and whatever the
//! command starts see the same old kernel. It cuts by number: on x86_64
//! everything from 335 on (4.18's last call is rseq, 334; the next ones are
//! pidfd_send_signal 424, io_uring 425-427, pidfd_open 434, clone3 435,
//! close_range 436, openat2 437, pidfd_getfd 438, faccessat2 439,
//! epoll_pwait2 441, futex_waitv 449 and all that came later), so a call
//! added tomorrow is covered too.

use std::cell::Cell;
use std::marker::PhantomData;
use std::os::unix::process::CommandExt;
use std::process::Command;

thread_local! {
    static ACTIVE: Cell<bool> = const { Cell::new(false) };
    static STARTED: Cell<usize> = const { Cell::new(0) };
}

/// While one lives, the redlock-runs its thread starts run under the filter.
pub struct OldKernel {
    // Bound to the thread whose spawns it changes.
    _thread: PhantomData<*const ()>,
}

impl OldKernel {
    pub fn enter() -> OldKernel {
        ACTIVE.with(|a| a.set(true));
        STARTED.with(|s| s.set(0));
        OldKernel {
            _thread: PhantomData,
        }
    }

    /// How many processes were started under the filter so far: a test that
    /// started none would prove nothing about old kernels.
    pub fn started(&self) -> usize {
        STARTED.with(Cell::get)
    }
}

impl Drop for OldKernel {
    fn drop(&mut self) {
        ACTIVE.with(|a| a.set(false));
    }
}

/// Puts `command` under the filter if its thread is inside an [`OldKernel`].
pub fn apply(command: &mut Command) {
    if !ACTIVE.with(Cell::get) {
        return;
    }
    STARTED.with(|s| s.set(s.get() + 1));
    // SAFETY: two prctl calls on a program in static memory, between fork
    // and exec: nothing is allocated, nothing locked.
    unsafe {
        command.pre_exec(install);
    }
}

#[cfg(target_arch = "x86_64")]
mod abi {
    /// AUDIT_ARCH_X86_64: EM_X86_64 (62), 64-bit, little-endian.
    pub const ARCH: u32 = 0xC000_003E;
    /// The first number after rseq (334), 4.18's last call.
    pub const FIRST_NEWER: u32 = 335;
}

#[cfg(target_arch = "aarch64")]
mod abi {
    /// AUDIT_ARCH_AARCH64: EM_AARCH64 (183), 64-bit, little-endian.
    pub const ARCH: u32 = 0xC000_00B7;
    /// The first number after rseq (293), 4.18's last call.
    pub const FIRST_NEWER: u32 = 294;
}

const fn stmt(code: u32, k: u32) -> libc::sock_filter {
    libc::sock_filter {
        code: code as u16,
        jt: 0,
        jf: 0,
        k,
    }
}

const fn jump(code: u32, k: u32, jt: u8, jf: u8) -> libc::sock_filter {
    libc::sock_filter {
        code: code as u16,
        jt,
        jf,
        k,
    }
}

/// `struct seccomp_data`: the call's number at offset 0, its ABI at 4.
const NR: u32 = 0;
const ARCH: u32 = 4;

const LOAD: u32 = libc::BPF_LD | libc::BPF_W | libc::BPF_ABS;
const JEQ: u32 = libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K;
const JGE: u32 = libc::BPF_JMP | libc::BPF_JGE | libc::BPF_K;
const RET: u32 = libc::BPF_RET | libc::BPF_K;

static FILTER: [libc::sock_filter; 7] = [
    stmt(LOAD, ARCH),
    jump(JEQ, abi::ARCH, 1, 0),
    // Another ABI's numbering (i386 through int 0x80): nothing here uses
    // it, and a test must not pass because a call slipped through.
    stmt(RET, libc::SECCOMP_RET_KILL_PROCESS),
    stmt(LOAD, NR),
    jump(JGE, abi::FIRST_NEWER, 0, 1),
    stmt(RET, libc::SECCOMP_RET_ERRNO | libc::ENOSYS as u32),
    stmt(RET, libc::SECCOMP_RET_ALLOW),
];

/// Runs in the child between fork and exec.
fn install() -> std::io::Result<()> {
    let program = libc::sock_fprog {
        len: FILTER.len() as u16,
        // The kernel copies the program and never writes to it.
        filter: FILTER.as_ptr().cast_mut(),
    };
    // SAFETY: prctl with the arguments each option documents; `program`
    // outlives the call.
    let installed = unsafe {
        libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0
            && libc::prctl(
                libc::PR_SET_SECCOMP,
                libc::SECCOMP_MODE_FILTER,
                &program as *const libc::sock_fprog,
            ) == 0
    };
    if installed {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}
