//! The topology fixtures work: a Redis Cluster ([`RedisCluster`]) forms
//! with every slot covered and its replicas attached, finds keys, migrates
//! slots (and leaves one half-migrated for ASK), and fails over; a sentinel
//! group ([`SentinelGroup`]) forms, fails over on command and when its
//! primary is killed, with and without passwords. And the server-version
//! helper agrees with the binary.
//!
//! These talk to the servers through the redis crate only: redlock-run does
//! not speak Cluster or Sentinel yet. Each prints its timings (shown with
//! `--nocapture`).

use std::process::Command;
use std::time::Instant;

use redis::cluster::ClusterClient;
use redis::sentinel::{SentinelClientBuilder, SentinelServerType};
use redis::{ConnectionAddr, ErrorKind, ServerErrorKind};

use crate::support::cluster::SLOTS;
use crate::support::{RedisCluster, SentinelGroup, redis_server_binary, server_caps};

/// The port a MOVED or ASK error points to, and whether it was ASK.
fn redirect(e: &redis::RedisError) -> Option<(u16, bool)> {
    let (addr, _slot) = e.redirect_node()?;
    let port = addr.rsplit_once(':')?.1.parse().ok()?;
    Some((port, e.kind() == ErrorKind::Server(ServerErrorKind::Ask)))
}

/// GET `key` on node `i` alone (no redirections followed).
fn get_on(cluster: &RedisCluster, i: usize, key: &[u8]) -> redis::RedisResult<Option<Vec<u8>>> {
    cluster.node(i).try_cmd(redis::cmd("GET").arg(key))
}

#[test]
fn server_version_helper_agrees_with_the_binary() {
    let out = Command::new(redis_server_binary())
        .arg("--version")
        .output()
        .expect("run redis-server --version");
    let text = String::from_utf8_lossy(&out.stdout);
    let reported = text
        .split_whitespace()
        .find_map(|w| w.strip_prefix("v="))
        .unwrap_or_else(|| panic!("no v= in {text:?}"));
    let caps = server_caps();
    // Valkey says a Redis version too (for clients that go by it), and its
    // own in valkey_version, which is what --version prints.
    assert_eq!(
        caps.release.to_string(),
        reported,
        "INFO server vs --version"
    );
    let valkey = text.starts_with("Valkey");
    assert_eq!(caps.product == "Valkey", valkey, "{text}");
    eprintln!(
        "server under test: {} ({} {}, speaking Redis {}, TLS {})",
        caps.binary.display(),
        caps.product,
        caps.release,
        caps.version,
        if caps.tls { "yes" } else { "no" }
    );
}

#[test]
fn cluster_of_three_masters_covers_every_slot() {
    let cluster = RedisCluster::new(3, 0);
    eprintln!("3-master cluster started in {:?}", cluster.startup_time());
    assert_eq!(cluster.len(), 3);
    let ports = cluster.master_ports();
    assert_eq!(
        cluster.url(),
        format!(
            "redis+cluster://127.0.0.1:{},127.0.0.1:{},127.0.0.1:{}",
            ports[0], ports[1], ports[2]
        )
    );
    // Even thirds, each node's own view agreeing with the others'.
    for (slot, owner) in [
        (0, 0),
        (5460, 0),
        (5461, 1),
        (10922, 1),
        (10923, 2),
        (16383, 2),
    ] {
        assert_eq!(cluster.master_for_slot(slot), owner, "owner of slot {slot}");
    }
    for i in 0..3 {
        let view = cluster.view(i);
        let covered: u32 = view
            .iter()
            .flat_map(|l| l.slots.iter())
            .map(|&(a, b)| u32::from(b - a) + 1)
            .sum();
        assert_eq!(covered, u32::from(SLOTS), "slots node {i} sees covered");
        assert_eq!(cluster.role(i), "master");
    }
    // The slot a name maps to is the server's: "{x}" hash tags co-locate.
    assert_eq!(cluster.keyslot(b"{job}a"), cluster.keyslot(b"{job}b"));
    assert_eq!(cluster.keyslot(b"foo"), 12182);
}

#[test]
fn cluster_with_replicas_attaches_one_to_each_master() {
    let cluster = RedisCluster::new(3, 1);
    eprintln!("3+3 cluster started in {:?}", cluster.startup_time());
    assert_eq!(cluster.len(), 6);
    for m in 0..3 {
        let replicas = cluster.replicas_of(m);
        assert_eq!(replicas.len(), 1, "replicas of master {m}");
        let r = replicas[0];
        assert_eq!(cluster.role(r), "slave", "node {r}");
        // Every node, not only the replica, knows whose replica it is.
        for i in 0..6 {
            let line = cluster
                .view(i)
                .into_iter()
                .find(|l| l.port == cluster.node(r).port())
                .expect("every node knows every node");
            assert!(
                line.has_flag("slave"),
                "node {i} sees node {r} as {:?}",
                line.flags
            );
            assert_eq!(line.master.as_deref(), Some(cluster.node_id(m)));
        }
    }
    // A write through the redis crate's cluster client reaches a replica.
    let client = ClusterClient::new(cluster.seed_urls()).expect("cluster client");
    let mut con = client.get_connection().expect("cluster connection");
    let _: () = redis::cmd("SET")
        .arg("{r}k")
        .arg("v")
        .query(&mut con)
        .expect("SET through ClusterClient");
    let master = cluster.master_for_slot(cluster.keyslot(b"{r}k"));
    let replica = cluster.replicas_of(master)[0];
    let _: i64 = cluster
        .node(master)
        .cmd(redis::cmd("WAIT").arg(1).arg(5000));
    let mut rcon = cluster
        .node(replica)
        .connection()
        .expect("replica connection");
    let _: () = redis::cmd("READONLY").query(&mut rcon).expect("READONLY");
    let on_replica: Option<String> = redis::cmd("GET")
        .arg("{r}k")
        .query(&mut rcon)
        .expect("GET on the replica");
    assert_eq!(on_replica.as_deref(), Some("v"));
}

#[test]
fn key_set_on_its_master_is_found_by_get() {
    let cluster = RedisCluster::new(3, 0);
    let key = b"lock:cluster-job".as_slice();
    let master = cluster.master_for_slot(cluster.keyslot(key));
    cluster.node(master).set(key, b"token-1", 60_000);
    assert_eq!(cluster.get(key).as_deref(), Some(b"token-1".as_slice()));
    assert!(cluster.exists(key));
    assert_eq!(cluster.keys(), vec![key.to_vec()]);
    assert_eq!(cluster.get(b"lock:absent"), None);
    // The other masters send a client there.
    for i in (0..3).filter(|&i| i != master) {
        let e = get_on(&cluster, i, key).expect_err("a master not serving the slot");
        assert_eq!(
            redirect(&e),
            Some((cluster.node(master).port(), false)),
            "{e}"
        );
    }
    // And the redis crate's cluster client agrees.
    let client = ClusterClient::new(cluster.seed_urls()).expect("cluster client");
    let mut con = client.get_connection().expect("cluster connection");
    let via_client: Option<Vec<u8>> = redis::cmd("GET")
        .arg(key)
        .query(&mut con)
        .expect("GET through ClusterClient");
    assert_eq!(via_client.as_deref(), Some(b"token-1".as_slice()));
}

#[test]
fn migrate_slot_moves_the_slot_and_its_keys() {
    let cluster = RedisCluster::new(3, 0);
    let (a, b) = (b"{moving}a".as_slice(), b"{moving}b".as_slice());
    cluster.set(a, b"1");
    cluster.set(b, b"2");
    let slot = cluster.keyslot(a);
    let from = cluster.master_for_slot(slot);
    let to = (from + 1) % 3;
    let began = Instant::now();
    cluster.migrate_slot(slot, to);
    eprintln!(
        "slot {slot} migrated {from} -> {to} in {:?}",
        began.elapsed()
    );

    assert_eq!(cluster.master_for_slot(slot), to);
    assert_eq!(
        get_on(&cluster, to, a)
            .expect("GET on the new owner")
            .as_deref(),
        Some(b"1".as_slice())
    );
    let e = get_on(&cluster, from, a).expect_err("the old owner redirects");
    assert_eq!(redirect(&e), Some((cluster.node(to).port(), false)), "{e}");
    assert_eq!(cluster.get(b).as_deref(), Some(b"2".as_slice()));
    let keys: Vec<Vec<u8>> = cluster.node(from).cmd(redis::cmd("KEYS").arg("*"));
    assert!(keys.is_empty(), "keys left on the old owner: {keys:?}");
}

#[test]
fn half_migrated_slot_answers_ask_for_moved_and_new_keys() {
    let cluster = RedisCluster::new(3, 0);
    let (key, fresh) = (b"{half}key".as_slice(), b"{half}fresh".as_slice());
    cluster.set(key, b"v");
    let slot = cluster.keyslot(key);
    let from = cluster.master_for_slot(slot);
    let to = (from + 2) % 3;
    let to_port = cluster.node(to).port();
    let migration = cluster.begin_slot_migration(slot, to);

    // Keys not moved yet are served by the source; a key it lacks is ASKed
    // of the target.
    assert_eq!(
        get_on(&cluster, from, key)
            .expect("GET on the source")
            .as_deref(),
        Some(b"v".as_slice())
    );
    let e = get_on(&cluster, from, fresh).expect_err("ASK for a key the source lacks");
    assert_eq!(redirect(&e), Some((to_port, true)), "{e}");

    cluster.move_keys(&migration, &[key]);
    let e = get_on(&cluster, from, key).expect_err("ASK once the key has moved");
    assert_eq!(redirect(&e), Some((to_port, true)), "{e}");
    // The target still sends plain requests back; after ASKING it answers.
    let e = get_on(&cluster, to, key).expect_err("MOVED without ASKING");
    assert_eq!(
        redirect(&e),
        Some((cluster.node(from).port(), false)),
        "{e}"
    );
    let mut con = cluster
        .node(to)
        .connection()
        .expect("connection to the target");
    let (asked,): (Option<Vec<u8>>,) = redis::pipe()
        .cmd("ASKING")
        .ignore()
        .cmd("GET")
        .arg(key)
        .query(&mut con)
        .expect("ASKING + GET on the target");
    assert_eq!(asked.as_deref(), Some(b"v".as_slice()));
    // The fixture's own lookups follow the ASK.
    assert_eq!(cluster.get(key).as_deref(), Some(b"v".as_slice()));
    assert_eq!(
        cluster.master_for_slot(slot),
        from,
        "still the source's until finished"
    );

    cluster.finish_slot_migration(migration);
    assert_eq!(cluster.master_for_slot(slot), to);
    assert_eq!(
        get_on(&cluster, to, key)
            .expect("GET on the new owner")
            .as_deref(),
        Some(b"v".as_slice())
    );
}

#[test]
fn cluster_replica_takes_over_a_killed_master_and_nodes_freeze() {
    let mut cluster = RedisCluster::new(3, 1);
    let replica = cluster.replicas_of(0)[0];

    // A frozen node answers nothing; it is back after SIGCONT.
    cluster.stop(replica);
    assert!(!cluster.is_up(replica));
    cluster.cont(replica);
    assert!(cluster.node(replica).ping(), "node answers after cont");

    let began = Instant::now();
    cluster.kill(0);
    cluster.await_ok();
    eprintln!(
        "killed master replaced by its replica in {:?}",
        began.elapsed()
    );
    assert_eq!(cluster.role(replica), "master");
    assert_eq!(cluster.master_for_slot(0), replica);
    cluster.set(b"after-failover", b"ok");
    assert_eq!(
        cluster.get(b"after-failover").as_deref(),
        Some(b"ok".as_slice())
    );
}

/// A connection to the primary through the redis crate's sentinel client.
fn via_sentinels(group: &SentinelGroup) -> redis::Connection {
    let addrs = group
        .sentinel_ports()
        .into_iter()
        .map(|p| ConnectionAddr::Tcp("127.0.0.1".into(), p));
    let mut builder =
        SentinelClientBuilder::new(addrs, group.master_name(), SentinelServerType::Master)
            .expect("sentinel client builder");
    if let Some(pw) = group.sentinel_password() {
        builder = builder.set_client_to_sentinel_password(pw);
    }
    if let Some(pw) = group.data_password() {
        builder = builder.set_client_to_redis_password(pw);
    }
    builder
        .build()
        .expect("sentinel client")
        .get_connection()
        .expect("connection to the primary through the sentinels")
}

#[test]
fn sentinel_group_comes_up_and_fails_over_on_command_and_on_kill() {
    let mut group = SentinelGroup::start();
    eprintln!(
        "sentinel group (1 + 2 replicas, 3 sentinels) started in {:?}",
        group.startup_time()
    );
    let s = group.sentinel_ports();
    assert_eq!(
        group.url(),
        format!(
            "redis+sentinel://127.0.0.1:{},127.0.0.1:{},127.0.0.1:{}/mymaster",
            s[0], s[1], s[2]
        )
    );
    let first = group.primary_port();
    assert_eq!(first, group.data_ports()[0]);
    assert_eq!(group.replica_ports(), group.data_ports()[1..].to_vec());

    group.set(b"k", b"v1");
    assert_eq!(group.get(b"k").as_deref(), Some(b"v1".as_slice()));
    assert_eq!(group.get_on_replicas(b"k"), vec![Some(b"v1".to_vec()); 2]);
    let mut con = via_sentinels(&group);
    let seen: Option<String> = redis::cmd("GET").arg("k").query(&mut con).expect("GET");
    assert_eq!(seen.as_deref(), Some("v1"));

    // A frozen replica is back after SIGCONT.
    group.stop_replica(0);
    group.cont_replica(0);
    assert_eq!(
        group.get_on_replica(0, b"k").as_deref(),
        Some(b"v1".as_slice())
    );

    let took = group.failover();
    let second = group.primary_port();
    eprintln!("SENTINEL FAILOVER promoted port {second} (was {first}) in {took:?}");
    assert_ne!(second, first);
    assert_eq!(group.get(b"k").as_deref(), Some(b"v1".as_slice()));
    let began = Instant::now();
    group.settle();
    eprintln!(
        "group settled (old primary a replica again) {:?} later",
        began.elapsed()
    );
    assert!(group.replica_ports().contains(&first));

    let took = group.kill_primary();
    let third = group.primary_port();
    eprintln!("killing the primary promoted port {third} (was {second}) in {took:?}");
    assert_ne!(third, second);
    assert_eq!(group.get(b"k").as_deref(), Some(b"v1".as_slice()));
    let mut con = via_sentinels(&group);
    let _: () = redis::cmd("SET")
        .arg("k")
        .arg("v2")
        .query(&mut con)
        .expect("SET on the new primary");
    assert_eq!(group.get(b"k").as_deref(), Some(b"v2".as_slice()));
}

/// Starts a group with these passwords, checks that the passwords are
/// demanded and that the sentinel client gets through with them, then fails
/// over (which the sentinels can only do if they log in to the data nodes).
fn check_passwords(data: Option<&str>, sentinel: Option<&str>) {
    let mut builder = SentinelGroup::builder().name("locks").replicas(1);
    if let Some(pw) = data {
        builder = builder.data_password(pw);
    }
    if let Some(pw) = sentinel {
        builder = builder.sentinel_password(pw);
    }
    let group = builder.start();
    let s = group.sentinel_ports();
    let auth = sentinel.map(|pw| format!(":{pw}@")).unwrap_or_default();
    assert_eq!(
        group.url(),
        format!(
            "redis+sentinel://{auth}127.0.0.1:{},127.0.0.1:{},127.0.0.1:{}/locks",
            s[0], s[1], s[2]
        )
    );

    let anonymous = |port: u16| -> redis::RedisResult<String> {
        let client = redis::Client::open(format!("redis://127.0.0.1:{port}"))?;
        let mut con = client.get_connection_with_timeout(std::time::Duration::from_secs(2))?;
        redis::cmd("PING").query(&mut con)
    };
    for (port, needs) in [
        (group.primary_port(), data.is_some()),
        (s[0], sentinel.is_some()),
    ] {
        match anonymous(port) {
            Ok(_) => assert!(!needs, "port {port} answered without a password"),
            Err(e) => assert!(
                needs && e.to_string().contains("NOAUTH"),
                "port {port}: {e}"
            ),
        }
    }

    let mut con = via_sentinels(&group);
    let _: () = redis::cmd("SET")
        .arg("pw")
        .arg("ok")
        .query(&mut con)
        .expect("SET through the sentinels");
    // Replication is asynchronous and a forced failover does not wait for
    // the replica to catch up, so an unacknowledged write may be lost; wait
    // for the replica before failing over.
    let acked: i64 = redis::cmd("WAIT")
        .arg(1)
        .arg(5000)
        .query(&mut con)
        .expect("WAIT through the sentinels");
    assert_eq!(acked, 1, "the replica did not acknowledge the write in 5 s");
    let took = group.failover();
    eprintln!("failover with data password {data:?}, sentinel password {sentinel:?}: {took:?}");
    assert_eq!(group.get(b"pw").as_deref(), Some(b"ok".as_slice()));
}

#[test]
fn sentinel_group_with_a_data_password() {
    check_passwords(Some("data-pw"), None);
}

#[test]
fn sentinel_group_with_a_sentinel_password() {
    check_passwords(None, Some("sentinel-pw"));
}

#[test]
fn sentinel_group_with_different_data_and_sentinel_passwords() {
    check_passwords(Some("data-pw"), Some("sentinel-pw"));
}
