//! The keys a lock leaves, as an operator meets them: printable, each
//! listed once by `redis-cli --scan`, shown by `status --keys`, and removed
//! by `forget` (one lock's and no other's, never while in use unless
//! `--force`, on a Redis Cluster too); names outside the rule refused; the
//! previous layout's fence counter carried over.
//!
//! Run with `--nocapture` to see each lock's keys before and after `forget`.

use std::collections::BTreeSet;
use std::process::Command;
use std::time::Duration;

use crate::support::{
    Cluster, RedisCluster, RedisNode, START, SentinelGroup, TempDir, Test, WAIT_FOR_GO,
    await_marker, base, free_port, keys, lock_key, python, redis_cli_binary, tempdir, touch,
    wait_until,
};

const IN_USE: i32 = 1;
const NOTHING: i32 = 3;
const USAGE: i32 = 64;
const UNAVAILABLE: i32 = 69;

fn admin(sub: &str, urls: &str, name: &str, extra: &[&str]) -> crate::support::RunOutput {
    Test::new()
        .args([sub, "-r", urls, "-k", name])
        .args(extra)
        .run()
}

fn text(key: &[u8]) -> String {
    key.escape_ascii().to_string()
}

/// Whether `key` belongs to lock `name`: its main key, a helper key, or a
/// key of the previous layout.
fn belongs(key: &[u8], name: &str) -> bool {
    let main = lock_key(name);
    key == main.as_slice()
        || key.starts_with(format!("{{lock:{name}}}:").as_bytes())
        || key.starts_with(&[main.as_slice(), b"\0"].concat())
}

/// The keys on `node` as `redis-cli --scan` prints them into a pipe, one a
/// line.
fn scan_lines(node: &RedisNode) -> Vec<String> {
    let out = Command::new(redis_cli_binary())
        .args(["-h", "127.0.0.1", "-p", &node.port().to_string(), "--scan"])
        .output()
        .expect("redis-cli");
    assert!(out.status.success(), "redis-cli --scan: {out:?}");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect()
}

/// `status --keys --json`: the keys listed for each node, in node order.
fn status_keys_json(urls: &str, name: &str) -> Vec<Vec<String>> {
    let out = admin("status", urls, name, &["--keys", "--json"]);
    let listed = python(
        "import json,sys\n\
         d=json.load(sys.stdin)\n\
         for n in d['keys']:\n\
         \x20   print('\\t'.join(k['key'] for k in n['keys']))",
        &out.stdout,
    );
    listed
        .lines()
        .map(|l| {
            l.split('\t')
                .filter(|k| !k.is_empty())
                .map(String::from)
                .collect()
        })
        .collect()
}

/// `status --keys` (text): the first word of each line under "keys on URL:",
/// per node, in node order.
fn status_keys_text(urls: &str, name: &str) -> Vec<Vec<String>> {
    let out = admin("status", urls, name, &["--keys"]);
    let mut nodes: Vec<Vec<String>> = Vec::new();
    for line in out.stdout.lines() {
        if line.starts_with("keys on ") {
            nodes.push(Vec::new());
        } else if let (Some(node), Some(key)) = (nodes.last_mut(), line.strip_prefix("  ")) {
            node.push(
                key.split_whitespace()
                    .next()
                    .unwrap_or_default()
                    .to_string(),
            );
        }
    }
    nodes
}

/// Every key on every node is printable and is lock `name`'s main key or
/// one of its helper keys; `redis-cli --scan` prints each once; `status
/// --keys` (text and JSON) lists exactly the keys each node has. `when`
/// names the moment for the messages.
fn check_keys(cluster: &Cluster, name: &str, when: &str) {
    let urls = cluster.urls();
    let json = status_keys_json(&urls, name);
    let listed = status_keys_text(&urls, name);
    assert_eq!(json.len(), cluster.len(), "{when}: {json:?}");
    assert_eq!(listed.len(), cluster.len(), "{when}: {listed:?}");
    for (i, node) in cluster.iter().enumerate() {
        let all = node.all_keys();
        let mut want = Vec::new();
        for key in &all {
            assert!(
                key.iter().all(|b| (0x20..=0x7e).contains(b)),
                "{when}: node {i} has {}",
                text(key)
            );
            let key = String::from_utf8(key.clone()).expect("ASCII");
            assert!(
                key == format!("lock:{name}") || key.starts_with(&format!("{{lock:{name}}}:")),
                "{when}: node {i} has {key}"
            );
            want.push(key);
        }
        let lines = scan_lines(node);
        let once: BTreeSet<&String> = lines.iter().collect();
        assert_eq!(
            once.len(),
            lines.len(),
            "{when}: a key listed twice {lines:?}"
        );
        assert_eq!(
            once.into_iter().cloned().collect::<Vec<_>>(),
            want,
            "{when}: node {i}: redis-cli --scan"
        );
        let sorted = |v: &Vec<String>| v.iter().cloned().collect::<BTreeSet<_>>();
        assert_eq!(sorted(&json[i]), sorted(&want), "{when}: node {i}: --json");
        assert_eq!(sorted(&listed[i]), sorted(&want), "{when}: node {i}: text");
        assert_eq!(listed[i].len(), want.len(), "{when}: node {i}: {listed:?}");
    }
}

/// Prints each node's keys, bytes outside printable ASCII escaped (for the
/// record; see `--nocapture`).
fn print_keys(cluster: &Cluster, when: &str) {
    eprintln!("--- {when} ---");
    for (i, node) in cluster.iter().enumerate() {
        for key in node.all_keys() {
            eprintln!("node {i}: {}", text(&key));
        }
    }
}

/// Waits until the --wait queue of `name` has `n` waiters on a quorum.
fn await_queue(cluster: &Cluster, name: &str, n: i64, waiter: &crate::support::Running) {
    let queue = keys(name).queue();
    assert!(
        wait_until(START, || cluster
            .iter()
            .filter(|node| node.cmd::<i64>(redis::cmd("ZCARD").arg(&queue)) >= n)
            .count()
            >= 2),
        "the waiter did not queue\n{}",
        waiter.stderr_so_far()
    );
}

/// Runs of `name` with --fence, --once-per, --limit, --wait (a waiter
/// queued behind a holder) and --hold; `during` sees the nodes while a
/// --limit holder holds and while a waiter is queued. Leaves the lock held
/// for `hold`.
fn every_kind_of_run(
    cluster: &Cluster,
    name: &str,
    dir: &TempDir,
    hold: &str,
    during: &dyn Fn(&str),
) {
    let urls = cluster.urls();
    let run = |args: &[&str]| {
        base(&urls, name, dir)
            .args(args)
            .args(["-c", "true"])
            .expect_code(0)
    };
    run(&["--fence"]);
    run(&["--once-per", "1h"]);
    for f in ["held", "go"] {
        let _ = std::fs::remove_file(dir.join(f));
    }
    let slot = base(&urls, name, dir)
        .args(["--limit", "2", "-c", &format!("touch held; {WAIT_FOR_GO}")])
        .spawn();
    await_marker(dir, "held", &slot);
    during("while a --limit holder holds");
    touch(dir, "go");
    slot.wait().assert_code(0);
    for f in ["held", "go"] {
        let _ = std::fs::remove_file(dir.join(f));
    }
    let holder = base(&urls, name, dir)
        .args(["-c", &format!("touch held; {WAIT_FOR_GO}")])
        .spawn();
    await_marker(dir, "held", &holder);
    let waiter = base(&urls, name, dir)
        .args(["--wait", "30s", "-c", "true"])
        .spawn();
    await_queue(cluster, name, 1, &waiter);
    during("while a waiter is queued");
    touch(dir, "go");
    holder.wait().assert_code(0);
    waiter.wait().assert_code(0);
    run(&["--hold", hold]);
}

#[test]
fn keys_are_printable_listed_once_and_shown_by_status() {
    let cluster = Cluster::new(3);
    let dir = tempdir();
    let name = "deploy-prod";
    every_kind_of_run(&cluster, name, &dir, "30s", &|when| {
        check_keys(&cluster, name, when);
        print_keys(&cluster, when);
    });
    check_keys(&cluster, name, "after the runs");
    print_keys(
        &cluster,
        "deploy-prod after --fence, --once-per, --limit, --wait, --hold",
    );
    // Each kind of key is there on a quorum: a node that answered late under
    // load may have missed a run (its acquire withdrawn behind the verdict),
    // as degraded mode allows.
    let k = keys(name);
    // The --once-per marker of the window the run fell in: the hour may
    // have turned since, so it is looked for, not computed.
    let once = cluster
        .iter()
        .flat_map(|node| node.all_keys())
        .find(|key| key.starts_with(&k.once(0)[..k.once(0).len() - 1]))
        .unwrap_or_else(|| panic!("no --once-per marker on any node"));
    for key in [
        k.lock().to_vec(),
        k.holder(None),
        k.fence(),
        k.history(),
        once,
    ] {
        let on = cluster.iter().filter(|node| node.exists(&key)).count();
        assert!(on >= 2, "{} on {on} of 3 nodes", text(&key));
    }
    // The shell pipeline the README gives removes every helper key of a
    // lock whose name has spaces and quotes, and leaves its key and every
    // other lock's.
    let node = &cluster[0];
    let name = "nightly \"db\" dump";
    let k = keys(name);
    base(&node.url(), name, &dir)
        .args(["--fence", "--hold", "30s", "-c", "true"])
        .expect_code(0);
    let others: Vec<Vec<u8>> = node
        .all_keys()
        .into_iter()
        .filter(|key| !belongs(key, name))
        .collect();
    // deploy-prod's keys, as many as this node took in time (see above).
    assert!(
        !others.is_empty() && others.iter().all(|key| belongs(key, "deploy-prod")),
        "{others:?}"
    );
    let readme = include_str!("../../README.md");
    let line = readme
        .lines()
        .find(|l| l.contains("redis-cli del"))
        .expect("the README's delete pipeline");
    let cli = format!("'{}' -p {}", redis_cli_binary().display(), node.port());
    let pipeline = line
        .split(" # ")
        .next()
        .unwrap_or_default()
        .replace("redis-cli", &cli)
        .replace("lock:report", &format!("lock:{name}"));
    let out = Command::new("sh")
        .args(["-c", &pipeline])
        .output()
        .expect("sh");
    assert!(out.status.success(), "{pipeline}: {out:?}");
    let mut want = [others, vec![k.lock().to_vec()]].concat();
    want.sort();
    assert_eq!(node.all_keys(), want, "{pipeline}: {out:?}");
}

fn now_window(window: u64) -> u64 {
    let now = (crate::support::realtime_ns() / 1_000_000_000) as u64;
    now / window * window
}

/// Keys of `name` on each node, sorted.
fn keys_of(cluster: &Cluster, name: &str) -> Vec<Vec<Vec<u8>>> {
    cluster
        .iter()
        .map(|n| {
            n.all_keys()
                .into_iter()
                .filter(|k| belongs(k, name))
                .collect()
        })
        .collect()
}

#[test]
fn forget_removes_one_lock_and_nothing_else() {
    let cluster = Cluster::new(3);
    let urls = cluster.urls();
    let dir = tempdir();
    every_kind_of_run(&cluster, "deploy-prod", &dir, "1s", &|_| {});
    // Its neighbours: a name it starts with, a name with glob characters
    // that would match both, a foreign key.
    for name in ["deploy", "deploy*"] {
        base(&urls, name, &dir)
            .args(["--fence", "--once-per", "1h", "-c", "true"])
            .expect_code(0);
    }
    for (i, node) in cluster.iter().enumerate() {
        node.set("decoy", "keep-me", 60_000);
        // Keys of the previous layout, as its versions left them.
        for name in ["deploy-prod", "deploy"] {
            let k = keys(name);
            node.set(k.legacy_fence(), (40 + i).to_string(), 60_000);
            node.set([k.lock(), b"\0history\0\x01\x02"].concat(), "[]", 60_000);
        }
    }
    let k = keys("deploy-prod");
    assert!(
        wait_until(Duration::from_secs(5), || cluster
            .iter()
            .all(|n| !n.exists(k.lock()))),
        "--hold 1s did not end"
    );
    print_keys(&cluster, "before forget");
    let before = keys_of(&cluster, "deploy-prod");
    // The legacy keys were set on every node; the fence, the history and a
    // window's mark each on a quorum at least: a run decides on a quorum,
    // and beside two busy loops one node once had no fence key.
    for (i, node_keys) in before.iter().enumerate() {
        assert!(
            node_keys.contains(&k.legacy_fence()) && node_keys.len() >= 3,
            "node {i}: {node_keys:?}"
        );
    }
    // `{lock:deploy-prod}:once:` followed by the window's start.
    let once = k.once(0);
    let once = &once[..once.len() - 1];
    let on_a_quorum =
        |has: &dyn Fn(&Vec<Vec<u8>>) -> bool| before.iter().filter(|ks| has(ks)).count() >= 2;
    assert!(
        on_a_quorum(&|ks| ks.contains(&k.fence())),
        "fence: {before:?}"
    );
    assert!(
        on_a_quorum(&|ks| ks.contains(&k.history())),
        "history: {before:?}"
    );
    assert!(
        on_a_quorum(&|ks| ks.iter().any(|x| x.starts_with(once))),
        "a window's mark: {before:?}"
    );
    let others: Vec<Vec<Vec<u8>>> = cluster
        .iter()
        .map(|n| {
            n.all_keys()
                .into_iter()
                .filter(|k| !belongs(k, "deploy-prod"))
                .collect()
        })
        .collect();

    // The glob name first: only its own keys.
    let star = admin("forget", &urls, "deploy*", &[]);
    star.assert_code(0);
    assert!(keys_of(&cluster, "deploy*").iter().all(Vec::is_empty));
    assert_eq!(keys_of(&cluster, "deploy-prod"), before, "{star}");
    assert!(keys_of(&cluster, "deploy").iter().all(|k| k.len() >= 4));

    let out = admin("forget", &urls, "deploy-prod", &[]);
    out.assert_code(0);
    print_keys(&cluster, "after forget");
    for (i, (node, had)) in cluster.iter().zip(&before).enumerate() {
        assert!(
            out.stdout
                .contains(&format!("  {}: removed {} keys\n", node.url(), had.len())),
            "node {i}\n{out}"
        );
        let left = node.all_keys();
        assert!(
            left.iter().all(|k| !belongs(k, "deploy-prod")),
            "node {i}: {left:?}"
        );
        let mut kept = others[i].clone();
        kept.retain(|k| !belongs(k, "deploy*"));
        assert_eq!(left, kept, "node {i}: a neighbour's key went");
        assert_eq!(node.get("decoy").as_deref(), Some(&b"keep-me"[..]));
    }
    let again = admin("forget", &urls, "deploy-prod", &[]);
    again.assert_code(NOTHING).assert_one_error_line();
    assert_eq!(again.stdout.matches(": nothing to remove\n").count(), 3);
    // The shorter name's turn: deploy-prod's keys are gone already, and
    // the decoy stays.
    admin("forget", &urls, "deploy", &[]).assert_code(0);
    for node in cluster.iter() {
        assert_eq!(node.all_keys(), vec![b"decoy".to_vec()]);
    }
}

#[test]
fn forget_leaves_a_lock_in_use_alone_unless_forced() {
    let cluster = Cluster::new(3);
    let urls = cluster.urls();
    let dir = tempdir();
    let name = "busy";
    let k = keys(name);
    base(&urls, name, &dir)
        .args(["--fence", "-c", "true"])
        .expect_code(0);
    let holder = base(&urls, name, &dir)
        .args([
            "-t",
            "3s",
            "-c",
            &format!("touch held; {WAIT_FOR_GO}; touch done"),
        ])
        .spawn();
    await_marker(&dir, "held", &holder);
    let token = cluster.await_value(0, k.lock());
    cluster.await_on_all(k.lock());
    let before = keys_of(&cluster, name);
    let out = admin("forget", &urls, name, &[]);
    out.assert_code(IN_USE).assert_one_error_line();
    assert!(
        out.stderr.contains(&format!("pid {}", holder.pid())) && out.stderr.contains("--force"),
        "{out}"
    );
    assert_eq!(
        out.stdout.matches(": held: left alone\n").count(),
        3,
        "{out}"
    );
    assert_eq!(keys_of(&cluster, name), before, "keys went\n{out}");
    assert_eq!(cluster.values(k.lock()), vec![Some(token.clone()); 3]);
    std::thread::sleep(Duration::from_millis(1500));
    assert!(!dir.has("done"), "the command stopped");
    assert_eq!(cluster.values(k.lock()), vec![Some(token.clone()); 3]);

    // A waiter queued too: both said.
    let mut waiter = base(&urls, name, &dir)
        .args(["--wait", "30s", "-c", "touch waited"])
        .spawn();
    await_queue(&cluster, name, 1, &waiter);
    let out = admin("forget", &urls, name, &[]);
    out.assert_code(IN_USE).assert_one_error_line();
    assert!(out.stderr.contains("and 1 waiting in its queue"), "{out}");
    waiter.signal(libc::SIGTERM);
    assert!(
        waiter.wait_timeout(START).is_some(),
        "the waiter did not end"
    );
    assert!(!dir.has("waited"));

    // --force: every key, the lock's too, after saying who held it; the
    // holder finds its lock gone at its next heartbeat and stops (76).
    let out = admin("forget", &urls, name, &["--force"]);
    out.assert_code(0);
    assert!(
        out.stdout
            .contains(&format!("was in use: lock '{name}' is in use, held by"))
            && out.stdout.contains(&format!("pid {}", holder.pid())),
        "{out}"
    );
    assert!(
        keys_of(&cluster, name).iter().all(|k| k.is_empty()),
        "{:?}",
        keys_of(&cluster, name)
    );
    let out = holder.wait();
    out.assert_code(76);
    assert!(!dir.has("done"));
}

/// A copy of the lock on one node (a holder whose release missed it, or a
/// holder of another client) keeps every node's keys: exit 1 means nothing
/// went anywhere.
#[test]
fn a_lock_in_use_on_one_node_is_left_alone_on_all() {
    let cluster = Cluster::new(3);
    let urls = cluster.urls();
    let dir = tempdir();
    let name = "stale";
    base(&urls, name, &dir)
        .args(["--fence", "--once-per", "1h", "-c", "true"])
        .expect_code(0);
    cluster[2].set(lock_key(name), "another-clients-token", 60_000);
    let before = keys_of(&cluster, name);
    let out = admin("forget", &urls, name, &[]);
    out.assert_code(IN_USE).assert_one_error_line();
    assert_eq!(
        out.stdout
            .matches(": left alone: in use on another node\n")
            .count(),
        2,
        "{out}"
    );
    assert!(out.stderr.contains("token another-…"), "{out}");
    assert_eq!(keys_of(&cluster, name), before, "{out}");
}

#[test]
fn forget_counts_live_waiters_and_held_slots_as_in_use() {
    let cluster = Cluster::new(3);
    let urls = cluster.urls();
    let dir = tempdir();
    let name = "queued";
    let k = keys(name);
    // A waiter of another host, queued while the lock is between holders:
    // its place lapses a minute from now.
    let now_ms = |node: &RedisNode| -> i64 {
        let (s, us): (i64, i64) = node.cmd(&redis::cmd("TIME"));
        s * 1000 + us / 1000
    };
    let place = |lapse: i64| {
        for node in cluster.iter() {
            let now = now_ms(node);
            let _: i64 = node.cmd(redis::cmd("ZADD").arg(k.queue()).arg(now).arg("w1"));
            let _: i64 = node.cmd(
                redis::cmd("HSET")
                    .arg(k.waiters())
                    .arg("w1")
                    .arg(now + lapse),
            );
        }
    };
    place(60_000);
    let out = admin("forget", &urls, name, &[]);
    out.assert_code(IN_USE).assert_one_error_line();
    assert!(
        out.stderr
            .contains("lock 'queued' is in use, 1 waiting in its queue: left alone"),
        "{out}"
    );
    assert_eq!(out.stdout.matches("waiters queued: left alone").count(), 3);
    assert!(cluster.iter().all(|n| n.exists(k.queue())));
    // A place that lapsed is no waiter.
    place(-1000);
    let out = admin("forget", &urls, name, &[]);
    out.assert_code(0);
    assert!(keys_of(&cluster, name).iter().all(|k| k.is_empty()));

    // A --limit holder: its slot is the lock in use.
    let slot = base(&urls, name, &dir)
        .args(["--limit", "3", "-c", &format!("touch held; {WAIT_FOR_GO}")])
        .spawn();
    await_marker(&dir, "held", &slot);
    let before = keys_of(&cluster, name);
    let out = admin("forget", &urls, name, &[]);
    out.assert_code(IN_USE).assert_one_error_line();
    assert!(
        out.stderr.contains("a --limit slot held by")
            && out.stderr.contains(&format!("pid {}", slot.pid())),
        "{out}"
    );
    assert_eq!(keys_of(&cluster, name), before);
    touch(&dir, "go");
    slot.wait().assert_code(0);
    admin("forget", &urls, name, &[]).assert_code(0);
}

#[test]
fn forget_and_status_keys_on_a_redis_cluster() {
    let cluster = RedisCluster::new(3, 0);
    let url = cluster.url();
    let dir = tempdir();
    // A name served by a master other than the first seed's: a SCAN sent
    // anywhere but to the slot's master finds nothing.
    let name = ["job-a", "job-b", "job-c", "job-d", "job-e", "job-f"]
        .into_iter()
        .find(|n| cluster.master_for_slot(cluster.keyslot(keys(n).lock())) != 0)
        .expect("a name on another master");
    for lock in [name, "other"] {
        base(&url, lock, &dir)
            .args(["--fence", "--once-per", "1h", "-c", "true"])
            .expect_code(0);
    }
    let k = keys(name);
    let mine: Vec<Vec<u8>> = cluster
        .keys()
        .into_iter()
        .filter(|key| belongs(key, name))
        .collect();
    let mut want = vec![k.fence(), k.history(), k.once(now_window(3600))];
    want.sort();
    assert_eq!(mine, want);
    let out = admin("status", &url, name, &["--keys"]);
    for key in &want {
        assert!(out.stdout.contains(&format!("  {}", text(key))), "{out}");
    }
    let out = admin("forget", &url, name, &[]);
    out.assert_code(0);
    assert!(out.stdout.contains(": removed 3 keys\n"), "{out}");
    let left = cluster.keys();
    assert!(left.iter().all(|key| !belongs(key, name)), "{left:?}");
    assert!(left.iter().filter(|key| belongs(key, "other")).count() >= 3);
    admin("forget", &url, name, &[]).assert_code(NOTHING);
}

/// Through a Sentinel group: the keys on its primary, listed and removed.
#[test]
fn forget_and_status_keys_through_a_sentinel_group() {
    let group = SentinelGroup::builder().replicas(1).start();
    let url = group.url();
    let dir = tempdir();
    base(&url, "job", &dir)
        .args(["--fence", "--once-per", "1h", "-c", "true"])
        .expect_code(0);
    let k = keys("job");
    let primary = group.data_node(group.primary_index());
    let mut want = vec![k.fence(), k.history(), k.once(now_window(3600))];
    want.sort();
    assert_eq!(primary.all_keys(), want);
    assert_eq!(
        status_keys_json(&url, "job"),
        vec![want.iter().map(|key| text(key)).collect::<Vec<_>>()]
    );
    let out = admin("forget", &url, "job", &[]);
    out.assert_code(0);
    assert!(out.stdout.contains(": removed 3 keys\n"), "{out}");
    assert!(primary.all_keys().is_empty());
}

/// The README's least-privilege ACL line, with the `+scan +type` it says
/// `forget` and `status --keys` need, is enough for them.
#[test]
fn the_readmes_acl_user_can_list_and_forget() {
    let node = RedisNode::start();
    let dir = tempdir();
    let mut cmd = redis::cmd("ACL");
    cmd.arg("SETUSER").arg("locker").arg("on").arg(">locker-pw");
    for rule in crate::support::readme_acl_rules() {
        cmd.arg(rule);
    }
    cmd.arg("+scan").arg("+type");
    let reply: String = node.cmd(&cmd);
    assert_eq!(reply, "OK");
    let url = format!("redis://locker:locker-pw@127.0.0.1:{}", node.port());
    base(&url, "acl", &dir)
        .args(["--fence", "--once-per", "1h", "-c", "true"])
        .expect_code(0);
    let listed = status_keys_json(&url, "acl");
    assert_eq!(listed[0].len(), 3, "{listed:?}");
    admin("forget", &url, "acl", &[]).assert_code(0);
    assert!(node.all_keys().is_empty());
}

#[test]
fn forget_without_a_quorum_is_unavailable() {
    let node = RedisNode::start();
    let dir = tempdir();
    base(&node.url(), "lonely", &dir)
        .args(["--fence", "-c", "true"])
        .expect_code(0);
    let urls = format!(
        "{},redis://127.0.0.1:{},redis://127.0.0.1:{}",
        node.url(),
        free_port(),
        free_port()
    );
    let out = admin("forget", &urls, "lonely", &[]);
    out.assert_code(UNAVAILABLE).assert_one_error_line();
    assert!(out.stderr.contains("fewer than a quorum"), "{out}");
    assert_eq!(out.stdout.matches(": failed: ").count(), 2, "{out}");
    let out = admin("status", &urls, "lonely", &["--keys"]);
    assert_eq!(out.stdout.matches(": failed: ").count(), 2, "{out}");
}

#[test]
fn names_outside_the_rule_are_refused_by_every_subcommand() {
    let node = RedisNode::start();
    let dir = tempdir();
    for (flags, why) in [
        (&["-k", "a{b}"][..], "'{' and '}' are reserved"),
        (&["-k", "x", "--prefix", "{app}:"], "--prefix '{app}:'"),
        (&["-k", "caf\u{e9}"], "must be printable ASCII"),
    ] {
        for sub in [
            &["status"][..],
            &["unlock", "--force"],
            &["history"],
            &["forget"],
        ] {
            let out = Test::new()
                .current_dir(dir.path())
                .args(sub)
                .args(["-r", &node.url()])
                .args(flags)
                .run();
            out.assert_code(USAGE).assert_one_error_line();
            assert!(out.stderr.contains(why), "{sub:?} {flags:?}\n{out}");
        }
    }
    assert!(node.all_keys().is_empty());
}

/// A counter kept by the previous layout: the next token is one above the
/// largest a quorum has, and only the new counter is written.
#[test]
fn fence_counter_carries_over_from_the_previous_layout() {
    let cluster = Cluster::new(3);
    let dir = tempdir();
    let k = keys("fenced");
    cluster[0].set(k.legacy_fence(), "41", 600_000);
    cluster[1].set(k.legacy_fence(), "7", 600_000);
    let token = || {
        base(&cluster.urls(), "fenced", &dir)
            .args(["--fence", "-c", "echo $REDLOCK_FENCING_TOKEN > token"])
            .expect_code(0);
        std::fs::read_to_string(dir.join("token")).expect("token")
    };
    assert_eq!(token().trim(), "42");
    assert_eq!(token().trim(), "43");
    assert_eq!(
        cluster[0].get(k.legacy_fence()).as_deref(),
        Some(&b"41"[..])
    );
    assert_eq!(cluster[1].get(k.legacy_fence()).as_deref(), Some(&b"7"[..]));
    // Written where the lock was granted: a quorum at least (a node that
    // answered after the verdict, on a busy machine, keeps the 42 it was
    // given by the first run, or none if it missed that one too).
    let counters: Vec<Option<Vec<u8>>> = cluster.iter().map(|n| n.get(k.fence())).collect();
    let at_43 = counters
        .iter()
        .filter(|c| c.as_deref() == Some(&b"43"[..]))
        .count();
    assert!(at_43 >= 2, "{counters:?}");
    assert!(
        counters
            .iter()
            .all(|c| matches!(c.as_deref(), None | Some(b"42" | b"43"))),
        "{counters:?}"
    );
}
