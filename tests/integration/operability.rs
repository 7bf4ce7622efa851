//! Operability: the holder record stored beside the lock, `status`,
//! `unlock` (by token and `--force`), verbose and JSON logs (never a
//! password in them) and the `--report` summary.
//!
//! JSON is checked with python3's `json` module (strict: no duplicate keys,
//! no NaN, one object per line), flattened into `path -> value` pairs so the
//! assertions stay plain Rust.
//!
//! Commands run with the test's temp dir as working directory, so marker
//! files (`touch ready`) are relative names checked with `dir.has("ready")`.

use std::collections::{BTreeMap, HashMap};
use std::fs;
use std::time::{Duration, Instant};

use crate::support::{
    Cluster, RedisNode, RunOutput, Running, TempDir, Test, is_token, kill_if_alive, lock_key,
    pid_alive, python, read_pid_file, show, tempdir, wait_until,
};
use crate::support::{START, WAIT_FOR_GO, await_marker, touch};

/// The user name the holders below run as (`USER` is what the record reports).
const USER: &str = "opuser";

/// The password used by the redaction tests.
const SECRET: &str = "s3cret";

// ---------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------

/// `redlock-run -r URLS -k NAME` run inside `dir`, as user [`USER`].
fn base(urls: &str, name: &str, dir: &TempDir) -> Test {
    Test::new()
        .current_dir(dir.path())
        .env("USER", USER)
        .args(["-r", urls, "-k", name])
}

/// `redlock-run status -r URLS -k NAME EXTRA...`.
fn status(urls: &str, name: &str, extra: &[&str]) -> RunOutput {
    Test::new()
        .args(["status", "-r", urls, "-k", name])
        .args(extra)
        .run()
}

/// `redlock-run unlock -r URLS -k NAME EXTRA...`.
fn unlock(urls: &str, name: &str, extra: &[&str]) -> RunOutput {
    Test::new()
        .args(["unlock", "-r", urls, "-k", name])
        .args(extra)
        .run()
}

/// The holder record's key for lock `name` with the default prefix.
fn holder_key(name: &str) -> Vec<u8> {
    crate::support::keys(name).holder(None)
}

/// HGETALL of `key` (fails the test on non-UTF-8 content).
fn hash(node: &RedisNode, key: &[u8]) -> HashMap<String, String> {
    node.cmd(redis::cmd("HGETALL").arg(key))
}

/// Redis type of `key` ("none" when absent).
fn key_type(node: &RedisNode, key: &[u8]) -> String {
    node.cmd(redis::cmd("TYPE").arg(key))
}

fn hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: the buffer is valid for its length.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    assert_eq!(rc, 0, "gethostname failed");
    let end = buf.iter().position(|b| *b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}

fn unix_ms() -> u64 {
    (crate::support::realtime_ns() / 1_000_000) as u64
}

/// The last line of stdout (the verdict of `status`).
fn last_line(out: &RunOutput) -> &str {
    out.stdout.lines().last().unwrap_or("")
}

/// The number of seconds written just before `suffix` ("2.6s left" with
/// suffix "s left" gives 2.6).
fn secs_before(line: &str, suffix: &str) -> f64 {
    let end = line
        .find(suffix)
        .unwrap_or_else(|| panic!("{suffix:?} not in {line:?}"));
    let start = line[..end]
        .rfind(|c: char| !(c.is_ascii_digit() || c == '.'))
        .map_or(0, |i| i + 1);
    line[start..end]
        .parse()
        .unwrap_or_else(|e| panic!("no number before {suffix:?} in {line:?}: {e}"))
}

/// Waits for `running` to exit within `limit`, panicking with its output.
fn wait_exit(mut running: Running, limit: Duration, what: &str) -> RunOutput {
    match running.wait_timeout(limit) {
        Some(out) => out,
        None => panic!(
            "{what}: still running after {limit:?}\n--- stdout ---\n{}\n--- stderr ---\n{}",
            running.stdout_so_far(),
            running.stderr_so_far()
        ),
    }
}

// ---------------------------------------------------------------------------
// JSON through python3
// ---------------------------------------------------------------------------

/// Parses every line of its stdin as one JSON object and prints, for each,
/// `#N` then one `path<TAB>kind<TAB>value` line per node of the tree. Kinds:
/// `{` object and `[` array (value = length), `s` string (JSON-escaped,
/// without quotes), `n` number, `b` boolean, `z` null.
const FLATTEN_PY: &str = r##"
import json, sys

def no_dups(pairs):
    d = {}
    for k, v in pairs:
        if k in d:
            raise ValueError("duplicate key %r" % k)
        d[k] = v
    return d

def no_constants(c):
    raise ValueError("non-standard constant %s" % c)

def walk(path, v, out):
    if isinstance(v, dict):
        out.append("%s\t{\t%d" % (path, len(v)))
        for k, x in v.items():
            walk(path + "." + k if path else k, x, out)
    elif isinstance(v, list):
        out.append("%s\t[\t%d" % (path, len(v)))
        for i, x in enumerate(v):
            walk(path + "." + str(i) if path else str(i), x, out)
    elif isinstance(v, bool):
        out.append("%s\tb\t%s" % (path, "true" if v else "false"))
    elif v is None:
        out.append("%s\tz\tnull" % path)
    elif isinstance(v, (int, float)):
        out.append("%s\tn\t%r" % (path, v))
    else:
        out.append("%s\ts\t%s" % (path, json.dumps(v, ensure_ascii=False)[1:-1]))

data = sys.stdin.buffer.read().decode("utf-8")
lines = data.split("\n")
if lines and lines[-1] == "":
    lines.pop()
else:
    sys.exit("output does not end with a newline")
out = []
for n, line in enumerate(lines):
    try:
        v = json.loads(line, object_pairs_hook=no_dups, parse_constant=no_constants)
    except ValueError as e:
        sys.exit("line %d is not JSON: %s\n%r" % (n + 1, e, line))
    if not isinstance(v, dict):
        sys.exit("line %d is not a JSON object: %r" % (n + 1, line))
    out.append("#%d" % n)
    walk("", v, out)
sys.stdout.write("\n".join(out) + "\n")
"##;

/// One parsed JSON object, flattened: `"nodes.0.holder.pid" -> ('s', "123")`.
struct Doc {
    fields: BTreeMap<String, (char, String)>,
    source: String,
}

impl Doc {
    fn get(&self, path: &str) -> Option<&(char, String)> {
        self.fields.get(path)
    }

    fn has(&self, path: &str) -> bool {
        self.fields.contains_key(path)
    }

    fn typed(&self, path: &str, kind: char) -> &str {
        match self.get(path) {
            Some((k, v)) if *k == kind => v,
            Some((k, v)) => panic!(
                "{path}: kind {k:?} ({v}), want {kind:?}\nin {}",
                self.source
            ),
            None => panic!("{path} missing in {}", self.source),
        }
    }

    fn str(&self, path: &str) -> &str {
        self.typed(path, 's')
    }

    fn num(&self, path: &str) -> f64 {
        let v = self.typed(path, 'n');
        v.parse()
            .unwrap_or_else(|e| panic!("{path}: {v:?}: {e}\nin {}", self.source))
    }

    /// A number that must be a whole number (no fraction, no exponent).
    fn int(&self, path: &str) -> i64 {
        let v = self.typed(path, 'n');
        v.parse()
            .unwrap_or_else(|e| panic!("{path}: {v:?} is not an integer: {e}\nin {}", self.source))
    }

    fn bool(&self, path: &str) -> bool {
        self.typed(path, 'b') == "true"
    }

    /// Length of the object or array at `path`.
    fn len(&self, path: &str) -> usize {
        match self.get(path) {
            Some(('{' | '[', n)) => n.parse().expect("length"),
            other => panic!("{path}: {other:?} is no container\nin {}", self.source),
        }
    }

    /// A scalar as text, whatever its JSON type (a pid may be a string or a
    /// number).
    fn scalar(&self, path: &str) -> &str {
        match self.get(path) {
            Some(('s' | 'n' | 'b', v)) => v,
            other => panic!("{path}: {other:?} is no scalar\nin {}", self.source),
        }
    }
}

/// Parses `text` as JSON Lines: each line one object. Panics with the
/// parser's message otherwise.
fn parse_json_lines(text: &str) -> Vec<Doc> {
    let flat = python(FLATTEN_PY, text);
    let sources: Vec<&str> = text.lines().collect();
    let mut docs: Vec<Doc> = Vec::new();
    for line in flat.lines() {
        if let Some(n) = line.strip_prefix('#') {
            let n: usize = n.parse().expect("doc index");
            docs.push(Doc {
                fields: BTreeMap::new(),
                source: sources[n].to_string(),
            });
            continue;
        }
        let mut parts = line.splitn(3, '\t');
        let (path, kind, value) = (
            parts.next().expect("path"),
            parts.next().expect("kind"),
            parts.next().expect("value"),
        );
        let kind = kind.chars().next().expect("kind char");
        docs.last_mut()
            .expect("a #N line first")
            .fields
            .insert(path.to_string(), (kind, value.to_string()));
    }
    docs
}

/// Parses `text` as exactly one JSON object on one line.
fn parse_json(text: &str) -> Doc {
    let mut docs = parse_json_lines(text);
    assert_eq!(docs.len(), 1, "want exactly one JSON object:\n{text}");
    docs.pop().expect("one doc")
}

/// Reads and parses a `--report` file.
fn report(path: &std::path::Path, out: &RunOutput) -> Doc {
    let text = fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("report {} not written: {e}\n{out}", path.display()));
    parse_json(&text)
}

// ---------------------------------------------------------------------------
// Self-check of the JSON helper (a broken checker would pass anything)
// ---------------------------------------------------------------------------

#[test]
fn json_checker_accepts_json_and_rejects_the_rest() {
    let doc = parse_json(
        "{\"a\":\"x\\\"y\",\"n\":1.5,\"i\":-3,\"b\":false,\"z\":null,\"o\":{\"p\":[1,\"é\"]}}\n",
    );
    assert_eq!(doc.str("a"), "x\\\"y");
    assert_eq!(doc.num("n"), 1.5);
    assert_eq!(doc.int("i"), -3);
    assert!(!doc.bool("b"));
    assert!(doc.has("z"));
    assert_eq!(doc.len("o"), 1);
    assert_eq!(doc.len("o.p"), 2);
    assert_eq!(doc.scalar("o.p.0"), "1");
    assert_eq!(doc.str("o.p.1"), "é");
    assert_eq!(parse_json_lines("{}\n{\"k\":1}\n").len(), 2);

    for bad in [
        "{\"a\":1}",            // no newline
        "{\"a\":1,\"a\":2}\n",  // duplicate key
        "{\"a\":NaN}\n",        // not JSON
        "[1]\n",                // not an object
        "{\"a\":1} trailing\n", // garbage
        "{\"a\":\"x\ny\"}\n",   // raw newline inside a string
    ] {
        let text = bad.to_string();
        let result = std::panic::catch_unwind(move || parse_json_lines(&text).len());
        assert!(result.is_err(), "accepted {bad:?}");
    }
}

// ---------------------------------------------------------------------------
// status
// ---------------------------------------------------------------------------

#[test]
fn status_of_a_free_lock_text_and_json_with_nodes_down() {
    let mut cluster = Cluster::new(3);
    let urls = cluster.urls();

    let out = status(&urls, "idle", &[]);
    out.assert_code(0);
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert_eq!(lines.len(), 5, "header, 3 nodes, verdict\n{out}");
    assert!(
        lines[0].contains("idle") && lines[0].contains("lock:idle"),
        "header names the lock and its key\n{out}"
    );
    for (i, node) in cluster.iter().enumerate() {
        assert!(
            lines[i + 1].contains(&node.url())
                && lines[i + 1].contains(": free")
                && lines[i + 1].contains("started"),
            "node line {i} should say free, and that its server started a moment ago\n{out}"
        );
    }
    assert_eq!(lines[4], "free", "verdict\n{out}");

    let out = status(&urls, "idle", &["--json"]);
    out.assert_code(0);
    let doc = parse_json(&out.stdout);
    assert_eq!(doc.str("name"), "idle");
    assert_eq!(doc.str("key"), "lock:idle");
    assert_eq!(doc.int("quorum"), 2);
    assert_eq!(doc.len("nodes"), 3);
    for (i, node) in cluster.iter().enumerate() {
        assert_eq!(doc.str(&format!("nodes.{i}.node")), node.url());
        assert!(doc.bool(&format!("nodes.{i}.reachable")));
        assert!(!doc.bool(&format!("nodes.{i}.held")));
        assert!(!doc.has(&format!("nodes.{i}.holder")));
    }
    assert_eq!(doc.str("verdict"), "free");
    assert!(
        !doc.has("holder") && !doc.has("token_prefix"),
        "{}",
        out.stdout
    );

    // One node of three down: the other two still give a verdict.
    let dead = cluster[2].url();
    cluster.node_mut(2).kill();
    let out = status(&urls, "idle", &[]);
    out.assert_code(0);
    assert_eq!(last_line(&out), "free", "{out}");
    let dead_line = out
        .stdout
        .lines()
        .find(|l| l.contains(&dead))
        .unwrap_or_else(|| panic!("no line for the dead node\n{out}"));
    assert!(
        dead_line.contains("unreachable"),
        "dead node line: {dead_line:?}\n{out}"
    );
    let out = status(&urls, "idle", &["--json"]);
    out.assert_code(0);
    let doc = parse_json(&out.stdout);
    assert_eq!(doc.str("verdict"), "free");
    assert!(doc.bool("nodes.0.reachable") && doc.bool("nodes.1.reachable"));
    assert!(!doc.bool("nodes.2.reachable"), "{}", out.stdout);
    assert!(!doc.str("nodes.2.error").is_empty(), "{}", out.stdout);

    // Two of three down: no verdict, exit 69.
    cluster.node_mut(1).kill();
    let out = status(&urls, "idle", &[]);
    out.assert_code(69);
    assert_eq!(
        last_line(&out),
        "unknown: fewer than a quorum of nodes answered",
        "{out}"
    );
    let out = status(&urls, "idle", &["--json"]);
    out.assert_code(69);
    let doc = parse_json(&out.stdout);
    assert_eq!(doc.str("verdict"), "unknown");
    assert!(doc.bool("nodes.0.reachable"));
    assert!(!doc.bool("nodes.1.reachable") && !doc.bool("nodes.2.reachable"));

    // unlock cannot reach a quorum either: 69, by token and forced.
    let out = unlock(&urls, "idle", &["--token", &"ab".repeat(16)]);
    out.assert_code(69);
    let out = unlock(&urls, "idle", &["--force"]);
    out.assert_code(69);
}

#[test]
fn status_of_a_held_lock_text_and_json_with_nodes_down() {
    let mut cluster = Cluster::new(3);
    let dir = tempdir();
    let urls = cluster.urls();
    let key = lock_key("busyjob");
    let host = hostname();
    let holder = base(&urls, "busyjob", &dir)
        .args(["--record-command", "masked"])
        .args(["--", "sh", "-c", &format!("touch ready; {WAIT_FOR_GO}")])
        .spawn();
    await_marker(&dir, "ready", &holder);
    cluster.await_on_all(&key);
    let token = String::from_utf8(cluster[0].get(&key).expect("token")).expect("utf-8");
    let tok8 = &token[..8];
    let pid = holder.pid().to_string();

    let out = status(&urls, "busyjob", &[]);
    out.assert_code(1);
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert_eq!(lines.len(), 5, "header, 3 nodes, verdict\n{out}");
    for (i, node) in cluster.iter().enumerate() {
        let line = lines[i + 1];
        assert!(line.contains(&node.url()), "node line {i}\n{out}");
        assert!(line.contains("held"), "node line {i}\n{out}");
        assert!(
            line.contains(&format!("token {tok8}…")),
            "node line {i}\n{out}"
        );
        assert!(
            !line.contains(&token[8..]),
            "a node line shows the full token\n{out}"
        );
        let left = secs_before(line, "s left");
        assert!(left > 0.0 && left <= 30.0, "time left {left}\n{out}");
        assert!(
            line.contains(&host) && line.contains(&format!("pid {pid}")),
            "node line {i} names host and pid\n{out}"
        );
        assert!(line.contains("touch ready"), "node line {i} command\n{out}");
    }
    let verdict = lines[4];
    assert!(
        verdict.starts_with(&format!("held by {USER}@{host} pid {pid} for ")),
        "verdict {verdict:?}\n{out}"
    );
    let held_for = secs_before(verdict, "s, token");
    assert!(
        (0.0..10.0).contains(&held_for),
        "held for {held_for}\n{out}"
    );
    assert!(
        verdict.contains(&format!("token {tok8}…, on 3/3 node(s), ")),
        "verdict {verdict:?}\n{out}"
    );
    let left = secs_before(verdict, "s left");
    assert!(left > 0.0 && left <= 30.0, "time left {left}\n{out}");
    assert!(!out.stdout.contains(&token), "full token shown\n{out}");

    let out = status(&urls, "busyjob", &["--json"]);
    out.assert_code(1);
    let doc = parse_json(&out.stdout);
    assert_eq!(doc.str("name"), "busyjob");
    assert_eq!(doc.str("key"), "lock:busyjob");
    assert_eq!(doc.int("quorum"), 2);
    assert_eq!(doc.str("verdict"), "held");
    assert_eq!(doc.str("token_prefix"), tok8);
    assert_eq!(doc.int("held_on"), 3);
    let pttl = doc.int("pttl_ms");
    assert!(pttl > 0 && pttl <= 30_000, "pttl_ms {pttl}");
    let held_ms = doc.int("held_ms");
    assert!((0..10_000).contains(&held_ms), "held_ms {held_ms}");
    assert_eq!(doc.scalar("holder.pid"), pid);
    assert_eq!(doc.str("holder.user"), USER);
    assert_eq!(doc.str("holder.host"), host);
    assert!(doc.str("holder.command").contains("touch ready"));
    for i in 0..3 {
        assert!(doc.bool(&format!("nodes.{i}.reachable")));
        assert!(doc.bool(&format!("nodes.{i}.held")));
        assert_eq!(doc.str(&format!("nodes.{i}.token_prefix")), tok8);
        let p = doc.int(&format!("nodes.{i}.pttl_ms"));
        assert!(p > 0 && p <= 30_000, "node {i} pttl_ms {p}");
        assert_eq!(doc.scalar(&format!("nodes.{i}.holder.pid")), pid);
    }
    assert!(!out.stdout.contains(&token), "full token shown\n{out}");

    // One node down: still held, on 2/3.
    let dead = cluster[2].url();
    cluster.node_mut(2).kill();
    let out = status(&urls, "busyjob", &[]);
    out.assert_code(1);
    assert!(last_line(&out).contains("on 2/3 node(s)"), "verdict\n{out}");
    assert!(
        out.stdout
            .lines()
            .any(|l| l.contains(&dead) && l.contains("unreachable")),
        "dead node not reported unreachable\n{out}"
    );
    let out = status(&urls, "busyjob", &["--json"]);
    out.assert_code(1);
    let doc = parse_json(&out.stdout);
    assert_eq!(doc.str("verdict"), "held");
    assert_eq!(doc.int("held_on"), 2);
    assert!(!doc.bool("nodes.2.reachable"));
    assert!(!doc.str("nodes.2.error").is_empty());

    // Two down: unknown.
    cluster.node_mut(1).kill();
    let out = status(&urls, "busyjob", &[]);
    out.assert_code(69);
    assert_eq!(
        last_line(&out),
        "unknown: fewer than a quorum of nodes answered",
        "{out}"
    );
    let out = status(&urls, "busyjob", &["--json"]);
    out.assert_code(69);
    assert_eq!(parse_json(&out.stdout).str("verdict"), "unknown");

    touch(&dir, "go");
    drop(wait_exit(holder, Duration::from_secs(15), "holder"));
}

#[test]
fn status_with_frozen_nodes_is_bounded_by_the_node_timeout() {
    let cluster = Cluster::new(3);
    let urls = cluster.urls();
    let token = "89abcdef0123456789abcdef01234567";
    cluster[0].set(lock_key("frozen"), token, 20_000);
    cluster[1].set(lock_key("frozen"), token, 20_000);
    cluster[2].stop();
    let fast = ["--node-timeout", "100ms"];

    let out = status(&urls, "frozen", &fast);
    out.assert_code(1);
    assert!(
        out.elapsed < Duration::from_millis(1500),
        "took {:?}",
        out.elapsed
    );
    assert!(
        last_line(&out).contains("token 89abcdef…, on 2/3 node(s)"),
        "verdict\n{out}"
    );
    let frozen = out
        .stdout
        .lines()
        .find(|l| l.contains(&cluster[2].url()))
        .unwrap_or_else(|| panic!("no line for the frozen node\n{out}"));
    assert!(
        !frozen.contains("free") && !frozen.contains("held"),
        "frozen node line {frozen:?}\n{out}"
    );
    let out = status(&urls, "frozen", &["--node-timeout", "100ms", "--json"]);
    out.assert_code(1);
    let doc = parse_json(&out.stdout);
    assert_eq!(doc.int("held_on"), 2);
    assert!(!doc.bool("nodes.2.reachable"), "{}", out.stdout);
    assert!(!doc.has("nodes.2.held"), "{}", out.stdout);

    cluster[1].stop();
    let out = status(&urls, "frozen", &fast);
    out.assert_code(69);
    assert!(
        out.elapsed < Duration::from_millis(1500),
        "took {:?}",
        out.elapsed
    );
    assert_eq!(
        last_line(&out),
        "unknown: fewer than a quorum of nodes answered",
        "{out}"
    );
    cluster[1].cont();
    cluster[2].cont();
}

#[test]
fn status_of_a_lock_without_record_and_with_a_prefix() {
    let cluster = Cluster::new(3);
    let urls = cluster.urls();
    // Another Redlock client: a plain token, no holder record, on 2 of 3.
    let token = "0123456789abcdef0123456789abcdef";
    cluster[0].set(lock_key("foreign"), token, 20_000);
    cluster[1].set(lock_key("foreign"), token, 20_000);
    let out = status(&urls, "foreign", &[]);
    out.assert_code(1);
    assert!(
        last_line(&out).contains("token 01234567…, on 2/3 node(s)"),
        "verdict\n{out}"
    );
    let out = status(&urls, "foreign", &["--json"]);
    out.assert_code(1);
    let doc = parse_json(&out.stdout);
    assert_eq!(doc.str("verdict"), "held");
    assert_eq!(doc.int("held_on"), 2);
    assert_eq!(doc.str("token_prefix"), "01234567");
    assert!(!doc.has("holder"), "no record, no holder\n{}", out.stdout);
    assert!(!doc.bool("nodes.2.held"));

    // --prefix: a different key; the default prefix does not see it.
    cluster[0].set("app/pfx", token, 20_000);
    cluster[1].set("app/pfx", token, 20_000);
    let out = status(&urls, "pfx", &["--prefix", "app/", "--json"]);
    out.assert_code(1);
    let doc = parse_json(&out.stdout);
    assert_eq!(doc.str("key"), "app/pfx");
    assert_eq!(doc.str("verdict"), "held");
    status(&urls, "pfx", &[]).assert_code(0);
}

// ---------------------------------------------------------------------------
// The holder record
// ---------------------------------------------------------------------------

#[test]
fn holder_record_follows_the_lock() {
    let cluster = Cluster::new(3);
    let dir = tempdir();
    let urls = cluster.urls();
    let (key, hkey) = (lock_key("rec"), holder_key("rec"));
    let host = hostname();
    let before = unix_ms();
    let holder = base(&urls, "rec", &dir)
        .args(["--record-command", "masked"])
        .args(["--ttl", "1s", "-c", &format!("touch ready; {WAIT_FOR_GO}")])
        .spawn();
    await_marker(&dir, "ready", &holder);
    let after = unix_ms();
    assert!(
        wait_until(Duration::from_millis(500), || cluster.holders(&key).len()
            == 3),
        "lock not on all 3 nodes: {:?}",
        cluster.holders(&key)
    );

    let mut acquired = Vec::new();
    for (i, node) in cluster.iter().enumerate() {
        let value = node.get(&key).expect("lock value");
        assert!(
            is_token(&value),
            "node {i}: lock value {} is not a plain token",
            show(&value)
        );
        assert_eq!(key_type(node, &hkey), "hash", "node {i}: record type");
        let rec = hash(node, &hkey);
        let field = |f: &str| {
            rec.get(f)
                .unwrap_or_else(|| panic!("node {i}: field {f} missing in {rec:?}"))
                .as_str()
        };
        assert_eq!(field("host"), host, "node {i}");
        assert_eq!(field("pid"), holder.pid().to_string(), "node {i}");
        assert_eq!(field("user"), USER, "node {i}");
        assert!(
            field("command").contains("touch ready") && field("command").contains(WAIT_FOR_GO),
            "node {i}: command {:?}",
            field("command")
        );
        assert_eq!(field("ttl_ms"), "1000", "node {i}");
        assert_eq!(field("version"), env!("CARGO_PKG_VERSION"), "node {i}");
        let at: u64 = field("acquired_ms")
            .parse()
            .unwrap_or_else(|e| panic!("node {i}: acquired_ms {:?}: {e}", field("acquired_ms")));
        assert!(
            (before..=after).contains(&at),
            "node {i}: acquired_ms {at} not within [{before}, {after}]"
        );
        acquired.push(at);

        // Same TTL as the lock.
        let (lock_pttl, rec_pttl) = (node.pttl(&key), node.pttl(&hkey));
        assert!(
            (1..=1000).contains(&lock_pttl) && (1..=1000).contains(&rec_pttl),
            "node {i}: lock pttl {lock_pttl}, record pttl {rec_pttl}"
        );
        assert!(
            (lock_pttl - rec_pttl).abs() <= 150,
            "node {i}: lock pttl {lock_pttl} vs record pttl {rec_pttl}"
        );
    }
    assert!(
        acquired.windows(2).all(|w| w[0] == w[1]),
        "one acquisition, one acquired_ms: {acquired:?}"
    );

    // Refreshed by the heartbeat: still there (never without expiry) well
    // past the first TTL.
    let until = acquired[0] + 1700;
    while unix_ms() < until {
        for (i, node) in cluster.iter().enumerate() {
            let rec_pttl = node.pttl(&hkey);
            assert!(
                (1..=1000).contains(&rec_pttl),
                "node {i}: record pttl {rec_pttl} {}ms after acquisition\n{}",
                unix_ms() - acquired[0],
                holder.stderr_so_far()
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    for (i, node) in cluster.iter().enumerate() {
        assert_eq!(
            hash(node, &hkey).get("pid").map(String::as_str),
            Some(holder.pid().to_string().as_str()),
            "node {i}: record after the heartbeat"
        );
    }

    // Deleted on release, with the lock.
    touch(&dir, "go");
    let out = holder.wait();
    out.assert_code(0);
    for (i, node) in cluster.iter().enumerate() {
        assert!(
            node.keys().is_empty(),
            "node {i}: keys left after release: {:?}\n{out}",
            node.keys()
        );
    }
}

#[test]
fn holder_record_command_is_cut_to_200_chars() {
    let node = RedisNode::start();
    let dir = tempdir();
    // 300 multi-byte characters: cutting must respect char boundaries.
    let filler = "é".repeat(300);
    let script = format!(": {filler}; touch ready; {WAIT_FOR_GO}");
    let holder = base(&node.url(), "long", &dir)
        .args(["--record-command", "masked", "-c", &script])
        .spawn();
    await_marker(&dir, "ready", &holder);
    let rec = hash(&node, &holder_key("long"));
    let command = rec.get("command").expect("command field");
    let cut = command.strip_suffix('…').unwrap_or(command);
    let n = cut.chars().count();
    assert!(
        (150..=200).contains(&n),
        "command cut to {n} chars: {command:?}"
    );
    assert!(
        cut.contains(&format!(": {}", "é".repeat(100))),
        "command keeps its beginning: {command:?}"
    );
    assert!(!command.contains("touch ready"), "not cut: {command:?}");

    // status shows it without breaking JSON.
    let out = status(&node.url(), "long", &["--json"]);
    out.assert_code(1);
    let doc = parse_json(&out.stdout);
    assert_eq!(doc.str("holder.command"), command);

    touch(&dir, "go");
    holder.wait().assert_code(0);
    assert!(node.keys().is_empty(), "keys left: {:?}", node.keys());
}

// ---------------------------------------------------------------------------
// unlock
// ---------------------------------------------------------------------------

#[test]
fn unlock_with_the_token_of_a_dead_holder() {
    let cluster = Cluster::new(3);
    let dir = tempdir();
    let urls = cluster.urls();
    let (key, hkey) = (lock_key("orphan"), holder_key("orphan"));
    let holder = base(&urls, "orphan", &dir)
        .args([
            "-c",
            "echo \"$REDLOCK_TOKEN\" > token; echo $$ > cmd.pid; touch ready; exec sleep 30",
        ])
        .spawn();
    await_marker(&dir, "ready", &holder);
    let cmd_pid = read_pid_file(&dir.join("cmd.pid"), START);
    cluster.await_on_all(&key);
    let token = fs::read_to_string(dir.join("token"))
        .expect("token file")
        .trim()
        .to_string();
    assert!(is_token(token.as_bytes()), "REDLOCK_TOKEN {token:?}");

    // The holder dies without releasing: the lock stays (30 s TTL).
    holder.signal(libc::SIGKILL);
    let out = holder.wait();
    assert_eq!(out.signal, Some(libc::SIGKILL), "{out}");
    kill_if_alive(cmd_pid);
    assert_eq!(cluster.holders(&key), vec![0, 1, 2]);
    status(&urls, "orphan", &[]).assert_code(1);

    // A wrong token deletes nothing, and the exit status says so (1).
    let wrong = "f".repeat(32);
    let out = unlock(&urls, "orphan", &["--token", &wrong]);
    out.assert_code(1);
    for node in cluster.iter() {
        let line = out
            .stdout
            .lines()
            .find(|l| l.contains(&node.url()))
            .unwrap_or_else(|| panic!("no line for {}\n{out}", node.url()));
        assert!(
            line.ends_with("held by another token: left alone"),
            "line {line:?}\n{out}"
        );
    }
    for (i, v) in cluster.values(&key).iter().enumerate() {
        assert_eq!(
            v.as_deref(),
            Some(token.as_bytes()),
            "node {i} changed by a wrong-token unlock\n{out}"
        );
    }
    for (i, node) in cluster.iter().enumerate() {
        assert!(node.exists(&hkey), "node {i}: record deleted\n{out}");
    }

    // The right one (from REDLOCK_TOKEN) frees it everywhere.
    let out = unlock(&urls, "orphan", &["--token", &token]);
    out.assert_code(0);
    assert_eq!(out.stdout.lines().count(), 3, "{out}");
    for node in cluster.iter() {
        assert!(
            out.stdout
                .lines()
                .any(|l| l.contains(&node.url()) && l.ends_with("deleted")),
            "{} not deleted\n{out}",
            node.url()
        );
    }
    for (i, node) in cluster.iter().enumerate() {
        assert!(
            node.keys().is_empty(),
            "node {i}: keys left: {:?}",
            node.keys()
        );
    }

    // Again: nothing left, and the exit status says so (3).
    let out = unlock(&urls, "orphan", &["--token", &token]);
    out.assert_code(3);
    assert_eq!(
        out.stdout
            .lines()
            .filter(|l| l.ends_with("no lock here"))
            .count(),
        3,
        "{out}"
    );
    status(&urls, "orphan", &[]).assert_code(0);
    base(&urls, "orphan", &dir)
        .args(["-c", "touch ran"])
        .expect_code(0);
    assert!(dir.has("ran"));
}

#[test]
fn unlock_with_the_token_read_from_a_node_stops_the_holder() {
    let cluster = Cluster::new(3);
    let dir = tempdir();
    let urls = cluster.urls();
    let key = lock_key("live");
    let holder = base(&urls, "live", &dir)
        .args(["--ttl", "3s", "-c", &format!("touch ready; {WAIT_FOR_GO}")])
        .spawn();
    await_marker(&dir, "ready", &holder);
    let token = String::from_utf8(cluster.await_value(0, &key)).expect("utf-8");

    let out = unlock(&urls, "live", &["--token", &token]);
    out.assert_code(0);
    let unlocked = Instant::now();
    assert!(
        wait_until(Duration::from_secs(1), || cluster.holders(&key).is_empty()),
        "lock left on {:?}\n{out}",
        cluster.holders(&key)
    );
    let out = wait_exit(holder, Duration::from_secs(6), "holder after unlock");
    out.assert_code(76);
    assert!(
        unlocked.elapsed() < Duration::from_secs(4),
        "noticed only after {:?}",
        unlocked.elapsed()
    );
    for (i, node) in cluster.iter().enumerate() {
        assert!(
            node.keys().is_empty(),
            "node {i}: keys left: {:?}",
            node.keys()
        );
    }
}

#[test]
fn forced_unlock_names_the_holder_and_stops_it() {
    let cluster = Cluster::new(3);
    let dir = tempdir();
    let urls = cluster.urls();
    let key = lock_key("stuck");
    let host = hostname();
    let holder = base(&urls, "stuck", &dir)
        .args([
            "--ttl",
            "3s",
            "-c",
            &format!("echo $$ > cmd.pid; touch ready; {WAIT_FOR_GO}"),
        ])
        .spawn();
    await_marker(&dir, "ready", &holder);
    let cmd_pid = read_pid_file(&dir.join("cmd.pid"), START);
    cluster.await_on_all(&key);
    let token = String::from_utf8(cluster[0].get(&key).expect("token")).expect("utf-8");

    let out = unlock(&urls, "stuck", &["--force"]);
    out.assert_code(0);
    let unlocked = Instant::now();
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert_eq!(lines.len(), 4, "who held it, then 3 nodes\n{out}");
    let was = lines[0];
    assert!(
        was.starts_with(&format!("was held by {USER}@{host} pid {} (", holder.pid())),
        "first line {was:?}\n{out}"
    );
    // The program's name, as the record keeps by default.
    assert!(
        was.contains("(/bin/sh -c echo …)"),
        "command missing\n{out}"
    );
    assert!(
        was.ends_with(&format!("), token {}…", &token[..8])),
        "token prefix\n{out}"
    );
    for node in cluster.iter() {
        assert!(
            lines[1..]
                .iter()
                .any(|l| l.contains(&node.url()) && l.ends_with("deleted")),
            "{} not deleted\n{out}",
            node.url()
        );
    }
    for (i, node) in cluster.iter().enumerate() {
        assert!(
            node.keys().is_empty(),
            "node {i}: keys left right after --force: {:?}",
            node.keys()
        );
    }

    // The holder notices at its next heartbeat (every TTL/3 = 1 s) and
    // stops its command.
    let done = wait_exit(holder, Duration::from_secs(6), "holder after --force");
    done.assert_code(76);
    assert!(
        unlocked.elapsed() < Duration::from_secs(4),
        "noticed only after {:?}\n{done}",
        unlocked.elapsed()
    );
    assert!(
        wait_until(Duration::from_secs(2), || !pid_alive(cmd_pid)),
        "command {cmd_pid} still running\n{done}"
    );
    kill_if_alive(cmd_pid);
    for (i, node) in cluster.iter().enumerate() {
        assert!(
            node.keys().is_empty(),
            "node {i}: the stopped holder left keys: {:?}",
            node.keys()
        );
    }

    // A forced unlock of a free lock: nothing to name, nothing deleted, and
    // the exit status says so (3).
    let out = unlock(&urls, "stuck", &["--force"]);
    out.assert_code(3);
    assert!(!out.stdout.contains("was held by"), "{out}");
    assert_eq!(
        out.stdout
            .lines()
            .filter(|l| l.ends_with("no lock here"))
            .count(),
        3,
        "{out}"
    );
}

// ---------------------------------------------------------------------------
// Logs
// ---------------------------------------------------------------------------

#[test]
fn verbose_text_logs_show_attempts_and_heartbeats() {
    let cluster = Cluster::new(3);
    let dir = tempdir();
    let out = base(&cluster.urls(), "talk", &dir)
        .args(["-v", "--ttl", "1s", "--", "sleep", "0.8"])
        .expect_code(0);
    let granted: Vec<&str> = out
        .stderr
        .lines()
        .filter(|l| l.starts_with("redlock-run: acquire redis://127.0.0.1:"))
        .collect();
    assert!(
        granted.len() >= 2,
        "a quorum of per-node acquire lines\n{out}"
    );
    for line in &granted {
        assert!(
            line.contains(": granted in ") && cluster.iter().any(|n| line.contains(&n.url())),
            "line {line:?}\n{out}"
        );
    }
    assert!(
        out.stderr.lines().any(|l| l.contains("acquired: ")),
        "decision missing\n{out}"
    );
    assert!(
        out.stderr
            .lines()
            .any(|l| l.starts_with("redlock-run: extended in ")),
        "heartbeat extension missing\n{out}"
    );
}

#[test]
fn json_logs_parse_one_object_per_line() {
    let cluster = Cluster::new(3);
    let dir = tempdir();
    let urls = cluster.urls();
    let out = base(&urls, "jlog", &dir)
        .args([
            "-vv",
            "--log-format",
            "json",
            "--ttl",
            "1s",
            "--",
            "sleep",
            "0.8",
        ])
        .expect_code(0);
    let docs = parse_json_lines(&out.stderr);
    assert!(docs.len() >= 4, "too few log lines\n{out}");
    let levels = ["error", "warn", "notice", "info", "debug"];
    for doc in &docs {
        let time = doc.str("time");
        assert!(
            time.len() >= 20 && time.as_bytes()[4] == b'-' && time.contains('T'),
            "time {time:?}"
        );
        assert!(levels.contains(&doc.str("level")), "{}", doc.source);
        assert!(!doc.str("event").is_empty(), "{}", doc.source);
        assert_eq!(doc.str("key"), "jlog", "{}", doc.source);
        assert!(!doc.str("msg").is_empty(), "{}", doc.source);
        if doc.has("node") {
            assert!(
                cluster.iter().any(|n| doc.str("node") == n.url()),
                "{}",
                doc.source
            );
        }
        if doc.has("ms") {
            assert!(doc.num("ms") >= 0.0, "{}", doc.source);
        }
        if doc.has("outcome") {
            assert!(!doc.str("outcome").is_empty(), "{}", doc.source);
        }
    }
    let acquires: Vec<&Doc> = docs
        .iter()
        .filter(|d| d.str("event") == "acquire")
        .collect();
    assert!(acquires.len() >= 2, "per-node acquire lines\n{out}");
    for d in &acquires {
        assert!(d.has("node") && d.has("ms"), "{}", d.source);
        assert_eq!(d.str("outcome"), "granted", "{}", d.source);
    }
    assert!(
        docs.iter().any(|d| d.str("event") == "extended"),
        "no heartbeat extension logged\n{out}"
    );

    // A busy run says so in JSON too.
    cluster[0].set(lock_key("jlog"), "x", 10_000);
    cluster[1].set(lock_key("jlog"), "x", 10_000);
    let out = base(&urls, "jlog", &dir)
        .args(["--log-format", "json", "--", "true"])
        .expect_code(75);
    let docs = parse_json_lines(&out.stderr);
    assert_eq!(docs.len(), 2, "the busy line and the final one\n{out}");
    assert_eq!(docs[0].str("outcome"), "busy");
    assert_eq!(docs[0].str("key"), "jlog");
    assert_eq!(docs[1].str("event"), "exit");
    assert_eq!(docs[1].str("outcome"), "busy");
}

/// Asserts the password appears in neither stream.
fn assert_no_secret(out: &RunOutput, what: &str) {
    assert!(
        !out.stderr.contains(SECRET) && !out.stdout.contains(SECRET),
        "[{what}] password leaked\n{out}"
    );
}

#[test]
fn passwords_never_reach_logs_or_admin_output() {
    // A node that requires the password: the runs succeed.
    let secured = RedisNode::start();
    let reply: String = secured.cmd(
        redis::cmd("CONFIG")
            .arg("SET")
            .arg("requirepass")
            .arg(SECRET),
    );
    assert_eq!(reply, "OK");
    let good = format!("redis://:{SECRET}@127.0.0.1:{}", secured.port());
    let shown = format!("redis://:***@127.0.0.1:{}", secured.port());
    let dir = tempdir();
    let report_path = dir.join("report.json");
    for format in ["text", "json"] {
        let out = base(&good, "pw", &dir)
            .args(["-vv", "--log-format", format, "--ttl", "1s"])
            .arg("--report")
            .arg(&report_path)
            .args(["--", "sleep", "0.5"])
            .expect_code(0);
        assert_no_secret(&out, &format!("-vv {format}, right password"));
        assert!(
            out.stderr.contains(&shown),
            "node not shown redacted\n{out}"
        );
        if format == "json" {
            parse_json_lines(&out.stderr);
        }
        let text = fs::read_to_string(&report_path).expect("report");
        assert!(!text.contains(SECRET), "report leaks: {text}");
    }
    // A holder for status/unlock to show.
    let holder = base(&good, "pw", &dir)
        .args(["--ttl", "3s", "-c", &format!("touch ready; {WAIT_FOR_GO}")])
        .spawn();
    await_marker(&dir, "ready", &holder);
    let out = status(&good, "pw", &[]);
    out.assert_code(1);
    assert_no_secret(&out, "status text");
    assert!(out.stdout.contains(&shown), "{out}");
    let out = status(&good, "pw", &["--json"]);
    out.assert_code(1);
    assert_no_secret(&out, "status json");
    assert_eq!(parse_json(&out.stdout).str("nodes.0.node"), shown);
    let out = unlock(&good, "pw", &["--force"]);
    out.assert_code(0);
    assert_no_secret(&out, "unlock --force");
    assert_eq!(
        wait_exit(holder, Duration::from_secs(6), "holder").code,
        Some(76)
    );

    // A node without a password rejects it: an error that names the node.
    let plain = RedisNode::start();
    let bad = format!("redis://:{SECRET}@127.0.0.1:{}", plain.port());
    for format in ["text", "json"] {
        let out = base(&bad, "pw", &dir)
            .args(["-vv", "--log-format", format, "-c", "touch ran"])
            .expect_code(69);
        assert_no_secret(&out, &format!("-vv {format}, rejected password"));
        assert!(out.stderr.contains("***"), "node not named\n{out}");
        if format == "json" {
            parse_json_lines(&out.stderr);
        }
    }
    assert!(!dir.has("ran"), "ran without the lock");
    for (what, out) in [
        ("status", status(&bad, "pw", &[])),
        ("status --json", status(&bad, "pw", &["--json"])),
        ("unlock --force", unlock(&bad, "pw", &["--force"])),
        (
            "unlock --token",
            unlock(&bad, "pw", &["--token", &"ab".repeat(16)]),
        ),
    ] {
        out.assert_code(69);
        assert_no_secret(&out, what);
    }
}

// ---------------------------------------------------------------------------
// --report
// ---------------------------------------------------------------------------

/// Checks the fields every report has; returns the document.
fn check_report(path: &std::path::Path, out: &RunOutput, name: &str, nodes: i64) -> Doc {
    let doc = report(path, out);
    assert_eq!(doc.str("key"), name);
    assert_eq!(doc.str("redis_key"), format!("lock:{name}"));
    let started = doc.str("started_at");
    assert!(
        started.len() >= 20 && started.as_bytes()[4] == b'-' && started.contains('T'),
        "started_at {started:?}"
    );
    assert_eq!(doc.int("nodes"), nodes);
    for f in [
        "waited_ms",
        "nodes_ok",
        "nodes_failed",
        "extensions_done",
        "extensions_failed",
    ] {
        assert!(doc.int(f) >= 0, "{f} in {}", doc.source);
    }
    assert!(doc.int("nodes_ok") + doc.int("nodes_failed") <= nodes);
    assert_eq!(
        Some(doc.int("exit_code") as i32),
        out.code,
        "exit_code vs the real exit status\n{out}"
    );
    let duration = doc.int("duration_ms");
    assert!(
        duration >= 0 && duration as u128 <= out.elapsed.as_millis() + 50,
        "duration_ms {duration} vs elapsed {:?}",
        out.elapsed
    );
    doc
}

#[test]
fn report_of_a_successful_and_a_failed_run() {
    let cluster = Cluster::new(3);
    let dir = tempdir();
    let urls = cluster.urls();
    let path = dir.join("ok.json");
    let out = base(&urls, "rep", &dir)
        .args(["--ttl", "1s", "--report"])
        .arg(&path)
        .args(["--", "sleep", "0.8"])
        .expect_code(0);
    let doc = check_report(&path, &out, "rep", 3);
    assert_eq!(doc.str("outcome"), "ok");
    assert!(doc.bool("acquired"));
    assert!(doc.int("nodes_ok") >= 2, "{}", doc.source);
    assert_eq!(doc.int("nodes_failed"), 0);
    assert!(doc.int("extensions_done") >= 1, "{}", doc.source);
    assert_eq!(doc.int("extensions_failed"), 0);
    assert!(doc.int("waited_ms") < 1000, "{}", doc.source);
    assert!(doc.int("duration_ms") >= 800, "{}", doc.source);

    let path = dir.join("failed.json");
    let out = base(&urls, "rep", &dir)
        .arg("--report")
        .arg(&path)
        .args(["-c", "exit 3"])
        .expect_code(3);
    let doc = check_report(&path, &out, "rep", 3);
    assert_eq!(doc.str("outcome"), "failed");
    assert!(doc.bool("acquired"));
    assert_eq!(doc.int("exit_code"), 3);
}

/// A lost lock with a command that ignores SIGTERM: at -vv one SIGTERM
/// line and one SIGKILL line, each with its time before the validity
/// deadline, and `--report` lists the same signals (SIGTERM, the SIGCONT
/// that goes with it, SIGKILL), by whom and how long before it.
#[test]
fn signals_sent_to_the_command_are_said_with_their_time_and_reported() {
    let cluster = Cluster::new(1);
    let dir = tempdir();
    let path = dir.join("lost.json");
    // A 1 s TTL: the kill guard is 100 ms, and the guard's own SIGKILL, the
    // backstop, comes 20 ms after redlock-run's, which has reached the tree
    // by then however busy the machine.
    let running = base(&cluster.urls(), "said", &dir)
        .args(["--ttl", "1s", "--node-timeout", "100ms", "-vv", "--report"])
        .arg(&path)
        .args(["-c", "trap '' TERM; touch started; sleep 30"])
        .spawn();
    await_marker(&dir, "started", &running);
    cluster[0].stop();
    let out = running.wait();
    cluster[0].cont();
    out.assert_code(76);
    let lines = |sig: &str| -> Vec<&str> {
        out.stderr
            .lines()
            .filter(|l| l.starts_with(&format!("redlock-run: sent {sig}")))
            .collect()
    };
    let (term, kill) = (lines("SIGTERM"), lines("SIGKILL"));
    assert_eq!((term.len(), kill.len()), (1, 1), "{out}");
    for line in [term[0], kill[0]] {
        assert!(
            line.ends_with(" ms before the validity deadline")
                && line.contains(" to 2 processes, "),
            "{line}\n{out}"
        );
    }
    let doc = report(&path, &out);
    assert_eq!(doc.len("signals_sent"), 3, "{}", doc.source);
    for (i, sig) in ["SIGTERM", "SIGCONT", "SIGKILL"].into_iter().enumerate() {
        assert_eq!(doc.str(&format!("signals_sent.{i}.signal")), sig);
        assert_eq!(doc.str(&format!("signals_sent.{i}.by")), "redlock-run");
        assert_eq!(doc.int(&format!("signals_sent.{i}.processes")), 2);
        assert!(
            doc.num(&format!("signals_sent.{i}.before_deadline_ms")) > 0.0,
            "{}",
            doc.source
        );
    }
    // What -vv said, to the tenth of a millisecond.
    let said: f64 = kill[0]
        .split(", ")
        .nth(1)
        .and_then(|s| s.split(' ').next())
        .and_then(|ms| ms.parse().ok())
        .unwrap_or_else(|| panic!("{}", kill[0]));
    let reported = doc.num("signals_sent.2.before_deadline_ms");
    assert!((said - reported).abs() <= 0.05, "{said} vs {reported}");
}

#[test]
fn report_of_a_busy_run() {
    let cluster = Cluster::new(3);
    let dir = tempdir();
    let urls = cluster.urls();
    cluster[0].set(lock_key("taken"), "f".repeat(32), 20_000);
    cluster[1].set(lock_key("taken"), "f".repeat(32), 20_000);
    let path = dir.join("busy.json");
    let out = base(&urls, "taken", &dir)
        .arg("--report")
        .arg(&path)
        .args(["-c", "touch ran"])
        .expect_code(75);
    let doc = check_report(&path, &out, "taken", 3);
    assert_eq!(doc.str("outcome"), "busy");
    assert!(!doc.bool("acquired"));
    assert_eq!(doc.int("extensions_done"), 0);

    // -E 0: the report tells the real exit status, and still "busy".
    let out = base(&urls, "taken", &dir)
        .args(["-q", "-E", "0", "--report"])
        .arg(&path)
        .args(["-c", "touch ran"])
        .expect_code(0);
    let doc = check_report(&path, &out, "taken", 3);
    assert_eq!(doc.str("outcome"), "busy");
    assert!(!doc.bool("acquired"));
    assert!(!dir.has("ran"), "busy run ran its command");
}

#[test]
fn report_of_a_lost_lock() {
    let cluster = Cluster::new(3);
    let dir = tempdir();
    let path = dir.join("lost.json");
    let holder = base(&cluster.urls(), "lose", &dir)
        .args(["--ttl", "2s", "--report"])
        .arg(&path)
        .args(["-c", "echo $$ > cmd.pid; touch ready; exec sleep 20"])
        .spawn();
    await_marker(&dir, "ready", &holder);
    let cmd_pid = read_pid_file(&dir.join("cmd.pid"), START);
    cluster[0].stop();
    cluster[1].stop();
    let out = wait_exit(
        holder,
        Duration::from_secs(10),
        "holder with 2 nodes stopped",
    );
    cluster[0].cont();
    cluster[1].cont();
    out.assert_code(76);
    assert!(
        wait_until(Duration::from_secs(2), || !pid_alive(cmd_pid)),
        "command still running after the lock was lost\n{out}"
    );
    kill_if_alive(cmd_pid);
    let doc = check_report(&path, &out, "lose", 3);
    assert_eq!(doc.str("outcome"), "lost");
    assert!(doc.bool("acquired"));
    assert!(doc.int("extensions_failed") >= 1, "{}", doc.source);
}

#[test]
fn report_of_a_timed_out_run() {
    let node = RedisNode::start();
    let dir = tempdir();
    let path = dir.join("timeout.json");
    let out = base(&node.url(), "slow", &dir)
        .args(["--max-runtime", "300ms", "--report"])
        .arg(&path)
        .args(["--", "sleep", "5"])
        .expect_code(124);
    let doc = check_report(&path, &out, "slow", 1);
    assert_eq!(doc.str("outcome"), "timeout");
    assert!(doc.bool("acquired"));
    assert_eq!(doc.int("nodes_ok"), 1);
    let duration = doc.int("duration_ms");
    assert!(
        (300..5000).contains(&duration),
        "duration_ms {duration}\n{out}"
    );
    assert!(node.keys().is_empty(), "keys left: {:?}", node.keys());
}

#[test]
fn report_of_unavailable_and_not_run() {
    let mut node = RedisNode::start();
    let dir = tempdir();

    let path = dir.join("notrun.json");
    let out = base(&node.url(), "nr", &dir)
        .arg("--report")
        .arg(&path)
        .args(["--", "redlock-run-no-such-command-xyz"])
        .expect_code(127);
    let doc = check_report(&path, &out, "nr", 1);
    assert_eq!(doc.str("outcome"), "not-run");

    let url = node.url();
    node.kill();
    let path = dir.join("down.json");
    let out = base(&url, "nr", &dir)
        .arg("--report")
        .arg(&path)
        .args(["-c", "touch ran"])
        .expect_code(69);
    let doc = check_report(&path, &out, "nr", 1);
    assert_eq!(doc.str("outcome"), "unavailable");
    assert!(!doc.bool("acquired"));
    assert_eq!(doc.int("nodes_failed"), 1);
    assert!(!dir.has("ran"));
}
