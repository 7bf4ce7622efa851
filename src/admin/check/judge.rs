//! The wording of the findings that depend on what a node answered: what
//! was seen, how it bears on the lock, and what to do.

use std::collections::BTreeSet;
use std::time::Duration;

use super::{Finding, Level};
use crate::admin::PerNode;
use crate::lock::node::Fields;

/// A setting as CONFIG GET said it, or else as an INFO field does (when
/// CONFIG GET is refused), or why neither could be read.
pub(super) enum Read {
    Config(String),
    Info(&'static str, String),
    Neither(String),
}

impl Read {
    /// Whether the setting is `yes` as CONFIG GET says it (or `info_yes` as
    /// INFO does); None when neither could be read.
    pub(super) fn says(&self, yes: &str, info_yes: &str) -> Option<bool> {
        match self {
            Read::Config(v) => Some(v == yes),
            Read::Info(_, v) => Some(v == info_yes),
            Read::Neither(_) => None,
        }
    }
}

/// What a node's disk does for a lock: `appendonly`, `appendfsync always`
/// (None: cannot tell), and whether it has WAITAOF.
pub(super) struct Disk {
    pub appendonly: Option<bool>,
    pub always: Option<bool>,
    pub waitaof: bool,
}

impl Disk {
    fn syncs_every_write(&self) -> bool {
        self.appendonly == Some(true) && self.always == Some(true)
    }
}

fn span(d: Duration) -> humantime::FormattedDuration {
    humantime::format_duration(Duration::from_secs(d.as_secs()))
}

/// What a restart costs the node's vote: nothing when every write is on
/// disk first; else it sits out the restart grace after each start (or, at
/// --restart-grace 0, votes at once and may grant a lock still held).
pub(super) fn restart(disk: &Disk, uptime: Option<Duration>, grace: Duration) -> Finding {
    if disk.syncs_every_write() {
        return Finding::new(
            "restart",
            Level::Ok,
            "restart-safe: every write is on disk before the answer, so a restart keeps its locks",
        );
    }
    if grace.is_zero() {
        return Finding::new(
            "restart",
            Level::Warn,
            "--restart-grace 0: restarted without its locks, it votes at once, and may grant a \
             lock that is still held",
        )
        .advice("keep the default restart grace (the TTL), or set appendfsync always");
    }
    match uptime {
        Some(up) if up < grace => Finding::new(
            "restart",
            Level::Warn,
            format!(
                "up for {}: it sits out until it has been up for the restart grace, {} (it may \
                 have forgotten a lock it granted)",
                span(up),
                span(grace)
            ),
        )
        .advice("its vote counts by itself once the grace is over; a run needs a quorum without it until then"),
        Some(up) => Finding::new(
            "restart",
            Level::Ok,
            format!(
                "up for {}, more than the restart grace {}: a restart would make it sit out that \
                 long",
                span(up),
                span(grace)
            ),
        ),
        None => Finding::new(
            "restart",
            Level::CannotTell,
            "INFO does not say how long it has been up: runs give it no vote",
        )
        .advice("allow +info, or set appendfsync always"),
    }
}

/// Whether the node can show a write is on its disk (--durable): by
/// WAITAOF, or by syncing every write. Unfit under --durable when it
/// cannot; said for the record otherwise.
pub(super) fn durable(disk: &Disk, wanted: bool) -> Finding {
    let (proves, how) = match (disk.appendonly, disk.waitaof, disk.always) {
        (Some(false), _, _) => (false, "appendonly no".to_string()),
        (Some(true), true, _) => (true, "WAITAOF".to_string()),
        (Some(true), false, Some(true)) => (true, "appendfsync always".to_string()),
        (Some(true), false, Some(false)) => (
            false,
            "appendfsync is not always, and the server has no WAITAOF".to_string(),
        ),
        _ => (false, "cannot read appendonly and appendfsync".to_string()),
    };
    match (wanted, proves) {
        (true, true) => Finding::new(
            "durable",
            Level::Ok,
            format!("--durable: each vote counts once on disk ({how})"),
        ),
        (true, false) => Finding::new(
            "durable",
            Level::Unfit,
            format!("--durable: it cannot show a write is on disk ({how}), so it gives no vote"),
        )
        .advice("set appendonly yes with appendfsync always, or use Redis 7.2 or later (WAITAOF)"),
        (false, true) => Finding::new(
            "durable",
            Level::Ok,
            format!("--durable would count its votes once on disk ({how})"),
        ),
        (false, false) => Finding::new(
            "durable",
            Level::Ok,
            format!("--durable would not count its votes ({how})"),
        ),
    }
}

/// Why a setting could not be read, and where INFO stood in.
fn from_info(field: &str) -> String {
    format!(" (from INFO {field}: CONFIG GET is refused or unanswered)")
}

pub(super) fn appendonly(read: Read) -> Finding {
    let (on, said) = match read {
        Read::Config(v) => (v == "yes", String::new()),
        Read::Info(f, v) => (v == "1", from_info(f)),
        Read::Neither(why) => {
            return Finding::new(
                "appendonly",
                Level::CannotTell,
                format!("appendonly: {why}"),
            )
            .advice("allow +config|get or +info to let check read it");
        }
    };
    if on {
        return Finding::new("appendonly", Level::Ok, format!("appendonly yes{said}"));
    }
    Finding::new(
        "appendonly",
        Level::Warn,
        format!(
            "appendonly no{said}: a node that restarts comes back without its locks, and sits \
             out the restart grace"
        ),
    )
    .advice("set appendonly yes with appendfsync always")
}

pub(super) fn appendfsync(read: Read) -> Finding {
    match read {
        Read::Config(v) if v == "always" => {
            Finding::new("appendfsync", Level::Ok, "appendfsync always")
        }
        Read::Config(v) => Finding::new(
            "appendfsync",
            Level::Warn,
            format!(
                "appendfsync {v}: a crash loses the writes of up to the last second, a lock \
                 granted then among them"
            ),
        )
        .advice("set appendfsync always: until then a restart makes it sit out the restart grace"),
        Read::Info(..) | Read::Neither(_) => Finding::new(
            "appendfsync",
            Level::CannotTell,
            "appendfsync: CONFIG GET is refused or unanswered, and INFO does not say it",
        )
        .advice("allow +config|get to let check read it"),
    }
}

pub(super) fn policy(read: Read, maxmemory: Option<&str>) -> Finding {
    let (policy, said) = match read {
        Read::Config(v) => (v, String::new()),
        Read::Info(f, v) => (v, from_info(f)),
        Read::Neither(why) => {
            return Finding::new(
                "maxmemory-policy",
                Level::CannotTell,
                format!("maxmemory-policy: {why}"),
            )
            .advice("allow +config|get or +info to let check read it");
        }
    };
    if policy == "noeviction" {
        return Finding::new(
            "maxmemory-policy",
            Level::Ok,
            format!("maxmemory-policy noeviction{said}"),
        );
    }
    let unset = if maxmemory == Some("0") {
        " (maxmemory is 0 now: nothing is evicted until it is set)"
    } else {
        ""
    };
    Finding::new(
        "maxmemory-policy",
        Level::Warn,
        format!(
            "maxmemory-policy {policy}{said}: short of memory, the server may evict a lock's \
             key (or its fence counter), and another run takes the lock while its holder \
             runs{unset}"
        ),
    )
    .advice("set maxmemory-policy noeviction")
}

pub(super) fn cluster(
    info: &Option<Result<Fields, crate::lock::node::NodeError>>,
    slot: u16,
    at: &str,
) -> Finding {
    match info {
        Some(Ok(f)) => match f.get("cluster_state").map(String::as_str) {
            Some("ok") => Finding::new(
                "cluster",
                Level::Ok,
                format!("cluster_state:ok; the lock's hash slot {slot} is served by {at}"),
            ),
            state => Finding::new(
                "cluster",
                Level::Unfit,
                format!("cluster_state:{}", state.unwrap_or("?")),
            )
            .advice("the cluster refuses requests until every slot is served"),
        },
        Some(Err(e)) => Finding::new("cluster", Level::CannotTell, format!("CLUSTER INFO: {e}"))
            .advice("allow +cluster|info to let check read the cluster's state"),
        None => Finding::new(
            "cluster",
            Level::CannotTell,
            "CLUSTER INFO: no answer in time",
        ),
    }
}

pub(super) fn sentinels(named: &PerNode<Option<String>>, count: usize) -> Finding {
    let answered = named.iter().flatten().filter(|r| r.is_ok()).count();
    let primaries: BTreeSet<&str> = named
        .iter()
        .flatten()
        .flatten()
        .flatten()
        .map(String::as_str)
        .collect();
    let majority = count / 2 + 1;
    let list = primaries.iter().copied().collect::<Vec<_>>().join(", ");
    if primaries.len() > 1 {
        return Finding::new(
            "sentinels",
            Level::Unfit,
            format!("the sentinels disagree on the primary: {list}"),
        )
        .advice(
            "a failover is under way, or the sentinels are split: look at SENTINEL MASTERS on each",
        );
    }
    if primaries.is_empty() {
        return Finding::new(
            "sentinels",
            Level::Unfit,
            format!("{answered} of {count} sentinels answered, and none names a primary"),
        )
        .advice("check the group's name in the URL and the sentinels' state");
    }
    let says = format!("{answered} of {count} sentinels answered; they name {list} primary");
    if answered < majority {
        return Finding::new("sentinels", Level::Warn, says)
            .advice("a failover needs a majority of the sentinels: bring the others back");
    }
    Finding::new("sentinels", Level::Ok, says)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn persistence_findings() {
        assert_eq!(appendonly(Read::Config("yes".into())).level, Level::Ok);
        let f = appendonly(Read::Info("aof_enabled", "0".into()));
        assert_eq!(f.level, Level::Warn);
        assert!(f.says.contains("from INFO aof_enabled"), "{}", f.says);
        assert_eq!(
            appendfsync(Read::Config("everysec".into())).level,
            Level::Warn
        );
        assert_eq!(
            appendfsync(Read::Neither("denied".into())).level,
            Level::CannotTell
        );
        let f = policy(Read::Config("allkeys-lru".into()), Some("0"));
        assert_eq!(f.level, Level::Warn);
        assert!(f.says.contains("maxmemory is 0"), "{}", f.says);
    }

    #[test]
    fn sentinels_agree_or_not() {
        let a = |s: &str| Some(Ok(Some(s.to_string())));
        let f = sentinels(&vec![a("h:1"), a("h:1"), None], 3);
        assert_eq!(f.level, Level::Ok);
        let f = sentinels(&vec![a("h:1"), None, None], 3);
        assert_eq!(f.level, Level::Warn);
        let f = sentinels(&vec![a("h:1"), a("h:2"), None], 3);
        assert_eq!(f.level, Level::Unfit);
    }
}
