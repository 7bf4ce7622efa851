//! What each node says of itself, read-only: whether it answers and how
//! fast, its version, role, persistence, eviction policy, clock, topology
//! and certificate, and whether the nodes are independent of each other.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::judge::{self, Read};
use super::{Finding, Level, Report};
use crate::admin::{PerNode, by_node, limit};
use crate::cli::Config;
use crate::lock::node::{self, ConfigGet, Fields, Info, Nodes, Ping, Request, Shape, Time};
use crate::lock::quorum;

/// PINGs timed per node, after one that opens the connection.
const SAMPLES: usize = 10;

/// A clock further off than this is worth a warning.
const SKEW: Duration = Duration::from_secs(1);

/// A certificate that expires sooner than this is worth a warning.
const EXPIRY_DAYS: i64 = 14;

/// `request` to the nodes of `which`; the answers in node order (`None`
/// for the others, and for a node that did not answer in time).
fn ask<R: Request + 'static>(nodes: &Nodes, which: &[usize], request: R) -> PerNode<R::Answer> {
    by_node(
        nodes.len(),
        quorum::on_each(nodes, which, request, limit(nodes)),
    )
}

/// Every read-only finding; how many nodes answered.
pub(super) fn all(nodes: &Nodes, c: &Config, report: &mut Report) -> usize {
    let near = c.keys.lock().to_vec();
    if let Some(msg) = nodes.same_server() {
        report.quorum.push(
            Finding::new("independent", Level::Unfit, msg)
                .advice("give each server once, and an odd number of independent servers"),
        );
    }
    let up = reach(nodes, &near, c.node_timeout, report);
    let infos = ask(
        nodes,
        &up,
        Info {
            near: near.clone(),
            cluster: false,
        },
    );
    for &i in &up {
        match &infos[i] {
            Some(Ok(f)) => {
                version(i, f, report);
                role(i, f, report);
            }
            Some(Err(e)) => report.on(
                i,
                Finding::new("info", Level::CannotTell, format!("INFO: {e}"))
                    .advice("allow +info to let check read the role, version and persistence"),
            ),
            None => {}
        }
    }
    independent(nodes, &up, &infos, report);
    persistence(nodes, &up, &near, &infos, c, report);
    clock(nodes, &up, &near, report);
    topology(nodes, &up, &near, c, report);
    certificates(nodes, &up, report);
    up.len()
}

/// PING, timed: who answers (and lets us in), and the slowest of a few
/// round trips against the node timeout. The nodes that answered.
fn reach(nodes: &Nodes, near: &[u8], timeout: Duration, report: &mut Report) -> Vec<usize> {
    let all: Vec<usize> = (0..nodes.len()).collect();
    let ping = || Ping {
        near: near.to_vec(),
    };
    let first = ask(nodes, &all, ping());
    let mut up = Vec::new();
    for (i, answer) in first.iter().enumerate() {
        match answer {
            Some(Ok(())) => up.push(i),
            Some(Err(e)) if node::denied(&e.to_string()) => {
                up.push(i);
                report.on(
                    i,
                    Finding::new("reachable", Level::CannotTell, format!("PING: {e}"))
                        .advice("allow +ping to let check time the node"),
                );
            }
            Some(Err(e)) => report.on(i, Finding::new("reachable", Level::Unfit, e.to_string())),
            None => report.on(
                i,
                Finding::new("reachable", Level::Unfit, "no answer in time")
                    .advice("check the address, the network and --node-timeout"),
            ),
        }
    }
    let mut slowest = vec![Duration::ZERO; nodes.len()];
    let mut timed = vec![0usize; nodes.len()];
    for _ in 0..SAMPLES {
        for r in quorum::on_each(nodes, &up, ping(), limit(nodes)) {
            if r.result.is_ok() {
                slowest[r.node] = slowest[r.node].max(r.latency);
                timed[r.node] += 1;
            }
        }
    }
    for &i in &up {
        if timed[i] == 0 {
            continue;
        }
        let says = format!(
            "answers; the slowest of {} round trips took {:.1?} (--node-timeout {})",
            timed[i],
            slowest[i],
            humantime::format_duration(timeout)
        );
        report.on(
            i,
            if slowest[i] > timeout / 2 {
                Finding::new("round-trip", Level::Warn, says).advice(
                    "above half of the node timeout, a busy moment makes the node miss rounds: \
                     raise --node-timeout (at most TTL/10) or bring the node closer",
                )
            } else {
                Finding::new("round-trip", Level::Ok, says)
            },
        );
    }
    up
}

fn field<'a>(f: &'a Fields, name: &str) -> Option<&'a str> {
    f.get(name).map(String::as_str)
}

fn version(i: usize, f: &Fields, report: &mut Report) {
    let Some(v) = field(f, "redis_version") else {
        return;
    };
    // Valkey answers a Redis version for clients that go by it (7.2.4):
    // it is named by its own.
    if field(f, "server_name") == Some("valkey")
        && let Some(own) = field(f, "valkey_version")
    {
        let own = crate::log::printable(own);
        report.on(
            i,
            Finding::new("version", Level::Ok, format!("Valkey {own}")),
        );
        return;
    }
    let shown = crate::log::printable(v);
    report.on(
        i,
        match at_least(v, [6, 2]) {
            Some(true) => Finding::new("version", Level::Ok, format!("Redis {shown}")),
            Some(false) => Finding::new(
                "version",
                Level::Warn,
                format!("Redis {shown}, older than 6.2"),
            )
            .advice("redlock-run is made for 6.2 and later: upgrade the server"),
            None => Finding::new(
                "version",
                Level::CannotTell,
                format!("Redis version \"{shown}\" is not MAJOR.MINOR..."),
            ),
        },
    );
}

/// Whether version `v` (`7.0.15`, `6.2.6-rc1`) is `want` or later, its
/// numbers compared as numbers of any size (`99999999999999999999.1` is
/// later); None when its first two parts do not start with digits.
fn at_least(v: &str, want: [u64; 2]) -> Option<bool> {
    let mut parts = v.split('.');
    for w in want {
        // A version without its minor number (`7`) is `7.0`.
        let part = parts.next().unwrap_or("0");
        let digits = &part[..part
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(part.len())];
        if digits.is_empty() {
            return None;
        }
        let digits = digits.trim_start_matches('0');
        let w = w.to_string();
        // Decimal digits without leading zeros: longer is larger.
        match (digits.len(), digits).cmp(&(w.len(), w.as_str())) {
            std::cmp::Ordering::Greater => return Some(true),
            std::cmp::Ordering::Less => return Some(false),
            std::cmp::Ordering::Equal => {}
        }
    }
    Some(true)
}

fn role(i: usize, f: &Fields, report: &mut Report) {
    match field(f, "role") {
        Some("master") => report.on(i, Finding::new("role", Level::Ok, "a master")),
        Some(role) => {
            let of = match (field(f, "master_host"), field(f, "master_port")) {
                (Some(h), Some(p)) => format!(" of {h}:{p}"),
                _ => String::new(),
            };
            report.on(
                i,
                Finding::new("role", Level::Unfit, format!("a replica{of} (role:{role})")).advice(
                    "a replica refuses the lock's writes: give its primary, or the group as \
                     redis+sentinel://",
                ),
            );
        }
        None => {}
    }
}

/// No two nodes one server (one `run_id`), none a replica of another (one
/// replication ID, or its master's address that of another node).
fn independent(nodes: &Nodes, up: &[usize], infos: &PerNode<Fields>, report: &mut Report) {
    let info = |i: usize| infos[i].as_ref().and_then(|r| r.as_ref().ok());
    for (a, &i) in up.iter().enumerate() {
        for &j in &up[a + 1..] {
            let (Some(x), Some(y)) = (info(i), info(j)) else {
                continue;
            };
            let same = |k: &str| matches!((field(x, k), field(y, k)), (Some(p), Some(q)) if p == q);
            let (ni, nj) = (nodes[i].name(), nodes[j].name());
            if same("run_id") {
                report.on(
                    j,
                    Finding::new(
                        "independent",
                        Level::Unfit,
                        format!("the same server as {ni}"),
                    )
                    .advice("one server has two votes: give each server once"),
                );
            } else if same("master_replid") || replica_of(x, &nodes[j]) || replica_of(y, &nodes[i])
            {
                let (replica, other) = if field(x, "role") == Some("master") {
                    (j, ni)
                } else {
                    (i, nj)
                };
                report.on(
                    replica,
                    Finding::new(
                        "independent",
                        Level::Unfit,
                        format!("replicates from (or with) {other}"),
                    )
                    .advice(
                        "a failover or a resync carries the lock between them: the nodes of a \
                         quorum must be independent masters",
                    ),
                );
            }
        }
    }
}

/// Whether the server `f` describes replicates from `other`'s address.
fn replica_of(f: &Fields, other: &node::Node) -> bool {
    let (Some(h), Some(p)) = (field(f, "master_host"), field(f, "master_port")) else {
        return false;
    };
    other
        .serving(b"")
        .is_some_and(|at| at == format!("{h}:{p}"))
}

/// `CONFIG GET name` on each node of `up`.
fn config_get(
    nodes: &Nodes,
    up: &[usize],
    near: &[u8],
    name: &'static str,
) -> PerNode<Option<String>> {
    ask(
        nodes,
        up,
        ConfigGet {
            name,
            near: near.to_vec(),
        },
    )
}

/// A setting as CONFIG GET says it, or else as INFO's `info_field` does.
fn read(
    answer: &Option<Result<Option<String>, node::NodeError>>,
    info: Option<&Fields>,
    info_field: &'static str,
) -> Read {
    match answer {
        Some(Ok(Some(v))) => Read::Config(v.clone()),
        other => {
            let why = match other {
                Some(Err(e)) => e.to_string(),
                Some(Ok(None)) => "the server has no such setting".to_string(),
                _ => "no answer in time".to_string(),
            };
            match info.and_then(|f| field(f, info_field)) {
                Some(v) if !info_field.is_empty() => Read::Info(info_field, v.to_string()),
                _ => Read::Neither(why),
            }
        }
    }
}

/// appendonly, appendfsync and maxmemory-policy; what a restart costs.
fn persistence(
    nodes: &Nodes,
    up: &[usize],
    near: &[u8],
    infos: &PerNode<Fields>,
    c: &Config,
    report: &mut Report,
) {
    let aof = config_get(nodes, up, near, "appendonly");
    let fsync = config_get(nodes, up, near, "appendfsync");
    let policy = config_get(nodes, up, near, "maxmemory-policy");
    for &i in up {
        let info = infos[i].as_ref().and_then(|r| r.as_ref().ok());
        let aof_read = read(&aof[i], info, "aof_enabled");
        let off = match &aof_read {
            Read::Config(v) => v == "no",
            Read::Info(_, v) => v == "0",
            Read::Neither(_) => false,
        };
        report.on(i, judge::appendonly(aof_read));
        // Without AOF, how it would sync says nothing.
        if !off {
            report.on(i, judge::appendfsync(read(&fsync[i], None, "")));
        }
        let maxmemory = info.and_then(|f| field(f, "maxmemory"));
        report.on(
            i,
            judge::policy(read(&policy[i], info, "maxmemory_policy"), maxmemory),
        );
        let disk = judge::Disk {
            appendonly: read(&aof[i], info, "aof_enabled").says("yes", "1"),
            always: read(&fsync[i], None, "").says("always", ""),
            waitaof: info.is_some_and(has_waitaof),
        };
        let uptime = info
            .and_then(|f| field(f, "uptime_in_seconds"))
            .and_then(|s| s.parse().ok())
            .map(Duration::from_secs);
        report.on(i, judge::restart(&disk, uptime, c.options.restart_grace));
        report.on(i, judge::durable(&disk, c.options.durable));
    }
}

/// Whether the server has WAITAOF (Redis 7.2; Valkey says a 7.2 version
/// for Redis clients).
fn has_waitaof(f: &Fields) -> bool {
    field(f, "redis_version").and_then(|v| at_least(v, [7, 2])) == Some(true)
}

/// The node's TIME against this host's clock, and the nodes' against each
/// other's.
fn clock(nodes: &Nodes, up: &[usize], near: &[u8], report: &mut Report) {
    let before = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    let replies = quorum::on_each(
        nodes,
        up,
        Time {
            near: near.to_vec(),
        },
        limit(nodes),
    );
    let mut offsets: Vec<(usize, f64)> = Vec::new();
    for r in replies {
        match r.result {
            Ok(t) => {
                // Its clock was read about half-way through the round trip.
                let here = before + r.latency / 2;
                let off = t.as_secs_f64() - here.as_secs_f64();
                offsets.push((r.node, off));
                let says = format!("clock {:+.3}s from this host's", off);
                report.on(
                    r.node,
                    if off.abs() > SKEW.as_secs_f64() {
                        Finding::new("clock", Level::Warn, says).advice(
                            "this host's clock or the node's is off: keep both on NTP, slewed \
                             rather than stepped (Redis expires keys by its own clock)",
                        )
                    } else {
                        Finding::new("clock", Level::Ok, says)
                    },
                );
            }
            Err(e) => report.on(
                r.node,
                Finding::new("clock", Level::CannotTell, format!("TIME: {e}")),
            ),
        }
    }
    let lo = offsets.iter().min_by(|a, b| a.1.total_cmp(&b.1));
    let hi = offsets.iter().max_by(|a, b| a.1.total_cmp(&b.1));
    if let (Some(&(a, x)), Some(&(b, y))) = (lo, hi)
        && y - x > SKEW.as_secs_f64()
    {
        report.quorum.push(
            Finding::new(
                "clocks",
                Level::Warn,
                format!(
                    "the clocks of {} and {} are {:.3}s apart",
                    nodes[a].name(),
                    nodes[b].name(),
                    y - x
                ),
            )
            .advice("keep every node on NTP: each expires keys by its own clock"),
        );
    }
}

/// A Cluster's state and the master of the lock's slot; a Sentinel
/// group's sentinels, each asked which server is primary.
fn topology(nodes: &Nodes, up: &[usize], near: &[u8], c: &Config, report: &mut Report) {
    for &i in up {
        match nodes[i].shape() {
            Shape::Server => {}
            Shape::Cluster => {
                let info = ask(
                    nodes,
                    &[i],
                    Info {
                        near: near.to_vec(),
                        cluster: true,
                    },
                );
                let at = nodes[i].serving(near).unwrap_or_else(|| "?".into());
                let slot = crate::lock::keys::hash_slot(near);
                report.on(i, judge::cluster(&info[i], slot, &at));
            }
            Shape::Sentinel { master, sentinels } => {
                let Some(group) = nodes.sentinels_of(i, &c.options) else {
                    continue;
                };
                let all: Vec<usize> = (0..group.len()).collect();
                let named = ask(&group, &all, node::PrimaryOf { master });
                report.on(i, judge::sentinels(&named, sentinels));
            }
        }
    }
}

/// Days until each TLS server's certificate expires.
fn certificates(nodes: &Nodes, up: &[usize], report: &mut Report) {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX));
    for &i in up {
        for (server, der) in nodes[i].certificates() {
            let Some(until) = crate::x509::not_after(&der) else {
                report.on(
                    i,
                    Finding::new(
                        "certificate",
                        Level::CannotTell,
                        format!("the certificate of {server} does not parse"),
                    ),
                );
                continue;
            };
            let days = (until - now).div_euclid(86_400);
            let says = format!("the certificate of {server} expires in {days} days");
            report.on(
                i,
                match days {
                    d if d < 0 => Finding::new("certificate", Level::Unfit, says)
                        .advice("it has expired: renew it"),
                    d if d < EXPIRY_DAYS => Finding::new("certificate", Level::Warn, says)
                        .advice("renew it before it expires, or every run fails its handshake"),
                    _ => Finding::new("certificate", Level::Ok, says),
                },
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::at_least;

    #[test]
    fn versions_compare_as_numbers_of_any_size() {
        for (v, want) in [
            ("7.0.15", Some(true)),
            ("6.2.0", Some(true)),
            ("6.2", Some(true)),
            ("6.10.1", Some(true)),
            ("6.1.9", Some(false)),
            ("5.0.14", Some(false)),
            ("10.0.0", Some(true)),
            ("06.02", Some(true)),
            ("99999999999999999999.1", Some(true)),
            ("7.2.4-rc1", Some(true)),
            ("6", Some(false)),
            ("7", Some(true)),
            ("x.y", None),
            ("", None),
        ] {
            assert_eq!(at_least(v, [6, 2]), want, "{v}");
        }
    }
}
