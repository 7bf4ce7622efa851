//! Room for tests that must not all run at once: each takes a share of a
//! fixed capacity for as long as it runs, and waits while there is not
//! enough left; a test that must run with none of the others takes all of
//! it. The suite runs many tests side by side (most of them wait on
//! servers and timeouts); the few that keep both cores busy (the safety
//! workloads) or that must not run beside those are queued only against
//! each other here.

use std::sync::{Condvar, Mutex};

pub struct Room {
    used: Mutex<usize>,
    freed: Condvar,
    capacity: usize,
}

/// A share of a [`Room`], given back when dropped.
pub struct Seat {
    room: &'static Room,
    share: usize,
}

impl Room {
    pub const fn new(capacity: usize) -> Room {
        Room {
            used: Mutex::new(0),
            freed: Condvar::new(),
            capacity,
        }
    }

    /// Waits until `share` (at most the capacity) is free, and takes it.
    pub fn take(&'static self, share: usize) -> Seat {
        let share = share.min(self.capacity);
        // A test that panicked holding a seat has given it back (Drop);
        // the lock itself is never held across a test.
        let mut used = self.used.lock().unwrap_or_else(|p| p.into_inner());
        while *used + share > self.capacity {
            used = self.freed.wait(used).unwrap_or_else(|p| p.into_inner());
        }
        *used += share;
        Seat { room: self, share }
    }

    /// All of it: no other test of this room runs meanwhile.
    pub fn alone(&'static self) -> Seat {
        self.take(self.capacity)
    }
}

impl Drop for Seat {
    fn drop(&mut self) {
        let mut used = self.room.used.lock().unwrap_or_else(|p| p.into_inner());
        *used -= self.share;
        self.room.freed.notify_all();
    }
}

/// The machine's CPUs as the suite shares them: a test that keeps them busy
/// for seconds (forking thousands of processes) takes all of it, and a test
/// whose assertions are about timing (a kill before a deadline, a latency)
/// takes a seat, so that no such test runs beside such a load. Everything
/// else runs beside both.
static CPUS: Room = Room::new(8);

/// For a test that keeps the CPUs busy: beside no timing test.
pub fn hog() -> Seat {
    CPUS.alone()
}

/// For a test that judges timing: beside no hog.
pub fn timing() -> Seat {
    CPUS.take(1)
}
