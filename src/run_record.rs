//! The run history: one record per run that took the lock, appended beside
//! the lock on every node when the run ends (see `lock::end`) and read
//! back, merged across nodes, by `history` and `status`.
//!
//! A record is one JSON object per list element, so that `redis-cli LRANGE`
//! shows something a person (or `jq`) can read. Its `id` is the run's token
//! (`REDLOCK_TOKEN`): unique per run, the same on every node, and what the
//! job's own logs can be matched with. Older and newer versions share a
//! history: a field a record lacks is read as its default below, and fields
//! this version does not know are ignored.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::exit::Exit;
use crate::outcome::Outcome;

/// One run that took the lock; the field order is the stored one.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Record {
    /// The run's token: a record without one is not read.
    #[serde(deserialize_with = "non_empty")]
    pub id: String,
    #[serde(default = "unknown")]
    pub host: String,
    #[serde(default)]
    pub pid: u32,
    #[serde(default = "unknown")]
    pub user: String,
    /// When the first attempt started (or, for a run whose command never
    /// started, when the lock was taken), to the millisecond. Required.
    #[serde(with = "crate::wall::time_ms")]
    pub started_at: SystemTime,
    /// Until the last attempt's process tree was gone.
    #[serde(default)]
    pub duration_ms: u64,
    /// The run's outcome ([`Outcome`]'s word): ok, failed, signal, lost,
    /// timeout, not-run, unavailable. Kept as read, so that a word a newer
    /// version adds still shows.
    #[serde(default = "unknown")]
    pub outcome: String,
    #[serde(default)]
    pub exit_code: u8,
    /// Attempts whose command started (`--retry`); records from before
    /// `--retry` had one.
    #[serde(default = "one")]
    pub attempts: u32,
    /// With `--fence`; `null` without.
    pub fencing_token: Option<u64>,
    /// A --shared reader's run (`"lock": "shared"`; else `"exclusive"`,
    /// as every record older versions wrote is).
    #[serde(rename = "lock", with = "lock_word", default)]
    pub shared: bool,
    /// With `--once-per`: the window's length in seconds, so that `status`
    /// can say until when a window it finds used stays used. Absent
    /// without (and in records older versions wrote).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window_s: Option<u64>,
    /// What nodes refused of the lock's upkeep in the run, each naming the
    /// step and the node (`release redis://lock2:6379: the ACL refuses
    /// DEL`): what it left behind until it expired. Absent when nothing was.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub refused: Vec<String>,
}

fn unknown() -> String {
    "?".into()
}

fn one() -> u32 {
    1
}

fn non_empty<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    let s = String::deserialize(d)?;
    if s.is_empty() {
        return Err(serde::de::Error::custom("an empty id"));
    }
    Ok(s)
}

/// `shared` as the record's `lock` field: "shared" or "exclusive". Any other
/// word (a kind a newer version adds) reads as exclusive.
mod lock_word {
    use super::*;

    pub(super) fn serialize<S: Serializer>(shared: &bool, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(if *shared { "shared" } else { "exclusive" })
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<bool, D::Error> {
        Ok(String::deserialize(d)? == "shared")
    }
}

impl Record {
    /// The record of this process's run: `token` is its lock token, the
    /// rest as the fields say.
    pub(crate) fn of_this_run(
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
            host: crate::host::hostname(),
            pid: std::process::id(),
            user: crate::host::user_name(),
            started_at: crate::wall::to_millis(started_at),
            duration_ms: u64::try_from(duration.as_millis()).unwrap_or(u64::MAX),
            outcome: Outcome::of(exit, false).word().to_string(),
            exit_code: exit.code(),
            attempts,
            fencing_token,
            shared,
            window_s: None,
            refused: Vec::new(),
        }
    }

    /// The record as stored (None only if serde_json could not write it,
    /// which these fields never make it do: then nothing is stored).
    pub(crate) fn to_json(&self) -> Option<String> {
        serde_json::to_string(self).ok()
    }

    /// A stored record; None for anything that is not one (a list element
    /// written by hand, a cut-off string): `id` and `started_at` are needed.
    pub(crate) fn from_json(text: &str) -> Option<Record> {
        serde_json::from_str(text).ok()
    }

    /// "shared" for a --shared reader's run, else "exclusive".
    pub(crate) fn lock_kind(&self) -> &'static str {
        if self.shared { "shared" } else { "exclusive" }
    }

    /// When the run ended.
    pub(crate) fn ended_at(&self) -> SystemTime {
        self.started_at + Duration::from_millis(self.duration_ms)
    }
}

/// The nodes' lists as one: every run once (by id), newest start first; runs
/// that started in the same millisecond by id, so every reader agrees.
pub(crate) fn merge(lists: impl IntoIterator<Item = Vec<Record>>) -> Vec<Record> {
    let mut by_id: BTreeMap<String, Record> = BTreeMap::new();
    for record in lists.into_iter().flatten() {
        // A run whose release a node refused is recorded again with that
        // said (see `Lock::end`): the fuller record wins.
        match by_id.entry(record.id.clone()) {
            std::collections::btree_map::Entry::Vacant(v) => {
                v.insert(record);
            }
            std::collections::btree_map::Entry::Occupied(mut o) => {
                if record.refused.len() > o.get().refused.len() {
                    o.insert(record);
                }
            }
        }
    }
    let mut all: Vec<Record> = by_id.into_values().collect();
    all.sort_by(|a, b| b.started_at.cmp(&a.started_at).then(a.id.cmp(&b.id)));
    all
}

/// A duration as the table shows it: 0.4s, 52.9s, 6m 52s, 2h 5m 3s.
pub(crate) fn show_ms(ms: u64) -> String {
    if ms < 60_000 {
        format!("{:.1}s", ms as f64 / 1000.0)
    } else {
        humantime::format_duration(Duration::from_secs(ms / 1000)).to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wall::{rfc3339, to_millis, writable};
    use std::time::UNIX_EPOCH;

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
            window_s: None,
            refused: Vec::new(),
        }
    }

    fn json(r: &Record) -> String {
        r.to_json().expect("a record serializes")
    }

    /// What this version stores, word for word: the field names, types and
    /// order older versions wrote and read.
    const STORED: &str = "{\"id\":\"5c0b1050aa\",\"host\":\"web3\",\"pid\":22306,\
        \"user\":\"deploy\",\"started_at\":\"2026-11-30T03:00:00.012Z\",\
        \"duration_ms\":412877,\"outcome\":\"ok\",\"exit_code\":0,\"attempts\":1,\
        \"fencing_token\":null,\"lock\":\"exclusive\"}";

    #[test]
    fn records_round_trip_through_json() {
        let mut r = record("5c0b1050aa", 1_796_007_600_012);
        assert_eq!(json(&r), STORED);
        assert_eq!(Record::from_json(&json(&r)), Some(r.clone()));
        r.shared = true;
        assert!(json(&r).ends_with(",\"lock\":\"shared\"}"));
        assert_eq!(Record::from_json(&json(&r)), Some(r.clone()));
        r.host = "we\"ird\\ host\n\u{1}\u{7f}ключ ✓ 𝄞".into();
        r.fencing_token = Some(u64::MAX);
        r.exit_code = 255;
        r.attempts = 3;
        let text = json(&r);
        assert!(!text.contains('\n') && !text.contains('\u{1}'), "{text}");
        assert!(
            text.contains(",\"fencing_token\":18446744073709551615,"),
            "{text}"
        );
        assert_eq!(Record::from_json(&text), Some(r.clone()));
        assert_eq!(
            r.ended_at(),
            UNIX_EPOCH + Duration::from_millis(1_796_007_600_012 + 412_877)
        );
    }

    #[test]
    fn history_json_is_the_array_of_stored_records() {
        let a = record("a", 2_000);
        let mut b = record("b", 1_000);
        b.fencing_token = Some(7);
        b.shared = true;
        let runs = vec![a.clone(), b.clone()];
        let text = serde_json::to_string(&runs).expect("JSON");
        assert_eq!(text, format!("[{},{}]", json(&a), json(&b)));
        assert_eq!(serde_json::from_str::<Vec<Record>>(&text).ok(), Some(runs));
        assert_eq!(
            serde_json::to_string(&Vec::<Record>::new()).ok(),
            Some("[]".into())
        );
    }

    #[test]
    fn records_older_versions_wrote_read_with_todays_defaults() {
        // As written before --shared: no `lock` field.
        let before_shared = STORED.replace(",\"lock\":\"exclusive\"", "");
        assert!(!before_shared.contains("lock"));
        assert_eq!(
            Record::from_json(&before_shared),
            Some(record("5c0b1050aa", 1_796_007_600_012))
        );
        // Only what a record cannot go without: every other field defaults.
        let bare = Record::from_json("{\"id\":\"a\",\"started_at\":\"2026-11-30T03:00:00Z\"}")
            .expect("a record");
        assert_eq!(
            bare,
            Record {
                id: "a".into(),
                host: "?".into(),
                pid: 0,
                user: "?".into(),
                started_at: UNIX_EPOCH + Duration::from_secs(1_796_007_600),
                duration_ms: 0,
                outcome: "?".into(),
                exit_code: 0,
                attempts: 1,
                fencing_token: None,
                shared: false,
                window_s: None,
                refused: Vec::new(),
            }
        );
    }

    #[test]
    fn other_writers_records_are_read_as_far_as_they_go() {
        // A newer version's extra fields, nested or not, escapes, and a
        // kind of lock this version does not know.
        let text = " { \"id\" : \"a\", \"started_at\": \"2026-11-30T03:00:00Z\", \
                    \"extra\": {\"x\": [1, 2.5e3, true, null, \"\\ud834\\udd1e\"]}, \
                    \"host\": \"h\\u00e9\\/\", \"pid\": 7, \"lock\": \"upgradable\", \
                    \"fencing_token\": 9, \"later\": null } ";
        let r = Record::from_json(text).expect("a record");
        assert_eq!((r.id.as_str(), r.host.as_str(), r.pid), ("a", "hé/", 7));
        assert_eq!(
            (r.attempts, r.fencing_token, r.outcome.as_str(), r.shared),
            (1, Some(9), "?", false)
        );
        // However deep an unknown field nests, it is skipped without
        // recursion: no stack to overflow.
        let deep = format!(
            "{{\"id\":\"a\",\"started_at\":\"2026-11-30T03:00:00Z\",\"x\":{}1{}}}",
            "[".repeat(100_000),
            "]".repeat(100_000)
        );
        assert_eq!(Record::from_json(&deep).map(|r| r.id), Some("a".into()));
        for bad in [
            "",
            "x",
            "{}",
            "[]",
            "null",
            "{\"id\":\"a\"}",
            "{\"started_at\":\"2026-11-30T03:00:00Z\"}",
            "{\"id\":\"\",\"started_at\":\"2026-11-30T03:00:00Z\"}",
            "{\"id\":7,\"started_at\":\"2026-11-30T03:00:00Z\"}",
            "{\"id\":\"a\",\"started_at\":\"yesterday\"}",
            "{\"id\":\"a\",\"started_at\":\"2026-11-30T03:00:00Z\"",
            "{\"id\":\"a\",\"started_at\":\"2026-11-30T03:00:00Z\"} trailing",
            "{\"id\":\"a\\q\",\"started_at\":\"2026-11-30T03:00:00Z\"}",
            "{\"id\":\"a\u{1}\",\"started_at\":\"2026-11-30T03:00:00Z\"}",
            "{\"id\":\"\\ud834\",\"started_at\":\"2026-11-30T03:00:00Z\"}",
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
        // The record a refusal amended wins, whichever list has it.
        let mut amended = a.clone();
        amended.refused = vec!["release redis://n:1: the ACL refuses DEL".into()];
        for lists in [
            [vec![a.clone()], vec![amended.clone(), a.clone()]],
            [vec![amended.clone(), a.clone()], vec![a.clone()]],
        ] {
            assert_eq!(merge(lists), [amended.clone()]);
        }
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

    #[test]
    fn clocks_outside_four_digit_years_are_written_clamped() {
        let before = UNIX_EPOCH - Duration::from_secs(2_000_000_000);
        let after = UNIX_EPOCH + Duration::from_secs(254_000_000_000);
        assert_eq!(rfc3339(before), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339(after), "9999-12-31T23:59:59.999Z");
        for t in [before, after] {
            let mut r = record("a", 0);
            r.started_at = t;
            let back = Record::from_json(&r.to_json().expect("written")).expect("read back");
            assert_eq!(back.started_at, writable(t));
        }
    }
}
