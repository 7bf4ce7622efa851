//! The run history: one record per run that took the lock, appended beside
//! the lock on every node when the run ends (see `lock::history`) and read
//! back, merged across nodes, by `history` and `status`.
//!
//! A record is one JSON object per list element, so that `redis-cli LRANGE`
//! shows something a person (or `jq`) can read. Its `id` is the run's token
//! (`REDLOCK_TOKEN`): unique per run, the same on every node, and what the
//! job's own logs can be matched with. Unknown fields are ignored when
//! reading, so that older and newer versions share a history.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::exit::Exit;
use crate::log::{json_object, json_str};
use crate::outcome::Outcome;

/// One run that took the lock.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    /// The run's token.
    pub id: String,
    pub host: String,
    pub pid: u32,
    pub user: String,
    /// When the first attempt started (or, for a run whose command never
    /// started, when the lock was taken), to the millisecond.
    pub started_at: SystemTime,
    /// Until the last attempt's process tree was gone.
    pub duration_ms: u64,
    /// The run's outcome ([`Outcome`]'s word): ok, failed, signal, lost,
    /// timeout, not-run, unavailable. Kept as read, so that a word a newer
    /// version adds still shows.
    pub outcome: String,
    pub exit_code: u8,
    /// Attempts whose command started (`--retry`).
    pub attempts: u32,
    /// With `--fence`.
    pub fencing_token: Option<u64>,
    /// A --shared reader's run (`"lock": "shared"`; else `"exclusive"`,
    /// as every record older versions wrote is).
    pub shared: bool,
}

impl Record {
    /// The record of this process's run: `token` is its lock token, the
    /// rest as the fields say.
    pub fn of_this_run(
        token: &str,
        started_at: SystemTime,
        duration: Duration,
        exit: Exit,
        attempts: u32,
        fencing_token: Option<u64>,
        shared: bool,
    ) -> Record {
        Record {
            id: token.to_string(),
            host: crate::lock::record::hostname(),
            pid: std::process::id(),
            user: crate::lock::record::user_name(),
            started_at: to_millis(started_at),
            duration_ms: u64::try_from(duration.as_millis()).unwrap_or(u64::MAX),
            outcome: Outcome::of(exit, false).word().to_string(),
            exit_code: exit.code(),
            attempts,
            fencing_token,
            shared,
        }
    }

    /// The record as stored, and as `history --json` prints it.
    pub fn to_json(&self) -> String {
        json_object(&[
            ("id", json_str(&self.id)),
            ("host", json_str(&self.host)),
            ("pid", self.pid.to_string()),
            ("user", json_str(&self.user)),
            ("started_at", json_str(&rfc3339(self.started_at))),
            ("duration_ms", self.duration_ms.to_string()),
            ("outcome", json_str(&self.outcome)),
            ("exit_code", self.exit_code.to_string()),
            ("attempts", self.attempts.to_string()),
            (
                "fencing_token",
                self.fencing_token.map_or("null".into(), |t| t.to_string()),
            ),
            ("lock", json_str(self.lock_kind())),
        ])
    }

    /// A stored record; None for anything that is not one (a list element
    /// written by hand, a cut-off string): `id` and `started_at` are needed.
    pub fn from_json(text: &str) -> Option<Record> {
        let fields: BTreeMap<String, Json> = parse_object(text)?.into_iter().collect();
        let text_of = |k: &str| match fields.get(k) {
            Some(Json::Str(s)) => Some(s.clone()),
            _ => None,
        };
        let number = |k: &str| match fields.get(k) {
            Some(Json::Num(n)) => n.parse::<u64>().ok(),
            _ => None,
        };
        let id = text_of("id").filter(|id| !id.is_empty())?;
        let started_at = humantime::parse_rfc3339(&text_of("started_at")?).ok()?;
        Some(Record {
            id,
            host: text_of("host").unwrap_or_else(|| "?".into()),
            pid: number("pid")
                .and_then(|p| u32::try_from(p).ok())
                .unwrap_or(0),
            user: text_of("user").unwrap_or_else(|| "?".into()),
            started_at,
            duration_ms: number("duration_ms").unwrap_or(0),
            outcome: text_of("outcome").unwrap_or_else(|| "?".into()),
            exit_code: number("exit_code")
                .and_then(|c| u8::try_from(c).ok())
                .unwrap_or(0),
            attempts: number("attempts")
                .and_then(|a| u32::try_from(a).ok())
                .unwrap_or(1),
            fencing_token: number("fencing_token"),
            shared: text_of("lock").as_deref() == Some("shared"),
        })
    }

    /// "shared" for a --shared reader's run, else "exclusive".
    pub fn lock_kind(&self) -> &'static str {
        if self.shared { "shared" } else { "exclusive" }
    }

    /// When the run ended.
    pub fn ended_at(&self) -> SystemTime {
        self.started_at + Duration::from_millis(self.duration_ms)
    }
}

/// Unix time to the millisecond, in UTC, as `2026-11-30T03:00:00.012Z`.
pub fn rfc3339(t: SystemTime) -> String {
    humantime::format_rfc3339_millis(t).to_string()
}

/// A wall-clock time cut to whole milliseconds, as a record keeps it.
pub fn to_millis(t: SystemTime) -> SystemTime {
    let ms = t
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
    UNIX_EPOCH + Duration::from_millis(ms)
}

/// The nodes' lists as one: every run once (by id), newest start first; runs
/// that started in the same millisecond by id, so every reader agrees.
pub fn merge(lists: impl IntoIterator<Item = Vec<Record>>) -> Vec<Record> {
    let mut by_id: BTreeMap<String, Record> = BTreeMap::new();
    for record in lists.into_iter().flatten() {
        by_id.entry(record.id.clone()).or_insert(record);
    }
    let mut all: Vec<Record> = by_id.into_values().collect();
    all.sort_by(|a, b| b.started_at.cmp(&a.started_at).then(a.id.cmp(&b.id)));
    all
}

/// A duration as the table shows it: 0.4s, 52.9s, 6m 52s, 2h 5m 3s.
pub fn show_ms(ms: u64) -> String {
    if ms < 60_000 {
        format!("{:.1}s", ms as f64 / 1000.0)
    } else {
        humantime::format_duration(Duration::from_secs(ms / 1000)).to_string()
    }
}

/// One JSON value, as far as reading a record needs it.
#[derive(Debug, PartialEq)]
enum Json {
    Str(String),
    /// The number as written.
    Num(String),
    /// true, false, null, an array or an object: not a field a record reads.
    Other,
}

/// The fields of a JSON object (only the whole text, nothing after it).
fn parse_object(text: &str) -> Option<Vec<(String, Json)>> {
    let mut p = Parser {
        bytes: text.as_bytes(),
        at: 0,
    };
    let fields = p.object()?;
    p.space();
    (p.at == p.bytes.len()).then_some(fields)
}

struct Parser<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl Parser<'_> {
    fn space(&mut self) {
        while matches!(self.bytes.get(self.at), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.at += 1;
        }
    }

    fn eat(&mut self, b: u8) -> Option<()> {
        self.space();
        (self.bytes.get(self.at) == Some(&b)).then(|| self.at += 1)
    }

    fn peek(&mut self) -> Option<u8> {
        self.space();
        self.bytes.get(self.at).copied()
    }

    /// Nesting is bounded by the call stack: no record is deep, and a hostile
    /// list element cannot be more than a few levels before it is refused.
    fn value(&mut self, depth: usize) -> Option<Json> {
        if depth > 16 {
            return None;
        }
        match self.peek()? {
            b'"' => self.string().map(Json::Str),
            b'{' => {
                self.at += 1;
                if self.eat(b'}').is_some() {
                    return Some(Json::Other);
                }
                loop {
                    self.space();
                    self.string()?;
                    self.eat(b':')?;
                    self.value(depth + 1)?;
                    if self.eat(b',').is_none() {
                        self.eat(b'}')?;
                        return Some(Json::Other);
                    }
                }
            }
            b'[' => {
                self.at += 1;
                if self.eat(b']').is_some() {
                    return Some(Json::Other);
                }
                loop {
                    self.value(depth + 1)?;
                    if self.eat(b',').is_none() {
                        self.eat(b']')?;
                        return Some(Json::Other);
                    }
                }
            }
            b't' | b'f' | b'n' => {
                for word in [&b"true"[..], b"false", b"null"] {
                    if self.bytes[self.at..].starts_with(word) {
                        self.at += word.len();
                        return Some(Json::Other);
                    }
                }
                None
            }
            _ => self.number().map(Json::Num),
        }
    }

    fn object(&mut self) -> Option<Vec<(String, Json)>> {
        self.eat(b'{')?;
        let mut fields = Vec::new();
        if self.eat(b'}').is_some() {
            return Some(fields);
        }
        loop {
            self.space();
            let key = self.string()?;
            self.eat(b':')?;
            fields.push((key, self.value(1)?));
            if self.eat(b',').is_none() {
                self.eat(b'}')?;
                return Some(fields);
            }
        }
    }

    fn number(&mut self) -> Option<String> {
        let start = self.at;
        while matches!(
            self.bytes.get(self.at),
            Some(b'0'..=b'9' | b'-' | b'+' | b'.' | b'e' | b'E')
        ) {
            self.at += 1;
        }
        let n = std::str::from_utf8(&self.bytes[start..self.at]).ok()?;
        n.parse::<f64>().ok().map(|_| n.to_string())
    }

    fn string(&mut self) -> Option<String> {
        if self.bytes.get(self.at) != Some(&b'"') {
            return None;
        }
        self.at += 1;
        let mut out: Vec<u8> = Vec::new();
        loop {
            let b = *self.bytes.get(self.at)?;
            self.at += 1;
            match b {
                b'"' => return String::from_utf8(out).ok(),
                b'\\' => {
                    let e = *self.bytes.get(self.at)?;
                    self.at += 1;
                    let c = match e {
                        b'"' => '"',
                        b'\\' => '\\',
                        b'/' => '/',
                        b'b' => '\u{8}',
                        b'f' => '\u{c}',
                        b'n' => '\n',
                        b'r' => '\r',
                        b't' => '\t',
                        b'u' => self.escaped_char()?,
                        _ => return None,
                    };
                    let mut buf = [0u8; 4];
                    out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
                }
                0..=0x1f => return None,
                _ => out.push(b),
            }
        }
    }

    /// After `\u`: four hex digits, or a surrogate pair of two escapes.
    fn escaped_char(&mut self) -> Option<char> {
        let hi = self.hex4()?;
        if (0xd800..0xdc00).contains(&hi) {
            if !self.bytes[self.at..].starts_with(b"\\u") {
                return None;
            }
            self.at += 2;
            let lo = self.hex4()?;
            if !(0xdc00..0xe000).contains(&lo) {
                return None;
            }
            return char::from_u32(0x10000 + ((hi - 0xd800) << 10) + (lo - 0xdc00));
        }
        char::from_u32(hi)
    }

    fn hex4(&mut self) -> Option<u32> {
        let digits = self.bytes.get(self.at..self.at + 4)?;
        self.at += 4;
        u32::from_str_radix(std::str::from_utf8(digits).ok()?, 16).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(id: &str, start_ms: u64) -> Record {
        Record {
            id: id.into(),
            host: "web3".into(),
            pid: 22306,
            user: "deploy".into(),
            started_at: UNIX_EPOCH + Duration::from_millis(start_ms),
            duration_ms: 412_877,
            outcome: "ok".into(),
            exit_code: 0,
            attempts: 1,
            fencing_token: None,
            shared: false,
        }
    }

    #[test]
    fn records_round_trip_through_json() {
        let mut r = record("5c0b1050aa", 1_796_007_600_012);
        assert_eq!(
            r.to_json(),
            "{\"id\":\"5c0b1050aa\",\"host\":\"web3\",\"pid\":22306,\"user\":\"deploy\",\
             \"started_at\":\"2026-11-30T03:00:00.012Z\",\"duration_ms\":412877,\
             \"outcome\":\"ok\",\"exit_code\":0,\"attempts\":1,\"fencing_token\":null,\
             \"lock\":\"exclusive\"}"
        );
        assert_eq!(Record::from_json(&r.to_json()), Some(r.clone()));
        r.shared = true;
        assert!(r.to_json().ends_with(",\"lock\":\"shared\"}"));
        assert_eq!(Record::from_json(&r.to_json()), Some(r.clone()));
        r.host = "we\"ird\\ host\n\u{1}ключ ✓ 𝄞".into();
        r.fencing_token = Some(u64::MAX);
        r.exit_code = 255;
        r.attempts = 3;
        assert_eq!(Record::from_json(&r.to_json()), Some(r.clone()));
        assert_eq!(
            r.ended_at(),
            UNIX_EPOCH + Duration::from_millis(1_796_007_600_012 + 412_877)
        );
    }

    #[test]
    fn other_writers_records_are_read_as_far_as_they_go() {
        // A newer version's extra fields, nested or not, and escapes.
        let text = " { \"id\" : \"a\", \"started_at\": \"2026-11-30T03:00:00Z\", \
                    \"extra\": {\"x\": [1, 2.5e3, true, null, \"\\ud834\\udd1e\"]}, \
                    \"host\": \"h\\u00e9\\/\", \"pid\": 7 } ";
        let r = Record::from_json(text).expect("a record");
        assert_eq!((r.id.as_str(), r.host.as_str(), r.pid), ("a", "hé/", 7));
        assert_eq!(
            (r.attempts, r.fencing_token, r.outcome.as_str()),
            (1, None, "?")
        );
        for bad in [
            "",
            "x",
            "{}",
            "[]",
            "{\"id\":\"a\"}",
            "{\"id\":\"\",\"started_at\":\"2026-11-30T03:00:00Z\"}",
            "{\"id\":\"a\",\"started_at\":\"yesterday\"}",
            "{\"id\":\"a\",\"started_at\":\"2026-11-30T03:00:00Z\"",
            "{\"id\":\"a\",\"started_at\":\"2026-11-30T03:00:00Z\"} trailing",
            "{\"id\":\"a\\q\",\"started_at\":\"2026-11-30T03:00:00Z\"}",
            "{\"id\":\"a\u{1}\",\"started_at\":\"2026-11-30T03:00:00Z\"}",
            "{\"id\":\"\\ud834\",\"started_at\":\"2026-11-30T03:00:00Z\"}",
            &format!(
                "{{\"id\":\"a\",\"x\":{}1{}}}",
                "[".repeat(40),
                "]".repeat(40)
            ),
        ] {
            assert_eq!(Record::from_json(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn merging_dedupes_and_puts_the_newest_first() {
        let a = record("a", 1_000);
        let b = record("b", 3_000);
        let c = record("c", 2_000);
        let d = record("d", 3_000);
        let merged = merge([
            vec![b.clone(), a.clone()],
            vec![d.clone(), c.clone(), a.clone()],
            vec![],
            vec![b.clone()],
        ]);
        let ids: Vec<&str> = merged.iter().map(|r| r.id.as_str()).collect();
        assert_eq!(ids, ["b", "d", "c", "a"]);
    }

    #[test]
    fn durations_read_well() {
        assert_eq!(show_ms(412), "0.4s");
        assert_eq!(show_ms(52_949), "52.9s");
        assert_eq!(show_ms(412_877), "6m 52s");
        assert_eq!(show_ms(7_503_000), "2h 5m 3s");
        let t = UNIX_EPOCH + Duration::from_micros(1_500_999);
        assert_eq!(to_millis(t), UNIX_EPOCH + Duration::from_millis(1_500));
        assert_eq!(rfc3339(to_millis(t)), "1970-01-01T00:00:01.500Z");
    }
}
