//! The files that options name (`--password-file`, `--sentinel-password-file`,
//! `--tls-ca`, `--tls-cert`, `--tls-key`), read whole but bounded.
//!
//! Not `std::fs::read`, for two reasons. It reads until end of file, and some
//! files never end: `/dev/zero` given by mistake grows the run until the kernel
//! kills it. And `open(2)` of a FIFO blocks until a writer opens it, while
//! SIGTERM and SIGINT are already blocked (`signals` takes them from a
//! signalfd later): a secret pipe whose writer never comes would hold the run
//! until SIGKILL. So a file is opened with O_NONBLOCK, which returns at once for
//! a FIFO, read only up to a cap, and waited on with poll(2) beside a signalfd
//! for the signals this thread blocks, so that a run told to stop stops.
//!
//! The subcommands hold nothing and promise an answer within their node
//! timeout: they set a patience (`wait_at_most`), and a file that has not
//! been read whole by then (a FIFO nobody writes) is an error.

use std::fs::File;
use std::io::{self, Read};
use std::os::fd::OwnedFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use rustix::event::{PollFd, PollFlags};

use crate::signals;

/// The most a password file may hold: a password, or a token of a few lines.
pub(crate) const PASSWORD_CAP: usize = 4 * 1024;

/// The most a PEM file may hold: a CA bundle (the system's is a few hundred
/// KB), a certificate chain or a key.
pub(crate) const PEM_CAP: usize = 4 * 1024 * 1024;

/// How long a read may wait for its file: unset in a run, which waits
/// until told to stop.
static PATIENCE: OnceLock<Duration> = OnceLock::new();

/// Every later read gives up once it has waited `limit` for its file (the
/// first call wins: one process, one subcommand).
pub(crate) fn wait_at_most(limit: Duration) {
    let _ = PATIENCE.set(limit);
}

/// Why a file gave no contents.
#[derive(Debug)]
pub(crate) enum ReadError {
    /// It could not be opened or read.
    Io(io::Error),
    /// It holds more than the cap (bytes).
    TooLong(usize),
    /// It holds nothing.
    Empty,
    /// This forwarded signal arrived while the file was waited on.
    Stopped(i32),
    /// A secret's file that others than its owner and group may read: its
    /// mode (see `read_secret`).
    Readable(u32),
}

/// The contents of `path`, at most `cap` bytes; waits (for a FIFO's writer,
/// say) only until a signal that this thread blocks arrives.
pub(crate) fn read(path: &Path, cap: usize) -> Result<Vec<u8>, ReadError> {
    read_from(open(path)?, cap)
}

/// `read`, for a file that holds a password: refused unread when others
/// may read it (the rule of the configuration file too). Group read is the
/// operator's choice (root:group 0640); a pipe from the shell is its
/// owner's alone. A device (`/dev/stdin`'s terminal) holds nothing to steal.
pub(crate) fn read_secret(path: &Path, cap: usize) -> Result<Vec<u8>, ReadError> {
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    let file = open(path)?;
    // The file opened (fstat), not a name that may be switched under us.
    let meta = file.metadata().map_err(ReadError::Io)?;
    let kind = meta.file_type();
    if (kind.is_file() || kind.is_fifo()) && meta.mode() & 0o004 != 0 {
        return Err(ReadError::Readable(meta.mode() & 0o7777));
    }
    read_from(file, cap)
}

fn open(path: &Path) -> Result<File, ReadError> {
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)
        .map_err(ReadError::Io)
}

fn read_from(mut file: File, cap: usize) -> Result<Vec<u8>, ReadError> {
    let stop = signals::blocked_here().map_err(ReadError::Io)?;
    let until = PATIENCE.get().map(|p| (Instant::now() + *p, *p));
    let mut contents = Vec::new();
    let mut chunk = [0u8; 16 * 1024];
    // A FIFO opened without a writer reads as end of file at once: the first
    // read waits for poll(2), which says "ready" only once a writer has come
    // (with data, or gone again).
    let mut ready = false;
    loop {
        if !ready {
            wait_readable(&file, stop.as_ref(), until)?;
        }
        match file.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) if contents.len() + n > cap => return Err(ReadError::TooLong(cap)),
            Ok(n) => {
                contents.extend_from_slice(&chunk[..n]);
                ready = true;
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => ready = false,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(ReadError::Io(e)),
        }
    }
    if contents.is_empty() {
        return Err(ReadError::Empty);
    }
    Ok(contents)
}

/// Waits until `file` can be read, or a signal arrives on `stop`, or
/// `until` (the moment, and the patience it stands for) passes.
fn wait_readable(
    file: &File,
    stop: Option<&OwnedFd>,
    until: Option<(Instant, Duration)>,
) -> Result<(), ReadError> {
    loop {
        let left = match until {
            None => None,
            Some((t, patience)) => match t.checked_duration_since(Instant::now()) {
                Some(left) if !left.is_zero() => Some(left),
                _ => {
                    return Err(ReadError::Io(io::Error::new(
                        io::ErrorKind::TimedOut,
                        format!(
                            "nothing to read within {} (a FIFO nobody writes to?)",
                            humantime::format_duration(patience)
                        ),
                    )));
                }
            },
        };
        let readable = poll_either(file, stop, left).map_err(|e| ReadError::Io(e.into()))?;
        if let Some(sig) = stop.and_then(signals::take) {
            return Err(ReadError::Stopped(sig));
        }
        if readable {
            return Ok(());
        }
    }
}

/// One poll(2) for `file` and, when there is one, `stop`, for at most
/// `left` (None: until one is ready), retried when it is interrupted:
/// whether `file` is readable.
fn poll_either(
    file: &File,
    stop: Option<&OwnedFd>,
    left: Option<Duration>,
) -> rustix::io::Result<bool> {
    let mut fds = [
        PollFd::new(file, PollFlags::IN),
        // Not polled without a descriptor (see `len` below).
        PollFd::new(file, PollFlags::IN),
    ];
    let len = match stop {
        Some(fd) => {
            fds[1].set_fd(fd);
            2
        }
        None => 1,
    };
    // At least a millisecond: a timeout that rounds to zero would spin.
    let timeout =
        left.and_then(|d| rustix::event::Timespec::try_from(d.max(Duration::from_millis(1))).ok());
    rustix::io::retry_on_intr(|| rustix::event::poll(&mut fds[..len], timeout.as_ref()))?;
    Ok(!fds[0].revents().is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_up_to_the_cap_and_no_further() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("f");
        std::fs::write(&path, b"pw\n").expect("write");
        assert_eq!(read(&path, 3).expect("fits"), b"pw\n");
        assert!(matches!(read(&path, 2), Err(ReadError::TooLong(2))));
        std::fs::write(&path, b"").expect("write");
        assert!(matches!(read(&path, 2), Err(ReadError::Empty)));
        assert!(matches!(
            read(Path::new("/dev/zero"), 1000),
            Err(ReadError::TooLong(1000))
        ));
        assert!(matches!(
            read(&dir.path().join("none"), 10),
            Err(ReadError::Io(e)) if e.kind() == io::ErrorKind::NotFound
        ));
    }

    #[test]
    fn a_secret_others_may_read_is_refused_and_group_read_is_not() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("pw");
        std::fs::write(&path, b"pw\n").expect("write");
        for (mode, fine) in [(0o600, true), (0o640, true), (0o644, false), (0o666, false)] {
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).expect("chmod");
            match read_secret(&path, 10) {
                Ok(pw) => assert!(fine && pw == b"pw\n", "{mode:o}"),
                Err(ReadError::Readable(m)) => assert!(!fine && m == mode, "{mode:o}"),
                Err(e) => panic!("{mode:o}: {e:?}"),
            }
        }
        // A device is no file a secret is kept in.
        assert!(matches!(
            read_secret(Path::new("/dev/zero"), 10),
            Err(ReadError::TooLong(10))
        ));
    }
}
