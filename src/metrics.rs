//! `--metrics-file PATH`: node_exporter textfile-collector metrics for a lock
//! key, so that Prometheus can alert when a job's last success grows stale:
//!
//! ```text
//! time() - redlock_run_last_success_timestamp_seconds{key="nightly-report"} > 26 * 3600
//! ```
//!
//! The file is shared: by every run of a key (the counters accumulate), by
//! several keys, and by anything else an operator put there. [`record`] reads
//! it, replaces or increments only the series of its own key, keeps the rest,
//! and writes it back, under a flock(2) on `<PATH>.lock` so that concurrent
//! runs on the host lose no increment (shown in part: the command's
//! `last_duration_seconds`, `last_exit_code` and `last_start_timestamp_seconds`
//! gauges, and most outcome counters, are left out here):
//!
//! ```text
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
//! The outcomes are [`Outcome`]'s words, as `--report`, the history and the
//! JSON log write them. A key's outcome counters (every outcome but `usage`,
//! which is not a run) and its degraded-runs counter all appear (at 0) with
//! its first run: a series that is born at 1 hides that first increment from
//! `increase()`. A key that never succeeded has no `last_success` series at
//! all, rather than a made-up 0; an alert should pair the staleness rule with
//! `absent()`.
//!
//! The node gauges are how the last run that reached the nodes found them,
//! busy and unavailable runs included: on most hosts of a cron fleet every
//! run is busy, and those runs see the nodes all the same. `-q` silences the
//! warning a run prints for a node that failed; this is where it still shows.
//!
//! Lines that are not valid text exposition format (garbage, a line cut short)
//! are dropped, and [`Recorded`] says which: node_exporter rejects a whole
//! file for one bad line, so keeping them would keep every metric in the file
//! invisible for good, whereas dropping them repairs the file with the first
//! write and loses nothing any scraper could have read.

use std::collections::BTreeMap;
use std::ffi::{CString, OsString};
use std::fs::{File, OpenOptions};
use std::io::{self, Read};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::io::{AsRawFd, FromRawFd};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

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
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Nodes {
    pub answered: u32,
    pub failed: u32,
}

impl Nodes {
    pub fn of(outcomes: &[NodeOutcome]) -> Nodes {
        let count = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);
        let failed = outcomes.iter().filter(|o| o.failure().is_some()).count();
        Nodes {
            answered: count(outcomes.len() - failed),
            failed: count(failed),
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
        })
    }
}

/// What [`record`] found in the file besides what it wrote.
#[must_use = "dropped lines should be reported: see Recorded::warning"]
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Recorded {
    /// Line numbers (from 1) of the lines that were not valid text exposition
    /// format and were left out of the new file.
    pub dropped_lines: Vec<usize>,
}

impl Recorded {
    /// A line for the log when lines were dropped from `path`.
    pub fn warning(&self, path: &Path) -> Option<String> {
        let first = self.dropped_lines.first()?;
        Some(format!(
            "{}: dropped {} line(s) that were not Prometheus text format (first: line {first})",
            path.display(),
            self.dropped_lines.len(),
        ))
    }
}

/// Records `run` in the textfile-collector file `path`: increments the key's
/// counter for the run's outcome (and its degraded-runs counter when a node
/// failed), replaces the node gauges when the run reached the nodes, and,
/// for a run that started its command, the key's other `last_*` gauges
/// (`last_success` only when it exited 0). Every other series and line in
/// the file is kept.
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
/// let nodes = Some(metrics::Nodes { answered: 3, failed: 0 });
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
/// file redlock-run writes, and what merging needs besides: the file is
/// read (never through a symlink), and its lock file beside it is a regular
/// file or nothing yet. The error says what is wrong, without the path.
pub fn check(path: &Path) -> io::Result<()> {
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
        if crate::files::access(path, libc::R_OK).is_err() {
            return Err(refused(
                "this user may not read it, and the counts in it would be lost".into(),
            ));
        }
    }
    let lock = lock_path(path)?;
    match std::fs::symlink_metadata(&lock) {
        Ok(meta) if meta.file_type().is_file() => {
            crate::files::access(&lock, libc::R_OK).map_err(|_| {
                refused(format!(
                    "this user may not read its lock file {}",
                    lock.display()
                ))
            })
        }
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
    let mut doc = Doc::parse(&read_existing(path)?);
    doc.apply(run);
    crate::files::write_atomically(path, doc.render().as_bytes()).map_err(|e| named(path, e))?;
    Ok(Recorded {
        dropped_lines: doc.dropped,
    })
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
        libc::O_RDONLY | libc::O_CREAT | libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK;
    // SAFETY: open(2) on a NUL-terminated path; the mode is the variadic
    // argument O_CREAT needs, passed promoted as C does.
    let fd = unsafe { libc::open(c_path.as_ptr(), flags, 0o644 as libc::c_uint) };
    if fd < 0 {
        return Err(refuse_symlink(path, io::Error::last_os_error()));
    }
    // SAFETY: fd was just opened and nothing else owns it.
    let file = unsafe { File::from_raw_fd(fd) };
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
        // SAFETY: flock on a descriptor we own for the duration of the call.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
            return Ok(file);
        }
        let e = io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EINTR) => continue,
            Some(libc::EWOULDBLOCK) => {}
            _ => return Err(named(path, e)),
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
/// so following it would merge someone else's file into ours, readable by
/// all, and silently cut the link. Refused instead, for a person to look at.
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

/// One metric family redlock-run owns: every HELP, TYPE and sample line of
/// this name in the file is ours to rewrite.
struct Family {
    name: &'static str,
    kind: &'static str,
    help: &'static str,
    /// Rendered with exactly three decimals (milliseconds).
    seconds: bool,
}

// Index into FAMILIES; the array is sorted by name, which is the output order.
const DEGRADED: usize = 0;
const DURATION: usize = 1;
const EXIT_CODE: usize = 2;
const ANSWERED: usize = 3;
const FAILED: usize = 4;
const START: usize = 5;
const SUCCESS: usize = 6;
const RUNS: usize = 7;

const FAMILIES: [Family; 8] = [
    Family {
        name: "redlock_run_degraded_runs_total",
        kind: "counter",
        help: "Runs in which at least one node failed or did not answer.",
        seconds: false,
    },
    Family {
        name: "redlock_run_last_duration_seconds",
        kind: "gauge",
        help: "Duration of the last run that started its command.",
        seconds: true,
    },
    Family {
        name: "redlock_run_last_exit_code",
        kind: "gauge",
        help: "Exit status of the last run that started its command.",
        seconds: false,
    },
    Family {
        name: "redlock_run_last_nodes_answered",
        kind: "gauge",
        help: "Nodes that answered throughout the last run that reached the nodes.",
        seconds: false,
    },
    Family {
        name: "redlock_run_last_nodes_failed",
        kind: "gauge",
        help: "Nodes that failed or did not answer in the last run that reached the nodes.",
        seconds: false,
    },
    Family {
        name: "redlock_run_last_start_timestamp_seconds",
        kind: "gauge",
        help: "Unix time at which the last run that started its command began.",
        seconds: true,
    },
    Family {
        name: "redlock_run_last_success_timestamp_seconds",
        kind: "gauge",
        help: "Unix time at which the last run whose command exited 0 ended.",
        seconds: true,
    },
    Family {
        name: "redlock_run_runs_total",
        kind: "counter",
        help: "Runs by outcome: ok, failed, signal, not-run, busy, already-ran, unavailable, \
               lost, timeout.",
        seconds: false,
    },
];

/// Label pairs, sorted by name: one series, whatever order a file wrote its
/// labels in.
type Labels = Vec<(String, String)>;

/// The file as merged: the lines we do not own, verbatim and in order, our
/// families' series, and where our block goes among the other lines.
#[derive(Debug, Default, PartialEq)]
struct Doc {
    foreign: Vec<String>,
    /// Index into `foreign` before which our block is written: where the
    /// first line of ours was, so a file someone appends to stays in place.
    block_at: Option<usize>,
    series: [BTreeMap<Labels, f64>; FAMILIES.len()],
    dropped: Vec<usize>,
}

impl Doc {
    fn parse(contents: &[u8]) -> Doc {
        let mut doc = Doc::default();
        let mut lines: Vec<&[u8]> = contents.split(|&b| b == b'\n').collect();
        if lines.last().is_some_and(|l| l.is_empty()) {
            lines.pop();
        }
        for (i, raw) in lines.into_iter().enumerate() {
            let parsed = std::str::from_utf8(raw)
                .ok()
                .and_then(|line| Some((line, parse_line(line)?)));
            let Some((line, parsed)) = parsed else {
                doc.dropped.push(i + 1);
                continue;
            };
            let family = match &parsed {
                Line::Meta(name) | Line::Sample { name, .. } => {
                    FAMILIES.iter().position(|f| f.name == *name)
                }
                Line::Other => None,
            };
            let Some(family) = family else {
                doc.foreign.push(line.to_string());
                continue;
            };
            doc.block_at.get_or_insert(doc.foreign.len());
            if let Line::Sample {
                mut labels, value, ..
            } = parsed
            {
                labels.sort();
                // A duplicate series is invalid anyway; the last one wins.
                doc.series[family].insert(labels, value);
            }
        }
        doc
    }

    /// The semantics of one run, in one place: the counters always, the
    /// node gauges for a run that reached the nodes, the others only for a
    /// run that started its command.
    fn apply(&mut self, run: &Run<'_>) {
        let key = || vec![("key".to_string(), run.key.to_string())];
        let with_outcome = |o: Outcome| {
            let mut labels = key();
            if run.shared {
                labels.push(("lock".to_string(), "shared".to_string()));
            }
            labels.push(("outcome".to_string(), o.word().to_string()));
            labels.sort();
            labels
        };
        for o in Outcome::ALL {
            if o != Outcome::Usage {
                self.series[RUNS].entry(with_outcome(o)).or_insert(0.0);
            }
        }
        bump(
            self.series[RUNS]
                .entry(with_outcome(run.outcome))
                .or_insert(0.0),
        );
        let degraded = self.series[DEGRADED].entry(key()).or_insert(0.0);
        if let Some(nodes) = run.nodes {
            if nodes.failed > 0 {
                bump(degraded);
            }
            self.series[ANSWERED].insert(key(), f64::from(nodes.answered));
            self.series[FAILED].insert(key(), f64::from(nodes.failed));
        }
        if !run.outcome.started_command() {
            return;
        }
        let start = unix_seconds(run.started_at);
        let duration = millis(run.duration);
        self.series[EXIT_CODE].insert(key(), f64::from(run.exit_code));
        self.series[START].insert(key(), start);
        self.series[DURATION].insert(key(), duration);
        if run.exit_code == 0 {
            // The end: "fresh as of" is when the job finished its work.
            let end = run
                .started_at
                .checked_add(run.duration)
                .map_or(start + duration, unix_seconds);
            self.series[SUCCESS].insert(key(), end);
        }
    }

    fn render(&self) -> String {
        let mut block = String::new();
        for (family, series) in FAMILIES.iter().zip(&self.series) {
            if series.is_empty() {
                continue;
            }
            block.push_str(&format!("# HELP {} {}\n", family.name, family.help));
            block.push_str(&format!("# TYPE {} {}\n", family.name, family.kind));
            for (labels, value) in series {
                block.push_str(family.name);
                if !labels.is_empty() {
                    let pairs: Vec<String> = labels
                        .iter()
                        .map(|(n, v)| format!("{n}=\"{}\"", escape(v)))
                        .collect();
                    block.push_str(&format!("{{{}}}", pairs.join(",")));
                }
                block.push(' ');
                block.push_str(&format_value(*value, family.seconds));
                block.push('\n');
            }
        }
        let at = self.block_at.unwrap_or(self.foreign.len());
        let mut out = String::new();
        for (i, line) in self.foreign.iter().enumerate() {
            if i == at {
                out.push_str(&block);
            }
            out.push_str(line);
            out.push('\n');
        }
        if at >= self.foreign.len() {
            out.push_str(&block);
        }
        out
    }
}

/// Adds one to a counter. A value no counter can have (someone else's NaN,
/// a negative) is a reset, not a reason to write NaN forever.
fn bump(count: &mut f64) {
    *count = if count.is_finite() && *count >= 0.0 {
        *count + 1.0
    } else {
        1.0
    };
}

/// Unix seconds, to the millisecond.
fn unix_seconds(t: SystemTime) -> f64 {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => millis(d),
        Err(e) => -millis(e.duration()),
    }
}

fn millis(d: Duration) -> f64 {
    d.as_millis() as f64 / 1000.0
}

fn format_value(v: f64, seconds: bool) -> String {
    if v.is_nan() {
        "NaN".to_string()
    } else if v.is_infinite() {
        if v > 0.0 { "+Inf" } else { "-Inf" }.to_string()
    } else if seconds {
        format!("{v:.3}")
    } else if v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{}", v as i64)
    } else {
        format!("{v}")
    }
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

/// One line of the file, as far as merging needs to know it.
#[derive(Debug, PartialEq)]
enum Line<'a> {
    /// A blank line or a plain comment.
    Other,
    /// A HELP or TYPE line for this metric name.
    Meta(&'a str),
    Sample {
        name: &'a str,
        labels: Labels,
        value: f64,
    },
}

const BLANK: [char; 2] = [' ', '\t'];

/// A line of the Prometheus text format, or `None` for one that
/// node_exporter's parser (Go's expfmt) would reject, whose rules this
/// follows: blanks and tabs between tokens, a trailing comma in labels,
/// `\\` `\"` `\n` as the only escapes, an optional integer timestamp and
/// nothing after it. Only what one line shows is checked: a second TYPE for a
/// family, say, is left to the scraper.
fn parse_line(line: &str) -> Option<Line<'_>> {
    let s = line.trim_start_matches(BLANK);
    if s.is_empty() {
        return Some(Line::Other);
    }
    match s.strip_prefix('#') {
        Some(comment) => parse_comment(comment),
        None => parse_sample(s),
    }
}

fn parse_comment(comment: &str) -> Option<Line<'_>> {
    let (keyword, rest) = token(comment.trim_start_matches(BLANK));
    if keyword != "HELP" && keyword != "TYPE" {
        return Some(Line::Other);
    }
    let rest = rest.trim_start_matches(BLANK);
    let (name, rest) = split_name(rest, true);
    if name.is_empty() {
        return rest.is_empty().then_some(Line::Other);
    }
    if !rest.is_empty() && !rest.starts_with(BLANK) {
        return None;
    }
    let text = rest.trim_start_matches(BLANK);
    let valid = if text.is_empty() {
        true
    } else if keyword == "TYPE" {
        matches!(
            text.to_ascii_uppercase().as_str(),
            "COUNTER" | "GAUGE" | "SUMMARY" | "UNTYPED" | "HISTOGRAM" | "GAUGE_HISTOGRAM"
        )
    } else {
        unescape(text).is_some()
    };
    valid.then_some(Line::Meta(name))
}

fn parse_sample(s: &str) -> Option<Line<'_>> {
    let (name, rest) = split_name(s, true);
    if name.is_empty() {
        return None;
    }
    let rest = rest.trim_start_matches(BLANK);
    let (labels, rest) = match rest.strip_prefix('{') {
        Some(inner) => parse_labels(inner)?,
        None => (Vec::new(), rest),
    };
    let (value, rest) = token(rest.trim_start_matches(BLANK));
    let value = parse_float(value)?;
    if !rest.is_empty() {
        let (timestamp, rest) = token(rest.trim_start_matches(BLANK));
        timestamp.parse::<i64>().ok()?;
        if !rest.is_empty() {
            return None;
        }
    }
    Some(Line::Sample {
        name,
        labels,
        value,
    })
}

/// The labels after `{`, and what follows the closing `}`.
fn parse_labels(mut s: &str) -> Option<(Labels, &str)> {
    let mut labels: Labels = Vec::new();
    loop {
        s = s.trim_start_matches(BLANK);
        if let Some(rest) = s.strip_prefix('}') {
            return Some((labels, rest));
        }
        let (name, rest) = split_name(s, false);
        if name.is_empty() || name == "__name__" || labels.iter().any(|(n, _)| n == name) {
            return None;
        }
        let rest = rest.trim_start_matches(BLANK).strip_prefix('=')?;
        let rest = rest.trim_start_matches(BLANK).strip_prefix('"')?;
        let end = closing_quote(rest)?;
        labels.push((name.to_string(), unescape(&rest[..end])?));
        let rest = rest[end + 1..].trim_start_matches(BLANK);
        if let Some(rest) = rest.strip_prefix(',') {
            s = rest;
        } else if rest.starts_with('}') {
            s = rest;
        } else {
            return None;
        }
    }
}

/// The byte offset of the first `"` in `s` that no backslash escapes.
fn closing_quote(s: &str) -> Option<usize> {
    let mut escaped = false;
    for (i, b) in s.bytes().enumerate() {
        match b {
            _ if escaped => escaped = false,
            b'\\' => escaped = true,
            b'"' => return Some(i),
            _ => {}
        }
    }
    None
}

/// `s` with its escapes resolved; `None` for an escape the format does not
/// have (or a lone backslash at the end).
fn unescape(s: &str) -> Option<String> {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next()? {
            '\\' => out.push('\\'),
            'n' => out.push('\n'),
            '"' => out.push('"'),
            _ => return None,
        }
    }
    Some(out)
}

/// Splits off a metric name (`[a-zA-Z_:][a-zA-Z0-9_:]*`), or a label name
/// (the same without `:`), which may be empty.
fn split_name(s: &str, metric: bool) -> (&str, &str) {
    let ok = |i: usize, b: u8| {
        b.is_ascii_alphabetic()
            || b == b'_'
            || (metric && b == b':')
            || (i > 0 && b.is_ascii_digit())
    };
    let end = s
        .bytes()
        .enumerate()
        .find(|&(i, b)| !ok(i, b))
        .map_or(s.len(), |(i, _)| i);
    s.split_at(end)
}

/// Splits at the first blank or tab.
fn token(s: &str) -> (&str, &str) {
    s.split_at(s.find(BLANK).unwrap_or(s.len()))
}

/// A sample value: a float as Go's ParseFloat reads one (what Rust's parser
/// takes, `NaN`, `+Inf` and `-Inf` included).
fn parse_float(s: &str) -> Option<f64> {
    if s.is_empty() {
        return None;
    }
    s.parse().ok()
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
        }
    }

    fn doc_with(runs: &[Run<'_>]) -> Doc {
        let mut doc = Doc::default();
        for r in runs {
            doc.apply(r);
        }
        doc
    }

    fn value(doc: &Doc, family: usize, labels: &[(&str, &str)]) -> Option<f64> {
        let labels: Labels = labels
            .iter()
            .map(|(n, v)| (n.to_string(), v.to_string()))
            .collect();
        doc.series[family].get(&labels).copied()
    }

    fn runs(doc: &Doc, key: &str, outcome: &str) -> Option<f64> {
        value(doc, RUNS, &[("key", key), ("outcome", outcome)])
    }

    #[test]
    fn renders_sorted_families_with_help_type_and_millisecond_seconds() {
        let mut report = run("report", Outcome::Ok, 0);
        report.nodes = Some(Nodes {
            answered: 3,
            failed: 0,
        });
        let text = doc_with(&[report]).render();
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
        assert_eq!(text, expected);
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
        let text = doc_with(&[whole]).render();
        assert!(text.contains("redlock_run_last_start_timestamp_seconds{key=\"w\"} 1.000\n"));
        assert!(text.contains("redlock_run_last_duration_seconds{key=\"w\"} 2.000\n"));
        assert!(text.contains("redlock_run_last_success_timestamp_seconds{key=\"w\"} 3.000\n"));
    }

    #[test]
    fn label_values_are_escaped_and_read_back() {
        let key = "we\"ird\\key\nnext line ключ ✓\t\r";
        let doc = doc_with(&[run(key, Outcome::Failed, 3)]);
        let text = doc.render();
        assert!(
            text.contains(
                "redlock_run_last_exit_code{key=\"we\\\"ird\\\\key\\nnext line ключ ✓\t\r\"} 3\n"
            ),
            "{text}"
        );
        assert_eq!(value(&doc, EXIT_CODE, &[("key", key)]), Some(3.0));
        let back = Doc::parse(text.as_bytes());
        assert_eq!(value(&back, EXIT_CODE, &[("key", key)]), Some(3.0));
        assert_eq!(escape("a\\\"\n"), "a\\\\\\\"\\n");
        assert_eq!(unescape("a\\\\\\\"\\n").as_deref(), Some("a\\\"\n"));
    }

    #[test]
    fn parsing_what_was_rendered_gives_the_same_document() {
        let doc = doc_with(&[
            run("a", Outcome::Ok, 0),
            run("b\"\\\n", Outcome::Lost, 76),
            run("a", Outcome::Failed, 1),
            run("c", Outcome::Busy, 75),
            run("", Outcome::Timeout, 124),
        ]);
        let text = doc.render();
        let back = Doc::parse(text.as_bytes());
        assert!(back.dropped.is_empty());
        assert_eq!(back.series, doc.series);
        assert_eq!(back.render(), text, "rendering is a fixed point");
    }

    #[test]
    fn two_keys_are_merged_independently() {
        let mut doc = doc_with(&[run("a", Outcome::Ok, 0)]);
        let before_a = Doc::parse(doc.render().as_bytes());
        let mut b = run("b", Outcome::Failed, 2);
        b.started_at = at(2_000_000_000_000);
        b.duration = Duration::from_millis(5);
        doc = Doc::parse(doc.render().as_bytes());
        doc.apply(&b);
        for family in 0..FAMILIES.len() {
            for (labels, v) in &before_a.series[family] {
                assert_eq!(doc.series[family].get(labels), Some(v), "a's series kept");
            }
        }
        assert_eq!(value(&doc, START, &[("key", "b")]), Some(2_000_000_000.0));
        assert_eq!(value(&doc, DURATION, &[("key", "b")]), Some(0.005));
        assert_eq!(value(&doc, EXIT_CODE, &[("key", "b")]), Some(2.0));
        assert_eq!(
            value(&doc, SUCCESS, &[("key", "b")]),
            None,
            "b never succeeded"
        );
        assert_eq!(runs(&doc, "b", "failed"), Some(1.0));
        assert_eq!(runs(&doc, "a", "ok"), Some(1.0));
    }

    #[test]
    fn counters_accumulate_across_invocations() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("cron.prom");
        for outcome in [Outcome::Ok, Outcome::Busy, Outcome::Ok, Outcome::Busy] {
            let recorded = record(&path, &run("k", outcome, 0)).expect("record");
            assert!(recorded.dropped_lines.is_empty());
        }
        let _ = record(&path, &run("k", Outcome::Busy, 75)).expect("record");
        let doc = Doc::parse(&std::fs::read(&path).expect("read"));
        assert_eq!(runs(&doc, "k", "ok"), Some(2.0));
        assert_eq!(runs(&doc, "k", "busy"), Some(3.0));
        assert_eq!(runs(&doc, "k", "lost"), Some(0.0));
        use std::os::unix::fs::PermissionsExt;
        let lock = std::fs::metadata(dir.path().join("cron.prom.lock")).expect("lock file");
        assert!(lock.is_file());
        assert_eq!(
            lock.permissions().mode() & 0o7777 & !0o644,
            0,
            "at most 0644"
        );
    }

    /// The gauges only a run that started its command moves.
    const COMMAND_GAUGES: [usize; 4] = [DURATION, EXIT_CODE, START, SUCCESS];

    fn command_gauges(doc: &Doc) -> Vec<BTreeMap<Labels, f64>> {
        COMMAND_GAUGES.map(|f| doc.series[f].clone()).to_vec()
    }

    #[test]
    fn busy_unavailable_and_already_ran_move_no_command_gauge() {
        let first = run("k", Outcome::Ok, 0);
        for outcome in [Outcome::Busy, Outcome::Unavailable, Outcome::AlreadyRan] {
            let mut doc = doc_with(std::slice::from_ref(&first));
            let gauges_before = command_gauges(&doc);
            let mut later = run("k", outcome, 9);
            later.started_at = at(1_900_000_000_000);
            doc.apply(&later);
            assert_eq!(command_gauges(&doc), gauges_before, "{outcome:?}");
            assert_eq!(runs(&doc, "k", outcome.word()), Some(1.0));
            // Alone, such a run makes no gauge at all.
            let alone = doc_with(&[later]);
            assert!(command_gauges(&alone).iter().all(BTreeMap::is_empty));
            assert!(alone.series[ANSWERED].is_empty() && alone.series[FAILED].is_empty());
            assert_eq!(runs(&alone, "k", outcome.word()), Some(1.0));
        }
    }

    #[test]
    fn every_run_that_reached_the_nodes_moves_the_node_gauges() {
        let k = [("key", "k")];
        let nodes = |answered, failed| Some(Nodes { answered, failed });
        let mut doc = Doc::default();
        let mut steps = vec![
            // (outcome, nodes, answered, failed, degraded runs so far)
            (Outcome::Ok, nodes(3, 0), 3.0, 0.0, 0.0),
            (Outcome::Busy, nodes(2, 1), 2.0, 1.0, 1.0),
            (Outcome::Failed, nodes(3, 0), 3.0, 0.0, 1.0),
            (Outcome::Unavailable, nodes(1, 2), 1.0, 2.0, 2.0),
            (Outcome::AlreadyRan, nodes(3, 0), 3.0, 0.0, 2.0),
            (Outcome::Lost, nodes(2, 1), 2.0, 1.0, 3.0),
        ];
        // A run that never reached the nodes leaves the gauges as they were.
        steps.push((Outcome::Signal, None, 2.0, 1.0, 3.0));
        for (outcome, n, answered, failed, degraded) in steps {
            let mut r = run("k", outcome, 0);
            r.nodes = n;
            doc.apply(&r);
            assert_eq!(value(&doc, ANSWERED, &k), Some(answered), "{outcome:?}");
            assert_eq!(value(&doc, FAILED, &k), Some(failed), "{outcome:?}");
            assert_eq!(value(&doc, DEGRADED, &k), Some(degraded), "{outcome:?}");
        }
        // The counter is there, at 0, from a key's first run, whatever it was.
        let fresh = doc_with(&[run("new", Outcome::Busy, 75)]);
        assert_eq!(value(&fresh, DEGRADED, &[("key", "new")]), Some(0.0));
        let text = doc.render();
        assert!(
            text.contains("redlock_run_last_nodes_failed{key=\"k\"} 1\n"),
            "{text}"
        );
        assert_eq!(Doc::parse(text.as_bytes()).series, doc.series);
    }

    #[test]
    fn nodes_count_as_failed_as_the_closing_warning_names_them() {
        use crate::lock::NodeVote;
        use crate::lock::node::Fared;
        let node = |acquire, fared| NodeOutcome {
            name: "redis://n".into(),
            acquire,
            fared,
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
        ];
        assert_eq!(
            Nodes::of(&outcomes),
            Nodes {
                answered: 2,
                failed: 3
            }
        );
        let warned = outcomes.iter().filter(|o| o.failure().is_some()).count();
        assert_eq!(warned, 3);
        assert_eq!(Nodes::of(&[]), Nodes::default());
    }

    #[test]
    fn only_a_run_that_exited_0_moves_the_last_success() {
        let ok = run("k", Outcome::Ok, 0);
        let mut doc = doc_with(&[ok]);
        let success = value(&doc, SUCCESS, &[("key", "k")]);
        for (outcome, code) in [
            (Outcome::Failed, 1),
            (Outcome::Lost, 76),
            (Outcome::Timeout, 124),
        ] {
            let mut failed = run("k", outcome, code);
            failed.started_at = at(1_900_000_000_000);
            doc.apply(&failed);
            assert_eq!(value(&doc, SUCCESS, &[("key", "k")]), success);
            assert_eq!(
                value(&doc, EXIT_CODE, &[("key", "k")]),
                Some(f64::from(code))
            );
            assert_eq!(value(&doc, START, &[("key", "k")]), Some(1_900_000_000.0));
        }
    }

    #[test]
    fn runs_are_counted_by_their_outcome_and_usage_errors_not_at_all() {
        let from = |e| Run::from_exit("k", e, false, at(0), Duration::ZERO, None);
        assert!(from(Exit::Usage).is_none());
        let r = from(Exit::Signal(9)).expect("run");
        assert_eq!((r.outcome, r.exit_code), (Outcome::Signal, 137));
        let doc = doc_with(&[r]);
        assert_eq!(runs(&doc, "k", "signal"), Some(1.0));
        assert_eq!(value(&doc, EXIT_CODE, &[("key", "k")]), Some(137.0));
        // Every outcome but usage has its counter from the first run on.
        let counted: Vec<&str> = doc.series[RUNS].keys().map(|l| l[1].1.as_str()).collect();
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
        assert!(doc_with(&[busy]).series[SUCCESS].is_empty());
    }

    #[test]
    fn lines_of_others_are_kept_verbatim_and_in_order() {
        let old = doc_with(&[run("a", Outcome::Ok, 0)]).render();
        let input = format!(
            "# a comment of the operator's\n\
             # HELP backup_ok Whether the backup worked.\n\
             # TYPE backup_ok gauge\n\
             backup_ok{{host=\"db1\"}}   1 1700000000000\n\
             \n\
             {old}\
             redlock_run_something_else 5\n\
             \t# indented comment\n\
             other_untyped{{a=\"x\",}} +Inf\n"
        );
        let mut doc = Doc::parse(input.as_bytes());
        assert!(doc.dropped.is_empty(), "{:?}", doc.dropped);
        doc.apply(&run("b", Outcome::Busy, 75));
        let out = doc.render();
        let foreign: Vec<&str> = out
            .lines()
            .filter(|l| !FAMILIES.iter().any(|f| l.contains(f.name)))
            .collect();
        assert_eq!(
            foreign,
            [
                "# a comment of the operator's",
                "# HELP backup_ok Whether the backup worked.",
                "# TYPE backup_ok gauge",
                "backup_ok{host=\"db1\"}   1 1700000000000",
                "",
                "redlock_run_something_else 5",
                "\t# indented comment",
                "other_untyped{a=\"x\",} +Inf",
            ]
        );
        // Ours stays where it was: after the blank line, before the rest.
        let ours = out.find("# HELP redlock_run_last").expect("our block");
        assert!(out.find("\n\n").expect("blank") < ours);
        assert!(ours < out.find("redlock_run_something_else").expect("foreign"));
        // A file that had none of ours gets it at the end.
        let fresh = Doc::parse(b"x 1\n");
        assert_eq!(fresh.block_at, None);
        let mut fresh = fresh;
        fresh.apply(&run("a", Outcome::Busy, 75));
        assert!(
            fresh
                .render()
                .starts_with("x 1\n# HELP redlock_run_degraded_runs_total")
        );
    }

    #[test]
    fn foreign_series_of_our_families_are_kept_and_their_labels_sorted() {
        // "ran": the word older versions counted started runs under; kept,
        // frozen, beside the words that count them now.
        let input = "redlock_run_runs_total{outcome=\"ok\",key=\"a\"} 4\n\
                     redlock_run_runs_total{outcome=\"ran\",key=\"a\"} 7\n\
                     redlock_run_last_exit_code{key=\"a\",host=\"h\"} 2\n\
                     redlock_run_runs_total{key=\"n\",outcome=\"ok\"} NaN\n";
        let mut doc = Doc::parse(input.as_bytes());
        doc.apply(&run("a", Outcome::Ok, 0));
        doc.apply(&run("n", Outcome::Ok, 0));
        assert_eq!(runs(&doc, "a", "ok"), Some(5.0));
        assert_eq!(runs(&doc, "a", "ran"), Some(7.0));
        assert_eq!(runs(&doc, "n", "ok"), Some(1.0), "NaN restarts at 1");
        assert_eq!(
            value(&doc, EXIT_CODE, &[("host", "h"), ("key", "a")]),
            Some(2.0)
        );
        assert!(
            doc.render()
                .contains("redlock_run_last_exit_code{host=\"h\",key=\"a\"} 2\n")
        );
    }

    #[test]
    fn unparsable_lines_are_dropped_reported_and_ours_still_written() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("cron.prom");
        let good = doc_with(&[run("k", Outcome::Ok, 0), run("k", Outcome::Ok, 0)]).render();
        // Garbage, a line cut short mid-label, invalid UTF-8, and a last line
        // cut short without its newline.
        let mut input = b"backup_ok 1\n\x00\x01garbage{{{\n".to_vec();
        input.extend_from_slice(good.as_bytes());
        input.extend_from_slice(b"redlock_run_runs_total{key=\"k\",outc\n");
        input.extend_from_slice(b"bytes \xff\xfe 3\n");
        input.extend_from_slice(b"backup_size_bytes{host=\"db");
        std::fs::write(&path, &input).expect("write");
        let lines = input.split(|&b| b == b'\n').count();
        let recorded = record(&path, &run("k", Outcome::Ok, 0)).expect("record");
        assert_eq!(recorded.dropped_lines, [2, lines - 2, lines - 1, lines]);
        let warning = recorded.warning(&path).expect("warning");
        assert!(warning.contains(&path.display().to_string()), "{warning}");
        assert!(warning.contains("dropped 4 line(s)"), "{warning}");
        let out = std::fs::read(&path).expect("read");
        let doc = Doc::parse(&out);
        assert!(doc.dropped.is_empty(), "the file is valid again");
        assert_eq!(runs(&doc, "k", "ok"), Some(3.0), "no count lost");
        assert_eq!(doc.foreign, ["backup_ok 1"]);
        // The next run finds nothing more to drop.
        let again = record(&path, &run("k", Outcome::Busy, 75)).expect("record");
        assert_eq!(again, Recorded::default());
        assert_eq!(again.warning(&path), None);
    }

    #[test]
    fn line_grammar_follows_the_text_format() {
        let sample = |l: &str| match parse_line(l) {
            Some(Line::Sample { labels, value, .. }) => Some((labels, value)),
            _ => None,
        };
        for ok in [
            "m 1",
            "m{} 1",
            "m{a=\"b\",} 1",
            "  m\t{ a = \"b\" , c=\"d\" } -2.5e3",
            "m{a=\"b\"}1",
            "m 1 -1700000000000",
            "m NaN",
            "m -Inf",
            "m .5",
            "name:with:colons_1 0",
        ] {
            assert!(sample(ok).is_some(), "{ok:?} is valid");
        }
        for bad in [
            "m",
            "m ",
            "m 1 ",
            "m 1 2 3",
            "m 1 1.5",
            "m one",
            "m 0x10",
            "m 1_000",
            "1m 1",
            "m{a=b} 1",
            "m{a=\"b\" c=\"d\"} 1",
            "m{a=\"b\",a=\"c\"} 1",
            "m{__name__=\"x\"} 1",
            "m{a=\"\\t\"} 1",
            "m{a=\"b} 1",
            "m{a=\"b\"",
            "m{1a=\"b\"} 1",
            "{\"utf8.name\"} 1",
        ] {
            assert_eq!(parse_line(bad), None, "{bad:?} is invalid");
        }
        assert_eq!(parse_line("# HELP m text \\\\ \\n"), Some(Line::Meta("m")));
        assert_eq!(parse_line("# HELP m bad \\t"), None);
        assert_eq!(parse_line("# TYPE m counter"), Some(Line::Meta("m")));
        assert_eq!(parse_line("# TYPE m Gauge"), Some(Line::Meta("m")));
        assert_eq!(parse_line("# TYPE m bogus"), None);
        assert_eq!(parse_line("# TYPE m gauge "), None);
        assert_eq!(parse_line("# TYPE m"), Some(Line::Meta("m")));
        assert_eq!(parse_line("# TYPE"), Some(Line::Other));
        assert_eq!(parse_line("# HELP 1m x"), None);
        assert_eq!(parse_line("# anything at all \\q"), Some(Line::Other));
        assert_eq!(parse_line("\t "), Some(Line::Other));
        let (labels, value) = sample("m{b=\"\\\"\\\\\\n\",a=\"é\"} 7").expect("valid");
        assert_eq!(
            labels,
            [
                ("b".to_string(), "\"\\\n".to_string()),
                ("a".to_string(), "é".to_string())
            ]
        );
        assert_eq!(value, 7.0);
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
        let c = std::ffi::CString::new(lock.as_os_str().as_encoded_bytes()).expect("cstr");
        // SAFETY: mkfifo on a path we own.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
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
        let doc = Doc::parse(&std::fs::read(&path).expect("read"));
        assert!(doc.dropped.is_empty());
        let busy_each = EACH.div_ceil(3);
        for key in ["even", "odd"] {
            let writers = (THREADS / 2) as f64;
            assert_eq!(runs(&doc, key, "busy"), Some(writers * busy_each as f64));
            assert_eq!(
                runs(&doc, key, "ok"),
                Some(writers * (EACH - busy_each) as f64)
            );
        }
        let total: f64 = doc.series[RUNS].values().sum();
        assert_eq!(total, (THREADS * EACH) as f64);
    }
}
