//! `--report FILE`: a JSON summary of the run for cron monitors, written
//! however the run ended.

use std::io;
use std::path::Path;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::time::{Duration, SystemTime};

use crate::cli::Config;
use crate::exit::Exit;
use crate::log;

/// What --report tells a monitor about the run.
#[derive(Default)]
pub struct Stats {
    pub acquired: AtomicBool,
    pub waited_ms: AtomicU64,
    pub nodes_ok: AtomicU64,
    pub nodes_failed: AtomicU64,
    pub extensions_done: AtomicU64,
    pub extensions_failed: AtomicU64,
    pub already_ran: AtomicBool,
}

pub fn write(
    path: &Path,
    config: &Config,
    stats: &Stats,
    exit: Exit,
    started_at: SystemTime,
    duration: Duration,
) -> io::Result<()> {
    let outcome = match exit {
        Exit::Command(0) => "ok",
        Exit::Command(_) => "failed",
        Exit::Signal(_) => "signal",
        Exit::Busy(_) if stats.already_ran.load(Relaxed) => "already-ran",
        Exit::Busy(_) => "busy",
        Exit::Unavailable => "unavailable",
        Exit::Lost => "lost",
        Exit::Timeout => "timeout",
        Exit::CannotExecute | Exit::NotFound => "not-run",
        Exit::Usage => "usage",
    };
    let n = |a: &AtomicU64| a.load(Relaxed).to_string();
    let body = log::json_object(&[
        ("key", log::json_str(&config.name)),
        (
            "redis_key",
            log::json_str(&crate::lock::keys::show(config.keys.lock())),
        ),
        (
            "started_at",
            log::json_str(&humantime::format_rfc3339_millis(started_at).to_string()),
        ),
        ("acquired", stats.acquired.load(Relaxed).to_string()),
        ("waited_ms", n(&stats.waited_ms)),
        ("nodes", config.urls.len().to_string()),
        ("nodes_ok", n(&stats.nodes_ok)),
        ("nodes_failed", n(&stats.nodes_failed)),
        ("extensions_done", n(&stats.extensions_done)),
        ("extensions_failed", n(&stats.extensions_failed)),
        ("outcome", log::json_str(outcome)),
        ("exit_code", exit.code().to_string()),
        ("duration_ms", duration.as_millis().to_string()),
    ]);
    crate::files::write_atomically(path, format!("{body}\n").as_bytes())
}
