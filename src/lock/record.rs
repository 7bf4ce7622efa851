//! The holder record: who holds the lock, written beside it (see `keys`) for
//! `status`. Information only: nothing decides anything from it, and the
//! lock itself stays the plain token so other clients remain compatible.
//!
//! Anyone who can read the nodes (and every RDB/AOF file) can read it, so by
//! default the command is recorded by its program's name alone (`report.sh`;
//! for `-c`, `/bin/sh -c` and the line's first program). `--record-command
//! masked` keeps the command line with what looks like a credential masked,
//! in argv and `-c` alike, and inside the line a shell in argv runs
//! (`sh -c '...'`; see `mask_words`), cut to 200 characters. Masking
//! is a best effort over forms that are common, not a parser of every
//! program's options: the name is what is safe.

use std::time::Duration;

use crate::lock::node::push_masked_authority;
use crate::program::Program;

/// What the holder record keeps of the command line.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum RecordCommand {
    /// The program's name only.
    Name,
    /// The command line, what looks like a credential masked, cut to 200 characters.
    Masked,
}

/// Longest command line kept, the ellipsis included.
const MAX_COMMAND: usize = 200;

/// The record's fields for a run of `program` under a lock of `ttl` (the
/// acquire adds `acquired_ms`).
pub fn holder(
    program: &Program,
    shown: RecordCommand,
    ttl: Duration,
) -> Vec<(&'static str, String)> {
    vec![
        ("host", crate::host::hostname()),
        ("pid", std::process::id().to_string()),
        ("user", crate::host::user_name()),
        ("command", command(program, shown)),
        ("ttl_ms", ttl.as_millis().to_string()),
        ("version", env!("CARGO_PKG_VERSION").to_string()),
    ]
}

/// A reader's record (the same fields), as the one JSON object its field in
/// the readers' records holds; empty when there are no fields.
pub(crate) fn share(fields: &[(&str, String)]) -> String {
    if fields.is_empty() {
        return String::new();
    }
    let map: serde_json::Map<String, serde_json::Value> = fields
        .iter()
        .map(|(k, v)| ((*k).to_string(), serde_json::Value::String(v.clone())))
        .collect();
    serde_json::Value::Object(map).to_string()
}

/// What a record read back cut short says of itself (see the nodes'
/// `bounded_lua`): `record truncated at 8 KiB`.
pub(crate) fn cut(record: &[(String, String)]) -> Option<String> {
    record.iter().any(|(k, _)| k == "truncated").then(|| {
        format!(
            "record truncated at {} KiB",
            crate::lock::node::RECORD_CAP >> 10
        )
    })
}

/// A reader's record read back: its fields, or none where it is not such an
/// object (information only: nothing depends on it).
pub(crate) fn of_share(json: &[u8]) -> Vec<(String, String)> {
    match serde_json::from_slice::<serde_json::Map<String, serde_json::Value>>(json) {
        Ok(map) => map
            .into_iter()
            .map(|(k, v)| match v {
                serde_json::Value::String(s) => (k, s),
                other => (k, other.to_string()),
            })
            .collect(),
        Err(_) => Vec::new(),
    }
}

/// The command as the record shows it.
pub(crate) fn command(program: &Program, what: RecordCommand) -> String {
    let mut line = match (program, what) {
        (Program::Shell(s), RecordCommand::Name) => shell_name(s),
        (Program::Argv(argv), RecordCommand::Name) => basename(&argv[0].to_string_lossy()),
        (Program::Shell(s), RecordCommand::Masked) => {
            format!("/bin/sh -c {}", mask_line(s, 0))
        }
        (Program::Argv(argv), RecordCommand::Masked) => {
            let words: Vec<String> = argv
                .iter()
                .map(|a| a.to_string_lossy().into_owned())
                .collect();
            join_words(&mask_words(&words, 0))
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

fn basename(path: &str) -> String {
    path.rsplit('/').next().unwrap_or(path).to_string()
}

/// `/bin/sh -c` and the first program the line runs (past `VAR=value`
/// words and `exec`), by its base name, when that is a plain word; `…` when
/// the line goes on.
fn shell_name(line: &str) -> String {
    let words = split_line(line);
    let assignment = |w: &str| {
        w.split_once('=').is_some_and(|(name, _)| {
            name.bytes().next().is_some_and(|b| !b.is_ascii_digit())
                && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
        })
    };
    let plain = |w: &str| {
        !w.is_empty()
            && w.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"._/+-".contains(&b))
    };
    match words.iter().position(|w| w != "exec" && !assignment(w)) {
        Some(i) if plain(&words[i]) => format!(
            "/bin/sh -c {}{}",
            basename(&words[i]),
            if i + 1 < words.len() { " …" } else { "" }
        ),
        _ => "/bin/sh -c …".to_string(),
    }
}

/// A shell line cut into words as a POSIX shell would (quotes and
/// backslashes keep blanks inside a word, and go). A line the shell would
/// refuse (a quote left open) is cut at its blanks instead: its secrets are
/// masked all the same.
fn split_line(line: &str) -> Vec<String> {
    shlex::split(line).unwrap_or_else(|| line.split_whitespace().map(str::to_string).collect())
}

/// Words joined into a line for people to read: a word with a blank in it
/// (or none at all) in single quotes, so that it reads as one.
fn join_words(words: &[String]) -> String {
    let shown: Vec<String> = words
        .iter()
        .map(|w| {
            if w.is_empty() || w.chars().any(char::is_whitespace) {
                format!("'{}'", w.replace('\'', r"'\''"))
            } else {
                w.clone()
            }
        })
        .collect();
    shown.join(" ")
}

/// A shell line with its secrets masked (see `mask_words`); `depth` counts
/// the shells it is nested in, so that no line, however built, costs more
/// than a few passes.
fn mask_line(line: &str, depth: usize) -> String {
    join_words(&mask_words(&split_line(line), depth))
}

/// Programs that run a line of shell given after `-c` (an option cluster
/// with `c`: `-c`, `-ec`, `-lc`): the line's secrets are masked as a `-c`
/// line's, not as one word.
const SHELLS: &[&str] = &[
    "sh", "bash", "dash", "zsh", "ksh", "mksh", "ash", "fish", "su", "runuser", "flock",
];

/// How deep `sh -c "bash -c '...'"` is followed; deeper lines are masked as
/// words.
const MAX_NESTING: usize = 4;

/// Whether `word` is a shell's `-c` (alone or among other one-letter options).
fn is_command_flag(word: &str) -> bool {
    word.strip_prefix('-').is_some_and(|o| {
        !o.is_empty() && o.contains('c') && o.bytes().all(|b| b.is_ascii_alphabetic())
    })
}

/// Words that name a secret: `password=`, `PGPASSWORD=`, `--api-key`,
/// `AWS_SECRET_ACCESS_KEY=`, `X-Auth-Token:`.
fn names_secret(word: &str) -> bool {
    let w = word
        .trim_start_matches(['-', '$', '\'', '"'])
        .to_ascii_lowercase();
    [
        "passw",
        "passwd",
        "pwd",
        "secret",
        "token",
        "apikey",
        "api-key",
        "api_key",
        "credential",
        "auth",
        "cookie",
    ]
    .iter()
    .any(|s| w.contains(s))
        || w.ends_with("pass")
        || w.ends_with("key")
}

/// `--password VALUE`, `-password VALUE`, redis-cli's `-a VALUE`: the next
/// word is the secret.
fn is_secret_flag(word: &str) -> bool {
    word == "-a"
        || (word.starts_with('-') && word.len() > 2 && !word.contains('=') && names_secret(word))
}

/// curl's `-u user:PASSWORD` (`--user`): the next word's password.
fn is_user_flag(word: &str) -> bool {
    matches!(word, "-u" | "--user" | "--proxy-user" | "-U")
}

/// curl's `--user=user:PASSWORD` (`--proxy-user=`): the password masked.
fn mask_user_assignment(word: &str) -> Option<String> {
    ["--user=", "--proxy-user="].iter().find_map(|flag| {
        let value = word.strip_prefix(flag)?;
        Some(format!("{flag}{}", mask_after_colon(value)))
    })
}

/// `user:secret` with the part after the first `:` masked.
fn mask_after_colon(word: &str) -> String {
    match word.find(':') {
        Some(i) => format!("{}***{}", &word[..=i], closing_quote(word)),
        None => word.to_string(),
    }
}

/// The quote a word ends with, if it is a quoted one, so a mask keeps it.
fn closing_quote(word: &str) -> &str {
    match word.chars().next() {
        Some(q @ ('\'' | '"')) if word.len() > 1 && word.ends_with(q) => &word[word.len() - 1..],
        _ => "",
    }
}

/// Programs that take a password as the word after a short flag (or
/// attached to it: `-wSECRET`), with that flag; the middle field names the
/// one subcommand where the flag is a password, when the program's other
/// subcommands use it otherwise (`docker login -p`, `docker run -p 80:80`).
/// Any `-pSECRET` is masked whatever the program (mysql, mariadb, 7z).
const PASSWORD_FLAGS: &[(&str, Option<&str>, &str)] = &[
    ("sshpass", None, "-p"),
    ("rabbitmqadmin", None, "-p"),
    ("mongo", None, "-p"),
    ("mongosh", None, "-p"),
    ("mongodump", None, "-p"),
    ("mongorestore", None, "-p"),
    ("mongoexport", None, "-p"),
    ("mongoimport", None, "-p"),
    ("ncftp", None, "-p"),
    ("ncftpget", None, "-p"),
    ("ncftpput", None, "-p"),
    ("mosquitto_pub", None, "-P"),
    ("mosquitto_sub", None, "-P"),
    ("sqlcmd", None, "-P"),
    ("bcp", None, "-P"),
    ("zip", None, "-P"),
    ("unzip", None, "-P"),
    ("ldapsearch", None, "-w"),
    ("ldapmodify", None, "-w"),
    ("ldapadd", None, "-w"),
    ("ldapdelete", None, "-w"),
    ("ldapwhoami", None, "-w"),
    ("ldappasswd", None, "-w"),
    ("docker", Some("login"), "-p"),
    ("podman", Some("login"), "-p"),
    ("nerdctl", Some("login"), "-p"),
    ("buildah", Some("login"), "-p"),
];

/// The password flags of the command a line is in (see `PASSWORD_FLAGS`):
/// a word that names such a program (by its base name, wherever it stands:
/// after `sudo`, `timeout 5`, `env X=1`) brings its flag in, or waits for
/// its subcommand; a word that ends a command (`;`, `|`, `&`) clears them.
#[derive(Default)]
struct PasswordFlags {
    now: Vec<&'static str>,
    after: Vec<(&'static str, &'static str)>,
}

impl PasswordFlags {
    fn see(&mut self, bare: &str) {
        if let Some(i) = self.after.iter().position(|(sub, _)| *sub == bare) {
            let (_, flag) = self.after.swap_remove(i);
            self.now.push(flag);
        }
        for (program, sub, flag) in PASSWORD_FLAGS {
            if basename(bare) == *program {
                match sub {
                    None => self.now.push(flag),
                    Some(sub) => self.after.push((sub, flag)),
                }
            }
        }
    }

    fn end_command(&mut self, bare: &str) {
        if bare.ends_with([';', '|', '&']) {
            self.now.clear();
            self.after.clear();
        }
    }

    /// Whether `bare` is a password flag; a program takes its password
    /// once, so the flag is used up (`sshpass -p X ssh -p 22`: a port).
    fn takes_next(&mut self, bare: &str) -> bool {
        let i = self.now.iter().position(|flag| *flag == bare);
        i.map(|i| self.now.swap_remove(i)).is_some()
    }

    /// `word` with a password attached to a flag (`-wSECRET`) masked, the
    /// flag used up.
    fn attached(&mut self, word: &str) -> Option<String> {
        let i = self
            .now
            .iter()
            .position(|flag| word.len() > flag.len() && word.starts_with(flag))?;
        Some(format!("{}***", self.now.swap_remove(i)))
    }
}

/// Masks every word of a command line: the password in every URL's
/// user-info (all of what comes before the last `@`, as `https://TOKEN@host`
/// has no `:`), the value of every `secret=value` and `Secret-Header:
/// value`, `-pSECRET` (mysql), curl's `-uuser:SECRET` and
/// `--user=user:SECRET`, the word after a flag that names a secret
/// (`--password X`, `-a X`) or after `-u` (its password), the word after (or
/// attached to) the password flag of a program known to take one so
/// (`sshpass -p X`, see `PASSWORD_FLAGS`), and the line a shell runs
/// (`sh -c LINE`, see `SHELLS`), word by word.
fn mask_words(words: &[String], depth: usize) -> Vec<String> {
    let mut out = Vec::with_capacity(words.len());
    let mut flags = PasswordFlags::default();
    // What the previous word asked of this one.
    enum Next {
        Plain,
        Secret,
        UserColon,
        HeaderValue,
        Line,
    }
    let mut next = Next::Plain;
    // A shell was named in this command: its `-c` brings a line.
    let mut shell = false;
    for word in words {
        let masked = match std::mem::replace(&mut next, Next::Plain) {
            Next::Secret => format!("***{}", closing_quote(word)),
            Next::UserColon => mask_after_colon(word),
            Next::HeaderValue if is_auth_scheme(word) => {
                // `Authorization: Bearer TOKEN` in words of its own.
                next = Next::Secret;
                word.clone()
            }
            Next::HeaderValue => format!("***{}", closing_quote(word)),
            Next::Line if depth < MAX_NESTING => mask_line(word, depth + 1),
            Next::Line | Next::Plain => flags.attached(word).unwrap_or_else(|| mask(word)),
        };
        let bare = word.trim_matches(['\'', '"']);
        flags.see(bare);
        shell |= SHELLS.contains(&basename(bare).as_str());
        if flags.takes_next(bare) || is_secret_flag(bare) {
            next = Next::Secret;
        } else if is_user_flag(bare) {
            next = Next::UserColon;
        } else if bare.ends_with(':') && names_secret(bare.trim_end_matches(':')) {
            next = Next::HeaderValue;
        } else if shell && is_command_flag(bare) {
            next = Next::Line;
        }
        if bare.ends_with([';', '|', '&']) {
            shell = false;
        }
        flags.end_command(bare);
        out.push(masked);
    }
    out
}

/// `Bearer`, `Basic` and the like: the word before the credential.
fn is_auth_scheme(word: &str) -> bool {
    let w = word.trim_matches(['\'', '"']);
    !w.is_empty() && w.len() <= 16 && w.bytes().all(|b| b.is_ascii_alphabetic())
}

/// One word, masked (see `mask_words`).
fn mask(word: &str) -> String {
    let lead = if word.starts_with(['\'', '"']) {
        &word[..1]
    } else {
        ""
    };
    let bare = &word[lead.len()..];
    // mysql's -pSECRET, curl's -uuser:SECRET, attached to their flag.
    if let Some(secret) = bare.strip_prefix("-p")
        && !secret.is_empty()
    {
        return format!("{lead}-p***{}", closing_quote(word));
    }
    if let Some(user) = bare.strip_prefix("-u")
        && user.contains(':')
    {
        return format!("{lead}-u{}", mask_after_colon(user));
    }
    if let Some(masked) = mask_user_assignment(bare) {
        return format!("{lead}{masked}");
    }
    mask_headers(&mask_assignments(&mask_urls(word)))
}

/// The user-info of every `scheme://user:password@host` in `text`: what
/// comes between `://` and the last `@` before the URL ends (a blank or a
/// quote), so that a password holding `/`, `?`, `#` or `@` is masked whole.
fn mask_urls(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find("://") {
        let (head, tail) = rest.split_at(i + 3);
        out.push_str(head);
        let end = tail
            .find(|c: char| c.is_whitespace() || "'\"".contains(c))
            .unwrap_or(tail.len());
        let url = &tail[..end];
        match url.rfind('@') {
            Some(at) => {
                push_masked_authority(&mut out, &url[..=at]);
                out.push_str(&url[at + 1..]);
            }
            None => out.push_str(url),
        }
        rest = &tail[end..];
    }
    out.push_str(rest);
    out
}

/// `Name: value` inside one word (a quoted header, or an argument of its
/// own) where Name names a secret: the value becomes `***`, after the
/// scheme word (`Bearer`, `Basic`) when there is one.
fn mask_headers(text: &str) -> String {
    let Some(colon) = text.find(": ") else {
        return text.to_string();
    };
    let name = text[..colon].trim_start_matches(['\'', '"']);
    if name.is_empty()
        || !name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        || !names_secret(name)
    {
        return text.to_string();
    }
    let value = text[colon + 2..].trim_start();
    let scheme = value
        .split_once(' ')
        .filter(|(s, _)| is_auth_scheme(s))
        .map_or(String::new(), |(s, _)| format!("{s} "));
    format!("{}: {scheme}***{}", &text[..colon], closing_quote(text))
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
        let shell = |s: &str| command(&Program::Shell(s.into()), RecordCommand::Name);
        assert_eq!(shell("x"), "/bin/sh -c x");
        assert_eq!(
            shell("PGPASSWORD=s3 exec /usr/bin/pg_dump -h db | gzip"),
            "/bin/sh -c pg_dump …"
        );
        assert_eq!(shell("\"$TOOL\" --password x"), "/bin/sh -c …");
        assert_eq!(shell("hunter2=1"), "/bin/sh -c …");
        let long = "é".repeat(500);
        let c = command(&argv(&["echo", &long]), RecordCommand::Masked);
        assert_eq!(c.chars().count(), MAX_COMMAND);
        assert!(c.ends_with('…'));
    }

    /// Each form of secret, in argv and in a -c line: gone, the rest kept.
    #[test]
    fn secret_forms_are_masked_in_argv_and_in_shell_lines() {
        let cases: &[(&[&str], &str)] = &[
            (
                &["redis-cli", "-a", "hunter2", "ping"],
                "redis-cli -a *** ping",
            ),
            (
                &["mysql", "-phunter2", "-e", "select 1"],
                "mysql -p*** -e 'select 1'",
            ),
            (
                &["curl", "-u", "me:hunter2", "https://x"],
                "curl -u me:*** https://x",
            ),
            (&["curl", "-ume:hunter2", "x"], "curl -ume:*** x"),
            (
                &["curl", "-H", "Authorization: Bearer hunter2", "x"],
                "curl -H 'Authorization: Bearer ***' x",
            ),
            (
                &["curl", "-H", "X-Api-Key: hunter2"],
                "curl -H 'X-Api-Key: ***'",
            ),
            (
                &["env", "AWS_SECRET_ACCESS_KEY=hunter2", "aws", "s3", "ls"],
                "env AWS_SECRET_ACCESS_KEY=*** aws s3 ls",
            ),
            (
                &["psql", "postgres://u:p/hunter2@db/app"],
                "psql postgres://u:***@db/app",
            ),
            (
                &["psql", "postgres://u:p?#@hunter2@db:5432/app?x=1"],
                "psql postgres://u:***@db:5432/app?x=1",
            ),
            (&["tool", "--password", "hunter2"], "tool --password ***"),
            (&["tool", "--password=hunter2"], "tool --password=***"),
            (
                &["sshpass", "-p", "hunter2", "ssh", "-p", "22", "h"],
                "sshpass -p *** ssh -p 22 h",
            ),
            (
                &["/usr/bin/sshpass", "-phunter2", "ssh", "h"],
                "/usr/bin/sshpass -p*** ssh h",
            ),
            (
                &["sudo", "ldapsearch", "-x", "-w", "hunter2", "-b", "dc=x"],
                "sudo ldapsearch -x -w *** -b dc=x",
            ),
            (&["ldapwhoami", "-whunter2"], "ldapwhoami -w***"),
            (
                &["docker", "login", "-u", "me", "-p", "hunter2", "r.io"],
                "docker login -u me -p *** r.io",
            ),
            (
                &["docker", "run", "-p", "8080:80", "img"],
                "docker run -p 8080:80 img",
            ),
            (
                &["zip", "-P", "hunter2", "a.zip", "f"],
                "zip -P *** a.zip f",
            ),
            (&["tar", "-P", "-cf", "a.tar", "f"], "tar -P -cf a.tar f"),
        ];
        for (words, want) in cases {
            assert_eq!(
                command(&argv(words), RecordCommand::Masked),
                *want,
                "{words:?}"
            );
        }
        let shell = |s: &str| command(&Program::Shell(s.into()), RecordCommand::Masked);
        for (line, want) in [
            ("redis-cli -a hunter2 ping", "redis-cli -a *** ping"),
            ("redis-cli -a 'hun ter2' ping", "redis-cli -a *** ping"),
            ("mysql -phunter2 -e 'select 1'", "mysql -p*** -e 'select 1'"),
            ("curl -u me:hunter2 https://x", "curl -u me:*** https://x"),
            (
                "curl -sf -H 'Authorization: Bearer hunter2' https://x | jq .",
                "curl -sf -H 'Authorization: Bearer ***' https://x | jq .",
            ),
            (
                "curl -H \"Authorization: Bearer hunter2\" x",
                "curl -H 'Authorization: Bearer ***' x",
            ),
            (
                "curl -H Authorization: Bearer hunter2 x",
                "curl -H Authorization: Bearer *** x",
            ),
            (
                "AWS_SECRET_ACCESS_KEY=hunter2 aws s3 sync . s3://b",
                "AWS_SECRET_ACCESS_KEY=*** aws s3 sync . s3://b",
            ),
            (
                "pg_dump 'postgres://u:p/hunter2@db/app' > out",
                "pg_dump postgres://u:***@db/app > out",
            ),
            (
                "tool --password hunter2 && next",
                "tool --password *** && next",
            ),
            ("tool  --api-key\thunter2", "tool --api-key ***"),
            (
                "sshpass -p hunter2 rsync -r src h:dst && sshpass -p x2 ssh h",
                "sshpass -p *** rsync -r src h:dst && sshpass -p *** ssh h",
            ),
            (
                "timeout 30 sshpass -p 'hunter2' ssh h; zip -P x a.zip",
                "timeout 30 sshpass -p *** ssh h; zip -P *** a.zip",
            ),
        ] {
            let got = shell(line);
            assert_eq!(got, format!("/bin/sh -c {want}"), "{line}");
            assert!(!got.contains("hunter2") && !got.contains("ter2"), "{got}");
        }
    }

    /// The line a shell runs, given in argv (`sh -c '...'`) or nested in a
    /// `-c` line: masked word by word, as a `-c` line is.
    #[test]
    fn secrets_inside_a_shells_line_are_masked() {
        let cases: &[(&[&str], &str)] = &[
            (
                &["sh", "-c", "mysql -phunter2 db"],
                "sh -c 'mysql -p*** db'",
            ),
            (
                &["bash", "-c", "sshpass -p hunter2 ssh h"],
                "bash -c 'sshpass -p *** ssh h'",
            ),
            (
                &["/bin/bash", "-ec", "curl --user=u:hunter2 https://x"],
                "/bin/bash -ec 'curl --user=u:*** https://x'",
            ),
            (
                &[
                    "sudo",
                    "-u",
                    "app",
                    "sh",
                    "-c",
                    "tool --password=hunter2",
                    "arg0",
                ],
                "sudo -u app sh -c 'tool --password=***' arg0",
            ),
            (
                &[
                    "dash",
                    "-c",
                    "curl -u u:hunter2 x && PGPASSWORD=hunter2 psql",
                ],
                "dash -c 'curl -u u:*** x && PGPASSWORD=*** psql'",
            ),
            (
                &["zsh", "-c", "psql 'postgres://u:hunter2@db/app'"],
                "zsh -c 'psql postgres://u:***@db/app'",
            ),
            (&["curl", "--user=u:hunter2", "x"], "curl --user=u:*** x"),
            (
                &["curl", "--proxy-user=u:hunter2"],
                "curl --proxy-user=u:***",
            ),
            // A quote left open: cut at blanks, masked all the same.
            (
                &["sh", "-c", "mysql -phunter2 x'"],
                r"sh -c 'mysql -p*** x'\'''",
            ),
            // Not a shell's -c: `cut -c 1-5` keeps its word.
            (&["cut", "-c", "1-5 x"], "cut -c '1-5 x'"),
        ];
        for (words, want) in cases {
            let got = command(&argv(words), RecordCommand::Masked);
            assert_eq!(got, *want, "{words:?}");
            assert!(!got.contains("hunter2"), "{got}");
        }
        let shell = |s: &str| command(&Program::Shell(s.into()), RecordCommand::Masked);
        let got = shell("bash -c 'mysql -phunter2 db' && sh -c \"curl --user=u:hunter2 x\"");
        assert_eq!(
            got,
            "/bin/sh -c bash -c 'mysql -p*** db' && sh -c 'curl --user=u:*** x'"
        );
        // Nested, and however deep: past the nesting followed, still no
        // secret (a line too deep is one word, which no word of it leaks).
        let nested = command(
            &argv(&["sh", "-c", "bash -c \"mysql -phunter2 -e 'select 1'\""]),
            RecordCommand::Masked,
        );
        assert!(nested.starts_with("sh -c 'bash -c "), "{nested}");
        assert!(nested.contains("mysql -p***"), "{nested}");
        let mut line = "mysql -phunter2".to_string();
        for _ in 0..10 {
            line = format!("sh -c {}", shlex::try_quote(&line).expect("no NUL"));
        }
        assert!(!shell(&line).contains("hunter2"), "{}", shell(&line));
    }
}
