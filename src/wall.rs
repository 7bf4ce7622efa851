//! Wall-clock times as records, `--report` and the JSON log write them:
//! RFC 3339 in UTC to the millisecond, clamped to four-digit years.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Deserializer, Serializer};

/// A wall-clock time as RFC 3339 in UTC to the millisecond
/// (`2026-11-30T03:00:00.012Z`), as records, `--report` and the JSON log
/// write it (see `rfc3339` for clocks outside 1970..=9999).
pub(crate) mod time_ms {
    use super::*;

    pub(crate) fn serialize<S: Serializer>(t: &SystemTime, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&rfc3339(*t))
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<SystemTime, D::Error> {
        let text = String::deserialize(d)?;
        humantime::parse_rfc3339(&text).map_err(serde::de::Error::custom)
    }
}

/// Unix time to the millisecond, in UTC, as `2026-11-30T03:00:00.012Z`;
/// a time outside what RFC 3339 writes as the nearest one it does (see
/// `writable`).
pub(crate) fn rfc3339(t: SystemTime) -> String {
    humantime::format_rfc3339_millis(writable(t)).to_string()
}

/// The last moment with a four-digit year: 9999-12-31T23:59:59.999Z.
const LAST_WRITABLE: Duration = Duration::from_millis(253_402_300_799_999);

/// `t` moved into 1970-01-01T00:00:00Z..=9999-12-31T23:59:59.999Z. A host
/// clock can be anywhere, and humantime panics on a time before 1970 and
/// fails on one past 9999 (which serde_json and `to_string` turn into a
/// panic): the first time written after the command ran would end the run
/// with the lock still held. Clamped, such a time still reads back.
pub(crate) fn writable(t: SystemTime) -> SystemTime {
    match t.duration_since(UNIX_EPOCH) {
        Err(_) => UNIX_EPOCH,
        Ok(d) if d > LAST_WRITABLE => UNIX_EPOCH + LAST_WRITABLE,
        Ok(_) => t,
    }
}

/// A wall-clock time cut to whole milliseconds, as a record keeps it.
pub(crate) fn to_millis(t: SystemTime) -> SystemTime {
    let ms = t
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
    UNIX_EPOCH + Duration::from_millis(ms)
}
