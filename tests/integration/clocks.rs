//! A host clock outside the years RFC 3339 writes (before 1970, past 9999):
//! every time redlock-run writes (the JSON log, `--report`, the run's record
//! in the history) is clamped into them, so the run ends as any run does:
//! the command's status, the lock released, `status` and `history` readable.
//! The clock is moved by an `LD_PRELOAD` shim (`support::clock_shim`) over
//! CLOCK_REALTIME only: deadlines run on CLOCK_BOOTTIME and are untouched.

use crate::support::{RedisNode, Test, base, clock_shim, python, tempdir};

/// Seconds added to the wall clock: past the year 9999 (about 10200), and
/// before 1970 (about 1906).
const SKEWS: [(&str, i64); 2] = [
    ("past 9999", 260_000_000_000),
    ("before 1970", -2_000_000_000),
];

#[test]
fn a_clock_outside_four_digit_years_ends_the_run_as_usual() {
    let node = RedisNode::start();
    let dir = tempdir();
    let shim = clock_shim(&dir);
    let report = dir.join("report.json");
    for (what, skew) in SKEWS {
        let skewed = |test: Test| {
            test.env("LD_PRELOAD", &shim)
                .env("SKEW_SECONDS", skew.to_string())
        };
        let out = skewed(base(&node.url(), "odd-clock", &dir))
            .args(["-v", "--log-format", "json", "--fence", "--report"])
            .arg(&report)
            .args(["-c", "touch ran; exit 3"])
            .run();
        assert_eq!(out.code, Some(3), "[{what}] the command's status\n{out}");
        assert!(!out.stderr.contains("panicked"), "[{what}]\n{out}");
        assert!(dir.has("ran"), "[{what}] the command did not run\n{out}");
        assert!(
            node.keys().iter().all(|k| k.ends_with(b":fence")),
            "[{what}] keys left: {:?}\n{out}",
            node.keys()
        );
        let started = python(
            "import json, sys; print(json.load(sys.stdin)['started_at'])",
            &std::fs::read_to_string(&report).expect("report written"),
        );
        let want = if skew > 0 {
            "9999-12-31T23:59:59.999Z"
        } else {
            "1970-01-01T00:00:00.000Z"
        };
        assert_eq!(started.trim(), want, "[{what}] --report's started_at");
        for admin in ["status", "history"] {
            let out = skewed(Test::new())
                .args([admin, "-r", &node.url(), "-k", "odd-clock"])
                .run();
            assert_eq!(out.code, Some(0), "[{what}] {admin}\n{out}");
            assert!(out.stdout.contains(want), "[{what}] {admin}\n{out}");
        }
        std::fs::remove_file(dir.join("ran")).expect("marker");
    }
}
