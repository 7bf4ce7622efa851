//! A Redis Cluster on loopback: N masters, R replicas per master, each a
//! real `redis-server` ([`RedisNode`]: persistence off, its own directory,
//! PDEATHSIG, killed and reaped on drop).
//!
//! ```ignore
//! let cluster = RedisCluster::builder().masters(3).replicas(1).start();
//! let slot = cluster.keyslot(b"lock:job");
//! let owner = cluster.master_for_slot(slot);
//! cluster.migrate_slot(slot, (owner + 1) % 3);
//! ```
//!
//! The cluster is built with plain commands (CLUSTER SET-CONFIG-EPOCH,
//! ADDSLOTS, MEET, REPLICATE), not `redis-cli --cluster create`: redis-cli
//! would be one more binary to match to the chosen server, and ADDSLOTS
//! (unlike ADDSLOTSRANGE, 7.0+) works on 6.2 too. Nodes are indexed in start
//! order: masters `0..masters`, then the replicas of master 0, of master 1,
//! and so on. Every wait polls and gives up with the nodes' own view of the
//! cluster in the panic message.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::net::TcpListener;
use std::time::{Duration, Instant};

use redis::{ErrorKind, FromRedisValue, ServerErrorKind};

use super::certs::{Certs, NodeTls};
use super::redis_node::{RedisNode, free_port};
use super::{process_state, wait_until_every};

/// Number of hash slots in every Redis Cluster.
pub const SLOTS: u16 = 16384;

/// Upper bound for forming the cluster or agreeing on a change; generous,
/// because other test binaries load the same two cores.
const CONVERGE: Duration = Duration::from_secs(30);
/// How long a fixture's command on a node that is up may take.
const NODE_TIMEOUT: Duration = Duration::from_secs(10);

/// How a [`RedisCluster`] is laid out; see [`RedisCluster::builder`].
#[derive(Clone, Debug)]
pub struct ClusterBuilder {
    masters: usize,
    replicas: usize,
    node_timeout: Duration,
    full_coverage: bool,
    tls: Option<NodeTls>,
}

impl ClusterBuilder {
    /// Number of masters (default 3); the slots are split evenly.
    pub fn masters(mut self, n: usize) -> ClusterBuilder {
        self.masters = n;
        self
    }

    /// Replicas per master (default 0).
    pub fn replicas(mut self, r: usize) -> ClusterBuilder {
        self.replicas = r;
        self
    }

    /// `cluster-node-timeout` (default 2 s): how long a node may be
    /// unreachable before it is failed over. Redis's 15 s default would
    /// make every failover test slow; below a second a loaded machine can
    /// fail over a healthy node.
    pub fn node_timeout(mut self, timeout: Duration) -> ClusterBuilder {
        self.node_timeout = timeout;
        self
    }

    /// `cluster-require-full-coverage` (default yes, as in Redis): with no,
    /// the rest of the cluster keeps serving while a master without a
    /// replica is down.
    pub fn full_coverage(mut self, yes: bool) -> ClusterBuilder {
        self.full_coverage = yes;
        self
    }

    /// Every node on TLS only ([`Certs::node_tls`]): `--port 0`, `--tls-port`
    /// and `--tls-cluster yes` (the bus, and the ports the nodes announce in
    /// CLUSTER SLOTS and NODES, are the TLS ones), `--tls-replication yes`.
    /// The fixture's own connections use TLS too, and [`RedisCluster::url`]
    /// is `rediss+cluster://`.
    pub fn tls(mut self, certs: &Certs) -> ClusterBuilder {
        self.tls = Some(certs.node_tls());
        self
    }

    /// [`ClusterBuilder::tls`] with `tls-auth-clients yes`: every client
    /// must present a certificate from the test CA (the nodes present
    /// `client` to each other).
    pub fn mutual_tls(mut self, certs: &Certs) -> ClusterBuilder {
        self.tls = Some(certs.mutual_node_tls());
        self
    }

    /// Starts the nodes and forms the cluster; returns once every node says
    /// `cluster_state:ok` with all 16384 slots, and every replica replicates
    /// its master with the link up, as every node sees it.
    pub fn start(self) -> RedisCluster {
        RedisCluster::form(self)
    }
}

/// A running Redis Cluster. Dropping it kills every node.
pub struct RedisCluster {
    nodes: Vec<RedisNode>,
    ids: Vec<String>,
    masters: usize,
    replicas: usize,
    startup: Duration,
    tls: bool,
}

/// A slot left half-migrated by [`RedisCluster::begin_slot_migration`]:
/// IMPORTING set on `to`, MIGRATING on `from`, keys still on `from` except
/// those moved with [`RedisCluster::move_keys`].
#[derive(Debug)]
#[must_use = "finish it with RedisCluster::finish_slot_migration, or leave the slot half-migrated on purpose"]
pub struct SlotMigration {
    pub slot: u16,
    pub from: usize,
    pub to: usize,
}

/// One line of CLUSTER NODES, as much of it as the fixture needs.
#[derive(Clone, Debug)]
pub struct NodeLine {
    pub id: String,
    pub port: u16,
    pub flags: Vec<String>,
    /// The master's id for a replica.
    pub master: Option<String>,
    pub config_epoch: u64,
    pub connected: bool,
    /// Owned slot ranges, inclusive.
    pub slots: Vec<(u16, u16)>,
}

impl NodeLine {
    pub fn has_flag(&self, flag: &str) -> bool {
        self.flags.iter().any(|f| f == flag)
    }

    pub fn owns(&self, slot: u16) -> bool {
        self.slots.iter().any(|&(a, b)| a <= slot && slot <= b)
    }
}

/// Parses a CLUSTER NODES reply. Addresses are `ip:port@cport` (7.0 may
/// append `,hostname`); slot entries in brackets are migration markers.
pub fn parse_cluster_nodes(text: &str) -> Vec<NodeLine> {
    let mut out = Vec::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let fields: Vec<&str> = line.split_whitespace().collect();
        if fields.len() < 8 {
            continue;
        }
        let addr = fields[1].split(['@', ',']).next().unwrap_or("");
        let port = addr
            .rsplit_once(':')
            .and_then(|(_, p)| p.parse().ok())
            .unwrap_or(0);
        let slots = fields[8..]
            .iter()
            .filter(|s| !s.starts_with('['))
            .filter_map(|s| match s.split_once('-') {
                Some((a, b)) => Some((a.parse().ok()?, b.parse().ok()?)),
                None => s.parse().ok().map(|x| (x, x)),
            })
            .collect();
        out.push(NodeLine {
            id: fields[0].to_string(),
            port,
            flags: fields[2].split(',').map(str::to_string).collect(),
            master: Some(fields[3]).filter(|m| *m != "-").map(str::to_string),
            config_epoch: fields[6].parse().unwrap_or(0),
            connected: fields[7] == "connected",
            slots,
        });
    }
    out
}

/// A port P with P + 10000 (the cluster bus) free too, and P at most
/// 55535: Redis before 7.0 has no `cluster-port` and refuses a higher P.
pub fn free_cluster_port() -> u16 {
    for _ in 0..200 {
        let port = free_port();
        if port <= 55535 && port != 6379 && TcpListener::bind(("127.0.0.1", port + 10000)).is_ok() {
            return port;
        }
    }
    panic!("found no free port P <= 55535 with P+10000 free on 127.0.0.1 in 200 tries");
}

impl RedisCluster {
    /// Default layout: 3 masters, no replicas, 2 s node timeout.
    pub fn builder() -> ClusterBuilder {
        ClusterBuilder {
            masters: 3,
            replicas: 0,
            node_timeout: Duration::from_secs(2),
            full_coverage: true,
            tls: None,
        }
    }

    /// `masters` masters with `replicas` replicas each, other settings
    /// default.
    pub fn new(masters: usize, replicas: usize) -> RedisCluster {
        RedisCluster::builder()
            .masters(masters)
            .replicas(replicas)
            .start()
    }

    fn form(b: ClusterBuilder) -> RedisCluster {
        assert!(
            (1..=64).contains(&b.masters),
            "a test cluster has 1..=64 masters, not {}",
            b.masters
        );
        let began = Instant::now();
        let node_timeout = b.node_timeout.as_millis().to_string();
        let mut args = vec![
            "--cluster-enabled",
            "yes",
            // Relative: each node's --dir is its own temp directory.
            "--cluster-config-file",
            "nodes.conf",
            "--cluster-node-timeout",
            &node_timeout,
            "--cluster-require-full-coverage",
            if b.full_coverage { "yes" } else { "no" },
            // A replica may always take over, however stale: tests kill
            // masters on purpose and want the failover, not a stuck slot.
            "--cluster-replica-validity-factor",
            "0",
            // Replicas sync at once (7.0's diskless default waits 5 s for
            // more replicas; 6.2 would write an RDB file).
            "--repl-diskless-sync",
            "yes",
            "--repl-diskless-sync-delay",
            "0",
        ];
        if b.tls.is_some() {
            args.extend(["--tls-cluster", "yes"]);
        }
        let total = b.masters * (1 + b.replicas);
        let nodes: Vec<RedisNode> = (0..total)
            .map(|_| RedisNode::start_with_tls(&args, None, b.tls.as_ref(), free_cluster_port))
            .collect();
        let mut cluster = RedisCluster {
            ids: Vec::new(),
            nodes,
            masters: b.masters,
            replicas: b.replicas,
            startup: Duration::ZERO,
            tls: b.tls.is_some(),
        };
        cluster.ids = (0..total)
            .map(|i| cluster.cmd::<String>(i, redis::cmd("CLUSTER").arg("MYID")))
            .collect();

        for m in 0..b.masters {
            let (first, last) = slot_range(m, b.masters);
            let mut add = redis::cmd("CLUSTER");
            add.arg("ADDSLOTS")
                .arg((first..=last).collect::<Vec<u16>>());
            cluster.ok(m, &add);
        }
        // Distinct epochs before the nodes meet, as redis-cli does, so no
        // epoch collision has to be resolved.
        for i in 0..total {
            cluster.ok(
                i,
                redis::cmd("CLUSTER")
                    .arg("SET-CONFIG-EPOCH")
                    .arg(i as u64 + 1),
            );
        }
        // Every pair meets directly: no waiting for gossip to spread.
        for i in 0..total {
            for j in i + 1..total {
                let port = cluster.nodes[j].port();
                cluster.ok(
                    i,
                    redis::cmd("CLUSTER").arg("MEET").arg("127.0.0.1").arg(port),
                );
            }
        }
        cluster.await_view("every node to know every other", |lines| {
            lines.len() == total
                && lines
                    .iter()
                    .all(|l| l.has_flag("myself") || (l.connected && !l.has_flag("handshake")))
        });
        for r in b.masters..total {
            let master = cluster.initial_master_of(r).expect("a replica index");
            let id = cluster.ids[master].clone();
            cluster.ok(r, redis::cmd("CLUSTER").arg("REPLICATE").arg(id));
        }
        // Until REPLICATE takes effect a replica is a master without slots,
        // which await_ok would accept.
        let replicas_linked = converge(|| {
            (b.masters..total).all(|r| role_of(&cluster.nodes[r]).is_some_and(|(_, up)| up))
        });
        assert!(
            replicas_linked,
            "replicas did not attach within {CONVERGE:?}:\n{}",
            cluster.describe()
        );
        cluster.await_ok();
        cluster.startup = began.elapsed();
        cluster
    }

    /// How long [`ClusterBuilder::start`] took, spawn to ready.
    pub fn startup_time(&self) -> Duration {
        self.startup
    }

    /// `redis+cluster://127.0.0.1:P1,127.0.0.1:P2,...`: the masters as seeds,
    /// for redlock-run's `-r`; `rediss+cluster://...` on TLS.
    pub fn url(&self) -> String {
        let seeds: Vec<String> = self
            .master_ports()
            .iter()
            .map(|p| format!("127.0.0.1:{p}"))
            .collect();
        let scheme = if self.tls { "rediss" } else { "redis" };
        format!("{scheme}+cluster://{}", seeds.join(","))
    }

    /// Whether the nodes listen on TLS only.
    pub fn is_tls(&self) -> bool {
        self.tls
    }

    /// `redis://127.0.0.1:P` (`rediss://` on TLS) of every master, for
    /// `redis::cluster::ClusterClient`.
    pub fn seed_urls(&self) -> Vec<String> {
        (0..self.masters).map(|i| self.nodes[i].url()).collect()
    }

    /// Ports of the masters the cluster was started with (node order).
    pub fn master_ports(&self) -> Vec<u16> {
        (0..self.masters).map(|i| self.nodes[i].port()).collect()
    }

    /// Number of nodes, masters and replicas.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// Number of masters the cluster was started with.
    pub fn masters(&self) -> usize {
        self.masters
    }

    /// Node `i` itself (for `cmd`, `port`, `pid`, `log`...).
    pub fn node(&self, i: usize) -> &RedisNode {
        &self.nodes[i]
    }

    /// The cluster node id of node `i`.
    pub fn node_id(&self, i: usize) -> &str {
        &self.ids[i]
    }

    /// The index of the node listening on `port`.
    pub fn index_of_port(&self, port: u16) -> Option<usize> {
        self.nodes.iter().position(|n| n.port() == port)
    }

    /// The master node `i` was started to replicate (None for a master).
    pub fn initial_master_of(&self, i: usize) -> Option<usize> {
        (i >= self.masters).then(|| (i - self.masters) / self.replicas.max(1))
    }

    /// The replicas master `m` was started with.
    pub fn replicas_of(&self, m: usize) -> Vec<usize> {
        (self.masters..self.nodes.len())
            .filter(|&i| self.initial_master_of(i) == Some(m))
            .collect()
    }

    /// Whether node `i` is running and not frozen (so it can answer).
    pub fn is_up(&self, i: usize) -> bool {
        self.nodes[i]
            .pid()
            .is_some_and(|pid| !matches!(process_state(pid), Some('T') | Some('Z') | None))
    }

    /// `ROLE`'s first element on node `i`: `master` or `slave`.
    pub fn role(&self, i: usize) -> String {
        role_of(&self.nodes[i])
            .unwrap_or_else(|| panic!("ROLE on cluster node {i} failed"))
            .0
    }

    /// The slot of `key` (CLUSTER KEYSLOT, asked of a live node).
    pub fn keyslot(&self, key: &[u8]) -> u16 {
        let i = self.any_up();
        self.cmd(i, redis::cmd("CLUSTER").arg("KEYSLOT").arg(key))
    }

    /// The node serving `slot` now. Each live node is asked (CLUSTER NODES);
    /// the claim with the highest config epoch wins, so a node whose view
    /// lags behind a failover or a migration does not mislead.
    pub fn master_for_slot(&self, slot: u16) -> usize {
        assert!(slot < SLOTS, "slot {slot} out of range");
        let mut best: Option<(u64, u16)> = None;
        for i in (0..self.nodes.len()).filter(|&i| self.is_up(i)) {
            let Ok(lines) = self.try_view(i) else {
                continue;
            };
            for l in lines
                .iter()
                .filter(|l| l.has_flag("master") && l.owns(slot))
            {
                if best.is_none_or(|(epoch, _)| l.config_epoch > epoch) {
                    best = Some((l.config_epoch, l.port));
                }
            }
        }
        let (_, port) = best.unwrap_or_else(|| panic!("no live node knows who serves slot {slot}"));
        self.index_of_port(port)
            .unwrap_or_else(|| panic!("slot {slot} is served by port {port}, not one of ours"))
    }

    /// GET `key` where the cluster keeps it (following MOVED and ASK).
    pub fn get(&self, key: &[u8]) -> Option<Vec<u8>> {
        self.key_cmd(key, redis::cmd("GET").arg(key))
    }

    /// EXISTS `key` where the cluster keeps it.
    pub fn exists(&self, key: &[u8]) -> bool {
        self.key_cmd::<i64>(key, redis::cmd("EXISTS").arg(key)) == 1
    }

    /// SET `key` `value` (no expiry) where the cluster keeps it.
    pub fn set(&self, key: &[u8], value: &[u8]) {
        let reply: String = self.key_cmd(key, redis::cmd("SET").arg(key).arg(value));
        assert_eq!(reply, "OK", "SET {}", super::show(key));
    }

    /// Every key on every live master (KEYS *), sorted. Frozen or killed
    /// nodes are left out.
    pub fn keys(&self) -> Vec<Vec<u8>> {
        let mut all = BTreeSet::new();
        for i in (0..self.nodes.len()).filter(|&i| self.is_up(i)) {
            if self.role(i) == "master" {
                all.extend(self.cmd::<Vec<Vec<u8>>>(i, redis::cmd("KEYS").arg("*")));
            }
        }
        all.into_iter().collect()
    }

    /// [`RedisCluster::keys`] but the locks' run histories, which a run is
    /// meant to leave (see [`super::is_history_key`]).
    pub fn left_behind(&self) -> Vec<Vec<u8>> {
        let mut keys = self.keys();
        keys.retain(|k| !super::is_history_key(k));
        keys
    }

    /// Runs `cmd` about `key` on the node serving its slot, following up to
    /// five redirections: MOVED (a stale slot map) and ASK (a slot being
    /// migrated: the retry is sent after ASKING on the same connection).
    pub fn key_cmd<T: FromRedisValue>(&self, key: &[u8], cmd: &redis::Cmd) -> T {
        let mut target = self.master_for_slot(self.keyslot(key));
        let mut asking = false;
        let mut trail = String::new();
        for _ in 0..5 {
            let node = &self.nodes[target];
            let _ = write!(
                trail,
                " -> {}{}",
                node.port(),
                if asking { " (ASKING)" } else { "" }
            );
            let result = node.connection().and_then(|mut con| {
                if asking {
                    let mut pipe = redis::pipe();
                    pipe.cmd("ASKING").ignore().add_command(cmd.clone());
                    pipe.query::<(T,)>(&mut con).map(|(v,)| v)
                } else {
                    cmd.query(&mut con)
                }
            });
            match result {
                Ok(v) => return v,
                Err(e) => {
                    let Some((addr, _)) = e.redirect_node() else {
                        panic!("{} on the cluster ({trail}) failed: {e}", super::show(key));
                    };
                    let port = addr
                        .rsplit_once(':')
                        .and_then(|(_, p)| p.parse::<u16>().ok())
                        .unwrap_or_else(|| panic!("redirection to {addr:?}: no port"));
                    target = self
                        .index_of_port(port)
                        .unwrap_or_else(|| panic!("redirected to {addr}, not one of ours"));
                    asking = e.kind() == ErrorKind::Server(ServerErrorKind::Ask);
                }
            }
        }
        panic!(
            "{} on the cluster: too many redirections ({trail})",
            super::show(key)
        );
    }

    /// Moves `slot` and its keys to master `to` the standard way: IMPORTING
    /// on the target, MIGRATING on the source, the keys by MIGRATE, then
    /// SETSLOT NODE on every live master; returns once every live node
    /// agrees that `to` serves it.
    pub fn migrate_slot(&self, slot: u16, to: usize) {
        let migration = self.begin_slot_migration(slot, to);
        self.finish_slot_migration(migration);
    }

    /// Sets IMPORTING on `to` and MIGRATING on the current owner and stops
    /// there, keys unmoved: the source now answers ASK for keys of the slot
    /// that it does not have (new keys, and those moved by
    /// [`RedisCluster::move_keys`]).
    pub fn begin_slot_migration(&self, slot: u16, to: usize) -> SlotMigration {
        let from = self.master_for_slot(slot);
        assert_ne!(from, to, "slot {slot} is already served by node {to}");
        assert_eq!(self.role(to), "master", "node {to} is not a master");
        self.ok(
            to,
            redis::cmd("CLUSTER")
                .arg("SETSLOT")
                .arg(slot)
                .arg("IMPORTING")
                .arg(&self.ids[from]),
        );
        self.ok(
            from,
            redis::cmd("CLUSTER")
                .arg("SETSLOT")
                .arg(slot)
                .arg("MIGRATING")
                .arg(&self.ids[to]),
        );
        SlotMigration { slot, from, to }
    }

    /// MIGRATEs `keys` (of the migrating slot) from the source to the target.
    pub fn move_keys(&self, migration: &SlotMigration, keys: &[&[u8]]) {
        if keys.is_empty() {
            return;
        }
        let mut migrate = redis::cmd("MIGRATE");
        migrate
            .arg("127.0.0.1")
            .arg(self.nodes[migration.to].port())
            .arg("")
            .arg(0)
            .arg(5000)
            .arg("KEYS")
            .arg(keys);
        // NOKEY when none of them was there any more: nothing to move.
        let reply: String = self.cmd(migration.from, &migrate);
        assert!(
            reply == "OK" || reply == "NOKEY",
            "MIGRATE on node {}: {reply}",
            migration.from
        );
    }

    /// Moves the slot's remaining keys, hands the slot to the target on every
    /// live master (target first, so it never answers MOVED back to the
    /// source), and waits until every live node agrees.
    pub fn finish_slot_migration(&self, migration: SlotMigration) {
        let SlotMigration { slot, from, to } = migration;
        loop {
            let keys: Vec<Vec<u8>> = self.cmd(
                from,
                redis::cmd("CLUSTER")
                    .arg("GETKEYSINSLOT")
                    .arg(slot)
                    .arg(100),
            );
            if keys.is_empty() {
                break;
            }
            let keys: Vec<&[u8]> = keys.iter().map(Vec::as_slice).collect();
            self.move_keys(&SlotMigration { slot, from, to }, &keys);
        }
        let mut order = vec![to, from];
        order.extend(
            (0..self.nodes.len())
                .filter(|&i| i != to && i != from && self.is_up(i) && self.role(i) == "master"),
        );
        for i in order {
            self.ok(
                i,
                redis::cmd("CLUSTER")
                    .arg("SETSLOT")
                    .arg(slot)
                    .arg("NODE")
                    .arg(&self.ids[to]),
            );
        }
        let to_id = self.ids[to].clone();
        self.await_view(&format!("slot {slot} to be served by node {to}"), |lines| {
            lines
                .iter()
                .filter(|l| l.has_flag("master") && l.owns(slot))
                .all(|l| l.id == to_id)
                && lines.iter().any(|l| l.id == to_id && l.owns(slot))
        });
    }

    /// Freezes node `i` (SIGSTOP): it accepts connections but answers
    /// nothing, and past the node timeout the others fail it over.
    pub fn stop(&self, i: usize) {
        self.nodes[i].stop();
    }

    /// Resumes node `i` after [`RedisCluster::stop`].
    pub fn cont(&self, i: usize) {
        self.nodes[i].cont();
    }

    /// SIGKILLs and reaps node `i`; it stays dead.
    pub fn kill(&mut self, i: usize) {
        self.nodes[i].kill();
    }

    /// Waits until every live node reports `cluster_state:ok` with all
    /// slots assigned and served, knows every node, and sees each live
    /// replica (by its own ROLE, link up) as the replica of a master. After a
    /// master is killed this is the wait for its replica to take over.
    pub fn await_ok(&self) {
        let total = self.nodes.len();
        let ok = converge(|| {
            let live: Vec<usize> = (0..total).filter(|&i| self.is_up(i)).collect();
            let mut replica_ports = Vec::new();
            for &i in &live {
                match role_of(&self.nodes[i]) {
                    Some((role, _)) if role == "master" => {}
                    Some((_, true)) => replica_ports.push(self.nodes[i].port()),
                    _ => return false,
                }
            }
            live.iter().all(|&i| self.node_ok(i, total, &replica_ports))
        });
        if !ok {
            panic!(
                "waited {CONVERGE:?} for cluster_state:ok with all 16384 slots and every \
                 replica attached; the nodes say:\n{}",
                self.describe()
            );
        }
    }

    fn node_ok(&self, i: usize, total: usize, replica_ports: &[u16]) -> bool {
        let Ok(info) = self.nodes[i].try_cmd::<String>(redis::cmd("CLUSTER").arg("INFO")) else {
            return false;
        };
        let field = |name: &str| {
            info.lines()
                .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
                .map(str::trim)
                .unwrap_or("")
                .to_string()
        };
        if field("cluster_state") != "ok"
            || field("cluster_slots_assigned") != "16384"
            || field("cluster_slots_ok") != "16384"
            || field("cluster_known_nodes") != total.to_string()
        {
            return false;
        }
        let Ok(lines) = self.try_view(i) else {
            return false;
        };
        replica_ports.iter().all(|&port| {
            lines.iter().any(|l| {
                l.port == port
                    && l.has_flag("slave")
                    && l.master.as_ref().is_some_and(|m| {
                        lines
                            .iter()
                            .any(|x| &x.id == m && x.has_flag("master") && !x.has_flag("fail"))
                    })
            })
        })
    }

    /// Node `i`'s CLUSTER NODES, parsed.
    pub fn view(&self, i: usize) -> Vec<NodeLine> {
        self.try_view(i)
            .unwrap_or_else(|e| panic!("CLUSTER NODES on node {i}: {e}"))
    }

    fn try_view(&self, i: usize) -> redis::RedisResult<Vec<NodeLine>> {
        let text: String = self.nodes[i].try_cmd(redis::cmd("CLUSTER").arg("NODES"))?;
        Ok(parse_cluster_nodes(&text))
    }

    /// Waits until `cond` holds for the CLUSTER NODES view of every live node.
    fn await_view(&self, what: &str, cond: impl Fn(&[NodeLine]) -> bool) {
        let ok = converge(|| {
            (0..self.nodes.len())
                .filter(|&i| self.is_up(i))
                .all(|i| self.try_view(i).is_ok_and(|lines| cond(&lines)))
        });
        if !ok {
            panic!(
                "waited {CONVERGE:?} for {what}; the nodes say:\n{}",
                self.describe()
            );
        }
    }

    /// Every live node's CLUSTER INFO state and CLUSTER NODES, for failure
    /// messages.
    pub fn describe(&self) -> String {
        let mut out = String::new();
        for (i, node) in self.nodes.iter().enumerate() {
            if !self.is_up(i) {
                let _ = writeln!(out, "--- node {i} (port {}): down", node.port());
                continue;
            }
            let info: String = node
                .try_cmd(redis::cmd("CLUSTER").arg("INFO"))
                .unwrap_or_else(|e| format!("CLUSTER INFO failed: {e}"));
            let state = info
                .lines()
                .filter(|l| l.starts_with("cluster_state") || l.starts_with("cluster_slots_"))
                .collect::<Vec<_>>()
                .join(" ");
            let nodes: String = node
                .try_cmd(redis::cmd("CLUSTER").arg("NODES"))
                .unwrap_or_else(|e| format!("CLUSTER NODES failed: {e}"));
            let _ = writeln!(out, "--- node {i} (port {}): {state}\n{nodes}", node.port());
        }
        out
    }

    fn any_up(&self) -> usize {
        (0..self.nodes.len())
            .find(|&i| self.is_up(i))
            .expect("every node of the cluster is down")
    }

    /// With a longer timeout than the helpers': in clean-clone CI runs a TLS
    /// node forming beside a busy suite took over 2 s to answer CLUSTER
    /// REPLICATE, and twice over 2 s to accept a connection for
    /// SET-CONFIG-EPOCH. Its process state is told with a failure.
    fn cmd<T: FromRedisValue>(&self, i: usize, cmd: &redis::Cmd) -> T {
        let node = &self.nodes[i];
        let asked = Instant::now();
        node.try_cmd_within(cmd, NODE_TIMEOUT).unwrap_or_else(|e| {
            let (state, wchan) = node.pid().map_or((None, None), |pid| {
                let wchan = std::fs::read_to_string(format!("/proc/{pid}/wchan")).ok();
                (process_state(pid), wchan)
            });
            panic!(
                "on cluster node {i} (port {}), after {:?}: {e}; its process in state \
                 {state:?}, waiting in {wchan:?}",
                node.port(),
                asked.elapsed(),
            )
        })
    }

    fn ok(&self, i: usize, cmd: &redis::Cmd) {
        let reply: String = self.cmd(i, cmd);
        assert_eq!(reply, "OK", "cluster node {i}");
    }
}

/// Master `m`'s share of the slots when `masters` split them evenly,
/// rounded as redis-cli rounds (3 masters: 0-5460, 5461-10922, 10923-16383).
fn slot_range(m: usize, masters: usize) -> (u16, u16) {
    let boundary = |k: usize| (k * SLOTS as usize + masters / 2) / masters;
    (boundary(m) as u16, (boundary(m + 1) - 1) as u16)
}

/// `ROLE` of a node: its role, and for a replica whether the link to its
/// master is up (`["slave", ip, port, "connected", offset]`). None if the
/// node does not answer.
pub fn role_of(node: &RedisNode) -> Option<(String, bool)> {
    let reply = node
        .try_cmd::<Vec<redis::Value>>(&redis::cmd("ROLE"))
        .ok()?;
    let text = |i: usize| {
        reply
            .get(i)
            .cloned()
            .and_then(|v| String::from_redis_value(v).ok())
    };
    let role = text(0)?;
    let linked = role == "slave" && text(3).is_some_and(|s| s == "connected");
    Some((role, linked))
}

/// Polls `cond` every 50 ms for up to [`CONVERGE`]: each check asks every
/// node on a connection of its own, and every 10 ms that kept a core busy.
fn converge(cond: impl FnMut() -> bool) -> bool {
    wait_until_every(CONVERGE, std::time::Duration::from_millis(50), cond)
}
