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
pub struct Stats {
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
}

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
pub struct Lock<'a> {
    pub name: &'a str,
    pub keys: &'a Keys,
    /// --shared: a reader.
    pub shared: bool,
}

pub fn write(
    path: &Path,
    lock: &Lock,
    stats: &Stats,
    exit: Exit,
    started_at: SystemTime,
    duration: Duration,
) -> io::Result<()> {
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
        duration_ms: u64::try_from(duration.as_millis()).unwrap_or(u64::MAX),
        log_lines_dropped: log::dropped(),
    };
    let mut body = serde_json::to_vec(&report).map_err(io::Error::other)?;
    body.push(b'\n');
    crate::files::write_atomically(path, &body)
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
    }
}
