//! `redlock-run check` against real servers: each precondition of the
//! README's "Before you deploy" that a node breaks is caught, and nodes that
//! keep them all pass.

use crate::support::*;

/// Servers with the lock's persistence: AOF, fsync on every write, no
/// eviction (the default policy).
const PERSISTENT: &[&str] = &["--appendonly", "yes", "--appendfsync", "always"];

fn check(urls: &str) -> Test {
    Test::new().args(["check", "-r", urls])
}

/// The lines of the text answer under node `url`'s heading.
fn section<'a>(out: &'a RunOutput, url: &str) -> Vec<&'a str> {
    out.stdout
        .lines()
        .skip_while(|l| *l != url)
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .collect()
}

/// No key left on `node` by the probe.
fn clean(node: &RedisNode) {
    let keys: Vec<String> = node
        .keys()
        .iter()
        .map(|k| String::from_utf8_lossy(k).into_owned())
        .collect();
    assert!(keys.is_empty(), "the probe left {keys:?} on {}", node.url());
}

#[test]
fn persistent_independent_masters_are_fit() {
    let nodes: Vec<RedisNode> = (0..3).map(|_| RedisNode::start_with(PERSISTENT)).collect();
    let urls: Vec<String> = nodes.iter().map(RedisNode::url).collect();
    let out = check(&urls.join(",")).expect_code(0);
    for url in &urls {
        let lines = section(&out, url);
        for want in [
            "a master",
            "appendonly yes",
            "appendfsync always",
            "maxmemory-policy noeviction",
            "the probe took, extended and released a lock",
        ] {
            assert!(
                lines
                    .iter()
                    .any(|l| l.starts_with("  ok") && l.contains(want)),
                "{url}: no ok line with {want:?}\n{out}"
            );
        }
    }
    assert!(
        out.stdout
            .trim_end()
            .ends_with("fit: 0 unfit, 0 warnings, 0 cannot tell"),
        "{out}"
    );
    nodes.iter().for_each(clean);
}

#[test]
fn nodes_without_persistence_and_evicting_keys_warn() {
    let nodes: Vec<RedisNode> = (0..3)
        .map(|_| RedisNode::start_with(&["--maxmemory-policy", "allkeys-lru"]))
        .collect();
    let urls: Vec<String> = nodes.iter().map(RedisNode::url).collect();
    let out = check(&urls.join(",")).expect_code(1);
    for url in &urls {
        let lines = section(&out, url);
        assert!(
            lines
                .iter()
                .any(|l| l.starts_with("  warn") && l.contains("appendonly no")),
            "{url}\n{out}"
        );
        assert!(
            lines.iter().any(|l| l.starts_with("  warn")
                && l.contains("maxmemory-policy allkeys-lru")
                && l.contains("set maxmemory-policy noeviction")),
            "{url}\n{out}"
        );
    }
    assert!(!out.stdout.contains("  unfit"), "{out}");
}

#[test]
fn a_replica_among_three_nodes_is_unfit() {
    let a = RedisNode::start_with(PERSISTENT);
    let port = a.port().to_string();
    let mut args = PERSISTENT.to_vec();
    args.extend(["--replicaof", "127.0.0.1", &port]);
    let replica = RedisNode::start_with(&args);
    let c = RedisNode::start_with(PERSISTENT);
    let urls = format!("{},{},{}", a.url(), replica.url(), c.url());
    let out = check(&urls).expect_code(69);
    let lines = section(&out, &replica.url());
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("  unfit") && l.contains("a replica")),
        "the replica is not named\n{out}"
    );
    assert!(
        !section(&out, &c.url())
            .iter()
            .any(|l| l.starts_with("  unfit")),
        "{out}"
    );
}

#[test]
fn an_acl_user_denied_eval_is_unfit_naming_the_command() {
    let nodes: Vec<RedisNode> = (0..3).map(|_| RedisNode::start_with(PERSISTENT)).collect();
    let reply: String = nodes[2].cmd(
        redis::cmd("ACL")
            .arg("SETUSER")
            .arg("locker")
            .arg("on")
            .arg(">locker-pw")
            .arg("~*")
            .arg("&*")
            .arg("+@all")
            .arg("-eval"),
    );
    assert_eq!(reply, "OK");
    let denied = format!("redis://locker:locker-pw@127.0.0.1:{}", nodes[2].port());
    let urls = format!("{},{},{denied}", nodes[0].url(), nodes[1].url());
    let out = check(&urls).expect_code(69);
    let shown = "redis://locker:***@127.0.0.1:".to_string() + &nodes[2].port().to_string();
    let lines = section(&out, &shown);
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("  unfit") && l.contains("the ACL refuses EVAL")),
        "{out}"
    );
    assert!(!out.stdout.contains("locker-pw"), "{out}");
    nodes.iter().for_each(clean);
}

#[test]
fn json_parses_and_says_the_verdict() {
    let nodes: Vec<RedisNode> = (0..3).map(|_| RedisNode::start()).collect();
    let urls: Vec<String> = nodes.iter().map(RedisNode::url).collect();
    let out = check(&urls.join(",")).arg("--json").expect_code(1);
    let said = python(
        "import json,sys\nd=json.load(sys.stdin)\nf=[x for n in d['nodes'] for x in \
         n['findings']]\nprint(d['verdict'], len(d['nodes']), sorted({x['level'] for x in f}), \
         any(x['check']=='appendonly' and x['level']=='warn' for x in f))",
        &out.stdout,
    );
    assert_eq!(said.trim(), "warnings 3 ['ok', 'warn'] True");
}

#[test]
fn a_stopped_node_leaves_a_quorum_and_is_unfit() {
    let nodes: Vec<RedisNode> = (0..2).map(|_| RedisNode::start_with(PERSISTENT)).collect();
    let down = format!("redis://127.0.0.1:{}", free_port());
    let urls = format!("{},{},{down}", nodes[0].url(), nodes[1].url());
    let out = check(&urls)
        .args(["--node-timeout", "200ms"])
        .expect_code(69);
    assert!(
        section(&out, &down)
            .iter()
            .any(|l| l.starts_with("  unfit") && l.contains("connection refused")),
        "{out}"
    );
    assert!(
        out.stdout.contains("2 of 3 nodes answered; a lock needs 2"),
        "{out}"
    );
}

#[test]
fn a_cluster_passes() {
    let cluster = RedisCluster::new(3, 0);
    for i in 0..cluster.len() {
        let _: String = cluster
            .node(i)
            .cmd(redis::cmd("CONFIG").arg("SET").arg("appendonly").arg("yes"));
        let _: String = cluster.node(i).cmd(
            redis::cmd("CONFIG")
                .arg("SET")
                .arg("appendfsync")
                .arg("always"),
        );
    }
    let out = check(&cluster.url()).args(["-k", "job"]).expect_code(0);
    let slot = cluster.keyslot(&lock_key("job"));
    assert!(
        out.stdout.contains(&format!(
            "cluster_state:ok; the lock's hash slot {slot} is served by"
        )),
        "{out}"
    );
    assert!(cluster.keys().is_empty(), "the probe left keys");
}

#[test]
fn a_sentinel_group_passes() {
    let group = SentinelGroup::builder().start();
    for i in 0..group.data_ports().len() {
        let _: String = group
            .data_node(i)
            .cmd(redis::cmd("CONFIG").arg("SET").arg("appendonly").arg("yes"));
        let _: String = group.data_node(i).cmd(
            redis::cmd("CONFIG")
                .arg("SET")
                .arg("appendfsync")
                .arg("always"),
        );
    }
    let out = check(&group.url()).expect_code(0);
    assert!(
        out.stdout.contains(&format!(
            "3 of 3 sentinels answered; they name 127.0.0.1:{} primary",
            group.primary_port()
        )),
        "{out}"
    );
}

#[test]
fn check_uses_the_configuration_file() {
    let nodes: Vec<RedisNode> = (0..3).map(|_| RedisNode::start_with(PERSISTENT)).collect();
    let dir = tempdir();
    let list: Vec<String> = nodes.iter().map(|n| format!("\"{}\"", n.url())).collect();
    let config = dir.join("config.toml");
    std::fs::write(
        &config,
        format!("redis = [{}]\nfence = true\n", list.join(", ")),
    )
    .expect("write");
    let out = Test::new()
        .env("REDLOCK_CONFIG", &config)
        .arg("check")
        .expect_code(0);
    assert!(
        out.stdout
            .contains("the probe took, extended and released a lock (--fence)"),
        "{out}"
    );
    nodes.iter().for_each(clean);
}

/// Valkey answers a Redis version for clients that go by it (7.2.4):
/// `check` and `-v` name it by its own.
#[test]
fn check_and_verbose_runs_name_valkey_by_its_own_version() {
    let node = RedisNode::start_valkey(&[]);
    let out = check(&node.url()).run();
    let lines = section(&out, &node.url());
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("  ok") && l.contains("Valkey 9.1.")),
        "{out}"
    );
    assert!(!out.stdout.contains("Redis 7.2"), "{out}");
    let dir = tempdir();
    let run = base(&node.url(), "job", &dir)
        .args(["-v", "--", "true"])
        .expect_code(0);
    assert!(
        run.stderr.contains(&format!("{}: Valkey 9.1.", node.url())),
        "{run}"
    );
}

/// The README's ACL line is the one `check` passes with (exit 0) on fit
/// nodes, with the run's options that use most of it; its probe leaves
/// nothing.
#[test]
fn the_readme_acl_line_passes_check() {
    let nodes: Vec<RedisNode> = (0..3).map(|_| RedisNode::start_with(PERSISTENT)).collect();
    let urls: Vec<String> = nodes
        .iter()
        .map(|n| readme_acl_user(n, "locker", &[]))
        .collect();
    for extra in [
        &[][..],
        &["--fence", "--wait", "1m"],
        &["--shared", "--wait", "forever"],
        &["--limit", "2"],
    ] {
        let out = check(&urls.join(",")).args(extra).run();
        assert_eq!(out.code, Some(0), "{extra:?}\n{out}");
    }
    nodes.iter().for_each(clean);
}

/// The README's ACL line without +del: the probe's release is refused, so
/// `check` is unfit (69), naming DEL and what it would cost a run; and its
/// probe leaves no key behind, its fence counter (no expiry) included.
#[test]
fn an_acl_without_del_is_unfit_and_the_probe_leaves_no_key() {
    let node = RedisNode::start_with(PERSISTENT);
    let url = readme_acl_user(&node, "nodel", &["+del"]);
    let out = check(&url).arg("--fence").expect_code(69);
    let shown = format!("redis://nodel:***@127.0.0.1:{}", node.port());
    let lines = section(&out, &shown);
    assert!(
        lines.iter().any(|l| l.starts_with("  unfit")
            && l.contains("the ACL refuses DEL")
            && l.contains("release")),
        "{out}"
    );
    assert!(!lines.iter().any(|l| l.contains("the probe took")), "{out}");
    clean(&node);
}

/// What a waiter and the history need besides the lock: the queue's
/// commands with --wait (the acquire runs them under pcall, so only a probe
/// of its own meets a refusal), the channels, and the history's list
/// commands. Each missing one is a warning (exit 1) naming it.
#[test]
fn check_names_what_waiters_and_the_history_would_miss() {
    let node = RedisNode::start_with(PERSISTENT);
    for (name, without, extra, want) in [
        (
            "nozadd",
            &["+zadd"][..],
            &["-w", "5s"][..],
            "the ACL refuses ZADD",
        ),
        (
            "nochan",
            &["&{lock:*"][..],
            &["--wait", "5s"][..],
            "the ACL refuses SUBSCRIBE",
        ),
        ("nolpush", &["+lpush"][..], &[][..], "the ACL refuses LPUSH"),
    ] {
        let url = readme_acl_user(&node, name, without);
        let out = check(&url).args(extra).expect_code(1);
        let shown = format!("redis://{name}:***@127.0.0.1:{}", node.port());
        assert!(
            section(&out, &shown)
                .iter()
                .any(|l| l.starts_with("  warn") && l.contains(want)),
            "[{name}] {want}\n{out}"
        );
        clean(&node);
    }
}

/// `check` takes the run's --fence, --wait, --shared and --limit as flags
/// (and its help says so), and its probe uses them.
#[test]
fn check_takes_the_probe_options_as_flags() {
    let help = Test::new().args(["check", "--help"]).expect_code(0);
    for flag in ["--fence", "--wait", "--shared", "--limit"] {
        assert!(help.stdout.contains(flag), "{flag}\n{help}");
    }
    let node = RedisNode::start_with(PERSISTENT);
    for (args, said) in [
        (&["--fence"][..], "(--fence)"),
        (&["--wait", "10m"][..], "(--wait)"),
        (&["-w", "forever"][..], "(--wait)"),
        (&["--shared"][..], "(--shared)"),
        (&["--limit", "3"][..], "(--limit 3)"),
    ] {
        let out = check(&node.url()).args(args).run();
        assert!(
            out.stdout.contains(&format!(
                "the probe took, extended and released a lock {said}"
            )),
            "{args:?}\n{out}"
        );
        clean(&node);
    }
}

/// A run refuses a --metrics-file it cannot write (64, the command not
/// run): `check` and `config` refuse it the same way, `check` as a finding
/// about the settings, with every node still judged.
#[test]
fn a_metrics_file_in_a_missing_directory_fails_check_config_and_the_run() {
    let nodes: Vec<RedisNode> = (0..3).map(|_| RedisNode::start_with(PERSISTENT)).collect();
    let urls: Vec<String> = nodes.iter().map(RedisNode::url).collect();
    let dir = tempdir();
    let metrics = dir.join("node-exporter/redlock-run.prom");
    let config = dir.join("config.toml");
    std::fs::write(
        &config,
        format!(
            "redis = [\"{}\"]\nmetrics-file = \"{}\"\n",
            urls.join("\", \""),
            metrics.display()
        ),
    )
    .expect("write");
    let want = format!(
        "cannot write --metrics-file {}: its directory {} does not exist",
        metrics.display(),
        dir.join("node-exporter").display()
    );
    let out = Test::new()
        .env("REDLOCK_CONFIG", &config)
        .arg("check")
        .expect_code(64);
    assert!(
        out.stdout
            .lines()
            .any(|l| l.starts_with("  unfit") && l.contains(&want)),
        "{out}"
    );
    assert!(!out.stdout.contains("\nfit:"), "{out}");
    for url in &urls {
        assert!(
            section(&out, url)
                .iter()
                .any(|l| l.contains("appendfsync always")),
            "{url} not judged\n{out}"
        );
    }
    let out = Test::new()
        .env("REDLOCK_CONFIG", &config)
        .args(["check", "--json"])
        .expect_code(64);
    let said = python(
        "import json,sys\nd=json.load(sys.stdin)\nprint(d['verdict'], \
         [f['level'] for f in d['settings']])",
        &out.stdout,
    );
    assert_eq!(said.trim(), "unfit ['unfit']", "{out}");
    let out = Test::new()
        .env("REDLOCK_CONFIG", &config)
        .arg("config")
        .expect_code(64);
    out.assert_one_error_line();
    assert!(out.stderr.contains(&want), "{out}");
    let out = Test::new()
        .current_dir(dir.path())
        .env("REDLOCK_CONFIG", &config)
        .args(["-k", "job", "--", "touch", "ran"])
        .expect_code(64);
    out.assert_one_error_line();
    assert!(out.stderr.contains(&want), "{out}");
    assert!(!dir.has("ran"), "the command ran");
    // Once the directory is there, all three are content.
    std::fs::create_dir(dir.join("node-exporter")).expect("mkdir");
    let out = Test::new()
        .env("REDLOCK_CONFIG", &config)
        .arg("check")
        .expect_code(0);
    assert!(
        out.stdout.contains(&format!(
            "ok          --metrics-file {} can be written",
            metrics.display()
        )),
        "{out}"
    );
    nodes.iter().for_each(clean);
}

/// A setting no run can start with (a TTL its heartbeat cannot keep) is
/// `check`'s one finding, with the run's words and status.
#[test]
fn settings_a_run_refuses_are_a_finding_and_64() {
    let node = RedisNode::start_with(PERSISTENT);
    let dir = tempdir();
    let config = dir.join("config.toml");
    std::fs::write(&config, "ttl = \"2s\"\n").expect("write");
    let out = check(&node.url())
        .env("REDLOCK_CONFIG", &config)
        .args(["--node-timeout", "1s"])
        .expect_code(64);
    assert!(out.stdout.starts_with("settings\n  unfit"), "{out}");
    assert!(
        out.stdout
            .contains("--node-timeout 1s must be at most 1/10 of --ttl 2s"),
        "{out}"
    );
    assert!(
        out.stdout
            .trim_end()
            .ends_with("unfit: 1 unfit, 0 warnings, 0 cannot tell"),
        "{out}"
    );
}

/// Two nodes: one down means no lock, so `check` warns and names the fix;
/// four: the same tolerance as three. Three are fine.
#[test]
fn an_even_number_of_nodes_is_a_warning_naming_the_fix() {
    let nodes: Vec<RedisNode> = (0..4).map(|_| RedisNode::start_with(PERSISTENT)).collect();
    let urls: Vec<String> = nodes.iter().map(RedisNode::url).collect();
    let out = check(&urls[..2].join(",")).expect_code(1);
    assert!(
        out.stdout.lines().any(|l| l.starts_with("  warn")
            && l.contains("2 nodes: a lock needs both, so one node down means no lock")
            && l.contains("use 3 nodes")),
        "{out}"
    );
    let out = check(&urls.join(",")).expect_code(1);
    assert!(
        out.stdout.lines().any(|l| l.starts_with("  warn")
            && l.contains("4 nodes: a lock needs 3, so 2 down means no lock, as with 3")
            && l.contains("5 nodes tolerate 2 down, 4 only 1")),
        "{out}"
    );
    let out = check(&urls[..3].join(",")).expect_code(0);
    assert!(!out.stdout.contains("node count"), "{out}");
    assert!(!out.stdout.contains("nodes: a lock needs"), "{out}");
    nodes.iter().for_each(clean);
}

/// `check` reads when each TLS server's certificate expires: one that
/// expires within 14 days is a warning, one valid for decades is fine, in
/// either of X.509's time forms (UTCTime before 2050, GeneralizedTime after).
#[test]
fn check_reads_when_a_tls_certificate_expires() {
    let certs = Certs::make();
    let soon = certs.node_tls();
    let late = certs.node_tls_for(10_000);
    let nodes: Vec<RedisNode> = [&soon, &late]
        .into_iter()
        .map(|tls| RedisNode::start_with_tls(PERSISTENT, None, Some(tls), free_port))
        .collect();
    let urls: Vec<String> = nodes.iter().map(RedisNode::url).collect();
    let out = check(&urls.join(","))
        .args(["--tls-ca", &certs.pem("ca")])
        .run();
    let line = |url: &str| {
        section(&out, url)
            .into_iter()
            .find(|l| l.contains("the certificate of"))
            .map(str::to_string)
            .unwrap_or_else(|| panic!("{url}: no certificate line\n{out}"))
    };
    let soon_line = line(&urls[0]);
    // Made for 2 days a moment ago: 2 days, or 1 and some hours.
    assert!(
        soon_line.starts_with("  warn")
            && (soon_line.contains("expires in 1 days") || soon_line.contains("expires in 2 days")),
        "{soon_line}\n{out}"
    );
    let late_line = line(&urls[1]);
    // 10,000 days from when it was made, a moment ago.
    assert!(
        late_line.starts_with("  ok")
            && (late_line.contains("expires in 10000 days")
                || late_line.contains("expires in 9999 days")),
        "{late_line}\n{out}"
    );
}
