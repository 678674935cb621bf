//! One sweep's admission (SPEC §4.1–§4.6, §13, §15): the task, workflow and
//! ghost planners admit the writes they want through one [`Budget`] in turn,
//! so a hold, the brake, the view's settle, `max_actions_per_sweep` and the
//! token bucket are judged in one place and shared by all three.

use crate::brake::BrakeState;
use crate::policy::Policy;
use crate::rate::TokenBucket;
use crate::verdict::{Blocked, Disposition, SafetyState};
use crate::{delta, Instant};
use std::time::Duration;

/// What a sweep may still write, and what holds every write of it.
#[derive(Debug, Clone, PartialEq)]
pub struct Budget {
    /// Set by the caller, never remembered: nothing is written and this says
    /// why (not the leader, the detected DS line disagrees, `check`, ...).
    pub hold: Option<String>,
    /// Why the brake holds, while it is engaged (set by the task planner,
    /// which updates the brake).
    brake: Option<String>,
    /// `startup_settle`: nothing is written this soon after the view became valid.
    pub settle: Duration,
    /// `max_actions_per_sweep`.
    pub cap: usize,
    /// Writes admitted so far in this sweep.
    pub taken: usize,
    /// The per-minute bucket; None admits nothing (a planner given no bucket).
    pub bucket: Option<TokenBucket>,
}

impl Budget {
    /// A budget of `cap` writes and `bucket`'s tokens, with no hold and the brake released.
    pub fn new(cap: usize, settle: Duration, bucket: Option<TokenBucket>) -> Budget {
        Budget {
            hold: None,
            brake: None,
            settle,
            cap,
            taken: 0,
            bucket,
        }
    }

    /// The budget of a sweep under `policy`: the remembered bucket refilled
    /// (full on the first sweep), the remembered brake.
    pub fn for_sweep(state: &SafetyState, policy: &Policy, now: Instant) -> Budget {
        let bucket = state
            .bucket
            .map(|b| b.refilled(policy.rate_per_minute, now))
            .unwrap_or_else(|| TokenBucket::full(policy.rate_per_minute, now));
        let mut b = Budget::new(
            policy.max_actions_per_sweep,
            policy.startup_settle,
            Some(bucket),
        );
        b.set_brake(&state.brake);
        b
    }

    /// The same budget under a hold (None: unheld).
    pub fn held(mut self, hold: Option<String>) -> Budget {
        self.hold = hold;
        self
    }

    /// Follows the brake as the task planner updated it.
    pub fn set_brake(&mut self, brake: &BrakeState) {
        self.brake = brake
            .engaged()
            .then(|| brake.why.clone().unwrap_or_else(|| "engaged".into()));
    }

    /// What holds every write of this sweep, if anything, in the order the
    /// rules are told: a hold, the brake, the view's settle.
    pub fn blocked(&self, valid_since: Instant, now: Instant) -> Option<Blocked> {
        if let Some(h) = &self.hold {
            Some(Blocked::Hold(h.clone()))
        } else if let Some(why) = &self.brake {
            Some(Blocked::Brake(why.clone()))
        } else if now - valid_since < delta(self.settle) {
            Some(Blocked::Settling)
        } else {
            None
        }
    }

    /// One write asked for: admitted (taking a token and a place under the
    /// cap) or blocked, and why.
    pub fn admit(&mut self, valid_since: Instant, now: Instant) -> Disposition {
        if let Some(b) = self.blocked(valid_since, now) {
            Disposition::Blocked(b)
        } else if self.taken >= self.cap {
            Disposition::Blocked(Blocked::SweepCap)
        } else if !self.bucket.as_mut().is_some_and(|b| b.try_take()) {
            Disposition::Blocked(Blocked::RateLimit)
        } else {
            self.taken += 1;
            Disposition::Act
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn t(s: i64) -> Instant {
        chrono::Utc.timestamp_opt(1_700_000_000 + s, 0).unwrap()
    }

    #[test]
    fn a_hold_comes_before_the_brake_and_the_settle_and_takes_nothing() {
        let mut b = Budget::new(5, Duration::from_secs(30), Some(TokenBucket::full(5, t(0))));
        let brake = BrakeState {
            engaged_since: Some(t(0)),
            why: Some("too many lost".into()),
            clear_since: None,
            ..Default::default()
        };
        b.set_brake(&brake);
        let held = b.clone().held(Some("not the leader".into()));
        let mut h = held.clone();
        assert_eq!(
            h.admit(t(0), t(1)),
            Disposition::Blocked(Blocked::Hold("not the leader".into()))
        );
        assert_eq!(h, held, "a blocked write takes nothing");
        assert_eq!(
            b.admit(t(0), t(1)),
            Disposition::Blocked(Blocked::Brake("too many lost".into()))
        );
        b.set_brake(&BrakeState::default());
        assert_eq!(
            b.admit(t(0), t(29)),
            Disposition::Blocked(Blocked::Settling)
        );
        assert_eq!(b.admit(t(0), t(30)), Disposition::Act);
        assert_eq!(b.taken, 1);
    }

    #[test]
    fn the_cap_is_judged_before_the_bucket_and_both_are_shared() {
        let mut b = Budget::new(2, Duration::ZERO, Some(TokenBucket::full(3, t(0))));
        assert_eq!(b.admit(t(0), t(0)), Disposition::Act);
        assert_eq!(b.admit(t(0), t(0)), Disposition::Act);
        assert_eq!(b.admit(t(0), t(0)), Disposition::Blocked(Blocked::SweepCap));
        assert_eq!(b.bucket.map(|b| b.tokens), Some(1.0));
        b.taken = 0;
        assert_eq!(b.admit(t(0), t(0)), Disposition::Act);
        assert_eq!(
            b.admit(t(0), t(0)),
            Disposition::Blocked(Blocked::RateLimit)
        );
        let mut none = Budget::new(2, Duration::ZERO, None);
        assert_eq!(
            none.admit(t(0), t(0)),
            Disposition::Blocked(Blocked::RateLimit)
        );
    }
}
