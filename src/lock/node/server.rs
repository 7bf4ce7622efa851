//! What a server says of itself on each fresh data connection, asked ahead
//! of the connection's first request (so it costs no round trip): its
//! `run_id`, how long it has been up, what it is, and whether it writes
//! every change to disk before it answers. The lock reads its votes by it:
//! a node that may have forgotten a lock gives none (see `Node::uncounted`).

use std::time::{Duration, Instant};

use redis::Value;

/// `INFO server`, `CONFIG GET appendonly` and `CONFIG GET appendfsync`,
/// sent in one write: [`ANSWERS`] replies. Two exact names, not `append*`:
/// a pattern makes the server match it against every setting it has (41 µs
/// of Redis 7.0's time on every run, in front of the acquire's answer).
pub(super) fn questions() -> Vec<u8> {
    let mut bytes = redis::cmd("INFO").arg("server").get_packed_command();
    for name in ["appendonly", "appendfsync"] {
        bytes.extend(
            redis::cmd("CONFIG")
                .arg("GET")
                .arg(name)
                .get_packed_command(),
        );
    }
    bytes
}

/// The replies to [`questions`].
pub(super) const ANSWERS: usize = 3;

/// What the server said.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Server {
    pub run_id: Option<String>,
    /// How long it had been up at the least, and when that was read.
    pub up: Option<(Duration, Instant)>,
    /// `Redis 7.0.15`, `Valkey 9.1.2`.
    pub product: Option<String>,
    /// `redis_version` (Valkey gives a compatible one): WAITAOF is 7.2's.
    pub version: Option<(u32, u32)>,
    /// `appendonly` and `appendfsync`, where CONFIG GET answered.
    pub appendonly: Option<bool>,
    pub appendfsync: Option<String>,
}

impl Server {
    /// From the replies to `questions`, read at `now`.
    pub(super) fn read(replies: &[Value], now: Instant) -> Server {
        let mut server = Server::default();
        if let Some(Value::BulkString(text)) = replies.first() {
            server.info(text, now);
        }
        let pairs = replies.iter().skip(1).filter_map(|r| match r {
            Value::Array(pairs) => Some(pairs),
            _ => None,
        });
        for pairs in pairs {
            for pair in pairs.chunks(2) {
                let [Value::BulkString(k), Value::BulkString(v)] = pair else {
                    continue;
                };
                let v = String::from_utf8_lossy(v).to_ascii_lowercase();
                match k.as_slice() {
                    b"appendonly" => server.appendonly = Some(v == "yes"),
                    b"appendfsync" => server.appendfsync = Some(v),
                    _ => {}
                }
            }
        }
        server
    }

    /// Its fields from the INFO text, in one pass: a run reads it from
    /// every node while the lock waits for their votes.
    fn info(&mut self, text: &[u8], now: Instant) {
        let (mut redis, mut name, mut valkey) = (None, None, None);
        for line in text.split(|b| *b == b'\n') {
            let Some(colon) = line.iter().position(|b| *b == b':') else {
                continue;
            };
            let Ok(value) = std::str::from_utf8(line[colon + 1..].trim_ascii()) else {
                continue;
            };
            if value.is_empty() {
                continue;
            }
            match &line[..colon] {
                b"run_id" => self.run_id = Some(value.to_string()),
                // A difference of whole seconds of the server's clock: a
                // server started a moment before a second turned says 1. So
                // one less.
                b"uptime_in_seconds" => {
                    self.up = value
                        .parse::<u64>()
                        .ok()
                        .map(|s| (Duration::from_secs(s.saturating_sub(1)), now));
                }
                b"redis_version" => redis = Some(value),
                b"server_name" => name = Some(value),
                b"valkey_version" => valkey = Some(value),
                _ => {}
            }
        }
        self.version = redis.and_then(|v| {
            let mut parts = v.split('.').map(|p| p.parse::<u32>().ok());
            Some((parts.next()??, parts.next()??))
        });
        self.product = match (name, valkey, redis) {
            (Some(name), Some(v), _) if name.eq_ignore_ascii_case("valkey") => {
                Some(format!("Valkey {v}"))
            }
            (_, _, Some(v)) => Some(format!("Redis {v}")),
            _ => None,
        };
    }

    /// What it is and how long it has been up, for -v: `Valkey 9.1.2, up
    /// 3d 4h`; None when it said neither.
    pub(crate) fn describe(&self, now: Instant) -> Option<String> {
        let up = self.uptime(now).map(|d| {
            format!(
                "up {}",
                humantime::format_duration(Duration::from_secs(d.as_secs()))
            )
        });
        let parts: Vec<String> = self.product.iter().cloned().chain(up).collect();
        (!parts.is_empty()).then(|| parts.join(", "))
    }

    /// How long it has been up at `now`, where it said.
    pub(crate) fn uptime(&self, now: Instant) -> Option<Duration> {
        self.up
            .map(|(up, at)| up + now.saturating_duration_since(at))
    }

    /// Whether it has WAITAOF (Redis 7.2, and every Valkey).
    pub(crate) fn has_waitaof(&self) -> bool {
        self.version.is_some_and(|v| v >= (7, 2))
    }

    /// Every write reaches its disk before the answer: `appendonly yes`
    /// with `appendfsync always`. A restart replays them all.
    pub(crate) fn syncs_every_write(&self) -> bool {
        self.appendonly == Some(true) && self.appendfsync.as_deref() == Some("always")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    #[test]
    fn a_redis_server_says_its_uptime_version_and_persistence() {
        let now = Instant::now();
        let info =
            bulk("# Server\r\nredis_version:7.0.15\r\nrun_id:abc\r\nuptime_in_seconds:42\r\n");
        let only = Value::Array(vec![bulk("appendonly"), bulk("yes")]);
        let fsync = Value::Array(vec![bulk("appendfsync"), bulk("always")]);
        let s = Server::read(&[info, only, fsync], now);
        assert_eq!(s.run_id.as_deref(), Some("abc"));
        assert_eq!(s.product.as_deref(), Some("Redis 7.0.15"));
        // 42 whole seconds of its clock: at least 41 s up.
        assert_eq!(
            s.uptime(now + Duration::from_secs(3)),
            Some(Duration::from_secs(44))
        );
        assert!(s.syncs_every_write());
        assert!(!s.has_waitaof());
    }

    #[test]
    fn valkey_is_named_by_its_own_version_and_has_waitaof() {
        let info = bulk(
            "server_name:valkey\r\nvalkey_version:9.1.2\r\nredis_version:7.2.4\r\n\
             uptime_in_seconds:0\r\n",
        );
        let refused = redis::parse_redis_value(b"-NOPERM no\r\n").expect("parses");
        let s = Server::read(&[info, refused.clone(), refused], Instant::now());
        assert_eq!(s.product.as_deref(), Some("Valkey 9.1.2"));
        assert!(s.has_waitaof());
        // CONFIG GET refused: nothing is known of its persistence.
        assert_eq!((s.appendonly, s.appendfsync.as_deref()), (None, None));
        assert!(!s.syncs_every_write());
    }

    #[test]
    fn an_info_refused_tells_nothing() {
        let s = Server::read(&[Value::Nil, Value::Nil, Value::Nil], Instant::now());
        assert_eq!(s, Server::default());
        assert_eq!(s.uptime(Instant::now()), None);
    }
}
