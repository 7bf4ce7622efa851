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
//! A stall never excuses the program's own decision: the tests judge each
//! stop by the time redlock-run (or its guard) says its signal went out,
//! against the validity deadline, with no excuse at all (see
//! `timed::late_stops`). What a stall may excuse is the rest: the time
//! from that signal to the moment the harness saw the tree's last process
//! gone, which is the kernel's and the harness's, not redlock-run's.
//!
//! So that such a run is told apart from a tree that outlived its kill, a
//! watcher puts one thread on each CPU, pinned there at a real-time
//! priority, waking every 2 ms:
//! on a CPU that runs at all, nothing of the suite's can be served before
//! it. A wake-up much later than asked for is a time that CPU ran nothing of
//! the suite's (the host, or the kernel without a preemption point). Only a
//! stall of a CPU where a process of the tree last ran (or of every CPU at
//! once) excuses, and only if it covers all of the interval between the
//! signal and the tree seen gone but [`SLACK`]. Without the privilege to
//! run in real time (not root) the watcher sees nothing and every run is
//! held to its deadline.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use super::timed::realtime_ns;

/// How often each watcher wakes: a stall is dated to within this (and the
/// interval it is given includes the sleep before it).
const WAKE: Duration = Duration::from_millis(2);

/// A wake-up this much later than asked for is recorded as a stall.
const NOTED: Duration = Duration::from_millis(5);

/// How much of an interval a stall that excuses it may leave uncovered.
/// Smaller than the smallest defect the negative controls plant: a kill 1 ms
/// after the deadline, and a zero kill guard, which made a tree's end late
/// by 0.5 ms at the least when that end was what the tests judged.
pub const SLACK: Duration = Duration::from_micros(400);

/// One stall: a CPU (or, `None`, an observer that found itself standing
/// still, which excuses nothing: see `safety::one_run`), and the realtime
/// nanoseconds between two wake-ups of its watcher.
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
            None => write!(f, "every cpu stalled {:.1?}", self.length()),
        }
    }
}

pub struct Stalls {
    stop: Arc<AtomicBool>,
    seen: Arc<Mutex<Vec<Stall>>>,
    threads: Vec<thread::JoinHandle<()>>,
    /// The CPUs watched.
    cpus: Vec<usize>,
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
        let cpus = cpus();
        for &cpu in &cpus {
            let (stop, seen, ready) = (stop.clone(), seen.clone(), ready_tx.clone());
            threads.push(thread::spawn(move || {
                let ok = pin(cpu) && real_time();
                let _ = ready.send(ok);
                drop(ready);
                if !ok {
                    return;
                }
                let mut last = realtime_ns();
                while !stop.load(Ordering::Relaxed) {
                    thread::sleep(WAKE);
                    let now = realtime_ns();
                    if now - last > (WAKE + NOTED).as_nanos() as i128 {
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
            cpus,
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

    /// The stall that explains why the harness saw a tree gone only at
    /// `gone_ns` (or last saw it alive at `from_ns`, for an observation
    /// window) after its signal went out at `from_ns`: one of a CPU in
    /// `cpus` (where the tree's processes last ran), or of every CPU at
    /// once, that covers all of `from_ns..gone_ns` but [`SLACK`].
    pub fn excuse(&self, from_ns: i128, gone_ns: i128, cpus: &[usize]) -> Option<Stall> {
        self.record().excuse(from_ns, gone_ns, cpus)
    }

    /// What the watchers saw so far, kept after they stop.
    pub fn record(&self) -> Seen {
        Seen {
            stalls: self.seen(),
            cpus: self.cpus.clone(),
        }
    }
}

/// The stalls seen, and the CPUs watched.
#[derive(Clone, Debug, Default)]
pub struct Seen {
    pub stalls: Vec<Stall>,
    pub cpus: Vec<usize>,
}

impl Seen {
    /// See [`Stalls::excuse`].
    pub fn excuse(&self, from_ns: i128, gone_ns: i128, cpus: &[usize]) -> Option<Stall> {
        let seen = &self.stalls;
        let on = |cpu: usize| -> Vec<Stall> {
            seen.iter()
                .filter(|s| s.cpu == Some(cpu))
                .copied()
                .collect()
        };
        let mine: Vec<Stall> = cpus.iter().flat_map(|&c| on(c)).collect();
        if let Some(s) = covering(&mine, from_ns, gone_ns) {
            return Some(s);
        }
        // Every CPU at once: where each has a stall, their common part.
        let all = self.cpus.iter().map(|&c| on(c));
        let common = all.fold(None::<Vec<Stall>>, |acc, stalls| {
            Some(match acc {
                None => stalls,
                Some(acc) => acc
                    .iter()
                    .flat_map(|a| stalls.iter().filter_map(move |b| a.common(b)))
                    .collect(),
            })
        });
        covering(&common.unwrap_or_default(), from_ns, gone_ns)
    }
}

impl Stall {
    /// The part of two stalls that overlaps, as a stall of every CPU.
    fn common(&self, other: &Stall) -> Option<Stall> {
        let (from_ns, to_ns) = (self.from_ns.max(other.from_ns), self.to_ns.min(other.to_ns));
        (from_ns < to_ns).then_some(Stall {
            cpu: None,
            from_ns,
            to_ns,
        })
    }
}

/// Of `stalls`, one whose overlap with `from_ns..to_ns` is all of that span
/// but [`SLACK`].
pub fn covering(stalls: &[Stall], from_ns: i128, to_ns: i128) -> Option<Stall> {
    let slack = SLACK.as_nanos() as i128;
    stalls
        .iter()
        .find(|s| s.to_ns.min(to_ns) - s.from_ns.max(from_ns) + slack >= to_ns - from_ns)
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

/// Puts the calling thread in real time (SCHED_FIFO): on a CPU that runs at
/// all, nothing of the suite's is served before it. Only the watchers are:
/// observers in real time (as they once were) took the CPUs from what they
/// watched, redlock-run included (one stood still 2.3 s and lost its lock
/// when three workloads ran beside the suite), and froze for a second at a
/// time themselves.
fn real_time() -> bool {
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
