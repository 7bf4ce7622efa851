//! `redlock-run` processes whose stderr lines are timestamped as they
//! arrive, and what those lines say about the lock's validity deadline.

use std::io::{BufRead, BufReader};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use super::cmd::{BIN, child_rules};
use super::{send_signal, wait_until};

/// Puts the calling thread in real time (SCHED_FIFO, below the stall
/// watchers) with `on`, or back to the normal policy, where that is allowed
/// (root, as in CI; elsewhere it does nothing and says false). An observer
/// takes it only for the moments it dates (a tree's end near its deadline):
/// there a thread of the normal policy on a busy machine stood still for
/// hundreds of milliseconds and saw a timely kill late; observers in real
/// time all the time took the CPUs from what they watched and froze for a
/// second at a time themselves. What it starts runs under the normal policy
/// (SCHED_RESET_ON_FORK): redlock-run is measured as users run it.
pub fn timely(on: bool) -> bool {
    let (policy, priority) = if on {
        (libc::SCHED_FIFO | libc::SCHED_RESET_ON_FORK, 10)
    } else {
        (libc::SCHED_OTHER, 0)
    };
    let param = libc::sched_param {
        sched_priority: priority,
    };
    // SAFETY: this thread's policy, a valid parameter block.
    unsafe { libc::sched_setscheduler(0, policy, &param) == 0 }
}

/// A `redlock-run` whose stderr lines are timestamped as they arrive.
pub struct Proc {
    pub child: Child,
    lines: Arc<Mutex<Vec<(Instant, String)>>>,
    /// The stderr reader: once it has finished (end of file), every line
    /// written is in `lines`.
    reader: thread::JoinHandle<()>,
    pub spawned: Instant,
}

impl Proc {
    pub fn spawn(dir: &Path, args: &[String]) -> Proc {
        Proc::spawn_with(dir, args, &[])
    }

    pub fn spawn_with(dir: &Path, args: &[String], env: &[(String, String)]) -> Proc {
        let mut command = Command::new(BIN);
        command
            .args(args)
            .current_dir(dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        child_rules(&mut command, true);
        super::old_kernel::apply(&mut command);
        command.envs(env.iter().map(|(k, v)| (k, v)));
        // SAFETY: prctl only, between fork and exec.
        unsafe {
            command.pre_exec(|| {
                // Dies with the spawning thread if the harness dies.
                libc::prctl(
                    libc::PR_SET_PDEATHSIG,
                    libc::SIGKILL as libc::c_ulong,
                    0,
                    0,
                    0,
                );
                Ok(())
            });
        }
        let spawned = Instant::now();
        let mut child = command
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {BIN}: {e}"));
        let lines = Arc::new(Mutex::new(Vec::new()));
        let (out, sink) = (child.stderr.take().expect("piped"), Arc::clone(&lines));
        let reader = thread::spawn(move || {
            for line in BufReader::new(out).lines() {
                let Ok(line) = line else { break };
                let now = Instant::now();
                sink.lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .push((now, line));
            }
        });
        Proc {
            child,
            lines,
            reader,
            spawned,
        }
    }

    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    pub fn stderr(&self) -> Vec<(Instant, String)> {
        self.lines.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Waits (up to `limit`) until every line redlock-run wrote has been
    /// read: on a busy machine the last ones (an extension, the stop) can
    /// arrive well after its exit, and a timeline without them is wrong.
    /// True when end of file was reached.
    pub fn drain(&self, limit: Duration) -> bool {
        wait_until(limit, || self.reader.is_finished())
    }

    pub fn stderr_text(&self) -> String {
        self.stderr()
            .into_iter()
            .map(|(t, l)| format!("+{:?} {l}\n", t.duration_since(self.spawned)))
            .collect()
    }

    /// Reaped exit code (128+N for a signal), or None while running.
    pub fn try_code(&mut self) -> Option<i32> {
        let status = self.child.try_wait().expect("try_wait")?;
        Some(
            status
                .code()
                .unwrap_or_else(|| 128 + status.signal().unwrap_or(0)),
        )
    }

    pub fn wait_code(&mut self, limit: Duration) -> Option<i32> {
        let mut code = None;
        wait_until(limit, || {
            code = self.try_code();
            code.is_some()
        });
        code
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            send_signal(self.pid(), libc::SIGCONT);
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Parses Rust's `{:?}` rendering of a Duration ("3.2ms", "850.0µs", "2s").
pub fn parse_debug_duration(s: &str) -> Option<Duration> {
    let s = s.trim();
    let (num, unit) = ["ns", "µs", "ms", "s"]
        .iter()
        .find_map(|u| s.strip_suffix(u).map(|n| (n, *u)))?;
    let v: f64 = num.parse().ok()?;
    let secs = match unit {
        "ns" => v / 1e9,
        "µs" => v / 1e6,
        "ms" => v / 1e3,
        _ => v,
    };
    Some(Duration::from_secs_f64(secs))
}

/// The clock the tests date events by: CLOCK_REALTIME in nanoseconds, the
/// clock `date +%s%N` reads in a critical section. Nothing in the suite steps
/// it, so on one machine it orders events as well as CLOCK_MONOTONIC does.
pub fn realtime_ns() -> i128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i128)
}

/// An `Instant` (a stderr line's arrival, a poll) on the [`realtime_ns`] scale.
pub fn instant_ns(t: Instant) -> i128 {
    let now = Instant::now();
    let ns = realtime_ns();
    if t <= now {
        ns - now.duration_since(t).as_nanos() as i128
    } else {
        ns + t.duration_since(now).as_nanos() as i128
    }
}

/// How long before `deadline` the process tree was gone, in ms (negative:
/// after it). Both instants on one scale.
pub fn margin_ms(deadline: Instant, gone: Instant) -> f64 {
    if deadline >= gone {
        deadline.duration_since(gone).as_secs_f64() * 1e3
    } else {
        -gone.duration_since(deadline).as_secs_f64() * 1e3
    }
}

/// [`margin_ms`] on the [`realtime_ns`] scale.
pub fn margin_ns_ms(deadline_ns: i128, gone_ns: i128) -> f64 {
    (deadline_ns - gone_ns) as f64 / 1e6
}

pub fn drift(ttl: Duration) -> Duration {
    ttl / 100 + Duration::from_millis(2)
}

/// From `-vv` output: how long the acquire round took, and the latest
/// validity deadline (round start + TTL - drift, for the acquire and each
/// extension). A round's start is the line's arrival minus the elapsed time
/// it reports; the line is written right after the round, so this errs late
/// by the logging latency (well under a millisecond on an idle machine).
pub fn lock_timeline(
    lines: &[(Instant, String)],
    ttl: Duration,
) -> (Option<Duration>, Option<Instant>) {
    let mut acquire = None;
    let mut deadline: Option<Instant> = None;
    for (t, line) in lines {
        // "acquired: 2 of 3 nodes granted within 1.2ms (quorum 2); valid for 2s"
        let took = if let Some(rest) = line.strip_prefix("redlock-run: acquired: ") {
            let d = rest
                .split_once(" within ")
                .and_then(|(_, r)| r.split_once(' '))
                .and_then(|(d, _)| parse_debug_duration(d));
            acquire = acquire.or(d);
            d
        } else {
            line.strip_prefix("redlock-run: extended in ")
                .and_then(parse_debug_duration)
        };
        if let Some(took) = took
            && let Some(start) = t.checked_sub(took)
        {
            let d = start + ttl - drift(ttl);
            deadline = Some(deadline.map_or(d, |x| x.max(d)));
        }
    }
    (acquire, deadline)
}

/// A signal redlock-run (or its guard) sent to the command's tree, as its
/// `-vv` line says: "sent SIGKILL to 3 processes, 49.8 ms before the
/// validity deadline" (or "the guard sent ...", "... after the ...").
#[derive(Clone, Debug, PartialEq)]
pub struct Sent {
    pub by_guard: bool,
    pub signal: String,
    pub processes: usize,
    /// How long before the deadline, by the program's own clock (negative:
    /// after it).
    pub lead_ms: f64,
    /// When the line arrived: the signal had gone out before.
    pub arrived: Instant,
}

impl Sent {
    /// A signal that stops the tree (not one passed on, not SIGCONT).
    pub fn stops(&self) -> bool {
        self.signal == "SIGTERM" || self.signal == "SIGKILL"
    }
}

impl std::fmt::Display for Sent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}{} to {}, {:+.1} ms",
            if self.by_guard { "the guard's " } else { "" },
            self.signal,
            self.processes,
            self.lead_ms
        )
    }
}

/// Every signal line in `lines`.
pub fn sent(lines: &[(Instant, String)]) -> Vec<Sent> {
    lines
        .iter()
        .filter_map(|(t, l)| parse_sent(l.strip_prefix("redlock-run: ")?, *t))
        .collect()
}

fn parse_sent(line: &str, arrived: Instant) -> Option<Sent> {
    let (by_guard, rest) = match line.strip_prefix("the guard sent ") {
        Some(rest) => (true, rest),
        None => (false, line.strip_prefix("sent ")?),
    };
    let (signal, rest) = rest.split_once(' ')?;
    let rest = rest.strip_prefix("(then SIGCONT) ").unwrap_or(rest);
    let (count, rest) = rest.strip_prefix("to ")?.split_once(' ')?;
    let (_, rest) = rest.split_once(", ")?;
    let (ms, rest) = rest.split_once(" ms ")?;
    let ms: f64 = ms.parse().ok()?;
    let lead_ms = match rest {
        "before the validity deadline" => ms,
        "after the validity deadline" => -ms,
        _ => return None,
    };
    Some(Sent {
        by_guard,
        signal: signal.to_string(),
        processes: count.parse().ok()?,
        lead_ms,
        arrived,
    })
}

/// The stops (SIGTERM, SIGKILL) in `sent` that did not go out before the
/// validity deadline: the program's own decision, judged with no excuse.
pub fn late_stops(sent: &[Sent]) -> Vec<String> {
    sent.iter()
        .filter(|s| s.stops() && s.lead_ms <= 0.0)
        .map(|s| format!("{s}"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signal_lines_read_back() {
        let now = Instant::now();
        let lines = vec![
            (now, "redlock-run: sent SIGTERM (then SIGCONT) to 2 processes, 216.0 ms before the validity deadline".to_string()),
            (now, "redlock-run: the guard sent SIGKILL to 1 process, 0.3 ms after the validity deadline".to_string()),
            (now, "redlock-run: sent SIGKILL somewhere".to_string()),
        ];
        let got = sent(&lines);
        assert_eq!(got.len(), 2, "{got:?}");
        assert_eq!(
            (got[0].signal.as_str(), got[0].processes, got[0].lead_ms),
            ("SIGTERM", 2, 216.0)
        );
        assert!(got[1].by_guard && got[1].lead_ms == -0.3);
        assert_eq!(
            late_stops(&got),
            vec!["the guard's SIGKILL to 1, -0.3 ms".to_string()]
        );
    }
}
