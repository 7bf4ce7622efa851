//! The probe: a lock taken, extended and released under a name of check's
//! own, with the run's options (`--fence`, `--shared`, `--limit`, `--wait`,
//! `--replicas`, `--once-per`, `--prefix`), on connections of its own, so
//! that what a node refuses (the commands and keys the ACL does not allow,
//! replicas that do not acknowledge) is found before a run meets it. Its
//! keys are removed after.

use std::time::Duration;

use redis::{Cmd, Value};

use super::{Finding, Level, Report};
use crate::admin::config::AsRun;
use crate::cli::{Config, Wait};
use crate::lock::keys::Keys;
use crate::lock::node::{NodeError, Nodes, Queue, Request};
use crate::lock::{Acquired, Extended, Lock, NodeVote, Taking, quorum, record};
use crate::log::{Format, Log};

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
        Acquired::Yes(_) => {
            if let Some(w) = c.once_per {
                let start = crate::lock::unix_ms() / 1000 / w * w;
                lock.mark_once(start, Duration::from_secs(w), &log);
                window = Some(start);
            }
            match lock.extend(&log) {
                Extended::Yes { .. } => {}
                // The nodes' errors together, each with its node's name.
                Extended::Failed(why) => report.quorum.push(refused(&why, &c.keys)),
                Extended::Gone => report.quorum.push(Finding::new(
                    "probe",
                    Level::Unfit,
                    "the probe's lock was gone at its first extension",
                )),
            }
            lock.release(&log);
        }
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
    per_node(&lock, &log, c, report);
    clean(nodes, &c.keys, c, window);
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
            None => report.on(i, Finding::new("probe", Level::Ok, done.clone())),
            // Said already, and why.
            Some(_) if unreachable => {}
            Some(why) => report.on(i, refused(&why, &c.keys)),
        }
    }
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
    let what = denied_what(why).unwrap_or_else(|| {
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

/// The command a NOPERM error names: `'eval' command`, or a script's
/// `PEXPIRE: ...` (Redis before 7.2 words a refusal inside a script so).
fn denied_what(why: &str) -> Option<String> {
    if let Some(end) = why.find("' command") {
        let start = why[..end].rfind('\'')? + 1;
        return Some(why[start..end].to_ascii_uppercase());
    }
    let detail = why.split("ACL denies this user: ").nth(1)?;
    let (word, _) = detail.split_once(':')?;
    (!word.is_empty() && word.bytes().all(|b| b.is_ascii_uppercase() || b == b'|'))
        .then(|| word.to_string())
}

/// DEL of the probe's keys: the name is check's own.
struct Remove {
    keys: Vec<Vec<u8>>,
}

impl Request for Remove {
    type Answer = ();

    fn command(&self, _: usize) -> Option<Cmd> {
        let mut cmd = redis::cmd("DEL");
        for k in &self.keys {
            cmd.arg(k);
        }
        Some(cmd)
    }

    fn key(&self) -> &[u8] {
        self.keys.first().map_or(b"", Vec::as_slice)
    }

    fn decode(&self, _: usize, _: Value, _: &str) -> Result<(), NodeError> {
        Ok(())
    }
}

/// Removes every key the probe may have made, on every node.
fn clean(nodes: &Nodes, keys: &Keys, c: &Config, window: Option<u64>) {
    let mut all = vec![
        keys.lock().to_vec(),
        keys.holder(None),
        keys.fence(),
        keys.legacy_fence(),
        keys.slots(),
        keys.readers(),
        keys.reader_records(),
        keys.queue(),
        keys.waiters(),
        keys.history(),
    ];
    if let Taking::Slot(n) = c.taking() {
        for i in 0..n {
            all.push(keys.slot(i));
            all.push(keys.holder(Some(i)));
        }
    }
    all.extend(window.map(|w| keys.once(w)));
    let which: Vec<usize> = (0..nodes.len()).collect();
    quorum::on_each(
        nodes,
        &which,
        Remove { keys: all },
        crate::admin::limit(nodes),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_refused_command_is_named() {
        assert_eq!(
            denied_what(
                "n: the server's ACL denies this user: this user has no permissions to run the \
                 'eval' command; see"
            )
            .as_deref(),
            Some("EVAL")
        );
        assert_eq!(
            denied_what(
                "n: the server's ACL denies this user: PEXPIRE: ERR The user executing the script \
                 can't run this command"
            )
            .as_deref(),
            Some("PEXPIRE")
        );
        assert_eq!(
            denied_what("n: the server's ACL denies this user: no permissions to access a key"),
            None
        );
    }
}
