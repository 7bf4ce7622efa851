//! Who and where this run is: the host's name and the user's, as the holder
//! record, the history record and `--report` name them.

/// This host's name; in test builds, `REDLOCK_TEST_HOST` when set, so that
/// one machine can play several hosts.
pub fn hostname() -> String {
    #[cfg(feature = "test-hooks")]
    if let Some(host) = std::env::var_os("REDLOCK_TEST_HOST") {
        return host.to_string_lossy().into_owned();
    }
    let mut buf = [0u8; 256];
    // SAFETY: the buffer is valid for its length; gethostname NUL-terminates
    // when the name fits, and we stop at the first NUL either way.
    let ok = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) } == 0;
    let end = buf.iter().position(|b| *b == 0).unwrap_or(buf.len());
    if ok {
        String::from_utf8_lossy(&buf[..end]).into_owned()
    } else {
        "?".into()
    }
}

/// `$USER`, `$LOGNAME`, else the password database's name for our uid (CI
/// containers and cron on some systems set neither), else `uid N`.
pub fn user_name() -> String {
    // Looked up once: the holder record and the history record both name
    // the user, and the password database may be a network service.
    static NAME: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    NAME.get_or_init(|| {
        // SAFETY: getuid cannot fail.
        let uid = unsafe { libc::getuid() };
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
        // SAFETY: an all-zero passwd is a valid out-value; getpwuid_r writes
        // only into it and into `buf` (of the length given), and sets
        // `found` to null or to `pwd`.
        let mut pwd: libc::passwd = unsafe { std::mem::zeroed() };
        let mut found: *mut libc::passwd = std::ptr::null_mut();
        let rc = unsafe {
            libc::getpwuid_r(
                uid,
                &mut pwd,
                buf.as_mut_ptr().cast(),
                buf.len(),
                &mut found,
            )
        };
        if rc == libc::ERANGE && buf.len() < 1 << 20 {
            buf.resize(buf.len() * 4, 0);
            continue;
        }
        if rc != 0 || found.is_null() || pwd.pw_name.is_null() {
            return None;
        }
        // SAFETY: on success pw_name points at a NUL-terminated string in `buf`.
        let name = unsafe { std::ffi::CStr::from_ptr(pwd.pw_name) };
        return Some(name.to_string_lossy().into_owned()).filter(|n| !n.is_empty());
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
