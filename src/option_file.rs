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

use std::fs::File;
use std::io::{self, Read};
use std::os::fd::OwnedFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use rustix::event::{PollFd, PollFlags};

use crate::signals;

/// The most a password file may hold: a password, or a token of a few lines.
pub const PASSWORD_CAP: usize = 4 * 1024;

/// The most a PEM file may hold: a CA bundle (the system's is a few hundred
/// KB), a certificate chain or a key.
pub const PEM_CAP: usize = 4 * 1024 * 1024;

/// Why a file gave no contents.
#[derive(Debug)]
pub enum ReadError {
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
pub fn read(path: &Path, cap: usize) -> Result<Vec<u8>, ReadError> {
    read_from(open(path)?, cap)
}

/// `read`, for a file that holds a password: refused unread when others
/// may read it (the rule of the configuration file too). Group read is the
/// operator's choice (root:group 0640); a pipe from the shell is its
/// owner's alone. A device (`/dev/stdin`'s terminal) holds nothing to steal.
pub fn read_secret(path: &Path, cap: usize) -> Result<Vec<u8>, ReadError> {
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
    let mut contents = Vec::new();
    let mut chunk = [0u8; 16 * 1024];
    // A FIFO opened without a writer reads as end of file at once: the first
    // read waits for poll(2), which says "ready" only once a writer has come
    // (with data, or gone again).
    let mut ready = false;
    loop {
        if !ready {
            wait_readable(&file, stop.as_ref())?;
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

/// Waits until `file` can be read, or a signal arrives on `stop`.
fn wait_readable(file: &File, stop: Option<&OwnedFd>) -> Result<(), ReadError> {
    loop {
        // No timeout: a signal on `stop` ends the wait.
        let readable = poll_either(file, stop).map_err(|e| ReadError::Io(e.into()))?;
        if let Some(sig) = stop.and_then(signals::take) {
            return Err(ReadError::Stopped(sig));
        }
        if readable {
            return Ok(());
        }
    }
}

/// One poll(2) for `file` and, when there is one, `stop`, retried when it
/// is interrupted: whether `file` is readable.
fn poll_either(file: &File, stop: Option<&OwnedFd>) -> rustix::io::Result<bool> {
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
    rustix::io::retry_on_intr(|| rustix::event::poll(&mut fds[..len], None))?;
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
