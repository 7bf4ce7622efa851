//! `--report FILE`: a JSON summary of the run for cron monitors, written
//! however the run ended.

use std::io;
use std::path::Path;
use std::sync::Mutex;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64};
use std::time::{Duration, SystemTime};

use crate::cli::Config;
use crate::exit::Exit;
use crate::lock::{NodeOutcome, NodeVote};
use crate::log::{self, json_object, json_str};
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

pub fn write(
    path: &Path,
    config: &Config,
    stats: &Stats,
    exit: Exit,
    started_at: SystemTime,
    duration: Duration,
) -> io::Result<()> {
    let n = |a: &AtomicU64| a.load(Relaxed).to_string();
    let nodes = stats.nodes.lock().unwrap_or_else(|p| p.into_inner());
    let count = |f: fn(&NodeVote) -> bool| nodes.iter().filter(|o| f(&o.acquire)).count();
    let per_node: Vec<String> = nodes
        .iter()
        .map(|o| {
            let (vote, error) = match &o.acquire {
                NodeVote::Granted => ("granted", None),
                NodeVote::Refused => ("refused", None),
                NodeVote::Error(e) => ("error", Some(e.as_str())),
                NodeVote::NoAnswer => ("no-answer", None),
            };
            let mut fields = vec![("node", json_str(&o.name)), ("acquire", json_str(vote))];
            if let Some(e) = error {
                fields.push(("error", json_str(e)));
            }
            json_object(&fields)
        })
        .collect();
    let signal = match exit {
        Exit::Signal(s) => s.to_string(),
        _ => "null".into(),
    };
    let body = json_object(&[
        ("key", json_str(&config.name)),
        (
            "redis_key",
            json_str(&crate::lock::keys::show(config.keys.lock())),
        ),
        ("host", json_str(&crate::lock::record::hostname())),
        ("pid", std::process::id().to_string()),
        (
            "started_at",
            json_str(&humantime::format_rfc3339_millis(started_at).to_string()),
        ),
        (
            "ended_at",
            json_str(&humantime::format_rfc3339_millis(started_at + duration).to_string()),
        ),
        (
            "lock",
            json_str(if config.shared { "shared" } else { "exclusive" }),
        ),
        ("acquired", stats.acquired.load(Relaxed).to_string()),
        ("waited_ms", n(&stats.waited_ms)),
        ("nodes", nodes.len().to_string()),
        ("nodes_ok", count(|v| *v == NodeVote::Granted).to_string()),
        (
            "nodes_refused",
            count(|v| *v == NodeVote::Refused).to_string(),
        ),
        (
            "nodes_failed",
            count(|v| matches!(v, NodeVote::Error(_) | NodeVote::NoAnswer)).to_string(),
        ),
        ("node_outcomes", format!("[{}]", per_node.join(","))),
        ("extensions_done", n(&stats.extensions_done)),
        ("extensions_failed", n(&stats.extensions_failed)),
        (
            "outcome",
            json_str(Outcome::of(exit, stats.already_ran.load(Relaxed)).word()),
        ),
        ("exit_code", exit.code().to_string()),
        ("signal", signal),
        ("attempts", stats.attempts.load(Relaxed).to_string()),
        ("duration_ms", duration.as_millis().to_string()),
        ("log_lines_dropped", log::dropped().to_string()),
    ]);
    crate::files::write_atomically(path, format!("{body}\n").as_bytes())
}
