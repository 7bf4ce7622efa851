//! `--ping` and `--on-failure`: what reaches a ping service (a real HTTP
//! server on loopback, `support::http`) from which run, and that neither
//! ever stands in the lock's way or shows the ping URL's secret.

use std::time::{Duration, Instant};

use crate::support::http::Request;
use crate::support::*;

/// The secret part of every test's ping URL, as a service gives it out.
const SECRET: &str = "5f1c0b7e-9d2a-4c1e-b7aa-secretpath";

/// Proxy variables a developer's shell may have: the tests' pings go
/// straight to loopback unless a test sets its own.
const PROXY_VARS: [&str; 7] = [
    "http_proxy",
    "https_proxy",
    "HTTPS_PROXY",
    "all_proxy",
    "ALL_PROXY",
    "no_proxy",
    "NO_PROXY",
];

/// `redlock-run -r URLS -k NAME --ping <server>/SECRET` in `dir`.
fn pinging(urls: &str, name: &str, dir: &TempDir, server: &PingServer) -> Test {
    let mut test = base(urls, name, dir).args(["--ping", &server.url(SECRET)]);
    for var in PROXY_VARS {
        test = test.env_remove(var);
    }
    test
}

/// Each request as `METHOD /last-path-segment`.
fn seen(requests: &[Request]) -> Vec<String> {
    requests
        .iter()
        .map(|r| {
            let last = r.path.rsplit('/').next().unwrap_or_default();
            format!("{} /{last}", r.method)
        })
        .collect()
}

/// Every request went to the secret path, with a run id.
fn all_to_the_check(requests: &[Request]) {
    for r in requests {
        assert!(r.path.starts_with(&format!("/{SECRET}/")), "{r:?}");
        assert!(r.param("rid").is_some_and(|id| id.len() == 36), "{r:?}");
    }
}

/// The run ids of `requests`, one per run.
fn run_ids(requests: &[Request]) -> Vec<String> {
    let mut ids: Vec<String> = requests
        .iter()
        .filter_map(|r| r.param("rid").map(str::to_string))
        .collect();
    ids.dedup();
    ids
}

#[test]
fn a_run_pings_start_then_its_exit_status_with_one_run_id() {
    let node = RedisNode::start();
    let server = PingServer::start();
    let dir = tempdir();
    pinging(&node.url(), "job", &dir, &server)
        .args(["--", "true"])
        .expect_code(0);
    let requests = server.await_requests(2, START);
    assert_eq!(seen(&requests), ["GET /start", "POST /0"], "{requests:#?}");
    all_to_the_check(&requests);
    assert_eq!(run_ids(&requests).len(), 1, "{requests:#?}");
    assert!(requests[1].body.contains("outcome: ok\n"), "{requests:#?}");

    let out = pinging(&node.url(), "job", &dir, &server)
        .args(["--", "false"])
        .expect_code(1);
    assert!(out.stderr.is_empty(), "{out}");
    let requests = server.await_requests(4, START);
    assert_eq!(
        seen(&requests[2..]),
        ["GET /start", "POST /1"],
        "{requests:#?}"
    );
    let body = &requests[3].body;
    for line in [
        "outcome: failed\n",
        "exit_code: 1\n",
        "key: job\n",
        "attempts: 1\n",
        "lock: exclusive\n",
    ] {
        assert!(body.contains(line), "{line:?} not in {body}");
    }
    assert!(
        body.contains("duration_ms: ") && body.contains("host: "),
        "{body}"
    );
    assert_eq!(run_ids(&requests).len(), 2, "a run id per run");
    assert_eq!(server.requests().len(), 4, "nothing more");
}

#[test]
fn with_retry_a_run_pings_one_start_and_one_end() {
    let node = RedisNode::start();
    let server = PingServer::start();
    let dir = tempdir();
    pinging(&node.url(), "again", &dir, &server)
        .args(["--retry", "2", "--retry-delay", "10ms", "--", "false"])
        .expect_code(1);
    // The end ping is answered before the run exits: every request is in.
    let requests = server.requests();
    assert_eq!(seen(&requests), ["GET /start", "POST /1"], "{requests:#?}");
    assert!(
        requests[1].body.contains("attempts: 3\n"),
        "{}",
        requests[1].body
    );
}

#[test]
fn of_two_hosts_on_one_lock_only_the_one_that_ran_pings() {
    let node = RedisNode::start();
    let server = PingServer::start();
    let dir = tempdir();
    let holder = pinging(&node.url(), "fleet", &dir, &server)
        .env("REDLOCK_TEST_HOST", "web1")
        .args(["-c", &format!("touch held; {WAIT_FOR_GO}")])
        .spawn();
    await_marker(&dir, "held", &holder);
    server.await_requests(1, START);
    // The other host's run of the same crontab line: busy, and silent.
    pinging(&node.url(), "fleet", &dir, &server)
        .env("REDLOCK_TEST_HOST", "web2")
        .args(["-q", "--", "true"])
        .expect_code(75);
    // With --ping-busy it says who holds the lock, -q or not.
    let out = pinging(&node.url(), "fleet", &dir, &server)
        .env("REDLOCK_TEST_HOST", "web3")
        .args(["-q", "--ping-busy", "--", "true"])
        .expect_code(75);
    assert!(out.stderr.is_empty(), "{out}");
    touch(&dir, "go");
    holder.wait().assert_code(0);
    let requests = server.requests();
    // The holder's start came while it ran, the busy run's log next, the
    // holder's end last.
    assert_eq!(
        seen(&requests),
        ["GET /start", "POST /log", "POST /0"],
        "{requests:#?}"
    );
    all_to_the_check(&requests);
    let (start, log, end) = (&requests[0], &requests[1], &requests[2]);
    assert_eq!(start.param("rid"), end.param("rid"));
    assert_ne!(start.param("rid"), log.param("rid"));
    assert!(end.body.contains("host: web1\n"), "{}", end.body);
    assert!(log.body.contains("outcome: busy\n"), "{}", log.body);
    assert!(log.body.contains("host: web3\n"), "{}", log.body);
    assert!(
        log.body.contains("is held elsewhere, by ") && log.body.contains("@web1 pid "),
        "who holds the lock: {}",
        log.body
    );
}

#[test]
fn a_used_once_per_window_pings_nothing_or_a_log() {
    let node = RedisNode::start();
    let server = PingServer::start();
    let dir = tempdir();
    let run = |extra: &[&str]| {
        pinging(&node.url(), "hourly", &dir, &server)
            .args(["-q", "--once-per", "1h"])
            .args(extra)
            .args(["--", "true"])
    };
    run(&[]).expect_code(0);
    run(&[]).expect_code(75);
    run(&["--ping-busy"]).expect_code(75);
    let requests = server.requests();
    assert_eq!(
        seen(&requests),
        ["GET /start", "POST /0", "POST /log"],
        "{requests:#?}"
    );
    assert!(
        requests[2].body.contains("outcome: already-ran\n"),
        "{}",
        requests[2].body
    );
    assert!(
        requests[2].body.contains("already ran in this window"),
        "{}",
        requests[2].body
    );
}

#[test]
fn a_lost_lock_pings_76_and_max_runtime_124() {
    let node = RedisNode::start();
    let server = PingServer::start();
    let dir = tempdir();
    let holder = pinging(&node.url(), "lost", &dir, &server)
        .args(["--ttl", "3s", "--node-timeout", "150ms"])
        .args(["-c", &format!("touch held; {WAIT_FOR_GO}")])
        .spawn();
    await_marker(&dir, "held", &holder);
    node.stop();
    let out = holder.wait();
    node.cont();
    out.assert_code(76);
    let requests = server.await_requests(2, START);
    assert_eq!(seen(&requests), ["GET /start", "POST /76"], "{requests:#?}");
    assert!(
        requests[1].body.contains("outcome: lost\n"),
        "{}",
        requests[1].body
    );

    pinging(&node.url(), "slow", &dir, &server)
        .args(["--max-runtime", "300ms", "--", "sleep", "10"])
        .expect_code(124);
    let requests = server.await_requests(4, START);
    assert_eq!(
        seen(&requests[2..]),
        ["GET /start", "POST /124"],
        "{requests:#?}"
    );
    assert!(
        requests[3].body.contains("outcome: timeout\n"),
        "{}",
        requests[3].body
    );
}

#[test]
fn a_run_without_a_quorum_pings_fail_with_the_reason_and_runs_on_failure() {
    let server = PingServer::start();
    let dir = tempdir();
    let hook = format!("env > {}/hook.env", dir.display());
    let out = pinging("redis://127.0.0.1:1", "noquorum", &dir, &server)
        .args(["--on-failure", &hook, "--", "touch", "ran"])
        .expect_code(69);
    assert!(!dir.has("ran"), "{out}");
    let requests = server.await_requests(1, START);
    assert_eq!(seen(&requests), ["POST /fail"], "{requests:#?}");
    let body = &requests[0].body;
    assert!(body.contains("outcome: unavailable\n"), "{body}");
    assert!(
        body.contains("why: cannot take lock 'noquorum': ")
            && body.contains("redis://127.0.0.1:1: connection refused"),
        "the reason: {body}"
    );
    let env = std::fs::read_to_string(dir.join("hook.env")).expect("--on-failure ran");
    assert!(env.contains("REDLOCK_OUTCOME=unavailable\n"), "{env}");
    assert!(env.contains("REDLOCK_EXIT_STATUS=69\n"), "{env}");
    let rid = requests[0].param("rid").expect("rid");
    assert!(env.contains(&format!("REDLOCK_RUN_ID={rid}\n")), "{env}");
}

#[test]
fn on_failure_runs_once_after_a_failed_run_and_never_after_a_good_one() {
    let node = RedisNode::start();
    let server = PingServer::start();
    let dir = tempdir();
    let hook = format!(
        "env >> {}/hook.env; echo ran >> {}/hook.count",
        dir.display(),
        dir.display()
    );
    // The ping URL from the environment: the hook does not get it.
    let run = || {
        base(&node.url(), "nightly", &dir)
            .env("REDLOCK_PING", server.url(SECRET))
            .args(["--on-failure", &hook])
    };
    run().args(["--", "true"]).expect_code(0);
    assert!(!dir.has("hook.count"), "not after a run that exited 0");
    let out = run().args(["--", "sh", "-c", "exit 3"]).expect_code(3);
    assert!(out.stderr.is_empty(), "{out}");
    let count = std::fs::read_to_string(dir.join("hook.count")).expect("ran");
    assert_eq!(count, "ran\n", "once");
    let env = std::fs::read_to_string(dir.join("hook.env")).expect("ran");
    let requests = server.await_requests(4, START);
    let rid = requests[3].param("rid").expect("rid");
    for var in [
        "REDLOCK_KEY=nightly".to_string(),
        "REDLOCK_OUTCOME=failed".into(),
        "REDLOCK_EXIT_STATUS=3".into(),
        format!("REDLOCK_RUN_ID={rid}"),
    ] {
        assert!(env.lines().any(|l| l == var), "{var} not in\n{env}");
    }
    assert!(
        !env.contains(SECRET) && !env.contains("REDLOCK_PING"),
        "{env}"
    );
    // Without --ping too; and a hook that fails is a warning, -q or not.
    let out = base(&node.url(), "nightly", &dir)
        .args(["-q", "--on-failure", "exit 5", "--", "false"])
        .expect_code(1);
    assert_eq!(
        out.stderr_lines(),
        ["redlock-run: warning: --on-failure exited with status 5"],
        "{out}"
    );
}

#[test]
fn a_ping_service_that_never_answers_costs_one_warning_and_the_ping_timeout() {
    let node = RedisNode::start();
    let server = PingServer::with(Answer::Never);
    let dir = tempdir();
    for quiet in [false, true] {
        let started = Instant::now();
        let out = pinging(&node.url(), "hung", &dir, &server)
            .args(["--ping-timeout", "2s"])
            .args(quiet.then_some("-q"))
            .args(["--", "sh", "-c", "exit 4"])
            .expect_code(4);
        let took = started.elapsed();
        assert!(
            took < Duration::from_secs(3),
            "the run took {took:?}, more than --ping-timeout and 1s\n{out}"
        );
        let lines = out.stderr_lines();
        assert_eq!(lines.len(), 1, "one warning line, -q or not\n{out}");
        assert!(
            lines[0].starts_with(&format!(
                "redlock-run: warning: --ping http://127.0.0.1:{}/***: /start not sent: no answer",
                server.port()
            )),
            "{out}"
        );
        assert!(lines[0].contains("/4 not sent"), "{out}");
    }
    assert!(!node.exists(lock_key("hung")), "released");
}

#[test]
fn a_slow_ping_service_delays_neither_the_command_nor_the_release() {
    let node = RedisNode::start();
    let server = PingServer::with(Answer::After(Duration::from_secs(2)));
    let dir = tempdir();
    let running = pinging(&node.url(), "slowping", &dir, &server)
        .args(["-c", &format!("touch started; {WAIT_FOR_GO}")])
        .spawn();
    await_marker(&dir, "started", &running);
    let requests = server.await_requests(1, START);
    assert_eq!(seen(&requests), ["GET /start"], "{requests:#?}");
    assert!(
        requests[0].answered.is_none(),
        "the command started only after the start ping was answered"
    );
    touch(&dir, "go");
    // The end ping goes out after the release: while the service sits on
    // it, the lock is free for the next run.
    let requests = server.await_requests(2, START);
    assert_eq!(seen(&requests), ["GET /start", "POST /0"], "{requests:#?}");
    let mut running = running;
    assert!(!running.has_exited(), "the run waits for its end ping");
    assert!(
        !node.exists(lock_key("slowping")),
        "the lock is held while the end ping is in flight"
    );
    let out = running.wait();
    out.assert_code(0);
    assert!(out.stderr.is_empty(), "{out}");
    let requests = server.requests();
    assert!(
        requests[0].answered.is_some_and(|a| a <= requests[1].at),
        "the end ping waits for the start ping's answer"
    );
}

#[test]
fn pings_over_https_trust_tls_ca() {
    let node = RedisNode::start();
    let certs = Certs::make();
    let server = PingServer::tls(&certs, Answer::Now);
    let dir = tempdir();
    let out = pinging(&node.url(), "tls", &dir, &server)
        .args(["--tls-ca", &certs.pem("ca"), "--", "true"])
        .expect_code(0);
    assert!(out.stderr.is_empty(), "{out}");
    let requests = server.await_requests(2, START);
    assert_eq!(seen(&requests), ["GET /start", "POST /0"], "{requests:#?}");
    // A CA nobody gave it: not trusted.
    let out = pinging(&node.url(), "tls", &dir, &server)
        .args(["--ping-timeout", "2s", "--", "true"])
        .expect_code(0);
    assert_eq!(out.stderr_lines().len(), 1, "{out}");
    assert!(out.stderr.contains("/start not sent: TLS: "), "{out}");
    assert!(out.stderr.contains("UnknownIssuer"), "{out}");
    assert_eq!(server.requests().len(), 2);
}

#[test]
fn a_proxy_is_used_as_curl_would_and_no_proxy_skips_it() {
    let node = RedisNode::start();
    let proxy = PingServer::start();
    let dir = tempdir();
    let ping = format!("http://pings.invalid/{SECRET}");
    let run = |extra: &[(&str, &str)]| {
        let mut test = base(&node.url(), "proxied", &dir);
        for var in PROXY_VARS {
            test = test.env_remove(var);
        }
        for (k, v) in extra {
            test = test.env(k, v);
        }
        test.args(["--ping", &ping, "--ping-timeout", "2s", "--", "true"])
            .expect_code(0)
    };
    let proxy_url = format!("http://127.0.0.1:{}", proxy.port());
    let out = run(&[("http_proxy", &proxy_url)]);
    assert!(out.stderr.is_empty(), "{out}");
    // Through a tunnel (CONNECT) to the ping's host, as for https://.
    let requests = proxy.requests();
    assert_eq!(
        seen(&requests),
        [
            "CONNECT /pings.invalid:80",
            "GET /start",
            "CONNECT /pings.invalid:80",
            "POST /0"
        ],
        "{requests:#?}"
    );
    assert!(
        requests[1]
            .target
            .starts_with(&format!("/{SECRET}/start?rid=")),
        "{requests:#?}"
    );
    // curl reads no upper-case HTTP_PROXY, and no_proxy names the host.
    for env in [
        vec![("HTTP_PROXY", proxy_url.as_str())],
        vec![("http_proxy", &proxy_url), ("no_proxy", ".invalid")],
    ] {
        let out = run(&env);
        assert!(out.stderr.contains("warning: --ping"), "{env:?}: {out}");
        assert_eq!(proxy.requests().len(), 4, "{env:?}: not through the proxy");
    }
}

#[test]
fn the_ping_url_is_never_shown_whole() {
    let node = RedisNode::start();
    let server = PingServer::start();
    let dir = tempdir();
    let secret_url = server.url(SECRET);
    // A run that holds the lock: `status` shows its holder.
    let holder = base(&node.url(), "secretive", &dir)
        .env("REDLOCK_PING", &secret_url)
        .args(["-vv", "--record-command", "masked", "--report"])
        .arg(dir.join("report.json"))
        .args(["-c", &format!("env > cmd.env; touch held; {WAIT_FOR_GO}")])
        .spawn();
    await_marker(&dir, "held", &holder);
    let status = Test::new()
        .args(["status", "-r", &node.url(), "-k", "secretive"])
        .expect_code(1);
    touch(&dir, "go");
    let out = holder.wait();
    out.assert_code(0);
    let mut shown = vec![
        ("stderr -vv", out.stderr.clone()),
        ("status", status.stdout + &status.stderr),
        (
            "the report",
            std::fs::read_to_string(dir.join("report.json")).expect("report"),
        ),
        (
            "the command's environment",
            std::fs::read_to_string(dir.join("cmd.env")).expect("env"),
        ),
    ];
    assert!(out.stderr.contains("/***/start: HTTP 200"), "{out}");
    // A ping that fails says why, masked; `config` shows where it came from.
    let failing = format!("http://user:pass@127.0.0.1:1/{SECRET}?create=1");
    let out = base(&node.url(), "secretive", &dir)
        .args(["--ping", &failing, "--ping-timeout", "1s", "--", "false"])
        .expect_code(1);
    assert!(
        out.stderr
            .contains("http://***@127.0.0.1:1/***: /start not sent"),
        "{out}"
    );
    shown.push(("a failed ping's warning", out.stderr));
    let config = Test::new()
        .env("REDLOCK_PING", &secret_url)
        .args(["config", "-k", "secretive"])
        .expect_code(0);
    assert!(
        config.stdout.lines().any(|l| l.starts_with("ping ")
            && l.contains(&format!("127.0.0.1:{}/***", server.port()))
            && l.contains("env REDLOCK_PING")),
        "{config}"
    );
    shown.push(("config", config.stdout));
    let json = Test::new()
        .env("REDLOCK_PING", &failing)
        .args(["config", "--json"])
        .expect_code(0);
    assert!(
        json.stdout
            .contains("\"value\":\"http://***@127.0.0.1:1/***\""),
        "{json}"
    );
    shown.push(("config --json", json.stdout));
    let bad = base(&node.url(), "secretive", &dir)
        .args(["--ping", &format!("htp://h/{SECRET}"), "--", "true"])
        .expect_code(64);
    assert!(
        bad.stderr
            .contains("--ping htp://h/***: not an http:// or https:// URL"),
        "{bad}"
    );
    shown.push(("a usage error", bad.stderr));
    for (what, text) in shown {
        assert!(
            !text.contains(SECRET),
            "{what} shows the ping URL's secret:\n{text}"
        );
        assert!(
            !text.contains("pass@"),
            "{what} shows the password:\n{text}"
        );
    }
}

#[test]
fn metrics_count_pings_sent_and_failed() {
    let node = RedisNode::start();
    let server = PingServer::start();
    let dir = tempdir();
    let metrics = dir.join("cron.prom");
    pinging(&node.url(), "counted", &dir, &server)
        .arg("--metrics-file")
        .arg(&metrics)
        .args(["--", "true"])
        .expect_code(0);
    base(&node.url(), "counted", &dir)
        .args([
            "--ping",
            &format!("http://127.0.0.1:1/{SECRET}"),
            "--ping-timeout",
            "1s",
        ])
        .arg("--metrics-file")
        .arg(&metrics)
        .args(["--", "true"])
        .expect_code(0);
    let text = std::fs::read_to_string(&metrics).expect("metrics");
    assert!(
        text.contains("redlock_run_pings_total{key=\"counted\",result=\"sent\"} 2\n")
            && text.contains("redlock_run_pings_total{key=\"counted\",result=\"failed\"} 2\n"),
        "{text}"
    );
    assert!(!text.contains(SECRET), "{text}");
}

#[test]
fn the_configuration_file_gives_each_lock_its_ping_and_every_lock_the_hook() {
    use std::os::unix::fs::PermissionsExt;
    let node = RedisNode::start();
    let server = PingServer::start();
    let dir = tempdir();
    let config = dir.join("config.toml");
    std::fs::write(
        &config,
        format!(
            "redis = [\"{}\"]\non-failure = 'echo \"$REDLOCK_KEY\" >> {}/hooks'\n\n\
             [lock.\"nightly\"]\nping = \"{}\"\n",
            node.url(),
            dir.display(),
            server.url(SECRET)
        ),
    )
    .expect("write the configuration file");
    std::fs::set_permissions(&config, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    let run = |name: &str, command: &str| {
        let mut test = Test::new()
            .current_dir(dir.path())
            .env("REDLOCK_CONFIG", &config)
            .args(["-k", name, "-c", command]);
        for var in PROXY_VARS {
            test = test.env_remove(var);
        }
        test
    };
    run("nightly", "exit 2").expect_code(2);
    run("hourly", "exit 3").expect_code(3);
    let requests = server.requests();
    assert_eq!(seen(&requests), ["GET /start", "POST /2"], "{requests:#?}");
    let hooks = std::fs::read_to_string(dir.join("hooks")).expect("the hook ran");
    assert_eq!(hooks, "nightly\nhourly\n");
    // An empty --ping turns the file's off for one run.
    run("nightly", "true").args(["--ping", ""]).expect_code(0);
    assert_eq!(server.requests().len(), 2);
}

#[test]
fn of_two_runs_started_together_one_pings_and_the_busy_one_is_silent() {
    let node = RedisNode::start();
    let server = PingServer::start();
    let dir = tempdir();
    let runs: Vec<Running> = ["web1", "web2"]
        .iter()
        .map(|host| {
            pinging(&node.url(), "race", &dir, &server)
                .env("REDLOCK_TEST_HOST", host)
                .args(["-q", "--", "sleep", "2"])
                .spawn()
        })
        .collect();
    let codes: Vec<Option<i32>> = runs.into_iter().map(|r| r.wait().code).collect();
    let mut sorted = codes.clone();
    sorted.sort();
    assert_eq!(sorted, [Some(0), Some(75)], "{codes:?}");
    let requests = server.requests();
    assert_eq!(seen(&requests), ["GET /start", "POST /0"], "{requests:#?}");
    assert_eq!(run_ids(&requests).len(), 1, "{requests:#?}");
}
