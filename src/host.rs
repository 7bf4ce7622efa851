//! Who and where this run is: the host's name and the user's, as the holder
//! record, the history record and `--report` name them.

/// This host's name; in test builds, `REDLOCK_TEST_HOST` when set, so that
/// one machine can play several hosts.
pub(crate) fn hostname() -> String {
    #[cfg(feature = "test-hooks")]
    if let Some(host) = std::env::var_os("REDLOCK_TEST_HOST") {
        return host.to_string_lossy().into_owned();
    }
    // gethostname(3) in glibc is uname(2)'s node name, which cannot fail.
    rustix::system::uname()
        .nodename()
        .to_string_lossy()
        .into_owned()
}

/// `$USER`, `$LOGNAME`, else the password database's name for our uid (CI
/// containers and cron on some systems set neither), else `uid N`.
pub(crate) fn user_name() -> String {
    // Looked up once: the holder record and the history record both name
    // the user, and the password database may be a network service.
    static NAME: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    NAME.get_or_init(|| {
        let uid = rustix::process::getuid().as_raw();
        std::env::var("USER")
            .or_else(|_| std::env::var("LOGNAME"))
            .ok()
            .filter(|u| !u.is_empty())
            .or_else(|| passwd_name(uid))
            .unwrap_or_else(|| format!("uid {uid}"))
    })
    .clone()
}

/// The name the password database (files, LDAP, ... as nsswitch says) gives `uid`.
fn passwd_name(uid: libc::uid_t) -> Option<String> {
    let mut buf = vec![0u8; 1024];
    loop {
        let mut pwd = std::mem::MaybeUninit::<libc::passwd>::uninit();
        let mut found: *mut libc::passwd = std::ptr::null_mut();
        // SAFETY: no safe form of getpwuid_r(3) is in the tree. It writes
        // only into `pwd` and `buf` (of the length given), and sets `found`
        // to null or to `pwd`; the entry is read only through `found` once
        // the call says it was written, and its pw_name then points at a
        // NUL-terminated string in `buf`, copied out before `buf` changes.
        let (rc, name) = unsafe {
            let rc = libc::getpwuid_r(
                uid,
                pwd.as_mut_ptr(),
                buf.as_mut_ptr().cast(),
                buf.len(),
                &mut found,
            );
            let name = (rc == 0 && !found.is_null() && !(*found).pw_name.is_null()).then(|| {
                std::ffi::CStr::from_ptr((*found).pw_name)
                    .to_string_lossy()
                    .into_owned()
            });
            (rc, name)
        };
        if rc == libc::ERANGE && buf.len() < 1 << 20 {
            buf.resize(buf.len() * 4, 0);
            continue;
        }
        return name.filter(|n| !n.is_empty());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_password_database_names_uids() {
        assert_eq!(passwd_name(0).as_deref(), Some("root"));
        assert_eq!(passwd_name(4_000_000_123), None, "no such user");
    }
}
