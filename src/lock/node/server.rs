//! One Redis server (`redis://`, `rediss://`, `unix://`): its client, and a
//! connection with every step bounded, name resolution included. A Sentinel
//! group's primary is reached the same way once it is known.

use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use redis::{Client, Connection, ConnectionAddr, ConnectionInfo, IntoConnectionInfo};

use super::Options;
use super::error::{self, Failure, NodeError, Step};
use super::wire::{self, Line, Wire};

/// The client for `url`, with the options' credentials filling in for a
/// URL that carries none.
pub(super) fn client(url: &str, tls: bool, name: &str, opts: &Options) -> Result<Client, String> {
    if tls {
        super::tls_provider();
    }
    let mut url = url.to_string();
    if tls && opts.tls_insecure && !url.contains('#') {
        url.push_str("#insecure");
    }
    let info = url
        .as_str()
        .into_connection_info()
        .map_err(|_| format!("invalid Redis URL '{name}': it does not parse"))?;
    // Credentials from a file or the environment fill in for a URL that
    // carries none, so a crontab never needs a password in argv.
    let mut settings = info.redis_settings().clone();
    if settings.password().is_none()
        && let Some(password) = &opts.password
    {
        settings = settings.set_password(password);
        if settings.username().is_none()
            && let Some(user) = &opts.username
        {
            settings = settings.set_username(user);
        }
    }
    let info = lean(info.set_redis_settings(settings));
    match (tls, opts.certificates()) {
        (true, Some(certs)) => Client::build_with_tls(info, certs),
        _ => Client::open(info),
    }
    .map_err(|e| {
        format!(
            "cannot use Redis node '{name}': {}",
            e.detail().unwrap_or("bad TLS files")
        )
    })
}

/// `info` without what would cost a round trip or a delayed packet on every
/// connection: CLIENT SETINFO, and Nagle's algorithm.
pub(super) fn lean(info: ConnectionInfo) -> ConnectionInfo {
    let settings = info.redis_settings().clone().set_skip_set_lib_name();
    let tcp = info.tcp_settings().clone().set_nodelay(true);
    info.set_redis_settings(settings).set_tcp_settings(tcp)
}

/// A connection to `client`'s server, with read and write bounded by
/// `timeout` as well as the connect.
pub(super) fn connect(
    client: &Client,
    name: &str,
    timeout: Duration,
) -> Result<Connection, Failure> {
    let conn = match client.get_connection_info().addr() {
        // The crate's connect timeout does not cover name resolution: a
        // hung DNS server would hold this node (and its queue) far longer
        // than the node timeout. Resolve here, bounded, and connect to the
        // address found.
        ConnectionAddr::Tcp(host, port) if host.parse::<IpAddr>().is_err() => {
            // Every address in turn, as a resolver-backed connect would:
            // "localhost" is often ::1 first and 127.0.0.1 second. All of
            // them within the one node timeout.
            let until = Instant::now() + timeout;
            let mut last = None;
            for ip in resolve(host, *port, name, timeout).map_err(Failure::Other)? {
                let left = until.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    break;
                }
                let info = client.get_connection_info().clone();
                match Client::open(info.set_addr(ConnectionAddr::Tcp(ip.to_string(), *port)))
                    .and_then(|c| c.get_connection_with_timeout(left))
                {
                    Ok(conn) => {
                        last = Some(Ok(conn));
                        break;
                    }
                    Err(e) => last = Some(Err(e)),
                }
            }
            match last {
                Some(result) => result,
                None => {
                    return Err(Failure::Other(NodeError::timed_out(format!(
                        "{name}: {}",
                        super::error::no_answer(timeout)
                    ))));
                }
            }
        }
        // TLS checks the certificate against the name, so the crate must
        // connect by name; resolving once first still bounds a hung lookup
        // (the crate's own lookup then finds the answer in the resolver's cache
        // where there is one).
        ConnectionAddr::TcpTls { host, port, .. } if host.parse::<IpAddr>().is_err() => {
            resolve(host, *port, name, timeout).map_err(Failure::Other)?;
            client.get_connection_with_timeout(timeout)
        }
        _ => client.get_connection_with_timeout(timeout),
    }
    .map_err(|e| Failure::of(name, timeout, &e))?;
    // The crate bounds only the connect; reads and writes would block forever
    // on a node that is stopped but still completes TCP handshakes.
    conn.set_read_timeout(Some(timeout))
        .and_then(|()| conn.set_write_timeout(Some(timeout)))
        .map_err(|e| Failure::of(name, timeout, &e))?;
    Ok(conn)
}

/// redlock-run's own connection to `client`'s server (see `wire`), with
/// the handshake the crate would do (AUTH, SELECT), everything within
/// `timeout`, and `INFO server` written behind it (see `Wire::ask_run_id`);
/// None where the crate's connection must do (TLS, RESP3).
pub(super) fn own(
    client: &Client,
    name: &str,
    timeout: Duration,
    line: &Arc<Mutex<Line>>,
) -> Option<Result<Wire, Failure>> {
    let info = client.get_connection_info();
    let settings = info.redis_settings();
    if settings.protocol() != redis::ProtocolVersion::RESP2 {
        return None;
    }
    let until = Instant::now() + timeout;
    let io = |e: std::io::Error| Failure::of(name, timeout, &redis::RedisError::from(e));
    let stream = match info.addr() {
        ConnectionAddr::Tcp(host, port) => {
            let addrs: Vec<SocketAddr> = match host.trim_matches(['[', ']']).parse::<IpAddr>() {
                Ok(ip) => vec![SocketAddr::new(ip, *port)],
                Err(_) => match resolve(host, *port, name, timeout) {
                    Ok(ips) => ips
                        .into_iter()
                        .map(|ip| SocketAddr::new(ip, *port))
                        .collect(),
                    Err(e) => return Some(Err(Failure::Other(e))),
                },
            };
            let left = until.saturating_duration_since(Instant::now());
            wire::connect_tcp(&addrs, left.max(Duration::from_millis(1)))
        }
        ConnectionAddr::Unix(path) => wire::connect_unix(path),
        _ => return None,
    };
    Some(
        stream
            .map_err(io)
            .and_then(|s| setup(s, client, name, timeout, line)),
    )
}

/// Where redlock-run's own connection to `client`'s server goes: an IP
/// address, a Unix socket, or a host name. None for TLS or RESP3.
pub(super) enum Literal {
    Tcp(SocketAddr),
    Unix(std::path::PathBuf),
    /// A host name: connected to only at the addresses the run found for
    /// it (see `Node::remember`).
    Named,
}

pub(super) fn literal(client: &Client) -> Option<Literal> {
    let info = client.get_connection_info();
    if info.redis_settings().protocol() != redis::ProtocolVersion::RESP2 {
        return None;
    }
    match info.addr() {
        ConnectionAddr::Tcp(host, port) => host
            .trim_matches(['[', ']'])
            .parse::<IpAddr>()
            .ok()
            .map(|ip| Literal::Tcp(SocketAddr::new(ip, *port)))
            .or(Some(Literal::Named)),
        ConnectionAddr::Unix(path) => Some(Literal::Unix(path.clone())),
        _ => None,
    }
}

/// A fresh connection to `client`'s server made redlock-run's own (see
/// `wire`): the set-up the crate would do (AUTH, SELECT), answered before
/// anything else is written, and `INFO server` written behind it (see
/// `Wire::ask_run_id`).
pub(super) fn setup(
    stream: wire::Stream,
    client: &Client,
    name: &str,
    timeout: Duration,
    line: &Arc<Mutex<Line>>,
) -> Result<Wire, Failure> {
    let settings = client.get_connection_info().redis_settings();
    let io = |e: std::io::Error| Failure::of(name, timeout, &redis::RedisError::from(e));
    let mut wire = Wire::new(stream, line, timeout, settings.db()).map_err(io)?;
    let mut steps: Vec<(Step, redis::Cmd)> = Vec::new();
    if let Some(password) = settings.password() {
        let mut auth = redis::cmd("AUTH");
        if let Some(user) = settings.username() {
            auth.arg(user);
        }
        steps.push((Step::Auth, auth.arg(password).clone()));
    }
    if settings.db() != 0 {
        steps.push((
            Step::Select(settings.db()),
            redis::cmd("SELECT").arg(settings.db()).clone(),
        ));
    }
    // Answered before any request goes out (see `Wire::setup`): a password
    // or a database costs a round trip, and a refusal leaves nothing behind.
    let packed: Vec<u8> = steps
        .iter()
        .flat_map(|(_, c)| c.get_packed_command())
        .collect();
    let replies = match wire.setup(&packed, steps.len()) {
        Ok(r) => r,
        Err(e) => {
            wire.discard(false);
            return Err(Failure::of(name, timeout, &e));
        }
    };
    for ((step, _), reply) in steps.iter().zip(&replies) {
        if let redis::Value::ServerError(e) = reply {
            wire.discard(false);
            return Err(Failure::Other(error::refused_setup(name, *step, e)));
        }
    }
    // One server reached under two names must not get two votes: its
    // run_id, asked for here, is known by the time the first reply is.
    wire.ask_run_id();
    wire.timeout = timeout;
    Ok(wire)
}

/// Where a server listens, for telling two names of one server apart.
#[derive(Debug, PartialEq)]
pub(super) enum Place {
    Tcp {
        addrs: Vec<IpAddr>,
        port: u16,
        db: i64,
    },
    Unix {
        path: std::path::PathBuf,
        db: i64,
    },
}

impl Place {
    /// What `self` and `other` have in common, worded; None when they are
    /// different servers (or databases).
    pub(super) fn shared(&self, other: &Place) -> Option<String> {
        match (self, other) {
            (
                Place::Tcp { addrs, port, db },
                Place::Tcp {
                    addrs: others,
                    port: p,
                    db: d,
                },
            ) if port == p && db == d => addrs
                .iter()
                .find(|a| others.contains(a))
                .map(|a| format!("{} port {port}, database {db}", a)),
            (Place::Unix { path, db }, Place::Unix { path: p, db: d }) if path == p && db == d => {
                Some(format!("{}, database {db}", path.display()))
            }
            _ => None,
        }
    }
}

/// The host name (not an address) and port `client` connects to, if any.
pub(super) fn host_name(client: &Client) -> Option<(&str, u16)> {
    match client.get_connection_info().addr() {
        ConnectionAddr::Tcp(host, port) | ConnectionAddr::TcpTls { host, port, .. }
            if host.trim_matches(['[', ']']).parse::<IpAddr>().is_err() =>
        {
            Some((host.as_str(), *port))
        }
        _ => None,
    }
}

/// Where `client`'s server is: its addresses (`found` for a name, see
/// `host_name`), port and database. None when a name did not resolve (the
/// connect will say why).
pub(super) fn place(client: &Client, found: Option<Vec<IpAddr>>) -> Option<Place> {
    let info = client.get_connection_info();
    let db = info.redis_settings().db();
    match info.addr() {
        ConnectionAddr::Tcp(host, port) | ConnectionAddr::TcpTls { host, port, .. } => {
            let addrs = match host.trim_matches(['[', ']']).parse::<IpAddr>() {
                Ok(ip) => vec![ip],
                Err(_) => found?,
            };
            Some(Place::Tcp {
                addrs: addrs.into_iter().map(canonical).collect(),
                port: *port,
                db,
            })
        }
        ConnectionAddr::Unix(path) => Some(Place::Unix {
            path: std::fs::canonicalize(path).unwrap_or_else(|_| path.clone()),
            db,
        }),
        _ => None,
    }
}

/// An IPv4 address written as IPv6 (::ffff:a.b.c.d) is the IPv4 one.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

/// The addresses `host` resolves to, within `timeout`.
pub(super) fn resolve(
    host: &str,
    port: u16,
    name: &str,
    timeout: Duration,
) -> Result<Vec<IpAddr>, NodeError> {
    Lookup::start(host, port, name).wait(Instant::now() + timeout, timeout)
}

/// A name being looked up on a thread of its own: the system resolver
/// cannot be bounded otherwise, and several lookups run at once.
pub(super) struct Lookup {
    host: String,
    name: String,
    rx: Result<std::sync::mpsc::Receiver<std::io::Result<Vec<IpAddr>>>, std::io::Error>,
}

impl Lookup {
    pub(super) fn start(host: &str, port: u16, name: &str) -> Lookup {
        let (tx, rx) = std::sync::mpsc::channel();
        let lookup = (host.trim_matches(['[', ']']).to_string(), port);
        let spawned = std::thread::Builder::new()
            .name("resolve".into())
            .spawn(move || {
                let _ = tx.send(
                    lookup
                        .to_socket_addrs()
                        .map(|a| a.map(|a| a.ip()).collect::<Vec<_>>()),
                );
            });
        Lookup {
            host: host.to_string(),
            name: name.to_string(),
            rx: spawned.map(|_| rx),
        }
    }

    /// The addresses found by `until` (`timeout` is what the error names).
    pub(super) fn wait(self, until: Instant, timeout: Duration) -> Result<Vec<IpAddr>, NodeError> {
        let (host, name) = (&self.host, &self.name);
        let rx = self
            .rx
            .map_err(|e| NodeError::new(format!("{name}: cannot resolve {host}: {e}")))?;
        match rx.recv_timeout(until.saturating_duration_since(Instant::now())) {
            Ok(Ok(addrs)) if !addrs.is_empty() => Ok(addrs),
            Ok(Ok(_)) => Err(NodeError::new(format!("{name}: {host} has no address"))),
            Ok(Err(e)) => Err(NodeError::new(format!(
                "{name}: cannot resolve {host}: {e}"
            ))),
            Err(_) => Err(NodeError::timed_out(format!(
                "{name}: {host} did not resolve within {} (--node-timeout)",
                humantime::format_duration(timeout)
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tcp(addrs: &[&str], port: u16, db: i64) -> Place {
        Place::Tcp {
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
        assert_eq!(v4.shared(&tcp(&["::1"], 7000, 0)), None);
        let sock = Place::Unix {
            path: "/run/r.sock".into(),
            db: 0,
        };
        assert!(sock.shared(&sock).is_some());
        assert_eq!(sock.shared(&v4), None);
        assert_eq!(
            canonical("::ffff:127.0.0.1".parse().expect("ip")),
            "127.0.0.1".parse::<IpAddr>().expect("ip")
        );
    }
}
