//! One name, one lock: a plain run and `--limit N` runs on the same name
//! exclude each other, and runs that ask for different `--limit` values
//! refuse each other (64), so that no more run at once than the N of those
//! running.

use std::fs;
use std::time::Duration;

use crate::support::{Cluster, Running, START, TempDir, WAIT_FOR_GO, base, tempdir, wait_until};

/// Starts a holder of `name` with `args` that holds until `go` appears,
/// marking `marker` when it runs.
fn holder(urls: &str, name: &str, dir: &TempDir, args: &[&str], marker: &str) -> Running {
    let running = base(urls, name, dir)
        .args(args)
        .args(["-c", &format!("touch {marker}; {WAIT_FOR_GO}")])
        .spawn();
    assert!(
        wait_until(START, || dir.has(marker)),
        "{marker} did not run\n{}",
        running.stderr_so_far()
    );
    running
}

#[test]
fn a_plain_holder_and_limit_runs_exclude_each_other() {
    let cluster = Cluster::new(3);
    let urls = cluster.urls();
    let dir = tempdir();
    let plain = holder(&urls, "one", &dir, &[], "plain");
    for n in ["1", "2"] {
        let out = base(&urls, "one", &dir)
            .args(["--limit", n, "-c", "touch limited"])
            .run();
        out.assert_code(75);
        assert!(
            out.stderr
                .contains("held elsewhere, by a run without --limit"),
            "{out}"
        );
    }
    assert!(
        !dir.has("limited"),
        "a --limit run ran beside a plain holder"
    );
    fs::write(dir.join("go"), b"").expect("go");
    plain.wait().assert_code(0);
    let _ = fs::remove_file(dir.join("go"));

    // The reverse: a --limit 1 holder keeps plain runs away, and so does
    // one of two --limit 2 holders.
    for n in ["1", "2"] {
        let slot = holder(&urls, "one", &dir, &["--limit", n], &format!("slot{n}"));
        let out = base(&urls, "one", &dir)
            .args(["-c", "touch plain-ran"])
            .run();
        out.assert_code(75);
        assert!(
            out.stderr
                .contains(&format!("held elsewhere, by runs with --limit {n}")),
            "{out}"
        );
        assert!(!dir.has("plain-ran"), "a plain run ran beside --limit {n}");
        fs::write(dir.join("go"), b"").expect("go");
        slot.wait().assert_code(0);
        let _ = fs::remove_file(dir.join("go"));
    }
    // Once they are gone, each kind runs.
    base(&urls, "one", &dir).args(["-c", "true"]).expect_code(0);
    base(&urls, "one", &dir)
        .args(["--limit", "3", "-c", "true"])
        .expect_code(0);
    for (i, node) in cluster.iter().enumerate() {
        let left: Vec<Vec<u8>> = node
            .keys()
            .into_iter()
            .filter(|k| !crate::support::is_history_key(k))
            .collect();
        assert!(left.is_empty(), "node {i}: keys left: {left:?}");
    }
}

#[test]
fn runs_with_different_limits_refuse_each_other() {
    let cluster = Cluster::new(3);
    let urls = cluster.urls();
    let dir = tempdir();
    let two: Vec<Running> = (0..2)
        .map(|i| holder(&urls, "sem", &dir, &["--limit", "2"], &format!("two{i}")))
        .collect();
    for extra in [&[][..], &["--wait", "30s"]] {
        let out = base(&urls, "sem", &dir)
            .args(["--limit", "3"])
            .args(extra)
            .args(["-c", "touch three"])
            .run();
        out.assert_code(64).assert_one_error_line();
        assert!(
            out.stderr.contains("--limit 2") && out.stderr.contains("--limit 3"),
            "{out}"
        );
        assert!(
            out.elapsed < Duration::from_secs(5),
            "a conflict is no reason to wait\n{out}"
        );
    }
    assert!(!dir.has("three"), "a third run beside --limit 2 holders");
    fs::write(dir.join("go"), b"").expect("go");
    for h in two {
        h.wait().assert_code(0);
    }
    let _ = fs::remove_file(dir.join("go"));
    // The reverse: three --limit 3 holders, and a --limit 2 run.
    let three: Vec<Running> = (0..3)
        .map(|i| holder(&urls, "sem", &dir, &["--limit", "3"], &format!("three{i}")))
        .collect();
    let out = base(&urls, "sem", &dir)
        .args(["--limit", "2", "-c", "touch two-ran"])
        .run();
    out.assert_code(64).assert_one_error_line();
    assert!(!dir.has("two-ran"));
    fs::write(dir.join("go"), b"").expect("go");
    for h in three {
        h.wait().assert_code(0);
    }
}

/// The section every contender runs: it records its own N among those
/// inside, and an overlap whenever more are inside than the smallest N of
/// them allows, then stays a while.
const SECTION: &str = r#"
mkdir -p inside
echo "$1" > "inside/$$"
check() {
    count=$(ls inside | wc -l)
    least=$(cat inside/* 2>/dev/null | sort -n | head -n 1)
    if [ -n "$least" ] && [ "$count" -gt "$least" ]; then
        echo "$count inside, allowed $least" >> overlap
    fi
}
check
sleep 0.15
check
rm -f "inside/$$"
echo "$1" >> ran
"#;

/// Plain runs (N = 1), `--limit 1`, `--limit 2` and `--limit 3` waiters on
/// one name, all at once, on 3 nodes: never more inside than the N of those
/// inside allows; a run turned away for another --limit exits 64 and never
/// starts.
#[test]
fn mixed_limits_never_let_more_run_than_allowed() {
    let cluster = Cluster::new(3);
    let urls = cluster.urls();
    let dir = tempdir();
    fs::write(dir.join("section.sh"), SECTION).expect("section");
    let kinds: &[(&[&str], &str)] = &[
        (&[], "1"),
        (&["--limit", "1"], "1"),
        (&["--limit", "2"], "2"),
        (&["--limit", "3"], "3"),
    ];
    let mut runs = Vec::new();
    for round in 0..3 {
        for (args, n) in kinds {
            for _ in 0..2 {
                runs.push((
                    *n,
                    base(&urls, "mixed", &dir)
                        .args(*args)
                        .args(["--wait", "60s", "--", "sh", "section.sh", n])
                        .spawn(),
                ));
            }
        }
        std::thread::sleep(Duration::from_millis(100 * round));
    }
    let mut ran = 0;
    let mut refused = 0;
    for (n, r) in runs {
        let out = r.wait();
        match out.code {
            Some(0) => ran += 1,
            Some(64) => {
                assert!(n != "1" || out.stderr.contains("--limit"), "{out}");
                refused += 1;
            }
            _ => panic!("unexpected end\n{out}"),
        }
    }
    let overlaps = fs::read_to_string(dir.join("overlap")).unwrap_or_default();
    assert!(overlaps.is_empty(), "more inside than allowed:\n{overlaps}");
    let inside = fs::read_to_string(dir.join("ran")).unwrap_or_default();
    assert_eq!(
        inside.lines().count(),
        ran,
        "runs that exited 0 = sections run"
    );
    eprintln!("mixed limits: {ran} ran, {refused} refused for another --limit");
    assert!(ran > 0);
}
