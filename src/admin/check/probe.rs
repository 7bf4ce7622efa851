//! The probe: a lock taken, extended and released under a name of check's
//! own, with the run's options (`--fence`, `--shared`, `--limit`, `--wait`,
//! `--replicas`, `--once-per`, `--prefix`), on connections of its own, so
//! that what a node refuses (the commands and keys the ACL does not allow,
//! replicas that do not acknowledge) is found before a run meets it. It
//! ends as a run does, with a record appended to its own history; with
//! `--wait` it also tries the queue's commands and SUBSCRIBE (`waiting`).
//! Its keys are removed after (`leftovers`), and a node where any stays
//! is unfit.

use std::time::{Duration, SystemTime};

use super::{Finding, Level, Report};
use crate::admin::config::AsRun;
use crate::cli::{Config, Wait};
use crate::exit::Exit;
use crate::lock::end::Ending;
use crate::lock::keys::Keys;
use crate::lock::node::{Nodes, Queue};
use crate::lock::{Acquired, Extended, Lock, NodeVote, Taking, record};
use crate::log::{Format, Log};
use crate::run_record::Record;

/// Takes, extends and releases `name` with the run's options; a finding
/// per node, and one for all where the round itself says something.
pub(super) fn run(run: &AsRun, name: &str, nodes: &Nodes, report: &mut Report) {
    let c = &run.config;
    // No run's lock can be forgotten under the probe's own name: a node in
    // its restart grace is not what the probe is for (the restart finding
    // says that), and must not keep it from finding what the ACL refuses.
    let options = crate::lock::node::Options {
        restart_grace: Duration::ZERO,
        ..c.options.clone()
    };
    let Ok(own) = Nodes::new(&c.urls, &options) else {
        return;
    };
    let lock = match Lock::new(
        own,
        c.keys.clone(),
        c.ttl,
        c.node_timeout,
        record::holder(&c.program, c.record_command, c.ttl),
        c.taking(),
    ) {
        Ok(l) => l,
        Err(e) => {
            report
                .quorum
                .push(Finding::new("probe", Level::CannotTell, e.to_string()));
            return;
        }
    };
    // Quiet: what the nodes said is read from the outcomes below.
    let log = Log::new(-1, Format::Text, name);
    let queue = match c.wait {
        _ if c.wait_unfair => Queue::Ignore,
        Wait::Once => Queue::Check,
        Wait::For(_) | Wait::Forever => Queue::Join {
            ticket: None,
            lapse: crate::lock::PLACE_LAPSE,
        },
    };
    let mut window = None;
    match lock.acquire(&queue, &log) {
        Acquired::Yes(_) => window = as_a_run(&lock, c, &log, report),
        Acquired::Busy(_) => report.quorum.push(
            Finding::new(
                "probe",
                Level::CannotTell,
                format!("the probe's name {name} is held: another check?"),
            )
            .advice("run check again"),
        ),
        Acquired::SameServer(msg) => {
            report
                .quorum
                .push(Finding::new("independent", Level::Unfit, msg));
        }
        Acquired::Unavailable(_) | Acquired::FenceExhausted => {}
    }
    if c.wait != Wait::Once && !c.wait_unfair {
        super::waiting::queue_and_wake_up(nodes, c, lock.token(), report);
    }
    per_node(&lock, &log, c, report);
    super::leftovers::clean(nodes, &c.keys, c, window, report);
}

/// The probe's lock, held, used as a run would: its --once-per window
/// marked (which is returned), one extension, and the end with a record of
/// its own history.
fn as_a_run(lock: &Lock, c: &Config, log: &Log, report: &mut Report) -> Option<u64> {
    let window = c.once_per.map(|w| {
        let start = crate::lock::unix_ms() / 1000 / w * w;
        lock.mark_once(start, Duration::from_secs(w), log);
        start
    });
    match lock.extend(log) {
        Extended::Yes { .. } => {}
        // The nodes' errors together, each with its node's name.
        Extended::Failed(why) => report.quorum.push(refused(&why, &c.keys)),
        Extended::Gone => report.quorum.push(Finding::new(
            "probe",
            Level::Unfit,
            "the probe's lock was gone at its first extension",
        )),
    }
    let record = Record::of_this_run(
        lock.token(),
        SystemTime::now(),
        Duration::ZERO,
        Exit::Command(0),
        1,
        None,
        c.shared,
    );
    for (i, why) in lock.end(Ending::Release, Some(record), log) {
        report.on(i, unrecorded(&why));
    }
    window
}

/// Each node's part in the probe: what it refused, or that it did all.
fn per_node(lock: &Lock, log: &Log, c: &Config, report: &mut Report) {
    let done = what_it_did(c);
    for (i, outcome) in lock.outcomes(log).iter().enumerate() {
        // A server's error reply is the acquire's to say; a failure of the
        // connection, or of a later round, the node's.
        let failure = match &outcome.acquire {
            NodeVote::Error(e) => Some(e.clone()),
            _ => outcome.failure(),
        };
        let unreachable = report.nodes[i]
            .findings
            .iter()
            .any(|f| f.check == "reachable" && f.level == Level::Unfit);
        match failure {
            None if outcome.refused.is_empty() => {
                report.on(i, Finding::new("probe", Level::Ok, done.clone()));
            }
            None => {}
            // Said already, and why.
            Some(_) if unreachable => {}
            Some(why) => report.on(i, refused(&why, &c.keys)),
        }
        for step in &outcome.refused {
            report.on(i, left_behind(step));
        }
    }
}

/// A step of the lock's upkeep the node refused (`release: the ACL refuses
/// DEL`, see `lock::refused`): a run would leave its lock there until its
/// TTL runs out, and be held up by it.
fn left_behind(step: &str) -> Finding {
    let (step, said) = step.split_once(": ").unwrap_or(("", step));
    let what = match step {
        "release" => "a run's release would leave its lock on the node until its TTL runs out",
        "extend" => "a run's extensions would not count here: the quorum loses the node",
        "unmark" => "a --once-per-success run that fails could not give its window back",
        _ => "a waiter that gives up would keep its place until it lapses",
    };
    let check = if said.starts_with("the ACL refuses") {
        "acl"
    } else {
        "probe"
    };
    Finding::new(check, Level::Unfit, format!("{said}: {what}"))
        .advice("allow what the README's ACL line (under Connecting) lists, for the prefix in use")
}

/// A node that did not append the probe's record to its history: a run's
/// history would miss its runs (the lock itself works).
fn unrecorded(why: &str) -> Finding {
    let said = match crate::lock::node::refused_command(why) {
        Some(command) => format!("the ACL refuses {command}"),
        None => why.to_string(),
    };
    Finding::new(
        if crate::lock::node::denied(why) {
            "acl"
        } else {
            "probe"
        },
        Level::Warn,
        format!("{said}: runs are not recorded in the history"),
    )
    .advice("allow +lpush +ltrim +lindex +lrange for `history`, or do without it")
}

/// "took, extended and released a lock (--fence, --replicas 1)".
fn what_it_did(c: &Config) -> String {
    let mut with = Vec::new();
    match c.taking() {
        Taking::Lock { fence: true } => with.push("--fence".to_string()),
        Taking::Slot(n) => with.push(format!("--limit {n}")),
        Taking::Share => with.push("--shared".to_string()),
        Taking::Lock { fence: false } => {}
    }
    if c.wait != Wait::Once {
        with.push(
            if c.wait_unfair {
                "--wait-unfair"
            } else {
                "--wait"
            }
            .to_string(),
        );
    }
    if c.options.replicas > 0 {
        with.push(format!("--replicas {}", c.options.replicas));
    }
    if c.once_per.is_some() {
        with.push("--once-per".to_string());
    }
    let with = if with.is_empty() {
        String::new()
    } else {
        format!(" ({})", with.join(", "))
    };
    format!("the probe took, extended and released a lock{with}")
}

/// A node's failure in the probe, as a finding: what the ACL refuses where
/// it refused something.
fn refused(why: &str, keys: &Keys) -> Finding {
    if !crate::lock::node::denied(why) {
        return Finding::new("probe", Level::Unfit, format!("the probe failed: {why}"));
    }
    let lock = crate::lock::keys::show(keys.lock());
    let what = crate::lock::node::refused_command(why).unwrap_or_else(|| {
        if why.contains("key") {
            format!("a key of the lock (its patterns must cover {lock} and {{{lock}}}:*)")
        } else if why.contains("channel") {
            format!("a channel of the lock (its patterns must cover {{{lock}}}:*)")
        } else {
            "a command the lock uses".to_string()
        }
    });
    // The server's own words, without the node's name and our pointer.
    let detail = why.split("ACL denies this user: ").nth(1).unwrap_or(why);
    let detail = detail
        .split("; see \"Connecting\"")
        .next()
        .unwrap_or(detail);
    Finding::new(
        "acl",
        Level::Unfit,
        format!("the ACL refuses {what} ({detail})"),
    )
    .advice("allow what the README's ACL line (under Connecting) lists, for the prefix in use")
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_refused_command_is_named() {
        use crate::lock::node::refused_command;
        assert_eq!(
            refused_command(
                "n: the server's ACL denies this user: this user has no permissions to run the \
                 'eval' command; see"
            )
            .as_deref(),
            Some("EVAL")
        );
        assert_eq!(
            refused_command(
                "n: the server's ACL denies this user: PEXPIRE: ERR The user executing the script \
                 can't run this command"
            )
            .as_deref(),
            Some("PEXPIRE")
        );
        assert_eq!(
            refused_command("n: the server's ACL denies this user: no permissions to access a key"),
            None
        );
    }
}
