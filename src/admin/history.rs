//! `history`: the lock's last runs, read from every node and merged, newest
//! first: which host ran it, when, for how long, and how it ended. Every
//! run's record went to each node that answered at its end, so a quorum of
//! answers holds every run that ended with a quorum of nodes up, whichever
//! nodes were down at the time.

use super::Subject;
use super::on_all;
use crate::exit::Exit;
use crate::lock::node::{self, Nodes};
use crate::lock::redlock;
use crate::log::printable;
use crate::run_record::{self, Record};

/// What the nodes hold, merged.
pub(super) struct Found {
    /// Newest first, each run once.
    pub runs: Vec<Record>,
    /// Nodes that answered.
    pub answered: usize,
    /// One line per node that did not, naming it.
    pub errors: Vec<String>,
}

/// The newest `count` runs of the lock over all nodes. Each node's list is
/// newest first (a run appends its record when it ends), so the newest
/// `count` overall are among each list's first `count`: no more is read.
pub(super) fn read(lock: &Subject, nodes: &Nodes, count: usize) -> Found {
    let key = lock.keys.history();
    let replies = on_all(nodes, node::History { key, count });
    let mut found = Found {
        runs: Vec::new(),
        answered: 0,
        errors: Vec::new(),
    };
    let mut lists = Vec::new();
    for (node, reply) in nodes.iter().zip(replies) {
        match reply {
            Some(Ok(entries)) => {
                found.answered += 1;
                let cut = entries.iter().filter(|e| truncated(e)).count();
                if cut > 0 {
                    found.errors.push(format!(
                        "{}: {cut} history record(s) longer than {} KiB left out",
                        node.name(),
                        node::RECORD_CAP >> 10
                    ));
                }
                lists.push(
                    entries
                        .iter()
                        .filter_map(|e| Record::from_json(e))
                        .collect(),
                );
            }
            Some(Err(e)) => found.errors.push(e.to_string()),
            None => found.errors.push(format!(
                "{}: no answer in time (--node-timeout)",
                node.name()
            )),
        }
    }
    found.runs = run_record::merge(lists);
    found.runs.truncate(count);
    found
}

/// A record the node answered cut (see `node::History`).
fn truncated(entry: &str) -> bool {
    entry.starts_with("{\"truncated\":")
}

/// The run that ended last, for `status`.
pub(super) fn last_run(lock: &Subject, nodes: &Nodes) -> Option<Record> {
    let key = lock.keys.history();
    // The newest entry of each list is its last append, that is, the run
    // that ended last there.
    on_all(nodes, node::History { key, count: 1 })
        .into_iter()
        .flatten()
        .flatten()
        .flatten()
        .filter_map(|e| Record::from_json(&e))
        .max_by(|a, b| a.ended_at().cmp(&b.ended_at()).then(b.id.cmp(&a.id)))
}

pub(super) fn tell(lock: &Subject, nodes: &Nodes, json: bool, count: u32) -> Exit {
    let found = read(lock, nodes, count as usize);
    if found.answered == 0 {
        // Nothing on stdout: "no runs recorded" would read as an answer.
        crate::log::say(format_args!(
            "no node answered, so the history of lock '{}' is unknown: {}",
            lock.name,
            printable(&found.errors.join("; "))
        ));
        return Exit::Unavailable;
    }
    if json {
        super::print_json(&found.runs);
    } else if found.runs.is_empty() {
        println!("no runs of lock '{}' recorded", lock.name);
    } else {
        print!("{}", table(&found.runs));
    }
    for e in &found.errors {
        crate::log::warn(format_args!("{}", printable(e)));
    }
    let quorum = redlock::quorum(nodes.len());
    if found.answered < quorum {
        crate::log::say(format_args!(
            "only {} of {} nodes answered (quorum {quorum}): runs recorded only on \
             the others are missing",
            found.answered,
            nodes.len()
        ));
        return Exit::Unavailable;
    }
    Exit::Command(0)
}

/// One line of `status`: how the last run went.
pub(super) fn describe(r: &Record) -> String {
    format!(
        "last run: {} (exit {}) on {} pid {}, started {}, took {}, {} attempt{}",
        printable(&r.outcome),
        r.exit_code,
        printable(&r.host),
        r.pid,
        crate::wall::rfc3339(r.started_at),
        run_record::show_ms(r.duration_ms),
        r.attempts,
        if r.attempts == 1 { "" } else { "s" }
    )
}

/// The runs as aligned columns, with a heading.
fn table(runs: &[Record]) -> String {
    let fenced = runs.iter().any(|r| r.fencing_token.is_some());
    let shared = runs.iter().any(|r| r.shared);
    let refused = runs.iter().any(|r| !r.refused.is_empty());
    let mut rows: Vec<Vec<String>> = vec![
        [
            "STARTED", "DURATION", "OUTCOME", "EXIT", "ATTEMPTS", "HOST", "PID", "TOKEN",
        ]
        .iter()
        .map(|h| h.to_string())
        .collect(),
    ];
    if fenced {
        rows[0].push("FENCE".into());
    }
    if shared {
        rows[0].push("LOCK".into());
    }
    if refused {
        // How many steps nodes refused; `history --json` says which.
        rows[0].push("REFUSED".into());
    }
    for r in runs {
        let mut row = vec![
            crate::wall::rfc3339(r.started_at),
            run_record::show_ms(r.duration_ms),
            printable(&r.outcome).into_owned(),
            r.exit_code.to_string(),
            r.attempts.to_string(),
            printable(&r.host).into_owned(),
            r.pid.to_string(),
            printable(&r.id.chars().take(8).collect::<String>()).into_owned(),
        ];
        if fenced {
            row.push(r.fencing_token.map_or("-".into(), |t| t.to_string()));
        }
        if shared {
            row.push(r.lock_kind().into());
        }
        if refused {
            row.push(r.refused.len().to_string());
        }
        rows.push(row);
    }
    let widths: Vec<usize> = (0..rows[0].len())
        .map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    for row in rows {
        let cells: Vec<String> = row
            .iter()
            .zip(&widths)
            .map(|(cell, w)| crate::text::pad(cell, *w))
            .collect();
        out.push_str(cells.join("  ").trim_end());
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, UNIX_EPOCH};

    #[test]
    fn the_table_lines_up_and_shows_fences_only_when_there_are_some() {
        let mut a = Record {
            id: "5c0b1050aabbccdd".into(),
            host: "web3".into(),
            pid: 22306,
            user: "deploy".into(),
            started_at: UNIX_EPOCH + Duration::from_millis(1_796_007_600_012),
            duration_ms: 412_877,
            outcome: "ok".into(),
            exit_code: 0,
            attempts: 1,
            fencing_token: None,
            shared: false,
            window_s: None,
            refused: Vec::new(),
        };
        let mut b = a.clone();
        b.host = "db\n1\x1b]0;x\x07".into();
        b.outcome = "failed".into();
        b.exit_code = 3;
        b.attempts = 3;
        let t = table(&[a.clone(), b.clone()]);
        assert_eq!(
            t,
            "STARTED                   DURATION  OUTCOME  EXIT  ATTEMPTS  HOST             PID    TOKEN\n\
             2026-11-30T03:00:00.012Z  6m 52s    ok       0     1         web3             22306  5c0b1050\n\
             2026-11-30T03:00:00.012Z  6m 52s    failed   3     3         db\\n1\\e]0;x\\x07  22306  5c0b1050\n"
        );
        a.fencing_token = Some(17);
        let t = table(&[a.clone(), b]);
        assert!(
            t.lines()
                .next()
                .is_some_and(|l| l.ends_with("TOKEN     FENCE")),
            "{t}"
        );
        assert!(t.lines().nth(1).is_some_and(|l| l.ends_with(" 17")), "{t}");
        assert!(t.lines().nth(2).is_some_and(|l| l.ends_with(" -")), "{t}");
        assert_eq!(
            describe(&a),
            "last run: ok (exit 0) on web3 pid 22306, started 2026-11-30T03:00:00.012Z, took \
             6m 52s, 1 attempt"
        );
    }
}
