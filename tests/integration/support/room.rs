//! Room for tests that must not all run at once: each takes a share of a
//! fixed capacity for as long as it runs, and waits while there is not
//! enough left; a test that must run with none of the others takes all of
//! it.
//!
//! The harness runs many tests side by side (`RUST_TEST_THREADS`, set in
//! `.cargo/config.toml`): most of them wait on servers and timeouts, and a
//! test waiting for a room holds a harness thread. So that those waits do
//! not take turns from the rest, and the rest do not all run at once, a
//! test also takes a place in [`RUNNING`] when it first makes a directory
//! or starts a server, holds it until it ends, and gives it back while it
//! waits for another room: the threads are many, the tests at work few.
//! Those that keep the CPUs busy (the safety workloads, a tree of
//! thousands of processes) and those that must not run beside them are
//! queued only against each other in rooms of their own.

use std::cell::RefCell;
use std::sync::{Condvar, Mutex, OnceLock};

pub struct Room {
    used: Mutex<usize>,
    freed: Condvar,
    /// The capacity where `knob` (a variable) does not set another.
    default: usize,
    knob: Option<&'static str>,
    /// The capacity, read once.
    capacity: OnceLock<usize>,
}

/// A share of a [`Room`], given back when dropped.
pub struct Seat {
    room: &'static Room,
    share: usize,
}

impl Room {
    pub const fn new(capacity: usize) -> Room {
        Room::set_by(capacity, None)
    }

    /// A room whose capacity `knob` (a variable) sets, where it is set.
    const fn set_by(capacity: usize, knob: Option<&'static str>) -> Room {
        Room {
            used: Mutex::new(0),
            freed: Condvar::new(),
            default: capacity,
            knob,
            capacity: OnceLock::new(),
        }
    }

    /// Waits until `share` (at most the capacity) is free, and takes it;
    /// the test's place in [`RUNNING`] is given back meanwhile.
    pub fn take(&'static self, share: usize) -> Seat {
        let place = PLACE.with(|p| p.borrow_mut().take());
        let seat = self.wait_for(share);
        if place.is_some() {
            drop(place);
            running();
        }
        seat
    }

    /// All of it: no other test of this room runs meanwhile.
    pub fn alone(&'static self) -> Seat {
        self.take(self.capacity())
    }

    fn capacity(&'static self) -> usize {
        *self
            .capacity
            .get_or_init(|| match self.knob.map(std::env::var) {
                None | Some(Err(_)) => self.default,
                Some(Ok(n)) => n.parse().ok().filter(|&n| n > 0).unwrap_or_else(|| {
                    panic!(
                        "{}={n:?}: not a number above 0",
                        self.knob.unwrap_or_default()
                    )
                }),
            })
    }

    fn wait_for(&'static self, share: usize) -> Seat {
        let capacity = self.capacity();
        let share = share.min(capacity);
        // A test that panicked holding a seat has given it back (Drop);
        // the lock itself is never held across a test.
        let mut used = self.used.lock().unwrap_or_else(|p| p.into_inner());
        while *used + share > capacity {
            used = self.freed.wait(used).unwrap_or_else(|p| p.into_inner());
        }
        *used += share;
        Seat { room: self, share }
    }
}

impl Drop for Seat {
    fn drop(&mut self) {
        let mut used = self.room.used.lock().unwrap_or_else(|p| p.into_inner());
        *used -= self.share;
        self.room.freed.notify_all();
    }
}

/// Tests at work at once. Seven on two cores: the suite's tests mostly
/// wait (at six the integration tests took 148-162 s idle, at seven
/// 133-138 s), and at eight, before the workloads' witness and the TLS
/// fixtures' own roots, a clean-clone CI run met a late kill or a late
/// node's answer one time in two. `REDLOCK_TEST_AT_WORK` sets another
/// number, for two passes run side by side (CI's Redis 6.2 and Valkey
/// passes).
static RUNNING: Room = Room::set_by(7, Some("REDLOCK_TEST_AT_WORK"));

thread_local! {
    /// The place of the test this thread runs (libtest runs each test on a
    /// thread of its own, which ends with it).
    static PLACE: RefCell<Option<Seat>> = const { RefCell::new(None) };
}

/// Takes this test's place in [`RUNNING`], once: called where a test first
/// makes a directory or starts a server.
pub fn running() {
    if PLACE.with(|p| p.borrow().is_some()) {
        return;
    }
    let seat = RUNNING.wait_for(1);
    PLACE.with(|p| *p.borrow_mut() = Some(seat));
}

/// For a test that keeps both CPUs busy for seconds (forking thousands of
/// processes): every place in [`RUNNING`], so that no other test is at work
/// beside it (a Cluster fixture's 2 s helper connection timed out beside
/// it). Its own place is among them, kept until the test ends.
pub fn hog() {
    let own = PLACE.with(|p| p.borrow_mut().take());
    drop(own);
    let all = RUNNING.wait_for(RUNNING.capacity());
    PLACE.with(|p| *p.borrow_mut() = Some(all));
}
