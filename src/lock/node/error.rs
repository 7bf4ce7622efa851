//! What a failed request says: one clause naming the node (without its
//! password), worded with the fix where there is one, and a kind for the
//! callers that branch on it.

use std::fmt;
use std::time::{Duration, Instant};

use redis::Value;

use super::broken::Broken;

/// What went wrong, for callers that branch on it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// The node did not answer in time: not worth waiting for again in
    /// this run.
    Timeout,
    /// It could not be reached (refused, unreachable, a name that does not
    /// resolve, a connection it ended).
    Unreachable,
    /// It refused the connection's set-up (AUTH, SELECT) or TLS.
    Refused,
    /// It answered the request with an error.
    Server,
    /// It does not speak the Redis protocol, or said something no Redis
    /// server would.
    Protocol,
    /// The write landed on the node but on fewer replicas than --replicas.
    Unreplicated,
    /// The write landed, on a node that started less than the restart
    /// grace ago and may have forgotten locks it granted before.
    Restarted,
    /// The write landed, but the node cannot prove it is on its disk
    /// (--durable).
    Undurable,
    /// A Sentinel group or a Cluster could not say where the lock lives.
    Topology,
    /// Never written: a release went out instead (see `State::submit`).
    Withdrawn,
}

#[derive(Clone, Debug)]
pub(crate) struct NodeError {
    msg: String,
    kind: Kind,
    /// The request may have reached the node (and been applied there).
    sent: bool,
    /// `Restarted`: when its vote counts again (None: not while it cannot
    /// tell when it started).
    back_at: Option<Instant>,
    /// `Server`: the error reply's code (`WRONGTYPE`, `NOPERM`).
    code: Option<Box<str>>,
}

impl std::error::Error for NodeError {}

impl fmt::Display for NodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.msg)
    }
}

impl NodeError {
    pub(super) fn new(kind: Kind, msg: String, sent: bool) -> NodeError {
        NodeError {
            msg,
            kind,
            sent,
            back_at: None,
            code: None,
        }
    }

    /// The same failure said of node `name` (the error told what failed,
    /// a name's lookup shared by the nodes, without naming one).
    pub(super) fn named(&self, name: &str) -> NodeError {
        NodeError {
            msg: format!("{name}: {}", self.msg),
            ..self.clone()
        }
    }

    /// The code of the error reply it was (`WRONGTYPE`), where it was one.
    pub(crate) fn code(&self) -> Option<&str> {
        self.code.as_deref()
    }

    pub(crate) fn kind(&self) -> Kind {
        self.kind
    }

    pub(crate) fn is_timeout(&self) -> bool {
        self.kind == Kind::Timeout
    }

    /// Whether the request can have reached the node.
    pub(crate) fn maybe_applied(&self) -> bool {
        self.sent
    }

    /// The write landed on the node but does not count as its vote: too
    /// few replicas have it, or the node may forget it (see
    /// `Node::uncounted`). It is to be taken back.
    pub(crate) fn is_uncounted(&self) -> bool {
        matches!(
            self.kind,
            Kind::Unreplicated | Kind::Restarted | Kind::Undurable
        )
    }

    /// A node that sits out its restart grace: Some(when its vote counts
    /// again), or Some(None) while it cannot tell when it started.
    pub(crate) fn restarted(&self) -> Option<Option<Instant>> {
        (self.kind == Kind::Restarted).then_some(self.back_at)
    }

    /// The error with each of `secrets` (the passwords in use) taken out of
    /// its text: a server may repeat what it was sent in its error
    /// (`unknown command 'HELLO', with args beginning with: '3' 'AUTH'
    /// 'default' '<password>'`), and that text goes into our messages.
    pub(super) fn without(mut self, secrets: &[String]) -> NodeError {
        if secrets
            .iter()
            .any(|s| !s.is_empty() && self.msg.contains(s.as_str()))
        {
            self.msg = without_secrets(&self.msg, secrets);
        }
        self
    }

    /// The same failure for another request that met it (a connection that
    /// failed under several), with that request's own `sent`.
    pub(super) fn for_request(&self, sent: bool) -> NodeError {
        NodeError {
            sent,
            ..self.clone()
        }
    }
}

/// `text` with each of `secrets` replaced by `***`, the longest first (a
/// secret inside another is not left half shown).
pub(super) fn without_secrets(text: &str, secrets: &[String]) -> String {
    let mut sorted: Vec<&String> = secrets.iter().filter(|s| !s.is_empty()).collect();
    sorted.sort_by_key(|s| std::cmp::Reverse(s.len()));
    sorted
        .into_iter()
        .fold(text.to_string(), |t, s| t.replace(s.as_str(), "***"))
}

/// A step of a connection's set-up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Step {
    Auth,
    Select(i64),
    /// A Sentinel group's primary asked whether it is one.
    Role,
}

/// Whether a server's own words (a script's step, as `scripts` answers it)
/// say its ACL refused the step: `NOPERM ...` (Redis 7.2 on), `... can't run
/// this command ...` (before), `ACL failure in script` (Valkey).
pub(crate) fn refused_by_acl(text: &str) -> bool {
    text.contains("NOPERM")
        || text.contains("can't run this command")
        || text.contains("ACL failure")
}

/// A request that was never written: a release made after it went out
/// instead. This run's own doing, which says nothing of the node.
pub(super) fn withdrawn(name: &str) -> NodeError {
    NodeError::new(
        Kind::Withdrawn,
        format!("{name}: not sent, a release went out instead"),
        false,
    )
}

/// A node up for only `up` (None: it does not say), less than `grace`,
/// without every write on disk: it may have restarted and forgotten locks
/// it granted, so a write it answered is no vote until its uptime reaches
/// the grace.
pub(super) fn restarted(
    name: &str,
    up: Option<Duration>,
    grace: Duration,
    now: Instant,
) -> NodeError {
    let grace_s = secs(grace);
    let Some(up) = up else {
        return NodeError::new(
            Kind::Restarted,
            format!(
                "{name}: cannot tell when it started (INFO refused or renamed: allow +info), so \
                 it may have forgotten locks it granted: its vote does not count (--restart-grace \
                 {grace_s}; 0 trusts a node you know)"
            ),
            true,
        );
    };
    let left = grace.saturating_sub(up);
    NodeError {
        back_at: Some(now + left),
        ..NodeError::new(
            Kind::Restarted,
            format!(
                "{name}: started {} ago without appendfsync always, so it may have forgotten \
                 locks it granted: its vote counts again in {} (--restart-grace {grace_s})",
                humantime::format_duration(Duration::from_secs(up.as_secs())),
                secs(left.max(Duration::from_secs(1)))
            ),
            true,
        )
    }
}

/// A write a --durable run cannot count: `why` the node cannot prove it
/// is on its disk.
pub(super) fn undurable(name: &str, why: &str) -> NodeError {
    NodeError::new(
        Kind::Undurable,
        format!("{name}: {why} (--durable counts a vote only once it is on disk)"),
        true,
    )
}

/// A duration in whole seconds (up, for what is still to come).
fn secs(d: Duration) -> humantime::FormattedDuration {
    humantime::format_duration(Duration::from_secs(
        d.as_secs() + u64::from(d.subsec_nanos() > 0),
    ))
}

/// A request that was not answered within `timeout`.
pub(super) fn timed_out(name: &str, timeout: Duration) -> NodeError {
    NodeError::new(
        Kind::Timeout,
        format!("{name}: {}", no_answer(timeout)),
        true,
    )
}

/// A connection that broke, for the requests it carried (`sent`: whether
/// the one at hand may have reached the server). `steps` are the set-up's.
pub(super) fn broken(
    name: &str,
    timeout: Duration,
    b: &Broken,
    steps: &[Step],
    sent: bool,
) -> NodeError {
    let (kind, what) = match b {
        Broken::ConnectTimeout => (Kind::Timeout, no_answer(timeout)),
        Broken::Connect(std::io::ErrorKind::ConnectionRefused, _) => {
            (Kind::Unreachable, "connection refused".to_string())
        }
        Broken::Connect(_, e) => (Kind::Unreachable, format!("cannot connect: {e}")),
        // A certificate chain past what rustls reads (64 KiB) is no sign of
        // a port without TLS: say what it is.
        Broken::Tls(e) if e.contains("TooLarge") => (
            Kind::Refused,
            format!(
                "TLS handshake failed: the server sent more than a TLS client reads in one \
                 handshake message (64 KiB; {e}): its certificate file holds too much (a whole \
                 CA bundle?); give it the server's certificate and its intermediates only"
            ),
        ),
        Broken::Tls(e)
            if e.contains("InvalidContentType") || e.contains("UnknownProtocolVersion") =>
        {
            (
                Kind::Refused,
                "does not speak TLS (a redis:// port, or another service on that port?)"
                    .to_string(),
            )
        }
        Broken::Tls(e) => (
            Kind::Refused,
            format!("TLS handshake failed: {e} {TLS_HINT}"),
        ),
        Broken::Setup(replies, why) => return refused_setup(name, steps, replies, why),
        Broken::Closed { partial: true, .. } => (
            Kind::Protocol,
            "the server ended the connection in the middle of a reply".to_string(),
        ),
        Broken::Closed {
            first: true, reset, ..
        } => (
            Kind::Protocol,
            format!(
                "{} the connection without a reply: {SILENT}",
                if *reset { "reset" } else { "closed" }
            ),
        ),
        Broken::Closed { first: false, .. } => {
            (Kind::Unreachable, "the connection was closed".to_string())
        }
        Broken::Io(e) => (Kind::Unreachable, one_line(e)),
        Broken::Bulk { .. }
        | Broken::Values { .. }
        | Broken::Reply { .. }
        | Broken::Line { .. }
        | Broken::NotResp(_)
        | Broken::Malformed => (Kind::Protocol, b.to_string()),
        Broken::Unasked => (
            Kind::Protocol,
            "sent a reply to nothing asked (does it speak the Redis protocol?)".to_string(),
        ),
    };
    NodeError::new(kind, format!("{name}: {what}"), sent)
}

/// The server refused a step of the connection's set-up (`steps[i]` for
/// the i-th reply): nothing was written after it (see `link`), so no
/// request on that connection can have been applied. In our words.
fn refused_setup(name: &str, steps: &[Step], replies: &[Value], why: &str) -> NodeError {
    let failed = replies.iter().enumerate().find_map(|(i, v)| match v {
        Value::ServerError(e) => Some((steps.get(i).copied(), e)),
        _ => None,
    });
    let what = match failed {
        None => why.to_string(),
        Some((step, e)) => {
            let text = one_line(e.details().unwrap_or(e.code()));
            match step {
                Some(Step::Auth) if text.contains("without any password configured") => {
                    "the node refused AUTH: it has no password set for the default user; remove \
                     the password from the URL (or --password-file, REDLOCK_PASSWORD), or set one \
                     on the server"
                        .to_string()
                }
                Some(Step::Auth) if e.code() == "NOPERM" => permission_denied(&text),
                Some(Step::Auth)
                    if e.code() == "WRONGPASS" || text.contains("invalid password") =>
                {
                    wrong_password()
                }
                Some(Step::Auth) => format!("the node refused AUTH ({} {text})", e.code()),
                Some(Step::Select(db)) if e.code() == "NOPERM" => format!(
                    "the node refused SELECT {db}: the server's ACL denies this user SELECT; \
                     allow it (+select) or use database 0"
                ),
                Some(Step::Select(db)) if text.contains("out of range") => format!(
                    "the node refused SELECT {db}: the server has no database {db} (its \
                     `databases` setting is lower); give a database it has in the URL"
                ),
                Some(Step::Select(db)) => format!("the node refused SELECT {db} ({text})"),
                Some(Step::Role) | None => server_text(e),
            }
        }
    };
    NodeError::new(Kind::Refused, format!("{name}: {what}"), false)
}

/// An error reply from the server to a request. Some say the request was
/// not run at all, so nothing of it can have been applied: an ACL that
/// refuses the command itself or the keys it names (a refusal inside a
/// script, which may follow writes, says `script`), a redirect, a replica, a
/// cluster or server not ready, a missing password.
pub(super) fn server_error(name: &str, e: &redis::ServerError) -> NodeError {
    let not_run = match e.code() {
        "NOPERM" => !e.details().unwrap_or("").contains("script"),
        code => matches!(
            code,
            "MOVED"
                | "ASK"
                | "READONLY"
                | "CROSSSLOT"
                | "CLUSTERDOWN"
                | "TRYAGAIN"
                | "LOADING"
                | "MASTERDOWN"
                | "NOAUTH"
                | "WRONGPASS"
        ),
    };
    NodeError {
        code: Some(e.code().into()),
        ..NodeError::new(
            Kind::Server,
            format!("{name}: {}", server_text(e)),
            !not_run,
        )
    }
}

/// An error reply from a node given as a Cluster (`redis+cluster://`): a
/// redirect it still answered once the request had been sent on as often as
/// it may be, in words about the cluster (the advice for a plain URL, to
/// give it as a Cluster, is no advice here).
pub(super) fn cluster_error(name: &str, e: &redis::ServerError) -> NodeError {
    let text = one_line(&format!("{} {}", e.code(), e.details().unwrap_or("")));
    let hint = match e.code() {
        "MOVED" | "ASK" => {
            "(the cluster kept sending the request elsewhere: its slot map is changing, a \
             resharding or failover under way, or its nodes disagree about who serves the lock's \
             slot; see CLUSTER NODES)"
        }
        "CLUSTERDOWN" => "(the cluster is down: see CLUSTER INFO)",
        _ => return server_error(name, e),
    };
    NodeError::new(
        Kind::Server,
        format!("{name}: {} {hint}", text.trim_end()),
        true,
    )
}

/// An error reply in our words, with the fix where there is one.
fn server_text(e: &redis::ServerError) -> String {
    let text = one_line(&format!("{} {}", e.code(), e.details().unwrap_or("")));
    match e.code() {
        "NOPERM" => permission_denied(text.trim_start_matches("NOPERM ")),
        "NOAUTH" => needs_password(),
        "WRONGPASS" => wrong_password(),
        _ if unauthenticated(&text) => needs_password(),
        code => match topology_hint(code) {
            Some(hint) => format!("{text} {hint}"),
            None => text.trim_start_matches("ERR ").to_string(),
        },
    }
}

/// An error a script caught with pcall and answered as text, `<COMMAND>:
/// <error>`. Redis words a command its ACL denies inside a script
/// `NOPERM ...` from 7.2 on, and `ERR The user executing the script can't run
/// this command or subcommand` before; Valkey `ERR ACL failure in script`.
pub(super) fn script_error(name: &str, text: &str) -> NodeError {
    let what = if text.contains("NOAUTH") || unauthenticated(text) {
        needs_password()
    } else if refused_by_acl(text) {
        permission_denied(text)
    } else {
        one_line(text)
    };
    NodeError::new(Kind::Server, format!("{name}: {what}"), true)
}

/// A reply the request did not expect.
pub(super) fn unexpected(name: &str, what: &str, reply: &Value) -> NodeError {
    let mut shown = format!("{reply:?}");
    shown.truncate(200);
    NodeError::new(
        Kind::Protocol,
        format!("{name}: unexpected reply to {what}: {shown}"),
        true,
    )
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

/// Redis 7 answers a request of more than a few arguments (or a long one)
/// from a client that has not authenticated with a protocol error, and
/// closes the connection, before it would say NOAUTH: the acquire's EVAL
/// gets that. It means the same, and says so in its own words.
fn unauthenticated(text: &str) -> bool {
    text.contains("unauthenticated multibulk length")
        || text.contains("unauthenticated bulk length")
}

/// A sentinel refused our credentials (or wants some).
pub(super) const SENTINEL_AUTH: &str = "authentication failed at the sentinel (the sentinels' \
                                        password comes from --sentinel-password-file or \
                                        REDLOCK_SENTINEL_PASSWORD, the data nodes' from the \
                                        URL, --password-file or REDLOCK_PASSWORD)";

/// What to check when a TLS handshake fails.
pub(super) const TLS_HINT: &str = "(check --tls-ca, that the URL's host name is in the \
                                   certificate, and --tls-cert/--tls-key if the server wants a \
                                   client certificate)";

/// What a server that ends a fresh connection without a word may be.
const SILENT: &str = "it does not seem to speak the Redis protocol (another service on that \
                      port, or a TLS port that wants rediss://?)";

/// An error's text folded into one line.
pub(super) fn one_line(text: &str) -> String {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join("; ")
}

pub(super) fn no_answer(timeout: Duration) -> String {
    format!(
        "no answer within {} (--node-timeout)",
        humantime::format_duration(timeout)
    )
}

pub(super) fn wrong_password() -> String {
    "authentication failed: wrong user name or password (check the URL, --password-file or \
     REDLOCK_PASSWORD)"
        .to_string()
}

pub(super) fn needs_password() -> String {
    "authentication required: give the password with --password-file or REDLOCK_PASSWORD (or \
     in the URL)"
        .to_string()
}

pub(super) fn permission_denied(detail: &str) -> String {
    format!(
        "the server's ACL denies this user: {detail}; see \"Connecting\" in the README for the \
         commands and keys redlock-run needs"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn error(reply: &str) -> redis::ServerError {
        match redis::parse_redis_value(reply.as_bytes()).expect("parses") {
            Value::ServerError(e) => e,
            other => panic!("not an error: {other:?}"),
        }
    }

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
            let msg = server_error("redis://h:1", &error(answer)).to_string();
            assert!(
                msg.starts_with(
                    "redis://h:1: authentication required: give the password with \
                     --password-file or REDLOCK_PASSWORD"
                ),
                "{answer}: {msg}"
            );
        }
        let refused = error("-WRONGPASS invalid username-password pair or user is disabled.\r\n");
        let msg = server_error("n", &refused).to_string();
        assert!(msg.contains("authentication failed"), "{msg}");
    }

    #[test]
    fn a_command_refused_before_it_ran_was_not_applied() {
        let outright = error("-NOPERM this user has no permissions to run the 'eval' command\r\n");
        assert!(!server_error("n", &outright).maybe_applied());
        let keys = error("-NOPERM No permissions to access a key\r\n");
        assert!(!server_error("n", &keys).maybe_applied());
        // Inside a script, after what the script wrote before it.
        let inside = error(
            "-NOPERM User u has no permissions to run the 'del' command script: abc, on \
             @user_script:3.\r\n",
        );
        assert!(server_error("n", &inside).maybe_applied());
        let old = error(
            "-ERR The user executing the script can't run this command or subcommand script: \
             abc, on @user_script:3.\r\n",
        );
        assert!(server_error("n", &old).maybe_applied());
        let moved = error("-MOVED 11313 127.0.0.1:7001\r\n");
        assert!(!server_error("n", &moved).maybe_applied());
        let oom = error("-OOM command not allowed when used memory > 'maxmemory'.\r\n");
        assert!(server_error("n", &oom).maybe_applied());
    }

    #[test]
    fn a_refused_setup_names_the_step_and_was_not_applied() {
        let steps = [Step::Auth, Step::Select(99)];
        let no_password = Value::ServerError(error(
            "-ERR AUTH <password> called without any password configured for the default user. \
             Are you sure your configuration is correct?\r\n",
        ));
        let e = refused_setup("n", &steps, &[no_password, Value::Okay], "refused");
        assert!(
            e.to_string()
                .contains("no password set for the default user"),
            "{e}"
        );
        assert!(!e.maybe_applied());
        let no_db = Value::ServerError(error("-ERR DB index is out of range\r\n"));
        let e = refused_setup("n", &steps, &[Value::Okay, no_db], "refused");
        assert!(e.to_string().contains("has no database 99"), "{e}");
        assert_eq!(e.kind(), Kind::Refused);
    }
}
