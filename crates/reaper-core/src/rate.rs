//! The per-minute action budget of SPEC §4.5: a token bucket holding at most
//! `per_minute` tokens, refilled at `per_minute / 60` per second.

use crate::Instant;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct TokenBucket {
    pub tokens: f64,
    pub updated: Instant,
}

impl TokenBucket {
    /// A full bucket: a freshly started daemon may act at once.
    pub fn full(per_minute: u32, now: Instant) -> Self {
        TokenBucket {
            tokens: per_minute as f64,
            updated: now,
        }
    }

    /// The bucket as it is at `now` (time never runs backwards for it).
    pub fn refilled(&self, per_minute: u32, now: Instant) -> Self {
        let cap = per_minute as f64;
        let elapsed = (now - self.updated).num_milliseconds().max(0) as f64 / 1000.0;
        TokenBucket {
            tokens: (self.tokens + elapsed * cap / 60.0).min(cap),
            updated: if now > self.updated {
                now
            } else {
                self.updated
            },
        }
    }

    /// Takes one token if there is one.
    pub fn try_take(&mut self) -> bool {
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn t(ms: i64) -> Instant {
        chrono::Utc
            .timestamp_millis_opt(1_700_000_000_000 + ms)
            .unwrap()
    }

    #[test]
    fn drains_and_refills_at_rate() {
        let mut b = TokenBucket::full(60, t(0));
        for _ in 0..60 {
            assert!(b.try_take());
        }
        assert!(!b.try_take());
        // 60/min = 1 per second
        let mut b = b.refilled(60, t(2_500));
        assert!(b.try_take());
        assert!(b.try_take());
        assert!(!b.try_take());
    }

    #[test]
    fn never_exceeds_capacity() {
        let b = TokenBucket::full(10, t(0)).refilled(10, t(3_600_000));
        assert_eq!(b.tokens, 10.0);
    }

    #[test]
    fn clock_going_back_does_not_refill() {
        let mut b = TokenBucket::full(10, t(10_000));
        while b.try_take() {}
        let b = b.refilled(10, t(0));
        assert!(b.tokens < 1.0);
        assert_eq!(b.updated, t(10_000));
    }
}
