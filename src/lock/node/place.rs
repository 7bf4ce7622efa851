//! Two nodes that are one server: one server must count once in a quorum,
//! or "2 of 3 granted" may come from one machine, with no fault tolerance
//! left.
//!
//! By address first, which costs no request: the same address (any of
//! those a name resolves to), port and database, or the same Unix socket.
//! A server reached under two addresses of its own (loopback and a LAN
//! address, a proxy's port) is one `run_id`: a run reads it on each fresh
//! connection ahead of the first reply (see `state`) and refuses two votes
//! from one server when it counts them (`Lock::same_voter`); `status` asks
//! for it in a round of its own.

use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::Arc;

use super::Node;
use super::topology::{Names, Place, Topology};

/// Where a server listens, for telling two names of one server apart.
#[derive(Debug, PartialEq)]
enum Seat {
    Tcp {
        addrs: Vec<IpAddr>,
        port: u16,
        db: i64,
    },
    Unix {
        path: PathBuf,
        db: i64,
    },
}

impl Seat {
    /// What `self` and `other` have in common, worded; None when they are
    /// different servers (or databases).
    fn shared(&self, other: &Seat) -> Option<String> {
        match (self, other) {
            (
                Seat::Tcp { addrs, port, db },
                Seat::Tcp {
                    addrs: others,
                    port: p,
                    db: d,
                },
            ) if port == p && db == d => addrs
                .iter()
                .find(|a| others.contains(a))
                .map(|a| format!("{a} port {port}, database {db}")),
            (Seat::Unix { path, db }, Seat::Unix { path: p, db: d }) if path == p && db == d => {
                Some(format!("{}, database {db}", path.display()))
            }
            _ => None,
        }
    }
}

/// Where a plain server node is (None for a name that did not resolve, and
/// for Sentinel groups and Clusters, whose servers are found later).
fn seat(node: &Node, names: &Names) -> Option<Seat> {
    let Topology::Server { place, db, .. } = &node.topology else {
        return None;
    };
    match place {
        Place::Tcp { host, port } => {
            let addrs = match host.parse::<IpAddr>() {
                Ok(ip) => vec![ip],
                Err(_) => names.found(host)?,
            };
            Some(Seat::Tcp {
                addrs: addrs.into_iter().map(canonical).collect(),
                port: *port,
                db: *db,
            })
        }
        Place::Unix(path) => Some(Seat::Unix {
            path: std::fs::canonicalize(path).unwrap_or_else(|_| path.clone()),
            db: *db,
        }),
    }
}

/// Two of `nodes` that are one server by address, worded. `unlock` and
/// `history` need not ask: deleting or reading one server twice does no
/// harm; runs and `status` do.
pub(super) fn same_server(nodes: &[Arc<Node>], names: &Names) -> Option<String> {
    let seats: Vec<Option<Seat>> = nodes.iter().map(|n| seat(n, names)).collect();
    for (i, a) in seats.iter().enumerate() {
        for (j, b) in seats.iter().enumerate().skip(i + 1) {
            if let (Some(a), Some(b)) = (a, b)
                && let Some(at) = a.shared(b)
            {
                return Some(format!(
                    "{} and {} are the same server ({at}): each server counts once in the \
                     quorum, give each node once",
                    nodes[i].name(),
                    nodes[j].name()
                ));
            }
        }
    }
    None
}

/// Two nodes whose servers report the same `run_id`; `ids` in node order,
/// None where unknown.
pub(crate) fn same_run_id(names: &[&str], ids: &[Option<String>]) -> Option<String> {
    for (i, a) in ids.iter().enumerate() {
        for (j, b) in ids.iter().enumerate().skip(i + 1) {
            if let (Some(a), Some(b)) = (a, b)
                && a == b
            {
                return Some(format!(
                    "{} and {} are the same server (run_id {}): each server counts once in \
                     the quorum, give each node once",
                    names[i],
                    names[j],
                    &a[..a.len().min(8)]
                ));
            }
        }
    }
    None
}

/// An IPv4 address written as IPv6 (::ffff:a.b.c.d) is the IPv4 one.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tcp(addrs: &[&str], port: u16, db: i64) -> Seat {
        Seat::Tcp {
            addrs: addrs.iter().map(|a| a.parse().expect("ip")).collect(),
            port,
            db,
        }
    }

    #[test]
    fn one_server_under_two_names_is_seen() {
        let v4 = tcp(&["127.0.0.1"], 7000, 0);
        let localhost = tcp(&["::1", "127.0.0.1"], 7000, 0);
        assert!(
            v4.shared(&localhost)
                .is_some_and(|s| s.contains("127.0.0.1 port 7000"))
        );
        assert_eq!(v4.shared(&tcp(&["127.0.0.1"], 7001, 0)), None);
        assert_eq!(v4.shared(&tcp(&["127.0.0.1"], 7000, 1)), None);
        let sock = Seat::Unix {
            path: "/run/r.sock".into(),
            db: 0,
        };
        assert_eq!(sock.shared(&v4), None);
        assert_eq!(
            canonical("::ffff:127.0.0.1".parse().expect("ip")),
            "127.0.0.1".parse::<IpAddr>().expect("ip")
        );
    }
}
