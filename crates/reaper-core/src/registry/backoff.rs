//! Capped exponential backoff with jitter, for every retry loop of the
//! registry adapters (connecting, re-arming watches, re-listing, elections).
//!
//! The base delay starts at `min`, doubles after each delay handed out, stops
//! at `max`, and goes back to `min` on [`Backoff::reset`]. Each delay is the
//! base jittered *down* by up to half (so within `[base/2, base]`): replicas
//! that lost the same ensemble at the same moment do not retry in step, and
//! no retry ever waits longer than the unjittered schedule. The random source
//! is a seed the caller passes in (a small splitmix64 generator), so this
//! stays free of I/O and a test can fix it.

use std::time::Duration;

#[derive(Debug, Clone)]
pub struct Backoff {
    min: Duration,
    max: Duration,
    base: Duration,
    rng: u64,
}

impl Backoff {
    /// `max` below `min` is taken as `min`.
    pub fn new(min: Duration, max: Duration, seed: u64) -> Self {
        Backoff {
            min,
            max: max.max(min),
            base: min,
            rng: seed,
        }
    }

    /// The delay to wait now; the next one's base doubles, up to `max`.
    pub fn next_delay(&mut self) -> Duration {
        let base = self.base;
        self.base = base.saturating_mul(2).min(self.max);
        let nanos = base.as_nanos();
        let cut = u128::from(self.next_u64()) % (nanos / 2 + 1);
        let d = nanos - cut;
        // d <= base, so its seconds fit a u64
        Duration::new(
            u64::try_from(d / 1_000_000_000).unwrap_or(u64::MAX),
            (d % 1_000_000_000) as u32,
        )
    }

    /// After a success: the next delay starts from `min` again.
    pub fn reset(&mut self) {
        self.base = self.min;
    }

    /// The base of the next delay (the delay before jitter).
    pub fn base(&self) -> Duration {
        self.base
    }

    /// splitmix64 (Steele, Lea, Flood 2014): good enough to spread retries.
    fn next_u64(&mut self) -> u64 {
        self.rng = self.rng.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.rng;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn doubles_up_to_the_cap_and_resets() {
        let mut b = Backoff::new(200 * MS, 10_000 * MS, 7);
        let bases: Vec<Duration> = (0..9)
            .map(|_| {
                let base = b.base();
                let d = b.next_delay();
                assert!(d <= base && d >= base / 2, "{d:?} of {base:?}");
                base
            })
            .collect();
        let ms: Vec<u128> = bases.iter().map(|d| d.as_millis()).collect();
        assert_eq!(
            ms,
            vec![200, 400, 800, 1600, 3200, 6400, 10_000, 10_000, 10_000]
        );
        b.reset();
        assert_eq!(b.base(), 200 * MS);
        assert!(b.next_delay() <= 200 * MS);
    }

    #[test]
    fn jitter_spreads_replicas() {
        let delays = |seed| {
            let mut b = Backoff::new(200 * MS, 10_000 * MS, seed);
            (0..8).map(|_| b.next_delay()).collect::<Vec<_>>()
        };
        assert_eq!(delays(1), delays(1), "the same seed, the same delays");
        assert_ne!(delays(1), delays(2));
    }

    #[test]
    fn degenerate_bounds() {
        let mut b = Backoff::new(Duration::ZERO, Duration::ZERO, 0);
        assert_eq!(b.next_delay(), Duration::ZERO);
        let mut b = Backoff::new(5 * MS, MS, 0);
        assert!(b.next_delay() <= 5 * MS);
        assert_eq!(b.base(), 5 * MS);
        let mut b = Backoff::new(Duration::MAX, Duration::MAX, 3);
        assert!(b.next_delay() >= Duration::MAX / 4);
    }

    proptest! {
        #[test]
        fn within_half_of_the_base_and_never_above_max(
            seed in any::<u64>(), min_ms in 0u64..5_000, extra in 0u64..60_000, n in 1usize..40,
        ) {
            let (min, max) = (Duration::from_millis(min_ms), Duration::from_millis(min_ms + extra));
            let mut b = Backoff::new(min, max, seed);
            for _ in 0..n {
                let base = b.base();
                prop_assert!(base >= min && base <= max);
                let d = b.next_delay();
                prop_assert!(d <= base && d >= base / 2);
            }
        }
    }
}
