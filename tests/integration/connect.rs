//! Connecting to nodes: TLS (private CA, host-name check, --tls-insecure,
//! mutual TLS), ACL users, passwords kept secret, unix sockets, IPv6, db
//! numbers and host names.
//!
//! The TLS, password, unix-socket and IPv6 nodes are `redis-server`
//! processes with extra arguments, started by [`CustomNode`] below; plain
//! nodes come from `support`. Certificates are made per test by
//! `support::Certs` (the `openssl` CLI, EC P-256 keys: well under a second).

use std::fs;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Child;
use std::time::{Duration, Instant};

use redis::FromRedisValue;

use crate::support::{
    Certs, Cluster, RedisNode, TempDir, Test, is_token, lock_key, redis_server_binary,
    server_command, server_has_tls, tempdir, wait_until,
};
use crate::support::{WAIT_FOR_GO, await_marker, base, touch};

/// The password the secret tests use; it must never show up anywhere.
const SECRET: &str = "s3cr3t-XYZ";

/// Timeout for the test's own inspection connections.
const ADMIN_TIMEOUT: Duration = Duration::from_secs(2);

// ---------------------------------------------------------------------------
// Fixtures
// ---------------------------------------------------------------------------

/// A `redis-server` started with the caller's listening arguments (TLS ports,
/// a unix socket, `--bind ::1`, `--requirepass`, ...), persistence off, its
/// own data directory, killed and reaped on drop. Inspected through `admin`,
/// a client the caller builds for however the node listens.
struct CustomNode {
    child: Option<Child>,
    dir: TempDir,
    port: u16,
    admin: redis::Client,
}

impl CustomNode {
    /// `args(port, dir)` gives the arguments that say how the server listens
    /// (`port` is a free port on `host`, which the arguments may ignore);
    /// `admin(port, dir)` the client the test inspects the node with.
    fn start(
        host: &str,
        args: impl Fn(u16, &Path) -> Vec<String>,
        admin: impl Fn(u16, &Path) -> redis::Client,
    ) -> CustomNode {
        let dir = tempdir();
        let mut last_error = String::new();
        for _attempt in 0..5 {
            let port = free_port(host);
            let log_path = dir.join("redis.log");
            // notice: the "Ready to accept connections" line is what we wait for.
            let mut command = server_command(dir.path(), "notice");
            command.args(args(port, dir.path()));
            let mut child = command.spawn().unwrap_or_else(|e| {
                panic!(
                    "cannot spawn {}: {e} (apt-get install redis-server)",
                    redis_server_binary().display()
                )
            });
            let mut exited = None;
            let ready = wait_until(Duration::from_secs(5), || {
                if let Ok(Some(status)) = child.try_wait() {
                    exited = Some(status);
                    return true;
                }
                fs::read_to_string(&log_path)
                    // "Ready to accept connections", or "... now ready to accept
                    // connections at PATH" for a server with only a unix socket.
                    .is_ok_and(|log| {
                        log.to_ascii_lowercase()
                            .contains("ready to accept connections")
                    })
            });
            let log = fs::read_to_string(&log_path).unwrap_or_default();
            match exited {
                // Most likely the port was taken meanwhile: try another.
                Some(status) => last_error = format!("redis-server exited with {status}:\n{log}"),
                None if ready => {
                    let node = CustomNode {
                        child: Some(child),
                        port,
                        admin: admin(port, dir.path()),
                        dir,
                    };
                    let pong: String = node.cmd(&redis::cmd("PING"));
                    assert_eq!(pong, "PONG", "custom node answers PING");
                    return node;
                }
                None => {
                    let _ = child.kill();
                    let _ = child.wait();
                    last_error = format!("redis-server did not get ready within 5s:\n{log}");
                }
            }
        }
        panic!("could not start a custom redis-server after 5 attempts: {last_error}");
    }

    fn port(&self) -> u16 {
        self.port
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// Runs `cmd` on a fresh admin connection; panics with context on error.
    fn cmd<T: FromRedisValue>(&self, cmd: &redis::Cmd) -> T {
        query(&self.admin, cmd)
    }

    /// Every key but the run histories, as text (see `RedisNode::keys`).
    fn keys(&self) -> Vec<String> {
        let mut keys: Vec<Vec<u8>> = self.cmd(redis::cmd("KEYS").arg("*"));
        keys.retain(|k| !crate::support::is_history_key(k));
        keys.sort();
        keys.iter()
            .map(|k| String::from_utf8_lossy(k).into_owned())
            .collect()
    }

    fn get(&self, key: &[u8]) -> Option<Vec<u8>> {
        self.cmd(redis::cmd("GET").arg(key))
    }

    fn exists(&self, key: &[u8]) -> bool {
        self.cmd::<i64>(redis::cmd("EXISTS").arg(key)) == 1
    }

    fn log(&self) -> String {
        fs::read_to_string(self.dir.join("redis.log")).unwrap_or_default()
    }
}

impl Drop for CustomNode {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Runs `cmd` on a fresh connection of `client`, panicking with context.
fn query<T: FromRedisValue>(client: &redis::Client, cmd: &redis::Cmd) -> T {
    let attempt = || -> redis::RedisResult<T> {
        let mut con = client.get_connection_with_timeout(ADMIN_TIMEOUT)?;
        con.set_read_timeout(Some(ADMIN_TIMEOUT))?;
        con.set_write_timeout(Some(ADMIN_TIMEOUT))?;
        cmd.query(&mut con)
    };
    attempt().unwrap_or_else(|e| {
        panic!(
            "admin command on {:?} failed: {e}",
            client.get_connection_info().addr()
        )
    })
}

fn client(url: &str) -> redis::Client {
    redis::Client::open(url).unwrap_or_else(|e| panic!("admin client for {url}: {e}"))
}

use crate::support::free_port_on as free_port;

impl Certs {
    /// A TLS-only node (`--port 0`) serving certificate `cert`; client
    /// certificates from `ca` are required when `auth_clients`. The admin
    /// client trusts `ca`, presents `client` and, for a certificate not
    /// made out to 127.0.0.1, skips the host-name check.
    fn node(&self, cert: &str, auth_clients: bool) -> CustomNode {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let (cert_file, key_file, ca_file) = (self.pem(cert), self.key(cert), self.pem("ca"));
        let insecure = if cert == "server" { "" } else { "#insecure" };
        let read = |p: &str| fs::read(p).unwrap_or_else(|e| panic!("read {p}: {e}"));
        let (client_cert, client_key, root) = (
            read(&self.pem("client")),
            read(&self.key("client")),
            read(&self.pem("ca")),
        );
        CustomNode::start(
            "127.0.0.1",
            |port, _| {
                vec![
                    "--port".into(),
                    "0".into(),
                    "--bind".into(),
                    "127.0.0.1".into(),
                    "--tls-port".into(),
                    port.to_string(),
                    "--tls-cert-file".into(),
                    cert_file.clone(),
                    "--tls-key-file".into(),
                    key_file.clone(),
                    "--tls-ca-cert-file".into(),
                    ca_file.clone(),
                    "--tls-auth-clients".into(),
                    if auth_clients { "yes" } else { "no" }.into(),
                ]
            },
            |port, _| {
                redis::Client::build_with_tls(
                    format!("rediss://127.0.0.1:{port}/{insecure}"),
                    redis::TlsCertificates {
                        client_tls: Some(redis::ClientTlsConfig {
                            client_cert: client_cert.clone(),
                            client_key: client_key.clone(),
                        }),
                        root_cert: Some(root.clone()),
                    },
                )
                .expect("admin TLS client")
            },
        )
    }
}

fn remove(dir: &TempDir, name: &str) {
    let _ = fs::remove_file(dir.join(name));
}

/// Asserts the run failed closed for want of a quorum: exit 69, one error
/// line containing every piece of `needles`, the command not run.
fn assert_unavailable(out: &crate::support::RunOutput, dir: &TempDir, needles: &[&str]) {
    out.assert_code(69).assert_one_error_line();
    for needle in needles {
        assert!(
            out.stderr.contains(needle),
            "stderr should mention {needle:?}\n{out}"
        );
    }
    assert!(!dir.has("ran"), "the command ran\n{out}");
}

const TLS_WARNING: &str =
    "--tls-insecure: certificates and host names of rediss:// nodes are not checked";

// ---------------------------------------------------------------------------
// 1. TLS
// ---------------------------------------------------------------------------

#[test]
fn tls_with_private_ca_runs_and_releases() {
    if !server_has_tls("connect::tls_with_private_ca_runs_and_releases") {
        return;
    }
    let certs = Certs::make();
    let node = certs.node("server", false);
    let dir = tempdir();
    let key = lock_key("tls");
    for host in ["localhost", "127.0.0.1"] {
        let url = format!("rediss://{host}:{}", node.port());
        let running = base(&url, "tls", &dir)
            .args(["--tls-ca", &certs.pem("ca")])
            .args(["-c", &format!("touch ran; {WAIT_FOR_GO}")])
            .spawn();
        await_marker(&dir, "ran", &running);
        let value = node.get(&key);
        assert!(
            value.as_deref().is_some_and(is_token),
            "[{host}] lock key should hold a token while the command runs: {value:?}"
        );
        touch(&dir, "go");
        let out = running.wait();
        out.assert_code(0);
        assert_eq!(
            out.stderr, "",
            "[{host}] a clean TLS run prints nothing\n{out}"
        );
        assert!(
            node.keys().is_empty(),
            "[{host}] keys left: {:?}",
            node.keys()
        );
        remove(&dir, "ran");
        remove(&dir, "go");
    }
}

#[test]
fn tls_with_wrong_or_no_ca_fails_closed() {
    if !server_has_tls("connect::tls_with_wrong_or_no_ca_fails_closed") {
        return;
    }
    let certs = Certs::make();
    let node = certs.node("server", false);
    let dir = tempdir();
    let url = format!("rediss://localhost:{}", node.port());

    // An unrelated CA, and the system roots (no --tls-ca).
    let other_ca = certs.pem("other-ca");
    let cases: [(&str, &[&str]); 2] = [
        ("unrelated CA", &["--tls-ca", &other_ca]),
        ("system roots", &[]),
    ];
    for (what, extra) in cases {
        let out = base(&url, "tls", &dir)
            .args(extra)
            .args(["-c", "touch ran"])
            .run();
        assert_unavailable(&out, &dir, &["TLS handshake failed", "--tls-ca", &url]);
        assert!(
            node.keys().is_empty(),
            "[{what}] keys left: {:?}",
            node.keys()
        );
    }

    // --tls-insecure accepts the same server, and warns on every run.
    for _ in 0..2 {
        let out = base(&url, "tls", &dir)
            .args(["--tls-insecure", "--tls-ca", &other_ca])
            .args(["-c", "touch ran"])
            .expect_code(0);
        assert!(dir.has("ran"), "command did not run with --tls-insecure");
        assert_eq!(
            out.stderr_lines(),
            [format!("redlock-run: {TLS_WARNING}")],
            "--tls-insecure must warn, in one line, on every run\n{out}"
        );
        remove(&dir, "ran");
    }
    assert!(node.keys().is_empty(), "keys left: {:?}", node.keys());
}

#[test]
fn tls_host_name_mismatch_fails_closed_unless_insecure() {
    if !server_has_tls("connect::tls_host_name_mismatch_fails_closed_unless_insecure") {
        return;
    }
    let certs = Certs::make();
    // Signed by the trusted CA, but made out to other.example only.
    let node = certs.node("wrong-name", false);
    let dir = tempdir();
    for host in ["localhost", "127.0.0.1"] {
        let url = format!("rediss://{host}:{}", node.port());
        let out = base(&url, "tls", &dir)
            .args(["--tls-ca", &certs.pem("ca"), "-c", "touch ran"])
            .run();
        assert_unavailable(&out, &dir, &["TLS handshake failed", &url, host]);
        assert!(node.keys().is_empty(), "keys left: {:?}", node.keys());
    }

    let url = format!("rediss://localhost:{}", node.port());
    let out = base(&url, "tls", &dir)
        .args(["--tls-insecure", "-c", "touch ran"])
        .expect_code(0);
    assert!(dir.has("ran"), "command did not run with --tls-insecure");
    assert!(out.stderr.contains(TLS_WARNING), "no warning\n{out}");
    assert!(node.keys().is_empty(), "keys left: {:?}", node.keys());
}

#[test]
fn mutual_tls_needs_a_client_certificate_from_the_ca() {
    if !server_has_tls("connect::mutual_tls_needs_a_client_certificate_from_the_ca") {
        return;
    }
    let certs = Certs::make();
    let node = certs.node("server", true);
    let dir = tempdir();
    let url = format!("rediss://localhost:{}", node.port());
    let ca = certs.pem("ca");

    base(&url, "mtls", &dir)
        .args(["--tls-ca", &ca])
        .args(["--tls-cert", &certs.pem("client")])
        .args(["--tls-key", &certs.key("client")])
        .args(["-c", "touch ran"])
        .expect_code(0);
    assert!(
        dir.has("ran"),
        "command did not run with a client certificate"
    );
    assert!(node.keys().is_empty(), "keys left: {:?}", node.keys());
    remove(&dir, "ran");

    let stranger = [
        "--tls-cert",
        &certs.pem("stranger"),
        "--tls-key",
        &certs.key("stranger"),
    ];
    let cases: [(&str, &[&str]); 2] = [
        ("no client certificate", &[]),
        ("client certificate from another CA", &stranger),
    ];
    for (what, extra) in cases {
        let out = base(&url, "mtls", &dir)
            .args(["--tls-ca", &ca])
            .args(extra)
            .args(["-c", "touch ran"])
            .run();
        out.assert_code(69).assert_one_error_line();
        assert!(!dir.has("ran"), "[{what}] the command ran\n{out}");
        assert!(
            out.stderr.contains(&url) && out.stderr.contains("TLS"),
            "[{what}] the error should name the node and TLS\n{out}\n--- server log ---\n{}",
            node.log()
        );
        assert!(
            node.keys().is_empty(),
            "[{what}] keys left: {:?}",
            node.keys()
        );
    }
}

/// rustls cannot present an X.509 v1 client certificate (redis-cli can):
/// say so, with the fix, before trying any node.
#[test]
fn an_x509_v1_client_certificate_is_named_with_the_fix() {
    if !server_has_tls("connect::an_x509_v1_client_certificate_is_named_with_the_fix") {
        return;
    }
    let certs = Certs::make();
    let node = certs.node("server", true);
    let dir = tempdir();
    let url = format!("rediss://localhost:{}", node.port());
    let out = base(&url, "mtls-v1", &dir)
        .args(["--tls-ca", &certs.pem("ca")])
        .args(["--tls-cert", &certs.pem("client-v1")])
        .args(["--tls-key", &certs.key("client-v1")])
        .args(["-c", "touch ran"])
        .run();
    out.assert_code(64).assert_one_error_line();
    assert!(out.stderr.contains("X.509 v1 certificate"), "{out}");
    assert!(out.stderr.contains("extendedKeyUsage=clientAuth"), "{out}");
    assert!(!dir.has("ran"));
    assert!(node.keys().is_empty());
}

#[test]
fn tls_options_with_unreadable_or_bad_files_are_usage_errors() {
    let node = RedisNode::start();
    let dir = tempdir();
    fs::write(dir.join("garbage.pem"), "not a certificate\n").expect("write garbage");
    let url = format!("rediss://127.0.0.1:{}", node.port());
    let missing = dir.join("missing.pem").display().to_string();
    let garbage = dir.join("garbage.pem").display().to_string();
    let cases: [(&str, Vec<&str>); 3] = [
        ("missing CA file", vec!["--tls-ca", &missing]),
        ("--tls-cert without --tls-key", vec!["--tls-cert", &garbage]),
        (
            "missing client key",
            vec!["--tls-cert", &garbage, "--tls-key", &missing],
        ),
    ];
    for (what, extra) in cases {
        let out = base(&url, "bad", &dir)
            .args(&extra)
            .args(["-c", "touch ran"])
            .run();
        assert_eq!(out.code, Some(64), "[{what}] want 64\n{out}");
        out.assert_one_error_line();
        assert!(!dir.has("ran"), "[{what}] the command ran\n{out}");
    }
}

// ---------------------------------------------------------------------------
// 2. ACL users
// ---------------------------------------------------------------------------

/// The smallest command set with which every feature works (a run with its
/// holder record and heartbeat, --wait, status, unlock, --once-per, the run
/// history).
pub(crate) const MINIMAL_ACL: &[&str] = &[
    "+set",
    "+eval",
    "+get",
    "+del",
    "+pexpire",
    "+hset",
    "+publish",
    "+pttl",
    "+hgetall",
    "+subscribe",
    // The run history.
    "+lpush",
    "+ltrim",
    "+lindex",
    "+lrange",
    // The --wait queue, and `status` counting it; --limit's slot holders.
    "+exists",
    "+time",
    "+zadd",
    "+zrange",
    "+zrem",
    "+zcard",
    "+zscore",
    "+hget",
    "+hdel",
];

/// The rules of [`MINIMAL_ACL`] that only the --wait queue (and --limit)
/// needs.
const QUEUE_ACL: &[&str] = &[
    "+exists", "+time", "+zadd", "+zrange", "+zrem", "+zcard", "+zscore", "+hget", "+hdel",
];

/// `ACL SETUSER name reset on >password ~lock:* ~{lock:* resetchannels &{lock:* RULES...` on
/// `node`
/// (through the default user) and returns the URL that logs in as `name`.
fn acl_user(node: &RedisNode, name: &str, password: &str, rules: &[&str]) -> String {
    let mut cmd = redis::cmd("ACL");
    cmd.arg("SETUSER")
        .arg(name)
        .arg("reset")
        .arg("on")
        .arg(format!(">{password}"))
        .arg("~lock:*")
        .arg("~{lock:*")
        // resetchannels first: Redis 6.2 gives a reset user every channel
        // (acl-pubsub-default allchannels) and then refuses a pattern; 7.0
        // starts from none, where it changes nothing.
        .arg("resetchannels")
        .arg("&{lock:*");
    for rule in rules {
        cmd.arg(*rule);
    }
    let reply: String = node.cmd(&cmd);
    assert_eq!(reply, "OK", "ACL SETUSER {name}");
    format!("redis://{name}:{password}@127.0.0.1:{}", node.port())
}

fn string_keys(node: &RedisNode) -> Vec<String> {
    node.keys()
        .into_iter()
        .map(|k| String::from_utf8_lossy(&k).into_owned())
        .collect()
}

#[test]
fn acl_user_with_the_minimal_commands_can_run_wait_and_ask_status() {
    let node = RedisNode::start();
    let dir = tempdir();
    let url = acl_user(&node, "locker", "locker-pw", MINIMAL_ACL);
    let key = lock_key("acl");

    // A holder whose heartbeat has to extend (TTL 900ms, runs until `go`).
    let holder = base(&url, "acl", &dir)
        .args(["-t", "900ms", "-c", &format!("touch ran; {WAIT_FOR_GO}")])
        .spawn();
    await_marker(&dir, "ran", &holder);
    let record: Vec<(String, String)> =
        node.cmd(redis::cmd("HGETALL").arg(crate::support::keys("acl").holder(None)));
    assert!(!record.is_empty(), "no holder record written");

    // status, as the same user.
    let status = Test::new()
        .args(["status", "-r", &url, "-k", "acl"])
        .expect_code(1);
    assert!(
        status.stdout.contains("held"),
        "status should say held\n{status}"
    );

    // A waiter queues behind it (SUBSCRIBE) and is woken by the release (PUBLISH).
    let waiter = base(&url, "acl", &dir)
        .args(["--wait", "20s", "-c", "touch waited"])
        .spawn();
    let queue = crate::support::keys("acl").queue();
    assert!(
        wait_until(Duration::from_secs(10), || {
            node.cmd::<i64>(redis::cmd("ZCARD").arg(&queue)) == 1
        }),
        "the waiter did not queue\n{}",
        waiter.stderr_so_far()
    );
    // Past several heartbeats (TTL/3 = 300 ms): the lock is still ours.
    std::thread::sleep(Duration::from_millis(1200));
    assert!(node.exists(&key), "lock vanished while held");
    assert!(!dir.has("waited"), "waiter ran while the lock was held");
    touch(&dir, "go");
    let out = holder.wait();
    out.assert_code(0);
    let out = waiter.wait();
    out.assert_code(0);
    assert!(dir.has("waited"), "waiter did not run\n{out}");
    assert!(
        out.elapsed < Duration::from_secs(5),
        "waiter took {:?}: not woken by the release?\n{out}",
        out.elapsed
    );

    // --once-per and unlock --force, as the same user.
    base(&url, "acl", &dir)
        .args(["--once-per", "1h", "-c", "touch once"])
        .expect_code(0);
    assert!(dir.has("once"), "--once-per run did not run");
    node.set(&key, "someone-elses-token", 30_000);
    Test::new()
        .args(["unlock", "--force", "-r", &url, "-k", "acl"])
        .expect_code(0);
    assert!(!node.exists(&key), "unlock --force left the lock");

    let status = Test::new()
        .args(["status", "-r", &url, "-k", "acl"])
        .expect_code(0);
    assert!(status.stdout.contains("free"), "status\n{status}");
    // The holder, the waiter and the --once-per run, as the same user.
    let history = Test::new()
        .args(["history", "-r", &url, "-k", "acl"])
        .expect_code(0);
    assert_eq!(history.stdout.lines().count(), 4, "history\n{history}");
    let left: Vec<String> = string_keys(&node)
        .into_iter()
        .filter(|k| !k.starts_with("{lock:acl}:once:"))
        .collect();
    assert!(left.is_empty(), "keys left: {left:?}");
}

#[test]
fn acl_user_without_eval_fails_closed_with_noperm_and_leaves_no_key() {
    let node = RedisNode::start();
    let dir = tempdir();
    let rules: Vec<&str> = MINIMAL_ACL
        .iter()
        .copied()
        .filter(|r| *r != "+eval")
        .collect();
    let url = acl_user(&node, "limited", "limited-pw", &rules);
    let out = base(&url, "acl", &dir).args(["-c", "touch ran"]).run();

    let mut failures = Vec::new();
    if out.code != Some(69) {
        failures.push("exit status is not 69".to_string());
    }
    if !(out.stderr.starts_with("redlock-run: ") && out.stderr.matches('\n').count() == 1) {
        failures.push("stderr is not one 'redlock-run: ' line".to_string());
    }
    if !out.stderr.contains("the server's ACL denies this user") {
        failures.push("stderr does not report the ACL denial".to_string());
    }
    if !out.stderr.to_ascii_lowercase().contains("eval") {
        failures.push("stderr does not name the denied command (EVAL)".to_string());
    }
    if !out.stderr.contains("redis://limited:***@127.0.0.1") {
        failures.push("stderr does not name the node, redacted".to_string());
    }
    if dir.has("ran") {
        failures.push("the command ran".to_string());
    }
    // Checked with the default user: nothing may be left behind.
    let keys = string_keys(&node);
    if !keys.is_empty() {
        failures.push(format!(
            "keys left behind: {keys:?} (PTTL {} ms): the next run is blocked until it expires",
            node.pttl(lock_key("acl"))
        ));
    }
    assert!(failures.is_empty(), "{}\n{out}", failures.join("\n"));
}

/// The history is information only too: a user that may not LPUSH takes,
/// uses and releases the lock, and the log says the run was not recorded (the
/// append fails inside the release's script, which stands).
#[test]
fn acl_user_without_lpush_releases_and_says_the_run_was_not_recorded() {
    let node = RedisNode::start();
    let dir = tempdir();
    let rules: Vec<&str> = MINIMAL_ACL
        .iter()
        .copied()
        .filter(|r| *r != "+lpush")
        .collect();
    let url = acl_user(&node, "nolpush", "nolpush-pw", &rules);
    let out = base(&url, "acl", &dir)
        .args(["-vv", "-c", "touch ran"])
        .run();
    assert!(
        out.code == Some(0) && dir.has("ran"),
        "a refused history append must not cost the lock\n{out}"
    );
    assert!(
        out.stderr.contains("run not recorded in the history")
            && out.stderr.to_ascii_lowercase().contains("lpush"),
        "no word of the refused append\n{out}"
    );
    assert!(
        out.stderr.contains(": released"),
        "the release failed\n{out}"
    );
    assert!(
        string_keys(&node).is_empty(),
        "keys left: {:?}",
        string_keys(&node)
    );
}

#[test]
fn acl_user_without_hset_still_gets_the_lock() {
    // The holder record is information only: a user that may not write it
    // (no HSET) must still take, use and release the lock.
    let node = RedisNode::start();
    let dir = tempdir();
    let rules: Vec<&str> = MINIMAL_ACL
        .iter()
        .copied()
        .filter(|r| *r != "+hset")
        .collect();
    let url = acl_user(&node, "nohset", "nohset-pw", &rules);
    let out = base(&url, "acl", &dir).args(["-c", "touch ran"]).run();
    assert!(
        out.code == Some(0) && dir.has("ran"),
        "a failed holder record must not cost the lock\n{out}\nkeys left: {:?}",
        string_keys(&node)
    );
    assert!(
        string_keys(&node).is_empty(),
        "keys left: {:?}",
        string_keys(&node)
    );
}

#[test]
fn acl_user_without_the_queue_commands_still_waits_and_runs() {
    // The queue only orders waiters: a user that may not keep it must still
    // wait for the lock, be woken by the release, and leave nothing behind.
    let node = RedisNode::start();
    let dir = tempdir();
    let rules: Vec<&str> = MINIMAL_ACL
        .iter()
        .copied()
        .filter(|r| !QUEUE_ACL.contains(r))
        .collect();
    let url = acl_user(&node, "noqueue", "noqueue-pw", &rules);
    let holder = base(&url, "acl", &dir)
        .args(["-c", &format!("touch held; {WAIT_FOR_GO}")])
        .spawn();
    await_marker(&dir, "held", &holder);
    let waiter = base(&url, "acl", &dir)
        .args(["--wait", "20s", "-c", "touch waited"])
        .spawn();
    std::thread::sleep(Duration::from_millis(500));
    assert!(!dir.has("waited"), "the waiter ran while the lock was held");
    touch(&dir, "go");
    holder.wait().assert_code(0);
    let out = waiter.wait();
    out.assert_code(0);
    assert!(dir.has("waited"), "the waiter did not run\n{out}");
    // Alone, a single try takes the free lock although it may not read the queue.
    base(&url, "acl", &dir)
        .args(["-c", "touch once"])
        .expect_code(0);
    assert!(dir.has("once"));
    assert!(
        string_keys(&node).is_empty(),
        "keys left: {:?}",
        string_keys(&node)
    );
}

/// The warning lines of a run's stderr.
fn warnings(out: &crate::support::RunOutput) -> Vec<&str> {
    out.stderr_lines()
        .into_iter()
        .filter(|l| l.starts_with("redlock-run: warning: "))
        .collect()
}

/// A release the node refuses (the README's ACL line without +del): one
/// warning line, without -v, naming the node, what it answered and what
/// stays there for how long; counted by --report, --metrics-file and the
/// run's history record; the exit status stays the command's. The lock does
/// stay: the next run finds it held.
#[test]
fn a_release_the_acl_refuses_is_said_counted_and_recorded() {
    let node = RedisNode::start();
    let dir = tempdir();
    let url = crate::support::readme_acl_user(&node, "nodel", &["+del"]);
    let (report, metrics) = (dir.join("report.json"), dir.join("cron.prom"));
    let out = base(&url, "nd", &dir)
        .arg("--report")
        .arg(&report)
        .arg("--metrics-file")
        .arg(&metrics)
        .args(["-c", "touch ran; exit 3"])
        .run();
    assert_eq!(out.code, Some(3), "the command's status\n{out}");
    assert!(dir.has("ran"), "{out}");
    let shown = format!("redis://nodel:***@127.0.0.1:{}", node.port());
    let want = format!(
        "redlock-run: warning: lock:nd stays on {shown} until its TTL runs out, within 30s: the \
         node refused the release: the ACL refuses DEL"
    );
    assert_eq!(out.stderr_lines(), [want.as_str()], "one line\n{out}");
    let report: serde_json::Value =
        serde_json::from_str(&fs::read_to_string(&report).expect("the report")).expect("JSON");
    assert_eq!(
        report["node_outcomes"][0]["refused"],
        serde_json::json!(["release: the ACL refuses DEL"]),
        "{report}"
    );
    let metrics = fs::read_to_string(&metrics).expect("the metrics file");
    assert!(
        metrics.contains("\nredlock_run_refusals_total{key=\"nd\"} 1\n"),
        "{metrics}"
    );
    let history = Test::new()
        .args(["history", "--json", "-r", &node.url(), "-k", "nd"])
        .expect_code(0);
    let runs: serde_json::Value = serde_json::from_str(&history.stdout).expect("JSON");
    assert_eq!(runs.as_array().map(Vec::len), Some(1), "{runs}");
    assert_eq!(
        runs[0]["refused"],
        serde_json::json!([format!("release {shown}: the ACL refuses DEL")]),
        "{runs}"
    );
    assert!(
        node.exists(lock_key("nd")),
        "the refused release took the lock"
    );
    base(&url, "nd", &dir)
        .args(["-c", "touch again"])
        .expect_code(75);
}

/// A failed attempt leaves nothing on the node that granted it, whatever
/// the others refused (here EVAL itself, by their ACL, which applies
/// nothing, so nothing is asked of them to undo); where the granting node's
/// ACL refuses the undo's DEL, that is said as for a release.
#[test]
fn a_failed_attempt_leaves_nothing_where_it_was_granted() {
    let cluster = Cluster::new(3);
    let dir = tempdir();
    let noeval: Vec<String> = (1..3)
        .map(|i| crate::support::readme_acl_user(&cluster[i], "noeval", &["+eval"]))
        .collect();
    let granting = crate::support::readme_acl_user(&cluster[0], "locker", &[]);
    let urls = format!("{granting},{},{}", noeval[0], noeval[1]);
    let out = base(&urls, "fa", &dir)
        .args(["-c", "touch ran"])
        .expect_code(69);
    assert!(!dir.has("ran"), "{out}");
    for node in cluster.iter() {
        assert!(
            string_keys(node).is_empty(),
            "left on {}: {:?}\n{out}",
            node.url(),
            string_keys(node)
        );
    }
    assert!(warnings(&out).is_empty(), "nothing stays\n{out}");

    let nodel = crate::support::readme_acl_user(&cluster[0], "nodel", &["+del"]);
    let urls = format!("{nodel},{},{}", noeval[0], noeval[1]);
    let out = base(&urls, "fb", &dir)
        .args(["-c", "touch ran"])
        .expect_code(69);
    let shown = format!("redis://nodel:***@127.0.0.1:{}", cluster[0].port());
    let said = warnings(&out);
    assert_eq!(said.len(), 1, "{out}");
    assert!(
        said[0].contains(&format!("lock:fb stays on {shown} until its TTL runs out"))
            && said[0].ends_with("the ACL refuses DEL"),
        "{out}"
    );
}

/// A node whose ACL refuses PEXPIRE refuses every extension: said once (not
/// at every heartbeat), and the run goes on with the quorum of the others.
#[test]
fn an_extension_a_node_refuses_is_said_once() {
    let cluster = Cluster::new(3);
    let dir = tempdir();
    let nopx = crate::support::readme_acl_user(&cluster[2], "nopx", &["+pexpire"]);
    let urls = format!("{},{},{nopx}", cluster[0].url(), cluster[1].url());
    // A heartbeat every second: two extensions. The node timeout is the
    // longest the TTL allows: a node that answered later than 50 ms (the
    // default here) under a busy CI run was warned of too.
    let out = base(&urls, "ext", &dir)
        .args(["-t", "3s", "--node-timeout", "300ms", "-c", "sleep 2.2"])
        .expect_code(0);
    let shown = format!("redis://nopx:***@127.0.0.1:{}", cluster[2].port());
    let said = warnings(&out);
    assert_eq!(said.len(), 1, "{out}");
    assert!(
        said[0].contains(&format!("lock:ext on {shown} is not extended"))
            && said[0].ends_with("the node refused the extension: the ACL refuses PEXPIRE"),
        "{out}"
    );
}

// ---------------------------------------------------------------------------
// 3. Secrets
// ---------------------------------------------------------------------------

/// A node with `--requirepass SECRET` (plus an ACL user `locker` with the
/// same password), inspected as the default user.
fn password_node() -> CustomNode {
    let node = CustomNode::start(
        "127.0.0.1",
        |port, _| {
            [
                "--port",
                &port.to_string(),
                "--bind",
                "127.0.0.1",
                "--requirepass",
                SECRET,
            ]
            .map(String::from)
            .to_vec()
        },
        |port, _| client(&format!("redis://:{SECRET}@127.0.0.1:{port}")),
    );
    let mut cmd = redis::cmd("ACL");
    cmd.arg("SETUSER")
        .arg("locker")
        .arg("on")
        .arg(format!(">{SECRET}"))
        .arg("~lock:*")
        .arg("~{lock:*")
        // As in acl_user: 6.2 would refuse the pattern after allchannels.
        .arg("resetchannels")
        .arg("&{lock:*")
        .arg(MINIMAL_ACL);
    let reply: String = node.cmd(&cmd);
    assert_eq!(reply, "OK");
    node
}

/// Spawns `test` with a command that saves `env` and its raw
/// `/proc/self/environ`, then checks, while the command runs, that the secret
/// is not in redlock-run's `/proc/PID/cmdline` nor in the command's
/// environment; then that the run succeeded and printed no secret.
fn run_and_check_secrecy(what: &str, test: Test, node: &CustomNode, dir: &TempDir) -> String {
    for f in ["ready", "go", "env.txt", "environ.bin"] {
        remove(dir, f);
    }
    let running = test
        .args([
            "-c",
            &format!(
                "env > env.txt; cat /proc/self/environ > environ.bin; touch ready; {WAIT_FOR_GO}"
            ),
        ])
        .spawn();
    await_marker(dir, "ready", &running);
    let cmdline = fs::read(format!("/proc/{}/cmdline", running.pid())).expect("read cmdline");
    let environ = fs::read(dir.join("environ.bin")).expect("read environ.bin");
    let env = fs::read_to_string(dir.join("env.txt")).expect("read env.txt");
    assert!(
        node.exists(&lock_key("secret")),
        "[{what}] lock not held while the command runs"
    );
    touch(dir, "go");
    let out = running.wait();
    out.assert_code(0);

    let holds = |hay: &[u8]| hay.windows(SECRET.len()).any(|w| w == SECRET.as_bytes());
    let mut leaks = Vec::new();
    for (place, bytes) in [
        ("redlock-run's /proc/PID/cmdline", &cmdline[..]),
        ("the command's /proc/self/environ", &environ[..]),
        ("the command's env", env.as_bytes()),
        ("stdout", out.stdout.as_bytes()),
        ("stderr", out.stderr.as_bytes()),
    ] {
        if holds(bytes) {
            leaks.push(place);
        }
    }
    assert!(
        leaks.is_empty(),
        "[{what}] the password leaked into {leaks:?}\n--- env ---\n{env}\n{out}"
    );
    assert!(
        !env.lines().any(|l| l.starts_with("REDLOCK_PASSWORD=")),
        "[{what}] REDLOCK_PASSWORD reached the command\n{env}"
    );
    assert!(
        node.keys().is_empty(),
        "[{what}] keys left: {:?}",
        node.keys()
    );
    env
}

#[test]
fn password_from_env_or_file_reaches_no_output_argv_or_command() {
    let node = password_node();
    let dir = tempdir();
    let url = format!("redis://127.0.0.1:{}", node.port());
    let file = dir.join("password");
    // With a trailing newline, as `echo` or an editor writes it.
    fs::write(&file, format!("{SECRET}\n")).expect("write password file");
    fs::set_permissions(&file, std::os::unix::fs::PermissionsExt::from_mode(0o600))
        .expect("chmod password file");

    let verbose = || base(&url, "secret", &dir).arg("-vvv");
    run_and_check_secrecy(
        "REDLOCK_PASSWORD",
        verbose().env("REDLOCK_PASSWORD", SECRET),
        &node,
        &dir,
    );
    run_and_check_secrecy(
        "--password-file",
        verbose().arg("--password-file").arg(&file),
        &node,
        &dir,
    );
    let env = run_and_check_secrecy(
        "REDLOCK_USERNAME + REDLOCK_PASSWORD",
        verbose()
            .env("REDLOCK_USERNAME", "locker")
            .env("REDLOCK_PASSWORD", SECRET),
        &node,
        &dir,
    );
    assert!(
        env.contains("REDLOCK_KEY=secret"),
        "the command's env lost REDLOCK_KEY\n{env}"
    );
}

#[test]
fn wrong_password_fails_closed_without_echoing_any_password() {
    let node = password_node();
    let dir = tempdir();
    let wrong = "wr0ng-PW-QQQ";
    let url = format!("redis://127.0.0.1:{}", node.port());
    let file = dir.join("password");
    fs::write(&file, format!("{wrong}\n")).expect("write password file");
    fs::set_permissions(&file, std::os::unix::fs::PermissionsExt::from_mode(0o600))
        .expect("chmod password file");
    let in_url = format!("redis://:{wrong}@127.0.0.1:{}", node.port());
    let user_in_url = format!("redis://locker:{wrong}@127.0.0.1:{}", node.port());

    let cases: Vec<(&str, Test, String)> = vec![
        (
            "REDLOCK_PASSWORD",
            base(&url, "secret", &dir).env("REDLOCK_PASSWORD", wrong),
            url.clone(),
        ),
        (
            "--password-file",
            base(&url, "secret", &dir).arg("--password-file").arg(&file),
            url.clone(),
        ),
        (
            "password in the URL",
            base(&in_url, "secret", &dir),
            format!("redis://:***@127.0.0.1:{}", node.port()),
        ),
        (
            "user and password in REDLOCK_REDIS",
            Test::new()
                .current_dir(dir.path())
                .env("REDLOCK_REDIS", &user_in_url)
                .args(["-k", "secret"]),
            format!("redis://locker:***@127.0.0.1:{}", node.port()),
        ),
        (
            "no password at all",
            base(&url, "secret", &dir),
            url.clone(),
        ),
    ];
    for (what, test, shown) in cases {
        let out = test.args(["-vvv", "-c", "touch ran"]).run();
        assert_eq!(out.code, Some(69), "[{what}] want 69\n{out}");
        assert!(!dir.has("ran"), "[{what}] the command ran\n{out}");
        let all = format!("{}{}", out.stdout, out.stderr);
        assert!(
            !all.contains(wrong) && !all.contains(SECRET),
            "[{what}] a password was printed\n{out}"
        );
        assert!(
            out.stderr.contains(&shown),
            "[{what}] errors should name the node as {shown}\n{out}"
        );
        let reason = if what == "no password at all" {
            // NOAUTH: the server wants a password and got none.
            "auth"
        } else {
            "authentication failed: wrong user name or password"
        };
        assert!(
            out.stderr
                .to_ascii_lowercase()
                .contains(&reason.to_ascii_lowercase()),
            "[{what}] stderr should say {reason:?}\n{out}"
        );
    }
    assert!(node.keys().is_empty(), "keys left: {:?}", node.keys());
}

#[test]
fn password_in_redlock_redis_is_kept_from_the_command() {
    let node = password_node();
    let dir = tempdir();
    let with_password = format!("redis://:{SECRET}@127.0.0.1:{}", node.port());
    let test = Test::new()
        .current_dir(dir.path())
        .env("REDLOCK_REDIS", &with_password)
        .args(["-k", "secret", "-vvv"]);
    let env = run_and_check_secrecy("REDLOCK_REDIS with a password", test, &node, &dir);
    assert!(
        !env.lines().any(|l| l.starts_with("REDLOCK_REDIS=")),
        "REDLOCK_REDIS with a password reached the command\n{env}"
    );

    // Without a password in it, REDLOCK_REDIS is harmless and passed on.
    let plain = format!("redis://127.0.0.1:{}", node.port());
    let test = Test::new()
        .current_dir(dir.path())
        .env("REDLOCK_REDIS", &plain)
        .env("REDLOCK_PASSWORD", SECRET)
        .args(["-k", "secret"]);
    let env = run_and_check_secrecy("plain REDLOCK_REDIS", test, &node, &dir);
    assert!(
        env.lines().any(|l| l == format!("REDLOCK_REDIS={plain}")),
        "a password-less REDLOCK_REDIS should reach the command\n{env}"
    );
}

/// A generated password with URL delimiters in it: `/`, `?`, `#`, `@` and a
/// comma (which also separates node URLs).
const DELIMITED: &str = "Qx1/Yz2?Wv3#Ut4@Sr5,Po6";

/// Pieces of `password` between its delimiters: none may be printed.
fn pieces(password: &str) -> Vec<&str> {
    password
        .split(['/', '?', '#', '@', ','])
        .filter(|p| !p.is_empty())
        .collect()
}

/// A password holding `/`, `?`, `#`, `@` and `,`, written raw in the URL:
/// the node is reached with it, the command's environment gets no
/// REDLOCK_REDIS, and no line names any piece of it: not a wrong one's error,
/// not the error of a URL that does not parse.
#[test]
fn passwords_with_url_delimiters_work_and_are_never_printed() {
    let node = CustomNode::start(
        "127.0.0.1",
        |port, _| {
            [
                "--port",
                &port.to_string(),
                "--bind",
                "127.0.0.1",
                "--requirepass",
                DELIMITED,
            ]
            .map(String::from)
            .to_vec()
        },
        |port, _| {
            client(&format!(
                "redis://:{}@127.0.0.1:{port}",
                crate::support::redis_node::url_encode(DELIMITED)
            ))
        },
    );
    let dir = tempdir();
    let printed = |out: &crate::support::RunOutput, password: &str| -> Vec<String> {
        let all = format!("{}{}", out.stdout, out.stderr);
        pieces(password)
            .into_iter()
            .filter(|p| all.contains(p))
            .map(str::to_string)
            .collect()
    };
    let url = format!("redis://:{DELIMITED}@127.0.0.1:{}", node.port());
    let out = Test::new()
        .current_dir(dir.path())
        .env("REDLOCK_REDIS", &url)
        .args(["-k", "delim", "-vvv", "-c", "env > env.txt"])
        .run();
    out.assert_code(0);
    assert_eq!(printed(&out, DELIMITED), Vec::<String>::new(), "{out}");
    let env = fs::read_to_string(dir.join("env.txt")).expect("env.txt");
    assert!(
        !env.contains("REDLOCK_REDIS=") && pieces(DELIMITED).iter().all(|p| !env.contains(p)),
        "the password reached the command\n{env}"
    );
    assert!(out.stderr.contains("redis://:***@127.0.0.1:"), "{out}");

    let wrong = "Ab1/Cd2?Ef3#Gh4@Ij5";
    let port = node.port();
    for (url, code) in [
        (format!("redis://:{wrong}@127.0.0.1:{port}"), 69),
        (format!("redis://user:{wrong}@127.0.0.1:{port}/0"), 69),
        (format!("redis://:{wrong}@127.0.0.1:notaport"), 64),
        (format!("redis://:{wrong}@127.0.0.1:{port}/x"), 64),
        (format!("redis+cluster://:{wrong}@"), 64),
        (format!("redis+cluster://:{wrong}@127.0.0.1:0"), 64),
        (format!("redis+sentinel://:{wrong}@127.0.0.1:x/m"), 64),
        (format!("redis+sentinel://:{wrong}@127.0.0.1:{port}"), 64),
        (format!("bogus://:{wrong}@h"), 64),
    ] {
        let out = base(&url, "delim", &dir)
            .args(["-vvv", "-c", "touch ran"])
            .run();
        assert_eq!(out.code, Some(code), "{url}\n{out}");
        assert_eq!(printed(&out, wrong), Vec::<String>::new(), "{url}\n{out}");
        for status in [
            Test::new()
                .args(["status", "-r", &url, "-k", "delim"])
                .run(),
            Test::new()
                .args(["history", "-r", &url, "-k", "delim", "--json"])
                .run(),
        ] {
            assert_eq!(
                printed(&status, wrong),
                Vec::<String>::new(),
                "{url}\n{status}"
            );
        }
    }
    assert!(!dir.has("ran"));
}

/// A node argument that does not parse as a URL (a `/` or the `:` missing
/// after the scheme, no scheme at all) is still shown with whatever may be
/// its user-info hidden: in the run's error, in `status`'s and `history`'s,
/// and in the line that says a subcommand's options go after it.
#[test]
fn a_password_in_a_node_argument_that_does_not_parse_is_never_printed() {
    let dir = tempdir();
    for url in [
        format!("redis:/:{SECRET}@127.0.0.1:6379"),
        format!(":{SECRET}@127.0.0.1"),
        format!("redis//:{SECRET}@127.0.0.1"),
        format!("redis:/locker:{SECRET}@127.0.0.1/0"),
        format!("{SECRET}@127.0.0.1"),
    ] {
        let runs = [
            base(&url, "unparsed", &dir)
                .args(["-vvv", "-c", "touch ran"])
                .run(),
            Test::new()
                .args(["status", "-r", &url, "-k", "unparsed"])
                .run(),
            Test::new()
                .args(["history", "-r", &url, "-k", "unparsed", "--json"])
                .run(),
            Test::new()
                .args(["-k", "unparsed", "status", "-r", &url])
                .run(),
        ];
        for out in runs {
            assert_eq!(out.code, Some(64), "{url}\n{out}");
            let all = format!("{}{}", out.stdout, out.stderr);
            assert!(
                !all.contains(SECRET),
                "{url}: the password was printed\n{out}"
            );
            assert!(
                all.contains(":***@") || all.contains("'***@"),
                "{url}\n{out}"
            );
        }
    }
    assert!(!dir.has("ran"));
}

/// A server that repeats what it was sent: Redis answers a command it does
/// not know with its first arguments, and an AUTH renamed away carries the
/// password. Our own secrets are taken out of any server text shown,
/// whether the password came in the URL or from --password-file.
#[test]
fn a_server_that_repeats_our_password_does_not_get_it_printed() {
    let node = RedisNode::start_with(&["--rename-command", "AUTH", ""]);
    let dir = tempdir();
    let file = dir.join("password");
    fs::write(&file, format!("{SECRET}\n")).expect("write password file");
    fs::set_permissions(&file, std::os::unix::fs::PermissionsExt::from_mode(0o600))
        .expect("chmod password file");
    let port = node.port();
    let in_url = format!("redis://:{SECRET}@127.0.0.1:{port}");
    let bare = format!("redis://127.0.0.1:{port}");
    let runs = [
        base(&in_url, "echo", &dir).args(["-vvv", "-c", "touch ran"]),
        base(&bare, "echo", &dir)
            .arg("--password-file")
            .arg(&file)
            .args(["-vvv", "-c", "touch ran"]),
        Test::new().args(["status", "-r", &in_url, "-k", "echo"]),
        Test::new()
            .args(["status", "-r", &bare, "-k", "echo", "--password-file"])
            .arg(&file),
    ];
    for test in runs {
        let out = test.run();
        assert_eq!(out.code, Some(69), "{out}");
        let all = format!("{}{}", out.stdout, out.stderr);
        assert!(!all.contains(SECRET), "the password was printed\n{out}");
        // The server's own words are still shown, the password cut out.
        assert!(all.contains("the node refused AUTH"), "{out}");
        assert!(
            all.contains("'AUTH', with args beginning with: '***'"),
            "{out}"
        );
    }
    assert!(!dir.has("ran"));
    assert!(node.keys().is_empty(), "keys left: {:?}", node.keys());
}

// ---------------------------------------------------------------------------
// 4. Unix socket, IPv6, db numbers
// ---------------------------------------------------------------------------

/// Panics, with a clear message, if IPv6 loopback is unavailable: the test
/// must not pass without having tried.
fn require_ipv6_loopback() {
    if let Err(e) = TcpListener::bind("[::1]:0") {
        panic!(
            "IPv6 loopback (::1) is unavailable here ({e}); this test needs it \
             (enable IPv6 on lo: sysctl net.ipv6.conf.lo.disable_ipv6=0)"
        );
    }
}

#[test]
fn unix_socket_ipv6_and_tcp_nodes_form_one_quorum() {
    require_ipv6_loopback();
    let unix_pw = "unix-pw-777";
    let unix = CustomNode::start(
        "127.0.0.1",
        |_, dir| {
            vec![
                "--port".into(),
                "0".into(),
                "--unixsocket".into(),
                dir.join("redis.sock").display().to_string(),
                "--unixsocketperm".into(),
                "700".into(),
                "--requirepass".into(),
                unix_pw.into(),
            ]
        },
        |_, dir| {
            client(&format!(
                "unix://{}?db=1&pass={unix_pw}",
                dir.join("redis.sock").display()
            ))
        },
    );
    let v6 = CustomNode::start(
        "::1",
        |port, _| {
            ["--bind", "::1", "--port", &port.to_string()]
                .map(String::from)
                .to_vec()
        },
        |port, _| client(&format!("redis://[::1]:{port}")),
    );
    let tcp = RedisNode::start();
    let tcp_db2 = client(&format!("redis://127.0.0.1:{}/2", tcp.port()));
    let dir = tempdir();
    let sock = unix.path("redis.sock").display().to_string();
    let unix_url = format!("unix://{sock}?db=1&pass={unix_pw}");
    let v6_url = format!("redis://[::1]:{}", v6.port());
    let tcp_url = format!("redis://127.0.0.1:{}/2", tcp.port());
    let urls = [unix_url.as_str(), v6_url.as_str(), tcp_url.as_str()].join(",");
    let key = lock_key("mixed");

    let running = base(&urls, "mixed", &dir)
        .args(["-vv", "-c", &format!("touch ran; {WAIT_FOR_GO}")])
        .spawn();
    await_marker(&dir, "ran", &running);
    // The run starts its command once a quorum has granted; the third
    // node's grant may land just after (on a busy machine the unix node,
    // with its AUTH and SELECT, was 68 ms behind): wait for it.
    let read = || {
        [
            unix.get(&key),
            v6.get(&key),
            query::<Option<Vec<u8>>>(&tcp_db2, redis::cmd("GET").arg(&key)),
        ]
    };
    let mut values = read();
    wait_until(Duration::from_secs(5), || {
        values = read();
        values.iter().all(Option::is_some)
    });
    let in_db0 = [
        query::<i64>(
            &client(&format!("unix://{sock}?pass={unix_pw}")),
            redis::cmd("EXISTS").arg(&key),
        ),
        tcp.cmd::<i64>(redis::cmd("EXISTS").arg(&key)),
    ];
    touch(&dir, "go");
    let out = running.wait();
    out.assert_code(0);
    assert!(
        values.iter().all(|v| v.as_deref().is_some_and(is_token))
            && values[0] == values[1]
            && values[1] == values[2],
        "the same token should be on all three nodes (unix db 1, ::1, tcp db 2): {values:?}\n{out}"
    );
    assert_eq!(
        in_db0,
        [0, 0],
        "the lock went to db 0, not the URL's db\n{out}"
    );
    assert!(
        out.stderr.contains(&format!("unix://{sock}?db=1&pass=***")),
        "-vv should name the unix node with its password redacted\n{out}"
    );
    assert!(!out.stderr.contains(unix_pw), "password printed\n{out}");
    assert!(
        out.stderr.contains(&v6_url) && out.stderr.contains(&tcp_url),
        "-vv should name every node\n{out}"
    );

    let after = [
        unix.get(&key),
        v6.get(&key),
        query::<Option<Vec<u8>>>(&tcp_db2, redis::cmd("GET").arg(&key)),
    ];
    assert_eq!(after, [None, None, None], "not released on every node");
    assert!(unix.keys().is_empty() && v6.keys().is_empty(), "keys left");
    let mut left: Vec<Vec<u8>> = query(&tcp_db2, redis::cmd("KEYS").arg("*"));
    left.retain(|k| !crate::support::is_history_key(k));
    assert!(left.is_empty(), "keys left in tcp db 2: {left:?}");
}

// ---------------------------------------------------------------------------
// 5. Host names and malformed URLs
// ---------------------------------------------------------------------------

#[test]
fn host_names_resolve_and_unresolvable_ones_count_as_failed_nodes() {
    let cluster = Cluster::new(2);
    let dir = tempdir();

    // localhost
    let url = format!("redis://localhost:{}", cluster[0].port());
    base(&url, "names", &dir)
        .args(["-c", "touch ran"])
        .expect_code(0);
    assert!(dir.has("ran"), "command did not run via localhost");
    assert!(cluster[0].keys().is_empty(), "keys left");
    remove(&dir, "ran");

    // One name that cannot resolve, two good nodes: quorum 2 of 3.
    let bad = "redis://no-such-host.invalid:6379";
    let urls = format!("{bad},{}", cluster.urls());
    let out = base(&urls, "names", &dir)
        .args(["-v", "-c", "touch ran"])
        .expect_code(0);
    assert!(dir.has("ran"), "command did not run\n{out}");
    assert!(
        out.elapsed < Duration::from_secs(3),
        "an unresolvable host must not hold up the quorum: {:?}\n{out}",
        out.elapsed
    );
    assert!(
        out.stderr.contains("no-such-host.invalid"),
        "-v should name the failed node\n{out}"
    );
    assert!(
        cluster.holders(lock_key("names")).is_empty(),
        "not released"
    );
    remove(&dir, "ran");

    // All three unresolvable: no quorum.
    let urls = "redis://no-such-host.invalid:6379,redis://also-missing.invalid,\
                redis://third-missing.invalid:7000";
    let started = Instant::now();
    let out = base(urls, "names", &dir).args(["-c", "touch ran"]).run();
    assert_unavailable(&out, &dir, &["no-such-host.invalid"]);
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "took {:?}\n{out}",
        started.elapsed()
    );
}

#[test]
fn refused_nodes_count_against_the_quorum_and_are_named() {
    let cluster = Cluster::new(2);
    let node = &cluster[0];
    let dir = tempdir();
    let (a, b) = (free_port("127.0.0.1"), free_port("127.0.0.1"));
    let refused_a = format!("redis://127.0.0.1:{a}");
    let refused_b = format!("redis://u:{SECRET}@127.0.0.1:{b}/3");

    // 2 of 3 down: exit 69.
    let urls = [refused_a.as_str(), refused_b.as_str(), &node.url()].join(",");
    let out = base(&urls, "refused", &dir).args(["-c", "touch ran"]).run();
    assert_unavailable(&out, &dir, &["connection refused"]);
    assert!(
        out.stderr
            .contains(&format!("redis://u:***@127.0.0.1:{b}/3")),
        "the node should be named, redacted\n{out}"
    );
    assert!(!out.stderr.contains(SECRET), "password printed\n{out}");
    assert!(
        node.keys().is_empty(),
        "attempt not undone: {:?}",
        node.keys()
    );

    // 1 of 3 down: runs.
    let urls = format!("{refused_a},{}", cluster.urls());
    base(&urls, "refused", &dir)
        .args(["-c", "touch ran"])
        .expect_code(0);
    assert!(dir.has("ran"), "command did not run");
}

#[test]
fn malformed_urls_exit_64_without_echoing_passwords() {
    let dir = tempdir();
    let cases = [
        format!("redis://:{SECRET}@[::1"),
        format!("redis://u:{SECRET}@127.0.0.1:99999"),
        format!("http://u:{SECRET}@127.0.0.1:6380"),
        "redis://127.0.0.1:notaport".to_string(),
    ];
    for url in cases {
        let out = base(&url, "bad", &dir).args(["-c", "touch ran"]).run();
        assert_eq!(out.code, Some(64), "[{url}] want 64\n{out}");
        out.assert_one_error_line();
        assert!(!dir.has("ran"), "[{url}] the command ran\n{out}");
        assert!(
            !out.stderr.contains(SECRET),
            "[{url}] password printed\n{out}"
        );
    }
}

// ---------------------------------------------------------------------------
// A server that is not Redis
// ---------------------------------------------------------------------------

/// A web server as most answer what is not HTTP: `400 Bad Request`, and the
/// connection kept open a while. Serves until the test process ends.
fn http_like_server() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { continue };
            std::thread::spawn(move || {
                use std::io::{Read, Write};
                let mut buf = [0u8; 4096];
                if conn.read(&mut buf).is_ok() {
                    let _ = conn.write_all(
                        b"HTTP/1.1 400 Bad Request\r\nContent-Type: text/html\r\n\
                          Content-Length: 11\r\n\r\nBad Request",
                    );
                    std::thread::sleep(Duration::from_secs(2));
                }
            });
        }
    });
    port
}

/// `python3 -m http.server` on a free port, killed on drop.
struct PythonHttp(Child, u16);

impl PythonHttp {
    fn start(dir: &TempDir) -> PythonHttp {
        let port = free_port("127.0.0.1");
        let child = crate::support::cmd::command("python3")
            .args([
                "-m",
                "http.server",
                &port.to_string(),
                "--bind",
                "127.0.0.1",
            ])
            .current_dir(dir.path())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("python3 (apt-get install python3)");
        assert!(
            wait_until(Duration::from_secs(10), || std::net::TcpStream::connect((
                "127.0.0.1",
                port
            ))
            .is_ok()),
            "python3 -m http.server did not listen"
        );
        PythonHttp(child, port)
    }
}

impl Drop for PythonHttp {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A `redis://` URL at a port where something else listens (a web server):
/// one line naming the node and saying it does not speak the Redis
/// protocol, exit 69 as for any node that cannot be used; in a quorum the
/// others do without it.
#[test]
fn a_server_that_does_not_speak_redis_is_named_in_one_line() {
    let dir = tempdir();
    let web = format!("redis://127.0.0.1:{}", http_like_server());
    let out = base(&web, "not-redis", &dir)
        .args(["-c", "touch ran"])
        .run();
    assert_unavailable(
        &out,
        &dir,
        &[&format!(
            "{web}: does not speak the Redis protocol: it answered \"HTTP/1.1 400 Bad Request\""
        )],
    );

    // python's server answers a request it cannot parse with a bare page,
    // or closes without a word: either way, one line.
    let python = PythonHttp::start(&dir);
    let py = format!("redis://127.0.0.1:{}", python.1);
    let out = base(&py, "not-redis", &dir).args(["-c", "touch ran"]).run();
    assert_unavailable(&out, &dir, &[&format!("{py}: ")]);
    assert!(
        out.stderr
            .contains("does not speak the Redis protocol: it answered \"")
            || out
                .stderr
                .contains("without a reply: it does not seem to speak the Redis protocol"),
        "{out}"
    );

    // The same server behind rediss://.
    let tls = web.replace("redis://", "rediss://");
    let out = base(&tls, "not-redis", &dir)
        .args(["-c", "touch ran"])
        .run();
    assert_unavailable(&out, &dir, &[&format!("{tls}: does not speak TLS")]);

    // status says it on the node's one line.
    let out = Test::new()
        .args(["status", "-r", &web, "-k", "not-redis"])
        .run();
    out.assert_code(69);
    assert_eq!(out.stdout.lines().count(), 3, "{out}");
    assert!(
        out.stdout
            .contains(&format!("{web}: does not speak the Redis protocol")),
        "{out}"
    );

    // In a quorum, the two Redis nodes do without it: one warning line.
    let cluster = Cluster::new(2);
    let urls = format!("{},{web}", cluster.urls());
    let out = base(&urls, "not-redis", &dir)
        .args(["-c", "touch ran"])
        .expect_code(0);
    assert!(dir.has("ran"), "{out}");
    assert_eq!(out.stderr_lines().len(), 1, "{out}");
    assert!(
        out.stderr
            .contains(&format!("{web}: does not speak the Redis protocol"))
            && out.stderr.contains("the quorum did without it"),
        "{out}"
    );
}
