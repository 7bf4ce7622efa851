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

/// Replaces `path` with `contents`, atomically, and on disk before the
/// rename. A new file gets mode 0644 (less the umask), as a plain create
/// would; a file replaced keeps its mode, owner and group.
pub fn write_atomically(path: &Path, contents: &[u8]) -> io::Result<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
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

/// Whether a file could be written at `path`: its directory exists and lets
/// us create a file. Checked before the command runs, so a bad path is an
/// error up front rather than after the job.
pub fn check_writable(path: &Path) -> io::Result<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    tempfile::Builder::new()
        .prefix(".redlock-check.")
        .tempfile_in(dir)?;
    Ok(())
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
        assert!(check_writable(&target).is_ok());
        assert!(check_writable(&dir.path().join("no/such/dir/r.json")).is_err());
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
