//! The floor for bench/run section 1: the least a Redis lock around a
//! command can cost on this machine, and what each piece of redlock-run's
//! structure adds to it.
//!
//! ```text
//! floor [--guard] [--threads N] -p PORT [-p PORT ...] -- COMMAND [ARG ...]
//! floor --version
//! ```
//!
//! It takes the same lock a run takes (SET NX PX on every node, sent to all
//! before any reply is read, so the round trips overlap on one thread),
//! runs the command, and releases with a compare-and-delete script, with
//! nothing else: no client library, no argument parser, no holder record,
//! no queue, no heartbeat, no containment. `--guard` forks a process before
//! the lock is taken that waits for this one to end, the shape of
//! redlock-run's guard; `--threads N` starts N threads that only wait, for
//! what a thread costs (a run starts its heartbeat thread once TTL/3 has
//! passed, and a worker for a node still busy when a round ends). Not
//! a lock tool: it has none of the safety a run has (no validity check, no
//! tree, no signals), and a refused lock only exits 75.

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::process::{Command, ExitCode};

const KEY: &str = "floor:lock";
const RELEASE: &str =
    "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0";

fn resp(args: &[&str]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for a in args {
        out.extend_from_slice(format!("${}\r\n{a}\r\n", a.len()).as_bytes());
    }
    out
}

/// One reply line (`+OK`, `$-1`, `:1`): enough for SET and the script.
fn reply(conn: &mut TcpStream) -> io::Result<Vec<u8>> {
    let mut got = Vec::new();
    let mut buf = [0u8; 64];
    while !got.ends_with(b"\r\n") {
        let n = conn.read(&mut buf)?;
        if n == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        got.extend_from_slice(&buf[..n]);
    }
    Ok(got)
}

/// Sends `request` to every node, then reads every reply.
fn round(conns: &mut [TcpStream], request: &[u8]) -> io::Result<Vec<Vec<u8>>> {
    for c in conns.iter_mut() {
        c.write_all(request)?;
    }
    conns.iter_mut().map(reply).collect()
}

fn token() -> String {
    let mut bytes = [0u8; 16];
    // SAFETY: a valid buffer of the length given.
    let n = unsafe { libc::getrandom(bytes.as_mut_ptr().cast(), bytes.len(), 0) };
    if n != bytes.len() as isize {
        // The floor does not need a strong token; the pid tells runs apart.
        return std::process::id().to_string();
    }
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A child that waits for this process to end (its pipe reads end of file).
fn fork_guard() -> io::Result<()> {
    let mut fds = [0; 2];
    // SAFETY: a valid two-element array.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: single-threaded here; the child only reads and exits.
    match unsafe { libc::fork() } {
        -1 => Err(io::Error::last_os_error()),
        0 => unsafe {
            libc::close(fds[1]);
            let mut b = 0u8;
            while libc::read(fds[0], (&raw mut b).cast(), 1) > 0 {}
            libc::_exit(0)
        },
        _ => {
            // SAFETY: the read end is the child's; the write end stays open
            // until this process exits.
            unsafe { libc::close(fds[0]) };
            Ok(())
        }
    }
}

fn main() -> ExitCode {
    match run() {
        Ok(code) => code,
        Err(e) => {
            eprintln!("floor: {e}");
            ExitCode::from(69)
        }
    }
}

fn run() -> io::Result<ExitCode> {
    let mut args = std::env::args().skip(1);
    let (mut ports, mut guard, mut threads) = (Vec::new(), false, 0usize);
    let mut command = Vec::new();
    while let Some(a) = args.next() {
        match a.as_str() {
            "--version" => {
                println!("floor {}", env!("CARGO_PKG_VERSION"));
                return Ok(ExitCode::SUCCESS);
            }
            "--guard" => guard = true,
            "--threads" => threads = args.next().and_then(|n| n.parse().ok()).unwrap_or(0),
            "-p" => ports.extend(args.next()),
            "--" => {
                command.extend(args.by_ref());
                break;
            }
            other => return Err(io::Error::other(format!("unknown argument {other}"))),
        }
    }
    if ports.is_empty() || command.is_empty() {
        return Err(io::Error::other(
            "usage: floor [--guard] [--threads N] -p PORT ... -- COMMAND",
        ));
    }
    if guard {
        fork_guard()?;
    }
    for _ in 0..threads {
        std::thread::spawn(std::thread::park);
    }
    let mut conns = ports
        .iter()
        .map(|p| {
            let c = TcpStream::connect(("127.0.0.1", p.parse::<u16>().unwrap_or(0)))?;
            c.set_nodelay(true)?;
            Ok(c)
        })
        .collect::<io::Result<Vec<_>>>()?;
    let token = token();
    let release = resp(&["EVAL", RELEASE, "1", KEY, &token]);
    let granted = round(
        &mut conns,
        &resp(&["SET", KEY, &token, "NX", "PX", "30000"]),
    )?
    .iter()
    .filter(|r| r.starts_with(b"+OK"))
    .count();
    if granted <= conns.len() / 2 {
        round(&mut conns, &release)?;
        return Ok(ExitCode::from(75));
    }
    let status = Command::new(&command[0]).args(&command[1..]).status()?;
    round(&mut conns, &release)?;
    Ok(ExitCode::from(status.code().unwrap_or(1) as u8))
}
