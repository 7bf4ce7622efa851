//! What a node's URL names (`Target`) and one connection to it (`Conn`),
//! whichever the topology: the session's requests are the same on each.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use redis::cluster::ClusterConnection;
use redis::{Client, Cmd, Connection, ConnectionLike, RedisResult, Value};

use super::cluster::{self, Bounded, Cluster};
use super::error::{Failure, NodeError};
use super::sentinel::Group;
use super::url::Spec;
use super::wire::{Line, Wire};
use super::{Options, lock, server};

pub(super) enum Target {
    Server(Client),
    Sentinel(Group),
    Cluster(Cluster),
}

impl Target {
    pub(super) fn new(spec: Spec, name: &str, opts: &Options) -> Result<Target, String> {
        Ok(match spec {
            Spec::Server { url, tls } => Target::Server(server::client(&url, tls, name, opts)?),
            Spec::Cluster {
                seeds,
                userinfo,
                tls,
            } => Target::Cluster(Cluster::new(seeds, userinfo, tls, name, opts)?),
            Spec::Sentinel {
                sentinels,
                userinfo,
                master,
                db,
                tls,
            } => Target::Sentinel(Group::new(
                sentinels, userinfo, master, db, tls, name, opts,
            )?),
        })
    }

    /// A connection for the node's requests: redlock-run's own where it can
    /// (see `wire`), its writing half left in `line`.
    pub(super) fn connect(
        &self,
        name: &str,
        timeout: Duration,
        notes: &Mutex<Vec<String>>,
        line: &Arc<Mutex<Line>>,
    ) -> Result<Conn, Failure> {
        match self {
            Target::Server(client) => match server::own(client, name, timeout, line) {
                Some(wire) => wire.map(Conn::Own),
                None => server::connect(client, name, timeout).map(Conn::Plain),
            },
            Target::Sentinel(group) => {
                let (client, note) = group.primary(name, timeout).map_err(Failure::Other)?;
                if let Some(note) = note {
                    lock(notes).push(note);
                }
                let conn = match server::own(&client, name, timeout, line) {
                    Some(wire) => wire.map(Conn::Own),
                    None => server::connect(&client, name, timeout).map(Conn::Plain),
                };
                if conn.is_err() {
                    group.forget();
                }
                conn
            }
            Target::Cluster(c) => c.connect(name, timeout).map(|c| Conn::Cluster(Box::new(c))),
        }
    }

    /// A plain connection of the crate's, for a subscription.
    pub(super) fn plain(&self, name: &str, timeout: Duration) -> Result<Connection, NodeError> {
        match self {
            Target::Cluster(c) => c.plain(name, timeout),
            Target::Server(client) => {
                server::connect(client, name, timeout).map_err(Failure::into_error)
            }
            Target::Sentinel(group) => {
                let (client, _) = group.primary(name, timeout)?;
                server::connect(&client, name, timeout).map_err(|f| {
                    group.forget();
                    f.into_error()
                })
            }
        }
    }

    /// A request failed: a Sentinel group looks for its primary again.
    pub(super) fn forget(&self) {
        if let Target::Sentinel(g) = self {
            g.forget();
        }
    }

    /// A Sentinel group: asks its sentinels whether the primary is still the
    /// one we talk to. Returns a note when it changed (the connection must
    /// then be dropped).
    pub(super) fn recheck(&self, name: &str, timeout: Duration) -> Option<String> {
        match self {
            Target::Sentinel(g) => g.recheck(name, timeout),
            _ => None,
        }
    }

    /// Whether a READONLY answer means "ask again where the primary is now".
    pub(super) fn follows_failover(&self) -> bool {
        matches!(self, Target::Sentinel(_))
    }
}

pub(super) enum Conn {
    Own(Wire),
    Plain(Connection),
    Cluster(Box<ClusterConnection<Bounded>>),
}

impl Conn {
    /// Runs `cmd` (a keyless command: WAIT) where `key` lives: on a cluster,
    /// the master of its slot.
    pub(super) fn at_key(&mut self, cmd: &Cmd, key: &[u8]) -> RedisResult<Value> {
        match self {
            Conn::Own(c) => cmd.query(c),
            Conn::Plain(c) => cmd.query(c),
            Conn::Cluster(c) => c.route_command(cmd, cluster::master_of(key)),
        }
    }
}

impl Conn {
    pub(super) fn set_read_timeout(&mut self, d: Duration) -> RedisResult<()> {
        match self {
            Conn::Own(c) => {
                c.timeout = d;
                Ok(())
            }
            Conn::Plain(c) => c.set_read_timeout(Some(d)),
            Conn::Cluster(c) => c.set_read_timeout(Some(d)),
        }
    }
}

impl ConnectionLike for Conn {
    fn req_packed_command(&mut self, cmd: &[u8]) -> RedisResult<Value> {
        match self {
            Conn::Own(c) => c.req_packed_command(cmd),
            Conn::Plain(c) => c.req_packed_command(cmd),
            Conn::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands(
        &mut self,
        cmd: &[u8],
        offset: usize,
        count: usize,
    ) -> RedisResult<Vec<Value>> {
        match self {
            Conn::Own(c) => c.req_packed_commands(cmd, offset, count),
            Conn::Plain(c) => c.req_packed_commands(cmd, offset, count),
            Conn::Cluster(c) => c.req_packed_commands(cmd, offset, count),
        }
    }

    fn req_command(&mut self, cmd: &Cmd) -> RedisResult<Value> {
        match self {
            Conn::Own(c) => c.req_command(cmd),
            Conn::Plain(c) => c.req_command(cmd),
            Conn::Cluster(c) => c.req_command(cmd),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Conn::Own(c) => c.get_db(),
            Conn::Plain(c) => c.get_db(),
            Conn::Cluster(c) => c.get_db(),
        }
    }

    fn supports_pipelining(&self) -> bool {
        match self {
            Conn::Own(c) => c.supports_pipelining(),
            Conn::Plain(c) => c.supports_pipelining(),
            Conn::Cluster(c) => c.supports_pipelining(),
        }
    }

    fn check_connection(&mut self) -> bool {
        match self {
            Conn::Own(c) => c.check_connection(),
            Conn::Plain(c) => c.check_connection(),
            Conn::Cluster(c) => c.check_connection(),
        }
    }

    fn is_open(&self) -> bool {
        match self {
            Conn::Own(c) => c.is_open(),
            Conn::Plain(c) => c.is_open(),
            Conn::Cluster(c) => c.is_open(),
        }
    }
}
