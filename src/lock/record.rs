//! The holder record: who holds the lock, written beside it (see `keys`) for
//! `status`. Information only: nothing decides anything from it, and the
//! lock itself stays the plain token so other clients remain compatible.
//!
//! Anyone who can read the nodes (and every RDB/AOF file) can read it, so the
//! command line goes in with credentials masked (`scheme://user:***@host`,
//! `password=***`, `--password ***`), cut to 200 characters; with
//! `--record-command name`, only the program's name.

use crate::cli::{Config, Program, RecordCommand};
use crate::lock::node::push_masked_authority;

/// Longest command line kept, the ellipsis included.
const MAX_COMMAND: usize = 200;

/// The record's fields for this run (the acquire adds `acquired_ms`).
pub fn holder(config: &Config) -> Vec<(&'static str, String)> {
    vec![
        ("host", hostname()),
        ("pid", std::process::id().to_string()),
        ("user", user_name()),
        ("command", command(&config.program, config.record_command)),
        ("ttl_ms", config.ttl.as_millis().to_string()),
        ("version", env!("CARGO_PKG_VERSION").to_string()),
    ]
}

/// The command as the record shows it.
pub fn command(program: &Program, what: RecordCommand) -> String {
    let mut line = match (program, what) {
        (Program::Shell(_), RecordCommand::Name) => "/bin/sh".to_string(),
        (Program::Argv(argv), RecordCommand::Name) => {
            let first = argv[0].to_string_lossy();
            first.rsplit('/').next().unwrap_or(&first).to_string()
        }
        (Program::Shell(s), RecordCommand::Masked) => format!("/bin/sh -c {}", mask(s)),
        (Program::Argv(argv), RecordCommand::Masked) => {
            let mut words: Vec<String> = Vec::with_capacity(argv.len());
            let mut hide_next = false;
            for a in argv {
                let a = a.to_string_lossy();
                if std::mem::take(&mut hide_next) {
                    words.push("***".into());
                    continue;
                }
                hide_next = is_secret_flag(&a);
                words.push(mask(&a));
            }
            words.join(" ")
        }
    };
    if line.chars().count() > MAX_COMMAND
        && let Some((cut, _)) = line.char_indices().nth(MAX_COMMAND - 1)
    {
        line.truncate(cut);
        line.push('…');
    }
    line
}

/// Words that name a secret: `password=`, `PGPASSWORD=`, `--api-key ...`.
fn names_secret(word: &str) -> bool {
    let w = word.trim_start_matches('-').to_ascii_lowercase();
    [
        "password", "passwd", "pass", "pwd", "secret", "token", "apikey", "api-key", "api_key",
    ]
    .iter()
    .any(|s| w.ends_with(s))
}

/// `--password VALUE`: the next argument is the secret.
fn is_secret_flag(arg: &str) -> bool {
    arg.starts_with("--") && !arg.contains('=') && names_secret(arg)
}

/// Masks, in one word or a shell line: the password in every URL's
/// user-info (the whole user-info when it has no `:`, as for
/// `https://TOKEN@host`), and the value of every `secret=value`.
fn mask(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    // URLs first: `scheme://userinfo@host`.
    while let Some(i) = rest.find("://") {
        let (head, tail) = rest.split_at(i + 3);
        out.push_str(head);
        let end = tail
            .find(|c: char| c.is_whitespace() || "/?#'\"".contains(c))
            .unwrap_or(tail.len());
        push_masked_authority(&mut out, &tail[..end]);
        rest = &tail[end..];
    }
    out.push_str(rest);
    mask_assignments(&out)
}

/// `key=value` where the key names a secret: the value becomes `***`.
fn mask_assignments(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    let bytes = text.as_bytes();
    while let Some(eq) = text[i..].find('=').map(|e| e + i) {
        // The key: back to the last separator.
        let key_start = text[..eq]
            .rfind(|c: char| c.is_whitespace() || "&;?'\"(".contains(c))
            .map_or(0, |k| k + 1)
            .max(i);
        let value_end = text[eq + 1..]
            .find(|c: char| c.is_whitespace() || "&;'\")".contains(c))
            .map_or(text.len(), |v| v + eq + 1);
        out.push_str(&text[i..eq + 1]);
        if names_secret(&text[key_start..eq]) && value_end > eq + 1 {
            out.push_str("***");
        } else {
            out.push_str(&text[eq + 1..value_end]);
        }
        i = value_end;
        if i >= bytes.len() {
            break;
        }
    }
    out.push_str(&text[i.min(text.len())..]);
    out
}

/// This host's name; in test builds, `REDLOCK_TEST_HOST` when set, so that
/// one machine can play several hosts.
pub fn hostname() -> String {
    #[cfg(debug_assertions)]
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

pub fn user_name() -> String {
    std::env::var("USER")
        .or_else(|_| std::env::var("LOGNAME"))
        // SAFETY: getuid cannot fail.
        .unwrap_or_else(|_| format!("uid {}", unsafe { libc::getuid() }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::OsString;

    fn argv(words: &[&str]) -> Program {
        Program::Argv(words.iter().map(OsString::from).collect())
    }

    #[test]
    fn credentials_are_masked() {
        let p = argv(&[
            "pg_dump",
            "postgres://u:pw@h/db",
            "--password",
            "hunter2",
            "x=1",
        ]);
        assert_eq!(
            command(&p, RecordCommand::Masked),
            "pg_dump postgres://u:***@h/db --password *** x=1"
        );
        let p = argv(&["curl", "https://TOKEN@api.example/x?api_key=abc&n=1"]);
        assert_eq!(
            command(&p, RecordCommand::Masked),
            "curl https://***@api.example/x?api_key=***&n=1"
        );
        let p = Program::Shell("PGPASSWORD=s3 psql 'host=h password=pw dbname=d' | gzip".into());
        assert_eq!(
            command(&p, RecordCommand::Masked),
            "/bin/sh -c PGPASSWORD=*** psql 'host=h password=*** dbname=d' | gzip"
        );
        let p = argv(&[
            "tool",
            "--token=abc",
            "--output=file",
            "ftp://a@b",
            "mailto:x@y",
        ]);
        assert_eq!(
            command(&p, RecordCommand::Masked),
            "tool --token=*** --output=file ftp://***@b mailto:x@y"
        );
    }

    #[test]
    fn name_only_and_length() {
        let p = argv(&["/opt/app/report.sh", "postgres://u:pw@h/db"]);
        assert_eq!(command(&p, RecordCommand::Name), "report.sh");
        assert_eq!(
            command(&Program::Shell("x".into()), RecordCommand::Name),
            "/bin/sh"
        );
        let long = "é".repeat(500);
        let c = command(&argv(&["echo", &long]), RecordCommand::Masked);
        assert_eq!(c.chars().count(), MAX_COMMAND);
        assert!(c.ends_with('…'));
    }
}
