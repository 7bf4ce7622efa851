//! What a failed request says: one clause naming the node (without its
//! password), worded with the fix where there is one.

use std::fmt;
use std::time::Duration;

#[derive(Debug)]
pub struct NodeError {
    msg: String,
    /// The node did not answer in time (as opposed to answering an error or
    /// refusing the connection): not worth waiting for again in this run.
    timeout: bool,
    /// Failed before the request could be written (no connection): the
    /// node cannot have applied it.
    unsent: bool,
    /// Applied, but fewer replicas than --replicas acknowledged it.
    unreplicated: bool,
    /// Never written because redlock-run wrote a release behind it: this
    /// run's own doing, which says nothing about the node's health.
    superseded: bool,
}

/// The secrets this process uses (passwords from URLs, files and the
/// environment), filled as nodes are made (`Node::new`). A server may repeat
/// what it was sent in its error (`unknown command 'HELLO', with args
/// beginning with: '3' 'AUTH' 'default' '<password>'`), and that text goes
/// into our messages: every message of a `NodeError` is made without them.
static SECRETS: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());

/// Adds `secret` to those no message may show.
pub(super) fn keep_secret(secret: &str) {
    let mut known = SECRETS.lock().unwrap_or_else(|p| p.into_inner());
    if !secret.is_empty() && !known.iter().any(|s| s == secret) {
        known.push(secret.to_string());
        // Longest first: a secret inside another is not left half shown.
        known.sort_by_key(|s| std::cmp::Reverse(s.len()));
    }
}

/// `text` with each of `secrets` replaced by `***`.
pub fn without_secrets(text: &str, secrets: &[String]) -> String {
    secrets
        .iter()
        .filter(|s| !s.is_empty())
        .fold(text.to_string(), |t, s| t.replace(s.as_str(), "***"))
}

/// `msg` without the secrets in use (see `SECRETS`).
fn scrubbed(msg: String) -> String {
    let known = SECRETS.lock().unwrap_or_else(|p| p.into_inner());
    if known.iter().any(|s| msg.contains(s.as_str())) {
        without_secrets(&msg, &known)
    } else {
        msg
    }
}

impl NodeError {
    pub(super) fn new(msg: String) -> NodeError {
        NodeError {
            msg: scrubbed(msg),
            timeout: false,
            unsent: false,
            unreplicated: false,
            superseded: false,
        }
    }

    pub(super) fn timed_out(msg: String) -> NodeError {
        NodeError {
            msg: scrubbed(msg),
            timeout: true,
            unsent: false,
            unreplicated: false,
            superseded: false,
        }
    }

    pub fn is_timeout(&self) -> bool {
        self.timeout
    }

    /// Whether the request can have reached the node.
    pub fn maybe_applied(&self) -> bool {
        !self.unsent
    }

    /// The write landed on the node but not on enough of its replicas.
    pub fn is_unreplicated(&self) -> bool {
        self.unreplicated
    }

    pub(super) fn unsent(mut self) -> NodeError {
        self.unsent = true;
        self
    }

    /// Whether the request was withdrawn by a release written behind it.
    pub fn is_superseded(&self) -> bool {
        self.superseded
    }

    pub(super) fn superseded(mut self) -> NodeError {
        self.unsent = true;
        self.superseded = true;
        self
    }

    pub(super) fn unreplicated(mut self) -> NodeError {
        self.unreplicated = true;
        self
    }
}

impl fmt::Display for NodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.msg)
    }
}

/// A failed connect: worth one more try when it was only interrupted.
pub(super) enum Failure {
    Interrupted(NodeError),
    Other(NodeError),
}

impl Failure {
    pub(super) fn of(name: &str, timeout: Duration, e: &redis::RedisError) -> Failure {
        if interrupted(e) {
            Failure::Interrupted(wording(name, timeout, e))
        } else {
            Failure::Other(wording(name, timeout, e))
        }
    }

    pub(super) fn into_error(self) -> NodeError {
        match self {
            Failure::Interrupted(e) | Failure::Other(e) => e,
        }
    }
}

/// Whether `e` is EINTR from a read, write or connect.
pub(super) fn interrupted(e: &redis::RedisError) -> bool {
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        if let Some(io) = s.downcast_ref::<std::io::Error>() {
            return io.kind() == std::io::ErrorKind::Interrupted;
        }
        source = s.source();
    }
    e.to_string().contains("(os error 4)")
}

/// What to check when a TLS handshake fails.
const TLS_HINT: &str = "(check --tls-ca, that the URL's host name is in the certificate, and \
                        --tls-cert/--tls-key if the server wants a client certificate)";

/// A client-side error (I/O, timeout, refused, TLS, a cluster that cannot
/// be reached) as one clause about node `name`.
pub(super) fn wording(name: &str, timeout: Duration, e: &redis::RedisError) -> NodeError {
    let timed_out = e.is_timeout();
    let what = if let Some(what) = not_redis(e) {
        what
    } else if timed_out {
        no_answer(timeout)
    } else if e.is_connection_refusal() {
        "connection refused".to_string()
    } else if e.code() == Some("NOAUTH") || unauthenticated(&e.to_string()) {
        needs_password()
    } else if e.kind() == redis::ErrorKind::AuthenticationFailed || e.code() == Some("WRONGPASS") {
        wrong_password()
    } else if e.code() == Some("NOPERM") {
        permission_denied(e.detail().unwrap_or("no permission"))
    } else if e.kind() == redis::ErrorKind::ClusterConnectionNotFound
        || e.to_string().contains("Slot refresh error")
    {
        format!(
            "{e} (no node of the cluster could be used: check the seeds, and that the user may \
             run PING and CLUSTER SLOTS; see \"Connecting\" in the README)"
        )
    } else if let Some(hint) = e.code().and_then(topology_hint) {
        format!("{e} {hint}")
    } else if let Some(detail) = e
        .detail()
        .filter(|d| d.starts_with("Failed to connect to each cluster node"))
    {
        // The crate's wording of "no seed answered", with each seed's reason.
        let seeds = detail
            .trim_start_matches("Failed to connect to each cluster node")
            .trim()
            .trim_start_matches('(')
            .trim_end_matches(')');
        if is_tls_error(e) {
            format!(
                "TLS handshake failed: no seed node of the cluster could be reached: {seeds} \
                 {TLS_HINT}"
            )
        } else {
            format!("no seed node of the cluster could be reached: {seeds}")
        }
    } else if is_tls_error(e) {
        format!("TLS handshake failed: {e} {TLS_HINT}")
    } else {
        one_line(&e.to_string())
    };
    NodeError {
        msg: scrubbed(format!("{name}: {what}")),
        timeout: timed_out,
        unsent: false,
        unreplicated: false,
        superseded: false,
    }
}

/// What the node's server said, or did, that no Redis server would (see
/// `wire`): worded already.
#[derive(Debug)]
pub(super) struct NotRedis(pub(super) String);

impl fmt::Display for NotRedis {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for NotRedis {}

/// A server that does not speak the Redis protocol, as redlock-run's own
/// connection found (`NotRedis`) or the crate's parser did.
pub(super) fn not_redis(e: &redis::RedisError) -> Option<String> {
    // The crate keeps an io::Error as an `Arc<dyn Error>`, and an io::Error
    // hands out its inner error by get_ref only (its source is the inner
    // error's source).
    let io = std::error::Error::source(e)
        .and_then(|s| s.downcast_ref::<std::sync::Arc<dyn std::error::Error + Send + Sync>>())
        .and_then(|arc| arc.downcast_ref::<std::io::Error>());
    if let Some(n) = io
        .and_then(|io| io.get_ref())
        .and_then(|inner| inner.downcast_ref::<NotRedis>())
    {
        return Some(n.0.clone());
    }
    if e.kind() == redis::ErrorKind::Parse {
        return Some("does not speak the Redis protocol (another service on that port?)".into());
    }
    // rustls, on a plain-text answer to its handshake.
    e.to_string()
        .contains("InvalidContentType")
        .then(|| "does not speak TLS (a redis:// port, or another service on that port?)".into())
}

/// An error's text folded into one line (some errors of the crate span
/// several).
pub(super) fn one_line(text: &str) -> String {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join("; ")
}

/// Redis 7 answers a request of more than a few arguments (or a long
/// one) from a client that has not authenticated with a protocol error, and
/// closes the connection, before it would say NOAUTH: the acquire's EVAL
/// gets that. It means the same, and says so in its own words.
fn unauthenticated(text: &str) -> bool {
    text.contains("unauthenticated multibulk length")
        || text.contains("unauthenticated bulk length")
}

/// An error reply from the server.
pub(super) fn server_error(name: &str, e: &redis::ServerError) -> NodeError {
    let what = match e.code() {
        "NOPERM" => permission_denied(&e.to_string()),
        "NOAUTH" => needs_password(),
        "WRONGPASS" => wrong_password(),
        _ if unauthenticated(&e.to_string()) => needs_password(),
        code => match topology_hint(code) {
            Some(hint) => format!("{e} {hint}"),
            None => e.to_string(),
        },
    };
    NodeError::new(format!("{name}: {what}"))
}

/// An error a script caught with pcall and answered as text, `<COMMAND>:
/// <error>`. Redis words a command its ACL denies inside a script
/// `NOPERM ...` from 7.2 on, and `ERR The user executing the script can't run
/// this command or subcommand` before.
pub(super) fn script_error(name: &str, text: &str) -> NodeError {
    let what = if text.contains("NOAUTH") || unauthenticated(text) {
        needs_password()
    } else if text.contains("NOPERM") || text.contains("can't run this command") {
        permission_denied(text)
    } else {
        text.to_string()
    };
    NodeError::new(format!("{name}: {what}"))
}

/// A step of a connection's set-up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Step {
    Auth,
    Select(i64),
}

/// The server refused a step of the connection's set-up: nothing was
/// written after it (see `Wire::setup`), so the node cannot have applied
/// the request. In our words, with the server's own text after them.
pub(super) fn refused_setup(name: &str, step: Step, e: &redis::ServerError) -> NodeError {
    let text = one_line(e.details().unwrap_or(e.code()));
    let what = match step {
        Step::Auth if text.contains("without any password configured") => {
            "the node refused AUTH: it has no password set for the default user; remove the \
             password from the URL (or --password-file, REDLOCK_PASSWORD), or set one on the \
             server"
                .to_string()
        }
        Step::Auth if e.code() == "NOPERM" => permission_denied(&text),
        Step::Auth => wrong_password(),
        Step::Select(db) if e.code() == "NOPERM" => format!(
            "the node refused SELECT {db}: the server's ACL denies this user SELECT; allow it \
             (+select) or use database 0"
        ),
        Step::Select(db) if text.contains("out of range") => format!(
            "the node refused SELECT {db}: the server has no database {db} (its `databases` \
             setting is lower); give a database it has in the URL"
        ),
        Step::Select(db) => format!("the node refused SELECT {db} ({} {text})", e.code()),
    };
    NodeError::new(format!("{name}: {what}")).unsent()
}

/// What to do about an answer that means the URL names the wrong kind of node.
fn topology_hint(code: &str) -> Option<&'static str> {
    match code {
        "READONLY" => Some(
            "(the node is a replica: give the primary, a redis+sentinel:// URL that follows \
             failovers, or a redis+cluster:// URL)",
        ),
        "CROSSSLOT" | "MOVED" | "ASK" | "CLUSTERDOWN" => Some(
            "(the node is part of a Redis Cluster: give it as \
             redis+cluster://HOST:PORT[,HOST:PORT...])",
        ),
        "TRYAGAIN" => Some(
            "(the lock's hash slot is being moved between cluster nodes, and a request on \
             several keys waits until the move is done)",
        ),
        _ => None,
    }
}

pub(super) fn unexpected(name: &str, what: &str, reply: &str) -> NodeError {
    NodeError::new(format!("{name}: unexpected reply to {what}: {reply}"))
}

pub(super) fn no_answer(timeout: Duration) -> String {
    format!(
        "no answer within {} (--node-timeout)",
        humantime::format_duration(timeout)
    )
}

fn wrong_password() -> String {
    "authentication failed: wrong user name or password (check the URL, --password-file or \
     REDLOCK_PASSWORD)"
        .to_string()
}

fn needs_password() -> String {
    "authentication required: give the password with --password-file or REDLOCK_PASSWORD (or \
     in the URL)"
        .to_string()
}

fn permission_denied(detail: &str) -> String {
    format!(
        "the server's ACL denies this user: {detail}; see \"Connecting\" in the README for the \
         commands and keys redlock-run needs"
    )
}

pub(super) fn is_tls_error(e: &redis::RedisError) -> bool {
    let text = e.to_string().to_ascii_lowercase();
    [
        "certificate",
        "tls",
        "handshake",
        "unknownissuer",
        "notvalidforname",
        "alert",
        "unknownca",
    ]
    .iter()
    .any(|w| text.contains(w))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_are_taken_out_of_server_text() {
        let secrets = ["p@ss".to_string(), "p%40ss".to_string()];
        assert_eq!(
            without_secrets(
                "unknown command 'HELLO', with args beginning with: '3' 'AUTH' 'u' 'p@ss'",
                &secrets
            ),
            "unknown command 'HELLO', with args beginning with: '3' 'AUTH' 'u' '***'"
        );
        assert_eq!(without_secrets("x p%40ss y", &secrets), "x *** y");
        assert_eq!(without_secrets("nothing", &[String::new()]), "nothing");
    }

    #[test]
    fn a_missing_password_is_named_whatever_redis_answers() {
        for answer in [
            "-NOAUTH Authentication required.\r\n",
            "-ERR Protocol error: unauthenticated multibulk length\r\n",
            "-ERR Protocol error: unauthenticated bulk length\r\n",
        ] {
            let v = redis::parse_redis_value(answer.as_bytes()).expect("parses");
            let e = v.extract_error().expect_err("an error");
            let msg = wording("redis://h:1", Duration::from_secs(1), &e).to_string();
            assert!(
                msg.starts_with(
                    "redis://h:1: authentication required: give the password with \
                                 --password-file or REDLOCK_PASSWORD"
                ),
                "{answer}: {msg}"
            );
        }
        let refused = redis::parse_redis_value(
            b"-WRONGPASS invalid username-password pair or user is disabled.\r\n",
        )
        .expect("parses")
        .extract_error()
        .expect_err("an error");
        let msg = wording("n", Duration::from_secs(1), &refused).to_string();
        assert!(msg.contains("authentication failed"), "{msg}");
    }
}
