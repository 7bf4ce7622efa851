//! Every `redlock-run` command line shown in README.md runs here against a real
//! node, so the README cannot drift from the program. Crontab schedules and
//! systemd's `ExecStart=` are peeled off; the programs the examples name
//! (`./report.sh`, `/opt/app/...`, `make`) are stubs that record their run.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use crate::support::*;

const README: &str = include_str!("../../README.md");

/// The README's command lines that invoke redlock-run, as a shell would run them.
fn examples() -> Vec<String> {
    let mut out = Vec::new();
    let mut in_fence = false;
    for line in README.lines() {
        if line.starts_with("```") {
            in_fence = !in_fence;
            continue;
        }
        // Only code: four-space blocks (the README uses no fenced shell code).
        if in_fence || !line.starts_with("    ") {
            continue;
        }
        // A shell session shows its commands after a `$ ` prompt, and what
        // they print on lines of their own.
        let line = line.trim();
        let line = line.strip_prefix("$ ").unwrap_or(line);
        if line.starts_with('#') || !line.contains("redlock-run ") || line.contains("<NAME>") {
            continue;
        }
        let first = line.split_whitespace().next().unwrap_or("");
        // Developer commands (cargo, install, bash demo/try.sh) run in .ci/run;
        // the copy to another host is the one that cannot run here.
        if matches!(first, "cargo" | "install" | "bash" | "scp") {
            continue;
        }
        let mut cmd = line.trim_start_matches("ExecStart=").to_string();
        if is_cron_schedule(&cmd) {
            cmd = cmd.split_whitespace().skip(5).collect::<Vec<_>>().join(" ");
        }
        let cmd = cmd
            .replace("/usr/local/bin/redlock-run", "redlock-run")
            .replace("/usr/bin/redlock-run", "redlock-run")
            .replace("/opt/app/", "./opt/app/")
            .replace("/var/lib/prometheus/node-exporter/", "./");
        out.push(cmd);
    }
    out
}

fn is_cron_schedule(line: &str) -> bool {
    let fields: Vec<&str> = line.split_whitespace().collect();
    fields.len() > 5
        && fields[..5]
            .iter()
            .all(|f| f.chars().all(|c| c.is_ascii_digit() || "*/,-".contains(c)))
}

fn stub(path: &Path, log: &Path) {
    if let Some(dir) = path.parent() {
        fs::create_dir_all(dir).expect("stub dir");
    }
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    fs::write(
        path,
        format!(
            "#!/bin/sh\necho \"{name} $* key=$REDLOCK_KEY\" >> '{}'\n",
            log.display()
        ),
    )
    .expect("write stub");
    fs::set_permissions(path, fs::Permissions::from_mode(0o755)).expect("chmod stub");
}

#[test]
fn readme_shows_the_exit_status_table() {
    // The same table as --help and the man page, defined once in src/exit.rs.
    for line in redlock_run::exit::TABLE.lines().skip(1) {
        assert!(
            README.contains(&format!("    {}", line.trim_start())),
            "README lacks the exit status line {line:?}"
        );
    }
}

#[test]
fn readme_examples_run() {
    let examples = examples();
    assert!(
        examples.len() >= 11,
        "expected the README's usage, crontab, systemd and CI examples, found {examples:?}"
    );
    let node = RedisNode::start();
    // The ping service of the Monitoring examples, on loopback.
    let pings = PingServer::start();
    let dir = tempdir();
    let log = dir.join("ran.log");
    let bin_dir = dir.join("bin");
    for program in ["make", "psql", "job"] {
        stub(&bin_dir.join(program), &log);
    }
    // The health-check ping after `job`: it records nothing, so that the
    // example still counts as one run of its command.
    fs::write(bin_dir.join("curl"), "#!/bin/sh\nexit 0\n").expect("curl stub");
    fs::set_permissions(bin_dir.join("curl"), fs::Permissions::from_mode(0o755))
        .expect("chmod curl stub");
    for ex in &examples {
        for word in ex.split_whitespace() {
            if word.starts_with("./") {
                stub(&dir.join(word), &log);
            }
        }
    }
    let exe = crate::support::cmd::BIN.path();
    let path = format!(
        "{}:{}:{}",
        bin_dir.display(),
        exe.parent().expect("binary dir").display(),
        std::env::var("PATH").unwrap_or_default()
    );
    for ex in &examples {
        let ex = &ex.replace("https://hc-ping.com/", &pings.url(""));
        let before = fs::read_to_string(&log).unwrap_or_default().lines().count();
        let mut cmd = crate::support::cmd::command("/bin/sh");
        cmd.arg("-c").arg(ex).current_dir(dir.path());
        // The subcommands look at locks, nodes or settings; they run no command.
        let admin = ["status", "unlock", "history", "forget", "check", "config"]
            .iter()
            .any(|sub| ex.starts_with(&format!("redlock-run {sub}")));
        let out = cmd
            .env("PATH", &path)
            .env("REDLOCK_REDIS", node.url())
            .env("LOCK_NODES", node.url())
            .env("ENVIRONMENT", "staging")
            .output()
            .expect("run example");
        let ok = match out.status.code() {
            Some(0) => true,
            // `status` of a held lock (--hold left one): 1, as documented;
            // `unlock` of a lock that is not there, `forget` of one without
            // keys: 3, as documented.
            // `check` of the test's node, which keeps no AOF: warnings.
            Some(1) => ex.starts_with("redlock-run status") || ex.starts_with("redlock-run check"),
            Some(3) => ex.starts_with("redlock-run unlock") || ex.starts_with("redlock-run forget"),
            _ => false,
        };
        assert!(
            ok,
            "README example failed ({:?}): {ex}\nstderr: {}",
            out.status.code(),
            String::from_utf8_lossy(&out.stderr)
        );
        // Looked at at once: the examples after it may take longer than the
        // 30 s it holds on a busy machine.
        if ex.contains("-k rotate --hold") {
            assert!(
                node.exists(lock_key("rotate")),
                "--hold keeps the lock: {ex}"
            );
        }
        if admin {
            continue;
        }
        let after = fs::read_to_string(&log).unwrap_or_default();
        assert_eq!(
            after.lines().count(),
            before + 1,
            "README example did not run its command exactly once: {ex}\nlog:\n{after}"
        );
    }
    // The metrics example wrote its file; the ping example pinged.
    assert!(dir.has("cron.prom"), "--metrics-file wrote nothing");
    let pinged: Vec<(String, String)> = pings
        .requests()
        .iter()
        .map(|r| (r.method.clone(), r.path.clone()))
        .collect();
    assert!(
        pinged.len() >= 2
            && pinged.iter().all(|(_, p)| p.starts_with("/2c9f4e1a-"))
            && pinged
                .iter()
                .any(|(m, p)| m == "GET" && p.ends_with("/start"))
            && pinged.iter().any(|(m, p)| m == "POST" && p.ends_with("/0")),
        "the --ping example: {pinged:?}"
    );
    // --once-per leaves what it promises; the plain locks are gone.
    assert!(!node.exists(lock_key("report")));
    assert!(
        node.keys()
            .iter()
            .any(|k| k.starts_with(b"{lock:digest}:once:")),
        "--once-per leaves its window marker"
    );
}

/// Whether `text` names `word` as a whole word: not as the start of a longer
/// flag or variable (`--wait` in `--wait-unfair`, `REDLOCK_KEY` in `REDLOCK_KEYS`).
fn names(text: &str, word: &str) -> bool {
    text.match_indices(word).any(|(i, _)| {
        !text[i + word.len()..]
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
    })
}

/// Every `REDLOCK_*` name quoted in the Rust files under `dir`, recursively.
fn redlock_vars_in(dir: &Path, out: &mut std::collections::BTreeSet<String>) {
    let entries = fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    for entry in entries {
        let path = entry.expect("directory entry").path();
        if path.is_dir() {
            redlock_vars_in(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            let text = fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path:?}: {e}"));
            out.extend(redlock_vars(&text));
        }
    }
}

/// The `REDLOCK_[A-Z0-9_]+` words of `text`.
fn redlock_vars(text: &str) -> Vec<String> {
    text.match_indices("REDLOCK_")
        .map(|(i, _)| {
            text[i..]
                .chars()
                .take_while(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || *c == '_')
                .collect::<String>()
        })
        .filter(|v| v.len() > "REDLOCK_".len() && !v.ends_with('_'))
        .collect()
}

/// The README is the reference users read: every long flag `--help` shows
/// (the run's and each subcommand's) and every `REDLOCK_*` variable the
/// program reads or sets must be in it, and the man page must name the same
/// variables; the other way round, every flag of the README's option table
/// and every `REDLOCK_*` it names must exist. `-v`/`-vv` read the same in the
/// README's table as in `--help`.
#[test]
fn readme_help_and_man_page_name_the_same_flags_and_variables() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let cmd = redlock_run::cli::command();
    let mut longs = Vec::new();
    for c in std::iter::once(&cmd).chain(cmd.get_subcommands()) {
        for arg in c.get_arguments().filter(|a| !a.is_hide_set()) {
            if let Some(long) = arg.get_long().filter(|l| !matches!(*l, "help" | "version")) {
                longs.push(format!("--{long}"));
            }
        }
    }
    assert!(longs.len() > 30, "found only {longs:?} in the CLI");
    let missing: Vec<&String> = longs.iter().filter(|f| !names(README, f)).collect();
    assert!(missing.is_empty(), "README does not mention {missing:?}");

    // The option table's flags, each one the program has.
    let table_flags: Vec<&str> = README
        .lines()
        .filter(|l| l.starts_with("| `-"))
        .filter_map(|l| l.split('|').nth(1))
        .flat_map(|cell| cell.split(['`', ',', ' ']))
        .filter(|w| w.starts_with("--"))
        .collect();
    assert!(
        table_flags.len() > 30,
        "no option table found: {table_flags:?}"
    );
    let unknown: Vec<&&str> = table_flags
        .iter()
        .filter(|f| !longs.iter().any(|l| l == *f))
        .collect();
    assert!(
        unknown.is_empty(),
        "README's option table names unknown flags {unknown:?}"
    );

    // Variables: what src/ reads or sets, test-build hooks aside.
    let mut program = std::collections::BTreeSet::new();
    redlock_vars_in(&root.join("src"), &mut program);
    program.retain(|v| !v.starts_with("REDLOCK_TEST_"));
    for var in [
        "REDLOCK_KEY",
        "REDLOCK_REDIS",
        "REDLOCK_SENTINEL_USERNAME",
        "REDLOCK_SLOT",
    ] {
        assert!(
            program.contains(var),
            "{var} not found in src/: {program:?}"
        );
    }
    let man = fs::read_to_string(root.join("man/redlock-run.1")).expect("man page");
    for var in &program {
        assert!(names(README, var), "README does not mention {var}");
        assert!(names(&man, var), "the man page does not mention {var}");
    }
    // What the README names is the program's, or the test suite's own knobs.
    let mut known = program.clone();
    redlock_vars_in(&root.join("tests"), &mut known);
    let strange: Vec<String> = redlock_vars(README)
        .into_iter()
        .filter(|v| !known.contains(v))
        .collect();
    assert!(
        strange.is_empty(),
        "README names variables nothing reads: {strange:?}"
    );

    // -v and -vv: the README's row says what --help says.
    let verbose = cmd
        .get_arguments()
        .find(|a| a.get_long() == Some("verbose"))
        .and_then(|a| a.get_help())
        .map(|h| h.to_string().replace('\n', " "))
        .expect("--verbose has help");
    let what = verbose
        .split_once(": ")
        .map_or(verbose.as_str(), |(_, w)| w);
    let row = README
        .lines()
        .find(|l| l.starts_with("| `-v, --verbose`"))
        .expect("README's option table has --verbose")
        .replace('`', "");
    assert!(
        row.contains(what),
        "README's -v/-vv ({row}) differs from --help ({what})"
    );
}

/// The `1.59×`-shaped figures of `text`.
fn ratios(text: &str) -> Vec<&str> {
    text.match_indices('×')
        .filter_map(|(i, _)| {
            // The digits and points are ASCII: the figure starts one byte
            // after the last other character, whatever its width.
            let start = text[..i]
                .char_indices()
                .rev()
                .find(|(_, c)| !(c.is_ascii_digit() || *c == '.'))
                .map_or(0, |(j, c)| j + c.len_utf8());
            let figure = &text[start..i];
            figure
                .starts_with(|c: char| c.is_ascii_digit())
                .then_some(figure)
        })
        .collect()
}

/// The rows of the first table under `heading` in `text`, cells trimmed.
fn table_under(text: &str, heading: &str) -> Vec<Vec<String>> {
    let section = text.split(heading).nth(1).unwrap_or("");
    section
        .lines()
        .skip_while(|l| !l.starts_with('|'))
        .take_while(|l| l.starts_with('|'))
        .skip(2)
        .map(|l| l.split('|').map(|c| c.trim().to_string()).collect())
        .collect()
}

/// A figure quoted twice is the same figure: every ratio the README quotes
/// comes from its Performance section, and each row of that section's table
/// reads the same (median and ratio to flock) in docs/performance.md, which
/// takes both from the latest `bench/run`.
#[test]
fn readme_quotes_each_benchmark_figure_once() {
    let performance = README
        .split("\n## Performance\n")
        .nth(1)
        .and_then(|s| s.split("\n## ").next())
        .expect("README has a Performance section");
    let elsewhere = README.replace(performance, "");
    let stray: Vec<&str> = ratios(&elsewhere)
        .into_iter()
        .filter(|r| !ratios(performance).contains(r))
        .collect();
    assert!(
        stray.is_empty(),
        "README quotes ratios its Performance section does not have: {stray:?}"
    );

    let manual = include_str!("../../docs/performance.md");
    let ours = table_under(README, "\n## Performance\n");
    let theirs = table_under(manual, "# Performance");
    assert!(
        ours.len() >= 4,
        "no table in README's Performance: {ours:?}"
    );
    for row in &ours {
        let (command, median, ratio) = (&row[1], &row[2], &row[3]);
        let same = theirs
            .iter()
            .find(|r| &r[1] == command)
            .unwrap_or_else(|| panic!("docs/performance.md has no row for {command}"));
        assert_eq!(
            (&same[2], &same[3]),
            (median, ratio),
            "README and docs/performance.md quote {command} differently"
        );
    }
}
