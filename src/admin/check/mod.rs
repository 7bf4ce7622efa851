//! `check`: each node judged against what the lock rests on, one line per
//! finding with its advice. Exit 0 when every node is fit, 1 with warnings
//! only (or what could not be told), 69 when a node is unfit or fewer than
//! a quorum answer.
//!
//! It takes the node options and the configuration file as a run does
//! (see `config::as_run`), asks each node read-only questions (`inspect`:
//! PING, INFO, CONFIG GET, TIME, CLUSTER INFO, each sentinel), and then
//! takes, extends and releases a lock under a name of its own, with the
//! run's options, so that what the ACL refuses is found before a run meets
//! it (`probe`). What the ACL keeps it from reading is said as "cannot
//! tell", with the INFO field it used instead where there is one.

mod inspect;
mod judge;
mod leftovers;
mod probe;
mod waiting;

use std::ffi::OsString;

use serde::Serialize;

use super::config::as_run;
use crate::cli::CheckArgs;
use crate::exit::{self, Exit};
use crate::lock::node::Nodes;
use crate::lock::redlock;

/// How a finding bears on the node's fitness, mildest first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub(super) enum Level {
    Ok,
    Warn,
    CannotTell,
    Unfit,
}

impl Level {
    fn label(self) -> &'static str {
        match self {
            Level::Ok => "ok",
            Level::Warn => "warn",
            Level::CannotTell => "cannot tell",
            Level::Unfit => "unfit",
        }
    }
}

/// One finding: what was looked at, how it bears, what was seen, and what
/// to do about it.
#[derive(Clone, Debug, Serialize)]
pub(super) struct Finding {
    pub check: &'static str,
    pub level: Level,
    pub says: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub advice: Option<String>,
}

impl Finding {
    pub fn new(check: &'static str, level: Level, says: impl Into<String>) -> Finding {
        Finding {
            check,
            level,
            says: says.into(),
            advice: None,
        }
    }

    pub fn advice(mut self, advice: impl Into<String>) -> Finding {
        self.advice = Some(advice.into());
        self
    }
}

/// Every finding, node by node, and those about the nodes together.
#[derive(Serialize)]
pub(super) struct Report {
    pub verdict: &'static str,
    pub nodes: Vec<NodeReport>,
    pub quorum: Vec<Finding>,
}

#[derive(Serialize)]
pub(super) struct NodeReport {
    pub node: String,
    pub findings: Vec<Finding>,
}

impl Report {
    fn new(nodes: &Nodes) -> Report {
        Report {
            verdict: "",
            nodes: nodes
                .iter()
                .map(|n| NodeReport {
                    node: n.name().to_string(),
                    findings: Vec::new(),
                })
                .collect(),
            quorum: Vec::new(),
        }
    }

    pub fn on(&mut self, i: usize, f: Finding) {
        if let Some(n) = self.nodes.get_mut(i) {
            n.findings.push(f);
        }
    }

    fn worst(&self) -> Level {
        self.nodes
            .iter()
            .flat_map(|n| &n.findings)
            .chain(&self.quorum)
            .map(|f| f.level)
            .max()
            .unwrap_or(Level::Ok)
    }
}

/// The name the probe takes: no run's, and no other check's.
fn reserved_name() -> String {
    format!(
        "redlock-run-check:{}:{}",
        crate::host::hostname(),
        std::process::id()
    )
}

pub fn run(args: &CheckArgs, given: &[OsString]) -> Exit {
    let name = reserved_name();
    let run = match as_run(given, &name) {
        Ok(r) => r,
        Err(e) => return e.exit(),
    };
    let c = &run.config;
    if c.options.tls_insecure {
        eprintln!(
            "redlock-run: --tls-insecure: certificates and host names of rediss:// nodes are not checked"
        );
    }
    let nodes = match Nodes::new(&c.urls, &c.options) {
        Ok(n) => n,
        Err(msg) => {
            eprintln!("redlock-run: {msg}");
            return Exit::Usage;
        }
    };
    let mut report = Report::new(&nodes);
    let reachable = inspect::all(&nodes, c, &mut report);
    let q = redlock::quorum(nodes.len());
    if reachable < q {
        report.quorum.push(
            Finding::new(
                "quorum",
                Level::Unfit,
                format!(
                    "{reachable} of {} nodes answered; a lock needs {q}",
                    nodes.len()
                ),
            )
            .advice("no run can take the lock until a quorum answers"),
        );
    } else {
        report.quorum.push(Finding::new(
            "quorum",
            Level::Ok,
            format!(
                "{reachable} of {} nodes answered; a lock needs {q}",
                nodes.len()
            ),
        ));
    }
    // The probe would only wait out, again, the nodes that did not answer
    // in time; without a quorum of the others it cannot take its lock.
    let answering = (0..nodes.len()).filter(|&i| !nodes[i].timed_out()).count();
    if reachable >= q && answering >= q {
        probe::run(&run, &name, &nodes, &mut report);
    } else if reachable >= q {
        report.quorum.push(Finding::new(
            "probe",
            Level::CannotTell,
            format!(
                "not run: only {answering} of {} nodes answered every question in time",
                nodes.len()
            ),
        ));
    }
    drop(nodes);
    let worst = report.worst();
    report.verdict = match worst {
        Level::Ok => "fit",
        Level::Warn | Level::CannotTell => "warnings",
        Level::Unfit => "unfit",
    };
    if args.json {
        super::print_json(&report);
    } else {
        print_text(&report);
    }
    match worst {
        Level::Ok => Exit::Command(0),
        Level::Warn | Level::CannotTell => Exit::Command(exit::CHECK_WARNINGS),
        Level::Unfit => Exit::Unavailable,
    }
}

fn print_text(report: &Report) {
    let line = |f: &Finding| {
        let advice = f
            .advice
            .as_deref()
            .map_or(String::new(), |a| format!(": {a}"));
        println!("  {:<11} {}{advice}", f.level.label(), f.says);
    };
    for n in &report.nodes {
        println!("{}", n.node);
        n.findings.iter().for_each(line);
    }
    println!("all nodes");
    report.quorum.iter().for_each(line);
    let count = |l: Level| {
        report
            .nodes
            .iter()
            .flat_map(|n| &n.findings)
            .chain(&report.quorum)
            .filter(|f| f.level == l)
            .count()
    };
    println!(
        "{}: {} unfit, {} warnings, {} cannot tell",
        report.verdict,
        count(Level::Unfit),
        count(Level::Warn),
        count(Level::CannotTell)
    );
}
