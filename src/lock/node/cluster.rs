//! A Redis Cluster as one node of the quorum (`redis+cluster://`): the
//! crate's cluster client finds the master of the lock's hash slot, follows
//! MOVED and ASK while a slot is resharded, and refreshes its slot map. All
//! keys of one lock are in one slot (see `keys`), so every script runs on
//! one master.

use std::ops::{Deref, DerefMut};
use std::time::Duration;

use redis::cluster::{ClusterClient, ClusterConnection, Connect};
use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr};
use redis::{Client, Connection, IntoConnectionInfo, RedisResult, TlsMode, Value};

use super::Options;
use super::error::{Failure, NodeError};
use super::server;
use super::url::Host;

pub(super) struct Cluster {
    client: ClusterClient,
    seeds: Vec<Host>,
    /// A plain client per seed, for a subscription (`Node::watch`).
    plain: Vec<Client>,
}

impl Cluster {
    pub(super) fn new(
        seeds: Vec<Host>,
        userinfo: Option<String>,
        tls: bool,
        name: &str,
        opts: &Options,
    ) -> Result<Cluster, String> {
        let scheme = if tls { "rediss" } else { "redis" };
        let auth = userinfo.map(|u| format!("{u}@")).unwrap_or_default();
        let plain = seeds
            .iter()
            .map(|h| {
                let url = format!("{scheme}://{auth}{}", h.authority());
                server::client(&url, tls, name, opts)
            })
            .collect::<Result<Vec<Client>, String>>()?;
        let infos: Vec<_> = plain
            .iter()
            .map(|c| c.get_connection_info().clone())
            .collect();
        let timeout = opts.timeout.max(Duration::from_millis(1));
        let mut builder = ClusterClient::builder(infos)
            .connection_timeout(timeout)
            .response_timeout(timeout)
            // MOVED, ASK, TRYAGAIN and CLUSTERDOWN while a slot moves are
            // retried a few times within about a node timeout, not the
            // crate's default of 16 retries over minutes: a heartbeat that
            // fails is retried sooner by the heartbeat itself.
            .retries(3)
            .min_retry_wait(10)
            .max_retry_wait(timeout.as_millis().clamp(11, 200) as u64)
            .tcp_settings(redis::io::tcp::TcpSettings::default().set_nodelay(true));
        if tls {
            if let Some(certs) = opts.certificates() {
                builder = builder.certs(certs);
            }
            builder = builder.tls(if opts.tls_insecure {
                TlsMode::Insecure
            } else {
                TlsMode::Secure
            });
        }
        let client = builder
            .build()
            .map_err(|e| format!("cannot use Redis node '{name}': {e}"))?;
        Ok(Cluster {
            client,
            seeds,
            plain,
        })
    }

    /// A cluster connection: it asks the first seed that answers for the
    /// slot map and connects to the masters. Every connection it opens is
    /// `Bounded`.
    pub(super) fn connect(
        &self,
        name: &str,
        timeout: Duration,
    ) -> Result<ClusterConnection<Bounded>, Failure> {
        // The crate resolves seed names without a bound: do it first, bounded.
        for seed in &self.seeds {
            if seed.host.parse::<std::net::IpAddr>().is_err() {
                server::resolve(&seed.host, seed.port, name, timeout).map_err(Failure::Other)?;
            }
        }
        let conn = self
            .client
            .get_generic_connection::<Bounded>()
            .map_err(|e| Failure::of(name, timeout, &e))?;
        // It leaves writes unbounded on the connections it opens from here on.
        conn.set_write_timeout(Some(timeout))
            .map_err(|e| Failure::of(name, timeout, &e))?;
        Ok(conn)
    }

    /// A plain connection to the first seed that accepts one.
    pub(super) fn plain(&self, name: &str, timeout: Duration) -> Result<Connection, NodeError> {
        let mut last = None;
        for client in &self.plain {
            match server::connect(client, name, timeout) {
                Ok(c) => return Ok(c),
                Err(f) => last = Some(f.into_error()),
            }
        }
        Err(last.unwrap_or_else(|| NodeError::new(format!("{name}: no seed node"))))
    }
}

/// Where WAIT must go: the master that holds `key`, whose connection the
/// write just went through.
pub(super) fn master_of(key: &[u8]) -> RoutingInfo {
    RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(Route::with_key(
        key,
        SlotAddr::Master,
    )))
}

/// A cluster node's connection with reads and writes bounded from the
/// start. The crate's own sends a PING before it applies its response
/// timeout, and that PING would wait forever on a stopped node.
pub(super) struct Bounded(Connection);

impl Deref for Bounded {
    type Target = Connection;
    fn deref(&self) -> &Connection {
        &self.0
    }
}

impl DerefMut for Bounded {
    fn deref_mut(&mut self) -> &mut Connection {
        &mut self.0
    }
}

impl Connect for Bounded {
    fn connect<T>(info: T, timeout: Option<Duration>) -> RedisResult<Self>
    where
        T: IntoConnectionInfo,
    {
        let timeout = timeout.unwrap_or(Duration::from_secs(1));
        let client = Client::open(server::lean(info.into_connection_info()?))?;
        let conn = client.get_connection_with_timeout(timeout)?;
        conn.set_read_timeout(Some(timeout))?;
        conn.set_write_timeout(Some(timeout))?;
        Ok(Bounded(conn))
    }

    fn send_packed_command(&mut self, cmd: &[u8]) -> RedisResult<()> {
        self.0.send_packed_command(cmd)
    }

    fn set_write_timeout(&self, dur: Option<Duration>) -> RedisResult<()> {
        self.0.set_write_timeout(dur)
    }

    fn set_read_timeout(&self, dur: Option<Duration>) -> RedisResult<()> {
        self.0.set_read_timeout(dur)
    }

    fn recv_response(&mut self) -> RedisResult<Value> {
        self.0.recv_response()
    }
}
