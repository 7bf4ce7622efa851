//! Stalls of the machine itself, seen from inside it.
//!
//! The tests that date a kill against the validity deadline hold redlock-run
//! to a few milliseconds. The machine they run on is a virtual one: its host
//! can stop a virtual CPU (another guest's turn, a fault on memory the host
//! has not backed yet) for a hundred milliseconds or more, and nothing on
//! that CPU runs meanwhile, redlock-run and its guard included. The only
//! promise redlock-run can make then is the one its documentation makes
//! ("only a paused host can" keep the command past the deadline).
//!
//! So that such a run is told apart from a late kill, a watcher puts one
//! thread on each CPU, pinned there at a real-time priority above the
//! observers' (see `timely`), waking every millisecond: on a CPU that runs
//! at all, nothing of the suite's can be served before it. A wake-up much
//! later than asked for is a time that CPU ran nothing of the suite's (the
//! host, or the kernel without a preemption point). A late kill with no
//! such stall around it is redlock-run's fault, and the tests fail on it;
//! one that a stall explains is reported, and not counted as a measurement.
//! Without the privilege to run in real time (not root) the watcher sees
//! nothing and every run is held to its deadline.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use super::timed::realtime_ns;

/// A wake-up this much later than asked for is recorded as a stall.
const NOTED: Duration = Duration::from_millis(5);

/// What a kill, a death and a poll may take on a CPU that runs: a late run
/// is explained by a stall only if the stall covers all but this much of
/// how late it was.
pub const SLACK: Duration = Duration::from_millis(10);

/// One stall: a CPU (or, `None`, an observer that found itself standing
/// still: see `safety::run_one`), and the realtime nanoseconds between two
/// wake-ups of its watcher.
#[derive(Clone, Copy, Debug)]
pub struct Stall {
    pub cpu: Option<usize>,
    pub from_ns: i128,
    pub to_ns: i128,
}

impl Stall {
    pub fn length(&self) -> Duration {
        Duration::from_nanos(u64::try_from(self.to_ns - self.from_ns).unwrap_or(0))
    }
}

impl std::fmt::Display for Stall {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.cpu {
            Some(cpu) => write!(f, "cpu {cpu} stalled {:.1?}", self.length()),
            None => write!(f, "the observer stood still {:.1?}", self.length()),
        }
    }
}

pub struct Stalls {
    stop: Arc<AtomicBool>,
    seen: Arc<Mutex<Vec<Stall>>>,
    threads: Vec<thread::JoinHandle<()>>,
    /// Whether every watcher runs in real time, pinned to its CPU.
    pub watching: bool,
}

impl Stalls {
    /// Starts one watcher per CPU this process may run on.
    pub fn watch() -> Stalls {
        let stop = Arc::new(AtomicBool::new(false));
        let seen = Arc::new(Mutex::new(Vec::new()));
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let mut threads = Vec::new();
        for cpu in cpus() {
            let (stop, seen, ready) = (stop.clone(), seen.clone(), ready_tx.clone());
            threads.push(thread::spawn(move || {
                let ok = pin(cpu) && above_observers();
                let _ = ready.send(ok);
                drop(ready);
                if !ok {
                    return;
                }
                let mut last = realtime_ns();
                while !stop.load(Ordering::Relaxed) {
                    thread::sleep(Duration::from_millis(1));
                    let now = realtime_ns();
                    if now - last > (Duration::from_millis(1) + NOTED).as_nanos() as i128 {
                        let mut seen = seen.lock().unwrap_or_else(|p| p.into_inner());
                        seen.push(Stall {
                            cpu: Some(cpu),
                            from_ns: last,
                            to_ns: now,
                        });
                    }
                    last = now;
                }
            }));
        }
        drop(ready_tx);
        // Every watcher answers once; all must be in real time.
        let answers: Vec<bool> = ready_rx.iter().collect();
        let watching = !threads.is_empty() && answers.iter().all(|&ok| ok);
        Stalls {
            stop,
            seen,
            threads,
            watching,
        }
    }

    /// Every stall seen so far, the longest first.
    pub fn seen(&self) -> Vec<Stall> {
        let mut all = self.seen.lock().unwrap_or_else(|p| p.into_inner()).clone();
        all.sort_by_key(|s| std::cmp::Reverse(s.to_ns - s.from_ns));
        all
    }

    /// The longest stall of any CPU that overlaps `from_ns..to_ns`.
    pub fn longest_within(&self, from_ns: i128, to_ns: i128) -> Option<Stall> {
        let seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        seen.iter()
            .filter(|s| s.to_ns > from_ns && s.from_ns < to_ns)
            .max_by_key(|s| s.to_ns - s.from_ns)
            .copied()
    }

    /// The stall that explains a tree seen gone at `gone_ns` although its
    /// kill was due at `kill_at_ns`: see [`covering`].
    pub fn excuse(&self, kill_at_ns: i128, gone_ns: i128) -> Option<Stall> {
        covering(&self.seen(), kill_at_ns, gone_ns)
    }
}

/// Of `stalls`, one that overlaps `from_ns..to_ns` and is long enough to
/// account for all of that span but [`SLACK`]: a kill due at `from_ns` and
/// seen done at `to_ns`, or a death the harness saw only at `to_ns` after
/// seeing the process alive at `from_ns`, was late (or unobserved) because
/// the machine did not run.
pub fn covering(stalls: &[Stall], from_ns: i128, to_ns: i128) -> Option<Stall> {
    stalls
        .iter()
        .filter(|s| s.to_ns > from_ns && s.from_ns < to_ns)
        .find(|s| s.to_ns - s.from_ns + SLACK.as_nanos() as i128 >= to_ns - from_ns)
        .copied()
}

impl Drop for Stalls {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// The CPUs this process may run on.
fn cpus() -> Vec<usize> {
    // SAFETY: a zeroed cpu_set_t is an empty set; sched_getaffinity fills it.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: this process's mask into a set of the size passed.
    let rc =
        unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) };
    if rc != 0 {
        return Vec::new();
    }
    (0..libc::CPU_SETSIZE as usize)
        // SAFETY: an index below CPU_SETSIZE into a valid set.
        .filter(|&cpu| unsafe { libc::CPU_ISSET(cpu, &set) })
        .collect()
}

/// Puts the calling thread in real time (SCHED_FIFO) above the observers'
/// priority (10, `timely`): an observer busy on a CPU is not a stall.
fn above_observers() -> bool {
    let param = libc::sched_param { sched_priority: 20 };
    // SAFETY: this thread's policy, a valid parameter block.
    unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) == 0 }
}

/// Pins the calling thread to `cpu`.
fn pin(cpu: usize) -> bool {
    // SAFETY: as in `cpus`.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: an index below CPU_SETSIZE into a valid set.
    unsafe { libc::CPU_SET(cpu, &mut set) };
    // SAFETY: this thread's mask from a valid set of the size passed.
    unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) == 0 }
}
