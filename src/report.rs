//! `--report FILE`: a JSON summary of the run for cron monitors, written
//! however the run ended.

use std::io;
use std::path::Path;
use std::sync::Mutex;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64};
use std::time::{Duration, SystemTime};

use serde::Serialize;

use crate::exit::Exit;
use crate::lock::keys::Keys;
use crate::lock::{NodeOutcome, NodeVote};
use crate::log;
use crate::outcome::Outcome;

/// What --report tells a monitor about the run.
#[derive(Default)]
pub(crate) struct Stats {
    pub acquired: AtomicBool,
    /// Time spent waiting for a busy lock (--wait): from the first attempt
    /// to the last one's start.
    pub waited_ms: AtomicU64,
    pub extensions_done: AtomicU64,
    pub extensions_failed: AtomicU64,
    pub already_ran: AtomicBool,
    /// Attempts whose command started (`--retry` makes it more than one).
    pub attempts: AtomicU32,
    /// Every node's answer to the acquire, filled in when the run ends.
    pub nodes: Mutex<Vec<NodeOutcome>>,
    /// Whether the run sent the nodes an acquire (else `nodes` says nothing
    /// about them), filled in with `nodes`.
    pub reached_nodes: AtomicBool,
    /// The line that said why the command did not run (the lock busy, and
    /// by whom; fewer than a quorum): for the pings' summary.
    pub why_not: Mutex<Option<String>>,
    /// Every signal sent to the command's process tree, in order.
    pub signals: Mutex<Vec<Signal>>,
}

/// One signal sent to the command's process tree: by whom, which, to how
/// many processes, and how long before the lock's validity deadline it had
/// gone out (negative: after it).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Signal {
    /// `redlock-run`, or `guard` (its kill at the deadline in redlock-run's
    /// place).
    pub by: &'static str,
    pub signal: String,
    pub processes: usize,
    /// To the microsecond.
    #[serde(serialize_with = "micros")]
    pub before_deadline_ms: f64,
}

/// Milliseconds to the microsecond, never a float's noise.
fn micros<S: serde::Serializer>(ms: &f64, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64((ms * 1000.0).round() / 1000.0)
}

impl Stats {
    /// Adds `sent` to the signals the run sent.
    pub fn note_signals(&self, sent: impl IntoIterator<Item = Signal>) {
        self.signals
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .extend(sent);
    }

    /// Keeps `line` as the reason the command did not run.
    pub(crate) fn not_run_because(&self, line: &str) {
        *self.why_not.lock().unwrap_or_else(|p| p.into_inner()) = Some(line.to_string());
    }
}

/// The most a summary (a ping's body) holds: services keep more, and a
/// person reads less.
pub(crate) const SUMMARY_CAP: usize = 10 * 1024;

/// The --report document; the field order is the file's.
#[derive(Serialize)]
struct Report<'a> {
    key: &'a str,
    redis_key: String,
    host: String,
    pid: u32,
    #[serde(with = "crate::wall::time_ms")]
    started_at: SystemTime,
    #[serde(with = "crate::wall::time_ms")]
    ended_at: SystemTime,
    /// "shared" (--shared) or "exclusive".
    lock: &'static str,
    acquired: bool,
    waited_ms: u64,
    nodes: usize,
    nodes_ok: usize,
    nodes_refused: usize,
    nodes_failed: usize,
    node_outcomes: Vec<NodeAcquire<'a>>,
    extensions_done: u64,
    extensions_failed: u64,
    outcome: &'static str,
    exit_code: u8,
    /// The signal's number with `"outcome": "signal"`, else null.
    signal: Option<i32>,
    attempts: u32,
    /// Every signal sent to the command's tree.
    signals_sent: Vec<Signal>,
    duration_ms: u64,
    log_lines_dropped: u64,
}

/// One node's answer to the acquire.
#[derive(Serialize)]
struct NodeAcquire<'a> {
    node: &'a str,
    /// granted, refused, error, no-answer.
    acquire: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<&'a str>,
    /// What it refused of the lock's upkeep later in the run (`release:
    /// the ACL refuses DEL`), leaving a key behind until it expired.
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    refused: &'a [String],
}

/// The lock a run took, as the report names it.
pub(crate) struct Lock<'a> {
    pub name: &'a str,
    pub keys: &'a Keys,
    /// --shared: a reader.
    pub shared: bool,
}

/// How a run ended, as the report and the summary tell it.
pub(crate) struct Ended<'a> {
    pub lock: &'a Lock<'a>,
    pub stats: &'a Stats,
    pub exit: Exit,
    pub started_at: SystemTime,
    pub duration: Duration,
}

/// Writes the report of the run to `path`.
pub(crate) fn write(path: &Path, ended: &Ended) -> io::Result<()> {
    let body = with_report(ended, |r| serde_json::to_vec(r)).map_err(io::Error::other);
    let mut body = body?;
    body.push(b'\n');
    crate::files::write_atomically(path, &body)
}

/// The report as a few lines of text for a person (the body of an end
/// ping): the same fields and words, the nodes that failed, and why the
/// command did not run; at most `SUMMARY_CAP` bytes.
pub(crate) fn summary(ended: &Ended) -> String {
    let why = ended
        .stats
        .why_not
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .clone();
    let mut text = with_report(ended, |r| r.summary());
    if let Some(why) = why {
        text.push_str(&format!("why: {why}\n"));
    }
    if text.len() > SUMMARY_CAP {
        let mut cut = SUMMARY_CAP - 40;
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        text.truncate(cut);
        text.push_str("\n(cut at 10 KB)\n");
    }
    text
}

/// The run's report, built from `stats`, for `f`.
fn with_report<T>(ended: &Ended, f: impl FnOnce(&Report) -> T) -> T {
    let Ended {
        lock,
        stats,
        exit,
        started_at,
        duration,
    } = *ended;
    let nodes = stats.nodes.lock().unwrap_or_else(|p| p.into_inner());
    let count = |f: fn(&NodeVote) -> bool| nodes.iter().filter(|o| f(&o.acquire)).count();
    let report = Report {
        key: lock.name,
        redis_key: crate::lock::keys::show(lock.keys.lock()),
        host: crate::host::hostname(),
        pid: std::process::id(),
        started_at,
        ended_at: started_at + duration,
        lock: if lock.shared { "shared" } else { "exclusive" },
        acquired: stats.acquired.load(Relaxed),
        waited_ms: stats.waited_ms.load(Relaxed),
        nodes: nodes.len(),
        nodes_ok: count(|v| *v == NodeVote::Granted),
        nodes_refused: count(|v| *v == NodeVote::Refused),
        nodes_failed: count(|v| matches!(v, NodeVote::Error(_) | NodeVote::NoAnswer)),
        node_outcomes: nodes
            .iter()
            .map(|o| {
                let (acquire, error) = match &o.acquire {
                    NodeVote::Granted => ("granted", None),
                    NodeVote::Refused => ("refused", None),
                    NodeVote::Error(e) => ("error", Some(e.as_str())),
                    NodeVote::NoAnswer => ("no-answer", None),
                };
                NodeAcquire {
                    node: &o.name,
                    acquire,
                    error,
                    refused: &o.refused,
                }
            })
            .collect(),
        extensions_done: stats.extensions_done.load(Relaxed),
        extensions_failed: stats.extensions_failed.load(Relaxed),
        outcome: Outcome::of(exit, stats.already_ran.load(Relaxed)).word(),
        exit_code: exit.code(),
        signal: match exit {
            Exit::Signal(s) => Some(s),
            _ => None,
        },
        attempts: stats.attempts.load(Relaxed),
        signals_sent: stats
            .signals
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone(),
        duration_ms: u64::try_from(duration.as_millis()).unwrap_or(u64::MAX),
        log_lines_dropped: log::dropped(),
    };
    f(&report)
}

impl Report<'_> {
    /// `summary`'s lines, in the report's words.
    fn summary(&self) -> String {
        let mut lines = vec![
            format!("outcome: {}", self.outcome),
            format!("exit_code: {}", self.exit_code),
        ];
        if let Some(sig) = self.signal {
            lines.push(format!("signal: {sig}"));
        }
        lines.extend([
            format!("duration_ms: {}", self.duration_ms),
            format!("key: {}", self.key),
            format!("redis_key: {}", self.redis_key),
            format!("lock: {}", self.lock),
            format!("host: {}", self.host),
            format!("pid: {}", self.pid),
            format!("attempts: {}", self.attempts),
            format!(
                "nodes: {} (ok {}, refused {}, failed {})",
                self.nodes, self.nodes_ok, self.nodes_refused, self.nodes_failed
            ),
        ]);
        for n in &self.node_outcomes {
            match (n.acquire, n.error) {
                (_, Some(e)) => lines.push(format!("node {}: {}: {e}", n.node, n.acquire)),
                ("no-answer", None) => lines.push(format!("node {}: no-answer", n.node)),
                _ => {}
            }
        }
        if self.extensions_failed > 0 {
            lines.push(format!(
                "extensions_failed: {} (of {})",
                self.extensions_failed,
                self.extensions_failed + self.extensions_done
            ));
        }
        let mut text = lines.join("\n");
        text.push('\n');
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::UNIX_EPOCH;

    /// The example in docs/operations.md, as one line.
    fn documented() -> String {
        let doc = include_str!("../docs/operations.md");
        let start = doc.find("    {\"key\":\"report\"").expect("the example");
        let end = start + doc[start..].find("}\n\n").expect("its end") + 1;
        doc[start..end].lines().map(str::trim).collect()
    }

    #[test]
    fn the_documented_report_is_what_is_written_and_reads_back() {
        let at = UNIX_EPOCH + Duration::from_millis(1_796_007_600_012);
        let mut report = Report {
            key: "report",
            redis_key: "lock:report".into(),
            host: "web3".into(),
            pid: 22306,
            started_at: at,
            ended_at: at + Duration::from_millis(412_877),
            lock: "exclusive",
            acquired: true,
            waited_ms: 0,
            nodes: 3,
            nodes_ok: 2,
            nodes_refused: 0,
            nodes_failed: 1,
            node_outcomes: vec![
                NodeAcquire {
                    node: "redis://lock1:6379",
                    acquire: "granted",
                    error: None,
                    refused: &[],
                },
                NodeAcquire {
                    node: "redis://lock2:6379",
                    acquire: "granted",
                    error: None,
                    refused: &[],
                },
                NodeAcquire {
                    node: "redis://lock3:6379",
                    acquire: "error",
                    error: Some("redis://lock3:6379: connection refused"),
                    refused: &[],
                },
            ],
            extensions_done: 41,
            extensions_failed: 0,
            outcome: "ok",
            exit_code: 0,
            signal: None,
            attempts: 1,
            signals_sent: Vec::new(),
            duration_ms: 412_877,
            log_lines_dropped: 0,
        };
        let text = serde_json::to_string(&report).expect("JSON");
        assert_eq!(text, documented());
        let back: serde_json::Value = serde_json::from_str(&text).expect("reads back");
        assert_eq!(
            back["node_outcomes"][2]["error"],
            "redis://lock3:6379: connection refused"
        );
        assert!(back["node_outcomes"][0].get("error").is_none());
        report.signal = Some(15);
        report.host = "we\"ird\nhost".into();
        let text = serde_json::to_string(&report).expect("JSON");
        assert!(text.contains(",\"signal\":15,"), "{text}");
        let back: serde_json::Value = serde_json::from_str(&text).expect("reads back");
        assert_eq!(back["host"], "we\"ird\nhost");
        report.signals_sent = vec![Signal {
            by: "guard",
            signal: "SIGKILL".into(),
            processes: 3,
            before_deadline_ms: 49.800_000_4,
        }];
        let text = serde_json::to_string(&report).expect("JSON");
        assert!(
            text.contains(
                ",\"signals_sent\":[{\"by\":\"guard\",\"signal\":\"SIGKILL\",\"processes\":3,\
                 \"before_deadline_ms\":49.8}],"
            ),
            "{text}"
        );
    }

    #[test]
    fn the_summary_tells_the_report_in_lines_within_10_kb() {
        let keys = Keys::new(b"lock:", b"nightly").expect("a name");
        let lock = Lock {
            name: "nightly",
            keys: &keys,
            shared: false,
        };
        let stats = Stats::default();
        stats.attempts.store(2, Relaxed);
        let node = |i: usize, acquire| NodeOutcome {
            name: format!("redis://lock{i}:6379"),
            acquire,
            fared: crate::lock::node::Fared::Answered,
            recovered: false,
            refused: Vec::new(),
        };
        *stats.nodes.lock().expect("nodes") = vec![
            node(1, NodeVote::Granted),
            node(
                2,
                NodeVote::Error("redis://lock2:6379: connection refused".into()),
            ),
            node(3, NodeVote::NoAnswer),
        ];
        stats.not_run_because("lock 'nightly' is held elsewhere, by ops@web3 pid 7");
        let ended = Ended {
            lock: &lock,
            stats: &stats,
            exit: Exit::Signal(15),
            started_at: UNIX_EPOCH,
            duration: Duration::from_millis(1500),
        };
        let text = summary(&ended);
        for line in [
            "outcome: signal",
            "exit_code: 143",
            "signal: 15",
            "duration_ms: 1500",
            "key: nightly",
            "redis_key: lock:nightly",
            "lock: exclusive",
            "attempts: 2",
            "nodes: 3 (ok 1, refused 0, failed 2)",
            "node redis://lock2:6379: error: redis://lock2:6379: connection refused",
            "node redis://lock3:6379: no-answer",
            "why: lock 'nightly' is held elsewhere, by ops@web3 pid 7",
        ] {
            assert!(text.lines().any(|l| l == line), "{line:?} not in\n{text}");
        }
        assert!(
            !text.contains("lock1"),
            "a node that granted is no warning\n{text}"
        );
        // A thousand failing nodes: cut, on a character's boundary.
        *stats.nodes.lock().expect("nodes") = (0..1000)
            .map(|i| node(i, NodeVote::Error("é".repeat(20))))
            .collect();
        let text = summary(&ended);
        assert!(text.len() <= SUMMARY_CAP, "{}", text.len());
        assert!(text.ends_with("(cut at 10 KB)\n") && text.starts_with("outcome: signal\n"));
    }
}
