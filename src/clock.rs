//! Time for deadlines: CLOCK_BOOTTIME, which keeps counting while the host is
//! suspended. `std::time::Instant` is CLOCK_MONOTONIC, which stops then: a
//! laptop or VM resumed after an hour would still think its lock valid for
//! the rest of the TTL, while Redis (on another host) expired the key long ago.

use std::ops::{Add, Sub};
use std::time::Duration;

/// A moment on CLOCK_BOOTTIME.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct Stamp(Duration);

/// Now, on CLOCK_BOOTTIME.
pub(crate) fn now() -> Stamp {
    // glibc's call, through the vDSO it has already found (rustix's would
    // look the vDSO up again, in each process). CLOCK_BOOTTIME exists on
    // every Linux since 2.6.39: the call cannot fail, and a zeroed time
    // stands in if it ever did.
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid timespec to write into.
    unsafe { libc::clock_gettime(libc::CLOCK_BOOTTIME, &mut ts) };
    let d = Duration::new(
        ts.tv_sec.max(0) as u64,
        ts.tv_nsec.clamp(0, 999_999_999) as u32,
    );
    Stamp(d + test_skew())
}

impl Stamp {
    /// Time since this moment (zero if it is in the future).
    pub(crate) fn elapsed(self) -> Duration {
        now().saturating_duration_since(self)
    }

    pub(crate) fn saturating_duration_since(self, earlier: Stamp) -> Duration {
        self.0.saturating_sub(earlier.0)
    }

    pub(crate) fn checked_sub(self, d: Duration) -> Option<Stamp> {
        self.0.checked_sub(d).map(Stamp)
    }

    /// Nanoseconds on the clock, to hand a moment to another process.
    pub(crate) fn as_nanos(self) -> u128 {
        self.0.as_nanos()
    }

    pub(crate) fn from_nanos(nanos: u64) -> Stamp {
        Stamp(Duration::from_nanos(nanos))
    }
}

impl Add<Duration> for Stamp {
    type Output = Stamp;

    /// Saturates: a deadline too far away to represent is "never".
    fn add(self, d: Duration) -> Stamp {
        Stamp(self.0.saturating_add(d))
    }
}

impl Sub<Duration> for Stamp {
    type Output = Stamp;

    fn sub(self, d: Duration) -> Stamp {
        Stamp(self.0.saturating_sub(d))
    }
}

/// Test builds only (feature `test-hooks`): a host suspend cannot be staged in a test, so the
/// integration tests move this clock forward (and only this one) by writing
/// milliseconds to the file named by `REDLOCK_TEST_SUSPEND_FILE`, which is what
/// a suspend looks like to the process: BOOTTIME jumps, MONOTONIC does not.
#[cfg(feature = "test-hooks")]
fn test_skew() -> Duration {
    use std::sync::OnceLock;
    static PATH: OnceLock<Option<std::ffi::OsString>> = OnceLock::new();
    let Some(path) = PATH.get_or_init(|| std::env::var_os("REDLOCK_TEST_SUSPEND_FILE")) else {
        return Duration::ZERO;
    };
    std::fs::read_to_string(path)
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok())
        .map_or(Duration::ZERO, Duration::from_millis)
}

#[cfg(not(feature = "test-hooks"))]
fn test_skew() -> Duration {
    Duration::ZERO
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn boottime_moves_forward_with_monotonic_time() {
        let a = now();
        let i = std::time::Instant::now();
        std::thread::sleep(Duration::from_millis(20));
        let b = now();
        assert!(b > a);
        let d = b.saturating_duration_since(a);
        assert!(d >= Duration::from_millis(20), "{d:?}");
        assert!(d <= i.elapsed() + Duration::from_millis(5), "{d:?}");
        assert_eq!(a.saturating_duration_since(b), Duration::ZERO);
    }

    #[test]
    fn arithmetic_saturates() {
        let a = now();
        assert_eq!(
            a + Duration::MAX,
            a + Duration::MAX + Duration::from_secs(1)
        );
        assert_eq!(
            Stamp(Duration::ZERO) - Duration::from_secs(1),
            Stamp(Duration::ZERO)
        );
        assert_eq!(
            (a + Duration::from_secs(3)).checked_sub(Duration::from_secs(3)),
            Some(a)
        );
    }
}
