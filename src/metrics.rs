//! `--metrics-file PATH`: node_exporter textfile-collector metrics for lock
//! keys, so that Prometheus can alert when a job's last success grows stale:
//!
//! ```text
//! time() - redlock_run_last_success_timestamp_seconds{key="nightly-report"} > 26 * 3600
//! ```
//!
//! The file is redlock-run's own, shared by every run of every key on the
//! host, and nothing reads its series back. Its first line is a comment
//! holding the state (every key's counters and gauges) as one JSON object;
//! the series below it are rendered from that state. [`record`] reads the
//! state line, applies the run, renders the whole file and renames it into
//! place, under a flock(2) on `<PATH>.lock` so that concurrent runs on the
//! host lose no increment (shown in part: the state is cut short, and the
//! command's `last_duration_seconds`, `last_exit_code` and
//! `last_start_timestamp_seconds` gauges, and most outcome counters, are
//! left out here):
//!
//! ```text
//! # redlock-run state: {"keys":{"nightly-report":{"runs":{"already-ran":0,"busy":17,...
//! # HELP redlock_run_degraded_runs_total Runs in which at least one node failed or did not answer.
//! # TYPE redlock_run_degraded_runs_total counter
//! redlock_run_degraded_runs_total{key="nightly-report"} 2
//! # HELP redlock_run_last_nodes_answered Nodes that answered throughout the last run that reached the nodes.
//! # TYPE redlock_run_last_nodes_answered gauge
//! redlock_run_last_nodes_answered{key="nightly-report"} 2
//! # HELP redlock_run_last_nodes_failed Nodes that failed or did not answer in the last run that reached the nodes.
//! # TYPE redlock_run_last_nodes_failed gauge
//! redlock_run_last_nodes_failed{key="nightly-report"} 1
//! # HELP redlock_run_last_success_timestamp_seconds Unix time at which the last run whose command exited 0 ended.
//! # TYPE redlock_run_last_success_timestamp_seconds gauge
//! redlock_run_last_success_timestamp_seconds{key="nightly-report"} 1795921612.889
//! # HELP redlock_run_runs_total Runs by outcome: ok, failed, signal, not-run, busy, already-ran, unavailable, lost, timeout.
//! # TYPE redlock_run_runs_total counter
//! redlock_run_runs_total{key="nightly-report",outcome="already-ran"} 0
//! redlock_run_runs_total{key="nightly-report",outcome="busy"} 17
//! redlock_run_runs_total{key="nightly-report",outcome="failed"} 1
//! redlock_run_runs_total{key="nightly-report",outcome="ok"} 2
//! ...
//! ```
//!
//! The text format ignores a comment that is not HELP or TYPE, so
//! node_exporter, like any Prometheus parser, reads the file as if the state
//! line were not there. Owning the file is what node_exporter's own textfile
//! scripts do, and it needs no parser of the text format: keeping other
//! programs' lines alive in a shared file needed one as strict as
//! node_exporter's, which refuses a whole file for one bad line. Lines that
//! something else put in the file are therefore not kept (other series
//! belong in files of their own in the collector's directory), and a run
//! that finds the file other than the last run left it says so
//! ([`Recorded`]). A file without a state line (an older version's), or
//! with one that cannot be read, starts over from 0, which `rate()` and
//! `increase()` take for a counter reset: a state line that was cut short
//! or edited cannot be trusted for any of its counts.
//!
//! The outcomes are [`Outcome`]'s words, as `--report`, the history and the
//! JSON log write them. A key's outcome counters (every outcome but `usage`,
//! which is not a run) and its degraded-runs counter all appear (at 0) with
//! its first run: a series that is born at 1 hides that first increment from
//! `increase()`. A key that never succeeded has no `last_success` series at
//! all, rather than a made-up 0; an alert should pair the staleness rule with
//! `absent()`. A --shared reader's runs are counted apart, under
//! `lock="shared"`; a writer's series have no `lock` label, as before readers
//! existed.
//!
//! The node gauges are how the last run that reached the nodes found them,
//! busy and unavailable runs included: on most hosts of a cron fleet every
//! run is busy, and those runs see the nodes all the same. `-q` silences the
//! warning a run prints for a node that failed; this is where it still shows.

use std::collections::BTreeMap;
use std::ffi::{CString, OsString};
use std::fmt::Write as _;
use std::fs::{File, OpenOptions};
use std::io::{self, Read};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use rustix::fs::{Access, FlockOperation, Mode, OFlags};
use rustix::io::Errno;
use serde::{Deserialize, Serialize};

use crate::exit::Exit;
use crate::lock::NodeOutcome;
use crate::outcome::Outcome;

/// How long a writer waits for the file lock. Writers hold it for one read and
/// one write of a small file; one that holds it this long is stuck (or is not
/// one of ours: the lock file is readable, so anyone can flock it), and the
/// run should say so and end rather than hang in its crontab.
const LOCK_WAIT: Duration = Duration::from_secs(10);

/// Beyond this the path does not name a textfile-collector file, and reading
/// it whole into memory would be the wrong thing to do.
const MAX_FILE: u64 = 16 << 20;

/// How the nodes fared in one run that reached them: a node that failed,
/// or said nothing while the run lasted, is failed (the nodes the run's
/// "the quorum did without it" warning names; see `NodeOutcome::failure`),
/// every other one answered.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Nodes {
    pub answered: u32,
    pub failed: u32,
    /// Steps of the lock's upkeep (a release, an extension, a clean-up)
    /// that nodes refused in the run, each leaving a key behind until it
    /// expired (see `lock::refused`); counted by `refusals_total`.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub refused: u32,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

impl Nodes {
    pub(crate) fn of(outcomes: &[NodeOutcome]) -> Nodes {
        let count = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);
        let failed = outcomes.iter().filter(|o| o.failure().is_some()).count();
        Nodes {
            answered: count(outcomes.len() - failed),
            failed: count(failed),
            refused: count(outcomes.iter().map(|o| o.refused.len()).sum()),
        }
    }
}

/// One finished run of redlock-run, as the metrics file records it.
#[derive(Clone, Debug)]
pub struct Run<'a> {
    /// The lock's name (`--key`); any UTF-8.
    pub key: &'a str,
    pub outcome: Outcome,
    /// redlock-run's exit status (the command's, 128+N for a signal, 76...).
    pub exit_code: u8,
    /// Wall-clock time the run began.
    pub started_at: SystemTime,
    /// How long the run took (as `--report`'s `duration_ms`).
    pub duration: Duration,
    /// How the nodes fared; `None` for a run that never reached them (a
    /// signal during `--jitter`, a guard that could not start).
    pub nodes: Option<Nodes>,
    /// A --shared reader's run: its runs are counted apart, under
    /// `lock="shared"` (writers' series keep the labels they always had).
    pub shared: bool,
    /// With `--ping`: the run's pings that reached the service and those
    /// that did not; `None` for a run without `--ping`.
    pub pings: Option<Pings>,
}

/// One run's pings (`--ping`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pings {
    /// The service answered 2xx.
    pub sent: u64,
    /// Not delivered within `--ping-timeout`.
    pub failed: u64,
}

impl<'a> Run<'a> {
    /// The run that ended with `exit`, or `None` for a usage error: nothing
    /// was attempted, so there is nothing to count.
    pub fn from_exit(
        key: &'a str,
        exit: Exit,
        already_ran: bool,
        started_at: SystemTime,
        duration: Duration,
        nodes: Option<Nodes>,
    ) -> Option<Self> {
        let outcome = Outcome::of(exit, already_ran);
        (outcome != Outcome::Usage).then_some(Run {
            key,
            outcome,
            exit_code: exit.code(),
            started_at,
            duration,
            nodes,
            shared: false,
            pings: None,
        })
    }
}

/// What [`record`] found in the file before it rewrote it.
#[must_use = "a file that was not as redlock-run left it should be reported: see Recorded::warning"]
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Recorded {
    /// The file was as the last run left it, or empty, or not there yet.
    AsLeft,
    /// The state line read, but the lines around it were not what it
    /// renders to: edited, or written by another version of redlock-run. The
    /// counts go on from the state line; everything else was rewritten.
    Rewritten,
    /// A file with no state line: an older version's, or another program's.
    /// The counts started over from 0.
    NoState,
    /// A state line that cannot be read (edited by hand, cut short), and
    /// where and why.
    /// The counts started over from 0.
    BadState(String),
}

impl Recorded {
    /// A line for the log when the file was not as the last run left it.
    pub fn warning(&self, path: &Path) -> Option<String> {
        let path = path.display();
        match self {
            Recorded::AsLeft => None,
            Recorded::Rewritten => Some(format!(
                "{path}: not as redlock-run left it (edited, or written by another version); \
                 rewritten from its state line, and lines redlock-run did not write are dropped"
            )),
            Recorded::NoState => Some(format!(
                "{path}: no redlock-run state line (an older version's file, or another \
                 program's); its counts start over from 0 and its other lines are dropped"
            )),
            Recorded::BadState(why) => Some(format!(
                "{path}: its redlock-run state line cannot be read ({why}); its counts start \
                 over from 0"
            )),
        }
    }
}

/// Records `run` in the textfile-collector file `path`: increments the key's
/// counter for the run's outcome (and its degraded-runs counter when a node
/// failed), replaces the node gauges when the run reached the nodes, and,
/// for a run that started its command, the key's other `last_*` gauges
/// (`last_success` only when it exited 0). Every other key's series are
/// kept; lines that redlock-run did not write are not.
///
/// Meant to be called once at the very end of a run, after the lock is
/// released and beside `--report`, so that a slow or stuck file system never
/// holds a lock. Errors name the path; they are for the log, and should not
/// change the exit status:
///
/// ```no_run
/// # use std::path::Path;
/// # use std::time::{Duration, SystemTime};
/// # use redlock_run::exit::Exit;
/// use redlock_run::metrics::{self, Run};
/// # let (path, name) = (Path::new("/var/lib/node_exporter/textfile/cron.prom"), "report");
/// # let (exit, already_ran) = (Exit::Command(0), false);
/// # let (started_at, duration) = (SystemTime::now(), Duration::from_millis(412_877));
/// // already_ran: `stats.already_ran`; started_at, duration: as for `report::write`;
/// // nodes: `Nodes::of` the run's node outcomes, if it reached the nodes.
/// let nodes = Some(metrics::Nodes { answered: 3, failed: 0, refused: 0 });
/// if let Some(run) = Run::from_exit(name, exit, already_ran, started_at, duration, nodes) {
///     match metrics::record(path, &run) {
///         Ok(recorded) => {
///             if let Some(warning) = recorded.warning(path) {
///                 eprintln!("redlock-run: {warning}");
///             }
///         }
///         Err(e) => eprintln!("redlock-run: cannot write --metrics-file: {e}"),
///     }
/// }
/// ```
pub fn record(path: &Path, run: &Run<'_>) -> io::Result<Recorded> {
    record_waiting(path, run, LOCK_WAIT)
}

/// Whether [`record`] will be able to write `path`, asked before the lock is
/// taken, so that a path it would refuse is a usage error up front rather
/// than a warning after the job: what `files::check_writable` asks of any
/// file redlock-run writes, and what carrying its counts on needs besides:
/// the file is read (never through a symlink), and its lock file beside it
/// is a regular file or nothing yet. The error says what is wrong, without
/// the path.
pub(crate) fn check(path: &Path) -> io::Result<()> {
    let refused = |why: String| io::Error::new(io::ErrorKind::InvalidInput, why);
    crate::files::check_writable(path)?;
    if let Ok(meta) = std::fs::symlink_metadata(path) {
        if meta.file_type().is_symlink() {
            return Err(refused(
                "it is a symlink, which --metrics-file does not read through: give the file's \
                 own path"
                    .into(),
            ));
        }
        if crate::files::access(path, Access::READ_OK).is_err() {
            return Err(refused(
                "this user may not read it, and the counts in it would be lost".into(),
            ));
        }
    }
    let lock = lock_path(path)?;
    match std::fs::symlink_metadata(&lock) {
        Ok(meta) if meta.file_type().is_file() => crate::files::access(&lock, Access::READ_OK)
            .map_err(|_| {
                refused(format!(
                    "this user may not read its lock file {}",
                    lock.display()
                ))
            }),
        Ok(_) => Err(refused(format!(
            "its lock file {} is not a regular file",
            lock.display()
        ))),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(named(&lock, e)),
    }
}

fn record_waiting(path: &Path, run: &Run<'_>, wait: Duration) -> io::Result<Recorded> {
    let _lock = lock(&lock_path(path)?, wait)?;
    let (mut state, found) = State::read(&read_existing(path)?);
    state.apply(run);
    let text = state
        .render()
        .map_err(|e| named(path, io::Error::other(e)))?;
    crate::files::write_atomically(path, text.as_bytes()).map_err(|e| named(path, e))?;
    Ok(found)
}

fn named(path: &Path, e: io::Error) -> io::Error {
    io::Error::new(e.kind(), format!("{}: {e}", path.display()))
}

/// `<path>.lock`: beside the target, so it lives on the same file system and
/// under the same permissions, and node_exporter (which reads `*.prom` only)
/// ignores it.
fn lock_path(path: &Path) -> io::Result<PathBuf> {
    if path.file_name().is_none() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{}: not a file name", path.display()),
        ));
    }
    let mut name = OsString::from(path.as_os_str());
    name.push(".lock");
    Ok(PathBuf::from(name))
}

/// Opens (creating) the lock file and takes an exclusive flock on it; closing
/// the file releases it. flock belongs to the open file description, so every
/// call, even from threads of one process, contends with all the others.
///
/// O_NOFOLLOW: a symlink planted at the predictable lock name (a shared
/// directory, a root crontab) must not make us create or open a file of the
/// attacker's choosing. O_NONBLOCK: a FIFO planted there must not hang the
/// open; it is then refused as not a regular file. O_RDONLY: flock needs no
/// write access, so a user who can only read the 0644 lock file that another
/// user's run created still takes part in the locking (std's OpenOptions
/// will not create a file it opens read-only, hence open(2) itself).
fn lock(path: &Path, wait: Duration) -> io::Result<File> {
    let c_path = CString::new(path.as_os_str().as_bytes()).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{}: contains a NUL byte", path.display()),
        )
    })?;
    let flags =
        OFlags::RDONLY | OFlags::CREATE | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NONBLOCK;
    let file = rustix::fs::open(c_path.as_c_str(), flags, Mode::from_raw_mode(0o644))
        .map(File::from)
        .map_err(|e| refuse_symlink(path, e.into()))?;
    if !file.metadata().map_err(|e| named(path, e))?.is_file() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "{}: not a regular file; refusing it as a lock file",
                path.display()
            ),
        ));
    }
    // Polled rather than blocking so that a lock held forever becomes an
    // error after `wait` instead of a run that never ends.
    let deadline = Instant::now() + wait;
    let mut pause = Duration::from_millis(1);
    loop {
        match rustix::fs::flock(&file, FlockOperation::NonBlockingLockExclusive) {
            Ok(()) => return Ok(file),
            Err(Errno::INTR) => continue,
            Err(Errno::WOULDBLOCK) => {}
            Err(e) => return Err(named(path, e.into())),
        }
        let now = Instant::now();
        if now >= deadline {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!(
                    "{}: still locked by another writer after {}s",
                    path.display(),
                    wait.as_secs_f64()
                ),
            ));
        }
        std::thread::sleep(pause.min(deadline - now));
        pause = (pause * 2).min(Duration::from_millis(20));
    }
}

fn refuse_symlink(path: &Path, e: io::Error) -> io::Error {
    if e.raw_os_error() == Some(libc::ELOOP) {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{}: is a symlink; refusing to follow it", path.display()),
        )
    } else {
        named(path, e)
    }
}

/// The file's current contents; nothing if there is none yet.
///
/// Not read through a symlink: the written file replaces the link (rename),
/// so following it would take someone else's file for ours and silently cut
/// the link. Refused instead, for a person to look at.
fn read_existing(path: &Path) -> io::Result<Vec<u8>> {
    let file = match OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK)
        .open(path)
    {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(refuse_symlink(path, e)),
    };
    let meta = file.metadata().map_err(|e| named(path, e))?;
    if !meta.is_file() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{}: not a regular file", path.display()),
        ));
    }
    let mut contents = Vec::new();
    file.take(MAX_FILE + 1)
        .read_to_end(&mut contents)
        .map_err(|e| named(path, e))?;
    if contents.len() as u64 > MAX_FILE {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!(
                "{}: larger than {} MiB; not a metrics file?",
                path.display(),
                MAX_FILE >> 20
            ),
        ));
    }
    Ok(contents)
}

/// The start of the file's first line. An incompatible change of the state
/// would take another prefix, so that a version that cannot read it starts
/// over rather than misreads it; fields added are ignored by versions that
/// do not know them (and dropped by their next write).
const STATE_LINE: &str = "# redlock-run state: ";

/// Everything the file says, as its state line holds it.
#[derive(Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
struct State {
    keys: BTreeMap<String, Key>,
}

/// One lock key's counters and gauges.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
struct Key {
    /// Writers' runs by outcome word.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    runs: BTreeMap<String, u64>,
    /// --shared readers' runs by outcome word.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    shared_runs: BTreeMap<String, u64>,
    degraded_runs: u64,
    /// Steps of the lock's upkeep nodes refused, over every run.
    #[serde(skip_serializing_if = "is_zero_u64")]
    refusals: u64,
    /// How the last run that reached the nodes found them.
    #[serde(skip_serializing_if = "Option::is_none")]
    nodes: Option<Nodes>,
    /// The last run that started its command.
    #[serde(skip_serializing_if = "Option::is_none")]
    command: Option<Command>,
    /// Unix milliseconds at which the last run whose command exited 0 ended.
    #[serde(skip_serializing_if = "Option::is_none")]
    last_success_ms: Option<i64>,
    /// Pings of the key's runs with `--ping`, from the first such run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pings: Option<Pings>,
}

fn is_zero_u64(n: &u64) -> bool {
    *n == 0
}

/// Times in Unix milliseconds, so that the state holds exactly the values
/// the series show.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
struct Command {
    exit_code: u8,
    start_ms: i64,
    duration_ms: i64,
}

impl State {
    /// The state in `contents`, a whole file, and how the file was found.
    fn read(contents: &[u8]) -> (State, Recorded) {
        if contents.is_empty() {
            return (State::default(), Recorded::AsLeft);
        }
        let line = contents
            .split(|&b| b == b'\n')
            .enumerate()
            .find_map(|(i, line)| Some((i + 1, line.strip_prefix(STATE_LINE.as_bytes())?)));
        let Some((number, json)) = line else {
            return (State::default(), Recorded::NoState);
        };
        match serde_json::from_slice::<State>(json) {
            // Rendering again is how a run tells its own file from one that
            // was edited: nothing below the state line is read.
            Ok(state) => {
                let as_left = state.render().is_ok_and(|t| t.as_bytes() == contents);
                let found = if as_left {
                    Recorded::AsLeft
                } else {
                    Recorded::Rewritten
                };
                (state, found)
            }
            Err(e) => {
                // Where in the file, rather than serde_json's place in the JSON.
                let why = e.to_string();
                let at = format!(" at line {} column {}", e.line(), e.column());
                let why = why.strip_suffix(&at).unwrap_or(&why);
                let column = STATE_LINE.len() + e.column();
                let found = Recorded::BadState(format!("line {number}, column {column}: {why}"));
                (State::default(), found)
            }
        }
    }

    /// The semantics of one run, in one place: the counters always, the
    /// node gauges for a run that reached the nodes, the others only for a
    /// run that started its command.
    fn apply(&mut self, run: &Run<'_>) {
        let key = self.keys.entry(run.key.to_string()).or_default();
        let runs = if run.shared {
            &mut key.shared_runs
        } else {
            &mut key.runs
        };
        for o in Outcome::ALL {
            if o != Outcome::Usage {
                runs.entry(o.word().to_string()).or_insert(0);
            }
        }
        let count = runs.entry(run.outcome.word().to_string()).or_insert(0);
        *count = count.saturating_add(1);
        if let Some(p) = run.pings {
            let total = key.pings.get_or_insert_with(Pings::default);
            total.sent = total.sent.saturating_add(p.sent);
            total.failed = total.failed.saturating_add(p.failed);
        }
        if let Some(nodes) = run.nodes {
            if nodes.failed > 0 {
                key.degraded_runs = key.degraded_runs.saturating_add(1);
            }
            key.refusals = key.refusals.saturating_add(u64::from(nodes.refused));
            key.nodes = Some(nodes);
        }
        if !run.outcome.started_command() {
            return;
        }
        let start_ms = unix_ms(run.started_at);
        let duration_ms = i64::try_from(run.duration.as_millis()).unwrap_or(i64::MAX);
        key.command = Some(Command {
            exit_code: run.exit_code,
            start_ms,
            duration_ms,
        });
        if run.exit_code == 0 {
            // The end: "fresh as of" is when the job finished its work.
            let end = run
                .started_at
                .checked_add(run.duration)
                .map_or(start_ms.saturating_add(duration_ms), unix_ms);
            key.last_success_ms = Some(end);
        }
    }

    /// The whole file: the state line, then every family that has a series,
    /// in name order, each key's series in key order.
    fn render(&self) -> serde_json::Result<String> {
        let mut out = format!("{STATE_LINE}{}\n", serde_json::to_string(self)?);
        for family in &FAMILIES {
            let mut samples = String::new();
            for (name, key) in &self.keys {
                let name = escape(name);
                for (labels, value) in (family.series)(key) {
                    // Writing to a String cannot fail.
                    let _ = writeln!(samples, "{}{{key=\"{name}\"{labels}}} {value}", family.name);
                }
            }
            if !samples.is_empty() {
                let _ = writeln!(out, "# HELP {} {}", family.name, family.help);
                let _ = writeln!(out, "# TYPE {} {}", family.name, family.kind);
                out.push_str(&samples);
            }
        }
        Ok(out)
    }
}

/// One metric family redlock-run writes.
struct Family {
    name: &'static str,
    kind: &'static str,
    help: &'static str,
    /// A key's series of this family: the labels after `key` (as written,
    /// each with its leading comma), and the value.
    series: fn(&Key) -> Vec<(String, String)>,
}

/// One series without labels of its own, if there is a value.
fn one(value: Option<String>) -> Vec<(String, String)> {
    value.map(|v| (String::new(), v)).into_iter().collect()
}

/// In name order, which is the order of the file.
const FAMILIES: [Family; 10] = [
    Family {
        name: "redlock_run_degraded_runs_total",
        kind: "counter",
        help: "Runs in which at least one node failed or did not answer.",
        series: |k| one(Some(k.degraded_runs.to_string())),
    },
    Family {
        name: "redlock_run_last_duration_seconds",
        kind: "gauge",
        help: "Duration of the last run that started its command.",
        series: |k| one(k.command.map(|c| seconds(c.duration_ms))),
    },
    Family {
        name: "redlock_run_last_exit_code",
        kind: "gauge",
        help: "Exit status of the last run that started its command.",
        series: |k| one(k.command.map(|c| c.exit_code.to_string())),
    },
    Family {
        name: "redlock_run_last_nodes_answered",
        kind: "gauge",
        help: "Nodes that answered throughout the last run that reached the nodes.",
        series: |k| one(k.nodes.map(|n| n.answered.to_string())),
    },
    Family {
        name: "redlock_run_last_nodes_failed",
        kind: "gauge",
        help: "Nodes that failed or did not answer in the last run that reached the nodes.",
        series: |k| one(k.nodes.map(|n| n.failed.to_string())),
    },
    Family {
        name: "redlock_run_last_start_timestamp_seconds",
        kind: "gauge",
        help: "Unix time at which the last run that started its command began.",
        series: |k| one(k.command.map(|c| seconds(c.start_ms))),
    },
    Family {
        name: "redlock_run_last_success_timestamp_seconds",
        kind: "gauge",
        help: "Unix time at which the last run whose command exited 0 ended.",
        series: |k| one(k.last_success_ms.map(seconds)),
    },
    Family {
        name: "redlock_run_pings_total",
        kind: "counter",
        help: "Pings (--ping) by result: sent (the service answered 2xx) or failed (not \
               delivered within --ping-timeout).",
        series: |k| {
            k.pings
                .map(|p| {
                    vec![
                        (",result=\"failed\"".to_string(), p.failed.to_string()),
                        (",result=\"sent\"".to_string(), p.sent.to_string()),
                    ]
                })
                .unwrap_or_default()
        },
    },
    Family {
        name: "redlock_run_refusals_total",
        kind: "counter",
        help: "Releases, extensions and clean-ups a node refused, each leaving a key of the lock \
               behind until it expired.",
        series: |k| one(Some(k.refusals.to_string())),
    },
    Family {
        name: "redlock_run_runs_total",
        kind: "counter",
        help: "Runs by outcome: ok, failed, signal, not-run, busy, already-ran, unavailable, \
               lost, timeout.",
        // Labels in name order: `lock` sorts before `outcome`, so readers'
        // series come first.
        series: |k| {
            let shared = k.shared_runs.iter().map(|(outcome, n)| {
                let labels = format!(",lock=\"shared\",outcome=\"{}\"", escape(outcome));
                (labels, n.to_string())
            });
            let writers = k
                .runs
                .iter()
                .map(|(outcome, n)| (format!(",outcome=\"{}\"", escape(outcome)), n.to_string()));
            shared.chain(writers).collect()
        },
    },
];

/// Unix milliseconds.
fn unix_ms(t: SystemTime) -> i64 {
    let ms = |d: Duration| i64::try_from(d.as_millis()).unwrap_or(i64::MAX);
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => ms(d),
        Err(e) => -ms(e.duration()),
    }
}

/// Milliseconds as seconds with exactly three decimals: always a float,
/// always to the millisecond.
fn seconds(ms: i64) -> String {
    let sign = if ms < 0 { "-" } else { "" };
    let ms = ms.unsigned_abs();
    format!("{sign}{}.{:03}", ms / 1000, ms % 1000)
}

/// A label value as the text format writes it: `\`, `"` and line feed are
/// the only characters escaped; everything else is UTF-8 as it is.
fn escape(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    for c in v.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ms: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_millis(ms)
    }

    fn run(key: &str, outcome: Outcome, exit_code: u8) -> Run<'_> {
        Run {
            key,
            outcome,
            exit_code,
            started_at: at(1_795_921_200_012),
            duration: Duration::from_millis(412_877),
            nodes: None,
            shared: false,
            pings: None,
        }
    }

    fn state_with(runs: &[Run<'_>]) -> State {
        let mut state = State::default();
        for r in runs {
            state.apply(r);
        }
        state
    }

    fn key<'s>(state: &'s State, name: &str) -> &'s Key {
        state
            .keys
            .get(name)
            .unwrap_or_else(|| panic!("no key {name:?} in {state:?}"))
    }

    fn runs(state: &State, name: &str, outcome: &str) -> Option<u64> {
        key(state, name).runs.get(outcome).copied()
    }

    /// The state of a file that must be as the last run left it.
    fn read(path: &Path) -> State {
        let (state, found) = State::read(&std::fs::read(path).expect("read"));
        assert_eq!(found, Recorded::AsLeft, "{}", path.display());
        state
    }

    fn render(state: &State) -> String {
        state.render().expect("render")
    }

    /// The file without its state line.
    fn series(text: &str) -> &str {
        let (first, rest) = text.split_once('\n').expect("a state line");
        assert!(first.starts_with(STATE_LINE), "{first}");
        rest
    }

    #[test]
    fn renders_sorted_families_with_help_type_and_millisecond_seconds() {
        let mut report = run("report", Outcome::Ok, 0);
        report.nodes = Some(Nodes {
            answered: 3,
            failed: 0,
            refused: 0,
        });
        let text = render(&state_with(&[report]));
        let expected = "\
# HELP redlock_run_degraded_runs_total Runs in which at least one node failed or did not answer.
# TYPE redlock_run_degraded_runs_total counter
redlock_run_degraded_runs_total{key=\"report\"} 0
# HELP redlock_run_last_duration_seconds Duration of the last run that started its command.
# TYPE redlock_run_last_duration_seconds gauge
redlock_run_last_duration_seconds{key=\"report\"} 412.877
# HELP redlock_run_last_exit_code Exit status of the last run that started its command.
# TYPE redlock_run_last_exit_code gauge
redlock_run_last_exit_code{key=\"report\"} 0
# HELP redlock_run_last_nodes_answered Nodes that answered throughout the last run that reached the nodes.
# TYPE redlock_run_last_nodes_answered gauge
redlock_run_last_nodes_answered{key=\"report\"} 3
# HELP redlock_run_last_nodes_failed Nodes that failed or did not answer in the last run that reached the nodes.
# TYPE redlock_run_last_nodes_failed gauge
redlock_run_last_nodes_failed{key=\"report\"} 0
# HELP redlock_run_last_start_timestamp_seconds Unix time at which the last run that started its command began.
# TYPE redlock_run_last_start_timestamp_seconds gauge
redlock_run_last_start_timestamp_seconds{key=\"report\"} 1795921200.012
# HELP redlock_run_last_success_timestamp_seconds Unix time at which the last run whose command exited 0 ended.
# TYPE redlock_run_last_success_timestamp_seconds gauge
redlock_run_last_success_timestamp_seconds{key=\"report\"} 1795921612.889
# HELP redlock_run_refusals_total Releases, extensions and clean-ups a node refused, each leaving a key of the lock behind until it expired.
# TYPE redlock_run_refusals_total counter
redlock_run_refusals_total{key=\"report\"} 0
# HELP redlock_run_runs_total Runs by outcome: ok, failed, signal, not-run, busy, already-ran, unavailable, lost, timeout.
# TYPE redlock_run_runs_total counter
redlock_run_runs_total{key=\"report\",outcome=\"already-ran\"} 0
redlock_run_runs_total{key=\"report\",outcome=\"busy\"} 0
redlock_run_runs_total{key=\"report\",outcome=\"failed\"} 0
redlock_run_runs_total{key=\"report\",outcome=\"lost\"} 0
redlock_run_runs_total{key=\"report\",outcome=\"not-run\"} 0
redlock_run_runs_total{key=\"report\",outcome=\"ok\"} 1
redlock_run_runs_total{key=\"report\",outcome=\"signal\"} 0
redlock_run_runs_total{key=\"report\",outcome=\"timeout\"} 0
redlock_run_runs_total{key=\"report\",outcome=\"unavailable\"} 0
";
        assert_eq!(series(&text), expected);
        let names: Vec<&str> = FAMILIES.iter().map(|f| f.name).collect();
        let mut sorted = names.clone();
        sorted.sort_unstable();
        assert_eq!(
            names, sorted,
            "FAMILIES is the output order: keep it sorted"
        );
        // Whole seconds keep their decimals: always a float, always to the ms.
        let mut whole = run("w", Outcome::Ok, 0);
        whole.started_at = at(1_000);
        whole.duration = Duration::from_secs(2);
        let text = render(&state_with(&[whole]));
        assert!(text.contains("redlock_run_last_start_timestamp_seconds{key=\"w\"} 1.000\n"));
        assert!(text.contains("redlock_run_last_duration_seconds{key=\"w\"} 2.000\n"));
        assert!(text.contains("redlock_run_last_success_timestamp_seconds{key=\"w\"} 3.000\n"));
        for (ms, shown) in [
            (0, "0.000"),
            (5, "0.005"),
            (-1_500, "-1.500"),
            (-7, "-0.007"),
        ] {
            assert_eq!(seconds(ms), shown);
        }
        // Before 1970 (a clock set wrong): negative, still to the ms.
        assert_eq!(unix_ms(UNIX_EPOCH - Duration::from_millis(2_345)), -2_345);
        // No run, no family: an empty state is its line alone.
        assert_eq!(series(&render(&State::default())), "");
    }

    #[test]
    fn the_state_line_is_one_json_object_with_these_fields() {
        let mut r = run("report", Outcome::Ok, 0);
        r.nodes = Some(Nodes {
            answered: 2,
            failed: 1,
            refused: 2,
        });
        let mut reader = run("report", Outcome::Busy, 75);
        reader.shared = true;
        let text = render(&state_with(&[r, reader]));
        let first = text.lines().next().expect("a line");
        // What a version that reads this file relies on: these names.
        let zeros = |but: &str| {
            let words = [
                "already-ran",
                "busy",
                "failed",
                "lost",
                "not-run",
                "ok",
                "signal",
                "timeout",
                "unavailable",
            ];
            let counts: Vec<String> = words
                .iter()
                .map(|w| format!("\"{w}\":{}", u8::from(*w == but)))
                .collect();
            format!("{{{}}}", counts.join(","))
        };
        assert_eq!(
            first,
            format!(
                "# redlock-run state: {{\"keys\":{{\"report\":{{\"runs\":{},\"shared_runs\":{},\
                 \"degraded_runs\":1,\"refusals\":2,\"nodes\":{{\"answered\":2,\"failed\":1,\
                 \"refused\":2}},\"command\":\
                 {{\"exit_code\":0,\"start_ms\":1795921200012,\"duration_ms\":412877}},\
                 \"last_success_ms\":1795921612889}}}}}}",
                zeros("ok"),
                zeros("busy")
            )
        );
    }

    #[test]
    fn label_values_are_escaped_and_the_state_line_stays_one_line() {
        let key = "we\"ird\\key\nnext line ключ ✓\t\r\u{2028}";
        let state = state_with(&[run(key, Outcome::Failed, 3)]);
        let text = render(&state);
        assert!(
            text.contains(
                "redlock_run_last_exit_code{key=\"we\\\"ird\\\\key\\nnext line ключ ✓\t\r\u{2028}\"} 3\n"
            ),
            "{text}"
        );
        // The line feed is escaped in the JSON too: the state is one line.
        let first = text.lines().next().expect("a line");
        assert!(
            first.contains(r#""we\"ird\\key\nnext line ключ ✓\t\r"#),
            "{first}"
        );
        assert_eq!(
            text.lines().filter(|l| l.starts_with('#')).count(),
            1 + 2 * 6
        );
        let (back, found) = State::read(text.as_bytes());
        assert_eq!(found, Recorded::AsLeft);
        assert_eq!(back, state);
        assert_eq!(escape("a\\\"\n"), "a\\\\\\\"\\n");
    }

    #[test]
    fn readers_runs_are_counted_under_lock_shared_before_the_writers() {
        let mut reader = run("k", Outcome::Ok, 0);
        reader.shared = true;
        let state = state_with(&[reader.clone(), run("k", Outcome::Busy, 75), reader]);
        let k = key(&state, "k");
        assert_eq!(k.shared_runs.get("ok"), Some(&2));
        assert_eq!(k.shared_runs.get("busy"), Some(&0));
        assert_eq!(k.runs.get("busy"), Some(&1));
        assert_eq!(k.runs.get("ok"), Some(&0));
        let text = render(&state);
        let lines: Vec<&str> = text
            .lines()
            .filter(|l| l.starts_with("redlock_run_runs_total"))
            .collect();
        assert_eq!(lines.len(), 18, "{text}");
        assert_eq!(
            lines[0],
            "redlock_run_runs_total{key=\"k\",lock=\"shared\",outcome=\"already-ran\"} 0"
        );
        assert!(
            lines.contains(&"redlock_run_runs_total{key=\"k\",lock=\"shared\",outcome=\"ok\"} 2")
        );
        assert_eq!(
            lines[9],
            "redlock_run_runs_total{key=\"k\",outcome=\"already-ran\"} 0"
        );
        assert!(lines.contains(&"redlock_run_runs_total{key=\"k\",outcome=\"busy\"} 1"));
        // Writers alone: no lock label anywhere, no readers' series.
        let writers = render(&state_with(&[run("w", Outcome::Ok, 0)]));
        assert!(!series(&writers).contains("lock="), "{writers}");
        // Every other family is the key's, readers' runs or not.
        assert!(text.contains("redlock_run_last_exit_code{key=\"k\"} 0\n"));
    }

    #[test]
    fn the_state_survives_its_round_trip_through_the_file() {
        let mut nodes = run("a", Outcome::Failed, 1);
        nodes.nodes = Some(Nodes {
            answered: 1,
            failed: 2,
            refused: 1,
        });
        let mut reader = run("c", Outcome::Ok, 0);
        reader.shared = true;
        let mut early = run("", Outcome::Timeout, 124);
        early.started_at = UNIX_EPOCH - Duration::from_millis(1);
        let state = state_with(&[
            run("a", Outcome::Ok, 0),
            run("b\"\\\n{x=\"y\"}", Outcome::Lost, 76),
            nodes,
            run("c", Outcome::Busy, 75),
            reader,
            early,
        ]);
        let text = render(&state);
        let (back, found) = State::read(text.as_bytes());
        assert_eq!(found, Recorded::AsLeft);
        assert_eq!(back, state);
        assert_eq!(render(&back), text, "rendering is a fixed point");
        // A run on top of what was read is the run on top of the original.
        let mut again = back;
        again.apply(&run("a", Outcome::Ok, 0));
        let mut direct = state;
        direct.apply(&run("a", Outcome::Ok, 0));
        assert_eq!(again, direct);
        assert_eq!(runs(&direct, "a", "ok"), Some(2));
    }

    #[test]
    fn a_file_of_an_older_version_starts_over_with_one_warning() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("cron.prom");
        // What versions before the state line wrote: their series among
        // another job's lines.
        let old = "# HELP backup_ok Whether the backup worked.\n\
                   # TYPE backup_ok gauge\n\
                   backup_ok{host=\"db1\"} 1\n\
                   # HELP redlock_run_runs_total Runs by outcome: ok, failed.\n\
                   # TYPE redlock_run_runs_total counter\n\
                   redlock_run_runs_total{key=\"k\",outcome=\"ok\"} 41\n\
                   redlock_run_runs_total{key=\"k\",outcome=\"ran\"} 7\n";
        std::fs::write(&path, old).expect("write");
        let recorded = record(&path, &run("k", Outcome::Ok, 0)).expect("record");
        assert_eq!(recorded, Recorded::NoState);
        let warning = recorded.warning(&path).expect("a warning");
        assert!(
            warning.starts_with(&format!("{}: ", path.display())),
            "{warning}"
        );
        assert!(warning.contains("start over from 0"), "{warning}");
        assert!(warning.contains("other lines are dropped"), "{warning}");
        let text = std::fs::read_to_string(&path).expect("read");
        assert_eq!(text, render(&state_with(&[run("k", Outcome::Ok, 0)])));
        assert!(
            !text.contains("backup_ok") && !text.contains("\"ran\""),
            "{text}"
        );
        // The next run finds the file as it was left: no warning, counting on.
        let again = record(&path, &run("k", Outcome::Ok, 0)).expect("record");
        assert_eq!(again, Recorded::AsLeft);
        assert_eq!(again.warning(&path), None);
        assert_eq!(runs(&read(&path), "k", "ok"), Some(2));
    }

    #[test]
    fn a_state_line_that_does_not_read_starts_over_with_one_warning() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("cron.prom");
        let good = render(&state_with(&[run("k", Outcome::Ok, 0)]));
        for (garbage, why) in [
            // Cut short.
            (
                good[..good.find("\"degraded").expect("field")].to_string(),
                "EOF",
            ),
            // A count edited to a negative number.
            (good.replacen("\"ok\":1", "\"ok\":-1", 1), "invalid value"),
            // Not JSON at all, and a line that is no metric below it.
            (
                format!("{STATE_LINE}counts: 12\nthis is not a metric line {{\n"),
                "column 22: expected value",
            ),
        ] {
            std::fs::write(&path, &garbage).expect("write");
            let recorded = record(&path, &run("k", Outcome::Busy, 75)).expect("record");
            let Recorded::BadState(ref e) = recorded else {
                panic!("{recorded:?} for {garbage:?}");
            };
            assert!(e.starts_with("line 1, column ") && e.contains(why), "{e}");
            let warning = recorded.warning(&path).expect("a warning");
            assert!(warning.contains("cron.prom"), "{warning}");
            assert!(warning.contains("cannot be read"), "{warning}");
            assert!(warning.contains("start over from 0"), "{warning}");
            // Started over: the busy run alone, and the file as ours again.
            let state = read(&path);
            assert_eq!(state, state_with(&[run("k", Outcome::Busy, 75)]));
            let again = record(&path, &run("k", Outcome::Busy, 75)).expect("record");
            assert_eq!(again.warning(&path), None, "one warning, not one a run");
        }
    }

    #[test]
    fn a_file_edited_below_its_state_line_is_rewritten_and_counts_go_on() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("cron.prom");
        let _ = record(&path, &run("k", Outcome::Ok, 0)).expect("record");
        let text = std::fs::read_to_string(&path).expect("read");
        for edited in [
            // A line appended by another job.
            format!("{text}backup_ok 1\n"),
            // A series deleted by hand.
            text.replace("redlock_run_last_exit_code{key=\"k\"} 0\n", ""),
            // A comment put above the state line.
            format!("# managed by cron\n{text}"),
        ] {
            std::fs::write(&path, &edited).expect("write");
            let before = runs(&State::read(edited.as_bytes()).0, "k", "ok").expect("ok");
            let recorded = record(&path, &run("k", Outcome::Ok, 0)).expect("record");
            assert_eq!(recorded, Recorded::Rewritten, "{edited}");
            let warning = recorded.warning(&path).expect("a warning");
            assert!(warning.contains("not as redlock-run left it"), "{warning}");
            let state = read(&path);
            assert_eq!(runs(&state, "k", "ok"), Some(before + 1), "counts go on");
            let now = std::fs::read_to_string(&path).expect("read");
            assert!(
                !now.contains("backup_ok") && !now.contains("managed"),
                "{now}"
            );
            assert!(now.contains("redlock_run_last_exit_code{key=\"k\"} 0\n"));
        }
        // An empty file (made with touch, say) is a new one, without a word.
        std::fs::write(&path, "").expect("write");
        assert_eq!(
            record(&path, &run("k", Outcome::Ok, 0)).expect("record"),
            Recorded::AsLeft
        );
        assert_eq!(runs(&read(&path), "k", "ok"), Some(1));
    }

    #[test]
    fn two_keys_are_counted_independently() {
        let mut state = state_with(&[run("a", Outcome::Ok, 0)]);
        let a_before = state.keys["a"].clone();
        let mut b = run("b", Outcome::Failed, 2);
        b.started_at = at(2_000_000_000_000);
        b.duration = Duration::from_millis(5);
        state.apply(&b);
        assert_eq!(state.keys["a"], a_before, "a's series kept");
        let text = render(&state);
        assert!(
            text.contains("redlock_run_last_start_timestamp_seconds{key=\"b\"} 2000000000.000\n")
        );
        assert!(text.contains("redlock_run_last_duration_seconds{key=\"b\"} 0.005\n"));
        assert!(text.contains("redlock_run_last_exit_code{key=\"b\"} 2\n"));
        assert_eq!(key(&state, "b").last_success_ms, None, "b never succeeded");
        assert!(!text.contains("redlock_run_last_success_timestamp_seconds{key=\"b\"}"));
        assert_eq!(runs(&state, "b", "failed"), Some(1));
        assert_eq!(runs(&state, "a", "ok"), Some(1));
    }

    #[test]
    fn counters_accumulate_across_invocations() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("cron.prom");
        for outcome in [Outcome::Ok, Outcome::Busy, Outcome::Ok, Outcome::Busy] {
            let recorded = record(&path, &run("k", outcome, 0)).expect("record");
            assert_eq!(recorded, Recorded::AsLeft);
        }
        let _ = record(&path, &run("k", Outcome::Busy, 75)).expect("record");
        let state = read(&path);
        assert_eq!(runs(&state, "k", "ok"), Some(2));
        assert_eq!(runs(&state, "k", "busy"), Some(3));
        assert_eq!(runs(&state, "k", "lost"), Some(0));
        use std::os::unix::fs::PermissionsExt;
        let lock = std::fs::metadata(dir.path().join("cron.prom.lock")).expect("lock file");
        assert!(lock.is_file());
        assert_eq!(
            lock.permissions().mode() & 0o7777 & !0o644,
            0,
            "at most 0644"
        );
    }

    #[test]
    fn busy_unavailable_and_already_ran_move_no_command_gauge() {
        let first = run("k", Outcome::Ok, 0);
        for outcome in [Outcome::Busy, Outcome::Unavailable, Outcome::AlreadyRan] {
            let mut state = state_with(std::slice::from_ref(&first));
            let before = key(&state, "k");
            let gauges_before = (before.command, before.last_success_ms);
            let mut later = run("k", outcome, 9);
            later.started_at = at(1_900_000_000_000);
            state.apply(&later);
            let after = key(&state, "k");
            assert_eq!(
                (after.command, after.last_success_ms),
                gauges_before,
                "{outcome:?}"
            );
            assert_eq!(runs(&state, "k", outcome.word()), Some(1));
            // Alone, such a run makes no gauge at all.
            let alone = state_with(&[later]);
            let k = key(&alone, "k");
            assert_eq!((k.command, k.last_success_ms, k.nodes), (None, None, None));
            assert_eq!(runs(&alone, "k", outcome.word()), Some(1));
            let text = render(&alone);
            assert!(!text.contains("_last_"), "{text}");
        }
    }

    #[test]
    fn every_run_that_reached_the_nodes_moves_the_node_gauges() {
        let nodes = |answered, failed| {
            Some(Nodes {
                answered,
                failed,
                refused: 0,
            })
        };
        let mut state = State::default();
        let mut steps = vec![
            // (outcome, nodes, answered, failed, degraded runs so far)
            (Outcome::Ok, nodes(3, 0), 3, 0, 0),
            (Outcome::Busy, nodes(2, 1), 2, 1, 1),
            (Outcome::Failed, nodes(3, 0), 3, 0, 1),
            (Outcome::Unavailable, nodes(1, 2), 1, 2, 2),
            (Outcome::AlreadyRan, nodes(3, 0), 3, 0, 2),
            (Outcome::Lost, nodes(2, 1), 2, 1, 3),
        ];
        // A run that never reached the nodes leaves the gauges as they were.
        steps.push((Outcome::Signal, None, 2, 1, 3));
        for (outcome, n, answered, failed, degraded) in steps {
            let mut r = run("k", outcome, 0);
            r.nodes = n;
            state.apply(&r);
            let k = key(&state, "k");
            assert_eq!(
                k.nodes,
                Some(Nodes {
                    answered,
                    failed,
                    refused: 0
                }),
                "{outcome:?}"
            );
            assert_eq!(k.degraded_runs, degraded, "{outcome:?}");
        }
        // The counter is there, at 0, from a key's first run, whatever it was.
        let fresh = state_with(&[run("new", Outcome::Busy, 75)]);
        assert!(render(&fresh).contains("redlock_run_degraded_runs_total{key=\"new\"} 0\n"));
        let text = render(&state);
        for line in [
            "redlock_run_last_nodes_answered{key=\"k\"} 2\n",
            "redlock_run_last_nodes_failed{key=\"k\"} 1\n",
            "redlock_run_degraded_runs_total{key=\"k\"} 3\n",
        ] {
            assert!(text.contains(line), "{line}{text}");
        }
    }

    #[test]
    fn nodes_count_as_failed_as_the_closing_warning_names_them() {
        use crate::lock::NodeVote;
        use crate::lock::node::Fared;
        let node = |acquire, fared| NodeOutcome {
            name: "redis://n".into(),
            acquire,
            fared,
            recovered: false,
            refused: Vec::new(),
        };
        let outcomes = [
            node(NodeVote::Granted, Fared::Answered),
            node(NodeVote::Refused, Fared::Answered),
            // Answered the acquire, failed an extension later.
            node(NodeVote::Granted, Fared::Failed("timed out".into())),
            node(
                NodeVote::Error("refused".into()),
                Fared::Failed("refused".into()),
            ),
            node(NodeVote::NoAnswer, Fared::Silent),
            // Still connecting when a short run ended, within its timeout.
            node(NodeVote::NoAnswer, Fared::Pending),
        ];
        assert_eq!(
            Nodes::of(&outcomes),
            Nodes {
                answered: 3,
                failed: 3,
                refused: 0
            }
        );
        let warned = outcomes.iter().filter(|o| o.failure().is_some()).count();
        assert_eq!(warned, 3);
        // A node that refused the release answered: it is counted apart.
        let mut refusing = node(NodeVote::Granted, Fared::Answered);
        refusing.refused = vec!["release: the ACL refuses DEL".into()];
        assert_eq!(
            Nodes::of(&[refusing]),
            Nodes {
                answered: 1,
                failed: 0,
                refused: 1
            }
        );
        assert_eq!(Nodes::of(&[]), Nodes::default());
    }

    #[test]
    fn only_a_run_that_exited_0_moves_the_last_success() {
        let ok = run("k", Outcome::Ok, 0);
        let mut state = state_with(&[ok]);
        let success = key(&state, "k").last_success_ms;
        assert_eq!(success, Some(1_795_921_612_889));
        for (outcome, code) in [
            (Outcome::Failed, 1),
            (Outcome::Lost, 76),
            (Outcome::Timeout, 124),
        ] {
            let mut failed = run("k", outcome, code);
            failed.started_at = at(1_900_000_000_000);
            state.apply(&failed);
            let k = key(&state, "k");
            assert_eq!(k.last_success_ms, success);
            let command = k.command.expect("a command ran");
            assert_eq!(command.exit_code, code);
            assert_eq!(command.start_ms, 1_900_000_000_000);
        }
    }

    #[test]
    fn runs_are_counted_by_their_outcome_and_usage_errors_not_at_all() {
        let from = |e| Run::from_exit("k", e, false, at(0), Duration::ZERO, None);
        assert!(from(Exit::Usage).is_none());
        let r = from(Exit::Signal(9)).expect("run");
        assert_eq!((r.outcome, r.exit_code), (Outcome::Signal, 137));
        let state = state_with(&[r]);
        assert_eq!(runs(&state, "k", "signal"), Some(1));
        assert_eq!(key(&state, "k").command.map(|c| c.exit_code), Some(137));
        // Every outcome but usage has its counter from the first run on.
        let counted: Vec<&str> = key(&state, "k").runs.keys().map(String::as_str).collect();
        assert_eq!(
            counted,
            [
                "already-ran",
                "busy",
                "failed",
                "lost",
                "not-run",
                "ok",
                "signal",
                "timeout",
                "unavailable"
            ]
        );
        // -E 0: a busy run exits 0 but is no success.
        let busy = from(Exit::Busy(0)).expect("run");
        assert_eq!(key(&state_with(&[busy]), "k").last_success_ms, None);
    }

    #[test]
    fn a_symlink_at_the_lock_file_is_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let victim = dir.path().join("victim");
        std::fs::write(&victim, "keep").expect("victim");
        let path = dir.path().join("cron.prom");
        let lock = dir.path().join("cron.prom.lock");
        std::os::unix::fs::symlink(&victim, &lock).expect("symlink");
        let err = record(&path, &run("k", Outcome::Ok, 0)).expect_err("refused");
        let msg = err.to_string();
        assert!(msg.contains(&lock.display().to_string()), "{msg}");
        assert!(msg.contains("symlink"), "{msg}");
        assert_eq!(std::fs::read_to_string(&victim).expect("victim"), "keep");
        assert!(!path.exists(), "nothing written without the lock");
        // Dangling, pointing where the attacker wants a file created: refused
        // too, and nothing is created there.
        std::fs::remove_file(&lock).expect("rm");
        let planted = dir.path().join("created-by-us");
        std::os::unix::fs::symlink(&planted, &lock).expect("symlink");
        assert!(record(&path, &run("k", Outcome::Ok, 0)).is_err());
        assert!(!planted.exists());
        // A FIFO is refused without hanging.
        std::fs::remove_file(&lock).expect("rm");
        rustix::fs::mkfifoat(
            rustix::fs::CWD,
            &lock,
            rustix::fs::Mode::from_raw_mode(0o600),
        )
        .expect("mkfifo");
        let err = record(&path, &run("k", Outcome::Ok, 0)).expect_err("refused");
        assert!(err.to_string().contains("not a regular file"), "{err}");
    }

    #[test]
    fn the_check_refuses_what_record_would_refuse() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("cron.prom");
        assert!(check(&path).is_ok(), "a new file");
        let _ = record(&path, &run("k", Outcome::Ok, 0)).expect("record");
        assert!(
            check(&path).is_ok(),
            "the file and its lock file, as record left them"
        );
        let why = |p: &Path| check(p).expect_err("refused").to_string();
        // What any file redlock-run writes is refused for.
        assert_eq!(why(dir.path()), "it is a directory");
        // A symlink: record does not read through one.
        let link = dir.path().join("link.prom");
        std::os::unix::fs::symlink(&path, &link).expect("symlink");
        assert!(why(&link).contains("symlink"));
        assert!(record(&link, &run("k", Outcome::Ok, 0)).is_err());
        // A lock file that is not a regular file.
        let other = dir.path().join("other.prom");
        std::fs::create_dir(dir.path().join("other.prom.lock")).expect("dir");
        let msg = why(&other);
        assert!(
            msg.contains("other.prom.lock is not a regular file"),
            "{msg}"
        );
        assert!(record(&other, &run("k", Outcome::Ok, 0)).is_err());
    }

    #[test]
    fn a_symlink_at_the_metrics_file_is_not_read_through() {
        let dir = tempfile::tempdir().expect("tempdir");
        let secret = dir.path().join("secret");
        std::fs::write(&secret, "token_value 42\n").expect("secret");
        let path = dir.path().join("cron.prom");
        std::os::unix::fs::symlink(&secret, &path).expect("symlink");
        let err = record(&path, &run("k", Outcome::Ok, 0)).expect_err("refused");
        assert!(
            err.to_string().contains(&path.display().to_string()),
            "{err}"
        );
        assert!(err.to_string().contains("symlink"), "{err}");
        assert_eq!(
            std::fs::read_to_string(&secret).expect("secret"),
            "token_value 42\n"
        );
    }

    #[test]
    fn a_lock_held_too_long_is_an_error_naming_the_lock_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("cron.prom");
        let held = lock(&lock_path(&path).expect("lock path"), LOCK_WAIT).expect("lock");
        let started = Instant::now();
        let err = record_waiting(&path, &run("k", Outcome::Ok, 0), Duration::from_millis(100))
            .expect_err("timed out");
        assert_eq!(err.kind(), io::ErrorKind::TimedOut);
        assert!(err.to_string().contains("cron.prom.lock"), "{err}");
        assert!(started.elapsed() >= Duration::from_millis(100));
        assert!(!path.exists());
        drop(held);
        let _ = record(&path, &run("k", Outcome::Ok, 0)).expect("free again");
    }

    #[test]
    fn errors_name_the_path() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("no/such/dir/cron.prom");
        let err = record(&path, &run("k", Outcome::Ok, 0)).expect_err("no dir");
        assert!(err.to_string().contains("no/such/dir/cron.prom"), "{err}");
        let err = record(Path::new("/"), &run("k", Outcome::Ok, 0)).expect_err("no name");
        assert!(err.to_string().starts_with("/: "), "{err}");
        // Directory in place of the file.
        let path = dir.path().join("d.prom");
        std::fs::create_dir(&path).expect("dir");
        let err = record(&path, &run("k", Outcome::Ok, 0)).expect_err("a directory");
        assert!(err.to_string().contains("d.prom"), "{err}");
    }

    #[test]
    fn concurrent_writers_lose_no_increment() {
        const THREADS: usize = 8;
        const EACH: usize = 25;
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("cron.prom");
        std::thread::scope(|s| {
            for t in 0..THREADS {
                let path = &path;
                s.spawn(move || {
                    let key = if t.is_multiple_of(2) { "even" } else { "odd" };
                    for i in 0..EACH {
                        let outcome = if i.is_multiple_of(3) {
                            Outcome::Busy
                        } else {
                            Outcome::Ok
                        };
                        let _ = record(path, &run(key, outcome, 0)).expect("record");
                    }
                });
            }
        });
        let state = read(&path);
        let busy_each = EACH.div_ceil(3);
        for key in ["even", "odd"] {
            let writers = (THREADS / 2) as u64;
            assert_eq!(runs(&state, key, "busy"), Some(writers * busy_each as u64));
            assert_eq!(
                runs(&state, key, "ok"),
                Some(writers * (EACH - busy_each) as u64)
            );
        }
        let total: u64 = state.keys.values().flat_map(|k| k.runs.values()).sum();
        assert_eq!(total, (THREADS * EACH) as u64);
    }
}
