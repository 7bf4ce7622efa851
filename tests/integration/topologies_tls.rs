//! The production topologies over TLS: `rediss+cluster://` (every cluster
//! node on TLS only, the bus too) and `rediss+sentinel://` (the sentinels
//! and the data nodes on TLS only), with `--tls-ca`, `--tls-cert/--tls-key`
//! and a wrong CA. Every server is a real TLS-only process (`port 0`) started
//! by the fixtures' TLS mode (`ClusterBuilder::tls`, `SentinelBuilder::tls`)
//! with certificates from `support::Certs`.
//!
//! A server built without TLS (CI's Redis 6.2) runs none of these, and says
//! so; the default server must run them all (see `support::require`).

use std::time::{Duration, Instant};

use crate::support::{
    Certs, RedisCluster, RunOutput, SentinelGroup, TempDir, WAIT_FOR_GO, await_marker, base,
    is_token, keys, server_has_tls, tempdir, touch, wait_until,
};
use crate::topologies::{contend_until_with, extensions};

const UNAVAILABLE: i32 = 69;

/// [`WAIT_FOR_GO`], bounded at ~60 s rather than ~15 s: the failover test
/// holds through several 5 s heartbeats.
const WAIT_LONG_FOR_GO: &str =
    "i=0; while [ ! -e go ] && [ $i -lt 1200 ]; do sleep 0.05; i=$((i+1)); done";

const TLS_WARNING: &str =
    "--tls-insecure: certificates and host names of rediss:// nodes are not checked";

/// Asserts a run failed closed over TLS: exit 69, one error line that says
/// TLS (and points at --tls-ca), the command not run.
fn assert_tls_refused(what: &str, out: &RunOutput, dir: &TempDir) {
    assert_eq!(out.code, Some(UNAVAILABLE), "[{what}] want 69\n{out}");
    out.assert_one_error_line();
    assert!(
        out.stderr.contains("TLS") && out.stderr.contains("--tls-ca"),
        "[{what}] the error should say TLS and point at --tls-ca\n{out}"
    );
    assert!(!dir.has("ran"), "[{what}] the command ran\n{out}");
}

/// Each contender is some TLS handshakes of a debug build: spaced out more
/// than in the plain tests, so as not to starve the failover.
const CONTENDER_PAUSE: Duration = Duration::from_millis(250);

/// Asserts nothing answers plain (non-TLS) Redis on `port`: the fixture's
/// server there is on TLS only.
fn assert_tls_only(what: &str, port: u16) {
    let plain = redis::Client::open(format!("redis://127.0.0.1:{port}"))
        .and_then(|c| c.get_connection_with_timeout(Duration::from_secs(2)))
        .and_then(|mut con| {
            con.set_read_timeout(Some(Duration::from_secs(2)))?;
            redis::cmd("PING").query::<String>(&mut con)
        });
    assert!(
        plain.is_err(),
        "{what} on port {port} answered plain Redis: {plain:?}"
    );
}

/// For each master of `cluster`, a lock name whose slot it serves.
fn name_per_master(cluster: &RedisCluster) -> Vec<(usize, String)> {
    (0..cluster.masters())
        .map(|m| {
            let name = (0..1000)
                .map(|i| format!("tls-{i}"))
                .find(|n| cluster.master_for_slot(cluster.keyslot(keys(n).lock())) == m)
                .unwrap_or_else(|| panic!("no name in 1000 lands on master {m}"));
            (m, name)
        })
        .collect()
}

// ---------------------------------------------------------------------------
// 1. Redis Cluster
// ---------------------------------------------------------------------------

/// `rediss+cluster://` with `--tls-ca`, on a cluster whose nodes announce
/// their TLS ports (CLUSTER SLOTS) and replicate over TLS: one lock on each
/// master, with --replicas 1 (so the connections the cluster client opens to
/// the masters it learns from CLUSTER SLOTS are TLS too, with the CA, and
/// WAIT sees the TLS replica): the key holds a token on the slot's master
/// while the command runs, and only there, and is released after; a clean
/// run prints nothing. Then a wrong CA, and the system roots,
/// fail closed; `--tls-insecure` gets through with its warning.
#[test]
fn tls_cluster_runs_on_every_master_and_a_wrong_ca_fails_closed() {
    if !server_has_tls(
        "topologies_tls::tls_cluster_runs_on_every_master_and_a_wrong_ca_fails_closed",
    ) {
        return;
    }
    let certs = Certs::make();
    let cluster = RedisCluster::builder().tls(&certs).replicas(1).start();
    eprintln!(
        "TLS cluster (3 masters, 3 replicas) up in {:?}",
        cluster.startup_time()
    );
    let url = cluster.url();
    assert!(url.starts_with("rediss+cluster://127.0.0.1:"), "{url}");
    assert_tls_only("cluster node 0", cluster.node(0).port());
    // The nodes announce their TLS ports (asked over TLS): CLUSTER NODES names
    // every node by its own, CLUSTER SLOTS the masters. (7.0 leaves out of
    // CLUSTER SLOTS a replica whose replication offset is still 0.)
    let mut ours: Vec<u16> = (0..cluster.len()).map(|i| cluster.node(i).port()).collect();
    ours.sort_unstable();
    let mut in_nodes: Vec<u16> = cluster.view(0).iter().map(|l| l.port).collect();
    in_nodes.sort_unstable();
    assert_eq!(in_nodes, ours, "CLUSTER NODES should name the TLS ports");
    let slots: Vec<Vec<redis::Value>> = cluster.node(0).cmd(redis::cmd("CLUSTER").arg("SLOTS"));
    let masters: Vec<u16> = slots
        .iter()
        .map(|range| match &range[2] {
            redis::Value::Array(fields) => {
                redis::from_redis_value::<u16>(fields[1].clone()).expect("a port")
            }
            other => panic!("CLUSTER SLOTS node entry {other:?}"),
        })
        .collect();
    assert!(
        masters.iter().all(|p| cluster.master_ports().contains(p)) && masters.len() == 3,
        "CLUSTER SLOTS should name the masters by their TLS ports {:?}: {masters:?}",
        cluster.master_ports()
    );
    let ca = certs.pem("ca");
    let dir = tempdir();
    for (master, name) in name_per_master(&cluster) {
        let k = keys(&name);
        let running = base(&url, &name, &dir)
            .args(["--tls-ca", &ca, "--replicas", "1"])
            .args(["-c", &format!("touch held; {WAIT_FOR_GO}")])
            .spawn();
        await_marker(&dir, "held", &running);
        let value = cluster.node(master).get(k.lock());
        assert!(
            value.as_deref().is_some_and(is_token),
            "{name:?}: no token on master {master}, whose slot it is: {value:?}"
        );
        for m in (0..cluster.masters()).filter(|&m| m != master) {
            // KEYS on one cluster node lists that node's keys only.
            let there = cluster.node(m).keys();
            assert!(
                !there.contains(&k.lock().to_vec()),
                "{name:?}: the key is on master {m}, not its own"
            );
        }
        touch(&dir, "go");
        let out = running.wait();
        out.assert_code(0);
        assert_eq!(
            out.stderr, "",
            "{name:?}: a clean TLS run prints nothing\n{out}"
        );
        assert!(
            cluster.left_behind().is_empty(),
            "{name:?}: keys left: {:?}",
            cluster.left_behind()
        );
        for f in ["held", "go"] {
            let _ = std::fs::remove_file(dir.join(f));
        }
    }
    // A seed by host name (the certificate has DNS:localhost); the masters
    // are then reached as CLUSTER SLOTS names them, 127.0.0.1.
    let by_name = format!("rediss+cluster://localhost:{}", cluster.node(0).port());
    base(&by_name, "tls-0", &dir)
        .args(["--tls-ca", &ca, "-c", "touch by-name"])
        .expect_code(0);
    assert!(dir.has("by-name"), "the run via localhost did not run");

    let other_ca = certs.pem("other-ca");
    let cases: [(&str, &[&str]); 2] = [
        ("unrelated CA", &["--tls-ca", &other_ca]),
        ("system roots", &[]),
    ];
    for (what, extra) in cases {
        let started = Instant::now();
        let out = base(&url, "tls-0", &dir)
            .args(extra)
            .args(["-c", "touch ran"])
            .run();
        assert_tls_refused(what, &out, &dir);
        assert!(
            out.stderr.contains("rediss+cluster://"),
            "[{what}] the error should name the node\n{out}"
        );
        eprintln!(
            "[{what}] refused in {:?}: {}",
            started.elapsed(),
            out.stderr.trim_end()
        );
        assert!(cluster.left_behind().is_empty(), "[{what}] keys left");
    }

    let out = base(&url, "tls-0", &dir)
        .args(["--tls-insecure", "--tls-ca", &other_ca])
        .args(["-c", "touch ran"])
        .expect_code(0);
    assert!(dir.has("ran"), "command did not run with --tls-insecure");
    assert_eq!(
        out.stderr_lines(),
        [format!("redlock-run: {TLS_WARNING}")],
        "--tls-insecure must warn, in one line\n{out}"
    );
    assert!(cluster.left_behind().is_empty(), "keys left");
}

/// A cluster that wants client certificates (`tls-auth-clients yes`): with
/// `--tls-cert/--tls-key` from the CA the run works; without, or with a
/// certificate from another CA, it fails closed.
#[test]
fn tls_cluster_with_mutual_tls_needs_a_client_certificate() {
    if !server_has_tls("topologies_tls::tls_cluster_with_mutual_tls_needs_a_client_certificate") {
        return;
    }
    let certs = Certs::make();
    let cluster = RedisCluster::builder().mutual_tls(&certs).start();
    let url = cluster.url();
    let ca = certs.pem("ca");
    let dir = tempdir();
    base(&url, "mtls", &dir)
        .args(["--tls-ca", &ca])
        .args(["--tls-cert", &certs.pem("client")])
        .args(["--tls-key", &certs.key("client")])
        .args(["-c", "touch done"])
        .expect_code(0);
    assert!(
        dir.has("done"),
        "command did not run with a client certificate"
    );
    assert!(
        cluster.left_behind().is_empty(),
        "keys left: {:?}",
        cluster.left_behind()
    );

    let (stranger, stranger_key) = (certs.pem("stranger"), certs.key("stranger"));
    let cases: [(&str, &[&str]); 2] = [
        ("no client certificate", &[]),
        (
            "client certificate from another CA",
            &["--tls-cert", &stranger, "--tls-key", &stranger_key],
        ),
    ];
    for (what, extra) in cases {
        let out = base(&url, "mtls", &dir)
            .args(["--tls-ca", &ca])
            .args(extra)
            .args(["-c", "touch ran"])
            .run();
        eprintln!("[{what}] {}", out.stderr.trim_end());
        assert_eq!(out.code, Some(UNAVAILABLE), "[{what}] want 69\n{out}");
        out.assert_one_error_line();
        assert!(!dir.has("ran"), "[{what}] the command ran\n{out}");
        assert!(
            out.stderr.contains("rediss+cluster://") && out.stderr.contains("TLS"),
            "[{what}] the error should name the node and TLS\n{out}"
        );
        assert!(cluster.left_behind().is_empty(), "[{what}] keys left");
    }
}

// ---------------------------------------------------------------------------
// 2. Sentinel
// ---------------------------------------------------------------------------

/// `rediss+sentinel://` with `--tls-ca`: the sentinels are asked over TLS,
/// the primary they name (as 127.0.0.1, which the certificate covers) is
/// reached over TLS, the key holds a token there (and, --replicas 1, on the
/// replica) while the command runs, and is released after. A wrong CA, and
/// the system roots, fail closed.
#[test]
fn tls_sentinel_runs_on_the_primary_and_a_wrong_ca_fails_closed() {
    if !server_has_tls(
        "topologies_tls::tls_sentinel_runs_on_the_primary_and_a_wrong_ca_fails_closed",
    ) {
        return;
    }
    let certs = Certs::make();
    let group = SentinelGroup::builder().tls(&certs).replicas(1).start();
    eprintln!(
        "TLS sentinel group (primary, 1 replica, 3 sentinels) up in {:?}",
        group.startup_time()
    );
    let url = group.url();
    assert!(url.starts_with("rediss+sentinel://127.0.0.1:"), "{url}");
    assert_tls_only("sentinel 0", group.sentinel_ports()[0]);
    assert_tls_only("the primary", group.primary_port());
    let ca = certs.pem("ca");
    let dir = tempdir();
    let k = keys("job");
    let running = base(&url, "job", &dir)
        .args(["--tls-ca", &ca, "--replicas", "1"])
        .args(["-c", &format!("touch held; {WAIT_FOR_GO}")])
        .spawn();
    await_marker(&dir, "held", &running);
    let value = group.get(k.lock());
    assert!(
        value.as_deref().is_some_and(is_token),
        "no token on the primary while held: {value:?}"
    );
    assert_eq!(
        group.get_on_replicas(k.lock()),
        std::slice::from_ref(&value),
        "--replicas 1: the replica should have the lock"
    );
    touch(&dir, "go");
    let out = running.wait();
    out.assert_code(0);
    assert_eq!(out.stderr, "", "a clean TLS run prints nothing\n{out}");
    assert_eq!(group.get(k.lock()), None, "not released");
    // The sentinels by host name (the certificate has DNS:localhost); they
    // name the primary as 127.0.0.1, which it has too.
    let hosts: Vec<String> = group
        .sentinel_ports()
        .iter()
        .map(|p| format!("localhost:{p}"))
        .collect();
    let by_name = format!("rediss+sentinel://{}/mymaster", hosts.join(","));
    base(&by_name, "job", &dir)
        .args(["--tls-ca", &ca, "-c", "touch by-name"])
        .expect_code(0);
    assert!(dir.has("by-name"), "the run via localhost did not run");

    let other_ca = certs.pem("other-ca");
    let cases: [(&str, &[&str]); 2] = [
        ("unrelated CA", &["--tls-ca", &other_ca]),
        ("system roots", &[]),
    ];
    for (what, extra) in cases {
        let started = Instant::now();
        let out = base(&url, "job", &dir)
            .args(extra)
            .args(["-c", "touch ran"])
            .run();
        eprintln!(
            "[{what}] refused in {:?}: {}",
            started.elapsed(),
            out.stderr.trim_end()
        );
        assert_tls_refused(what, &out, &dir);
        assert!(
            out.stderr.contains("rediss+sentinel://"),
            "[{what}] the error should name the node\n{out}"
        );
        assert_eq!(group.get(k.lock()), None, "[{what}] a key left");
    }

    let out = base(&url, "job", &dir)
        .args(["--tls-insecure", "--tls-ca", &other_ca])
        .args(["-c", "touch ran"])
        .expect_code(0);
    assert!(dir.has("ran"), "command did not run with --tls-insecure");
    assert_eq!(
        out.stderr_lines(),
        [format!("redlock-run: {TLS_WARNING}")],
        "--tls-insecure must warn, in one line\n{out}"
    );
    assert_eq!(group.get(k.lock()), None, "not released");
}

/// SENTINEL FAILOVER while a holder with --replicas 1 holds, all over TLS:
/// the heartbeat asks the sentinels (TLS), follows the new primary (TLS),
/// contenders stay busy throughout, and the holder exits 0.
///
/// The plain test's `--ttl 6s` is too tight here. The failover must fit
/// between two heartbeats: one that falls inside it extends on the old
/// primary (still a master, and named by a sentinel that has not heard of
/// the new one yet, whose answer may come first), where WAIT finds no
/// replica left, and the lock is lost (safely: exit 76, the command
/// stopped). On TLS the fixture's own handshakes (the test binary's rustls
/// is a debug build) delay the SENTINEL FAILOVER by about 0.3 s and the
/// failover took 1.3 s to 2.9 s to be seen done (1.2 s plain) on a loaded
/// 2-core machine, where one run in five lost the lock with a heartbeat
/// every 2 s. Hence `--ttl 15s` (a heartbeat every 5 s), and
/// `--node-timeout 1500ms` (the most 15 s allows): a sentinel search is six
/// TLS handshakes, which took up to 0.6 s there. The hold then lasts some
/// 20 s, past [`WAIT_FOR_GO`]'s bound: the command waits with
/// [`WAIT_LONG_FOR_GO`].
#[test]
fn tls_sentinel_failover_is_followed_by_the_heartbeat() {
    if !server_has_tls("topologies_tls::tls_sentinel_failover_is_followed_by_the_heartbeat") {
        return;
    }
    let certs = Certs::make();
    let group = SentinelGroup::builder().tls(&certs).start();
    let url = group.url();
    let ca = certs.pem("ca");
    let tls = ["--tls-ca", ca.as_str()];
    let dir = tempdir();
    let holder = base(&url, "failover", &dir)
        .args(tls)
        .args([
            "-v",
            "--ttl",
            "15s",
            "--node-timeout",
            "1500ms",
            "--replicas",
            "1",
        ])
        .args(["-c", &format!("touch held; {WAIT_LONG_FOR_GO}")])
        .spawn();
    await_marker(&dir, "held", &holder);
    let old = group.primary_port();
    // Right after a heartbeat: the failover then has until the next one.
    assert!(
        wait_until(Duration::from_secs(30), || extensions(&holder) >= 1),
        "no extension within 30s\n{}",
        holder.stderr_so_far()
    );
    let extended = Instant::now();
    let took = group.failover();
    let promoted = Instant::now();
    let new = group.primary_port();
    assert_ne!(old, new);
    let before = extensions(&holder);
    let tries = contend_until_with(
        &url,
        "failover",
        &dir,
        (&tls, CONTENDER_PAUSE),
        &holder,
        || extensions(&holder) > before && holder.stderr_so_far().contains("is now 127.0.0.1:"),
    );
    let followed = promoted.elapsed();
    let before = extensions(&holder);
    let more = contend_until_with(
        &url,
        "failover",
        &dir,
        (&tls, CONTENDER_PAUSE),
        &holder,
        || extensions(&holder) >= before + 2,
    );
    eprintln!(
        "TLS SENTINEL FAILOVER: seen done {:?} after a heartbeat ({took:?} after it was \
         accepted); the heartbeat extended on the new primary {followed:?} after that \
         (heartbeat every 5 s); {} contenders busy",
        promoted - extended,
        tries + more
    );
    let value = group.get(keys("failover").lock());
    assert!(
        value.as_deref().is_some_and(is_token),
        "no key on the new primary: {value:?}"
    );
    touch(&dir, "go");
    let out = holder.wait();
    out.assert_code(0);
    assert!(
        out.stderr.contains(&format!("is now 127.0.0.1:{new}")),
        "{out}"
    );
    assert_eq!(group.get(keys("failover").lock()), None, "not released");
}

/// A node still connecting when a short run ends (here a TLS node behind a
/// proxy that holds each chunk 150 ms, well within its 3 s node timeout)
/// is not a failed node: no warning, and not degraded in the metrics. The
/// same node slower than its timeout is warned and counted. And many short
/// runs over healthy TLS nodes warn of none.
#[test]
fn a_tls_node_still_connecting_when_a_short_run_ends_is_not_warned() {
    let certs = Certs::make();
    let tls = certs.node_tls();
    let nodes: Vec<crate::support::RedisNode> = (0..3)
        .map(|_| {
            crate::support::RedisNode::start_with_tls(
                &[],
                None,
                Some(&tls),
                crate::support::free_port,
            )
        })
        .collect();
    let proxy = crate::support::FaultProxy::new(nodes[2].port());
    proxy.set_mode(crate::support::Mode::Delay(Duration::from_millis(150)));
    let slow = format!("rediss://127.0.0.1:{}", proxy.port());
    let urls = format!("{},{},{slow}", nodes[0].url(), nodes[1].url());
    let dir = tempdir();
    let metrics = dir.join("m.prom");
    let run = |timeout: &str, command: &str| {
        base(&urls, "short", &dir)
            .args(["--tls-ca", &certs.pem("ca"), "--node-timeout", timeout])
            .arg("--metrics-file")
            .arg(&metrics)
            .args(["-c", command])
            .expect_code(0)
    };
    let degraded = || {
        std::fs::read_to_string(&metrics)
            .expect("metrics")
            .lines()
            .find(|l| l.starts_with("redlock_run_degraded_runs_total"))
            .map(|l| l.rsplit(' ').next().unwrap_or_default().to_string())
            .unwrap_or_default()
    };
    // Its timeout far from the run's end: beside two busy loops such a run
    // took 1.6 s.
    for _ in 0..3 {
        let out = run("3s", "true");
        assert!(out.elapsed < Duration::from_millis(2700), "{out}");
        assert!(
            out.stderr.is_empty(),
            "a false warning
{out}"
        );
    }
    assert_eq!(degraded(), "0");
    // Silent past its node timeout in a longer run: a fault, said and
    // counted.
    proxy.set_mode(crate::support::Mode::Delay(Duration::from_secs(2)));
    let out = run("100ms", "sleep 0.5");
    assert!(
        out.stderr.contains(&slow) && out.stderr.contains("warning"),
        "{out}"
    );
    assert_eq!(degraded(), "1");
    // Many short commands on healthy TLS nodes: never a warning.
    let healthy: Vec<String> = nodes.iter().map(crate::support::RedisNode::url).collect();
    let healthy = healthy.join(",");
    let warned: Vec<String> = (0..60)
        .map(|_| {
            base(&healthy, "many", &dir)
                .args(["--tls-ca", &certs.pem("ca"), "--", "true"])
                .expect_code(0)
        })
        .filter(|out| !out.stderr.is_empty())
        .map(|out| out.to_string())
        .collect();
    assert!(warned.is_empty(), "{}", warned.join("\n"));
}
