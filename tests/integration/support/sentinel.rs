//! A Sentinel-managed primary: one primary, R replicas (`--replicaof`) and
//! three sentinels (`redis-server FILE.conf --sentinel`), each a real
//! process on a free loopback port with its own temp directory, dying with
//! the test and killed and reaped on drop.
//!
//! ```ignore
//! let group = SentinelGroup::builder().data_password("pw").start();
//! let before = group.primary_port();
//! let took = group.failover();
//! assert_ne!(group.primary_port(), before);
//! ```
//!
//! Data nodes are indexed in start order: 0 is the first primary, 1..=R the
//! first replicas; after a failover any of them may be the primary, so the
//! methods ask the sentinels who is. The sentinels' files name each other
//! and the replicas up front (`sentinel myid`, `known-sentinel`,
//! `known-replica`, as a sentinel writes them itself) instead of leaving
//! them to the hello messages sent every 2 s. The group is ready in about a
//! second all the same: a sentinel that tried a peer before the peer was
//! listening marks it down and retries only a second later (its ping
//! period), and the fixture waits for every sentinel to see every other up.

use std::fmt::Write as _;
use std::fs;
use std::path::PathBuf;
use std::process::Child;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use redis::FromRedisValue;

use super::certs::{Certs, NodeTls};
use super::cluster::role_of;
use super::redis_node::{
    RedisNode, free_port, helper_client, scheme_url, sentinel_command, server_pid, url_encode,
};
use super::room::{Room, Seat};
use super::{TempDir, tempdir, wait_until, wait_until_every};

/// Upper bound for the group to form, and for a failover to be seen done.
const CONVERGE: Duration = Duration::from_secs(60);
/// Timeout of each helper connection and command.
const HELPER_TIMEOUT: Duration = Duration::from_secs(2);

/// How a [`SentinelGroup`] is laid out; see [`SentinelGroup::builder`].
#[derive(Clone, Debug)]
pub struct SentinelBuilder {
    name: String,
    replicas: usize,
    data_password: Option<String>,
    sentinel_password: Option<String>,
    down_after: Duration,
    failover_timeout: Duration,
    tls: Option<NodeTls>,
}

impl SentinelBuilder {
    /// The master name the sentinels monitor (default `mymaster`).
    pub fn name(mut self, name: &str) -> SentinelBuilder {
        self.name = name.to_string();
        self
    }

    /// Number of replicas (default 2).
    pub fn replicas(mut self, r: usize) -> SentinelBuilder {
        self.replicas = r;
        self
    }

    /// Password of the data nodes: `requirepass` and `masterauth` on each,
    /// `sentinel auth-pass` in the sentinels.
    pub fn data_password(mut self, password: &str) -> SentinelBuilder {
        self.data_password = Some(password.to_string());
        self
    }

    /// Password of the sentinels themselves (`requirepass` in their files);
    /// it may differ from the data nodes'.
    pub fn sentinel_password(mut self, password: &str) -> SentinelBuilder {
        self.sentinel_password = Some(password.to_string());
        self
    }

    /// `down-after-milliseconds` (default 1 s): how long the primary may not
    /// answer before it is failed over.
    pub fn down_after(mut self, d: Duration) -> SentinelBuilder {
        self.down_after = d;
        self
    }

    /// `failover-timeout` (default 5 s; Redis's 3 minutes would stall a test
    /// whose failover needs a second try).
    pub fn failover_timeout(mut self, d: Duration) -> SentinelBuilder {
        self.failover_timeout = d;
        self
    }

    /// Data nodes and sentinels on TLS only ([`Certs::node_tls`]): each with
    /// `port 0`, `tls-port` and `tls-replication yes` (so replicas reach their
    /// primary, and the sentinels every server and each other, over TLS, and
    /// they announce their TLS ports). The fixture's own connections use TLS
    /// too, and [`SentinelGroup::url`] is `rediss+sentinel://`.
    pub fn tls(mut self, certs: &Certs) -> SentinelBuilder {
        self.tls = Some(certs.node_tls());
        self
    }

    /// Starts the data nodes and the sentinels, and returns once the
    /// replicas replicate and every sentinel agrees on the primary, sees
    /// every replica with its link up, and knows the other two sentinels.
    pub fn start(self) -> SentinelGroup {
        SentinelGroup::form(self)
    }
}

/// One sentinel process.
struct SentinelProc {
    child: Option<Child>,
    port: u16,
    dir: TempDir,
}

impl SentinelProc {
    fn log(&self) -> String {
        fs::read_to_string(self.dir.join("redis.log")).unwrap_or_default()
    }
}

impl Drop for SentinelProc {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            super::send_signal(child.id() as i32, libc::SIGCONT);
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// A running primary with replicas and three sentinels. Dropping it kills
/// every process.
pub struct SentinelGroup {
    name: String,
    // Dropped first: sentinels gone before the data nodes they watch.
    sentinels: Vec<SentinelProc>,
    data: Vec<RedisNode>,
    data_password: Option<String>,
    sentinel_password: Option<String>,
    startup: Duration,
    tls: Option<NodeTls>,
    // Dropped last, once every process of the group is gone. Three groups
    // at a time: with the fixtures polling every 10 ms, several at once on
    // 2 cores (each 3 sentinels and 3 data nodes) starved one another into
    // spurious failovers and replicas that acknowledged late; polled every
    // 50 ms, three are as quiet as one was.
    _alone: Alone,
}

static GROUPS: Room = Room::new(3);

thread_local! {
    static HOLDING: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// A seat in [`GROUPS`], taken by a thread's first group; a test that
/// forms several groups (Redlock over groups, [`SentinelGroup::start_together`])
/// takes the whole room once for all of them.
struct Alone(Option<Seat>);

impl Alone {
    fn take() -> Alone {
        Alone::of(|| GROUPS.take(1))
    }

    fn of(seat: impl FnOnce() -> Seat) -> Alone {
        if HOLDING.with(|h| h.get()) {
            return Alone(None);
        }
        let seat = seat();
        HOLDING.with(|h| h.set(true));
        Alone(Some(seat))
    }
}

impl Drop for Alone {
    fn drop(&mut self) {
        if self.0.is_some() {
            HOLDING.with(|h| h.set(false));
        }
    }
}

impl SentinelGroup {
    /// Defaults: master `mymaster`, 2 replicas, no passwords,
    /// down-after 1 s, failover-timeout 5 s.
    pub fn builder() -> SentinelBuilder {
        SentinelBuilder {
            name: "mymaster".to_string(),
            replicas: 2,
            data_password: None,
            sentinel_password: None,
            down_after: Duration::from_secs(1),
            failover_timeout: Duration::from_secs(5),
            tls: None,
        }
    }

    /// The default group.
    pub fn start() -> SentinelGroup {
        SentinelGroup::builder().start()
    }

    /// Several groups formed side by side: each group's processes are
    /// started from this thread (a server dies with the thread that started
    /// it), and their waits (for the replicas, then for the sentinels to
    /// find one another, seconds of each) overlap. They hold the whole of
    /// [`GROUPS`] for as long as the first of them lives.
    pub fn start_together(builders: Vec<SentinelBuilder>) -> Vec<SentinelGroup> {
        let alone = Alone::of(|| GROUPS.alone());
        let mut groups = SentinelGroup::form_all(builders);
        if let Some(first) = groups.first_mut() {
            first._alone = alone;
        }
        groups
    }

    fn form(b: SentinelBuilder) -> SentinelGroup {
        let alone = Alone::take();
        let mut group = SentinelGroup::form_all(vec![b])
            .pop()
            .expect("one group formed");
        group._alone = alone;
        group
    }

    /// Starts every group's data nodes, waits for all their replicas, then
    /// starts and settles every group's sentinels.
    fn form_all(builders: Vec<SentinelBuilder>) -> Vec<SentinelGroup> {
        let began = Instant::now();
        let staged: Vec<(SentinelBuilder, Vec<RedisNode>)> = builders
            .into_iter()
            .map(|b| {
                let data = start_data(&b);
                (b, data)
            })
            .collect();
        let linked = wait_until(CONVERGE, || {
            staged.iter().all(|(_, data)| {
                data[1..]
                    .iter()
                    .all(|n| role_of(n).is_some_and(|(_, up)| up))
            })
        });
        assert!(
            linked,
            "the replicas did not sync with the primary within {CONVERGE:?}"
        );
        let mut groups: Vec<SentinelGroup> = staged
            .into_iter()
            .map(|(b, data)| SentinelGroup::watched(b, data))
            .collect();
        for group in &mut groups {
            group.settle();
            group.startup = began.elapsed();
        }
        groups
    }

    /// `data` under three new sentinels (tried up to three times).
    fn watched(b: SentinelBuilder, data: Vec<RedisNode>) -> SentinelGroup {
        let mut last_error = String::new();
        for _attempt in 0..3 {
            match start_sentinels(&b, &data) {
                Ok(sentinels) => {
                    return SentinelGroup {
                        name: b.name.clone(),
                        sentinels,
                        data,
                        data_password: b.data_password.clone(),
                        sentinel_password: b.sentinel_password.clone(),
                        startup: Duration::ZERO,
                        tls: b.tls.clone(),
                        _alone: Alone(None),
                    };
                }
                Err(e) => last_error = e,
            }
        }
        panic!("could not start the sentinels after 3 attempts: {last_error}");
    }

    /// How long [`SentinelBuilder::start`] took, spawn to ready.
    pub fn startup_time(&self) -> Duration {
        self.startup
    }

    /// `redis+sentinel://127.0.0.1:S1,127.0.0.1:S2,127.0.0.1:S3/NAME`. With a
    /// sentinel password: `redis+sentinel://:PASSWORD@127.0.0.1:S1,...`: one
    /// userinfo before the first host stands for every sentinel (they share
    /// one password; the user is left empty, which means `default`), and the
    /// password is percent-encoded. The data nodes' password is not in the
    /// URL: it is the password of another set of servers, see
    /// [`SentinelGroup::data_password`]. On TLS: `rediss+sentinel://...`.
    pub fn url(&self) -> String {
        let auth = self
            .sentinel_password
            .as_deref()
            .map(|pw| format!(":{}@", url_encode(pw)))
            .unwrap_or_default();
        let hosts: Vec<String> = self
            .sentinel_ports()
            .iter()
            .map(|p| format!("127.0.0.1:{p}"))
            .collect();
        let scheme = if self.tls.is_some() {
            "rediss"
        } else {
            "redis"
        };
        format!(
            "{scheme}+sentinel://{auth}{}/{}",
            hosts.join(","),
            self.name
        )
    }

    /// `redis://[:PASSWORD@]127.0.0.1:S` (`rediss://` on TLS) of each
    /// sentinel, for the redis crate.
    pub fn sentinel_urls(&self) -> Vec<String> {
        self.sentinel_ports()
            .iter()
            .map(|&p| self.sentinel_url(p))
            .collect()
    }

    fn sentinel_url(&self, port: u16) -> String {
        scheme_url(self.tls.is_some(), port, self.sentinel_password.as_deref())
    }

    /// How the data nodes and sentinels serve TLS, if they do.
    pub fn tls(&self) -> Option<&NodeTls> {
        self.tls.as_ref()
    }

    /// The master name the sentinels monitor.
    pub fn master_name(&self) -> &str {
        &self.name
    }

    pub fn data_password(&self) -> Option<&str> {
        self.data_password.as_deref()
    }

    pub fn sentinel_password(&self) -> Option<&str> {
        self.sentinel_password.as_deref()
    }

    pub fn sentinel_ports(&self) -> Vec<u16> {
        self.sentinels.iter().map(|s| s.port).collect()
    }

    /// Ports of every data node, in start order (0 was the first primary).
    pub fn data_ports(&self) -> Vec<u16> {
        self.data.iter().map(RedisNode::port).collect()
    }

    /// Data node `i` itself.
    pub fn data_node(&self, i: usize) -> &RedisNode {
        &self.data[i]
    }

    /// The primary's port as the sentinels report it (SENTINEL
    /// GET-MASTER-ADDR-BY-NAME, asked of each sentinel in turn until one
    /// answers). During a failover they may briefly disagree; the waits
    /// below ask them all.
    pub fn primary_port(&self) -> u16 {
        let mut errors = String::new();
        for i in 0..self.sentinels.len() {
            match self.reported_primary(i) {
                Ok(port) => return port,
                Err(e) => {
                    let _ = writeln!(errors, "sentinel {i}: {e}");
                }
            }
        }
        panic!(
            "no sentinel reported the primary of {}:\n{errors}",
            self.name
        );
    }

    /// The data node that is the primary now (by the sentinels).
    pub fn primary_index(&self) -> usize {
        let port = self.primary_port();
        self.data
            .iter()
            .position(|n| n.port() == port)
            .unwrap_or_else(|| panic!("the sentinels name port {port}, not one of our data nodes"))
    }

    /// The data nodes that are replicas now: every data node not killed and
    /// not the primary, in start order. Replica `i` in the methods below is
    /// `replica_indices()[i]`; before any failover that is data node `i + 1`.
    pub fn replica_indices(&self) -> Vec<usize> {
        let primary = self.primary_index();
        (0..self.data.len())
            .filter(|&i| i != primary && self.data[i].pid().is_some())
            .collect()
    }

    /// Ports of [`SentinelGroup::replica_indices`].
    pub fn replica_ports(&self) -> Vec<u16> {
        self.replica_indices()
            .into_iter()
            .map(|i| self.data[i].port())
            .collect()
    }

    /// Forces a failover (SENTINEL FAILOVER NAME) and waits until every live
    /// sentinel names a different primary and that node's ROLE says master.
    /// Returns the time from the accepted command to then. A sentinel turns
    /// the command down (NOGOODSLAVE) until it has fresh INFO from a replica;
    /// that is retried. It does not wait for the old primary to rejoin as a
    /// replica (sentinels demote it some 8 s later); [`SentinelGroup::settle`]
    /// does.
    pub fn failover(&self) -> Duration {
        let old = self.primary_port();
        let mut refusal = String::new();
        let accepted = self.poll(|| {
            match self.try_sentinel_cmd::<String>(
                0,
                redis::cmd("SENTINEL").arg("FAILOVER").arg(&self.name),
            ) {
                Ok(_) => true,
                Err(e) => {
                    refusal = e.to_string();
                    assert!(
                        refusal.contains("NOGOODSLAVE") || refusal.contains("INPROG"),
                        "SENTINEL FAILOVER {}: {e}",
                        self.name
                    );
                    false
                }
            }
        });
        assert!(
            accepted,
            "SENTINEL FAILOVER {} was refused for {CONVERGE:?}: {refusal}\n{}",
            self.name,
            self.describe()
        );
        let began = Instant::now();
        self.await_promotion(old);
        began.elapsed()
    }

    /// SIGKILLs the primary, then waits (as [`SentinelGroup::failover`]) until
    /// a replica is promoted; returns the time from the kill.
    pub fn kill_primary(&mut self) -> Duration {
        self.kill_primary_then(|_| {})
    }

    /// [`SentinelGroup::kill_primary`], running `then` between the kill and
    /// the wait for the promotion (to thaw a frozen replica, say).
    pub fn kill_primary_then(&mut self, then: impl FnOnce(&SentinelGroup)) -> Duration {
        let old = self.primary_port();
        let i = self.primary_index();
        let began = Instant::now();
        self.data[i].kill();
        then(self);
        self.await_promotion(old);
        began.elapsed()
    }

    /// Freezes replica `i` (SIGSTOP; see [`SentinelGroup::replica_indices`]).
    pub fn stop_replica(&self, i: usize) {
        self.data[self.replica(i)].stop();
    }

    /// Resumes replica `i` after [`SentinelGroup::stop_replica`].
    pub fn cont_replica(&self, i: usize) {
        self.data[self.replica(i)].cont();
    }

    /// GET `key` on the primary.
    pub fn get(&self, key: &[u8]) -> Option<Vec<u8>> {
        self.data[self.primary_index()].get(key)
    }

    /// GET `key` on replica `i`.
    pub fn get_on_replica(&self, i: usize, key: &[u8]) -> Option<Vec<u8>> {
        self.data[self.replica(i)].get(key)
    }

    /// GET `key` on every replica, in [`SentinelGroup::replica_indices`] order.
    pub fn get_on_replicas(&self, key: &[u8]) -> Vec<Option<Vec<u8>>> {
        self.replica_indices()
            .into_iter()
            .map(|i| self.data[i].get(key))
            .collect()
    }

    /// SET `key` `value` (no expiry) on the primary, then WAIT until every
    /// running replica has it.
    pub fn set(&self, key: &[u8], value: &[u8]) {
        let primary = &self.data[self.primary_index()];
        let reply: String = primary.cmd(redis::cmd("SET").arg(key).arg(value));
        assert_eq!(reply, "OK", "SET on the primary");
        let want = self
            .replica_indices()
            .into_iter()
            .filter(|&i| self.data[i].ping())
            .count();
        let acked: i64 = primary.cmd(redis::cmd("WAIT").arg(want).arg(5000));
        assert!(
            acked as usize >= want,
            "only {acked} of {want} replicas acknowledged the write within 5s"
        );
    }

    /// Waits until the group is at rest: every live sentinel names the same
    /// primary, whose ROLE says master; every other running data node
    /// replicates it with the link up; and every live sentinel sees those
    /// replicas healthy and knows the other live sentinels. A data node that
    /// still says master once the sentinels agree on another (the old
    /// primary after [`SentinelGroup::failover`]) is pointed at the new one
    /// here: the sentinels would do the same, but only 10-20 s later (they
    /// wait for a slave-period INFO and then 8 s more).
    pub fn settle(&self) {
        let ok = self.poll(|| {
            self.demote_stale_primaries();
            self.settled()
        });
        assert!(
            ok,
            "the sentinel group did not settle within {CONVERGE:?}:\n{}",
            self.describe()
        );
    }

    /// Polls `cond` for up to [`CONVERGE`]: every 50 ms, or every 100 ms on
    /// TLS, where each check is several TLS handshakes (the harness's rustls
    /// is a debug build). Each check opens a connection to every sentinel
    /// and node: polled every 10 ms, they kept a core busy and slowed the
    /// very failover being watched.
    fn poll(&self, cond: impl FnMut() -> bool) -> bool {
        let every = if self.tls.is_some() { 100 } else { 50 };
        wait_until_every(CONVERGE, Duration::from_millis(every), cond)
    }

    fn demote_stale_primaries(&self) {
        let live: Vec<usize> = (0..self.sentinels.len())
            .filter(|&i| self.sentinel_up(i))
            .collect();
        let Some(port) = self.agreed_primary(&live) else {
            return;
        };
        for node in self.data.iter().filter(|n| n.port() != port && node_up(n)) {
            if role_of(node).is_some_and(|(role, _)| role == "master") {
                let _: redis::RedisResult<String> =
                    node.try_cmd(redis::cmd("REPLICAOF").arg("127.0.0.1").arg(port));
            }
        }
    }

    fn settled(&self) -> bool {
        let live_sentinels: Vec<usize> = (0..self.sentinels.len())
            .filter(|&i| self.sentinel_up(i))
            .collect();
        let Some(port) = self.agreed_primary(&live_sentinels) else {
            return false;
        };
        let Some(primary) = self.data.iter().position(|n| n.port() == port) else {
            return false;
        };
        if role_of(&self.data[primary]).is_none_or(|(role, _)| role != "master") {
            return false;
        }
        let replicas: Vec<u16> = (0..self.data.len())
            .filter(|&i| i != primary && node_up(&self.data[i]))
            .map(|i| self.data[i].port())
            .collect();
        let replicating = replicas.iter().all(|&p| {
            let node = self.data.iter().find(|n| n.port() == p).expect("our node");
            replica_of(node) == Some(port)
        });
        if !replicating {
            return false;
        }
        live_sentinels.iter().all(|&s| {
            let seen: Vec<std::collections::HashMap<String, String>> = match self
                .try_sentinel_cmd(s, redis::cmd("SENTINEL").arg("REPLICAS").arg(&self.name))
            {
                Ok(v) => v,
                Err(_) => return false,
            };
            let replicas_ok = replicas.iter().all(|&p| {
                seen.iter().any(|r| {
                    r.get("port").is_some_and(|x| x == &p.to_string())
                        && r.get("flags").is_some_and(|f| f == "slave")
                        && r.get("master-link-status").is_some_and(|m| m == "ok")
                })
            });
            let others: Vec<std::collections::HashMap<String, String>> = match self
                .try_sentinel_cmd(s, redis::cmd("SENTINEL").arg("SENTINELS").arg(&self.name))
            {
                Ok(v) => v,
                Err(_) => return false,
            };
            let sentinels_ok = live_sentinels.iter().filter(|&&o| o != s).all(|&o| {
                let port = self.sentinels[o].port.to_string();
                others.iter().any(|x| {
                    x.get("port") == Some(&port) && x.get("flags").is_some_and(|f| f == "sentinel")
                })
            });
            replicas_ok && sentinels_ok
        })
    }

    /// Waits until every live sentinel names the same primary, not `old`,
    /// and that node's ROLE says master.
    fn await_promotion(&self, old: u16) {
        let ok = self.poll(|| {
            let live: Vec<usize> = (0..self.sentinels.len())
                .filter(|&i| self.sentinel_up(i))
                .collect();
            let Some(port) = self.agreed_primary(&live) else {
                return false;
            };
            port != old
                && self
                    .data
                    .iter()
                    .find(|n| n.port() == port)
                    .and_then(role_of)
                    .is_some_and(|(role, _)| role == "master")
        });
        assert!(
            ok,
            "no replica was promoted in place of port {old} within {CONVERGE:?}:\n{}",
            self.describe()
        );
    }

    /// The primary every one of `sentinels` reports, if they agree.
    fn agreed_primary(&self, sentinels: &[usize]) -> Option<u16> {
        let mut agreed = None;
        for &s in sentinels {
            let port = self.reported_primary(s).ok()?;
            if agreed.is_some_and(|p| p != port) {
                return None;
            }
            agreed = Some(port);
        }
        agreed
    }

    fn reported_primary(&self, s: usize) -> redis::RedisResult<u16> {
        let (_host, port): (String, u16) = self.try_sentinel_cmd(
            s,
            redis::cmd("SENTINEL")
                .arg("GET-MASTER-ADDR-BY-NAME")
                .arg(&self.name),
        )?;
        Ok(port)
    }

    fn replica(&self, i: usize) -> usize {
        let replicas = self.replica_indices();
        *replicas
            .get(i)
            .unwrap_or_else(|| panic!("replica {i}: there are {} replicas now", replicas.len()))
    }

    fn sentinel_up(&self, s: usize) -> bool {
        self.sentinels[s]
            .child
            .as_ref()
            .is_some_and(|c| super::pid_alive(c.id() as i32))
    }

    /// Runs `cmd` on sentinel `s` (logging in when the sentinels have a
    /// password).
    pub fn try_sentinel_cmd<T: FromRedisValue>(
        &self,
        s: usize,
        cmd: &redis::Cmd,
    ) -> redis::RedisResult<T> {
        let url = self.sentinel_url(self.sentinels[s].port);
        let client = helper_client(&url, self.tls.as_ref())?;
        let mut con = client.get_connection_with_timeout(HELPER_TIMEOUT)?;
        con.set_read_timeout(Some(HELPER_TIMEOUT))?;
        con.set_write_timeout(Some(HELPER_TIMEOUT))?;
        cmd.query(&mut con)
    }

    /// [`SentinelGroup::try_sentinel_cmd`], panicking with context.
    pub fn sentinel_cmd<T: FromRedisValue>(&self, s: usize, cmd: &redis::Cmd) -> T {
        self.try_sentinel_cmd(s, cmd)
            .unwrap_or_else(|e| panic!("on sentinel {s} (port {}): {e}", self.sentinels[s].port))
    }

    /// Each sentinel's view and log tail and each data node's ROLE, for
    /// failure messages.
    pub fn describe(&self) -> String {
        let mut out = String::new();
        for (i, node) in self.data.iter().enumerate() {
            let role = if node.pid().is_none() {
                "killed".to_string()
            } else {
                node.try_cmd::<redis::Value>(&redis::cmd("ROLE"))
                    .map(|v| format!("{v:?}"))
                    .unwrap_or_else(|e| format!("ROLE failed: {e}"))
            };
            let _ = writeln!(out, "data node {i} (port {}): {role}", node.port());
        }
        for (s, sentinel) in self.sentinels.iter().enumerate() {
            let _ = writeln!(out, "--- sentinel {s} (port {})", sentinel.port);
            for what in ["MASTER", "REPLICAS", "SENTINELS"] {
                let reply = self
                    .try_sentinel_cmd::<redis::Value>(
                        s,
                        redis::cmd("SENTINEL").arg(what).arg(&self.name),
                    )
                    .map(|v| format!("{v:?}"))
                    .unwrap_or_else(|e| format!("failed: {e}"));
                let _ = writeln!(out, "SENTINEL {what}: {reply}");
            }
            let log = sentinel.log();
            let tail: Vec<&str> = log.lines().rev().take(30).collect();
            let _ = writeln!(out, "log (last lines):");
            for line in tail.iter().rev() {
                let _ = writeln!(out, "  {line}");
            }
        }
        out
    }
}

/// Whether a data node is running and not frozen.
fn node_up(node: &RedisNode) -> bool {
    node.pid()
        .is_some_and(|pid| !matches!(super::process_state(pid), Some('T') | Some('Z') | None))
}

/// The port of the master a replica's ROLE names, when its link is up.
fn replica_of(node: &RedisNode) -> Option<u16> {
    let reply = node
        .try_cmd::<Vec<redis::Value>>(&redis::cmd("ROLE"))
        .ok()?;
    let text = |i: usize| {
        reply
            .get(i)
            .cloned()
            .and_then(|v| String::from_redis_value(v).ok())
    };
    if text(0)? != "slave" || text(3)? != "connected" {
        return None;
    }
    let port = reply.get(2).cloned()?;
    u16::from_redis_value(port).ok()
}

/// A 40-hex-digit sentinel id, unique enough within one test process.
fn sentinel_id(port: u16) -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    format!(
        "{:08x}{:016x}{:08x}{:04x}{:04x}",
        std::process::id(),
        nanos as u64,
        n as u32,
        port,
        0x5e17
    )
}

/// A value quoted for a redis config file (sdssplitargs reads `"..."`
/// with backslash escapes).
fn quote(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        if c == '"' || c == '\\' {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('"');
    out
}

/// Writes the three sentinels' files and starts them; each must answer as
/// itself (INFO's process_id). On failure the started ones are killed (by
/// drop) and the reason returned, so the caller can try new ports.
/// A group's primary and replicas, started (not yet linked).
fn start_data(b: &SentinelBuilder) -> Vec<RedisNode> {
    let mut args = vec![
        // Replicas sync at once (7.0's diskless default waits 5 s for
        // more replicas; 6.2 would write an RDB file).
        "--repl-diskless-sync",
        "yes",
        "--repl-diskless-sync-delay",
        "0",
    ];
    if let Some(pw) = &b.data_password {
        // Every data node may become a replica after a failover.
        args.extend(["--masterauth", pw]);
    }
    let pw = b.data_password.as_deref();
    let tls = b.tls.as_ref();
    let primary = RedisNode::start_with_tls(&args, pw, tls, free_port);
    let primary_port = primary.port().to_string();
    let mut data = vec![primary];
    for _ in 0..b.replicas {
        let mut replica_args = args.clone();
        replica_args.extend(["--replicaof", "127.0.0.1", &primary_port]);
        data.push(RedisNode::start_with_tls(&replica_args, pw, tls, free_port));
    }
    data
}

fn start_sentinels(b: &SentinelBuilder, data: &[RedisNode]) -> Result<Vec<SentinelProc>, String> {
    let mut ports: Vec<u16> = Vec::new();
    while ports.len() < 3 {
        let port = free_port();
        if port != 6379 && !ports.contains(&port) && data.iter().all(|n| n.port() != port) {
            ports.push(port);
        }
    }
    let ids: Vec<String> = ports.iter().map(|&p| sentinel_id(p)).collect();
    let name = quote(&b.name);
    let mut sentinels = Vec::new();
    for (k, &port) in ports.iter().enumerate() {
        let dir = tempdir();
        let mut conf = String::new();
        match &b.tls {
            Some(tls) => {
                let _ = writeln!(conf, "port 0");
                let _ = writeln!(conf, "tls-port {port}");
                conf.push_str(&tls.conf());
            }
            None => {
                let _ = writeln!(conf, "port {port}");
            }
        }
        let _ = writeln!(conf, "bind 127.0.0.1");
        let _ = writeln!(conf, "daemonize no");
        let _ = writeln!(conf, "dir {}", quote(&dir.display()));
        let _ = writeln!(conf, "sentinel myid {}", ids[k]);
        let _ = writeln!(
            conf,
            "sentinel monitor {name} 127.0.0.1 {} 2",
            data[0].port()
        );
        let _ = writeln!(
            conf,
            "sentinel down-after-milliseconds {name} {}",
            b.down_after.as_millis()
        );
        let _ = writeln!(
            conf,
            "sentinel failover-timeout {name} {}",
            b.failover_timeout.as_millis()
        );
        let _ = writeln!(conf, "sentinel parallel-syncs {name} 1");
        if let Some(pw) = &b.data_password {
            let _ = writeln!(conf, "sentinel auth-pass {name} {}", quote(pw));
        }
        if let Some(pw) = &b.sentinel_password {
            // Sentinels also log in to each other with their requirepass.
            let _ = writeln!(conf, "requirepass {}", quote(pw));
        }
        for replica in &data[1..] {
            let _ = writeln!(
                conf,
                "sentinel known-replica {name} 127.0.0.1 {}",
                replica.port()
            );
        }
        for (j, &other) in ports.iter().enumerate().filter(|&(j, _)| j != k) {
            let _ = writeln!(
                conf,
                "sentinel known-sentinel {name} 127.0.0.1 {other} {}",
                ids[j]
            );
        }
        let conf_path: PathBuf = dir.join("sentinel.conf");
        fs::write(&conf_path, conf).expect("write sentinel.conf");
        let child = sentinel_command(&conf_path, dir.path())
            .spawn()
            .unwrap_or_else(|e| {
                panic!(
                    "cannot spawn {} --sentinel: {e}",
                    super::redis_server_binary().display()
                )
            });
        sentinels.push(SentinelProc {
            child: Some(child),
            port,
            dir,
        });
    }
    let tls = b.tls.as_ref();
    let url = |p: u16| scheme_url(tls.is_some(), p, b.sentinel_password.as_deref());
    for s in &mut sentinels {
        let child = s.child.as_mut().expect("just spawned");
        let pid = child.id();
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            if let Ok(Some(status)) = child.try_wait() {
                return Err(format!(
                    "sentinel on port {} exited with {status}; log:\n{}",
                    s.port,
                    s.log()
                ));
            }
            if server_pid(&url(s.port), tls) == Some(pid) {
                break;
            }
            if Instant::now() >= deadline {
                return Err(format!(
                    "sentinel on port {} did not answer within 5s; log:\n{}",
                    s.port,
                    s.log()
                ));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
    Ok(sentinels)
}
