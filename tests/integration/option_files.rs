//! The files that options name (`--password-file`, `--sentinel-password-file`,
//! `--tls-ca`, `--tls-cert`, `--tls-key`): read with a cap, so that a file
//! that never ends (`/dev/zero`) is a usage error at once in bounded memory;
//! an empty one said so; a FIFO whose writer never comes waited on only until
//! the run is told to stop; a process substitution read as before.

use std::ffi::CString;
use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

use crate::support::{Certs, RedisNode, RunOutput, Test, base, tempdir, wait_until};

/// Usage error.
const USAGE: i32 = 64;

/// The password of the nodes these tests start.
const PASSWORD: &str = "opt-file-PW-7731";

/// A python3 parent for redlock-run: runs it (killed after 10 s, so that a
/// run that reads without end cannot take the machine's memory) and then
/// prints its peak resident size, `maxrss_kb=N`, as the last line of stderr.
const PEAK_RSS: &str = "\
import resource, subprocess, sys
try:
    code = subprocess.run(sys.argv[1:], timeout=10).returncode
except subprocess.TimeoutExpired:
    code = 124
print('maxrss_kb=%d' % resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, file=sys.stderr)
sys.exit(code)";

/// A node that wants `PASSWORD`, and its URL without it.
fn password_node() -> (RedisNode, String) {
    let node = RedisNode::start_with_password(&[], PASSWORD);
    let url = format!("redis://127.0.0.1:{}", node.port());
    (node, url)
}

/// `out`'s stderr without the wrapper's last line, and the peak resident
/// size that line gives.
fn peak_rss(out: &RunOutput) -> (String, u64) {
    let (rest, last) = out
        .stderr
        .trim_end()
        .rsplit_once('\n')
        .unwrap_or(("", out.stderr.trim_end()));
    let kb = last
        .strip_prefix("maxrss_kb=")
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no maxrss_kb line\n{out}"));
    (format!("{rest}\n"), kb)
}

/// Every option that names a file, given `/dev/zero`: 64 within a second, one
/// line naming the option and the file, under 64 MB resident, nothing run,
/// no key written.
#[test]
fn an_option_file_that_never_ends_is_a_usage_error_at_once() {
    let (node, url) = password_node();
    let dir = tempdir();
    let certs = Certs::make();
    let (cert, key) = (certs.pem("client"), certs.key("client"));
    let cases: [(&str, Vec<&str>); 5] = [
        ("--password-file", vec!["--password-file", "/dev/zero"]),
        (
            "--sentinel-password-file",
            vec!["--sentinel-password-file", "/dev/zero"],
        ),
        ("--tls-ca", vec!["--tls-ca", "/dev/zero"]),
        (
            "--tls-cert",
            vec!["--tls-cert", "/dev/zero", "--tls-key", &key],
        ),
        (
            "--tls-key",
            vec!["--tls-cert", &cert, "--tls-key", "/dev/zero"],
        ),
    ];
    for (flag, args) in cases {
        let out = base(&url, "opt-zero", &dir)
            .wrapped_in(["python3", "-c", PEAK_RSS])
            .args(&args)
            .args(["-c", "touch ran"])
            .run();
        let (stderr, kb) = peak_rss(&out);
        assert_eq!(out.code, Some(USAGE), "[{flag}] want 64\n{out}");
        assert!(
            out.elapsed < Duration::from_secs(1),
            "[{flag}] took {:?}\n{out}",
            out.elapsed
        );
        assert!(kb < 64 * 1024, "[{flag}] peak resident {kb} KB\n{out}");
        assert_eq!(stderr.lines().count(), 1, "[{flag}] one line\n{out}");
        assert!(
            stderr.starts_with(&format!("redlock-run: {flag} /dev/zero is longer than ")),
            "[{flag}] the line must name the option and the file\n{out}"
        );
        assert!(!dir.has("ran"), "[{flag}] the command ran\n{out}");
    }
    assert!(node.keys().is_empty(), "keys left: {:?}", node.keys());
}

/// An empty file is said to be empty (not "wrong password" from the node).
#[test]
fn an_empty_option_file_says_it_is_empty() {
    let (node, url) = password_node();
    let dir = tempdir();
    let empty = dir.join("empty");
    fs::write(&empty, b"").expect("write");
    let newline = dir.join("newline");
    fs::write(&newline, b"\n").expect("write");
    // A password's file: its owner's (see the next test for others').
    for file in [&empty, &newline] {
        fs::set_permissions(file, fs::Permissions::from_mode(0o600)).expect("chmod");
    }
    for (flag, file) in [
        ("--password-file", &empty),
        ("--password-file", &newline),
        ("--sentinel-password-file", &empty),
        ("--tls-ca", &empty),
    ] {
        let out = base(&url, "opt-empty", &dir)
            .arg(flag)
            .arg(file)
            .args(["-c", "touch ran"])
            .expect_code(USAGE);
        out.assert_one_error_line();
        assert!(
            out.stderr
                .starts_with(&format!("redlock-run: {flag} {} is empty", file.display())),
            "[{flag}] the line must say the file is empty\n{out}"
        );
        assert!(!dir.has("ran"), "[{flag}] the command ran\n{out}");
    }
    assert!(node.keys().is_empty(), "keys left: {:?}", node.keys());
}

/// Makes a FIFO at `path`.
fn mkfifo(path: &std::path::Path) {
    let c = CString::new(path.as_os_str().as_bytes()).expect("no NUL");
    // SAFETY: a valid C string.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0, "mkfifo");
}

/// A FIFO whose writer never comes: the run waits, and SIGTERM or SIGINT
/// ends it within a second (128 + N), before any node is reached.
#[test]
fn a_run_waiting_on_a_fifo_stops_when_told() {
    let (node, url) = password_node();
    let dir = tempdir();
    let fifo = dir.join("fifo");
    mkfifo(&fifo);
    for sig in [libc::SIGTERM, libc::SIGINT] {
        let mut running = base(&url, "opt-fifo", &dir)
            .arg("--password-file")
            .arg(&fifo)
            .args(["-c", "touch ran"])
            .spawn();
        std::thread::sleep(Duration::from_millis(300));
        assert!(
            !running.has_exited(),
            "the run did not wait for the FIFO's writer\n{}",
            running.stderr_so_far()
        );
        running.signal(sig);
        let out = running
            .wait_timeout(Duration::from_secs(1))
            .unwrap_or_else(|| panic!("signal {sig}: still running a second later"));
        assert_eq!(out.code, Some(128 + sig), "signal {sig}\n{out}");
        assert!(!dir.has("ran"), "the command ran\n{out}");
    }
    assert!(node.keys().is_empty(), "keys left: {:?}", node.keys());
}

/// A FIFO whose writer comes late, and a process substitution: the password
/// is read from each and the run takes the lock with it.
#[test]
fn a_password_from_a_fifo_or_a_process_substitution_works() {
    let (node, url) = password_node();
    let dir = tempdir();
    let fifo = dir.join("fifo");
    mkfifo(&fifo);
    let writer = {
        let fifo = fifo.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(300));
            fs::write(&fifo, format!("{PASSWORD}\n")).expect("write to the FIFO");
        })
    };
    let out = base(&url, "opt-fifo-late", &dir)
        .arg("--password-file")
        .arg(&fifo)
        .args(["-c", "touch ran-fifo"])
        .expect_code(0);
    writer.join().expect("writer");
    assert!(dir.has("ran-fifo"), "{out}");

    // bash hands redlock-run /dev/fd/N, a pipe whose writer (printf) may be
    // gone by the time it is opened.
    let out = Test::new()
        .current_dir(dir.path())
        .env("PW", PASSWORD)
        .wrapped_in([
            "bash",
            "-c",
            r#"exec "$0" --password-file <(printf %s "$PW") "$@""#,
        ])
        .args(["-r", &url, "-k", "opt-subst", "-c", "touch ran-subst"])
        .expect_code(0);
    assert!(dir.has("ran-subst"), "{out}");
    assert!(
        wait_until(Duration::from_secs(2), || node.keys().is_empty()),
        "keys left: {:?}",
        node.keys()
    );
}

/// The subcommands hold nothing and answer within their node timeout: a
/// `--password-file` or `--tls-ca` that is a FIFO nobody writes to ends
/// `check`, `config` and `status` then, naming the option (check as one of
/// its findings, the others in one line).
#[test]
fn a_fifo_without_a_writer_ends_a_subcommand_within_its_node_timeout() {
    let (node, url) = password_node();
    let dir = tempdir();
    let fifo = dir.join("fifo");
    mkfifo(&fifo);
    let timeout = Duration::from_millis(300);
    for sub in ["check", "config", "status"] {
        for flag in ["--password-file", "--tls-ca"] {
            let out = Test::new()
                .args([
                    sub,
                    "-r",
                    &url,
                    "-k",
                    "opt-fifo-sub",
                    "--node-timeout",
                    "300ms",
                ])
                .arg(flag)
                .arg(&fifo)
                .timeout(Duration::from_secs(5))
                .expect_code(USAGE);
            // check says it as a finding about the settings, the others
            // in their one error line.
            let said = if sub == "check" {
                &out.stdout
            } else {
                out.assert_one_error_line();
                &out.stderr
            };
            assert!(
                said.contains(&format!("{flag} {}", fifo.display()))
                    && said.contains("within 300ms"),
                "[{sub} {flag}] the line must name the option, the file and the wait\n{out}"
            );
            // The node timeout, and the start of a process on a busy machine.
            assert!(
                out.elapsed >= timeout && out.elapsed < timeout + Duration::from_millis(700),
                "[{sub} {flag}] took {:?}\n{out}",
                out.elapsed
            );
        }
    }
    assert!(node.keys().is_empty(), "keys left: {:?}", node.keys());
}

/// One rule for a password on disk: a password file that others may read
/// is refused (64, nothing run, no key) with the chmod that fixes it, by a
/// run, `config` and `check` alike; its group may read it.
#[test]
fn a_password_file_others_may_read_is_refused_and_group_read_is_fine() {
    let (node, url) = password_node();
    let dir = tempdir();
    let file = dir.join("password");
    fs::write(&file, format!("{PASSWORD}\n")).expect("write");
    for flag in ["--password-file", "--sentinel-password-file"] {
        for mode in [0o666, 0o644, 0o604] {
            fs::set_permissions(&file, fs::Permissions::from_mode(mode)).expect("chmod");
            let out = base(&url, "opt-mode", &dir)
                .arg(flag)
                .arg(&file)
                .args(["-c", "touch ran"])
                .expect_code(USAGE);
            out.assert_one_error_line();
            let want = format!(
                "redlock-run: {flag} {} may be read by others (mode {mode:04o}): chmod o-r {}",
                file.display(),
                file.display()
            );
            assert!(out.stderr.starts_with(&want), "[{flag} {mode:o}]\n{out}");
            assert!(!out.stderr.contains(PASSWORD), "{out}");
            assert!(!dir.has("ran"), "[{flag} {mode:o}] the command ran\n{out}");
            let out = Test::new()
                .args(["config", "-r", &url, flag])
                .arg(&file)
                .expect_code(USAGE);
            assert!(out.stderr.contains("chmod o-r"), "[{flag} {mode:o}]\n{out}");
            let out = Test::new()
                .args(["check", "-r", &url, flag])
                .arg(&file)
                .expect_code(USAGE);
            assert!(
                out.stdout.starts_with("settings\n  unfit") && out.stdout.contains("chmod o-r"),
                "[{flag} {mode:o}]\n{out}"
            );
        }
    }
    assert!(node.keys().is_empty(), "keys left: {:?}", node.keys());
    for mode in [0o600, 0o640, 0o660] {
        fs::set_permissions(&file, fs::Permissions::from_mode(mode)).expect("chmod");
        let out = base(&url, "opt-mode", &dir)
            .arg("--password-file")
            .arg(&file)
            .args(["-c", "touch ran"])
            .expect_code(0);
        assert!(dir.has("ran"), "[{mode:o}] {out}");
        fs::remove_file(dir.join("ran")).expect("rm");
    }
}
