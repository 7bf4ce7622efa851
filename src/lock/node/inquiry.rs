//! Read-only questions for `check`: what a node says of itself (`INFO`,
//! `CONFIG GET`, `TIME`, `CLUSTER INFO`), where its requests go now, the
//! certificate its server presented, and a Sentinel group's sentinels, each
//! asked on its own. Nothing here writes to a node; every question goes the
//! one way all requests go (see `state`).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use redis::{Cmd, Value};

use super::error::{self, NodeError};
use super::topology::Topology;
use super::{Node, Nodes, Options, Pace, Request, State, tls};

/// `field: value` lines of an `INFO` or `CLUSTER INFO` reply.
pub(crate) type Fields = BTreeMap<String, String>;

/// What stands behind a node's URL.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Shape {
    Server,
    /// A Sentinel group's primary: the group's name, and how many
    /// sentinels the URL names.
    Sentinel {
        master: String,
        sentinels: usize,
    },
    Cluster,
}

impl Node {
    /// What stands behind the URL.
    pub(crate) fn shape(&self) -> Shape {
        match &self.topology {
            Topology::Server { .. } => Shape::Server,
            Topology::Sentinel {
                master, sentinels, ..
            } => Shape::Sentinel {
                master: master.clone(),
                sentinels: sentinels.len(),
            },
            Topology::Cluster { .. } => Shape::Cluster,
        }
    }

    /// The server that requests for `key` go to now (`host:port`), where it
    /// is known: after a request, a Sentinel group's primary and a
    /// Cluster's slot master are.
    pub(crate) fn serving(&self, key: &[u8]) -> Option<String> {
        self.state()
            .serving(self, crate::lock::keys::hash_slot(key))
    }

    /// The certificates the node's TLS servers presented, on the
    /// connections standing, with each server's `host:port`.
    pub(crate) fn certificates(&self) -> Vec<(String, Vec<u8>)> {
        self.state().peer_certificates()
    }
}

impl Nodes {
    /// The sentinels of node `i`, when it is a Sentinel group, each a node
    /// of its own (reached with the sentinels' credentials), so that each
    /// can be asked on its own.
    pub(crate) fn sentinels_of(&self, i: usize, opts: &Options) -> Option<Nodes> {
        let node = self.list.get(i)?;
        let Topology::Sentinel {
            sentinels,
            tls,
            sentinel_auth,
            ..
        } = &node.topology
        else {
            return None;
        };
        let list = sentinels
            .iter()
            .map(|place| {
                Arc::new(Node {
                    name: format!("sentinel {} of {}", place.authority(), node.name),
                    timeout: node.timeout,
                    replicas: 0,
                    restart_grace: Duration::ZERO,
                    durable: false,
                    topology: Topology::Server {
                        place: place.clone(),
                        tls: tls.then_some(false),
                        auth: sentinel_auth.clone(),
                        db: 0,
                    },
                    tls: tls::Tls::new(opts),
                    names: Arc::clone(&self.names),
                    secrets: Arc::clone(&node.secrets),
                    state: Mutex::new(State::default()),
                })
            })
            .collect();
        Some(Nodes {
            list,
            names: Arc::clone(&self.names),
            pace: Pace::default(),
        })
    }
}

/// Whether an error's text says the server's ACL refused the request (see
/// `error::permission_denied`).
pub(crate) fn denied(text: &str) -> bool {
    text.contains("ACL denies")
}

/// The command an ACL refusal names: `'eval' command`, or a script's
/// `DEL: ...` (Redis before 7.2 words a refusal inside a script without the
/// command's name, so the scripts name it).
pub(crate) fn refused_command(why: &str) -> Option<String> {
    if let Some(end) = why.find("' command") {
        let start = why[..end].rfind('\'')? + 1;
        return Some(why[start..end].to_ascii_uppercase());
    }
    let detail = why.split("ACL denies this user: ").nth(1)?;
    let (word, _) = detail.split_once(':')?;
    (!word.is_empty() && word.bytes().all(|b| b.is_ascii_uppercase() || b == b'|'))
        .then(|| word.to_string())
}

/// `PING`: whether the node answers and lets us in, and how fast.
pub(crate) struct Ping {
    pub near: Vec<u8>,
}

impl Request for Ping {
    type Answer = ();

    fn command(&self, _: usize) -> Option<Cmd> {
        Some(redis::cmd("PING"))
    }

    fn key(&self) -> &[u8] {
        &self.near
    }

    fn decode(&self, _: usize, _: Value, _: &str) -> Result<(), NodeError> {
        Ok(())
    }
}

/// `INFO` with its default sections (server, replication, persistence,
/// memory among them), or `CLUSTER INFO`.
pub(crate) struct Info {
    pub near: Vec<u8>,
    /// `CLUSTER INFO` rather than `INFO`.
    pub cluster: bool,
}

impl Request for Info {
    type Answer = Fields;

    fn command(&self, _: usize) -> Option<Cmd> {
        Some(if self.cluster {
            redis::cmd("CLUSTER").arg("INFO").clone()
        } else {
            redis::cmd("INFO")
        })
    }

    fn key(&self) -> &[u8] {
        &self.near
    }

    fn decode(&self, _: usize, v: Value, name: &str) -> Result<Fields, NodeError> {
        let text = match &v {
            Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
            Value::VerbatimString { text, .. } => text.clone(),
            other => return Err(error::unexpected(name, "INFO", other)),
        };
        Ok(fields(&text))
    }
}

/// The `field:value` lines of an INFO text.
pub(crate) fn fields(text: &str) -> Fields {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect()
}

/// `CONFIG GET name`: its value; None when the server has no such
/// parameter.
pub(crate) struct ConfigGet {
    pub name: &'static str,
    pub near: Vec<u8>,
}

impl Request for ConfigGet {
    type Answer = Option<String>;

    fn command(&self, _: usize) -> Option<Cmd> {
        Some(redis::cmd("CONFIG").arg("GET").arg(self.name).clone())
    }

    fn key(&self) -> &[u8] {
        &self.near
    }

    fn decode(&self, _: usize, v: Value, name: &str) -> Result<Option<String>, NodeError> {
        let text = |v: &Value| match v {
            Value::BulkString(b) => Some(String::from_utf8_lossy(b).into_owned()),
            Value::SimpleString(s) => Some(s.clone()),
            _ => None,
        };
        match &v {
            Value::Array(parts) if parts.is_empty() => Ok(None),
            Value::Array(parts) => Ok(parts.get(1).and_then(text)),
            Value::Map(pairs) => Ok(pairs.first().and_then(|(_, v)| text(v))),
            other => Err(error::unexpected(name, "CONFIG GET", other)),
        }
    }
}

/// `TIME`: the node's clock, since the Unix epoch.
pub(crate) struct Time {
    pub near: Vec<u8>,
}

impl Request for Time {
    type Answer = Duration;

    fn command(&self, _: usize) -> Option<Cmd> {
        Some(redis::cmd("TIME"))
    }

    fn key(&self) -> &[u8] {
        &self.near
    }

    fn decode(&self, _: usize, v: Value, name: &str) -> Result<Duration, NodeError> {
        let number = |v: Option<&Value>| match v {
            Some(Value::BulkString(b)) => std::str::from_utf8(b).ok()?.parse::<u64>().ok(),
            Some(Value::Int(n)) => u64::try_from(*n).ok(),
            _ => None,
        };
        match &v {
            Value::Array(parts) => match (number(parts.first()), number(parts.get(1))) {
                (Some(s), Some(us)) => Ok(Duration::from_secs(s) + Duration::from_micros(us)),
                _ => Err(error::unexpected(name, "TIME", &v)),
            },
            other => Err(error::unexpected(name, "TIME", other)),
        }
    }
}

/// `SENTINEL get-master-addr-by-name`: the primary a sentinel names
/// (`host:port`), None when it knows none.
pub(crate) struct PrimaryOf {
    pub master: String,
}

impl Request for PrimaryOf {
    type Answer = Option<String>;

    fn command(&self, _: usize) -> Option<Cmd> {
        Some(
            redis::cmd("SENTINEL")
                .arg("get-master-addr-by-name")
                .arg(&self.master)
                .clone(),
        )
    }

    fn key(&self) -> &[u8] {
        b""
    }

    fn decode(&self, _: usize, v: Value, name: &str) -> Result<Option<String>, NodeError> {
        let text = |v: &Value| match v {
            Value::BulkString(b) => Some(String::from_utf8_lossy(b).into_owned()),
            _ => None,
        };
        match &v {
            Value::Nil => Ok(None),
            Value::Array(parts) => {
                match (parts.first().and_then(text), parts.get(1).and_then(text)) {
                    (Some(host), Some(port)) => Ok(Some(format!("{host}:{port}"))),
                    _ => Err(error::unexpected(
                        name,
                        "SENTINEL get-master-addr-by-name",
                        &v,
                    )),
                }
            }
            other => Err(error::unexpected(
                name,
                "SENTINEL get-master-addr-by-name",
                other,
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn info_fields() {
        let f = fields(
            "# Server\r\nredis_version:7.0.15\r\nrun_id:ab\r\n\r\n# Memory\r\nmaxmemory_policy:noeviction\r\n",
        );
        assert_eq!(f.get("redis_version").map(String::as_str), Some("7.0.15"));
        assert_eq!(
            f.get("maxmemory_policy").map(String::as_str),
            Some("noeviction")
        );
        assert_eq!(f.len(), 3);
    }

    #[test]
    fn config_get_and_time_replies() {
        let bulk = |s: &str| Value::BulkString(s.as_bytes().to_vec());
        let get = ConfigGet {
            name: "appendfsync",
            near: Vec::new(),
        };
        let v = Value::Array(vec![bulk("appendfsync"), bulk("always")]);
        assert_eq!(get.decode(0, v, "n").ok(), Some(Some("always".into())));
        assert_eq!(get.decode(0, Value::Array(vec![]), "n").ok(), Some(None));
        let t = Time { near: Vec::new() };
        let v = Value::Array(vec![bulk("1700000000"), bulk("250000")]);
        assert_eq!(
            t.decode(0, v, "n").ok(),
            Some(Duration::from_millis(1_700_000_000_250))
        );
    }
}
