//! Messages on stderr: one line each, as text (`redlock-run: ...`) or as one
//! JSON object per line for log shippers (`--log-format json`).

use std::io::Write;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, SyncSender, TrySendError};
use std::time::{Duration, SystemTime};

use serde::Serialize;
use serde::ser::SerializeMap;

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
pub(crate) struct Entry {
    event: &'static str,
    msg: String,
    node: Option<String>,
    ms: Option<f64>,
    outcome: Option<&'static str>,
    /// More fields for the JSON form, in order.
    extra: Fields,
}

/// The event's own fields, each a JSON value, as the line shows them.
#[derive(Debug, Default)]
struct Fields(Vec<(&'static str, serde_json::Value)>);

impl Serialize for Fields {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(self.0.len()))?;
        for (name, value) in &self.0 {
            map.serialize_entry(name, value)?;
        }
        map.end()
    }
}

/// One line of `--log-format json`; absent fields are left out.
#[derive(Serialize)]
struct Line<'a> {
    #[serde(with = "crate::wall::time_ms")]
    time: SystemTime,
    level: &'a str,
    event: &'a str,
    key: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    node: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    ms: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    outcome: Option<&'a str>,
    #[serde(flatten)]
    extra: &'a Fields,
    msg: &'a str,
}

/// An entry for `event`, saying `msg` in text form.
pub(crate) fn ev(event: &'static str, msg: impl Into<String>) -> Entry {
    Entry {
        event,
        msg: msg.into(),
        ..Entry::default()
    }
}

impl Entry {
    /// The node concerned, already redacted.
    pub(crate) fn node(mut self, name: &str) -> Self {
        self.node = Some(name.to_string());
        self
    }

    /// A duration, in milliseconds to the microsecond.
    pub(crate) fn ms(mut self, d: Duration) -> Self {
        self.ms = Some((d.as_secs_f64() * 1e6).round() / 1000.0);
        self
    }

    pub(crate) fn outcome(mut self, o: &'static str) -> Self {
        self.outcome = Some(o);
        self
    }

    /// One more field for the JSON form: a number, text, a list, or
    /// `None` for null (a number's text would be a JSON string).
    pub(crate) fn field(mut self, name: &'static str, value: impl Into<serde_json::Value>) -> Self {
        self.extra.0.push((name, value.into()));
        self
    }
}

#[cfg(test)]
impl Entry {
    /// What the text form says.
    pub(crate) fn message(&self) -> &str {
        &self.msg
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
    pub(crate) fn error(&self, e: impl Into<Entry>) {
        self.write("error", e.into());
    }

    /// Whether -q hides notices: work done only to word one can be skipped.
    pub(crate) fn is_quiet(&self) -> bool {
        self.verbosity < 0
    }

    /// Outcomes a cron job may want silenced (busy, timed out): hidden by -q.
    pub(crate) fn notice(&self, e: impl Into<Entry>) {
        if self.verbosity >= 0 {
            self.write("notice", e.into());
        }
    }

    /// -v: each attempt, node by node, and each decision.
    pub(crate) fn info<E: Into<Entry>>(&self, e: impl FnOnce() -> E) {
        if self.verbosity >= 1 {
            self.write("info", e().into());
        }
    }

    /// How the run ended: for log shippers (JSON) a line they can always
    /// count on, unless -q; in text, only with -v (cron mails any output).
    pub(crate) fn end<E: Into<Entry>>(&self, e: impl FnOnce() -> E) {
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
    pub(crate) fn debug<E: Into<Entry>>(&self, e: impl FnOnce() -> E) {
        if self.verbosity >= 2 {
            self.write("debug", e().into());
        }
    }

    /// Encoded here, on the caller's thread, so that the writer thread
    /// only copies bytes.
    fn write(&self, level: &str, e: Entry) {
        emit(self.line(level, &e, SystemTime::now()));
    }

    fn line(&self, level: &str, e: &Entry, time: SystemTime) -> String {
        match self.format {
            // Messages carry what nodes said (holder records, server
            // errors): never raw to a terminal.
            Format::Text => text(&e.msg),
            Format::Json => {
                let line = Line {
                    time,
                    level,
                    event: e.event,
                    key: self.key,
                    node: e.node.as_deref(),
                    ms: e.ms,
                    outcome: e.outcome,
                    extra: &e.extra,
                    msg: &e.msg,
                };
                match serde_json::to_string(&line) {
                    Ok(json) => json + "\n",
                    // Not for any entry there is: serde_json fails only on
                    // maps with non-string keys and on failing Serialize impls.
                    Err(_) => format!("{PREFIX}{}\n", e.msg),
                }
            }
        }
    }
}

/// `text` as a terminal may be shown it: every control character (C0, DEL,
/// C1) and every bidirectional-text control written as an escape (`\e`,
/// `\n`, `\x07`, `\u{202e}`), the rest as it is. Whoever can write a
/// lock's keys writes what `status`, `history` and a busy run print of its
/// holder (host, user, command, token): an escape sequence there would
/// retitle or clear an operator's terminal, and a line break would forge a
/// line. JSON needs none of this: it escapes control characters itself and
/// keeps the value as stored.
pub(crate) fn printable(text: &str) -> std::borrow::Cow<'_, str> {
    fn unsafe_to_show(c: char) -> bool {
        c.is_control()
            || matches!(c, '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
    }
    if !text.chars().any(unsafe_to_show) {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        match c {
            '\x1b' => out.push_str("\\e"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c.is_ascii() && unsafe_to_show(c) => out.push_str(&format!("\\x{:02x}", c as u32)),
            c if unsafe_to_show(c) => out.push_str(&format!("\\u{{{:x}}}", c as u32)),
            c => out.push(c),
        }
    }
    std::borrow::Cow::Owned(out)
}

/// A duration for a message, as precise as a reader wants it: `350ms`,
/// `3.2s`, `2m 5s` (whole seconds from a minute on).
pub(crate) fn span(d: Duration) -> String {
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
pub(crate) fn dropped() -> u64 {
    DROPPED.load(Ordering::Relaxed)
}

fn writer() -> Option<&'static SyncSender<Msg>> {
    WRITER
        .get_or_init(|| {
            let (tx, rx) = mpsc::sync_channel::<Msg>(QUEUE);
            std::thread::Builder::new()
                .name("log".into())
                .spawn(move || {
                    crate::signals::block_all_here();
                    let mut reported = 0;
                    for msg in rx {
                        match msg {
                            Msg::Line(line) => {
                                let mut err = std::io::stderr().lock();
                                let lost = DROPPED.load(Ordering::Relaxed);
                                if lost > reported {
                                    // One write, as every line: the command
                                    // shares this stderr, and a line written
                                    // in pieces can be split by its output.
                                    let notice = format!(
                                        "{PREFIX}{} log line(s) dropped: stderr was not being read\n",
                                        lost - reported
                                    );
                                    let _ = err.write_all(notice.as_bytes());
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

/// What every line redlock-run writes on stderr starts with: written here
/// and nowhere else.
pub(crate) const PREFIX: &str = "redlock-run: ";

/// A message as a line of text: escaped (what nodes say may hold anything),
/// after the prefix.
fn text(msg: &str) -> String {
    format!("{PREFIX}{}\n", printable(msg))
}

/// One line on stderr for a subcommand, written at once (a subcommand
/// starts no writer thread: it holds no lock that waits on it).
pub(crate) fn say(msg: impl std::fmt::Display) {
    let _ = std::io::stderr()
        .lock()
        .write_all(text(&msg.to_string()).as_bytes());
}

/// `say`, as a warning.
pub(crate) fn warn(msg: impl std::fmt::Display) {
    say(format_args!("warning: {msg}"));
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_printable_text_is_shown() {
        assert!(matches!(
            printable("web3 ✓"),
            std::borrow::Cow::Borrowed("web3 ✓")
        ));
        assert_eq!(printable("\x1b]0;x\x07"), "\\e]0;x\\x07");
        assert_eq!(printable("a\nb\tc\r\x7f"), "a\\nb\\tc\\r\\x7f");
        assert_eq!(printable("\u{9b}2J \u{202e}txt"), "\\u{9b}2J \\u{202e}txt");
    }
    use std::time::UNIX_EPOCH;

    const AT: Duration = Duration::from_millis(1_796_007_600_012);

    #[test]
    fn json_lines_have_their_fields_in_order_and_read_back() {
        let log = Log::new(0, Format::Json, "nightly \"report\"");
        let e = ev("acquire", "redis://h:1: granted in 1.2ms")
            .node("redis://:***@h:1")
            .ms(Duration::from_micros(1_234_567))
            .outcome("granted")
            .field("pid", 4242u32)
            .field("reason", "held")
            .field("failed_nodes", vec!["a", "b"])
            .field("uid", None::<u32>);
        let line = log.line("info", &e, UNIX_EPOCH + AT);
        assert_eq!(
            line,
            "{\"time\":\"2026-11-30T03:00:00.012Z\",\"level\":\"info\",\"event\":\"acquire\",\
             \"key\":\"nightly \\\"report\\\"\",\"node\":\"redis://:***@h:1\",\"ms\":1234.567,\
             \"outcome\":\"granted\",\"pid\":4242,\"reason\":\"held\",\"failed_nodes\":[\"a\",\"b\"],\
             \"uid\":null,\"msg\":\"redis://h:1: granted in 1.2ms\"}\n"
        );
        let back: serde_json::Value = serde_json::from_str(&line).expect("JSON");
        assert_eq!(
            back,
            serde_json::json!({
                "time": "2026-11-30T03:00:00.012Z", "level": "info", "event": "acquire",
                "key": "nightly \"report\"", "node": "redis://:***@h:1", "ms": 1234.567,
                "outcome": "granted", "pid": 4242, "reason": "held", "failed_nodes": ["a", "b"],
                "uid": null, "msg": "redis://h:1: granted in 1.2ms"
            })
        );
    }

    #[test]
    fn json_lines_leave_out_what_an_entry_lacks_and_stay_one_line() {
        let log = Log::new(0, Format::Json, "k");
        let msg = "a\"b\\c\nd\u{1}\u{2028}');redis.call('x')--";
        let line = log.line("error", &ev("message", msg), UNIX_EPOCH + AT);
        assert_eq!(
            line,
            "{\"time\":\"2026-11-30T03:00:00.012Z\",\"level\":\"error\",\"event\":\"message\",\
             \"key\":\"k\",\"msg\":\"a\\\"b\\\\c\\nd\\u0001\u{2028}');redis.call('x')--\"}\n"
        );
        assert_eq!(line.lines().count(), 1);
        let back: serde_json::Value = serde_json::from_str(&line).expect("JSON");
        assert_eq!(back["msg"], msg);
        // Milliseconds to the microsecond, never a float's noise.
        let ms = |d| log.line("info", &ev("x", "").ms(d), UNIX_EPOCH);
        assert!(ms(Duration::from_nanos(300_000_400)).contains(",\"ms\":300.0,"));
        assert!(ms(Duration::from_nanos(1_100_500)).contains(",\"ms\":1.101,"));
        let text = Log::new(0, Format::Text, "k");
        assert_eq!(
            text.line("info", &ev("x", "hello"), UNIX_EPOCH),
            "redlock-run: hello\n"
        );
    }
}
