//! Every file redlock-run writes goes through here: created exclusively, under
//! an unpredictable name, in the target's directory, then renamed over the
//! target. A symlink planted at a predictable temporary name in a shared
//! directory (`--report /tmp/job.json` in a root crontab) can therefore not
//! redirect the write, rename(2) replaces a symlink at the target rather than
//! following it, and readers never see half a file.
//!
//! The file it replaces keeps what an operator gave it: its mode (set with
//! fchmod, whatever the umask of the run), and its owner and group where
//! this user may give them (root may; anyone may keep a group they are in).
//! A node_exporter that reads a textfile as its own user must not lose it
//! because a root cron job with umask 077 counted a run.

use std::fs::{File, Permissions};
use std::io::{self, Write};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

use rustix::fs::{Access, AtFlags};

/// Replaces `path` with `contents`, atomically, and on disk before the
/// rename. A new file gets mode 0644 (less the umask), as a plain create
/// would; a file replaced keeps its mode, owner and group.
pub(crate) fn write_atomically(path: &Path, contents: &[u8]) -> io::Result<()> {
    let dir = parent(path);
    let name = path
        .file_name()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "not a file name"))?;
    let mut tmp = tempfile::Builder::new()
        .prefix(&format!(".{}.", name.to_string_lossy()))
        .suffix(".tmp")
        .permissions(Permissions::from_mode(0o644))
        .tempfile_in(dir)?;
    tmp.write_all(contents)?;
    // Not through a symlink at the target: rename replaces the link itself.
    if let Ok(old) = std::fs::symlink_metadata(path)
        && old.file_type().is_file()
    {
        keep_owner(tmp.as_file(), old.uid(), old.gid());
        tmp.as_file()
            .set_permissions(Permissions::from_mode(old.mode() & 0o777))?;
    }
    tmp.as_file().sync_all()?;
    tmp.persist(path).map_err(|e| e.error)?;
    // The rename itself, best effort: the data is safe already.
    if let Ok(d) = File::open(dir) {
        let _ = d.sync_all();
    }
    Ok(())
}

/// Gives `file` this owner and group, or the group alone where the owner
/// cannot be given (not root), or neither: a file we cannot give away is
/// still written, as ours.
fn keep_owner(file: &File, uid: u32, gid: u32) {
    if std::os::unix::fs::fchown(file, Some(uid), Some(gid)).is_err() {
        let _ = std::os::unix::fs::fchown(file, None, Some(gid));
    }
}

/// Whether a file can be written at `path`, checked before the lock is
/// taken so that a bad `--report` or `--metrics-file` is a usage error up
/// front rather than a lost write after the job: the path is a regular file,
/// a symlink (the write replaces the link) or nothing yet, and its directory
/// exists and lets this user create and rename files in it. Permissions are
/// asked of the kernel (faccessat with the effective IDs), so root's bypass,
/// ACLs and read-only mounts count as they will for the write itself. The
/// error says what is wrong, without the path.
pub(crate) fn check_writable(path: &Path) -> io::Result<()> {
    // A lookup that fails for want of a directory (or of search permission
    // on it) is worded by the directory's checks below.
    let (existing, lookup) = match std::fs::symlink_metadata(path) {
        Ok(meta) => (Some(meta), None),
        Err(e) if e.kind() == io::ErrorKind::NotFound => (None, None),
        Err(e) if matches!(e.raw_os_error(), Some(libc::ENOTDIR | libc::EACCES)) => (None, Some(e)),
        Err(e) => return Err(e),
    };
    if let Some(meta) = &existing {
        let kind = meta.file_type();
        if kind.is_dir() {
            return Err(refused("it is a directory"));
        }
        if !kind.is_file() && !kind.is_symlink() {
            return Err(refused(&format!(
                "it is {}, not a regular file",
                special_kind(&kind)
            )));
        }
    }
    if path.file_name().is_none() {
        return Err(refused("it names no file"));
    }
    let dir = parent(path);
    let dir_meta = match std::fs::metadata(dir) {
        Ok(m) if m.is_dir() => m,
        Ok(_) => return Err(refused(&format!("{} is not a directory", dir.display()))),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Err(refused(&format!(
                "its directory {} does not exist",
                dir.display()
            )));
        }
        Err(e) => return Err(e),
    };
    if let Err(e) = access(dir, Access::WRITE_OK | Access::EXEC_OK) {
        return Err(refused(&match e.raw_os_error() {
            Some(libc::EROFS) => format!("{} is on a read-only file system", dir.display()),
            Some(libc::EACCES | libc::EPERM) => {
                format!("this user may not create files in {}", dir.display())
            }
            _ => format!("{}: {e}", dir.display()),
        }));
    }
    if let Some(e) = lookup {
        return Err(e);
    }
    // In a sticky directory (/tmp) only the owner of a file, of the
    // directory, or root may rename over it.
    if let Some(meta) = existing
        && dir_meta.mode() & libc::S_ISVTX != 0
    {
        let me = rustix::process::geteuid().as_raw();
        if me != 0 && meta.uid() != me && dir_meta.uid() != me {
            return Err(refused(&format!(
                "it belongs to uid {} in the sticky directory {}, so this user may not \
                 replace it",
                meta.uid(),
                dir.display()
            )));
        }
    }
    Ok(())
}

/// The directory a file at `path` is created in.
fn parent(path: &Path) -> &Path {
    match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    }
}

/// faccessat(2) with the effective IDs: what open(2) and rename(2) will use.
pub(crate) fn access(path: &Path, mode: Access) -> io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let c_path = std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|_| refused("it contains a NUL byte"))?;
    rustix::fs::accessat(rustix::fs::CWD, c_path.as_c_str(), mode, AtFlags::EACCESS)?;
    Ok(())
}

/// A usage problem with a path, worded for the line that names it.
fn refused(why: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, why.to_string())
}

/// What a file that is neither a regular file, a directory nor a symlink is.
fn special_kind(kind: &std::fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    if kind.is_fifo() {
        "a FIFO"
    } else if kind.is_socket() {
        "a socket"
    } else if kind.is_char_device() {
        "a character device"
    } else if kind.is_block_device() {
        "a block device"
    } else {
        "a special file"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replaces_the_target_and_never_follows_a_planted_symlink() {
        let dir = tempfile::tempdir().expect("tempdir");
        let victim = dir.path().join("victim");
        std::fs::write(&victim, "keep").expect("victim");
        let target = dir.path().join("report.json");
        std::os::unix::fs::symlink(&victim, &target).expect("symlink");
        // The names an attacker could predict, all pointing at the victim.
        for planted in ["report.tmp~", ".report.json.tmp", "report.json.tmp"] {
            let _ = std::os::unix::fs::symlink(&victim, dir.path().join(planted));
        }
        write_atomically(&target, b"{}\n").expect("write");
        assert_eq!(std::fs::read_to_string(&victim).expect("victim"), "keep");
        assert_eq!(std::fs::read_to_string(&target).expect("target"), "{}\n");
        assert!(
            !target
                .symlink_metadata()
                .expect("meta")
                .file_type()
                .is_symlink()
        );
    }

    #[test]
    fn only_paths_a_file_can_be_written_at_pass_the_check() {
        let dir = tempfile::tempdir().expect("tempdir");
        let why = |p: &Path| check_writable(p).expect_err("refused").to_string();
        // Fine: nothing yet, a regular file, a symlink (replaced, not
        // followed), a dangling one.
        let file = dir.path().join("r.json");
        assert!(check_writable(&file).is_ok());
        std::fs::write(&file, "").expect("file");
        assert!(check_writable(&file).is_ok());
        let link = dir.path().join("link.json");
        std::os::unix::fs::symlink(&file, &link).expect("symlink");
        assert!(check_writable(&link).is_ok());
        let dangling = dir.path().join("dangling.json");
        std::os::unix::fs::symlink(dir.path().join("gone"), &dangling).expect("symlink");
        assert!(check_writable(&dangling).is_ok());
        // Refused, each saying why.
        assert_eq!(why(dir.path()), "it is a directory");
        let fifo = dir.path().join("fifo");
        rustix::fs::mkfifoat(
            rustix::fs::CWD,
            &fifo,
            rustix::fs::Mode::from_raw_mode(0o600),
        )
        .expect("mkfifo");
        assert_eq!(why(&fifo), "it is a FIFO, not a regular file");
        assert_eq!(
            why(Path::new("/dev/null")),
            "it is a character device, not a regular file"
        );
        let missing = dir.path().join("no/such");
        assert_eq!(
            why(&missing.join("r.json")),
            format!("its directory {} does not exist", missing.display())
        );
        assert_eq!(
            why(&file.join("r.json")),
            format!("{} is not a directory", file.display())
        );
    }

    #[test]
    fn a_replaced_file_keeps_its_mode() {
        let dir = tempfile::tempdir().expect("tempdir");
        let target = dir.path().join("m.prom");
        for mode in [0o600, 0o640, 0o664] {
            std::fs::write(&target, "old").expect("old");
            std::fs::set_permissions(&target, Permissions::from_mode(mode)).expect("chmod");
            write_atomically(&target, b"new").expect("write");
            let meta = std::fs::metadata(&target).expect("meta");
            assert_eq!(meta.mode() & 0o777, mode, "{mode:o}");
            assert_eq!(std::fs::read_to_string(&target).expect("read"), "new");
        }
    }
}
