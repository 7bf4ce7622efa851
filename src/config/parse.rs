//! The file's TOML, read into settings: each key the long name of an
//! option of the run (read off the clap definition, so that a new option
//! is a new key with nothing to keep in step), each value of the type the
//! option takes and checked by its own parser, each with its line.
//!
//! ```toml
//! redis = ["rediss://lock1:6380", "rediss://lock2:6380", "rediss://lock3:6380"]
//! tls-ca = "/etc/redlock-run/ca.pem"
//! prefix = "app:"
//!
//! [lock."nightly-backup"]
//! ttl = "2m"
//! max-runtime = "3h"
//! ```

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::Path;

use clap::{Arg, ArgAction, Command, ValueHint};
use serde::Deserialize;
use toml::Spanned;

use super::Error;

/// A table of the file: each key with its value, both with where they are.
type Table = BTreeMap<Spanned<String>, Spanned<toml::Value>>;

/// The `[lock."NAME"]` tables, read in a pass of their own: a value inside
/// a table read as `toml::Value` keeps no position.
#[derive(Deserialize)]
struct Locks {
    #[serde(default)]
    lock: BTreeMap<String, Spanned<Table>>,
}

/// Options no file sets, and why.
const NOT_IN_A_FILE: [(&str, &str); 5] = [
    (
        "key",
        "the lock's name is given on each run (-k); settings for one lock go in a [lock.\"NAME\"] table",
    ),
    ("command", "the command is given on each run"),
    ("config", "a configuration file cannot name another"),
    ("no-config", "a configuration file cannot name another"),
    ("timeout", "it is not an option: say wait or max-runtime"),
];

/// One setting of the file.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Setting {
    /// The option's long name, which is the key.
    pub name: String,
    pub value: Value,
    pub line: usize,
    /// The `[lock."NAME"]` table it is in; None at the top level.
    pub lock: Option<String>,
}

/// A setting's value, as its option takes it.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Value {
    /// A switch (`fence = true`).
    Flag(bool),
    /// A count (`verbose = 2`).
    Count(u8),
    /// One value, as it would be typed after the flag.
    One(String),
    /// Several (`redis = [...]`).
    Many(Vec<String>),
}

impl Value {
    /// The arguments that give it to option `long`.
    pub(crate) fn words(&self, long: &str) -> Vec<OsString> {
        let flag = format!("--{long}");
        match self {
            Value::Flag(true) => vec![flag.into()],
            Value::Flag(false) => Vec::new(),
            Value::Count(n) => (0..*n).map(|_| OsString::from(&flag)).collect(),
            Value::One(v) => vec![format!("{flag}={v}").into()],
            Value::Many(vs) => vs.iter().map(|v| format!("{flag}={v}").into()).collect(),
        }
    }
}

/// The file's settings.
#[derive(Debug, Default)]
pub(super) struct Loaded {
    pub top: Vec<Setting>,
    pub locks: Vec<(String, Vec<Setting>)>,
}

impl Loaded {
    /// The settings for lock `name`: its table's, then the top level's.
    pub(super) fn for_lock(&self, name: &str) -> Vec<Setting> {
        let own = self
            .locks
            .iter()
            .filter(|(n, _)| n == name)
            .flat_map(|(_, s)| s.iter().cloned());
        own.chain(self.top.iter().cloned()).collect()
    }

    /// The line of a URL with a password in it, if there is one.
    pub(super) fn secret_line(&self) -> Option<usize> {
        let all = self
            .top
            .iter()
            .chain(self.locks.iter().flat_map(|(_, s)| s.iter()));
        all.filter(|s| {
            let words = match &s.value {
                Value::One(v) => vec![v.as_str()],
                Value::Many(vs) => vs.iter().map(String::as_str).collect(),
                _ => Vec::new(),
            };
            words.iter().any(|w| crate::lock::node::redact(w) != *w)
        })
        .map(|s| s.line)
        .min()
    }
}

/// Whether `text` sets nothing (comments alone, as in the package's example,
/// or empty lock tables): such a file needs no command to be read against.
/// A file that does not parse is not empty: reading it says what is wrong.
pub(super) fn sets_nothing(text: &str) -> bool {
    // Blank and comment lines alone need no parser (its code, first run,
    // cost a run more than the rest of the file's reading); a control
    // character in a comment is left to the parser, which refuses it.
    let comment_or_blank = |line: &str| {
        let line = line.trim_start_matches([' ', '\t']);
        line.is_empty()
            || line.starts_with('#') && !line.chars().any(|c| c.is_control() && c != '\t')
    };
    if text.lines().all(comment_or_blank) {
        return true;
    }
    toml::from_str::<toml::Table>(text).is_ok_and(|top| {
        top.iter().all(|(key, value)| {
            key == "lock"
                && value.as_table().is_some_and(|locks| {
                    locks
                        .values()
                        .all(|t| t.as_table().is_some_and(toml::Table::is_empty))
                })
        })
    })
}

/// Reads `text` (the file at `path`) against the options of `cmd`.
pub(super) fn parse(text: &str, path: &Path, cmd: &Command) -> Result<Loaded, Error> {
    let at = |offset: usize, what: String| Error::At {
        path: path.to_path_buf(),
        line: line_of(text, offset),
        what,
    };
    let syntax = |e: toml::de::Error| {
        let offset = e.span().map_or(0, |s| s.start);
        at(offset, e.message().trim().to_string())
    };
    let top: Table = toml::from_str(text).map_err(syntax)?;
    let locks: Locks = toml::from_str(text).map_err(syntax)?;
    let mut loaded = Loaded::default();
    for (key, value) in &top {
        if key.get_ref() == "lock" {
            continue;
        }
        let setting = setting(key, value, None, cmd).map_err(|w| at(key.span().start, w))?;
        loaded.top.push(setting);
    }
    for (name, table) in locks.lock {
        let mut settings = Vec::new();
        for (key, value) in table.get_ref() {
            let s = setting(key, value, Some(&name), cmd).map_err(|w| at(key.span().start, w))?;
            settings.push(s);
        }
        loaded.locks.push((name, settings));
    }
    for s in loaded.top.iter_mut().chain(
        loaded
            .locks
            .iter_mut()
            .flat_map(|(_, settings)| settings.iter_mut()),
    ) {
        s.line = line_of(text, s.line);
    }
    Ok(loaded)
}

/// The 1-based line of byte `offset` of `text`.
fn line_of(text: &str, offset: usize) -> usize {
    text.get(..offset)
        .map_or(0, |before| before.matches('\n').count())
        + 1
}

/// The options a file may set.
fn settable(cmd: &Command) -> impl Iterator<Item = &Arg> {
    cmd.get_arguments().filter(|a| {
        a.get_long().is_some_and(|l| {
            !NOT_IN_A_FILE.iter().any(|(n, _)| *n == l) && !matches!(l, "help" | "version")
        }) && !a.is_hide_set()
    })
}

/// One key and its value as a setting; its line is the key's offset until
/// `parse` turns it into a line. The error is the clause after FILE:LINE.
fn setting(
    key: &Spanned<String>,
    value: &Spanned<toml::Value>,
    lock: Option<&str>,
    cmd: &Command,
) -> Result<Setting, String> {
    let name = key.get_ref();
    if let Some((_, why)) = NOT_IN_A_FILE.iter().find(|(n, _)| n == name) {
        return Err(format!(
            "'{name}' cannot be set in a configuration file: {why}"
        ));
    }
    let Some(arg) = settable(cmd).find(|a| a.get_long() == Some(name)) else {
        let known = settable(cmd).filter_map(Arg::get_long);
        let mut what = format!("unknown key '{name}'");
        if lock.is_some() {
            what.push_str(" in a [lock] table");
        }
        match suggest(name, known.chain(lock.is_none().then_some("lock"))) {
            Some(near) => what.push_str(&format!("; did you mean '{near}'?")),
            None => what.push_str(
                "; the keys are the long options' names (redis, prefix, ttl, node-timeout, ...)",
            ),
        }
        return Err(what);
    };
    let value = typed(arg, name, value.get_ref())?;
    Ok(Setting {
        name: name.clone(),
        value,
        line: key.span().start,
        lock: lock.map(str::to_string),
    })
}

/// `v` as option `arg` takes it, its words checked by the option's parser.
fn typed(arg: &Arg, name: &str, v: &toml::Value) -> Result<Value, String> {
    let wants = |what: &str| {
        format!(
            "'{name}' takes {what}, not {} {}",
            article(v.type_str()),
            v.type_str()
        )
    };
    let value = match (arg.get_action(), v) {
        (ArgAction::SetTrue, toml::Value::Boolean(b)) => Value::Flag(*b),
        (ArgAction::SetTrue, _) => return Err(wants("true or false")),
        (ArgAction::Count, toml::Value::Integer(n)) => Value::Count(
            u8::try_from(*n).map_err(|_| format!("'{name}' takes a count from 0 to 255"))?,
        ),
        (ArgAction::Count, _) => return Err(wants("a number")),
        (ArgAction::Append, toml::Value::Array(items)) => Value::Many(
            items
                .iter()
                .map(|i| match i {
                    toml::Value::String(s) => Ok(s.clone()),
                    other => Err(format!(
                        "'{name}' takes a list of strings, not a list with {} {} in it",
                        article(other.type_str()),
                        other.type_str()
                    )),
                })
                .collect::<Result<_, _>>()?,
        ),
        (_, other) => Value::One(word(other).ok_or_else(|| wants(&value_name(arg)))?),
    };
    let words = match &value {
        Value::One(w) => vec![w.clone()],
        Value::Many(ws) => ws.clone(),
        Value::Flag(_) | Value::Count(_) => Vec::new(),
    };
    for w in &words {
        check_word(arg, name, w)?;
    }
    Ok(value)
}

/// A scalar as it would be typed on the command line.
fn word(v: &toml::Value) -> Option<String> {
    match v {
        toml::Value::String(s) => Some(s.clone()),
        toml::Value::Integer(n) => Some(n.to_string()),
        toml::Value::Float(f) => Some(f.to_string()),
        _ => None,
    }
}

fn article(kind: &str) -> &'static str {
    if kind.starts_with(['a', 'e', 'i', 'o', 'u']) {
        "an"
    } else {
        "a"
    }
}

/// "a DURATION", "a FILE": what the option's help calls its value.
fn value_name(arg: &Arg) -> String {
    let name = arg
        .get_value_names()
        .and_then(|n| n.first())
        .map_or("VALUE".to_string(), |n| n.to_string());
    format!("a {name} (a string)")
}

/// Checks `w` as option `arg`'s parser would on the command line; a path
/// must be absolute, as runs start in many directories.
fn check_word(arg: &Arg, name: &str, w: &str) -> Result<(), String> {
    if arg.get_value_hint() == ValueHint::FilePath && !Path::new(w).is_absolute() {
        return Err(format!(
            "'{name}' = \"{w}\": give an absolute path (runs start in many directories)"
        ));
    }
    // The nodes' URLs are read when a run starts its nodes: here too, so
    // that a bad one is named with its line.
    if name == "redis" {
        crate::lock::node::check_list(w).map_err(|e| format!("'{name}': {e}"))?;
    }
    // The option alone, with its own parser: its relations to other
    // options are checked when the run's arguments are parsed.
    let mut probe = Arg::new(arg.get_id().clone())
        .long(name.to_string())
        .action(ArgAction::Set)
        .value_parser(arg.get_value_parser().clone());
    if let Some(names) = arg.get_value_names() {
        probe = probe.value_names(names.to_vec());
    }
    Command::new("redlock-run")
        .no_binary_name(true)
        .disable_help_flag(true)
        .arg(probe)
        .try_get_matches_from([format!("--{name}={w}")])
        .map(|_| ())
        .map_err(|e| {
            let text = e.render().to_string();
            let said = text
                .lines()
                .map(str::trim)
                .take_while(|l| !l.starts_with("For more information"))
                .filter(|l| !l.is_empty())
                .collect::<Vec<_>>()
                .join(" ");
            let said = said.trim_start_matches("error: ");
            format!(
                "'{name}': {}",
                crate::lock::node::redact(said).trim_end_matches('.')
            )
        })
}

/// The known word nearest to `word`, if it is near enough to be what was
/// meant: `_` for `-` (`node_timeout`), case, and a letter or two off.
fn suggest<'a>(word: &str, known: impl Iterator<Item = &'a str>) -> Option<&'a str> {
    let w = word.to_ascii_lowercase().replace('_', "-");
    known
        .map(|k| (distance(&w, k), k))
        .filter(|(d, k)| *d <= (k.len() / 3).max(1))
        .min_by_key(|(d, _)| *d)
        .map(|(_, k)| k)
}

/// The edit distance between `a` and `b` (insertions, deletions,
/// substitutions, and two letters swapped).
fn distance(a: &str, b: &str) -> usize {
    let (a, b): (Vec<char>, Vec<char>) = (a.chars().collect(), b.chars().collect());
    let mut rows = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for (i, row) in rows.iter_mut().enumerate() {
        row[0] = i;
    }
    for (j, cell) in rows[0].iter_mut().enumerate() {
        *cell = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut d = (rows[i - 1][j] + 1)
                .min(rows[i][j - 1] + 1)
                .min(rows[i - 1][j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                d = d.min(rows[i - 2][j - 2] + 1);
            }
            rows[i][j] = d;
        }
    }
    rows[a.len()][b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cmd() -> Command {
        super::super::command_for_keys()
    }

    fn read(text: &str) -> Result<Loaded, String> {
        parse(text, Path::new("/etc/c.toml"), &cmd()).map_err(|e| e.to_string())
    }

    #[test]
    fn a_file_of_comments_or_empty_tables_sets_nothing() {
        assert!(sets_nothing(""));
        assert!(sets_nothing("# ttl = \"5s\"\n\n# [lock.\"x\"]\n"));
        assert!(sets_nothing("[lock.\"x\"]\n"));
        assert!(!sets_nothing("ttl = \"5s\"\n"));
        assert!(!sets_nothing("[lock.\"x\"]\nttl = \"5s\"\n"));
        assert!(!sets_nothing("lock = 3\n"));
        assert!(!sets_nothing("ttl = \n"), "a file that does not parse");
        assert!(sets_nothing("  \t# indented\r\n\t\n"));
        assert!(
            !sets_nothing("# a bell \u{7}\n"),
            "a control character in a comment is TOML's to refuse"
        );
        assert!(!sets_nothing("#ok\n  x\n"));
    }

    #[test]
    fn keys_values_and_lines() {
        let l = read(
            "# nodes\nredis = [\"redis://a:1\", \"redis://b:2\"]\nttl = \"5m\"\nfence = \
             true\nretry = 2\nverbose = 1\n\n[lock.\"nightly\"]\nttl = 90\n",
        )
        .expect("valid");
        let find = |n: &str| l.top.iter().find(|s| s.name == n).expect(n).clone();
        assert_eq!(
            find("redis").value,
            Value::Many(vec!["redis://a:1".into(), "redis://b:2".into()])
        );
        assert_eq!(find("redis").line, 2);
        assert_eq!(find("ttl").line, 3);
        assert_eq!(find("fence").value, Value::Flag(true));
        assert_eq!(find("retry").value, Value::One("2".into()));
        assert_eq!(find("verbose").value.words("verbose"), ["--verbose"]);
        let night = l.for_lock("nightly");
        assert_eq!(night[0].name, "ttl");
        assert_eq!(night[0].value, Value::One("90".into()));
        assert_eq!(
            (night[0].line, night[0].lock.as_deref()),
            (9, Some("nightly"))
        );
        assert_eq!(l.for_lock("other").len(), l.top.len());
    }

    #[test]
    fn a_near_miss_is_named_with_its_line() {
        let e = read("prefix = \"a:\"\nttll = \"5s\"\n").expect_err("unknown");
        assert_eq!(e, "/etc/c.toml:2: unknown key 'ttll'; did you mean 'ttl'?");
        let e = read("node_timeout = \"1s\"\n").expect_err("unknown");
        assert!(e.ends_with("did you mean 'node-timeout'?"), "{e}");
        let e = read("[locks.x]\nttl = 1\n").expect_err("unknown");
        assert!(e.ends_with("did you mean 'lock'?"), "{e}");
        let e = read("\n\n[lock.x]\nredis-urls = 1\n").expect_err("unknown");
        assert!(
            e.starts_with("/etc/c.toml:4: unknown key 'redis-urls' in a [lock] table"),
            "{e}"
        );
        let e = read("key = \"job\"\n").expect_err("not in a file");
        assert!(
            e.contains("'key' cannot be set in a configuration file"),
            "{e}"
        );
    }

    #[test]
    fn wrong_types_and_values_are_refused() {
        let e = read("ttl = true\n").expect_err("type");
        assert_eq!(
            e,
            "/etc/c.toml:1: 'ttl' takes a DURATION (a string), not a boolean"
        );
        let e = read("fence = \"yes\"\n").expect_err("type");
        assert!(
            e.contains("'fence' takes true or false, not a string"),
            "{e}"
        );
        let e = read("\nttl = \"3x\"\n").expect_err("value");
        assert!(e.starts_with("/etc/c.toml:2: 'ttl': "), "{e}");
        assert!(e.contains("'3x' is not a duration"), "{e}");
        let e = read("leftovers = \"stay\"\n").expect_err("value");
        assert!(e.contains("wait, kill"), "{e}");
        let e = read("tls-ca = \"ca.pem\"\n").expect_err("relative");
        assert!(e.contains("give an absolute path"), "{e}");
        let e = read("redis = [1]\n").expect_err("type");
        assert!(e.contains("a list of strings"), "{e}");
        let e = read("ttl = \n").expect_err("syntax");
        assert!(e.starts_with("/etc/c.toml:1: "), "{e}");
    }

    #[test]
    fn every_key_is_a_long_option() {
        let cmd = cmd();
        let keys: Vec<&str> = settable(&cmd).filter_map(Arg::get_long).collect();
        for k in [
            "redis",
            "prefix",
            "ttl",
            "node-timeout",
            "tls-ca",
            "log-format",
        ] {
            assert!(keys.contains(&k), "{k}");
        }
        for k in ["key", "command", "config", "help"] {
            assert!(!keys.contains(&k), "{k}");
        }
    }

    #[test]
    fn passwords_are_found() {
        let l = read("redis = [\"redis://:pw@a:1\"]\n").expect("valid");
        assert_eq!(l.secret_line(), Some(1));
        let l = read("redis = [\"redis://a:1\"]\n").expect("valid");
        assert_eq!(l.secret_line(), None);
    }

    #[test]
    fn distances() {
        assert_eq!(distance("ttll", "ttl"), 1);
        assert_eq!(distance("fnece", "fence"), 1);
        assert_eq!(suggest("zzz", ["ttl", "redis"].into_iter()), None);
    }
}
