//! Builder around the compiled `redlock-run` binary.
//!
//! ```ignore
//! let out = Test::new()
//!     .args(["-r", &node.url(), "-k", "job", "-c", "exit 7"])
//!     .expect_code(7);
//! let running = Test::new().args([...]).spawn();
//! running.signal(libc::SIGTERM);
//! let out = running.wait();
//! ```
//!
//! Every process is started with:
//! * all `REDLOCK_*` variables removed from the inherited environment,
//!   `REDLOCK_CONFIG` naming an empty configuration file, so that no file of
//!   the machine's is read, and `REDLOCK_RESTART_GRACE=0` (see
//!   [`GRACE_ENV`]); then the test's own `env`/`env_remove` calls are
//!   applied in order;
//! * every signal at its default disposition and an empty signal mask (the
//!   test harness may ignore/block signals and those settings would
//!   otherwise be inherited): [`child_rules`], the rule every spawner here
//!   uses;
//! * core dumps disabled (RLIMIT_CORE = 0) so SIGQUIT tests leave no cores;
//! * its own process group (so a misdirected group signal from the program
//!   cannot hit the test harness), unless `.same_process_group()`;
//! * stdin from /dev/null unless `.stdin_bytes(..)` is used.

use std::ffi::{OsStr, OsString};
use std::fmt;
use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The binary under test: the one cargo built, or the one
/// `REDLOCK_TEST_BINARY` names (a release build, say). A build without the
/// crate's `test-hooks` feature ignores the tests' `REDLOCK_TEST_*` switches,
/// so only the tests that set none of them can pass against it.
pub const BIN: Bin = Bin;

/// [`BIN`]: usable wherever a program path is (`Command::new(BIN)`, `{BIN}`).
#[derive(Clone, Copy, Debug)]
pub struct Bin;

impl Bin {
    pub fn path(self) -> &'static Path {
        static PATH: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
        PATH.get_or_init(|| match std::env::var_os("REDLOCK_TEST_BINARY") {
            // Absolute: the tests start it in directories of their own.
            Some(named) => std::fs::canonicalize(&named).unwrap_or_else(|e| {
                panic!("REDLOCK_TEST_BINARY={}: {e}", Path::new(&named).display())
            }),
            None => PathBuf::from(env!("CARGO_BIN_EXE_redlock-run")),
        })
    }
}

impl AsRef<OsStr> for Bin {
    fn as_ref(&self) -> &OsStr {
        self.path().as_os_str()
    }
}

impl fmt::Display for Bin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.path().display().fmt(f)
    }
}

/// The one rule for every process a test starts (redlock-run, script(1),
/// a shell): whatever the harness was started with (nohup, a CI runner
/// that ignores SIGINT and SIGQUIT, a blocked mask), the child starts with
/// every signal at its default disposition and none blocked, no core dumps,
/// no inherited `REDLOCK_*` variable (the caller's own `env` calls come
/// after), and, if `own_group`, a process group of its own, so that a
/// misdirected group signal cannot reach the harness.
pub fn child_rules(command: &mut Command, own_group: bool) {
    for (key, _) in std::env::vars_os() {
        if key.to_string_lossy().starts_with("REDLOCK_") {
            command.env_remove(&key);
        }
    }
    // No configuration file of the machine's (/etc/redlock-run, ~/.config)
    // reaches a test: an empty one stands first in the search order. A test
    // of the file sets REDLOCK_CONFIG, or gives --config, after this.
    command.env("REDLOCK_CONFIG", empty_config());
    command.env(GRACE_ENV, "0");
    // SAFETY: only async-signal-safe libc calls between fork and exec.
    unsafe {
        command.pre_exec(move || {
            for sig in 1..32 {
                if sig == libc::SIGKILL || sig == libc::SIGSTOP {
                    continue;
                }
                if libc::signal(sig, libc::SIG_DFL) == libc::SIG_ERR {
                    return Err(std::io::Error::last_os_error());
                }
            }
            let mut empty: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut empty);
            if libc::sigprocmask(libc::SIG_SETMASK, &empty, std::ptr::null_mut()) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            let no_core = libc::rlimit {
                rlim_cur: 0,
                rlim_max: 0,
            };
            libc::setrlimit(libc::RLIMIT_CORE, &no_core);
            if own_group && libc::setpgid(0, 0) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// Set to 0 for every process a test starts: each test's servers start a
/// moment before its first run, and a run would give a node that young no
/// vote for its restart grace. They held no lock before the test, so there
/// is nothing they could have forgotten. The tests of the grace itself set
/// their own (or remove it).
pub const GRACE_ENV: &str = "REDLOCK_RESTART_GRACE";

/// An empty configuration file (no settings), made once per test binary
/// in cargo's scratch directory for integration tests, or, when a
/// directory on that path is one redlock-run would not trust (a checkout
/// under a umask of 002), under the temporary directory.
pub fn empty_config() -> &'static Path {
    static EMPTY: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    EMPTY.get_or_init(|| {
        use std::os::unix::fs::PermissionsExt;
        // A directory of its own, 0755 whatever the umask: redlock-run
        // refuses a file with a directory others may write anywhere on its
        // path; readable by all, for the tests that run redlock-run as
        // another user (setpriv).
        let scratch = Path::new(env!("CARGO_TARGET_TMPDIR"));
        let dir = if trusted(scratch) {
            scratch.join("no-config")
        } else {
            // SAFETY: getuid cannot fail.
            let uid = unsafe { libc::getuid() };
            std::env::temp_dir().join(format!("redlock-run-no-config-{uid}"))
        };
        let path = dir.join("empty.toml");
        let made = std::fs::create_dir_all(&dir)
            .and_then(|()| std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)))
            .and_then(|()| std::fs::write(&path, b""))
            .and_then(|()| std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)));
        made.unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        path
    })
}

/// Whether every directory from `/` to `dir` passes redlock-run's rule for
/// a configuration file's path: writable by its owner alone (or sticky),
/// owned by root or this user.
fn trusted(dir: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    // SAFETY: geteuid cannot fail.
    let me = unsafe { libc::geteuid() };
    let Ok(dir) = dir.canonicalize() else {
        return false;
    };
    dir.ancestors().all(|d| {
        std::fs::metadata(d).is_ok_and(|m| {
            let mode = m.mode();
            (m.uid() == 0 || m.uid() == me) && (mode & 0o022 == 0 || mode & 0o1000 != 0)
        })
    })
}

/// `program` under [`child_rules`], in a process group of its own.
pub fn command(program: impl AsRef<OsStr>) -> Command {
    let mut command = Command::new(program);
    child_rules(&mut command, true);
    command
}

/// Default upper bound for `run()`/`wait()`: a hung program fails the test
/// instead of hanging CI.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);

/// Builder for one invocation of `redlock-run`.
#[derive(Clone, Debug)]
pub struct Test {
    args: Vec<OsString>,
    envs: Vec<(OsString, Option<OsString>)>,
    cwd: Option<PathBuf>,
    stdin: Option<Vec<u8>>,
    timeout: Duration,
    own_group: bool,
    umask: Option<libc::mode_t>,
    wrapper: Vec<OsString>,
}

impl Default for Test {
    fn default() -> Self {
        Self::new()
    }
}

impl Test {
    pub fn new() -> Test {
        Test {
            args: Vec::new(),
            envs: Vec::new(),
            cwd: None,
            stdin: None,
            timeout: DEFAULT_TIMEOUT,
            own_group: true,
            umask: None,
            wrapper: Vec::new(),
        }
    }

    pub fn arg(mut self, arg: impl AsRef<OsStr>) -> Test {
        self.args.push(arg.as_ref().to_owned());
        self
    }

    pub fn args<I, S>(mut self, args: I) -> Test
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        self.args
            .extend(args.into_iter().map(|a| a.as_ref().to_owned()));
        self
    }

    pub fn env(mut self, key: impl AsRef<OsStr>, val: impl AsRef<OsStr>) -> Test {
        self.envs
            .push((key.as_ref().to_owned(), Some(val.as_ref().to_owned())));
        self
    }

    pub fn env_remove(mut self, key: impl AsRef<OsStr>) -> Test {
        self.envs.push((key.as_ref().to_owned(), None));
        self
    }

    /// Working directory of the program (and so of its command).
    pub fn current_dir(mut self, dir: impl AsRef<Path>) -> Test {
        self.cwd = Some(dir.as_ref().to_owned());
        self
    }

    /// stdin from /dev/null (the default; kept for readability).
    pub fn stdin_null(mut self) -> Test {
        self.stdin = None;
        self
    }

    /// Feed these bytes on stdin, then close it.
    pub fn stdin_bytes(mut self, bytes: impl Into<Vec<u8>>) -> Test {
        self.stdin = Some(bytes.into());
        self
    }

    /// Upper bound for `run()`/`wait()` (default 60 s).
    pub fn timeout(mut self, timeout: Duration) -> Test {
        self.timeout = timeout;
        self
    }

    /// Keep the program in the test harness's process group.
    pub fn same_process_group(mut self) -> Test {
        self.own_group = false;
        self
    }

    /// Start the program through `program ARGS... redlock-run ...` (for
    /// example `unshare --pid --fork`): the handle's pid is then `program`'s.
    pub fn wrapped_in<I, S>(mut self, program_and_args: I) -> Test
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        self.wrapper = program_and_args
            .into_iter()
            .map(|a| a.as_ref().to_os_string())
            .collect();
        self
    }

    /// Start the program under this umask instead of the harness's.
    pub fn umask(mut self, mask: libc::mode_t) -> Test {
        self.umask = Some(mask);
        self
    }

    fn describe(&self) -> String {
        let mut s = String::new();
        for w in &self.wrapper {
            s.push_str(&format!("{:?} ", w.to_string_lossy()));
        }
        s.push_str("redlock-run");
        for a in &self.args {
            s.push(' ');
            s.push_str(&format!("{:?}", a.to_string_lossy()));
        }
        s
    }

    /// Starts the program and returns a handle to it.
    pub fn spawn(&self) -> Running {
        let mut command = match self.wrapper.split_first() {
            Some((program, args)) => {
                let mut c = Command::new(program);
                c.args(args).arg(BIN);
                c
            }
            None => Command::new(BIN),
        };
        command.args(&self.args);
        child_rules(&mut command, self.own_group);
        super::old_kernel::apply(&mut command);
        for (key, val) in &self.envs {
            match val {
                Some(v) => command.env(key, v),
                None => command.env_remove(key),
            };
        }
        if let Some(dir) = &self.cwd {
            command.current_dir(dir);
        }
        command
            .stdin(if self.stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        if let Some(mask) = self.umask {
            // SAFETY: umask only, between fork and exec.
            unsafe {
                command.pre_exec(move || {
                    libc::umask(mask);
                    Ok(())
                });
            }
        }
        let started = Instant::now();
        let mut child = command
            .spawn()
            .unwrap_or_else(|e| panic!("cannot spawn {}: {e}", self.describe()));
        if let (Some(bytes), Some(mut stdin)) = (self.stdin.clone(), child.stdin.take()) {
            std::thread::spawn(move || {
                let _ = stdin.write_all(&bytes);
            });
        }
        let stdout = Capture::start(child.stdout.take().expect("stdout is piped"));
        let stderr = Capture::start(child.stderr.take().expect("stderr is piped"));
        Running {
            pid: child.id() as i32,
            child: Some(child),
            started,
            stdout,
            stderr,
            timeout: self.timeout,
            own_group: self.own_group,
            description: self.describe(),
        }
    }

    /// Runs to completion (bounded by the timeout) and returns the output.
    pub fn run(&self) -> RunOutput {
        self.spawn().wait()
    }

    /// Runs to completion and asserts the exit code, printing the output on
    /// failure.
    pub fn expect_code(&self, code: i32) -> RunOutput {
        let out = self.run();
        out.assert_code(code);
        out
    }
}

/// Background reader of one output pipe.
struct Capture {
    buf: Arc<Mutex<Vec<u8>>>,
    done: Arc<AtomicBool>,
}

impl Capture {
    fn start(mut pipe: impl Read + Send + 'static) -> Capture {
        let buf = Arc::new(Mutex::new(Vec::new()));
        let done = Arc::new(AtomicBool::new(false));
        let (b, d) = (Arc::clone(&buf), Arc::clone(&done));
        std::thread::spawn(move || {
            let mut chunk = [0u8; 4096];
            loop {
                match pipe.read(&mut chunk) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => b
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .extend_from_slice(&chunk[..n]),
                }
            }
            d.store(true, Ordering::SeqCst);
        });
        Capture { buf, done }
    }

    fn snapshot(&self) -> Vec<u8> {
        self.buf.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

/// A running `redlock-run`. Dropping it SIGKILLs (its process group too)
/// and reaps it if it has not been waited for.
pub struct Running {
    child: Option<Child>,
    pid: i32,
    started: Instant,
    stdout: Capture,
    stderr: Capture,
    timeout: Duration,
    own_group: bool,
    description: String,
}

impl Running {
    pub fn pid(&self) -> i32 {
        self.pid
    }

    /// Time since spawn.
    pub fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }

    /// Sends `sig` to the program (not its group). Panics if it was already
    /// reaped.
    pub fn signal(&self, sig: i32) {
        assert!(self.child.is_some(), "signal after the process was reaped");
        assert!(
            super::send_signal(self.pid, sig),
            "kill({}, {sig}) failed: {}",
            self.pid,
            std::io::Error::last_os_error()
        );
    }

    /// stdout captured so far.
    pub fn stdout_so_far(&self) -> String {
        String::from_utf8_lossy(&self.stdout.snapshot()).into_owned()
    }

    /// stderr captured so far.
    pub fn stderr_so_far(&self) -> String {
        String::from_utf8_lossy(&self.stderr.snapshot()).into_owned()
    }

    /// Non-blocking: whether the program has exited (it is not reaped; call
    /// `wait` to collect the output).
    pub fn has_exited(&mut self) -> bool {
        // waitid with WNOWAIT leaves the child waitable.
        // SAFETY: zeroed siginfo_t is a valid out-parameter.
        unsafe {
            let mut info: libc::siginfo_t = std::mem::zeroed();
            let rc = libc::waitid(
                libc::P_PID,
                self.pid as libc::id_t,
                &mut info,
                libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
            );
            rc == 0 && info.si_pid() == self.pid
        }
    }

    /// Waits up to `limit` for exit; None if still running.
    pub fn wait_timeout(&mut self, limit: Duration) -> Option<RunOutput> {
        let child = self.child.as_mut().expect("process already waited for");
        let deadline = Instant::now() + limit;
        // Woken by the exit itself, where the kernel has pidfds: a test
        // that waits seconds for a run costs no wake-ups meanwhile.
        let exited = super::pidfd(child.id() as i32);
        let status = loop {
            match child.try_wait() {
                Ok(Some(status)) => break status,
                Ok(None) => {}
                Err(e) => panic!("waiting for {}: {e}", self.description),
            }
            let now = Instant::now();
            if now >= deadline {
                return None;
            }
            match &exited {
                Some(fd) => super::await_readable(
                    fd.as_raw_fd(),
                    (deadline - now).min(Duration::from_millis(500)),
                ),
                None => std::thread::sleep(Duration::from_millis(2)),
            }
        };
        let elapsed = self.started.elapsed();
        self.child = None;
        Some(self.collect(status, elapsed))
    }

    /// Waits for exit (bounded by the builder's timeout; on expiry the
    /// program is killed and the test panics with its output so far).
    pub fn wait(mut self) -> RunOutput {
        let limit = self.timeout.saturating_sub(self.started.elapsed());
        match self.wait_timeout(limit) {
            Some(out) => out,
            None => {
                let stdout = self.stdout_so_far();
                let stderr = self.stderr_so_far();
                let description = self.description.clone();
                let timeout = self.timeout;
                drop(self);
                panic!(
                    "{description} still running after {timeout:?}; killed.\n\
                     --- stdout ---\n{stdout}\n--- stderr ---\n{stderr}"
                );
            }
        }
    }

    fn collect(&self, status: ExitStatus, elapsed: Duration) -> RunOutput {
        // Give the readers a moment to drain; a leaked grandchild may keep
        // the pipes open, in which case we take what has arrived.
        super::wait_until(Duration::from_millis(500), || {
            self.stdout.done.load(Ordering::SeqCst) && self.stderr.done.load(Ordering::SeqCst)
        });
        RunOutput {
            code: status.code(),
            signal: status.signal(),
            stdout: String::from_utf8_lossy(&self.stdout.snapshot()).into_owned(),
            stderr: String::from_utf8_lossy(&self.stderr.snapshot()).into_owned(),
            elapsed,
            description: self.description.clone(),
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            if self.own_group {
                super::send_signal(-self.pid, libc::SIGKILL);
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Result of one run.
#[derive(Clone)]
pub struct RunOutput {
    /// Exit code (None if killed by a signal).
    pub code: Option<i32>,
    /// Signal that killed the program, if any.
    pub signal: Option<i32>,
    pub stdout: String,
    pub stderr: String,
    /// From spawn to exit.
    pub elapsed: Duration,
    pub description: String,
}

impl RunOutput {
    /// Asserts the exit code, printing everything on failure.
    pub fn assert_code(&self, code: i32) -> &RunOutput {
        assert_eq!(
            self.code,
            Some(code),
            "unexpected exit status (want {code})\n{self}"
        );
        self
    }

    /// stderr lines (without terminators).
    pub fn stderr_lines(&self) -> Vec<&str> {
        self.stderr.lines().collect()
    }

    /// Asserts stderr is exactly one newline-terminated line starting with
    /// `redlock-run: `.
    pub fn assert_one_error_line(&self) -> &RunOutput {
        assert!(
            self.stderr.starts_with("redlock-run: ")
                && self.stderr.ends_with('\n')
                && self.stderr.matches('\n').count() == 1,
            "stderr must be exactly one line starting with 'redlock-run: '\n{self}"
        );
        self
    }
}

impl fmt::Display for RunOutput {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "command: {}", self.description)?;
        writeln!(
            f,
            "exit code: {:?}, signal: {:?}, elapsed: {:?}",
            self.code, self.signal, self.elapsed
        )?;
        writeln!(f, "--- stdout ---\n{}", self.stdout)?;
        write!(f, "--- stderr ---\n{}", self.stderr)
    }
}

impl fmt::Debug for RunOutput {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}
