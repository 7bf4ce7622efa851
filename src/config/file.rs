//! Where the configuration file is, and whether to believe it.
//!
//! The first of: `--config FILE`, `$REDLOCK_CONFIG`, the user's
//! `$XDG_CONFIG_HOME/redlock-run/config.toml` (`~/.config/...` without it),
//! `/etc/redlock-run/config.toml`. One file is read, never a merge: what a
//! run does is then in one place. A file named by the flag or the variable
//! must exist; the other two are looked for.
//!
//! A file that names the nodes decides where every lock of the host lives:
//! one that others may write could send every run to someone else's Redis
//! (and its passwords with them). As ssh refuses such a `~/.ssh/config`
//! and sudo such a sudoers, a file that others than its owner may write,
//! or owned by neither root nor the user who runs, is refused; and so is
//! one with a directory on its path, from `/` down, that is not trusted as
//! well (ssh's rule for the files it guards): whoever may write a
//! directory may rename what it holds and put a tree of their own in its
//! place. A sticky directory (`/tmp`, mode 1777) owned by root or the user
//! passes where ssh's would not: in it only an entry's owner may rename
//! it, which is what the rule protects. A file that holds a password in a
//! URL must not be readable by others either (its group may read it), the
//! rule of `--password-file` too.

use std::fs::Metadata;
use std::io::Read;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Component, Path, PathBuf};

use super::Error;
use super::parse::Loaded;

/// The most a configuration file may hold.
const CAP: usize = 256 * 1024;

/// How the file was found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Found {
    /// `--config FILE`.
    Flag,
    /// `$REDLOCK_CONFIG`.
    Env,
    /// The user's, under `$XDG_CONFIG_HOME` or `~/.config`.
    User,
    /// `/etc/redlock-run/config.toml`.
    System,
}

impl Found {
    /// How it was found, for messages.
    pub(crate) fn describe(self) -> &'static str {
        match self {
            Found::Flag => "--config",
            Found::Env => "REDLOCK_CONFIG",
            Found::User => "the user's configuration",
            Found::System => "the system's configuration",
        }
    }
}

/// The system-wide file.
pub(super) const SYSTEM: &str = "/etc/redlock-run/config.toml";

/// The file to read: `flag`'s, else the first of the search order that
/// exists; None when there is none.
pub(super) fn locate(flag: Option<&Path>) -> Option<(PathBuf, Found)> {
    if let Some(path) = flag {
        return Some((path.to_path_buf(), Found::Flag));
    }
    if let Some(path) = std::env::var_os("REDLOCK_CONFIG").filter(|v| !v.is_empty()) {
        return Some((PathBuf::from(path), Found::Env));
    }
    // The XDG base directory spec: a relative XDG_CONFIG_HOME is ignored.
    let base = std::env::var_os("XDG_CONFIG_HOME")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .or_else(|| {
            std::env::var_os("HOME")
                .map(PathBuf::from)
                .filter(|p| p.is_absolute())
                .map(|h| h.join(".config"))
        });
    if let Some(user) = base.map(|b| b.join("redlock-run").join("config.toml"))
        && exists(&user)
    {
        return Some((user, Found::User));
    }
    let system = PathBuf::from(SYSTEM);
    exists(&system).then_some((system, Found::System))
}

/// Whether something is at `path` (a file that cannot be read counts: it
/// is reported, not skipped).
fn exists(path: &Path) -> bool {
    std::fs::symlink_metadata(path).is_ok()
}

/// The file's text, once its owner and mode pass (see the module).
pub(super) fn read(path: &Path, found: Found) -> Result<String, Error> {
    let io = |error: std::io::Error| Error::Read {
        path: path.to_path_buf(),
        found,
        error,
    };
    // Non-blocking: a FIFO given by mistake is refused below instead of
    // waited on.
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)
        .map_err(io)?;
    // The checks are of the file opened (fstat), not of a name that may
    // be switched under us.
    let meta = file.metadata().map_err(io)?;
    trusted(path, &meta)?;
    let mut text = String::new();
    (&mut file)
        .take(CAP as u64 + 1)
        .read_to_string(&mut text)
        .map_err(io)?;
    if text.len() > CAP {
        return Err(Error::TooLong {
            path: path.to_path_buf(),
            cap: CAP,
        });
    }
    Ok(text)
}

/// Refuses a file that others could have written (see the module).
fn trusted(path: &Path, meta: &Metadata) -> Result<(), Error> {
    if !meta.is_file() {
        return Err(Error::NotFile {
            path: path.to_path_buf(),
        });
    }
    if !ours(meta.uid()) {
        return Err(Error::Owner {
            path: path.to_path_buf(),
            uid: meta.uid(),
        });
    }
    let mode = meta.mode() & 0o7777;
    if mode & 0o022 != 0 {
        return Err(Error::Writable {
            path: path.to_path_buf(),
            mode,
            dir: None,
        });
    }
    trusted_path(path)
}

/// Refuses a file with a directory on its path, from `/` down, that others
/// than root and the user who runs may write, unless sticky, or that
/// neither owns. The directories of the path as given and of the file it
/// leads to (through symbolic links) are both checked: a link in an open
/// directory can be switched as easily as a file.
fn trusted_path(path: &Path) -> Result<(), Error> {
    if let Some(dirs) = unlinked_dirs(path) {
        return dirs
            .iter()
            .try_for_each(|(dir, d)| trusted_dir(path, dir, d));
    }
    let given = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let mut dirs = [
        std::fs::canonicalize(given).ok(),
        std::fs::canonicalize(path)
            .ok()
            .and_then(|p| p.parent().map(Path::to_path_buf)),
    ];
    // Without a link on the way, both are one directory: checked once.
    if dirs[0] == dirs[1] {
        dirs[1] = None;
    }
    for dir in dirs.iter().flatten().flat_map(|d| d.ancestors()) {
        let Ok(d) = std::fs::metadata(dir) else {
            continue;
        };
        trusted_dir(path, dir, &d)?;
    }
    Ok(())
}

/// The directories of an absolute `path`, deepest first, each with its
/// metadata, when neither they nor `path` is a symbolic link: `path` is then
/// its own canonical form, and one `lstat` each tells all (half the system
/// calls of canonicalizing; the usual case, on every run with a file).
fn unlinked_dirs(path: &Path) -> Option<Vec<(&Path, Metadata)>> {
    if !path.is_absolute() || path.components().any(|c| c == Component::ParentDir) {
        return None;
    }
    path.ancestors()
        .map(|p| {
            let meta = std::fs::symlink_metadata(p).ok()?;
            (!meta.file_type().is_symlink()).then_some((p, meta))
        })
        .collect::<Option<Vec<_>>>()
        .map(|mut all| all.split_off(1))
}

/// Refuses a directory on a file's path that others may write or that
/// neither root nor the user owns (see `trusted_path`).
fn trusted_dir(path: &Path, dir: &Path, d: &Metadata) -> Result<(), Error> {
    let dmode = d.mode() & 0o7777;
    if !ours(d.uid()) {
        return Err(Error::DirOwner {
            path: path.to_path_buf(),
            dir: dir.to_path_buf(),
            uid: d.uid(),
        });
    }
    if dmode & 0o022 != 0 && dmode & 0o1000 == 0 {
        return Err(Error::Writable {
            path: path.to_path_buf(),
            mode: dmode,
            dir: Some(dir.to_path_buf()),
        });
    }
    Ok(())
}

/// Whether `uid` is root's or the user's who runs.
fn ours(uid: u32) -> bool {
    uid == 0 || uid == rustix::process::geteuid().as_raw()
}

/// Refuses a file with a password in a URL that others may read.
pub(super) fn check_secrets(path: &Path, loaded: &Loaded) -> Result<(), Error> {
    let Some(line) = loaded.secret_line() else {
        return Ok(());
    };
    let mode = std::fs::metadata(path).map_or(0, |m| m.mode() & 0o7777);
    // Group read is the operator's choice (root:group 0640, as Debian
    // keeps such files); others' is not.
    if mode & 0o004 != 0 {
        return Err(Error::Readable {
            path: path.to_path_buf(),
            mode,
            line,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn file(dir: &Path, mode: u32) -> PathBuf {
        let path = dir.join("config.toml");
        std::fs::write(&path, "ttl = \"5s\"\n").expect("write");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).expect("chmod");
        path
    }

    #[test]
    fn a_file_others_may_write_is_refused() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = file(dir.path(), 0o600);
        assert_eq!(read(&path, Found::Flag).expect("fine"), "ttl = \"5s\"\n");
        let path = file(dir.path(), 0o620);
        let e = read(&path, Found::Flag).expect_err("group-writable");
        assert!(e.to_string().contains("mode 0620"), "{e}");
        let path = file(dir.path(), 0o606);
        assert!(read(&path, Found::Flag).is_err(), "world-writable");
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777))
            .expect("chmod dir");
        let path = file(dir.path(), 0o600);
        let e = read(&path, Found::Flag).expect_err("open directory");
        assert!(e.to_string().contains("directory"), "{e}");
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o1777))
            .expect("chmod dir");
        assert!(read(&path, Found::Flag).is_ok(), "sticky, as /tmp");
    }

    #[test]
    fn an_open_directory_anywhere_on_the_path_is_refused() {
        let dir = tempfile::tempdir().expect("temp dir");
        let open = dir.path().join("x");
        let sub = open.join("sub");
        std::fs::create_dir_all(&sub).expect("mkdir");
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).expect("chmod");
        std::fs::set_permissions(&sub, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        let path = file(&sub, 0o600);
        let e = read(&path, Found::Flag).expect_err("an open grandparent");
        let want = format!("chmod go-w {}", open.display());
        assert!(e.to_string().contains(&want), "{e}");
        // Through a link from a trusted directory: the target's path counts.
        let link = dir.path().join("link.toml");
        std::os::unix::fs::symlink(&path, &link).expect("symlink");
        assert!(read(&link, Found::Flag).is_err(), "through a link");
        // A linked directory on the way, and a path that climbs: each is
        // judged where it leads.
        let trusted = dir.path().join("trusted");
        std::fs::create_dir(&trusted).expect("mkdir");
        std::os::unix::fs::symlink(&sub, trusted.join("to-sub")).expect("symlink");
        let e = read(&trusted.join("to-sub/config.toml"), Found::Flag).expect_err("a linked dir");
        assert!(e.to_string().contains(&want), "{e}");
        let e = read(&trusted.join("../x/sub/config.toml"), Found::Flag).expect_err("climbs");
        assert!(e.to_string().contains(&want), "{e}");
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o1777)).expect("chmod");
        assert!(read(&path, Found::Flag).is_ok(), "sticky");
    }

    #[test]
    fn what_is_not_a_file_is_refused() {
        let dir = tempfile::tempdir().expect("temp dir");
        assert!(matches!(
            read(dir.path(), Found::Flag),
            Err(Error::NotFile { .. })
        ));
        assert!(matches!(
            read(&dir.path().join("none"), Found::Env),
            Err(Error::Read {
                found: Found::Env,
                ..
            })
        ));
    }
}
