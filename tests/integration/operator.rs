//! The operator's view: what `status` and `unlock` say and exit with, what a
//! waiter prints, `--timeout` versus `--max-runtime`, JSON logs and reports.

use std::time::Duration;

use crate::support::{
    Cluster, RedisNode, START, Test, WAIT_FOR_GO, await_marker, base, keys, python, tempdir, touch,
    wait_until,
};

fn status(urls: &str, name: &str, extra: &[&str]) -> crate::support::RunOutput {
    Test::new()
        .args(["status", "-r", urls, "-k", name])
        .args(extra)
        .run()
}

fn unlock(urls: &str, name: &str, extra: &[&str]) -> crate::support::RunOutput {
    Test::new()
        .args(["unlock", "-r", urls, "-k", name])
        .args(extra)
        .run()
}

#[test]
fn unlock_takes_what_status_shows_and_says_what_it_did() {
    let cluster = Cluster::new(3);
    let urls = cluster.urls();
    let k = keys("orphaned");
    for n in cluster.iter() {
        n.set(k.lock(), "0123456789abcdef0123456789abcdef", 30_000);
    }
    // The 8 characters status shows.
    let shown = status(&urls, "orphaned", &[]);
    shown.assert_code(1);
    assert!(shown.stdout.contains("token 01234567…"), "{shown}");
    unlock(&urls, "orphaned", &["--token", "0123456"]).assert_code(64);
    let out = unlock(&urls, "orphaned", &["--token", "ffffffff"]);
    out.assert_code(1);
    assert!(out.stderr.contains("another token"), "{out}");
    assert_eq!(cluster.holders(k.lock()).len(), 3, "a wrong prefix deleted");
    let out = unlock(&urls, "orphaned", &["--token", "01234567"]);
    out.assert_code(0);
    assert!(cluster.holders(k.lock()).is_empty(), "{out}");
    let out = unlock(&urls, "orphaned", &["--token", "01234567"]);
    out.assert_code(3);
    assert!(out.stderr.contains("no such lock"), "{out}");
    // Neither flag: the error names both ways.
    let out = unlock(&urls, "orphaned", &[]);
    out.assert_code(64).assert_one_error_line();
    assert!(
        out.stderr.contains("--token") && out.stderr.contains("--force"),
        "{out}"
    );
}

#[test]
fn timeout_is_refused_naming_both_readings() {
    let out = Test::new()
        .args(["-k", "x", "--timeout", "30s", "-c", "true"])
        .expect_code(64);
    out.assert_one_error_line();
    assert!(
        out.stderr.contains("--wait 30s") && out.stderr.contains("--max-runtime 30s"),
        "{out}"
    );
}

#[test]
fn max_runtime_says_when_sigkill_follows_and_when_it_went_out() {
    let node = RedisNode::start();
    let dir = tempdir();
    let out = base(&node.url(), "maxrt", &dir)
        .args(["--max-runtime", "500ms", "--kill-after", "700ms"])
        .args(["-c", "trap '' TERM; sleep 30"])
        .expect_code(124);
    let lines = out.stderr_lines();
    assert!(
        lines
            .iter()
            .any(|l| l.contains("ran past --max-runtime 500ms")
                && l.contains("SIGKILL follows in 700ms")),
        "{out}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.contains("still running after SIGTERM: sent SIGKILL")),
        "{out}"
    );
    assert!(
        out.elapsed >= Duration::from_millis(1100) && out.elapsed < Duration::from_secs(4),
        "{out}"
    );
}

#[test]
fn a_waiter_says_who_it_waits_for() {
    let node = RedisNode::start();
    let dir = tempdir();
    let holder = base(&node.url(), "queue", &dir)
        .args(["-c", &format!("touch held; {WAIT_FOR_GO}")])
        .spawn();
    await_marker(&dir, "held", &holder);
    let waiter = base(&node.url(), "queue", &dir)
        .args(["--wait", "30s", "-c", "touch waited"])
        .spawn();
    let said = wait_until(START, || {
        waiter.stderr_so_far().contains("waiting up to 30s")
    });
    let line = waiter.stderr_so_far();
    touch(&dir, "go");
    holder.wait().assert_code(0);
    waiter.wait().assert_code(0);
    assert!(said, "the waiter said nothing: {line:?}");
    assert!(
        line.contains("lock 'queue' is held by ") && line.contains(" pid "),
        "who holds it: {line:?}"
    );
}

#[test]
fn status_says_when_hold_keeps_a_finished_holders_lock() {
    let node = RedisNode::start();
    let dir = tempdir();
    base(&node.url(), "held-on", &dir)
        .args(["--hold", "20s", "-c", "exit 0"])
        .expect_code(0);
    let out = status(&node.url(), "held-on", &[]);
    out.assert_code(1);
    assert!(
        out.stdout.contains("its command exited (status 0)")
            && out.stdout.contains("--hold keeps the lock"),
        "{out}"
    );
    let json = status(&node.url(), "held-on", &["--json"]);
    let fields = python(
        "import json,sys\nd=json.load(sys.stdin)\nh=d['holder']\n\
         print(type(h['pid']).__name__, type(h['ttl_ms']).__name__, \
         type(h['acquired_ms']).__name__, h['exit_code'], 'exited_ms_ago' in d)",
        &json.stdout,
    );
    assert_eq!(fields.trim(), "int int int 0 True", "{json}");
}

#[test]
fn status_finds_a_semaphores_slots_by_itself() {
    let cluster = Cluster::new(3);
    let dir = tempdir();
    let urls = cluster.urls();
    let holders: Vec<_> = (0..2)
        .map(|i| {
            base(&urls, "sem", &dir)
                .args(["--limit", "2", "-c", &format!("touch s{i}; {WAIT_FOR_GO}")])
                .spawn()
        })
        .collect();
    for (i, h) in holders.iter().enumerate() {
        await_marker(&dir, &format!("s{i}"), h);
    }
    // No --limit given: it is found, and both slots are held.
    let out = status(&urls, "sem", &[]);
    out.assert_code(1);
    assert!(out.stdout.contains("a semaphore of 2 slots"), "{out}");
    assert_eq!(out.stdout.matches("held by ").count(), 2, "{out}");
    touch(&dir, "go");
    for h in holders {
        h.wait().assert_code(0);
    }
    status(&urls, "sem", &[]).assert_code(0);
}

#[test]
fn json_logs_start_and_end_every_run() {
    let node = RedisNode::start();
    let dir = tempdir();
    let out = base(&node.url(), "jevents", &dir)
        .args(["--log-format", "json", "-v", "--", "true"])
        .expect_code(0);
    let events = python(
        "import json,sys\nfor l in sys.stdin:\n d=json.loads(l)\n \
         print(d['event'], d.get('pid', ''), d.get('exit_code', ''), \
         'duration_ms' in d)",
        &out.stderr,
    );
    assert!(
        events.lines().any(|l| l.starts_with("started ")),
        "{events}"
    );
    let last = events.lines().last().unwrap_or_default();
    assert_eq!(last, "exit  0 True", "{events}");
    // Without -v the final line is still there (JSON is for machines)...
    let out = base(&node.url(), "jevents", &dir)
        .args(["--log-format", "json", "--", "true"])
        .expect_code(0);
    assert_eq!(out.stderr.lines().count(), 1, "{out}");
    assert!(out.stderr.contains("\"event\":\"exit\""), "{out}");
    // ...and unavailable names the nodes; a usage error is JSON too.
    let out = base("redis://127.0.0.1:1", "jevents", &dir)
        .args(["--log-format", "json", "--", "true"])
        .expect_code(69);
    let fields = python(
        "import json,sys\nd=json.loads(sys.stdin.readline())\n\
         print(d['event'], d['node'], d['failed_nodes'])",
        &out.stderr,
    );
    assert_eq!(
        fields.trim(),
        "unavailable redis://127.0.0.1:1 ['redis://127.0.0.1:1']",
        "{out}"
    );
    let out = Test::new()
        .args(["--log-format", "json", "-k", "x", "--no-such-flag"])
        .expect_code(64);
    let fields = python(
        "import json,sys\nd=json.loads(sys.stdin.read())\nprint(d['level'], d['event'])",
        &out.stderr,
    );
    assert_eq!(fields.trim(), "error usage", "{out}");
}

#[test]
fn reports_are_checked_up_front_and_say_where_and_when() {
    let node = RedisNode::start();
    let dir = tempdir();
    let out = base(&node.url(), "rep", &dir)
        .args(["--report", "/nonexistent/dir/r.json", "-c", "touch ran"])
        .expect_code(64);
    out.assert_one_error_line();
    assert!(
        !dir.has("ran"),
        "the job ran before the bad --report was noticed"
    );
    assert!(node.keys().is_empty(), "{:?}", node.keys());
    let report = dir.join("r.json");
    let running = base(&node.url(), "rep", &dir)
        .arg("--report")
        .arg(&report)
        .args(["-c", "touch started; sleep 30"])
        .spawn();
    await_marker(&dir, "started", &running);
    running.signal(libc::SIGTERM);
    running.wait().assert_code(143);
    let fields = python(
        "import json,sys\nd=json.load(sys.stdin)\n\
         print(d['outcome'], d['signal'], d['host'] != '', d['pid'] > 0, \
         d['ended_at'] >= d['started_at'], d['waited_ms'])",
        &std::fs::read_to_string(&report).expect("report"),
    );
    assert_eq!(fields.trim(), "signal 15 True True True 0");
    // An unavailable run did not wait.
    base("redis://127.0.0.1:1", "rep", &dir)
        .arg("--report")
        .arg(&report)
        .args(["-c", "true"])
        .expect_code(69);
    let waited = python(
        "import json,sys\nprint(json.load(sys.stdin)['waited_ms'])",
        &std::fs::read_to_string(&report).expect("report"),
    );
    assert_eq!(waited.trim(), "0");
}

#[test]
fn a_ttl_too_short_for_the_default_node_timeout_says_what_to_set() {
    let out = Test::new()
        .args(["-k", "x", "-t", "400ms", "-c", "true"])
        .expect_code(64);
    out.assert_one_error_line();
    assert!(
        out.stderr.contains("default --node-timeout 50ms")
            && out.stderr.contains("give --node-timeout 40ms or less")
            && out.stderr.contains("raise --ttl to 500ms"),
        "{out}"
    );
}

/// A copy of the lock on 1 of 3 nodes is no lock: `status` names it as a
/// stale copy and calls the lock free (exit 0), in text and JSON, and the
/// next run takes the lock past it.
#[test]
fn status_calls_a_copy_on_a_minority_stale_and_the_lock_free() {
    let cluster = Cluster::new(3);
    let urls = cluster.urls();
    let dir = tempdir();
    let k = keys("minority");
    cluster[0].set(k.lock(), "5c0b1050aaaaaaaaaaaaaaaaaaaaaaaa", 17_500);
    let out = status(&urls, "minority", &[]);
    out.assert_code(0);
    assert!(
        out.stdout
            .contains("free (stale copy on 1 of 3 nodes, token 5c0b1050…, expires in 18 s)"),
        "{out}"
    );
    assert!(
        out.stdout.contains(": stale copy, token 5c0b1050…"),
        "{out}"
    );
    let json = status(&urls, "minority", &["--json"]);
    json.assert_code(0);
    let got = python(
        "import json, sys\nd = json.load(sys.stdin)\ns = d['stale'][0]\n\
         print(d['verdict'], len(d['stale']), s['token_prefix'], s['on'], s['pttl_ms'] > 15000, \
         d['nodes'][0]['stale'], d['nodes'][1]['held'])",
        &json.stdout,
    );
    assert_eq!(got.trim(), "free 1 5c0b1050 1 True True False", "{json}");
    // A run takes the lock past it.
    base(&urls, "minority", &dir)
        .args(["-c", "touch ran"])
        .expect_code(0);
    assert!(dir.has("ran"));
    // On 2 of 3 it is the lock.
    cluster[1].set(k.lock(), "5c0b1050aaaaaaaaaaaaaaaaaaaaaaaa", 17_500);
    let out = status(&urls, "minority", &[]);
    out.assert_code(1);
    assert!(out.stdout.contains("on 2/3 node(s)"), "{out}");
    // On 1 of 3 with a node down it may be: unknown.
    let _ = cluster[1].cmd::<i64>(redis::cmd("DEL").arg(k.lock()));
    cluster[2].stop();
    let out = status(&urls, "minority", &["--node-timeout", "200ms"]);
    cluster[2].cont();
    out.assert_code(69);
    assert!(
        out.stdout
            .contains("unknown: token 5c0b1050… on 1 of 3 nodes"),
        "{out}"
    );
}

/// The last stderr line that contains `what`, or a panic showing them all.
fn line_with<'a>(out: &'a crate::support::RunOutput, what: &str) -> &'a str {
    out.stderr_lines()
        .into_iter()
        .find(|l| l.contains(what))
        .unwrap_or_else(|| panic!("no line with {what:?}\n{out}"))
}

/// A single try that finds the lock busy says who holds it and for how
/// long, from the holder record the refusing nodes send with their answer.
#[test]
fn a_busy_single_try_names_the_holder_and_how_long_it_held() {
    let cluster = Cluster::new(3);
    let dir = tempdir();
    let urls = cluster.urls();
    let holder = base(&urls, "who-holds", &dir)
        .env("USER", "ci")
        .env("REDLOCK_TEST_HOST", "runner4")
        .args(["-c", &format!("touch held; {WAIT_FOR_GO}")])
        .spawn();
    await_marker(&dir, "held", &holder);
    std::thread::sleep(Duration::from_millis(1200));
    let out = base(&urls, "who-holds", &dir)
        .args(["-c", "touch ran"])
        .expect_code(75);
    let quiet = base(&urls, "who-holds", &dir)
        .args(["-q", "-c", "touch ran"])
        .expect_code(75);
    let holder_pid = holder.pid();
    touch(&dir, "go");
    holder.wait().assert_code(0);
    assert!(!dir.has("ran"));
    assert_eq!(out.stderr_lines().len(), 1, "{out}");
    let want = format!(
        "redlock-run: lock 'who-holds' is held elsewhere, by ci@runner4 pid {holder_pid}, held \
         for "
    );
    let line = out.stderr_lines()[0];
    let held_for = line
        .strip_prefix(want.as_str())
        .unwrap_or_else(|| panic!("want {want:?}...\n{out}"));
    assert!(
        ["1s", "2s", "3s"].contains(&held_for),
        "held for {held_for:?}: {out}"
    );
    assert!(quiet.stderr.is_empty(), "-q printed: {quiet}");
}

/// A run that waited for the lock says so when it takes it: how long, and
/// behind whom. One that did not wait says nothing; -q says nothing.
#[test]
fn a_lock_taken_after_waiting_says_how_long_and_behind_whom() {
    let node = RedisNode::start();
    let dir = tempdir();
    let urls = node.url();
    for quiet in [false, true] {
        // The first round's marker would let the second round's waiter in
        // before its holder.
        let _ = std::fs::remove_file(dir.join("held"));
        let holder = base(&urls, "took", &dir)
            .env("USER", "ci")
            .env("REDLOCK_TEST_HOST", "runner4")
            .args(["-c", "touch held; sleep 1"])
            .spawn();
        await_marker(&dir, "held", &holder);
        let mut waiter = base(&urls, "took", &dir).args(["--wait", "30s"]);
        if quiet {
            waiter = waiter.arg("-q");
        }
        let out = waiter.args(["-c", "touch ran"]).expect_code(0);
        let holder_pid = holder.pid();
        holder.wait().assert_code(0);
        if quiet {
            assert!(out.stderr.is_empty(), "-q printed: {out}");
            continue;
        }
        let line = line_with(&out, "took lock");
        let rest = line
            .strip_prefix("redlock-run: took lock 'took' after waiting ")
            .unwrap_or_else(|| panic!("{out}"));
        let (waited, behind) = rest.split_once(", ").unwrap_or_else(|| panic!("{out}"));
        // 350ms or 3.2s.
        let secs: f64 = match waited.strip_suffix("ms") {
            Some(ms) => ms.parse::<f64>().ok().map(|ms| ms / 1000.0),
            None => waited.strip_suffix('s').and_then(|s| s.parse().ok()),
        }
        .unwrap_or_else(|| panic!("waited {waited:?}: {out}"));
        assert!((0.3..5.0).contains(&secs), "waited {secs}: {out}");
        assert_eq!(
            behind,
            format!("behind ci@runner4 pid {holder_pid}"),
            "{out}"
        );
    }
    // Free at once: nothing to say.
    let out = base(&urls, "took", &dir)
        .args(["--wait", "30s", "-c", "true"])
        .expect_code(0);
    assert!(out.stderr.is_empty(), "{out}");
}

/// A command that exits while processes it started run on keeps the lock
/// (--leftovers wait): one line says so, naming them and how to stop them.
#[test]
fn leftovers_that_keep_the_lock_are_named_with_how_to_stop_them() {
    let node = RedisNode::start();
    let dir = tempdir();
    let out = base(&node.url(), "left", &dir)
        .args(["-c", "echo $$ > sh.pid; sleep 1 & echo $! > bg.pid"])
        .expect_code(0);
    let sh = std::fs::read_to_string(dir.join("sh.pid")).expect("sh.pid");
    let bg = std::fs::read_to_string(dir.join("bg.pid")).expect("bg.pid");
    assert_eq!(out.stderr_lines().len(), 1, "{out}");
    let line = out.stderr_lines()[0];
    assert!(
        line.contains("exited (status 0); 1 process(es) it left behind keep lock 'left' until")
            && line.contains(" they exit (--leftovers wait)"),
        "{out}"
    );
    // `sleep` once the fork has exec'd it, `sh` before.
    assert!(line.contains(&format!(": {} (", bg.trim())), "{out}");
    assert!(
        line.ends_with(&format!(
            "to stop them: kill -- -{} (their process group), or run with --leftovers kill",
            sh.trim()
        )),
        "{out}"
    );
    assert!(
        out.elapsed >= Duration::from_millis(900),
        "the lock was not kept for the leftover: {out}"
    );
    let quiet = base(&node.url(), "left", &dir)
        .args(["-q", "-c", "sleep 0.3 &"])
        .expect_code(0);
    assert!(quiet.stderr.is_empty(), "-q printed: {quiet}");
}

/// Without $USER and $LOGNAME (CI containers, some crons) the holder record
/// names the user from the password database, not `uid N`.
#[test]
fn the_holder_record_names_the_user_without_user_or_logname() {
    let node = RedisNode::start();
    let dir = tempdir();
    let id = std::process::Command::new("id")
        .arg("-un")
        .output()
        .expect("id -un");
    assert!(id.status.success(), "this uid has no name: {id:?}");
    let name = String::from_utf8_lossy(&id.stdout).trim().to_string();
    let holder = base(&node.url(), "nameless", &dir)
        .env_remove("USER")
        .env_remove("LOGNAME")
        .env("REDLOCK_TEST_HOST", "ci-box")
        .args(["-c", &format!("touch held; {WAIT_FOR_GO}")])
        .spawn();
    await_marker(&dir, "held", &holder);
    let shown = status(&node.url(), "nameless", &[]);
    let busy = base(&node.url(), "nameless", &dir)
        .args(["-c", "true"])
        .expect_code(75);
    let holder_pid = holder.pid();
    touch(&dir, "go");
    holder.wait().assert_code(0);
    shown.assert_code(1);
    let by = format!("held by {name}@ci-box pid {holder_pid}");
    assert!(shown.stdout.contains(&by), "want {by:?}\n{shown}");
    assert!(
        busy.stderr
            .contains(&format!("by {name}@ci-box pid {holder_pid}")),
        "{busy}"
    );
}

/// A --once-per refusal says when the window opened and when the next one
/// opens, in UTC, not in unix seconds.
#[test]
fn once_per_refusals_say_when_in_utc() {
    let node = RedisNode::start();
    let dir = tempdir();
    let iso = |secs: u64| {
        humantime::format_rfc3339_seconds(std::time::UNIX_EPOCH + Duration::from_secs(secs))
            .to_string()
    };
    let now = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("after 1970")
            .as_secs()
    };
    for (flag, says) in [
        ("--once-per", "already ran in this window"),
        ("--once-per-success", "already succeeded in this window"),
    ] {
        let key = format!("iso{flag}");
        let before = now() / 3600 * 3600;
        base(&node.url(), &key, &dir)
            .args([flag, "1h", "-c", "true"])
            .expect_code(0);
        let out = base(&node.url(), &key, &dir)
            .args([flag, "1h", "-c", "touch ran"])
            .expect_code(75);
        let after = now() / 3600 * 3600;
        assert!(!dir.has("ran"), "{out}");
        out.assert_one_error_line();
        let line = line_with(&out, says);
        let fits = [before, after].iter().any(|start| {
            line.contains(&format!(
                "window (from {}; the next opens at {})",
                iso(*start),
                iso(start + 3600)
            ))
        });
        assert!(fits, "{out}");
        assert!(!line.contains("unix time"), "{out}");
    }
}

/// Options given before a subcommand get one line with the right order (the
/// options carried over) and 64, for every subcommand clap knows; nothing
/// runs, not even a program of that name on PATH. After `--` the word is a
/// program to run, as for flock(1) and env(1).
#[test]
fn options_before_a_subcommand_get_the_right_order_and_64() {
    let node = RedisNode::start();
    let dir = tempdir();
    let bin = dir.join("bin");
    std::fs::create_dir(&bin).expect("bin dir");
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let subcommands: Vec<String> = redlock_run::cli::command()
        .get_subcommands()
        .map(|s| s.get_name().to_string())
        .collect();
    assert!(
        subcommands.contains(&"status".to_string()),
        "{subcommands:?}"
    );
    for name in &subcommands {
        // A program of that name, which says when it runs.
        let program = bin.join(name);
        std::fs::write(&program, format!("#!/bin/sh\ntouch ran-{name}\n")).expect("program");
        let mut perms = std::fs::metadata(&program).expect("meta").permissions();
        std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o755);
        std::fs::set_permissions(&program, perms).expect("chmod");
        for (args, want) in [
            (
                vec!["-r", &node.url(), name, "-k", "order"],
                format!("redlock-run {name} -r {} -k order", node.url()),
            ),
            (
                vec!["-k", "order", "-r", &node.url(), name],
                format!("redlock-run {name} -k order -r {}", node.url()),
            ),
        ] {
            let out = Test::new()
                .current_dir(dir.path())
                .env("PATH", &path)
                .args(&args)
                .expect_code(64);
            out.assert_one_error_line();
            assert!(
                out.stderr.contains(&format!(
                    "'{name}' is a subcommand, and its options go after it: {want}"
                )) && out.stderr.contains("put -- before it"),
                "{out}"
            );
            assert!(!dir.has(format!("ran-{name}")), "{name} ran: {out}");
        }
        assert!(node.keys().is_empty(), "{:?}", node.keys());
        // After --, a program.
        let out = Test::new()
            .current_dir(dir.path())
            .env("PATH", &path)
            .args(["-r", &node.url(), "-k", "order", "--", name])
            .expect_code(0);
        assert!(dir.has(format!("ran-{name}")), "{out}");
        assert!(node.keys().is_empty(), "lock left: {:?}", node.keys());
    }
}

/// Runs an admin subcommand of redlock-run with its stdout on `stdout`.
fn answer_into(stdout: impl Into<std::process::Stdio>, args: &[&str]) -> std::process::Output {
    crate::support::cmd::command(crate::support::cmd::BIN)
        .args(args)
        .stdin(std::process::Stdio::null())
        .stdout(stdout)
        .output()
        .expect("run redlock-run")
}

/// `redlock-run status … | head -0`: the reader is gone before the answer is
/// written. The answer's writer ends as ls(1) does, killed by SIGPIPE, with
/// nothing on stderr; a write that panicked would exit 101 saying so. The
/// same for every subcommand that answers (`config | head -1` under
/// pipefail once failed with an error line instead).
#[test]
fn an_answer_to_a_closed_pipe_ends_quietly_as_ls_does() {
    use std::os::unix::process::ExitStatusExt;
    let node = RedisNode::start();
    let url = node.url();
    let lock = ["-r", url.as_str(), "-k", "job"];
    for (sub, extra) in ["status", "history", "config", "check"]
        .into_iter()
        .flat_map(|sub| [(sub, &[][..]), (sub, &["--json"][..])])
    {
        let (reader, writer) = std::io::pipe().expect("pipe");
        drop(reader);
        let args = [&[sub][..], &lock[..], extra].concat();
        let out = answer_into(writer, &args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(
            out.status.signal(),
            Some(libc::SIGPIPE),
            "{sub} {extra:?}: {:?}, stderr: {stderr}",
            out.status
        );
        assert!(stderr.is_empty(), "{sub} {extra:?}: {stderr}");
    }
}

/// An answer that cannot be written (stdout on a full disk, `/dev/full`):
/// one line on stderr naming stdout and status 74, not a panic (101).
#[test]
fn an_answer_that_cannot_be_written_is_one_line_and_74() {
    let node = RedisNode::start();
    let url = node.url();
    for sub in ["status", "history", "forget"] {
        let full = std::fs::OpenOptions::new()
            .write(true)
            .open("/dev/full")
            .expect("open /dev/full");
        let out = answer_into(full, &[sub, "-r", &url, "-k", "job"]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(74), "{sub}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{sub}: {stderr}");
        assert!(
            stderr.contains("cannot write the answer to stdout"),
            "{sub}: {stderr}"
        );
    }
}

/// Whoever can write a lock's keys writes its holder record and its history:
/// a `host` with an OSC title sequence (`\e]0;x\a`) and a `user` with a
/// screen clear reach no terminal raw, in `status`, the busy and waiting
/// lines or `history`; `status --json` and `history --json` keep the value.
#[test]
fn what_nodes_hold_reaches_a_terminal_escaped() {
    const HOST: &str = "evil\x1b]0;x\x07host";
    const USER: &str = "u\x1b[2J";
    let node = RedisNode::start();
    let dir = tempdir();
    let url = node.url();
    let k = keys("hostile");
    let running = base(&url, "hostile", &dir)
        .args(["-c", &format!("touch held; {WAIT_FOR_GO}")])
        .spawn();
    await_marker(&dir, "held", &running);
    let _: i64 = node.cmd(
        redis::cmd("HSET")
            .arg(k.holder(None))
            .arg("host")
            .arg(HOST)
            .arg("user")
            .arg(USER),
    );
    let raw = |text: &str| text.contains(['\x1b', '\x07']);
    let shown = "u\\e[2J@evil\\e]0;x\\x07host";
    let text = status(&url, "hostile", &[]);
    text.assert_code(1);
    assert!(!raw(&text.stdout) && text.stdout.contains(shown), "{text}");
    let busy = base(&url, "hostile", &dir).args(["-c", "true"]).run();
    busy.assert_code(75);
    assert!(!raw(&busy.stderr) && busy.stderr.contains(shown), "{busy}");
    let waiting = base(&url, "hostile", &dir)
        .args(["--wait", "300ms", "-c", "true"])
        .run();
    waiting.assert_code(75);
    assert!(
        !raw(&waiting.stderr) && waiting.stderr.contains(&format!("held by {shown}")),
        "{waiting}"
    );
    let json = status(&url, "hostile", &["--json"]);
    let held = python(
        "import json, sys; h = json.load(sys.stdin)['holder']; print(repr((h['host'], h['user'])))",
        &json.stdout,
    );
    assert_eq!(
        held.trim(),
        "('evil\\x1b]0;x\\x07host', 'u\\x1b[2J')",
        "{json}"
    );
    touch(&dir, "go");
    running.wait().assert_code(0);

    let record = r#"{"id":"feedface00000000","host":"evil\u001b]0;x\u0007host","pid":1,"user":"u","started_at":"2026-11-30T03:00:00.012Z","duration_ms":5,"outcome":"ok\u001b[2J","exit_code":0,"attempts":1,"fencing_token":null}"#;
    let _: i64 = node.cmd(redis::cmd("LPUSH").arg(k.history()).arg(record));
    let history = Test::new()
        .args(["history", "-r", &url, "-k", "hostile"])
        .expect_code(0);
    assert!(
        !raw(&history.stdout) && history.stdout.contains("evil\\e]0;x\\x07host"),
        "{history}"
    );
    let last = status(&url, "hostile", &[]);
    assert!(!raw(&last.stdout), "{last}");
    let history = Test::new()
        .args(["history", "-r", &url, "-k", "hostile", "--json"])
        .expect_code(0);
    let hosts = python(
        "import json, sys; print(repr([r['host'] for r in json.load(sys.stdin)]))",
        &history.stdout,
    );
    assert!(hosts.contains("'evil\\x1b]0;x\\x07host'"), "{hosts}");
}
