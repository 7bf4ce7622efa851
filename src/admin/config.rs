//! `config`: every setting a run of this host takes, and where it comes
//! from (a flag, a variable, the configuration file's FILE:LINE, or the
//! default), passwords hidden. And `as_run`, which `check` shares: a
//! subcommand's node options made into a run's arguments, the file's
//! settings put in, parsed and checked as a run's are.

use std::ffi::OsString;
use std::fmt;

use clap::parser::ValueSource;
use clap::{ArgAction, ArgMatches, Args, FromArgMatches};
use serde::Serialize;

use crate::cli::{self, Cli, ConfigArgs, ProbeArgs, Target};
use crate::config::{self, Applied};
use crate::exit::Exit;
use crate::lock::node::redact;

/// A run as the subcommand's options and the configuration file make it.
pub(super) struct AsRun {
    pub config: cli::Config,
    pub matches: ArgMatches,
    pub applied: Applied,
    /// --key (or REDLOCK_KEY) was given; else the name is `fallback`'s.
    pub keyed: bool,
}

/// Why the arguments make no run.
pub(super) enum Unfit {
    File(config::Error),
    Clap(String),
    Run(cli::Unusable),
}

impl fmt::Display for Unfit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Unfit::File(e) => e.fmt(f),
            Unfit::Clap(msg) => f.write_str(msg),
            Unfit::Run(e) => e.fmt(f),
        }
    }
}

impl Unfit {
    /// How the subcommand ends over it, its line said.
    pub(super) fn exit(&self) -> Exit {
        match self {
            Unfit::Run(cli::Unusable::Signal(sig)) => crate::error::Error::signal(*sig),
            other => crate::error::Error::usage(other),
        }
        .said()
    }
}

/// The run that the subcommand in `given` (the program's arguments) stands
/// for: its node options, `--key` or else `fallback`, the file's settings,
/// and `true` as the command.
pub(super) fn as_run(given: &[OsString], fallback: &str) -> Result<AsRun, Unfit> {
    let clap_error = |e: clap::Error| Unfit::Clap(fold(&e.render().to_string()));
    let m = cli::parser()
        .try_get_matches_from(given)
        .map_err(clap_error)?;
    let Some((_, sub)) = m.subcommand() else {
        return Err(Unfit::Clap("a subcommand is needed".into()));
    };
    let mut args: Vec<OsString> = vec![
        given
            .first()
            .cloned()
            .unwrap_or_else(|| "redlock-run".into()),
    ];
    let target = Target::augment_args(clap::Command::new("target"));
    // check's probe options are a run's too (see `cli::ProbeArgs`).
    let probe = ProbeArgs::augment_args(clap::Command::new("probe"));
    for arg in target.get_arguments().chain(probe.get_arguments()) {
        let id = arg.get_id().as_str();
        // Asked only of the subcommand's own arguments: clap panics (in
        // debug builds) for an id it does not define.
        if !sub.ids().any(|i| i.as_str() == id)
            || sub.value_source(id) != Some(ValueSource::CommandLine)
        {
            continue;
        }
        let Some(long) = arg.get_long() else { continue };
        if matches!(arg.get_action(), ArgAction::SetTrue) {
            args.push(format!("--{long}").into());
            continue;
        }
        for raw in sub.get_raw(id).into_iter().flatten() {
            let mut word = OsString::from(format!("--{long}="));
            word.push(raw);
            args.push(word);
        }
    }
    let keyed = matches!(
        sub.value_source("key"),
        Some(ValueSource::CommandLine | ValueSource::EnvVariable)
    );
    if !keyed {
        args.push(format!("--key={fallback}").into());
    }
    args.extend(["--".into(), "true".into()]);
    let applied = config::apply(args).map_err(Unfit::File)?;
    let matches = cli::parser()
        .try_get_matches_from(&applied.args)
        .map_err(clap_error)?;
    let cli = Cli::from_arg_matches(&matches).map_err(clap_error)?;
    // What the option files may take: the run's node timeout (see
    // `option_file::wait_at_most`).
    crate::option_file::wait_at_most(
        cli.target
            .node_timeout
            .unwrap_or_else(|| crate::lock::redlock::default_node_timeout(cli.ttl)),
    );
    let config = cli.into_config().map_err(Unfit::Run)?;
    Ok(AsRun {
        config,
        matches,
        applied,
        keyed,
    })
}

/// clap's message in one line, without its usage and tips.
fn fold(msg: &str) -> String {
    msg.lines()
        .map(str::trim)
        .take_while(|l| !l.starts_with("Usage:") && !l.starts_with("For more information"))
        .filter(|l| !l.is_empty() && !l.starts_with("tip:"))
        .collect::<Vec<_>>()
        .join(" ")
        .trim_start_matches("error: ")
        .to_string()
}

/// Where a setting's value comes from.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "lowercase", tag = "origin")]
enum Origin {
    Flag,
    Env {
        env: String,
    },
    File {
        file: String,
        line: usize,
        #[serde(skip_serializing_if = "Option::is_none")]
        lock: Option<String>,
    },
    Default,
    /// Read from the file this option names.
    Via {
        option: String,
    },
    /// Not set, and no default stands for it.
    Unset,
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Origin::Flag => f.write_str("flag"),
            Origin::Env { env } => write!(f, "env {env}"),
            Origin::File { file, line, lock } => {
                write!(f, "{file}:{line}")?;
                match lock {
                    Some(name) => write!(f, " [lock.\"{name}\"]"),
                    None => Ok(()),
                }
            }
            Origin::Default => f.write_str("default"),
            Origin::Via { option } => write!(f, "via {option}"),
            Origin::Unset => f.write_str("unset"),
        }
    }
}

/// One line of the answer.
#[derive(Serialize)]
struct Shown {
    name: String,
    value: Option<String>,
    #[serde(flatten)]
    origin: Origin,
    /// The file's value for it, left out for the flag or variable.
    #[serde(skip_serializing_if = "Option::is_none")]
    overrides: Option<String>,
}

#[derive(Serialize)]
struct Doc<'a> {
    file: Option<String>,
    found: Option<&'static str>,
    settings: &'a [Shown],
}

/// The name a run is given when `config` is not: shown as unset.
const UNNAMED: &str = "redlock-run-config";

pub(crate) fn run(args: &ConfigArgs, given: &[OsString]) -> Exit {
    let run = match as_run(given, UNNAMED) {
        Ok(r) => r,
        Err(e) => return e.exit(),
    };
    // What else a run refuses to start over: the files it would write.
    if let Some(msg) = run.config.unwritable() {
        return Unfit::Run(cli::Unusable::Usage(msg)).exit();
    }
    let shown = settings(&run);
    let file = run.applied.file.as_ref();
    if args.json {
        super::print_json(&Doc {
            file: file.map(|(p, _)| p.display().to_string()),
            found: file.map(|(_, f)| f.describe()),
            settings: &shown,
        });
        return Exit::Command(0);
    }
    match file {
        Some((path, found)) => {
            println!(
                "configuration file: {} ({})",
                path.display(),
                found.describe()
            );
        }
        None => println!("configuration file: none"),
    }
    let width = shown
        .iter()
        .map(|s| s.value.as_deref().unwrap_or("-").chars().count())
        .max()
        .unwrap_or(0)
        .min(48);
    for s in &shown {
        let mut origin = s.origin.to_string();
        if let Some(o) = &s.overrides {
            origin.push_str(&format!(" (over {o})"));
        }
        println!(
            "{:<24} {:<width$} {origin}",
            s.name,
            s.value.as_deref().unwrap_or("-")
        );
    }
    Exit::Command(0)
}

/// Every setting of the run, in the order of `--help`.
fn settings(run: &AsRun) -> Vec<Shown> {
    let cmd = cli::command();
    let m = &run.matches;
    let mut out = Vec::new();
    for arg in cmd.get_arguments().filter(|a| !a.is_hide_set()) {
        let (id, Some(long)) = (arg.get_id().as_str(), arg.get_long()) else {
            continue;
        };
        if matches!(
            long,
            "help" | "version" | "command" | "config" | "no-config"
        ) {
            continue;
        }
        let from_file = config::origin_of(&run.applied, long);
        let origin = match (m.value_source(id), from_file) {
            (Some(ValueSource::CommandLine), Some(used)) => Origin::File {
                file: used.path.display().to_string(),
                line: used.setting.line,
                lock: used.setting.lock.clone(),
            },
            (Some(ValueSource::CommandLine), None) if long == "key" && !run.keyed => Origin::Unset,
            (Some(ValueSource::CommandLine), None) => Origin::Flag,
            (Some(ValueSource::EnvVariable), _) => Origin::Env {
                env: arg
                    .get_env()
                    .map(|e| e.to_string_lossy().into_owned())
                    .unwrap_or_default(),
            },
            (Some(ValueSource::DefaultValue), _) => Origin::Default,
            _ => computed(long, &run.config).map_or(Origin::Unset, |_| Origin::Default),
        };
        let value = match origin {
            Origin::Unset => None,
            _ => raw(m, id, arg.get_action()).or_else(|| computed(long, &run.config)),
        };
        let overrides = run
            .applied
            .overridden
            .iter()
            .find(|u| u.setting.name == long)
            .map(|u| config::place(&u.path, u.setting.line));
        out.push(Shown {
            name: long.to_string(),
            value,
            origin,
            overrides,
        });
    }
    out.extend(credentials(&run.config, m));
    out
}

/// A value as given (URLs' passwords masked, and the ping URL's path);
/// None when there is none.
fn raw(m: &ArgMatches, id: &str, action: &ArgAction) -> Option<String> {
    let hide = |v: &str| {
        if id == "ping" {
            crate::notify::mask(v)
        } else {
            redact(v)
        }
    };
    match action {
        ArgAction::SetTrue | ArgAction::SetFalse => {
            m.try_get_one::<bool>(id).ok()?.map(|b| b.to_string())
        }
        ArgAction::Count => m.try_get_one::<u8>(id).ok()?.map(|n| n.to_string()),
        _ => {
            let values: Vec<String> = m
                .try_get_raw(id)
                .ok()??
                .map(|v| hide(&v.to_string_lossy()))
                .collect();
            (!values.is_empty()).then(|| values.join(","))
        }
    }
}

/// The defaults a run works out from other settings.
fn computed(long: &str, c: &cli::Config) -> Option<String> {
    let d = |d: std::time::Duration| humantime::format_duration(d).to_string();
    match long {
        "node-timeout" => Some(d(c.node_timeout)),
        "kill-after" => Some(d(c.kill_after)),
        "redis" if c.defaulted => Some(cli::DEFAULT_NODE.to_string()),
        "retry-delay" if c.retry > 0 => Some(d(c.retry_delay)),
        _ => None,
    }
}

/// Credentials that only variables (or the password files) give.
fn credentials(c: &cli::Config, m: &ArgMatches) -> Vec<Shown> {
    let o = &c.options;
    let rows = [
        ("username", "REDLOCK_USERNAME", o.username.clone(), None),
        (
            "password",
            "REDLOCK_PASSWORD",
            o.password.as_ref().map(|_| "***".to_string()),
            Some("password_file"),
        ),
        (
            "sentinel-username",
            "REDLOCK_SENTINEL_USERNAME",
            o.sentinel_username.clone(),
            None,
        ),
        (
            "sentinel-password",
            "REDLOCK_SENTINEL_PASSWORD",
            o.sentinel_password.as_ref().map(|_| "***".to_string()),
            Some("sentinel_password_file"),
        ),
    ];
    rows.into_iter()
        .map(|(name, env, value, file)| {
            // A password file, when one is named, is what the run reads.
            let via_file = file.is_some_and(|id| m.try_get_raw(id).ok().flatten().is_some());
            let origin = match (&value, via_file) {
                (None, _) => Origin::Unset,
                (Some(_), true) => Origin::Via {
                    option: format!("{name}-file"),
                },
                (Some(_), false) => Origin::Env { env: env.into() },
            };
            Shown {
                name: name.into(),
                value,
                origin,
                overrides: None,
            }
        })
        .collect()
}
