//! The configuration file: found in its search order, applied under flags
//! and variables, refused when others could have written it or when it
//! says something no option means, and shown by `redlock-run config`.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use crate::support::*;

/// `text` written to `dir/name` with `mode`.
fn write_config(dir: &Path, name: &str, text: &str, mode: u32) -> PathBuf {
    let path = dir.join(name);
    fs::write(&path, text).expect("write the configuration file");
    fs::set_permissions(&path, fs::Permissions::from_mode(mode)).expect("chmod");
    path
}

/// `["redis://a", "redis://b", ...]` as TOML.
fn toml_list(urls: &str) -> String {
    let items: Vec<String> = urls.split(',').map(|u| format!("\"{u}\"")).collect();
    format!("[{}]", items.join(", "))
}

#[test]
fn a_file_with_three_nodes_and_a_prefix_serves_a_run_given_no_r() {
    let nodes = Cluster::new(3);
    let dir = tempdir();
    let config = write_config(
        dir.path(),
        "config.toml",
        &format!(
            "# the fleet's nodes\nredis = {}\nprefix = \"fleet:\"\n",
            toml_list(&nodes.urls())
        ),
        0o600,
    );
    Test::new()
        .current_dir(dir.path())
        .env("REDLOCK_CONFIG", &config)
        .args(["-k", "job", "--hold", "30s", "--", "touch", "ran"])
        .expect_code(0);
    assert!(dir.has("ran"), "the command did not run");
    // Held by --hold, under the file's prefix, on every node of the file.
    for node in nodes.iter() {
        assert!(node.exists("fleet:job"), "no fleet:job on {}", node.url());
        assert!(!node.exists(lock_key("job")), "the default prefix was used");
    }
}

#[test]
fn redis_on_the_command_line_wins_over_the_file() {
    let node = RedisNode::start();
    let dir = tempdir();
    // Nobody listens there: a run that used it would find no quorum.
    let nowhere = format!("redis://127.0.0.1:{}", free_port());
    let config = write_config(
        dir.path(),
        "config.toml",
        &format!("redis = [\"{nowhere}\"]\nprefix = \"file:\"\n"),
        0o600,
    );
    base(&node.url(), "job", &dir)
        .args(["--config", &config.display().to_string()])
        .args(["--hold", "30s", "--", "true"])
        .expect_code(0);
    assert!(node.exists("file:job"), "the file's prefix still applies");
    // And a variable wins over the file too, as a flag does.
    Test::new()
        .env("REDLOCK_CONFIG", &config)
        .env("REDLOCK_REDIS", node.url())
        .env("REDLOCK_PREFIX", "env:")
        .args(["-k", "job2", "--hold", "30s", "--", "true"])
        .expect_code(0);
    assert!(node.exists("env:job2"));
}

#[test]
fn an_unknown_key_is_refused_naming_the_file_the_line_and_the_key() {
    let dir = tempdir();
    let config = write_config(
        dir.path(),
        "config.toml",
        "prefix = \"app:\"\n\nttll = \"5s\"\n",
        0o600,
    );
    let out = Test::new()
        .current_dir(dir.path())
        .env("REDLOCK_CONFIG", &config)
        .args(["-k", "job", "--", "touch", "ran"])
        .expect_code(64);
    out.assert_one_error_line();
    assert!(
        out.stderr.contains(&format!(
            "{}:3: unknown key 'ttll'; did you mean 'ttl'?",
            config.display()
        )),
        "{out}"
    );
    assert!(!dir.has("ran"), "the command ran");
    // A value of the wrong type, and one its option's parser refuses.
    fs::write(&config, "ttl = true\n").expect("rewrite");
    let out = Test::new()
        .env("REDLOCK_CONFIG", &config)
        .args(["status", "-k", "job"])
        .expect_code(64);
    assert!(out.stderr.contains(":1: 'ttl' takes a DURATION"), "{out}");
    fs::write(&config, "[lock.job]\nttl = \"3x\"\n").expect("rewrite");
    let out = Test::new()
        .env("REDLOCK_CONFIG", &config)
        .args(["-k", "job", "--", "true"])
        .expect_code(64);
    assert!(
        out.stderr.contains(":2: 'ttl': ") && out.stderr.contains("'3x' is not a duration"),
        "{out}"
    );
}

#[test]
fn a_file_others_may_write_is_refused_and_the_command_does_not_run() {
    let node = RedisNode::start();
    let dir = tempdir();
    let config = write_config(
        dir.path(),
        "config.toml",
        &format!("redis = [\"{}\"]\n", node.url()),
        0o666,
    );
    let out = Test::new()
        .current_dir(dir.path())
        .args(["--config", &config.display().to_string()])
        .args(["-k", "job", "--", "touch", "ran"])
        .expect_code(64);
    out.assert_one_error_line();
    assert!(
        out.stderr.contains("may be written by others") && out.stderr.contains("chmod go-w"),
        "{out}"
    );
    assert!(!dir.has("ran"), "the command ran");
    assert!(node.keys().is_empty(), "a lock was taken");
    // A password in a URL that every user may read.
    let config = write_config(
        dir.path(),
        "secret.toml",
        "redis = [\"redis://:hunter2@127.0.0.1:1\"]\n",
        0o644,
    );
    let out = Test::new()
        .env("REDLOCK_CONFIG", &config)
        .args(["-k", "job", "--", "true"])
        .expect_code(64);
    assert!(out.stderr.contains(":1: a URL with a password"), "{out}");
    assert!(!out.stderr.contains("hunter2"), "{out}");
}

#[test]
fn config_names_the_file_as_the_origin_of_ttl_and_hides_a_password() {
    let dir = tempdir();
    let config = write_config(
        dir.path(),
        "config.toml",
        "redis = [\"redis://:s3cret@127.0.0.1:7001\", \"redis://127.0.0.1:7002\"]\nttl = \
         \"45s\"\n\n[lock.\"nightly\"]\nttl = \"2m\"\n",
        0o600,
    );
    let out = Test::new()
        .env("REDLOCK_CONFIG", &config)
        .arg("config")
        .expect_code(0);
    assert!(!out.stdout.contains("s3cret"), "{out}");
    assert!(out.stdout.contains("redis://:***@127.0.0.1:7001"), "{out}");
    let ttl = out
        .stdout
        .lines()
        .find(|l| l.starts_with("ttl "))
        .unwrap_or_else(|| panic!("no ttl line\n{out}"));
    assert!(ttl.contains("45s"), "{ttl}");
    assert!(ttl.ends_with(&format!("{}:2", config.display())), "{ttl}");
    let prefix = out
        .stdout
        .lines()
        .find(|l| l.starts_with("prefix "))
        .expect("prefix");
    assert!(
        prefix.contains("lock:") && prefix.ends_with("default"),
        "{prefix}"
    );
    // The lock's table, a flag and --json.
    let out = Test::new()
        .env("REDLOCK_CONFIG", &config)
        .args(["config", "-k", "nightly", "--prefix", "p:", "--json"])
        .expect_code(0);
    assert!(!out.stdout.contains("s3cret"), "{out}");
    let said = python(
        "import json,sys\nd=json.load(sys.stdin)\ns={x['name']: x for x in d['settings']}\n\
         print(s['ttl']['value'], s['ttl']['origin'], s['ttl']['line'], s['ttl']['lock'], \
         s['prefix']['origin'], s['key']['value'], d['found'])",
        &out.stdout,
    );
    assert_eq!(said.trim(), "2m file 5 nightly flag nightly REDLOCK_CONFIG");
}

#[test]
fn the_search_order_and_no_config() {
    let dir = tempdir();
    let home = dir.join("xdg");
    fs::create_dir_all(home.join("redlock-run")).expect("mkdir");
    write_config(
        &home.join("redlock-run"),
        "config.toml",
        "prefix = \"xdg:\"\n",
        0o600,
    );
    let line = |out: &RunOutput| {
        out.stdout
            .lines()
            .find(|l| l.starts_with("prefix "))
            .map(str::to_string)
            .unwrap_or_default()
    };
    // No REDLOCK_CONFIG: the user's file under XDG_CONFIG_HOME.
    let out = Test::new()
        .env_remove("REDLOCK_CONFIG")
        .env("XDG_CONFIG_HOME", &home)
        .arg("config")
        .expect_code(0);
    assert!(line(&out).contains("xdg:"), "{out}");
    assert!(out.stdout.starts_with("configuration file: "), "{out}");
    // --no-config reads none; a --config that is not there is an error.
    let out = Test::new()
        .env_remove("REDLOCK_CONFIG")
        .env("XDG_CONFIG_HOME", &home)
        .args(["config", "--no-config"])
        .expect_code(0);
    assert!(line(&out).contains("lock:"), "{out}");
    let out = Test::new()
        .args([
            "config",
            "--config",
            &dir.join("none.toml").display().to_string(),
        ])
        .expect_code(64);
    assert!(
        out.stderr.contains("cannot read the configuration file"),
        "{out}"
    );
}

/// The example the Debian package installs as /etc/redlock-run/config.toml:
/// as shipped it sets nothing; with its examples uncommented it is valid.
#[test]
fn the_shipped_example_is_valid_commented_and_not() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let text = fs::read_to_string(root.join("etc/config.toml")).expect("etc/config.toml");
    let dir = tempdir();
    let shipped = write_config(dir.path(), "shipped.toml", &text, 0o644);
    let out = Test::new()
        .args(["config", "--config", &shipped.display().to_string()])
        .expect_code(0);
    assert!(!out.stdout.contains(".toml:"), "it sets something\n{out}");
    // Every example line uncommented, but for the files a run reads at
    // once (passwords, certificates), which are not here.
    let reads = ["password-file", "sentinel-password-file", "tls-"];
    let uncommented: String = text
        .lines()
        .filter_map(|l| l.strip_prefix("# "))
        .filter(|l| {
            (l.starts_with('[') || l.contains(" = ")) && !reads.iter().any(|r| l.starts_with(r))
        })
        .map(|l| format!("{l}\n"))
        .collect();
    // A file a run writes must have its directory: here, this test's.
    let uncommented = uncommented.replace(
        "/var/lib/prometheus/node-exporter/",
        &format!("{}/", dir.path().display()),
    );
    let all = write_config(dir.path(), "all.toml", &uncommented, 0o600);
    let out = Test::new()
        .args(["config", "--config", &all.display().to_string()])
        .args(["-k", "nightly-backup"])
        .expect_code(0);
    for key in [
        "redis",
        "prefix",
        "ttl",
        "node-timeout",
        "max-runtime",
        "once-per",
        "on-failure",
        "ping",
    ] {
        let line = out
            .stdout
            .lines()
            .find(|l| l.starts_with(&format!("{key} ")))
            .unwrap_or_else(|| panic!("no {key}\n{out}"));
        assert!(line.contains("all.toml:"), "{line}");
    }
    assert!(out.stdout.contains("https://hc-ping.com/***"), "{out}");
    assert!(!out.stdout.contains("uuid-of-its-check"), "{out}");
}

/// The whole path is trusted, as ssh does: a directory anywhere above the
/// file that others may write (not sticky) lets them rename what it holds
/// and plant a file of their own. Here `x` (mode 0777) → `sub` (0755) →
/// `c.toml` (0600): refused, naming `x` and the chmod that fixes it; the
/// command does not run. Made sticky (as /tmp is) it passes.
#[test]
fn a_directory_others_may_write_anywhere_above_the_file_is_refused() {
    let node = RedisNode::start();
    let dir = tempdir();
    let open = dir.join("x");
    let sub = open.join("sub");
    fs::create_dir_all(&sub).expect("mkdir");
    fs::set_permissions(&open, fs::Permissions::from_mode(0o777)).expect("chmod x");
    fs::set_permissions(&sub, fs::Permissions::from_mode(0o755)).expect("chmod sub");
    let config = write_config(
        &sub,
        "c.toml",
        &format!("redis = [\"{}\"]\n", node.url()),
        0o600,
    );
    for args in [
        &["-k", "job", "--", "touch", "ran"][..],
        &["status", "-k", "job"][..],
    ] {
        let out = Test::new()
            .current_dir(dir.path())
            .env("REDLOCK_CONFIG", &config)
            .args(args)
            .expect_code(64);
        out.assert_one_error_line();
        assert!(
            out.stderr
                .contains(&format!("the directory {} on its path", open.display()))
                && out
                    .stderr
                    .contains(&format!("chmod go-w {}", open.display())),
            "{out}"
        );
    }
    assert!(!dir.has("ran"), "the command ran");
    assert!(node.keys().is_empty(), "a lock was taken");
    fs::set_permissions(&open, fs::Permissions::from_mode(0o1777)).expect("chmod +t x");
    Test::new()
        .current_dir(dir.path())
        .env("REDLOCK_CONFIG", &config)
        .args(["-k", "job", "--", "touch", "ran"])
        .expect_code(0);
    assert!(dir.has("ran"), "a sticky directory passes");
}

/// The same open directory reached through a link from a trusted one
/// (`trusted/to-sub` → `x/sub`), and through a path that climbs
/// (`trusted/../x/sub`): each is judged where it leads, and refused.
#[test]
fn a_link_or_a_climb_into_an_open_directory_is_refused_too() {
    let node = RedisNode::start();
    let dir = tempdir();
    let open = dir.join("x");
    let sub = open.join("sub");
    let trusted = dir.join("trusted");
    fs::create_dir_all(&sub).expect("mkdir");
    fs::create_dir(&trusted).expect("mkdir trusted");
    fs::set_permissions(&open, fs::Permissions::from_mode(0o777)).expect("chmod x");
    fs::set_permissions(&sub, fs::Permissions::from_mode(0o755)).expect("chmod sub");
    write_config(
        &sub,
        "c.toml",
        &format!("redis = [\"{}\"]\n", node.url()),
        0o600,
    );
    std::os::unix::fs::symlink(&sub, trusted.join("to-sub")).expect("symlink");
    for config in [
        trusted.join("to-sub").join("c.toml"),
        trusted.join("..").join("x").join("sub").join("c.toml"),
    ] {
        let out = Test::new()
            .current_dir(dir.path())
            .env("REDLOCK_CONFIG", &config)
            .args(["-k", "job", "--", "touch", "ran"])
            .expect_code(64);
        out.assert_one_error_line();
        assert!(
            out.stderr
                .contains(&format!("chmod go-w {}", open.display())),
            "{}: {out}",
            config.display()
        );
    }
    assert!(!dir.has("ran"), "the command ran");
    assert!(node.keys().is_empty(), "a lock was taken");
}

/// A node URL the file gives that no run could use is refused with the
/// file and line, as every other value is: `redis = 5`, a URL without a
/// scheme, a list with a number in it.
#[test]
fn a_bad_node_url_in_the_file_is_named_with_its_line() {
    let dir = tempdir();
    for (text, line, want) in [
        ("redis = 5\n", 1, "'redis': invalid Redis URL '5'"),
        (
            "ttl = \"5s\"\nredis = [\"redis://127.0.0.1:1\", \"lock2\"]\n",
            2,
            "'redis': invalid Redis URL 'lock2'",
        ),
        (
            "redis = [\"redis://127.0.0.1:1\", 5]\n",
            1,
            "'redis' takes a list of strings, not a list with an integer in it",
        ),
    ] {
        let config = write_config(dir.path(), "c.toml", text, 0o600);
        for args in [&["-k", "job", "--", "touch", "ran"][..], &["config"][..]] {
            let out = Test::new()
                .current_dir(dir.path())
                .env("REDLOCK_CONFIG", &config)
                .args(args)
                .expect_code(64);
            out.assert_one_error_line();
            let at = format!("redlock-run: {}:{line}: {want}", config.display());
            assert!(
                out.stderr.starts_with(&at),
                "{text:?} {args:?}: want {at}\n{out}"
            );
        }
    }
    assert!(!dir.has("ran"), "the command ran");
}

/// A password in a URL: a file others may read is refused with the chmod
/// that fixes it (a run, `config` and `check` alike), and the Debian
/// pattern, root:group 0640, read by a member of the group, works.
#[test]
fn a_url_password_is_refused_to_others_and_allowed_to_the_group() {
    let node = RedisNode::start_with_password(&[], "grp-PW-4411");
    let dir = tempdir();
    let url = format!("redis://:grp-PW-4411@127.0.0.1:{}", node.port());
    let config = write_config(
        dir.path(),
        "config.toml",
        &format!("redis = [\"{url}\"]\n"),
        0o644,
    );
    let shown = config.display().to_string();
    for args in [&["-k", "job", "--", "true"][..], &["config"], &["check"]] {
        let out = Test::new()
            .env("REDLOCK_CONFIG", &config)
            .args(args.iter().copied())
            .expect_code(64);
        let said = format!("{}{}", out.stdout, out.stderr);
        assert!(
            said.contains(&format!("{shown}:1: a URL with a password"))
                && said.contains(&format!("chmod o-r {shown}")),
            "{args:?}\n{out}"
        );
        assert!(!said.contains("grp-PW-4411"), "{out}");
    }
    // SAFETY: geteuid cannot fail.
    let root = unsafe { libc::geteuid() } == 0;
    let mut test = Test::new().env("REDLOCK_CONFIG", &config);
    if root {
        // Read as nobody, through the file's group.
        std::os::unix::fs::chown(&config, Some(0), Some(65534)).expect("chown");
        test = test.wrapped_in([
            "setpriv",
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
        ]);
    }
    fs::set_permissions(&config, fs::Permissions::from_mode(0o640)).expect("chmod");
    let out = test
        .clone()
        .args(["-k", "job", "--", "true"])
        .expect_code(0);
    assert!(out.stderr.is_empty(), "{out}");
    let out = test.clone().arg("config").expect_code(0);
    assert!(out.stdout.contains("redis://:***@127.0.0.1"), "{out}");
}

/// `--version` and `--help` read no configuration file: one that every run
/// refuses (not TOML, and others may write it) does not stop them.
#[test]
fn version_and_help_read_no_configuration_file() {
    let dir = tempdir();
    let config = write_config(dir.path(), "config.toml", "this is [not toml\n", 0o666);
    for args in [
        &["--version"][..],
        &["-V"],
        &["--help"],
        &["status", "--help"],
        &["help", "check"],
        &["-k", "x", "--version"],
    ] {
        let out = Test::new()
            .env("REDLOCK_CONFIG", &config)
            .args(args.iter().copied())
            .expect_code(0);
        assert!(
            out.stderr.is_empty() && !out.stdout.is_empty(),
            "{args:?}\n{out}"
        );
    }
    // A run still reads it, and refuses it.
    Test::new()
        .env("REDLOCK_CONFIG", &config)
        .args(["-k", "x", "--", "true"])
        .expect_code(64);
}
