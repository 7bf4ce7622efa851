//! Messages on stderr: one line each, as text (`redlock-run: ...`) or as one
//! JSON object per line for log shippers (`--log-format json`).

use std::io::Write;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, SyncSender, TrySendError};
use std::time::{Duration, SystemTime};

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    Text,
    Json,
}

#[derive(Clone, Copy, Debug)]
pub struct Log {
    verbosity: i8,
    format: Format,
    /// The lock's name, carried by every JSON line.
    key: &'static str,
}

/// One thing worth saying, with the fields a log shipper can index.
#[derive(Debug, Default)]
pub struct Entry {
    event: &'static str,
    msg: String,
    node: Option<String>,
    ms: Option<f64>,
    outcome: Option<&'static str>,
    /// More fields for the JSON form, values already encoded.
    extra: Vec<(&'static str, String)>,
}

/// An entry for `event`, saying `msg` in text form.
pub fn ev(event: &'static str, msg: impl Into<String>) -> Entry {
    Entry {
        event,
        msg: msg.into(),
        ..Entry::default()
    }
}

impl Entry {
    /// The node concerned, already redacted.
    pub fn node(mut self, name: &str) -> Self {
        self.node = Some(name.to_string());
        self
    }

    pub fn ms(mut self, d: Duration) -> Self {
        self.ms = Some(d.as_secs_f64() * 1000.0);
        self
    }

    pub fn outcome(mut self, o: &'static str) -> Self {
        self.outcome = Some(o);
        self
    }

    /// One more field for the JSON form; `value` is JSON already.
    pub fn field(mut self, name: &'static str, value: String) -> Self {
        self.extra.push((name, value));
        self
    }
}

impl From<String> for Entry {
    fn from(msg: String) -> Self {
        ev("message", msg)
    }
}

impl From<&str> for Entry {
    fn from(msg: &str) -> Self {
        ev("message", msg)
    }
}

impl Log {
    pub fn new(verbosity: i8, format: Format, key: &str) -> Self {
        Log {
            verbosity,
            format,
            // Lives as long as the process; one small string per run.
            key: Box::leak(key.to_string().into_boxed_str()),
        }
    }

    /// Failures: always shown.
    pub fn error(&self, e: impl Into<Entry>) {
        self.write("error", e.into());
    }

    /// Whether -q hides notices: work done only to word one can be skipped.
    pub fn is_quiet(&self) -> bool {
        self.verbosity < 0
    }

    /// Outcomes a cron job may want silenced (busy, timed out): hidden by -q.
    pub fn notice(&self, e: impl Into<Entry>) {
        if self.verbosity >= 0 {
            self.write("notice", e.into());
        }
    }

    /// -v: each attempt, node by node, and each decision.
    pub fn info<E: Into<Entry>>(&self, e: impl FnOnce() -> E) {
        if self.verbosity >= 1 {
            self.write("info", e().into());
        }
    }

    /// How the run ended: for log shippers (JSON) a line they can always
    /// count on, unless -q; in text, only with -v (cron mails any output).
    pub fn end<E: Into<Entry>>(&self, e: impl FnOnce() -> E) {
        match self.format {
            Format::Json => {
                if self.verbosity >= 0 {
                    self.write("notice", e().into());
                }
            }
            Format::Text => self.info(e),
        }
    }

    /// -vv: everything else (releases node by node, backoff).
    pub fn debug<E: Into<Entry>>(&self, e: impl FnOnce() -> E) {
        if self.verbosity >= 2 {
            self.write("debug", e().into());
        }
    }

    fn write(&self, level: &str, e: Entry) {
        let line = match self.format {
            Format::Text => format!("redlock-run: {}\n", e.msg),
            Format::Json => {
                let mut fields = vec![
                    (
                        "time",
                        json_str(&humantime::format_rfc3339_millis(SystemTime::now()).to_string()),
                    ),
                    ("level", json_str(level)),
                    ("event", json_str(e.event)),
                    ("key", json_str(self.key)),
                ];
                if let Some(n) = &e.node {
                    fields.push(("node", json_str(n)));
                }
                if let Some(ms) = e.ms {
                    fields.push(("ms", format!("{ms:.3}")));
                }
                if let Some(o) = e.outcome {
                    fields.push(("outcome", json_str(o)));
                }
                fields.extend(e.extra);
                fields.push(("msg", json_str(&e.msg)));
                format!("{}\n", json_object(&fields))
            }
        };
        emit(line);
    }
}

/// A duration for a message, as precise as a reader wants it: `350ms`,
/// `3.2s`, `2m 5s` (whole seconds from a minute on).
pub fn span(d: Duration) -> String {
    if d < Duration::from_secs(1) {
        format!("{}ms", d.as_millis())
    } else if d < Duration::from_secs(60) {
        format!("{:.1}s", d.as_secs_f64())
    } else {
        humantime::format_duration(Duration::from_secs(d.as_secs())).to_string()
    }
}

/// Lines waiting for stderr. Bounded: a stderr nobody reads (a hung log
/// shipper, a full `| logger` pipe) must never hold up the supervisor or the
/// heartbeat, so a full queue drops the line and counts it instead.
const QUEUE: usize = 256;

enum Msg {
    Line(String),
    Flush(mpsc::Sender<()>),
}

static WRITER: OnceLock<Option<SyncSender<Msg>>> = OnceLock::new();
static DROPPED: AtomicU64 = AtomicU64::new(0);

/// Lines dropped so far because stderr was not being read.
pub fn dropped() -> u64 {
    DROPPED.load(Ordering::Relaxed)
}

fn writer() -> Option<&'static SyncSender<Msg>> {
    WRITER
        .get_or_init(|| {
            let (tx, rx) = mpsc::sync_channel::<Msg>(QUEUE);
            std::thread::Builder::new()
                .name("log".into())
                .spawn(move || {
                    crate::process::signals::block_all_here();
                    let mut reported = 0;
                    for msg in rx {
                        match msg {
                            Msg::Line(line) => {
                                let mut err = std::io::stderr().lock();
                                let lost = DROPPED.load(Ordering::Relaxed);
                                if lost > reported {
                                    let _ = writeln!(
                                        err,
                                        "redlock-run: {} log line(s) dropped: stderr was not being read",
                                        lost - reported
                                    );
                                    reported = lost;
                                }
                                // A closed stderr is no reason to fail the run.
                                let _ = err.write_all(line.as_bytes());
                            }
                            Msg::Flush(done) => {
                                let _ = done.send(());
                            }
                        }
                    }
                })
                .ok()
                .map(|_| tx)
        })
        .as_ref()
}

fn emit(line: String) {
    match writer() {
        Some(tx) => {
            if tx.try_send(Msg::Line(line)).is_err() {
                DROPPED.fetch_add(1, Ordering::Relaxed);
            }
        }
        // No thread to be had: write here, which may block, but only for a
        // process that cannot even start a thread.
        None => {
            let _ = std::io::stderr().lock().write_all(line.as_bytes());
        }
    }
}

/// Waits up to `limit` for the queued lines to reach stderr. Called on the
/// way out, after the lock is released or left to expire, so nothing safety
/// depends on waits for it.
pub fn flush(limit: Duration) {
    let Some(Some(tx)) = WRITER.get() else {
        return;
    };
    let until = std::time::Instant::now() + limit;
    let (done_tx, done_rx) = mpsc::channel();
    let mut msg = Msg::Flush(done_tx);
    loop {
        match tx.try_send(msg) {
            Ok(()) => break,
            Err(TrySendError::Full(m)) if std::time::Instant::now() < until => {
                msg = m;
                std::thread::sleep(Duration::from_millis(1));
            }
            Err(_) => return,
        }
    }
    let _ = done_rx.recv_timeout(until.saturating_duration_since(std::time::Instant::now()));
}

/// `{"k":v,...}` from already-encoded values.
pub fn json_object(fields: &[(&str, String)]) -> String {
    let body: Vec<String> = fields
        .iter()
        .map(|(k, v)| format!("{}:{v}", json_str(k)))
        .collect();
    format!("{{{}}}", body.join(","))
}

/// A JSON string literal.
pub fn json_str(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_strings_escape_controls_and_quotes() {
        assert_eq!(json_str("a\"b\\c\nd\u{1}"), "\"a\\\"b\\\\c\\nd\\u0001\"");
        assert_eq!(json_str("');redis.call('x')--"), "\"');redis.call('x')--\"");
    }

    #[test]
    fn json_objects_join_fields() {
        let o = json_object(&[("a", json_str("x")), ("n", "1.5".into())]);
        assert_eq!(o, "{\"a\":\"x\",\"n\":1.5}");
    }
}
