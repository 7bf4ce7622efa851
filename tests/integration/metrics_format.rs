//! The metrics file (`redlock_run::metrics`, for `--metrics-file`) read by a
//! real Prometheus text-format parser, Python's `prometheus_client`: names,
//! types, label values (escapes and all), values and counter sums, with the
//! state line on top that such parsers must skip, for a file written over
//! an older version's, for one started over from garbage, and for one that
//! several processes wrote at once.
//!
//! `prometheus_client` must be installed (`.ci/run` installs it); without it
//! these tests fail and say so.

use std::process::{Command, Stdio};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use redlock_run::metrics::{self, Nodes, Recorded, Run};
use redlock_run::outcome::Outcome;
use serde_json::{Value, json};

use crate::support::{tempdir, wait_until};

/// The families the module writes for every run that started its command,
/// with the type prometheus_client gives each (it names a counter's family
/// without `_total`, as OpenMetrics does).
const OURS: [(&str, &str); 7] = [
    ("redlock_run_degraded_runs", "counter"),
    ("redlock_run_last_duration_seconds", "gauge"),
    ("redlock_run_last_exit_code", "gauge"),
    ("redlock_run_last_start_timestamp_seconds", "gauge"),
    ("redlock_run_last_success_timestamp_seconds", "gauge"),
    ("redlock_run_refusals", "counter"),
    ("redlock_run_runs", "counter"),
];

/// The families of a run that reached the nodes.
const NODES: [(&str, &str); 2] = [
    ("redlock_run_last_nodes_answered", "gauge"),
    ("redlock_run_last_nodes_failed", "gauge"),
];

const OUTCOMES: [&str; 9] = [
    "already-ran",
    "busy",
    "failed",
    "lost",
    "not-run",
    "ok",
    "signal",
    "timeout",
    "unavailable",
];

/// Reads the file on stdin with prometheus_client and compares it with
/// `WANT` (hex of a JSON object: family types, every sample, and the sum of
/// `redlock_run_runs_total` per key). Exits non-zero with the difference.
const CHECK: &str = r#"
import json, sys
from prometheus_client.parser import text_string_to_metric_families

want = json.loads(bytes.fromhex(WANT).decode())
families = list(text_string_to_metric_families(sys.stdin.read()))
types = {f.name: f.type for f in families}
if types != want["types"]:
    sys.exit(f"families and types: got {types!r}, want {want['types']!r}")
got = {(s.name, tuple(sorted(s.labels.items())), s.value) for f in families for s in f.samples}
expected = {(n, tuple(sorted(l.items())), float(v)) for n, l, v in want["samples"]}
if got != expected:
    sys.exit(f"samples: unexpected {sorted(got - expected)!r}, missing {sorted(expected - got)!r}")
sums = {}
for f in families:
    if f.name == "redlock_run_runs":
        for s in f.samples:
            sums[s.labels["key"]] = sums.get(s.labels["key"], 0) + s.value
if sums != {k: float(v) for k, v in want["sums"].items()}:
    sys.exit(f"runs_total per key: got {sums!r}, want {want['sums']!r}")
print(len(expected))
"#;

/// Fails, saying what to install, when prometheus_client is missing: these
/// tests must never pass by not checking.
pub(crate) fn require_prometheus_client() {
    let out = Command::new("python3")
        .args(["-c", "import prometheus_client"])
        .output()
        .unwrap_or_else(|e| panic!("python3 is needed to check the metrics format: {e}"));
    assert!(
        out.status.success(),
        "python3 cannot import prometheus_client, the Prometheus text-format parser these \
         tests check the metrics file with: `python3 -m pip install prometheus_client` \
         (.ci/run installs it)\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A sample: its name, its labels, and its value as text.
type Sample = (String, Vec<(String, String)>, String);

/// What prometheus_client must find in the file.
#[derive(Default)]
struct Want {
    types: Vec<(String, String)>,
    samples: Vec<Sample>,
    sums: Vec<(String, u64)>,
}

impl Want {
    fn ours() -> Want {
        let mut want = Want::default();
        for (name, kind) in OURS {
            want.types.push((name.into(), kind.into()));
        }
        want
    }

    fn sample(&mut self, name: &str, labels: &[(&str, &str)], value: &str) {
        let labels = labels
            .iter()
            .map(|(n, v)| (n.to_string(), v.to_string()))
            .collect();
        self.samples.push((name.into(), labels, value.into()));
    }

    /// The gauges of one key.
    fn gauges(
        &mut self,
        key: &str,
        exit: &str,
        start: &str,
        duration: &str,
        success: Option<&str>,
    ) {
        let k = [("key", key)];
        self.sample("redlock_run_last_exit_code", &k, exit);
        self.sample("redlock_run_last_start_timestamp_seconds", &k, start);
        self.sample("redlock_run_last_duration_seconds", &k, duration);
        if let Some(s) = success {
            self.sample("redlock_run_last_success_timestamp_seconds", &k, s);
        }
    }

    /// The node gauges of one key (and their families, once).
    fn nodes(&mut self, key: &str, answered: &str, failed: &str) {
        for (name, kind) in NODES {
            if !self.types.iter().any(|(n, _)| n == name) {
                self.types.push((name.into(), kind.into()));
            }
        }
        self.sample("redlock_run_last_nodes_answered", &[("key", key)], answered);
        self.sample("redlock_run_last_nodes_failed", &[("key", key)], failed);
    }

    /// All nine outcome counters of one key, those not named at 0, its
    /// degraded-runs counter and its refusals counter (at 0).
    fn counters(&mut self, key: &str, counts: &[(&str, u64)], degraded: u64) {
        self.sample(
            "redlock_run_degraded_runs_total",
            &[("key", key)],
            &degraded.to_string(),
        );
        self.sample("redlock_run_refusals_total", &[("key", key)], "0");
        self.outcomes(&[("key", key)], counts);
    }

    /// All nine outcome counters of one key's --shared readers.
    fn shared_counters(&mut self, key: &str, counts: &[(&str, u64)]) {
        self.outcomes(&[("key", key), ("lock", "shared")], counts);
    }

    fn outcomes(&mut self, labels: &[(&str, &str)], counts: &[(&str, u64)]) {
        for outcome in OUTCOMES {
            let n = counts
                .iter()
                .find(|(o, _)| *o == outcome)
                .map_or(0, |(_, n)| *n);
            let mut labels = labels.to_vec();
            labels.push(("outcome", outcome));
            self.sample("redlock_run_runs_total", &labels, &n.to_string());
        }
        let key = labels[0].1;
        let sum: u64 = counts.iter().map(|(_, n)| n).sum();
        match self.sums.iter_mut().find(|(k, _)| k == key) {
            Some((_, n)) => *n += sum,
            None => self.sums.push((key.into(), sum)),
        }
    }

    fn json(&self) -> String {
        let types = object(self.types.iter().map(|(n, t)| (n, json!(t))));
        let samples: Vec<Value> = self
            .samples
            .iter()
            .map(|(name, labels, value)| {
                let labels = object(labels.iter().map(|(n, v)| (n, json!(v))));
                json!([name, labels, value])
            })
            .collect();
        let sums = object(self.sums.iter().map(|(k, n)| (k, json!(n))));
        json!({"types": types, "samples": samples, "sums": sums}).to_string()
    }
}

fn object<'a>(pairs: impl Iterator<Item = (&'a String, Value)>) -> Value {
    Value::Object(pairs.map(|(k, v)| (k.clone(), v)).collect())
}

/// Runs prometheus_client on `text`: Ok with its output when the file parses
/// and holds exactly `want`, Err with python's message otherwise.
fn prometheus_client(text: &str, want: &Want) -> Result<String, String> {
    use std::io::Write;
    let hex: String = want.json().bytes().map(|b| format!("{b:02x}")).collect();
    let script = format!("WANT = \"{hex}\"\n{CHECK}");
    let mut child = Command::new("python3")
        .args(["-c", &script])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python3 is needed to check the metrics format");
    child
        .stdin
        .take()
        .expect("stdin piped")
        .write_all(text.as_bytes())
        .expect("write to python3");
    let out = child.wait_with_output().expect("python3 output");
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

fn assert_parses(text: &str, want: &Want) {
    if let Err(e) = prometheus_client(text, want) {
        panic!("prometheus_client disagrees with the file: {e}\n--- file ---\n{text}");
    }
}

fn at(ms: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(ms)
}

fn run(key: &str, outcome: Outcome, exit_code: u8, start_ms: u64, duration_ms: u64) -> Run<'_> {
    Run {
        key,
        outcome,
        exit_code,
        started_at: at(start_ms),
        duration: Duration::from_millis(duration_ms),
        nodes: None,
        shared: false,
        pings: None,
    }
}

/// `run`, which reached the nodes and found them so.
fn run_on(nodes: (u32, u32), r: Run<'_>) -> Run<'_> {
    let (answered, failed) = nodes;
    Run {
        nodes: Some(Nodes {
            answered,
            failed,
            refused: 0,
        }),
        ..r
    }
}

/// Records `run` in a file that must be as the last run left it.
fn record(path: &std::path::Path, run: &Run<'_>) {
    let recorded = metrics::record(path, run).unwrap_or_else(|e| panic!("record: {e}"));
    assert_eq!(recorded, Recorded::AsLeft);
}

#[test]
fn prometheus_client_reads_names_types_escaped_labels_and_sums() {
    require_prometheus_client();
    let dir = tempdir();
    let path = dir.join("cron.prom");
    let report = "nightly-report";
    let weird = "we\"ird\\key\nnext ключ ✓ {a=\"b\"} \t\r\n# TYPE x counter";
    record(
        &path,
        &run_on(
            (3, 0),
            run(report, Outcome::Ok, 0, 1_795_921_200_012, 412_877),
        ),
    );
    // A busy run with a node down: degraded.
    record(
        &path,
        &run_on((2, 1), run(report, Outcome::Busy, 75, 1_795_921_201_000, 3)),
    );
    // A --shared reader's run, counted apart.
    let reader = Run {
        shared: true,
        ..run(report, Outcome::Busy, 75, 1_795_921_202_000, 4)
    };
    record(&path, &run_on((3, 0), reader));
    record(
        &path,
        &run_on(
            (3, 0),
            run(report, Outcome::Failed, 3, 1_795_924_800_250, 1_500),
        ),
    );
    record(
        &path,
        &run(weird, Outcome::Lost, 76, 1_795_930_000_001, 9_999),
    );
    record(
        &path,
        &run(weird, Outcome::Signal, 143, 1_795_935_000_000, 5),
    );
    record(
        &path,
        &run(weird, Outcome::Unavailable, 69, 1_795_940_000_000, 7),
    );
    record(
        &path,
        &run(weird, Outcome::AlreadyRan, 75, 1_795_950_000_000, 8),
    );
    record(
        &path,
        &run(weird, Outcome::Timeout, 124, 1_795_960_000_100, 60_000),
    );

    let mut want = Want::ours();
    // The failed run moved every gauge but the last success.
    want.gauges(report, "3", "1795924800.25", "1.5", Some("1795921612.889"));
    want.counters(report, &[("ok", 1), ("busy", 1), ("failed", 1)], 1);
    want.shared_counters(report, &[("busy", 1)]);
    // The last run found every node again; the busy one is still counted.
    want.nodes(report, "3", "0");
    // Unavailable and already-ran runs moved no gauge; none succeeded; none
    // of these reached the nodes, so they have no node gauges.
    want.gauges(weird, "124", "1795960000.1", "60", None);
    want.counters(
        weird,
        &[
            ("lost", 1),
            ("signal", 1),
            ("unavailable", 1),
            ("already-ran", 1),
            ("timeout", 1),
        ],
        0,
    );
    let text = std::fs::read_to_string(&path).expect("read");
    assert_parses(&text, &want);
    assert!(text.starts_with("# redlock-run state: {"), "{text}");
}

/// What a version before the state line left in a shared file: its own
/// series, one of them under a word no longer counted, and another job's.
const OLDER_VERSION: &str = "\
# HELP backup_last_ok_timestamp_seconds Written by the backup job.
# TYPE backup_last_ok_timestamp_seconds gauge
backup_last_ok_timestamp_seconds{host=\"db1\"} 1700000000.5
# HELP redlock_run_last_exit_code Exit status of the last run that started its command.
# TYPE redlock_run_last_exit_code gauge
redlock_run_last_exit_code{key=\"k\"} 1
redlock_run_last_exit_code{key=\"gone\"} 2
# HELP redlock_run_runs_total Runs by outcome: ok, failed, signal, not-run, busy, already-ran, unavailable, lost, timeout.
# TYPE redlock_run_runs_total counter
redlock_run_runs_total{key=\"k\",outcome=\"ok\"} 41
redlock_run_runs_total{key=\"k\",outcome=\"ran\"} 7
redlock_run_runs_total{key=\"gone\",outcome=\"busy\"} 3
";

#[test]
fn prometheus_client_reads_a_file_written_over_an_older_versions() {
    require_prometheus_client();
    let dir = tempdir();
    let path = dir.join("cron.prom");
    std::fs::write(&path, OLDER_VERSION).expect("seed the file");
    let recorded = metrics::record(&path, &run("k", Outcome::Ok, 0, 1_000, 2_000))
        .unwrap_or_else(|e| panic!("record: {e}"));
    assert_eq!(recorded, Recorded::NoState);
    let warning = recorded.warning(&path).expect("the start over is reported");
    assert!(warning.contains("cron.prom"), "{warning}");
    // This run alone: the counts started over, the other lines are gone.
    let mut want = Want::ours();
    want.gauges("k", "0", "1", "2", Some("3"));
    want.counters("k", &[("ok", 1)], 0);
    assert_parses(&std::fs::read_to_string(&path).expect("read"), &want);
    // And from there on it counts.
    record(&path, &run("k", Outcome::Ok, 0, 1_000, 2_000));
    let mut want = Want::ours();
    want.gauges("k", "0", "1", "2", Some("3"));
    want.counters("k", &[("ok", 2)], 0);
    assert_parses(&std::fs::read_to_string(&path).expect("read"), &want);
}

#[test]
fn prometheus_client_reads_a_file_started_over_from_garbage() {
    require_prometheus_client();
    let dir = tempdir();
    let path = dir.join("cron.prom");
    let garbage = "# redlock-run state: {\"keys\":{\"k\":{\"runs\":{\"ok\":12,\n\
                   this is not a metric line {\n\
                   redlock_run_runs_total{key=\"k\",outc\n";
    std::fs::write(&path, garbage).expect("seed the file");
    assert!(
        prometheus_client(garbage, &Want::default()).is_err(),
        "prometheus_client should reject the garbage this test starts over from"
    );
    let recorded = metrics::record(&path, &run("k", Outcome::Ok, 0, 1_000, 2_000))
        .unwrap_or_else(|e| panic!("record: {e}"));
    let Recorded::BadState(ref why) = recorded else {
        panic!("{recorded:?}");
    };
    assert!(why.starts_with("line 1, column "), "{why}");
    let warning = recorded.warning(&path).expect("the start over is reported");
    assert!(warning.contains("cron.prom"), "{warning}");
    let mut want = Want::ours();
    want.gauges("k", "0", "1", "2", Some("3"));
    want.counters("k", &[("ok", 1)], 0);
    assert_parses(&std::fs::read_to_string(&path).expect("read"), &want);
}

const CHILD_ENV: &str = "REDLOCK_METRICS_CHILD";
const CHILD_TEST: &str = "metrics_format::child_writer_for_processes_test";
const PROCESSES: usize = 6;
const EACH: usize = 30;

/// Not a test of its own: the body of each child process of
/// `processes_sharing_a_file_lose_no_increment`, which runs this test binary
/// again filtered down to this function. Without the variable it does nothing.
#[test]
fn child_writer_for_processes_test() {
    let Some(spec) = std::env::var_os(CHILD_ENV) else {
        return;
    };
    let spec = spec.to_string_lossy().into_owned();
    let (n, path) = spec.split_once(':').expect("N:PATH");
    let n: usize = n.parse().expect("child number");
    let path = std::path::Path::new(path);
    let go = path.with_extension("go");
    // All start together, so that they contend for the lock.
    assert!(wait_until(Duration::from_secs(30), || go.exists()), "no go");
    let key = if n.is_multiple_of(2) { "even" } else { "odd" };
    for i in 0..EACH {
        let r = if i.is_multiple_of(3) {
            run(key, Outcome::Busy, 75, 5_000, 1)
        } else {
            run(key, Outcome::Ok, 0, 1_000, 2_000)
        };
        record(path, &r);
    }
}

#[test]
fn processes_sharing_a_file_lose_no_increment() {
    require_prometheus_client();
    let dir = tempdir();
    let path = dir.join("cron.prom");
    let exe = std::env::current_exe().expect("test binary");
    let children: Vec<_> = (0..PROCESSES)
        .map(|n| {
            Command::new(&exe)
                .args([CHILD_TEST, "--exact", "--nocapture", "--test-threads=1"])
                .env(CHILD_ENV, format!("{n}:{}", path.display()))
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("start a child writer")
        })
        .collect();
    std::fs::write(path.with_extension("go"), "").expect("go");
    for child in children {
        let out = child.wait_with_output().expect("child writer");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && stdout.contains("1 passed"),
            "child writer failed:\n{stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let busy = EACH.div_ceil(3) as u64;
    let ran = EACH as u64 - busy;
    let per_key = (PROCESSES / 2) as u64;
    let mut want = Want::ours();
    for key in ["even", "odd"] {
        want.gauges(key, "0", "1", "2", Some("3"));
        want.counters(key, &[("ok", per_key * ran), ("busy", per_key * busy)], 0);
    }
    assert_parses(&std::fs::read_to_string(&path).expect("read"), &want);
}
