//! What a node's URL names, as redlock-run reaches it: one server, a
//! Sentinel group (the primary its sentinels name), or a Cluster (the
//! master of the lock's hash slot); where each server is; and the set-up
//! each connection begins with.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use redis::{ConnectionAddr, IntoConnectionInfo, Value};

use super::error::{Kind, NodeError, Step};
use super::link::{Dest, Setup, TlsTo};
use super::tls::{self, Tls};
use super::url::{Host, Spec};
use super::{BadNode, Options, lock};

/// A server's address as named: a host (a name or an IP address) and
/// port, or a Unix socket.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(super) enum Place {
    Tcp { host: String, port: u16 },
    Unix(PathBuf),
}

impl Place {
    pub(super) fn tcp(host: &str, port: u16) -> Place {
        Place::Tcp {
            host: host.trim_matches(['[', ']']).to_string(),
            port,
        }
    }

    /// `host:port` (brackets around an IPv6 address), or the socket's path.
    pub(super) fn authority(&self) -> String {
        match self {
            Place::Tcp { host, port } => Host {
                host: host.clone(),
                port: *port,
            }
            .authority(),
            Place::Unix(p) => p.display().to_string(),
        }
    }
}

/// Credentials for AUTH.
#[derive(Clone, Default)]
pub(super) struct Auth {
    pub(super) user: Option<String>,
    pub(super) password: Option<String>,
}

pub(super) enum Topology {
    Server {
        place: Place,
        /// TLS, and whether the URL turns its checks off (`#insecure`).
        tls: Option<bool>,
        auth: Auth,
        db: i64,
    },
    Sentinel {
        sentinels: Vec<Place>,
        master: String,
        tls: bool,
        /// The data nodes' credentials, and the sentinels' own.
        auth: Auth,
        sentinel_auth: Auth,
        db: i64,
    },
    Cluster {
        seeds: Vec<Place>,
        tls: bool,
        auth: Auth,
    },
}

impl Topology {
    pub(super) fn new(spec: Spec, name: &str, opts: &Options) -> Result<Topology, BadNode> {
        let fill = |mut auth: Auth| {
            // Credentials from a file or the environment fill in for a URL
            // that carries none, so a crontab never needs a password in argv.
            if auth.password.is_none() {
                auth.password.clone_from(&opts.password);
                if auth.user.is_none() {
                    auth.user.clone_from(&opts.username);
                }
            }
            auth
        };
        Ok(match spec {
            Spec::Server { url, tls } => {
                // The crate parses the URL; TLS is ours (see `tls`), so a
                // `rediss://` URL goes to it as `redis://`, its `#insecure`
                // read here.
                let (url, insecure) = match (tls, url.split_once('#')) {
                    (false, _) => (url, false),
                    (true, Some((u, fragment))) => (
                        u.replacen("rediss://", "redis://", 1),
                        fragment == "insecure",
                    ),
                    (true, None) => (url.replacen("rediss://", "redis://", 1), false),
                };
                let info = url
                    .as_str()
                    .into_connection_info()
                    .map_err(|_| BadNode::url(name, "it does not parse"))?;
                let settings = info.redis_settings();
                let auth = fill(Auth {
                    user: settings.username().map(str::to_string),
                    password: settings.password().map(str::to_string),
                });
                let db = settings.db();
                let place = match info.addr() {
                    ConnectionAddr::Tcp(host, port) => Place::tcp(host, *port),
                    ConnectionAddr::Unix(path) => Place::Unix(path.clone()),
                    other => {
                        return Err(BadNode::url(
                            name,
                            &format!("{other} is not a form redlock-run uses"),
                        ));
                    }
                };
                Topology::Server {
                    place,
                    tls: tls.then_some(insecure),
                    auth,
                    db,
                }
            }
            Spec::Cluster {
                seeds,
                userinfo,
                tls,
            } => Topology::Cluster {
                seeds: seeds.iter().map(|h| Place::tcp(&h.host, h.port)).collect(),
                tls,
                auth: fill(userinfo_auth(userinfo, name)?),
            },
            Spec::Sentinel {
                sentinels,
                userinfo,
                master,
                db,
                tls,
            } => Topology::Sentinel {
                sentinels: sentinels
                    .iter()
                    .map(|h| Place::tcp(&h.host, h.port))
                    .collect(),
                master,
                tls,
                auth: fill(userinfo_auth(userinfo, name)?),
                sentinel_auth: Auth {
                    user: opts.sentinel_username.clone(),
                    password: opts.sentinel_password.clone(),
                },
                db,
            },
        })
    }

    /// Whether connections to this node's servers use TLS.
    pub(super) fn tls(&self) -> bool {
        match self {
            Topology::Server { tls, .. } => tls.is_some(),
            Topology::Sentinel { tls, .. } | Topology::Cluster { tls, .. } => *tls,
        }
    }

    /// The places whose names are worth looking up as the run starts.
    pub(super) fn places(&self) -> Vec<&Place> {
        match self {
            Topology::Server { place, .. } => vec![place],
            Topology::Sentinel { sentinels, .. } => sentinels.iter().collect(),
            Topology::Cluster { seeds, .. } => seeds.iter().collect(),
        }
    }

    /// The set-up of a connection to a data server (the server, the
    /// primary, a cluster master), and its steps for the wording of a
    /// refusal.
    pub(super) fn data_setup(&self) -> (Setup, Vec<Step>) {
        match self {
            Topology::Server { auth, db, .. } => setup(auth, *db, false),
            Topology::Sentinel { auth, db, .. } => setup(auth, *db, true),
            Topology::Cluster { auth, .. } => setup(auth, 0, false),
        }
    }

    /// The set-up of a connection to a sentinel.
    pub(super) fn sentinel_setup(&self) -> (Setup, Vec<Step>) {
        match self {
            Topology::Sentinel { sentinel_auth, .. } => setup(sentinel_auth, 0, false),
            _ => setup(&Auth::default(), 0, false),
        }
    }
}

/// A cluster's or sentinel group's user-info, read the way a `redis://`
/// URL's is (percent-decoded).
fn userinfo_auth(userinfo: Option<String>, name: &str) -> Result<Auth, BadNode> {
    let Some(userinfo) = userinfo else {
        return Ok(Auth::default());
    };
    let info = format!("redis://{userinfo}@localhost")
        .as_str()
        .into_connection_info()
        .map_err(|_| BadNode::url(name, "it does not parse"))?;
    Ok(Auth {
        user: info.redis_settings().username().map(str::to_string),
        password: info.redis_settings().password().map(str::to_string),
    })
}

/// AUTH, SELECT and (for a Sentinel group's primary) ROLE, as bytes.
fn setup(auth: &Auth, db: i64, role: bool) -> (Setup, Vec<Step>) {
    let mut cmds = Vec::new();
    let mut steps = Vec::new();
    if let Some(password) = &auth.password {
        let mut cmd = redis::cmd("AUTH");
        if let Some(user) = &auth.user {
            cmd.arg(user);
        }
        cmds.push(cmd.arg(password).clone());
        steps.push(Step::Auth);
    }
    if db != 0 {
        cmds.push(redis::cmd("SELECT").arg(db).clone());
        steps.push(Step::Select(db));
    }
    if role {
        cmds.push(redis::cmd("ROLE"));
        steps.push(Step::Role);
    }
    let bytes = cmds.iter().flat_map(|c| c.get_packed_command()).collect();
    let check = if role { is_primary } else { no_check };
    (
        Setup {
            bytes,
            replies: cmds.len(),
            check,
        },
        steps,
    )
}

fn no_check(_: &[Value]) -> Result<(), &'static str> {
    Ok(())
}

/// The last set-up reply is ROLE's: it must say "master". A sentinel that
/// has not noticed a failover yet names a server that is a replica now.
fn is_primary(replies: &[Value]) -> Result<(), &'static str> {
    match replies.last() {
        Some(Value::Array(role))
            if role.first() == Some(&Value::BulkString(b"master".to_vec())) =>
        {
            Ok(())
        }
        _ => Err(
            "the server the sentinels name primary says it is not one (a failover under \
                  way?)",
        ),
    }
}

/// Names looked up once per run: every node's at once as the run starts
/// (see `Nodes::prepare`), a name met later (a primary a sentinel names by
/// host name) when it is met. Bounded by the node timeout either way.
#[derive(Default)]
pub(super) struct Names(Mutex<HashMap<String, Result<Vec<IpAddr>, NodeError>>>);

impl Names {
    /// Looks up every name of `places` at once, within `timeout`.
    pub(super) fn prepare(&self, places: &[&Place], timeout: Duration) {
        let until = Instant::now() + timeout;
        let known: Vec<String> = lock(&self.0).keys().cloned().collect();
        let mut lookups: Vec<(String, Lookup)> = Vec::new();
        for place in places {
            if let Place::Tcp { host, port } = place
                && host.parse::<IpAddr>().is_err()
                && !known.contains(host)
                && !lookups.iter().any(|(h, _)| h == host)
            {
                lookups.push((host.clone(), Lookup::start(host, *port)));
            }
        }
        for (host, lookup) in lookups {
            let found = lookup.wait(until, timeout, &host);
            lock(&self.0).insert(host, found);
        }
    }

    /// Where `place` is: its addresses (a name looked up if it was not).
    pub(super) fn dest(
        &self,
        place: &Place,
        timeout: Duration,
        name: &str,
    ) -> Result<Dest, NodeError> {
        let (host, port) = match place {
            Place::Unix(path) => return Ok(Dest::Unix(path.clone())),
            Place::Tcp { host, port } => (host, *port),
        };
        if let Ok(ip) = host.parse::<IpAddr>() {
            return Ok(Dest::Tcp(vec![SocketAddr::new(ip, port)]));
        }
        if !lock(&self.0).contains_key(host) {
            self.prepare(&[place], timeout);
        }
        match lock(&self.0).get(host) {
            Some(Ok(ips)) => Ok(Dest::Tcp(
                ips.iter().map(|ip| SocketAddr::new(*ip, port)).collect(),
            )),
            // Why, in words of the name alone: said of the node here.
            Some(Err(why)) => Err(why.named(name)),
            None => Err(NodeError::new(
                Kind::Unreachable,
                format!("{name}: cannot resolve {host}"),
                false,
            )),
        }
    }

    /// The addresses a name was found at, if it was looked up.
    pub(super) fn found(&self, host: &str) -> Option<Vec<IpAddr>> {
        lock(&self.0).get(host)?.as_ref().ok().cloned()
    }
}

/// A name being looked up on a thread of its own: the system resolver
/// cannot be bounded otherwise, and several lookups run at once.
struct Lookup(Result<std::sync::mpsc::Receiver<std::io::Result<Vec<IpAddr>>>, std::io::Error>);

impl Lookup {
    fn start(host: &str, port: u16) -> Lookup {
        let (tx, rx) = std::sync::mpsc::channel();
        let lookup = (host.to_string(), port);
        let spawned = std::thread::Builder::new()
            .name("resolve".into())
            .spawn(move || {
                let _ = tx.send(
                    lookup
                        .to_socket_addrs()
                        .map(|a| a.map(|a| a.ip()).collect::<Vec<_>>()),
                );
            });
        Lookup(spawned.map(|_| rx))
    }

    fn wait(self, until: Instant, timeout: Duration, host: &str) -> Result<Vec<IpAddr>, NodeError> {
        let unreachable = |why: String| NodeError::new(Kind::Unreachable, why, false);
        let failed = |e: std::io::Error| unreachable(format!("cannot resolve {host}: {e}"));
        let rx = self.0.map_err(failed)?;
        match rx.recv_timeout(until.saturating_duration_since(Instant::now())) {
            Ok(Ok(addrs)) if !addrs.is_empty() => Ok(addrs),
            Ok(Ok(_)) => Err(unreachable(format!("{host} has no address"))),
            Ok(Err(e)) => Err(failed(e)),
            Err(_) => Err(NodeError::new(
                Kind::Timeout,
                format!(
                    "{host} did not resolve within {} (--node-timeout)",
                    humantime::format_duration(timeout)
                ),
                false,
            )),
        }
    }
}

/// The TLS side of a connection to `place`, for a node that uses TLS.
pub(super) fn tls_to(
    tls: &Tls,
    place: &Place,
    insecure: bool,
    name: &str,
) -> Result<Option<TlsTo>, NodeError> {
    let refused =
        |why: tls::Unusable| NodeError::new(Kind::Refused, format!("{name}: {why}"), false);
    let Place::Tcp { host, .. } = place else {
        return Ok(None);
    };
    let config = tls.config(insecure).map_err(refused)?;
    let name = tls::server_name(host).map_err(refused)?;
    Ok(Some(TlsTo { config, name }))
}
