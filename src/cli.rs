//! Command-line interface. Doc comments here are the `--help` text, the man
//! page and the shell completions, so they are written for users.

use std::ffi::OsString;
use std::time::Duration;

use clap::{ArgAction, Args, CommandFactory, Parser, Subcommand, ValueHint};

use crate::exit;
use crate::lock::keys::Keys;
use crate::lock::node;
pub(crate) use crate::lock::record::RecordCommand;
use crate::lock::redlock;
use crate::log::Format;
use crate::option_file::{self, PASSWORD_CAP, PEM_CAP, ReadError};
pub use crate::program::Program;

const EXAMPLES: &str = "\
Examples:
  # three nodes (Redlock), set once for every run
  export REDLOCK_REDIS=redis://lock1,redis://lock2,redis://lock3

  # or once per host in /etc/redlock-run/config.toml (redis = [...], tls-ca = ...), then
  # judge the nodes: persistence, eviction, replicas, clocks, the ACL
  redlock-run check

  # crontab on every host: one host runs the report, the others stay silent; --once-per
  # because cron on two hosts fires a second apart, and a short job could run on both
  */5 * * * * redlock-run -q -E 0 -k report --once-per 5m -- ./report.sh

  # a shell command under a 2-minute TTL, renewed while it runs
  redlock-run -k backup -t 2m -c 'pg_dump app | gzip > /backup/app.gz'

  # queue behind the current holder for up to 10 minutes (deploys from CI)
  redlock-run -k deploy --wait 10m -- make deploy

  # short jobs fired on hosts with skewed clocks: run once, not once per host
  redlock-run -q -E 0 -k rotate --hold 30s -- ./rotate-logs
  redlock-run -q -E 0 -k digest --once-per 1h -- ./send-digest

  # fired every 10 minutes: runs until one host has succeeded this hour, each
  # firing trying up to 3 times under the lock
  */10 * * * * redlock-run -q -E 0 -k digest --once-per-success 1h --retry 2 -- ./send-digest

  # metrics for node_exporter's textfile collector; a health-check ping only the winner sends
  redlock-run -k backup --metrics-file /var/lib/prometheus/node-exporter/cron.prom -- ./backup.sh
  redlock-run -k backup --ping https://hc-ping.com/UUID -- ./backup.sh

  # mail somebody when it fails (or no quorum answered), once the lock is released
  redlock-run -k backup --on-failure 'echo \"$REDLOCK_OUTCOME\" | mail -s backup ops' -- ./backup.sh

  # which host ran it, when, and how it ended
  redlock-run history -k backup -n 5";

/// The pause before the first --retry when --retry-delay does not say.
pub(crate) const DEFAULT_RETRY_DELAY: Duration = Duration::from_secs(1);

/// The node used when neither --redis nor REDLOCK_REDIS names one.
pub(crate) const DEFAULT_NODE: &str = "redis://127.0.0.1:6379";

/// Which lock, on which nodes: shared by running a command and every subcommand.
#[derive(Debug, Args)]
pub(crate) struct Target {
    /// Name of the lock; the Redis key is <PREFIX><NAME>, printable ASCII without '{' or '}'
    /// (they name the lock's helper keys, {<PREFIX><NAME>}:fence and the like)
    #[arg(
        short,
        long,
        required = true,
        value_name = "NAME",
        env = "REDLOCK_KEY",
        hide_env_values = true
    )]
    pub(crate) key: Option<String>,

    /// Prefix put before the lock name to form the Redis key
    #[arg(
        long,
        value_name = "PREFIX",
        env = "REDLOCK_PREFIX",
        hide_env_values = true,
        default_value = "lock:"
    )]
    pub(crate) prefix: String,

    /// Redis node URL: redis://, rediss://, unix://, redis+cluster://HOST:PORT,HOST:PORT...
    /// (a whole Cluster) or redis+sentinel://HOST:PORT,.../MASTER (a Sentinel group's
    /// primary); repeat it or separate with commas for a Redlock quorum of N nodes
    /// [default: redis://127.0.0.1:6379]
    #[arg(
        short,
        long = "redis",
        value_name = "URL",
        env = "REDLOCK_REDIS",
        hide_env_values = true,
        value_hint = ValueHint::Url
    )]
    pub(crate) redis: Vec<String>,

    /// Bound on connecting, reading and writing to one node [default: TTL/20 within 50ms..1s; 1s for status, unlock, history and forget]
    #[arg(long, value_name = "DURATION", value_parser = parse_short)]
    pub(crate) node_timeout: Option<Duration>,

    /// Read the password for nodes whose URL has none from FILE (or set REDLOCK_PASSWORD;
    /// REDLOCK_USERNAME names an ACL user)
    #[arg(long, value_name = "FILE", value_hint = ValueHint::FilePath)]
    pub(crate) password_file: Option<std::path::PathBuf>,

    /// Read the password of the sentinels of redis+sentinel:// nodes from FILE (or set
    /// REDLOCK_SENTINEL_PASSWORD; REDLOCK_SENTINEL_USERNAME names an ACL user); without it
    /// sentinels are sent no password
    #[arg(long, value_name = "FILE", value_hint = ValueHint::FilePath)]
    pub(crate) sentinel_password_file: Option<std::path::PathBuf>,

    /// Trust this CA (PEM) for rediss:// nodes instead of the system roots
    #[arg(long, value_name = "FILE", value_hint = ValueHint::FilePath)]
    pub(crate) tls_ca: Option<std::path::PathBuf>,

    /// Client certificate (PEM) for rediss:// nodes that require one; needs --tls-key
    #[arg(long, value_name = "FILE", requires = "tls_key", value_hint = ValueHint::FilePath)]
    pub(crate) tls_cert: Option<std::path::PathBuf>,

    /// Private key (PEM) of --tls-cert
    #[arg(long, value_name = "FILE", requires = "tls_cert", value_hint = ValueHint::FilePath)]
    pub(crate) tls_key: Option<std::path::PathBuf>,

    /// Do not check rediss:// certificates or host names (warns on every run)
    #[arg(long)]
    pub(crate) tls_insecure: bool,

    /// Read settings from FILE (TOML, keys named as these options) instead of the first found
    /// of $REDLOCK_CONFIG, ~/.config/redlock-run/config.toml, /etc/redlock-run/config.toml;
    /// flags and their variables win over it
    #[arg(long, value_name = "FILE", value_hint = ValueHint::FilePath)]
    pub(crate) config: Option<std::path::PathBuf>,

    /// Read no configuration file
    #[arg(long, conflicts_with = "config")]
    pub(crate) no_config: bool,
}

/// Why a command line makes no run.
#[derive(Debug)]
pub enum Unusable {
    /// A usage error (64), worded in one line.
    Usage(String),
    /// This forwarded signal arrived while an option's file was waited on (a
    /// FIFO with no writer yet): the run stops as a signal stops it.
    Signal(i32),
}

/// Said and ended on as the crate's errors are.
impl From<Unusable> for crate::error::Error {
    fn from(e: Unusable) -> crate::error::Error {
        match e {
            Unusable::Usage(msg) => crate::error::Error::usage(msg),
            // Told to stop while an option's file was waited on: nothing is
            // held, so it stops at once, as a signal ends a wait for the lock.
            Unusable::Signal(sig) => crate::error::Error::signal(sig),
        }
    }
}

impl From<String> for Unusable {
    fn from(msg: String) -> Unusable {
        Unusable::Usage(msg)
    }
}

impl From<crate::lock::keys::BadName> for Unusable {
    fn from(e: crate::lock::keys::BadName) -> Unusable {
        Unusable::Usage(e.to_string())
    }
}

impl From<&str> for Unusable {
    fn from(msg: &str) -> Unusable {
        Unusable::Usage(msg.to_string())
    }
}

impl std::fmt::Display for Unusable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Unusable::Usage(msg) => f.write_str(msg),
            Unusable::Signal(sig) => write!(f, "stopped by signal {sig}"),
        }
    }
}

/// The file `flag` names, read with `cap` (see `option_file`); its errors
/// worded, naming the file.
fn read_option_file(flag: &str, path: &std::path::Path, cap: usize) -> Result<Vec<u8>, Unusable> {
    option_file_error(flag, path, option_file::read(path, cap))
}

/// `read`'s result worded for `flag`.
fn option_file_error(
    flag: &str,
    path: &std::path::Path,
    read: Result<Vec<u8>, ReadError>,
) -> Result<Vec<u8>, Unusable> {
    let shown = path.display();
    read.map_err(|e| match e {
        ReadError::Io(e) => Unusable::Usage(format!("cannot read {flag} {shown}: {e}")),
        ReadError::TooLong(cap) => Unusable::Usage(format!(
            "{flag} {shown} is longer than {}, more than such a file holds: is it the right \
             file?",
            if cap >= 1 << 20 {
                format!("{} MiB", cap >> 20)
            } else {
                format!("{} KiB", cap >> 10)
            }
        )),
        ReadError::Empty => Unusable::Usage(format!("{flag} {shown} is empty")),
        ReadError::Stopped(sig) => Unusable::Signal(sig),
        ReadError::Readable(mode) => Unusable::Usage(format!(
            "{flag} {shown} may be read by others (mode {mode:04o}): chmod o-r {shown} (its \
             owner and group may read it)"
        )),
    })
}

/// A password from the file `flag` names (its first line, without the line
/// break a file written by `echo` ends in), else from the variable `var`.
fn secret(
    flag: &str,
    path: Option<&std::path::Path>,
    var: &str,
) -> Result<Option<String>, Unusable> {
    let Some(path) = path else {
        return Ok(std::env::var(var).ok().filter(|p| !p.is_empty()));
    };
    let bytes = option_file_error(flag, path, option_file::read_secret(path, PASSWORD_CAP))?;
    let text =
        String::from_utf8(bytes).map_err(|_| format!("{flag} {} is not UTF-8", path.display()))?;
    let password = text.trim_end_matches(['\n', '\r']);
    if password.is_empty() {
        return Err(format!("{flag} {} is empty but for a line break", path.display()).into());
    }
    Ok(Some(password.to_string()))
}

/// A `Target` checked: the lock's name, its Redis keys, the node URLs.
#[derive(Clone, Debug)]
pub(crate) struct Resolved {
    pub name: String,
    pub keys: Keys,
    pub urls: Vec<String>,
    /// No --redis and no REDLOCK_REDIS: the node is `DEFAULT_NODE`.
    pub defaulted: bool,
    /// Credentials and TLS material, loaded; the timeout is set by the caller.
    pub options: node::Options,
}

impl Target {
    pub(crate) fn resolve(&self) -> Result<Resolved, Unusable> {
        let name = self.key.clone().unwrap_or_default();
        let keys = Keys::new(self.prefix.as_bytes(), name.as_bytes())?;
        // Not a clap default: an error about this node must be able to say
        // that nobody chose it.
        let defaulted = self.redis.is_empty();
        let urls: Vec<String> = if defaulted {
            vec![DEFAULT_NODE.to_string()]
        } else {
            split_urls(&self.redis)
        };
        if urls.is_empty() {
            return Err(Unusable::Usage("--redis names no node".into()));
        }
        let read = |flag: &str, path: &std::path::Path| read_option_file(flag, path, PEM_CAP);
        let password = secret(
            "--password-file",
            self.password_file.as_deref(),
            "REDLOCK_PASSWORD",
        )?;
        let sentinel_password = secret(
            "--sentinel-password-file",
            self.sentinel_password_file.as_deref(),
            "REDLOCK_SENTINEL_PASSWORD",
        )?;
        let options = node::Options {
            timeout: Duration::ZERO,
            username: std::env::var("REDLOCK_USERNAME")
                .ok()
                .filter(|u| !u.is_empty()),
            password,
            sentinel_username: std::env::var("REDLOCK_SENTINEL_USERNAME")
                .ok()
                .filter(|u| !u.is_empty()),
            sentinel_password,
            replicas: 0,
            restart_grace: Duration::ZERO,
            durable: false,
            tls_ca: self
                .tls_ca
                .as_deref()
                .map(|p| read("--tls-ca", p))
                .transpose()?,
            tls_client: match (&self.tls_cert, &self.tls_key) {
                (Some(c), Some(k)) => {
                    let cert = read("--tls-cert", c)?;
                    check_client_certificate(c, &cert)?;
                    Some((cert, read("--tls-key", k)?))
                }
                _ => None,
            },
            tls_insecure: self.tls_insecure,
        };
        Ok(Resolved {
            name,
            keys,
            urls,
            defaulted,
            options,
        })
    }
}

/// The node URLs in `args`, each of which may be a comma-separated list. A
/// piece without a scheme continues the URL before it: the seeds of a
/// `redis+cluster://` URL and the sentinels of a `redis+sentinel://` one are
/// themselves separated by commas.
fn split_urls(args: &[String]) -> Vec<String> {
    let mut urls: Vec<String> = Vec::new();
    for arg in args {
        let mut fresh = true;
        for piece in arg.split(',') {
            let piece = piece.trim();
            if piece.is_empty() {
                continue;
            }
            match urls.last_mut() {
                Some(last) if !fresh && !piece.contains("://") => {
                    last.push(',');
                    last.push_str(piece);
                }
                _ => urls.push(piece.to_string()),
            }
            fresh = false;
        }
    }
    urls
}

/// rustls presents only X.509 v3 certificates (webpki refuses v1 with
/// "UnsupportedCertVersion"), and `openssl x509 -req` without extensions
/// makes v1 ones: say so before any node is tried, with the fix.
fn check_client_certificate(path: &std::path::Path, pem: &[u8]) -> Result<(), Unusable> {
    use rustls_pki_types::CertificateDer;
    use rustls_pki_types::pem::PemObject;
    let der = CertificateDer::from_pem_slice(pem).map_err(|e| {
        format!(
            "--tls-cert {}: no PEM certificate in it ({e})",
            path.display()
        )
    })?;
    if crate::x509::version(&der) == Some(1) {
        return Err(format!(
            "--tls-cert {} is an X.509 v1 certificate, which the TLS library cannot present; \
             issue a v3 one, for example: openssl x509 -req ... -extfile <(printf \
             'basicConstraints=CA:FALSE\\nextendedKeyUsage=clientAuth\\n')",
            path.display()
        )
        .into());
    }
    Ok(())
}

/// Looking at and clearing a lock, for when its holder is gone, and what its runs did.
#[derive(Debug)]
pub(crate) enum Admin {
    Status(StatusArgs),
    Unlock(UnlockArgs),
    History(HistoryArgs),
    Forget(ForgetArgs),
    Check(CheckArgs),
    Config(ConfigArgs),
}

impl Admin {
    /// The lock and nodes the subcommand is about, as given.
    pub(crate) fn target(&self) -> &Target {
        match self {
            Admin::Status(a) => &a.target,
            Admin::Unlock(a) => &a.target,
            Admin::History(a) => &a.target,
            Admin::Forget(a) => &a.target,
            Admin::Check(a) => &a.target,
            Admin::Config(a) => &a.target,
        }
    }
}

/// Each subcommand's name and what `--help` says of it. Their options are
/// built only when the subcommand is used (`Command::defer`): each flattens
/// the dozen options of `Target`, and building all four for every run cost
/// more than parsing a run's own options.
const ADMIN: [(&str, &str); 6] = [
    (
        "status",
        "Show the lock on every node (holder, token prefix, TTL left) and a verdict; exit 0 \
         free, 1 held, 69 unknown (fewer than a quorum answered)",
    ),
    (
        "unlock",
        "Delete the lock on every node: only where it holds --token, or whatever holds it with \
         --force; exit 0 removed, 1 another token holds it, 3 no such lock, 69 unknown",
    ),
    (
        "history",
        "Show the lock's last runs, newest first, merged from every node: host, pid, start, \
         duration, outcome, exit status, attempts; exit 0, 69 when fewer than a quorum answered",
    ),
    (
        "forget",
        "Remove every key of a lock no longer used, on every node: fence counter, history, \
         once-per markers, queue, slots, holder records (the lock itself only with --force); \
         exit 0 removed, 1 in use, 3 nothing to remove, 69 unknown",
    ),
    (
        "check",
        "Judge every node against what the lock rests on (a master, independent, persistent, \
         noeviction, its clock, the ACL by a probe under a reserved name, TLS expiry), one line \
         per finding with its advice, and what a run refuses up front (a file it cannot write); \
         exit 0 fit, 1 warnings only, 69 a node unfit or no quorum, 64 settings every run refuses",
    ),
    (
        "config",
        "Print every setting a run takes and where it comes from: a flag, a variable, the \
         configuration file (FILE:LINE) or the default; passwords hidden; exit 0, 64 when a run \
         would refuse them (the file, a value, a file it cannot write)",
    ),
];

impl Subcommand for Admin {
    fn augment_subcommands(cmd: clap::Command) -> clap::Command {
        // Closures that capture nothing: `defer` takes a fn. Each sets its
        // about again, since a flattened `Target` brings one of its own.
        let options: [fn(clap::Command) -> clap::Command; 6] = [
            |c| StatusArgs::augment_args(c).about(ADMIN[0].1),
            |c| UnlockArgs::augment_args(c).about(ADMIN[1].1),
            |c| HistoryArgs::augment_args(c).about(ADMIN[2].1),
            |c| ForgetArgs::augment_args(c).about(ADMIN[3].1),
            // Without --key: check probes a name of its own, config shows
            // what any run of the host takes.
            |c| {
                CheckArgs::augment_args(c)
                    .about(ADMIN[4].1)
                    .mut_arg("key", |a| a.required(false))
            },
            |c| {
                ConfigArgs::augment_args(c)
                    .about(ADMIN[5].1)
                    .mut_arg("key", |a| a.required(false))
            },
        ];
        ADMIN
            .iter()
            .zip(options)
            .fold(cmd, |cmd, ((name, about), options)| {
                cmd.subcommand(clap::Command::new(*name).about(*about).defer(options))
            })
    }

    fn augment_subcommands_for_update(cmd: clap::Command) -> clap::Command {
        Self::augment_subcommands(cmd)
    }

    fn has_subcommand(name: &str) -> bool {
        ADMIN.iter().any(|(n, _)| *n == name)
    }
}

impl clap::FromArgMatches for Admin {
    fn from_arg_matches(m: &clap::ArgMatches) -> Result<Self, clap::Error> {
        use clap::error::{Error, ErrorKind};
        match m.subcommand() {
            Some(("status", m)) => Ok(Admin::Status(StatusArgs::from_arg_matches(m)?)),
            Some(("unlock", m)) => Ok(Admin::Unlock(UnlockArgs::from_arg_matches(m)?)),
            Some(("history", m)) => Ok(Admin::History(HistoryArgs::from_arg_matches(m)?)),
            Some(("forget", m)) => Ok(Admin::Forget(ForgetArgs::from_arg_matches(m)?)),
            Some(("check", m)) => Ok(Admin::Check(CheckArgs::from_arg_matches(m)?)),
            Some(("config", m)) => Ok(Admin::Config(ConfigArgs::from_arg_matches(m)?)),
            Some((other, _)) => Err(Error::raw(
                ErrorKind::InvalidSubcommand,
                format!("no subcommand '{other}'"),
            )),
            None => Err(Error::raw(
                ErrorKind::MissingSubcommand,
                "a subcommand is needed",
            )),
        }
    }

    fn update_from_arg_matches(&mut self, m: &clap::ArgMatches) -> Result<(), clap::Error> {
        *self = Self::from_arg_matches(m)?;
        Ok(())
    }
}

#[derive(Debug, Args)]
#[command(after_help = exit::FORGET_TABLE)]
pub(crate) struct ForgetArgs {
    #[command(flatten)]
    pub target: Target,

    /// Remove the keys even while the lock is held or waiters are queued, the lock's own key
    /// too, after printing who held it (a holder still running stops its command at its next
    /// heartbeat)
    #[arg(long)]
    pub force: bool,
}

#[derive(Debug, Args)]
#[command(after_help = exit::HISTORY_TABLE)]
pub(crate) struct HistoryArgs {
    #[command(flatten)]
    pub target: Target,

    /// Print one JSON array of runs instead of a table
    #[arg(long)]
    pub json: bool,

    /// Show the COUNT most recent runs
    #[arg(short = 'n', long = "count", value_name = "COUNT", default_value_t = 20,
          value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub count: u32,
}

#[derive(Debug, Args)]
#[command(after_help = exit::STATUS_TABLE)]
pub(crate) struct StatusArgs {
    #[command(flatten)]
    pub target: Target,

    /// Print one JSON object instead of text
    #[arg(long)]
    pub json: bool,

    /// Show the N slots of a lock taken with --limit N (found by itself when a holder recorded
    /// N); exit 0 while a slot is free
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub limit: Option<u32>,

    /// Also list, node by node, every key of the lock that exists there (name, type, time
    /// left), found as forget finds them
    #[arg(long)]
    pub keys: bool,
}

#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("which").required(true).args(["token", "force"])), after_help = exit::UNLOCK_TABLE)]
pub(crate) struct UnlockArgs {
    #[command(flatten)]
    pub target: Target,

    /// Delete only where the lock holds this token (the REDLOCK_TOKEN of a holder that is
    /// gone), or a token starting with it (at least the 8 characters status shows)
    #[arg(long, value_name = "TOKEN", conflicts_with = "force")]
    pub token: Option<String>,

    /// Delete whatever holds the lock, after printing who held it
    #[arg(long)]
    pub force: bool,
}

#[derive(Debug, Args)]
#[command(after_help = exit::CHECK_TABLE)]
pub(crate) struct CheckArgs {
    #[command(flatten)]
    pub target: Target,

    #[command(flatten)]
    pub probe: ProbeArgs,

    /// Print one JSON object instead of text
    #[arg(long)]
    pub json: bool,
}

/// The run's options `check`'s probe takes its lock with (as a run of the
/// host would, the configuration file's too), so that it meets what the
/// ACL refuses of each: named as the run's, and passed on to it.
#[derive(Debug, Args)]
pub(crate) struct ProbeArgs {
    /// Probe as a run with --fence: the fence counter's commands too
    #[arg(long, conflicts_with = "limit")]
    pub fence: bool,

    /// Probe as a waiter with this --wait: the queue's commands and SUBSCRIBE too (nothing is
    /// waited for)
    #[arg(short, long, value_name = "DURATION|forever", value_parser = parse_wait)]
    pub wait: Option<Wait>,

    /// Probe as a --shared reader
    #[arg(short, long, conflicts_with_all = ["limit", "fence"])]
    pub shared: bool,

    /// Probe as a holder of one of N slots (--limit N)
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub limit: Option<u32>,
}

#[derive(Debug, Args)]
#[command(after_help = exit::CONFIG_TABLE)]
pub(crate) struct ConfigArgs {
    #[command(flatten)]
    pub target: Target,

    /// Print one JSON object instead of text
    #[arg(long)]
    pub json: bool,
}

/// Run a command while holding a lock on one Redis node or a Redlock quorum.
///
/// redlock-run takes the lock named by --key on every node given with --redis
/// (SET NX PX with a random token), runs the command only when a majority
/// granted it in time, extends the lock every TTL/3 while the command runs,
/// and deletes it (compare-and-delete) once the command and every process it
/// started have exited, whatever process group or session they moved to. If
/// the lock cannot be kept, that whole process tree gets SIGTERM, then SIGKILL
/// before the lock can expire, and redlock-run exits 76. If redlock-run itself
/// is killed, its guard process kills the tree.
///
/// Signals INT, TERM, HUP, QUIT, USR1 and USR2 are passed on to every process
/// of the tree. A second INT or TERM (Ctrl-C again) sends SIGTERM to every
/// process of the tree, those that ignore the first too (a shell's background
/// jobs ignore SIGINT); a third sends SIGKILL. The command sees REDLOCK_KEY and
/// REDLOCK_TOKEN in its environment.
#[derive(Debug, Parser)]
#[command(
    name = "redlock-run",
    version,
    max_term_width = 100,
    args_conflicts_with_subcommands = true,
    subcommand_negates_reqs = true,
    subcommand_value_name = "status|unlock|history|forget|check|config",
    subcommand_help_heading = "Looking at a lock"
)]
pub struct Cli {
    #[command(flatten)]
    pub(crate) target: Target,

    /// Lock time-to-live, renewed every TTL/3 while the command runs (500ms, 30s, 2m)
    #[arg(short, long, value_name = "DURATION", default_value = "30s", value_parser = parse_short)]
    pub(crate) ttl: Duration,

    /// Grace between SIGTERM and SIGKILL when the command must stop [default: TTL/3, at most 10s]
    #[arg(long, value_name = "DURATION", value_parser = parse_short)]
    pub(crate) kill_after: Option<Duration>,

    /// Keep trying this long (or `forever`) while the lock is held elsewhere; waiters queue and
    /// are served in arrival order (as the Redis nodes' clocks see it), each woken by the
    /// release before its turn
    #[arg(short, long, value_name = "DURATION|forever", default_value = "0", value_parser = parse_wait)]
    pub(crate) wait: Wait,

    /// Do not queue: race every other contender for the lock whenever it is released (woken
    /// together), and take it even when waiters are queued
    #[arg(long)]
    pub(crate) wait_unfair: bool,

    /// Take the lock as a reader: readers run together; a run without --shared (a writer)
    /// runs alone, with no reader and no other writer (flock -s, across hosts). A waiting
    /// writer is not overtaken by readers that come after it. Not with --limit or --fence
    #[arg(short, long, conflicts_with_all = ["limit", "fence"])]
    pub(crate) shared: bool,

    /// Keep the lock at least this long after taking it, even if the command ends sooner
    #[arg(long, value_name = "DURATION", value_parser = parse_long)]
    pub(crate) hold: Option<Duration>,

    /// Start at most once per aligned window of whole seconds (e.g. 1h), across all hosts
    #[arg(long, value_name = "DURATION", value_parser = parse_long)]
    pub(crate) once_per: Option<Duration>,

    /// Like --once-per, but only a run whose command exits 0 uses up the window: a failed,
    /// lost, timed-out or killed run frees it for the next firing on any host
    #[arg(long, value_name = "DURATION", value_parser = parse_long, conflicts_with = "once_per")]
    pub(crate) once_per_success: Option<Duration>,

    /// Run the command again, up to N more times, while it exits non-zero, keeping the lock in
    /// between; not after a lost lock, --max-runtime or a signal. The exit status is the last
    /// attempt's
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(0..=100))]
    pub(crate) retry: Option<u32>,

    /// Pause before the first retry, doubled for each later one, with jitter (each pause is
    /// a random time between half and all of it) [default: 1s]
    #[arg(long, value_name = "DURATION", value_parser = parse_short, requires = "retry")]
    pub(crate) retry_delay: Option<Duration>,

    /// Stop the command (its whole tree) after it ran this long: SIGTERM, then SIGKILL after
    /// --kill-after; exit 124 (what timeout(1) does; systemd's RuntimeMaxSec)
    #[arg(long, value_name = "DURATION", value_parser = parse_long)]
    pub(crate) max_runtime: Option<Duration>,

    /// Not an option: in flock(1) and consul lock a timeout waits for the lock, in timeout(1)
    /// it stops the command; say which with --wait or --max-runtime
    #[arg(long, value_name = "DURATION", hide = true)]
    pub(crate) timeout: Option<String>,

    /// When the command exits but processes it started still run: keep the lock until the
    /// last one has exited (wait), or stop them all (kill: SIGTERM, then SIGKILL after
    /// --kill-after) and then release
    #[arg(long, value_name = "WHAT", value_enum, default_value_t = Leftovers::Wait)]
    pub(crate) leftovers: Leftovers,

    /// Sleep a random time in [0, DURATION) before the first attempt
    #[arg(long, value_name = "DURATION", value_parser = parse_short)]
    pub(crate) jitter: Option<Duration>,

    /// Give the command REDLOCK_FENCING_TOKEN, a number greater than every earlier holder's
    #[arg(long, conflicts_with = "limit")]
    pub(crate) fence: bool,

    /// Count a node's write (the lock, each extension, the fencing token) only once N of its
    /// replicas acknowledged it (WAIT N within --node-timeout), so that a failover to one of
    /// them keeps the lock
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(0..=100), default_value_t = 0, hide_default_value = true)]
    pub(crate) replicas: u32,

    /// A node up for less than this gives no vote: restarted, it may have forgotten a lock that
    /// is still held (Redlock's delayed restart). Not for a node that writes every change to
    /// disk first (appendonly yes, appendfsync always); 0 trusts every node. Keep it at least
    /// the longest --ttl any run of the lock uses [default: the TTL]
    #[arg(long, value_name = "DURATION", env = "REDLOCK_RESTART_GRACE", hide_env_values = true, value_parser = parse_grace)]
    pub(crate) restart_grace: Option<Duration>,

    /// Count a node's vote (the lock, each extension) only once the node has it on disk:
    /// WAITAOF where the server has it (Redis 7.2, Valkey), else appendfsync always; a node
    /// that can prove neither gives no vote
    #[arg(long, env = "REDLOCK_DURABLE", value_parser = clap::builder::BoolishValueParser::new(), hide_env_values = true)]
    pub(crate) durable: bool,

    /// Let up to N holders run at once (a semaphore of N slots); the command gets REDLOCK_SLOT.
    /// Plain runs of the name are kept out while a slot is held, and a run that asks for
    /// another N than the holders is refused (64)
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub(crate) limit: Option<u32>,

    /// Exit status when the lock is held elsewhere
    #[arg(short = 'E', long, value_name = "N", default_value_t = exit::BUSY_DEFAULT)]
    pub(crate) busy_exit_code: u8,

    /// Run STRING with /bin/sh -c instead of a command given after --
    #[arg(short, long = "command", value_name = "STRING", conflicts_with = "args", value_hint = ValueHint::CommandString)]
    pub(crate) command: Option<String>,

    /// Print nothing when the lock is busy (cron mails any output)
    #[arg(short, long, conflicts_with = "verbose")]
    pub(crate) quiet: bool,

    /// Say more on stderr: -v each attempt node by node, heartbeats, decisions and waits; -vv
    /// releases, backoff and each signal sent to the command (and when, against the lock's
    /// deadline) too
    #[arg(short, long, action = ArgAction::Count)]
    pub(crate) verbose: u8,

    /// Log lines on stderr as text, or as one JSON object per line
    #[arg(long, value_name = "FORMAT", value_enum, default_value_t = Format::Text)]
    pub(crate) log_format: Format,

    /// What the holder record (shown by status on every host, readable by anyone who can read
    /// the nodes) keeps of the command: name (the program's name only: `report.sh`, or
    /// `/bin/sh -c pg_dump …` for -c) or masked (the command line with what looks like a
    /// credential masked, cut to 200 characters)
    #[arg(long, value_name = "WHAT", value_enum, default_value_t = RecordCommand::Name)]
    pub(crate) record_command: RecordCommand,

    /// Write a JSON summary of the run to FILE when it ends (busy, lost and timed-out runs too)
    #[arg(long, value_name = "FILE", value_hint = ValueHint::FilePath)]
    pub(crate) report: Option<std::path::PathBuf>,

    /// Record the run in FILE, a node_exporter textfile-collector file shared by every run and
    /// key on the host: runs by outcome, how many nodes answered and failed, and the last run's
    /// start, duration, exit status and success time
    #[arg(long, value_name = "FILE", value_hint = ValueHint::FilePath)]
    pub(crate) metrics_file: Option<std::path::PathBuf>,

    /// Ping URL (the healthchecks.io protocol) for the run that takes the lock: URL/start when
    /// the command starts, URL/0 or URL/<status> when the run ends (a POST with a summary),
    /// URL/fail when fewer than a quorum answered; a run that finds the lock busy sends
    /// nothing. Its path is a secret: logs show URL/***
    #[arg(
        long,
        value_name = "URL",
        env = "REDLOCK_PING",
        hide_env_values = true,
        // Not `Url`: that completes the node URLs' schemes.
        value_hint = ValueHint::Other
    )]
    pub(crate) ping: Option<String>,

    /// With --ping: a run that finds the lock busy (or its --once-per window used) sends URL/log
    /// saying who holds it
    #[arg(long)]
    pub(crate) ping_busy: bool,

    /// The time each ping may take, its tries included, and --on-failure too; never spent while
    /// the lock is held
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = parse_short)]
    pub(crate) ping_timeout: Duration,

    /// Run CMD with /bin/sh -c after a run that took the lock and failed, or that could not
    /// take it (69), once the lock is released; it gets REDLOCK_KEY, REDLOCK_OUTCOME,
    /// REDLOCK_EXIT_STATUS and REDLOCK_RUN_ID, and is killed after --ping-timeout
    #[arg(long, value_name = "CMD", value_hint = ValueHint::CommandString)]
    pub(crate) on_failure: Option<String>,

    #[command(subcommand)]
    pub(crate) admin: Option<Admin>,

    /// The command to run and its arguments
    #[arg(
        value_name = "COMMAND",
        trailing_var_arg = true,
        value_hint = ValueHint::CommandWithArguments
    )]
    pub(crate) args: Vec<OsString>,
}

/// The full clap command, with the examples and exit-status table attached,
/// every subcommand's options built: what the man page and the completions
/// are generated from.
pub fn command() -> clap::Command {
    ADMIN.iter().fold(parser(), |cmd, (name, _)| {
        cmd.mut_subcommand(*name, |mut sub| {
            sub.build();
            sub
        })
    })
}

/// `command` as a run parses with: a subcommand's options are built only
/// when it is the one given (see `ADMIN`).
pub(crate) fn parser() -> clap::Command {
    Cli::command().after_help(format!("{EXAMPLES}\n\n{}", exit::TABLE))
}

/// The subcommand `word` was likely meant to be, when it is a near miss of
/// one ("statsu" for "status"): within two edits, and not a subcommand
/// itself.
pub(crate) fn near_subcommand(word: &str) -> Option<&'static str> {
    ADMIN
        .iter()
        .map(|(name, _)| *name)
        .filter(|name| *name != word)
        .find(|name| strsim::damerau_levenshtein(name, word) <= 2.min(name.len() / 2))
}

/// Whether `word` names a subcommand (`help` too).
pub(crate) fn is_subcommand(word: &str) -> bool {
    word == "help" || <Admin as Subcommand>::has_subcommand(word)
}

/// False when the arguments ask for help, the version or a subcommand
/// (a word that may be the value of an option counts too): redlock-run then
/// runs nothing, and needs no guard forked at the start. A run taken for one
/// of these forks its guard later; the reverse costs a fork that exits.
pub(crate) fn may_run_a_command(args: &[OsString]) -> bool {
    !options_part(args).any(|w| asks_help_or_version(w) || <Admin as Subcommand>::has_subcommand(w))
}

/// Whether a word before `--` may ask for help or the version (it may also
/// be an option's value): such a command line is parsed as given first, so
/// that `--help` and `--version` read no configuration file.
pub(crate) fn may_ask_help_or_version(args: &[OsString]) -> bool {
    options_part(args).any(asks_help_or_version)
}

fn asks_help_or_version(word: &str) -> bool {
    matches!(word, "-h" | "--help" | "-V" | "--version" | "help")
}

/// The words before `--`, where options and subcommands may be.
fn options_part(args: &[OsString]) -> impl Iterator<Item = &str> {
    args.iter()
        .skip(1)
        .take_while(|a| *a != "--")
        .filter_map(|a| a.to_str())
}

/// Options given before a subcommand (`redlock-run -r URL status -k x`):
/// clap would take the subcommand's name for the command to run, or find
/// `--key` missing. The line that says so, with the options carried over to
/// where they belong; None when the arguments do not look like that.
/// Words after `--` are never looked at: `redlock-run -k x -- status` runs
/// a program named `status`, as `--` ends options for flock(1) and env(1).
pub(crate) fn misplaced_subcommand(args: &[OsString]) -> Option<String> {
    let words: Vec<String> = args
        .iter()
        .skip(1)
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    // The usual run names no subcommand: it costs no clap command built.
    if !words
        .iter()
        .skip(1)
        .take_while(|w| *w != "--")
        .any(|w| <Admin as Subcommand>::has_subcommand(w))
    {
        return None;
    }
    let mut cmd = command();
    cmd.build();
    // The options before the first word that is not one, each with its value.
    let mut given: Vec<(Option<clap::Id>, Vec<String>)> = Vec::new();
    let mut i = 0;
    let sub = loop {
        let word = words.get(i)?;
        if word == "--" {
            return None;
        }
        let (arg, takes) = if let Some(long) = word.strip_prefix("--") {
            let (name, inline) = match long.split_once('=') {
                Some((n, _)) => (n, true),
                None => (long, false),
            };
            let arg = cmd.get_arguments().find(|a| a.get_long() == Some(name));
            let takes = arg.is_some_and(|a| a.get_action().takes_values()) && !inline;
            (arg, takes)
        } else if let Some(shorts) = word.strip_prefix('-').filter(|s| !s.is_empty()) {
            // A cluster of short flags; the first that takes a value takes
            // the rest of the word, or the next word.
            let mut found = None;
            let mut takes = false;
            for (at, c) in shorts.char_indices() {
                let arg = cmd.get_arguments().find(|a| a.get_short() == Some(c));
                found = found.or(arg);
                if arg.is_some_and(|a| a.get_action().takes_values()) {
                    takes = at + c.len_utf8() == shorts.len();
                    break;
                }
            }
            (found, takes)
        } else {
            let sub = cmd.find_subcommand(word.as_str())?;
            if i == 0 || sub.get_name() == "help" {
                return None;
            }
            break sub;
        };
        let mut unit = vec![word.clone()];
        if takes {
            unit.extend(words.get(i + 1).cloned());
            i += 1;
        }
        given.push((arg.map(|a| a.get_id().clone()), unit));
        i += 1;
    };
    let name = sub.get_name();
    let fits = |id: &Option<clap::Id>| {
        id.as_ref()
            .is_some_and(|id| sub.get_arguments().any(|a| a.get_id() == id))
    };
    let mut line = vec!["redlock-run".to_string(), name.to_string()];
    let mut dropped = Vec::new();
    for (id, unit) in &given {
        if fits(id) {
            line.extend(unit.iter().map(|w| shell_word(w)));
        } else {
            dropped.push(unit[0].split('=').next().unwrap_or_default().to_string());
        }
    }
    line.extend(words[i + 1..].iter().map(|w| shell_word(w)));
    let dropped = match dropped.as_slice() {
        [] => String::new(),
        [one] => format!("; {one} is not an option of {name}"),
        [init @ .., last] => format!("; {} and {last} are not options of {name}", init.join(", ")),
    };
    Some(format!(
        "'{name}' is a subcommand, and its options go after it: {}{dropped} (to run a program \
         named '{name}', put -- before it)",
        line.join(" ")
    ))
}

/// `redlock-run -k NAME -- COMMAND...`, typed as a shell needs it: what
/// `redlock-run NAME COMMAND...` (flock's order) means.
pub(crate) fn keyed_form(name: &str, command: &[OsString]) -> String {
    let mut line = vec![
        "redlock-run".to_string(),
        "-k".into(),
        shell_word(name),
        "--".into(),
    ];
    if command.is_empty() {
        line.push("COMMAND".into());
    }
    line.extend(command.iter().map(|w| shell_word(&w.to_string_lossy())));
    line.join(" ")
}

/// `word` as a shell would need it typed, any password in a URL masked.
fn shell_word(word: &str) -> String {
    let word = if word.contains("://") || word.contains('@') {
        node::redact(word)
    } else {
        word.to_string()
    };
    let plain = |b: u8| b.is_ascii_alphanumeric() || b"-_./:=,@%+".contains(&b);
    if !word.is_empty() && word.bytes().all(plain) {
        word
    } else {
        format!("'{}'", word.replace('\'', "'\\''"))
    }
}

/// What to do with processes the command leaves behind when it exits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Leftovers {
    /// Keep the lock until the last of them has exited.
    Wait,
    /// Stop them (SIGTERM, then SIGKILL after --kill-after), then release.
    Kill,
}

/// How long to keep trying for a busy lock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wait {
    /// Try once (`0`).
    Once,
    For(Duration),
    Forever,
}

/// The longest TTL, kill-after, node timeout or jitter: longer makes no sense
/// for a lock whose heartbeat renews it every TTL/3.
pub(crate) const MAX_SHORT: Duration = Duration::from_secs(24 * 3600);
/// The longest wait, hold, window or run time.
pub(crate) const MAX_LONG: Duration = Duration::from_secs(366 * 24 * 3600);

fn parse_wait(s: &str) -> Result<Wait, BadDuration> {
    match s.trim() {
        "forever" | "inf" | "infinity" => Ok(Wait::Forever),
        other => {
            let d = duration(other, MAX_LONG, true)?;
            Ok(if d.is_zero() {
                Wait::Once
            } else {
                Wait::For(d)
            })
        }
    }
}

fn parse_short(s: &str) -> Result<Duration, BadDuration> {
    duration(s, MAX_SHORT, false)
}

fn parse_long(s: &str) -> Result<Duration, BadDuration> {
    duration(s, MAX_LONG, false)
}

fn parse_grace(s: &str) -> Result<Duration, BadDuration> {
    duration(s, MAX_LONG, true)
}

/// What is wrong with a duration given on the command line.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum BadDuration {
    /// Neither a duration with units nor a number of seconds.
    Unreadable { given: String, max: Duration },
    /// Zero where a time is needed.
    Zero { given: String },
    /// Longer than the option takes.
    TooLong { given: String, max: Duration },
}

impl std::fmt::Display for BadDuration {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BadDuration::Unreadable { given, max } => write!(
                f,
                "'{given}' is not a duration: use ms, s, m, h or d (500ms, 30s, 2m, 1h 30m) or a \
                 number of seconds (5, 0.5), at most {}",
                longest(*max)
            ),
            BadDuration::Zero { given } => write!(f, "'{given}' must be longer than zero"),
            BadDuration::TooLong { given, max } => {
                write!(f, "'{given}' is too long: at most {}", longest(*max))
            }
        }
    }
}

impl std::error::Error for BadDuration {}

/// A longest duration as the errors name it: in hours up to a day, else in
/// days.
fn longest(max: Duration) -> String {
    let days = max.as_secs() / 86_400;
    if days < 2 {
        format!("{}h", max.as_secs() / 3600)
    } else {
        format!("{days}d")
    }
}

/// A duration as humantime writes it (500ms, 30s, 2m, 1h 30m), or a bare
/// number of seconds as flock(1) and timeout(1) take it (5, 0.5). Zero only
/// where `zero` allows it; never longer than `max`.
fn duration(s: &str, max: Duration, zero: bool) -> Result<Duration, BadDuration> {
    let t = s.trim();
    let unreadable = || BadDuration::Unreadable {
        given: s.to_string(),
        max,
    };
    let too_long = || BadDuration::TooLong {
        given: s.to_string(),
        max,
    };
    let d = if !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
        let secs: f64 = t.parse().map_err(|_| unreadable())?;
        Duration::try_from_secs_f64(secs).map_err(|_| too_long())?
    } else {
        match humantime::parse_duration(t) {
            Ok(d) => d,
            Err(humantime::DurationError::NumberOverflow) => return Err(too_long()),
            // The units it names would include months and years, which no
            // option here takes: the error names the ones that serve.
            Err(_) => return Err(unreadable()),
        }
    };
    if d.is_zero() && !zero {
        return Err(BadDuration::Zero {
            given: s.to_string(),
        });
    }
    if d > max {
        return Err(too_long());
    }
    Ok(d)
}

/// Validated settings with every default resolved.
#[derive(Clone, Debug)]
pub struct Config {
    pub name: String,
    pub options: node::Options,
    pub keys: Keys,
    pub urls: Vec<String>,
    /// The node is the default one: nobody configured any.
    pub(crate) defaulted: bool,
    pub ttl: Duration,
    pub node_timeout: Duration,
    pub(crate) kill_after: Duration,
    pub(crate) busy_exit_code: u8,
    pub(crate) fence: bool,
    pub(crate) limit: Option<u32>,
    /// --shared: a reader.
    pub(crate) shared: bool,
    pub wait: Wait,
    /// --wait-unfair: ignore the queue.
    pub wait_unfair: bool,
    pub(crate) hold: Option<Duration>,
    /// Window length in whole seconds (--once-per or --once-per-success).
    pub(crate) once_per: Option<u64>,
    /// --once-per-success: only a run that exits 0 keeps its window.
    pub(crate) once_per_success: bool,
    /// --retry: attempts after the first.
    pub(crate) retry: u32,
    /// --retry-delay: the pause before the first retry.
    pub(crate) retry_delay: Duration,
    pub(crate) max_runtime: Option<Duration>,
    pub(crate) leftovers: Leftovers,
    pub(crate) jitter: Option<Duration>,
    pub program: Program,
    /// -1 quiet, 0 default, 1.. verbose
    pub verbosity: i8,
    pub log_format: Format,
    pub(crate) report: Option<std::path::PathBuf>,
    pub(crate) metrics_file: Option<std::path::PathBuf>,
    pub record_command: RecordCommand,
    /// --ping, checked.
    pub(crate) ping: Option<crate::notify::PingUrl>,
    /// --ping-busy, with a --ping to send it to.
    pub(crate) ping_busy: bool,
    pub(crate) ping_timeout: Duration,
    pub(crate) on_failure: Option<String>,
}

impl Config {
    /// What the run takes (clap keeps --fence, --limit and --shared apart).
    pub fn taking(&self) -> crate::lock::Taking {
        use crate::lock::Taking;
        match (self.limit, self.shared) {
            (Some(n), _) => Taking::Slot(n),
            (None, true) => Taking::Share,
            (None, false) => Taking::Lock { fence: self.fence },
        }
    }

    /// The files the run will write (--report, --metrics-file), each with
    /// why it cannot be written there, if it cannot: the run refuses to
    /// start over one (64), and `check` and `config` say the same.
    pub(crate) fn outputs(&self) -> Vec<(&'static str, &std::path::Path, Result<(), String>)> {
        type Check = fn(&std::path::Path) -> std::io::Result<()>;
        let files: [(&str, Option<&std::path::PathBuf>, Check); 2] = [
            (
                "--report",
                self.report.as_ref(),
                crate::files::check_writable,
            ),
            (
                "--metrics-file",
                self.metrics_file.as_ref(),
                crate::metrics::check,
            ),
        ];
        files
            .into_iter()
            .filter_map(|(flag, path, check)| {
                let path = path?.as_path();
                let said = check(path).map_err(|e| {
                    format!(
                        "cannot write {flag} {}: {}",
                        path.display(),
                        crate::text::os_message(&e)
                    )
                });
                Some((flag, path, said))
            })
            .collect()
    }

    /// The first line of `outputs` that refuses the run.
    pub(crate) fn unwritable(&self) -> Option<String> {
        self.outputs()
            .into_iter()
            .find_map(|(_, _, said)| said.err())
    }
}

impl Cli {
    /// The run's configuration: the option files read (see `Target::resolve`)
    /// and the values checked (see `check`).
    pub fn into_config(self) -> Result<Config, Unusable> {
        let resolved = self.target.resolve()?;
        self.check(resolved)
    }

    /// --node-timeout as given or by default, if the TTL leaves it room.
    fn node_timeout(&self) -> Result<Duration, Unusable> {
        let node_timeout = self
            .target
            .node_timeout
            .unwrap_or_else(|| redlock::default_node_timeout(self.ttl));
        if redlock::node_timeout_fits(self.ttl, node_timeout) {
            return Ok(node_timeout);
        }
        let fits = self.ttl / redlock::MAX_NODE_TIMEOUT_FRACTION;
        Err(Unusable::Usage(if self.target.node_timeout.is_some() {
            format!(
                "--node-timeout {} must be at most 1/{} of --ttl {}: lower it or raise --ttl",
                humantime::format_duration(node_timeout),
                redlock::MAX_NODE_TIMEOUT_FRACTION,
                humantime::format_duration(self.ttl),
            )
        } else {
            let kill_after = self
                .kill_after
                .unwrap_or_else(|| redlock::default_kill_after(self.ttl));
            let fits = Duration::from_millis(fits.as_millis() as u64);
            // Suggest a smaller node timeout only where the lock's own
            // schedule would then work.
            let or_lower = if redlock::schedule_fits(self.ttl, fits, kill_after).is_ok() {
                format!(
                    "give --node-timeout {} or less, or ",
                    humantime::format_duration(fits)
                )
            } else {
                String::new()
            };
            format!(
                "--ttl {} is too short for the default --node-timeout {} (TTL/20, at least \
                 50ms), which must be at most TTL/{}: {or_lower}raise --ttl to {} or more",
                humantime::format_duration(self.ttl),
                humantime::format_duration(node_timeout),
                redlock::MAX_NODE_TIMEOUT_FRACTION,
                humantime::format_duration(node_timeout * redlock::MAX_NODE_TIMEOUT_FRACTION),
            )
        }))
    }

    /// The --once-per or --once-per-success window, in whole seconds.
    fn once_per_window(&self) -> Result<Option<u64>, Unusable> {
        let (flag, window) = match (self.once_per, self.once_per_success) {
            (Some(w), _) => ("--once-per", Some(w)),
            (None, w) => ("--once-per-success", w),
        };
        Ok(match window {
            None => None,
            Some(w) if w.subsec_nanos() == 0 => Some(w.as_secs()),
            Some(w) => {
                return Err(format!(
                    "{flag} {} must be a whole number of seconds",
                    humantime::format_duration(w)
                )
                .into());
            }
        })
    }

    /// Checks what clap cannot: relations between values. Errors are one line.
    fn check(mut self, resolved: Resolved) -> Result<Config, Unusable> {
        let Resolved {
            name,
            keys,
            urls,
            defaulted,
            mut options,
        } = resolved;
        if let Some(t) = &self.timeout {
            // With its unit: a bare number is seconds.
            let t = parse_long(t).map_or_else(
                |_| t.clone(),
                |d| humantime::format_duration(d).to_string().replace(' ', ""),
            );
            return Err(format!(
                "--timeout is not an option, since tools mean two things by it: to wait up to \
                 {t} for a busy lock (flock -w, consul lock -timeout), give --wait {t}; to stop \
                 the command after it ran {t} (timeout(1)), give --max-runtime {t}"
            )
            .into());
        }
        let node_timeout = self.node_timeout()?;
        let program = match (self.command.take(), std::mem::take(&mut self.args)) {
            (Some(s), a) if a.is_empty() => Program::Shell(s),
            (None, a) if !a.is_empty() => Program::Argv(a),
            (Some(_), _) => {
                return Err("give either -c STRING or a command after --, not both".into());
            }
            (None, _) => {
                return Err("no command given: add -- COMMAND [ARGS] or -c 'SHELL COMMAND'".into());
            }
        };
        let kill_after = self
            .kill_after
            .unwrap_or_else(|| redlock::default_kill_after(self.ttl));
        if kill_after > self.ttl / 2 {
            return Err(format!(
                "--kill-after {} must be at most half of --ttl {}: the heartbeat needs the rest",
                humantime::format_duration(kill_after),
                humantime::format_duration(self.ttl),
            )
            .into());
        }
        redlock::schedule_fits(self.ttl, node_timeout, kill_after)?;
        let once_per = self.once_per_window()?;
        let ping = self
            .ping
            .as_deref()
            // Empty: none, so that one run can turn off a file's ping.
            .filter(|u| !u.is_empty())
            .map(crate::notify::PingUrl::parse)
            .transpose()?;
        options.timeout = node_timeout;
        options.replicas = self.replicas;
        options.restart_grace = self.restart_grace.unwrap_or(self.ttl);
        options.durable = self.durable;
        Ok(Config {
            name,
            options,
            keys,
            urls,
            defaulted,
            ttl: self.ttl,
            node_timeout,
            kill_after,
            busy_exit_code: self.busy_exit_code,
            fence: self.fence,
            limit: self.limit,
            shared: self.shared,
            wait: self.wait,
            wait_unfair: self.wait_unfair,
            hold: self.hold,
            once_per,
            once_per_success: self.once_per_success.is_some(),
            retry: self.retry.unwrap_or(0),
            retry_delay: self.retry_delay.unwrap_or(DEFAULT_RETRY_DELAY),
            max_runtime: self.max_runtime,
            leftovers: self.leftovers,
            jitter: self.jitter,
            program,
            log_format: self.log_format,
            report: self.report,
            metrics_file: self.metrics_file,
            record_command: self.record_command,
            ping_busy: self.ping_busy && ping.is_some(),
            ping,
            ping_timeout: self.ping_timeout,
            on_failure: self.on_failure.filter(|c| !c.trim().is_empty()),
            verbosity: if self.quiet {
                -1
            } else {
                self.verbose.min(i8::MAX as u8) as i8
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::FromArgMatches;

    fn parse(args: &[&str]) -> Result<Config, String> {
        let m = command()
            .try_get_matches_from(std::iter::once("redlock-run").chain(args.iter().copied()))
            .map_err(|e| e.kind().to_string())?;
        Cli::from_arg_matches(&m)
            .map_err(|e| e.to_string())?
            .into_config()
            .map_err(|e| e.to_string())
    }

    fn misplaced(line: &str) -> Option<String> {
        let args: Vec<OsString> = std::iter::once("redlock-run")
            .chain(line.split(' '))
            .map(OsString::from)
            .collect();
        misplaced_subcommand(&args)
    }

    #[test]
    fn only_what_may_run_a_command_forks_the_guard_at_the_start() {
        let may = |line: &str| {
            let args: Vec<OsString> = std::iter::once("redlock-run")
                .chain(line.split(' '))
                .map(OsString::from)
                .collect();
            may_run_a_command(&args)
        };
        assert!(may("-k x -- true"));
        assert!(may("-k x -c true"));
        // After `--`, words belong to the command.
        assert!(may("-k x -- status --help"));
        for line in [
            "--version",
            "-V",
            "--help",
            "-k x -h",
            "help",
            "status -k x",
            "-r redis://h:1 unlock -k x",
            "history -k x",
            "forget -k x",
        ] {
            assert!(!may(line), "{line}");
        }
        // Every subcommand clap knows, whichever they are.
        for sub in command().get_subcommands() {
            assert!(!may(&format!("{} -k x", sub.get_name())));
        }
    }

    #[test]
    fn options_before_a_subcommand_are_shown_after_it() {
        // Every subcommand clap knows, whichever they are.
        let names: Vec<String> = command()
            .get_subcommands()
            .map(|s| s.get_name().to_string())
            .collect();
        assert!(names.len() >= 3, "{names:?}");
        for name in names {
            let hint = misplaced(&format!("-r redis://h:1 {name} -k x"))
                .unwrap_or_else(|| panic!("no hint for {name}"));
            assert!(
                hint.starts_with(&format!(
                    "'{name}' is a subcommand, and its options go after it: redlock-run {name} \
                     -r redis://h:1 -k x"
                )),
                "{hint}"
            );
            let hint = misplaced(&format!("-k x {name}")).expect("hint");
            assert!(hint.contains(&format!("redlock-run {name} -k x")), "{hint}");
            assert!(hint.contains("put -- before it"), "{hint}");
            // In their place, after --, or as an option's value: no hint.
            for fine in [
                format!("{name} -k x"),
                format!("-k x -- {name}"),
                format!("-k {name} -- true"),
                format!("-c {name} -k x"),
                format!("-k x true {name}"),
            ] {
                assert_eq!(misplaced(&fine), None, "{fine}");
            }
        }
        let hint = misplaced("-r redis://u:hunter2@h:1 -t 5s -qv status --json").expect("hint");
        assert!(!hint.contains("hunter2"), "{hint}");
        assert!(
            hint.contains(
                "redlock-run status -r 'redis://u:***@h:1' --json; -t and -qv are not \
                           options of status"
            ),
            "{hint}"
        );
        let hint = misplaced("--key=a'b --prefix=p: history").expect("hint");
        assert!(
            hint.contains("redlock-run history '--key=a'\\''b' --prefix=p:"),
            "{hint}"
        );
    }

    #[test]
    fn clap_definition_is_consistent() {
        command().debug_assert();
    }

    #[test]
    fn defaults() {
        let c = parse(&["-k", "job", "--", "true"]).expect("valid");
        assert_eq!(c.keys.lock(), b"lock:job");
        assert_eq!(c.ttl, Duration::from_secs(30));
        assert_eq!(c.node_timeout, Duration::from_secs(1));
        assert_eq!(c.kill_after, Duration::from_secs(10));
        assert_eq!(c.busy_exit_code, 75);
        assert_eq!(c.program, Program::Argv(vec!["true".into()]));
        assert_eq!(c.verbosity, 0);
    }

    #[test]
    fn redis_urls_repeat_and_split_on_commas() {
        let c = parse(&[
            "-k",
            "j",
            "-r",
            "redis://a,redis://b",
            "-r",
            "redis://c",
            "true",
        ])
        .expect("valid");
        assert_eq!(c.urls, ["redis://a", "redis://b", "redis://c"]);
    }

    #[test]
    fn cluster_seeds_and_sentinels_stay_in_their_url() {
        let c = parse(&[
            "-k",
            "j",
            "-r",
            "redis+cluster://a:1,b:2,redis://c, redis+sentinel://s1,s2:3/m",
            "-r",
            "d:4",
            "true",
        ])
        .expect("valid");
        assert_eq!(
            c.urls,
            [
                "redis+cluster://a:1,b:2",
                "redis://c",
                "redis+sentinel://s1,s2:3/m",
                "d:4"
            ]
        );
    }

    #[test]
    fn trailing_command_keeps_its_own_flags() {
        let c = parse(&["-k", "j", "--", "ls", "-k", "-v"]).expect("valid");
        assert_eq!(
            c.program,
            Program::Argv(vec!["ls".into(), "-k".into(), "-v".into()])
        );
        let c = parse(&["-k", "j", "ls", "-la"]).expect("valid without --");
        assert_eq!(c.program, Program::Argv(vec!["ls".into(), "-la".into()]));
    }

    #[test]
    fn rejects_bad_input() {
        assert!(parse(&["-k", "j"]).is_err(), "no command");
        assert!(
            parse(&["-k", "j", "-c", "x", "--", "y"]).is_err(),
            "both forms"
        );
        assert!(parse(&["-k", "", "true"]).is_err(), "empty key");
        assert!(parse(&["-k", "j", "-t", "soon", "true"]).is_err());
        assert!(parse(&["-k", "j", "-t", "0s", "true"]).is_err());
        assert!(parse(&["-k", "j", "-t", "1s", "--node-timeout", "500ms", "true"]).is_err());
        assert!(parse(&["-k", "j", "-E", "256", "true"]).is_err());
        assert!(parse(&["-k", "j", "-q", "-v", "true"]).is_err());
        assert!(parse(&["-k", "j", "-r", ",", "true"]).is_err(), "no node");
        assert!(parse(&["-k", "j", "-t", "2s", "--kill-after", "1500ms", "true"]).is_err());
        assert!(parse(&["-k", "j", "--once-per", "1500ms", "true"]).is_err());
        assert!(parse(&["-k", "j", "--once-per-success", "1500ms", "true"]).is_err());
        assert!(
            parse(&[
                "-k",
                "j",
                "--once-per",
                "1h",
                "--once-per-success",
                "1h",
                "true"
            ])
            .is_err()
        );
        assert!(parse(&["-k", "j", "--retry", "101", "true"]).is_err());
        assert!(parse(&["-k", "j", "--retry", "-1", "true"]).is_err());
        assert!(
            parse(&["-k", "j", "--retry-delay", "2s", "true"]).is_err(),
            "no --retry"
        );
        assert!(parse(&["-k", "j", "--retry", "1", "--retry-delay", "0", "true"]).is_err());
        assert!(parse(&["-k", "j", "--wait", "later", "true"]).is_err());
        assert!(parse(&["-k", "j", "--restart-grace", "soon", "true"]).is_err());
        assert!(parse(&["-k", "j", "--restart-grace", "-1s", "true"]).is_err());
    }

    #[test]
    fn the_restart_grace_is_the_ttl_unless_given_and_may_be_zero() {
        let c = |a: &[&str]| parse(a).expect("valid").options;
        let o = c(&["-k", "j", "-t", "2m", "true"]);
        assert_eq!(
            (o.restart_grace, o.durable),
            (Duration::from_secs(120), false)
        );
        let o = c(&["-k", "j", "--restart-grace", "0", "--durable", "true"]);
        assert_eq!((o.restart_grace, o.durable), (Duration::ZERO, true));
        assert_eq!(
            c(&["-k", "j", "--restart-grace", "1h", "true"]).restart_grace,
            Duration::from_secs(3600)
        );
    }

    #[test]
    fn wait_accepts_durations_and_forever() {
        let w = |a: &str| parse(&["-k", "j", "-w", a, "true"]).map(|c| c.wait);
        assert_eq!(w("0"), Ok(Wait::Once));
        assert_eq!(w("0s"), Ok(Wait::Once));
        assert_eq!(w("forever"), Ok(Wait::Forever));
        assert_eq!(w("90s"), Ok(Wait::For(Duration::from_secs(90))));
        let c = parse(&["-k", "j", "true"]).expect("valid");
        assert_eq!(c.wait, Wait::Once, "default is a single try");
        let c = parse(&["-k", "j", "--once-per", "1h", "true"]).expect("valid");
        assert_eq!(c.once_per, Some(3600));
        assert!(!c.once_per_success);
    }

    #[test]
    fn once_per_success_retry_and_metrics() {
        let c = parse(&["-k", "j", "--once-per-success", "10m", "true"]).expect("valid");
        assert_eq!((c.once_per, c.once_per_success), (Some(600), true));
        assert_eq!((c.retry, c.retry_delay), (0, DEFAULT_RETRY_DELAY));
        let c =
            parse(&["-k", "j", "--retry", "2", "--retry-delay", "250ms", "true"]).expect("valid");
        assert_eq!((c.retry, c.retry_delay), (2, Duration::from_millis(250)));
        let c = parse(&["-k", "j", "--metrics-file", "/tmp/m.prom", "true"]).expect("valid");
        assert_eq!(
            c.metrics_file.as_deref(),
            Some(std::path::Path::new("/tmp/m.prom"))
        );
    }

    #[test]
    fn ping_settings() {
        let c = parse(&["-k", "j", "true"]).expect("valid");
        assert!(c.ping.is_none() && !c.ping_busy && c.on_failure.is_none());
        assert_eq!(c.ping_timeout, Duration::from_secs(10));
        let c = parse(&["-k", "j", "--ping-busy", "--on-failure", " ", "true"]).expect("valid");
        assert!(!c.ping_busy, "nothing to send it to");
        assert!(c.on_failure.is_none(), "a blank command is none");
        let c = parse(&[
            "-k",
            "j",
            "--ping",
            "https://hc-ping.com/abc",
            "--ping-busy",
            "--ping-timeout",
            "3s",
            "true",
        ])
        .expect("valid");
        assert_eq!(
            c.ping.map(|p| p.to_string()).as_deref(),
            Some("https://hc-ping.com/***")
        );
        assert!(c.ping_busy);
        assert_eq!(c.ping_timeout, Duration::from_secs(3));
        assert!(parse(&["-k", "j", "--ping", "", "true"]).is_ok_and(|c| c.ping.is_none()));
        let e = parse(&["-k", "j", "--ping", "hc-ping.com/abc", "true"]).expect_err("no scheme");
        assert_eq!(e, "--ping hc-ping.com/***: not an http:// or https:// URL");
        assert!(parse(&["-k", "j", "--ping-timeout", "0", "true"]).is_err());
    }

    #[test]
    fn bare_numbers_are_seconds_and_limits_hold() {
        assert_eq!(duration("5", MAX_LONG, false), Ok(Duration::from_secs(5)));
        assert_eq!(
            duration(" 0.25 ", MAX_LONG, false),
            Ok(Duration::from_millis(250))
        );
        assert_eq!(duration("0", MAX_LONG, true), Ok(Duration::ZERO));
        assert!(duration("0", MAX_LONG, false).is_err());
        assert!(duration("1.2.3", MAX_LONG, false).is_err());
        assert!(duration("-5", MAX_LONG, false).is_err());
        assert!(duration("1e400", MAX_LONG, false).is_err());
        assert!(duration("500000000000years", MAX_LONG, false).is_err());
        assert!(duration("99999999999999999999999", MAX_LONG, false).is_err());
        let said = |r: Result<Duration, BadDuration>| r.map_err(|e| e.to_string());
        assert_eq!(
            said(duration("25h", MAX_SHORT, false)),
            Err("'25h' is too long: at most 24h".into())
        );
        assert_eq!(
            said(duration("367d", MAX_LONG, false)),
            Err("'367d' is too long: at most 366d".into())
        );
        // Only the units and the range the option takes are named.
        let e = said(duration("5x", MAX_LONG, false)).expect_err("not a duration");
        assert!(
            e.contains("ms, s, m, h or d") && e.contains("at most 366d"),
            "{e}"
        );
        assert!(!e.contains("month") && !e.contains("year"), "{e}");
        assert!(duration("24h", MAX_SHORT, false).is_ok());
        let w = |a: &str| parse(&["-k", "j", "-w", a, "true"]).map(|c| c.wait);
        assert_eq!(w("5"), Ok(Wait::For(Duration::from_secs(5))));
    }

    #[test]
    fn durations_are_humantime() {
        let c = parse(&["-k", "j", "-t", "2m", "--kill-after", "1500ms", "true"]).expect("valid");
        assert_eq!(c.ttl, Duration::from_secs(120));
        assert_eq!(c.kill_after, Duration::from_millis(1500));
        assert_eq!(c.node_timeout, Duration::from_secs(1));
        let c = parse(&["-k", "j", "-t", "500ms", "true"]).expect("valid");
        assert_eq!(c.node_timeout, Duration::from_millis(50));
    }
}
