//! `check`: each node judged against what the lock rests on, one line per
//! finding with its advice. Exit 0 when every node is fit, 1 with warnings
//! only (or what could not be told), 69 when a node is unfit or fewer than
//! a quorum answer, 64 when the settings make every run exit 64 (a file
//! it cannot write, an option file, a TTL), as the run would.
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

use super::config::{Unfit, as_run};
use crate::cli::{CheckArgs, Unusable};
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
    pub(super) fn new(check: &'static str, level: Level, says: impl Into<String>) -> Finding {
        Finding {
            check,
            level,
            says: says.into(),
            advice: None,
        }
    }

    pub(super) fn advice(mut self, advice: impl Into<String>) -> Finding {
        self.advice = Some(advice.into());
        self
    }
}

/// Every finding: the run's own settings, node by node, and those about
/// the nodes together.
#[derive(Serialize)]
pub(super) struct Report {
    pub verdict: &'static str,
    /// What a run refuses before it reaches a node (64): a file it could
    /// not write, an option file, a TTL its heartbeat cannot keep.
    pub settings: Vec<Finding>,
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
            settings: Vec::new(),
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

    pub(super) fn on(&mut self, i: usize, f: Finding) {
        if let Some(n) = self.nodes.get_mut(i) {
            n.findings.push(f);
        }
    }

    fn worst(&self) -> Level {
        self.findings().map(|f| f.level).max().unwrap_or(Level::Ok)
    }

    fn findings(&self) -> impl Iterator<Item = &Finding> {
        self.settings
            .iter()
            .chain(self.nodes.iter().flat_map(|n| &n.findings))
            .chain(&self.quorum)
    }

    /// A setting every run would be refused over (64).
    fn refuses_runs(&self) -> bool {
        self.settings.iter().any(|f| f.level == Level::Unfit)
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

pub(crate) fn run(args: &CheckArgs, given: &[OsString]) -> Exit {
    let name = reserved_name();
    let run = match as_run(given, &name) {
        Ok(r) => r,
        // A run would refuse these settings before reaching a node: the
        // nodes cannot be judged as a run would meet them either.
        Err(Unfit::File(e)) => return refused(e.to_string(), args.json),
        Err(Unfit::Run(Unusable::Usage(msg))) => return refused(msg, args.json),
        Err(e) => return e.exit(),
    };
    let c = &run.config;
    if c.options.tls_insecure {
        crate::log::say(format_args!(
            "--tls-insecure: certificates and host names of rediss:// nodes are not checked"
        ));
    }
    let nodes = match Nodes::new(&c.urls, &c.options) {
        Ok(n) => n,
        Err(msg) => {
            return crate::error::Error::usage(msg).said();
        }
    };
    let mut report = Report::new(&nodes);
    report.settings = outputs(c);
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
    report.quorum.extend(odd(nodes.len()));
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
    finish(report, args.json)
}

/// The verdict, the report printed, and the status it ends with.
fn finish(mut report: Report, json: bool) -> Exit {
    let worst = report.worst();
    report.verdict = match worst {
        Level::Ok => "fit",
        Level::Warn | Level::CannotTell => "warnings",
        Level::Unfit => "unfit",
    };
    if json {
        super::print_json(&report);
    } else {
        print_text(&report);
    }
    match worst {
        _ if report.refuses_runs() => Exit::Usage,
        Level::Ok => Exit::Command(0),
        Level::Warn | Level::CannotTell => Exit::Command(exit::CHECK_WARNINGS),
        Level::Unfit => Exit::Unavailable,
    }
}

/// Settings no run can start with, found before any node is known: the
/// one finding, and 64 as the run's.
fn refused(msg: String, json: bool) -> Exit {
    let report = Report {
        verdict: "",
        settings: vec![
            Finding::new("settings", Level::Unfit, msg)
                .advice("every run exits 64 with this line until it is fixed"),
        ],
        nodes: Vec::new(),
        quorum: Vec::new(),
    };
    finish(report, json)
}

/// Each file a run writes, and whether it can.
fn outputs(c: &crate::cli::Config) -> Vec<Finding> {
    c.outputs()
        .into_iter()
        .map(|(flag, path, said)| match said {
            Ok(()) => Finding::new(
                "output",
                Level::Ok,
                format!("{flag} {} can be written", path.display()),
            ),
            Err(msg) => Finding::new("output", Level::Unfit, msg)
                .advice("every run exits 64 without running its command until it can be"),
        })
        .collect()
}

/// An even number of nodes tolerates no more nodes down than one fewer
/// does: a warning naming the odd numbers around it.
fn odd(n: usize) -> Option<Finding> {
    if n % 2 == 1 {
        return None;
    }
    let q = redlock::quorum(n);
    let finding = if n == 2 {
        Finding::new(
            "node count",
            Level::Warn,
            "2 nodes: a lock needs both, so one node down means no lock",
        )
        .advice("use 3 nodes (a lock then needs 2, so one may be down), or 5")
    } else {
        Finding::new(
            "node count",
            Level::Warn,
            format!(
                "{n} nodes: a lock needs {q}, so {} down means no lock, as with {}",
                n - q + 1,
                n - 1
            ),
        )
        .advice(format!(
            "use an odd number: {} nodes tolerate {} down, {n} only {}",
            n + 1,
            n / 2,
            n - q
        ))
    };
    Some(finding)
}

fn print_text(report: &Report) {
    let line = |f: &Finding| {
        let advice = f
            .advice
            .as_deref()
            .map_or(String::new(), |a| format!(": {a}"));
        println!("  {:<11} {}{advice}", f.level.label(), f.says);
    };
    if !report.settings.is_empty() {
        println!("settings");
        report.settings.iter().for_each(line);
    }
    for n in &report.nodes {
        println!("{}", n.node);
        n.findings.iter().for_each(line);
    }
    if !report.quorum.is_empty() {
        println!("all nodes");
        report.quorum.iter().for_each(line);
    }
    let count = |l: Level| report.findings().filter(|f| f.level == l).count();
    println!(
        "{}: {} unfit, {} warnings, {} cannot tell",
        report.verdict,
        count(Level::Unfit),
        count(Level::Warn),
        count(Level::CannotTell)
    );
}
