//! Every file redlock-run writes goes through here: created exclusively, under
//! an unpredictable name, in the target's directory, then renamed over the
//! target. A symlink planted at a predictable temporary name in a shared
//! directory (`--report /tmp/job.json` in a root crontab) can therefore not
//! redirect the write, rename(2) replaces a symlink at the target rather than
//! following it, and readers never see half a file.

use std::io::{self, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

/// Replaces `path` with `contents`, atomically. The file gets mode 0644
/// (less the umask), as a plain create would.
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
        .permissions(std::fs::Permissions::from_mode(0o644))
        .tempfile_in(dir)?;
    tmp.write_all(contents)?;
    tmp.persist(path).map_err(|e| e.error)?;
    Ok(())
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
}
