//! The configuration file: the settings every run on a host shares (the
//! nodes, TLS, passwords' files, the prefix, defaults such as `ttl`), so
//! that a fleet's crontab lines read `redlock-run -k job -- ./job.sh`.
//!
//! - `file`: where it is found, and the checks before it is believed (its
//!   owner and mode, as ssh and sudo check theirs);
//! - `parse`: the TOML, each key an option's long name, each value typed
//!   and checked by that option's own parser, each with its line.
//!
//! A file's settings reach clap as options: each one whose option the
//! command line does not give (nor its environment variable) becomes
//! `--name=value` in front of the arguments. So every rule a flag obeys
//! (its parser, conflicts, `into_config`'s checks) holds for the file, and
//! nothing downstream knows where a value came from. Precedence: flag,
//! then environment variable, then the file's `[lock."NAME"]` table for
//! the lock run, then its top level, then the built-in default.

mod file;
mod parse;

use std::ffi::OsString;
use std::fmt;
use std::path::{Path, PathBuf};

use clap::parser::ValueSource;
use clap::{ArgMatches, Command};

pub(crate) use file::Found;
pub(crate) use parse::Setting;

/// Why a configuration file is refused: one line naming the file (and the
/// line and key, where one is at fault), as a usage error (64).
#[derive(Debug)]
pub(crate) enum Error {
    /// It could not be opened or read (a file named by --config or
    /// REDLOCK_CONFIG that is missing, too).
    Read {
        path: PathBuf,
        found: Found,
        error: std::io::Error,
    },
    /// A directory, a FIFO, a device: not a file of settings.
    NotFile { path: PathBuf },
    /// Longer than any file of settings (bytes).
    TooLong { path: PathBuf, cap: usize },
    /// Owned by someone other than root and the user who runs.
    Owner { path: PathBuf, uid: u32 },
    /// A directory on its path is owned by someone other than root and the
    /// user who runs.
    DirOwner {
        path: PathBuf,
        dir: PathBuf,
        uid: u32,
    },
    /// Others than its owner may write it (or replace it: `dir`).
    Writable {
        path: PathBuf,
        mode: u32,
        dir: Option<PathBuf>,
    },
    /// It holds a password (in a URL, at `line`) that others may read.
    Readable {
        path: PathBuf,
        mode: u32,
        line: usize,
    },
    /// Not TOML, or a key, a type or a value the file may not have.
    At {
        path: PathBuf,
        line: usize,
        what: String,
    },
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Read { path, found, error } => write!(
                f,
                "cannot read the configuration file {} ({}): {} (--no-config reads none)",
                path.display(),
                found.describe(),
                crate::text::os_message(error)
            ),
            Error::NotFile { path } => write!(
                f,
                "configuration file {}: not a regular file",
                path.display()
            ),
            Error::TooLong { path, cap } => write!(
                f,
                "configuration file {} is longer than {} KiB: is it the right file?",
                path.display(),
                cap >> 10
            ),
            Error::Owner { path, uid } => write!(
                f,
                "configuration file {} is owned by uid {uid}, neither root nor the user who runs \
                 redlock-run: refused, as it could point every run at someone else's Redis",
                path.display()
            ),
            Error::Writable {
                path,
                mode,
                dir: None,
            } => write!(
                f,
                "configuration file {} (mode {mode:04o}) may be written by others than its \
                 owner: refused, as it could point every run at someone else's Redis; chmod \
                 go-w {}",
                path.display(),
                path.display()
            ),
            Error::Writable {
                path,
                mode,
                dir: Some(dir),
            } => write!(
                f,
                "configuration file {}: the directory {} on its path (mode {mode:04o}) lets \
                 others than its owner replace what it holds: refused, as it could point every \
                 run at someone else's Redis; chmod go-w {} (or chmod +t {})",
                path.display(),
                dir.display(),
                dir.display(),
                dir.display()
            ),
            Error::DirOwner { path, dir, uid } => write!(
                f,
                "configuration file {}: the directory {} on its path is owned by uid {uid}, \
                 neither root nor the user who runs redlock-run: refused, as its owner could \
                 replace what it holds; chown root {} (or move the file)",
                path.display(),
                dir.display(),
                dir.display()
            ),
            Error::Readable { path, mode, line } => write!(
                f,
                "{}:{line}: a URL with a password, in a file others may read (mode \
                 {mode:04o}): chmod o-r {} (its owner and group may read it), or move the \
                 password to password-file",
                path.display(),
                path.display()
            ),
            Error::At { path, line, what } => write!(f, "{}:{line}: {what}", path.display()),
        }
    }
}

/// A setting taken from the file for this run.
#[derive(Clone, Debug)]
pub(crate) struct Used {
    pub setting: Setting,
    /// Where it was read: the file and the line.
    pub path: PathBuf,
}

/// The arguments with the file's settings in them, and what came from
/// where.
#[derive(Debug, Default)]
pub(crate) struct Applied {
    pub args: Vec<OsString>,
    /// The file read, and how it was found; None when none was.
    pub file: Option<(PathBuf, Found)>,
    /// The file's settings put in the arguments.
    pub used: Vec<Used>,
    /// The file's settings left out: their option was given (or conflicts
    /// with one given), or the lock's table sets it.
    pub overridden: Vec<Used>,
}

/// `args` (the program's, `args[0]` its name) with the settings of the
/// configuration file put in, for the options they do not give; `args`
/// unchanged when no file is found or `--no-config` is given.
pub(crate) fn apply(args: Vec<OsString>) -> Result<Applied, Error> {
    // Only a word that may be --config or --no-config costs a parse here:
    // a run without them finds the file by the environment alone, and a
    // run without a file builds no command for it.
    let asks = options_part(&args).any(|w| w == "--no-config" || w.starts_with("--config"));
    let mut cmd = None;
    let mut matches = asks.then(|| lenient(&mut cmd, &args)).flatten();
    let (flag, none) = matches.as_ref().map(chosen).unwrap_or_default();
    if none {
        return Ok(unchanged(args));
    }
    let Some((path, found)) = file::locate(flag.as_deref()) else {
        return Ok(unchanged(args));
    };
    let text = file::read(&path, found)?;
    if parse::sets_nothing(&text) {
        return Ok(Applied {
            file: Some((path, found)),
            ..unchanged(args)
        });
    }
    if matches.is_none() {
        matches = lenient(&mut cmd, &args);
    }
    // The command the arguments were read with is the run's: the file's
    // keys are read against it too (a command built is a good part of a
    // run's start-up).
    let keys = cmd.get_or_insert_with(command_for_keys);
    let loaded = parse::parse(&text, &path, keys)?;
    file::check_secrets(&path, &loaded)?;
    // Arguments clap cannot make sense of: nothing is put in, and the
    // parse that follows says what is wrong with them.
    let (Some(m), Some(cmd)) = (matches, cmd) else {
        return Ok(Applied {
            file: Some((path, found)),
            ..unchanged(args)
        });
    };
    Ok(put_in(args, &cmd, &m, loaded, path, found))
}

fn unchanged(args: Vec<OsString>) -> Applied {
    Applied {
        args,
        ..Applied::default()
    }
}

/// The words before `--` (where options may be), as text.
fn options_part(args: &[OsString]) -> impl Iterator<Item = &str> {
    args.iter()
        .skip(1)
        .take_while(|a| *a != "--")
        .filter_map(|a| a.to_str())
}

/// The arguments as clap reads them, errors aside (a missing value the
/// file would give, say); None when even that fails (--help). `cmd` is
/// left with the command they were read with, its subcommand built.
fn lenient(cmd: &mut Option<Command>, args: &[OsString]) -> Option<ArgMatches> {
    let mut lax = crate::cli::parser().ignore_errors(true);
    let m = lax.try_get_matches_from_mut(args);
    *cmd = Some(lax.ignore_errors(false));
    m.ok()
}

/// The matches of the command the arguments run: a subcommand's, or the
/// run's own.
fn innermost(m: &ArgMatches) -> (Option<&str>, &ArgMatches) {
    match m.subcommand() {
        Some((name, sub)) => (Some(name), sub),
        None => (None, m),
    }
}

/// --config FILE and --no-config, as given (a subcommand without them,
/// `help`, gives neither).
fn chosen(m: &ArgMatches) -> (Option<PathBuf>, bool) {
    let (_, m) = innermost(m);
    let flag = m.try_get_one::<PathBuf>("config").ok().flatten().cloned();
    let none = m.try_get_one::<bool>("no_config").ok().flatten() == Some(&true);
    (flag, none)
}

/// The command whose options a file may set: the run's.
fn command_for_keys() -> Command {
    let mut cmd = crate::cli::parser();
    cmd.build();
    cmd
}

/// Whether option `id` is given on the command line or by its variable.
fn given(m: &ArgMatches, id: &str) -> bool {
    matches!(
        m.value_source(id),
        Some(ValueSource::CommandLine | ValueSource::EnvVariable)
    )
}

/// Options that have a variable of their own, read outside clap: a file's
/// value does not win over it.
const READ_BY_HAND: [(&str, &str); 2] = [
    ("password-file", "REDLOCK_PASSWORD"),
    ("sentinel-password-file", "REDLOCK_SENTINEL_PASSWORD"),
];

/// The variable that stands for option `long` outside clap, when it is set.
pub(crate) fn by_hand(long: &str) -> Option<&'static str> {
    READ_BY_HAND
        .iter()
        .find(|(l, var)| *l == long && std::env::var_os(var).is_some_and(|v| !v.is_empty()))
        .map(|(_, var)| *var)
}

/// Puts the file's settings into `args` where the command takes them and
/// nothing given (or chosen before) stands in their way.
fn put_in(
    args: Vec<OsString>,
    cmd: &Command,
    m: &ArgMatches,
    loaded: parse::Loaded,
    path: PathBuf,
    found: Found,
) -> Applied {
    let (sub, sm) = innermost(m);
    let target = match sub {
        Some(name) => cmd.find_subcommand(name).unwrap_or(cmd),
        None => cmd,
    };
    let name = sm
        .try_get_one::<String>("key")
        .ok()
        .flatten()
        .cloned()
        .unwrap_or_default();
    let mut taken: Vec<&clap::Arg> = target
        .get_arguments()
        .filter(|a| given(sm, a.get_id().as_str()))
        .collect();
    let mut applied = Applied {
        file: Some((path.clone(), found)),
        ..Applied::default()
    };
    let mut words: Vec<OsString> = Vec::new();
    // The lock's own table first: it wins over the top level.
    for setting in loaded.for_lock(&name) {
        let used = Used {
            setting: setting.clone(),
            path: path.clone(),
        };
        let arg = target
            .get_arguments()
            .find(|a| a.get_long() == Some(setting.name.as_str()));
        let Some(arg) = arg else {
            // Not an option of this subcommand (--ttl for status).
            continue;
        };
        let blocked = by_hand(&setting.name).is_some()
            || taken
                .iter()
                .any(|t| t.get_id() == arg.get_id() || conflict(target, t, arg));
        if blocked {
            applied.overridden.push(used);
            continue;
        }
        words.extend(setting.value.words(&setting.name));
        taken.push(arg);
        applied.used.push(used);
    }
    // After the program's name, or after the subcommand's (which is the
    // first word: a subcommand takes no option before it).
    let at = if sub.is_some() { 2 } else { 1 }.min(args.len());
    let mut args = args;
    args.splice(at..at, words);
    applied.args = args;
    applied
}

/// Whether options `a` and `b` cannot be given together (clap keeps the
/// rule on one side of the pair).
fn conflict(cmd: &Command, a: &clap::Arg, b: &clap::Arg) -> bool {
    let names = |x: &clap::Arg, y: &clap::Arg| {
        cmd.get_arg_conflicts_with(x)
            .iter()
            .any(|c| c.get_id() == y.get_id())
    };
    names(a, b) || names(b, a)
}

/// Where the file's settings for option `long` came from, if they did.
pub(crate) fn origin_of<'a>(applied: &'a Applied, long: &str) -> Option<&'a Used> {
    applied.used.iter().find(|u| u.setting.name == long)
}

/// `path:line` of a setting.
pub(crate) fn place(path: &Path, line: usize) -> String {
    format!("{}:{line}", path.display())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conflicts_are_seen_from_either_side() {
        let cmd = command_for_keys();
        let arg = |long: &str| {
            cmd.get_arguments()
                .find(|a| a.get_long() == Some(long))
                .expect("an option")
        };
        assert!(conflict(&cmd, arg("shared"), arg("fence")));
        assert!(conflict(&cmd, arg("fence"), arg("shared")));
        assert!(conflict(&cmd, arg("once-per-success"), arg("once-per")));
        assert!(!conflict(&cmd, arg("ttl"), arg("fence")));
    }
}
