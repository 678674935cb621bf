//! The brake (SPEC §4.4): when too much looks dead at once, the likelier story
//! is that *we* cannot see (a partition, a ZooKeeper hiccup, a DB restore), so
//! nothing is written until the picture has been normal for `release_after`.

use crate::view::RegistryView;
use crate::{delta, Instant};
use serde::{Deserialize, Serialize};
use std::time::Duration;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BrakeConfig {
    pub window: Duration,
    pub max_lost_worker_fraction: f64,
    pub max_zombie_fraction: f64,
    pub min_zombies: usize,
    pub release_after: Duration,
}

impl Default for BrakeConfig {
    fn default() -> Self {
        BrakeConfig {
            window: Duration::from_secs(300),
            max_lost_worker_fraction: 0.5,
            max_zombie_fraction: 0.5,
            min_zombies: 10,
            release_after: Duration::from_secs(300),
        }
    }
}

/// The brake's memory between sweeps.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct BrakeState {
    /// Set while engaged.
    pub engaged_since: Option<Instant>,
    /// Why it engaged (the latest condition seen while engaged).
    pub why: Option<String>,
    /// While engaged: since when the condition has been clear.
    pub clear_since: Option<Instant>,
}

impl BrakeState {
    pub fn engaged(&self) -> bool {
        self.engaged_since.is_some()
    }

    /// The next state given this sweep's condition (None = clear).
    pub fn update(&self, condition: Option<String>, now: Instant, cfg: &BrakeConfig) -> BrakeState {
        match (condition, self.engaged_since) {
            (Some(why), since) => BrakeState {
                engaged_since: Some(since.unwrap_or(now)),
                why: Some(why),
                clear_since: None,
            },
            (None, None) => BrakeState::default(),
            (None, Some(since)) => {
                let clear = self.clear_since.unwrap_or(now);
                if now - clear >= delta(cfg.release_after) {
                    BrakeState::default()
                } else {
                    BrakeState {
                        engaged_since: Some(since),
                        why: self.why.clone(),
                        clear_since: Some(clear),
                    }
                }
            }
        }
    }
}

/// Worker counts the lost-fraction rule looks at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WorkerWindow {
    /// Distinct hosts live at any moment within the window.
    pub seen: usize,
    /// Those of them absent now.
    pub lost: usize,
}

pub fn worker_window(view: &RegistryView, now: Instant, window: Duration) -> WorkerWindow {
    let cutoff = now - delta(window);
    // A host is in lost_workers only while absent, so a returned host is never
    // lost, and a host lost five times is one key.
    let lost = view
        .lost_workers
        .iter()
        .filter(|(h, at)| **at >= cutoff && !view.workers.contains_key(*h))
        .count();
    WorkerWindow {
        seen: view.workers.len() + lost,
        lost,
    }
}

/// The brake condition of this sweep, or None when clear.
pub fn condition(
    view: &RegistryView,
    now: Instant,
    cfg: &BrakeConfig,
    acting_zombies: usize,
    candidates: usize,
) -> Option<String> {
    if view.workers.is_empty() {
        return Some("no worker is live".to_string());
    }
    let w = worker_window(view, now, cfg.window);
    if w.lost >= 2 && w.seen > 0 && w.lost as f64 / w.seen as f64 >= cfg.max_lost_worker_fraction {
        return Some(format!(
            "{} of {} workers seen in the last {}s are lost (max fraction {})",
            w.lost,
            w.seen,
            cfg.window.as_secs(),
            cfg.max_lost_worker_fraction
        ));
    }
    if acting_zombies > 0
        && acting_zombies >= cfg.min_zombies
        && candidates > 0
        && acting_zombies as f64 / candidates as f64 >= cfg.max_zombie_fraction
    {
        return Some(format!(
            "{acting_zombies} of {candidates} candidates would be acted on (min {}, max fraction {})",
            cfg.min_zombies, cfg.max_zombie_fraction
        ));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::view::{NodeInfo, NodeKind};
    use chrono::TimeZone;

    fn t(s: i64) -> Instant {
        chrono::Utc.timestamp_opt(1_700_000_000 + s, 0).unwrap()
    }

    fn view(live: &[&str], lost: &[(&str, i64)]) -> RegistryView {
        let mut v = RegistryView::invalid(t(0), "test");
        v.state = crate::ViewState::Valid { since: t(0) };
        for h in live {
            v.upsert(NodeKind::Worker, NodeInfo::new(h, t(0)));
        }
        for (h, at) in lost {
            v.lost_workers.insert(h.to_string(), t(*at));
        }
        v
    }

    #[test]
    fn lost_fraction_needs_two_hosts() {
        let cfg = BrakeConfig::default();
        // 1 of 2 lost: fraction 0.5 but only one host
        assert!(condition(&view(&["a"], &[("b", 100)]), t(200), &cfg, 0, 0).is_none());
        // 2 of 4 lost
        let v = view(&["a", "b"], &[("c", 100), ("d", 150)]);
        assert!(condition(&v, t(200), &cfg, 0, 0)
            .unwrap()
            .contains("2 of 4"));
        // losses older than the window do not count
        assert!(condition(&v, t(100 + 301), &cfg, 0, 0).is_none());
    }

    #[test]
    fn no_live_worker_engages() {
        let cfg = BrakeConfig::default();
        assert_eq!(
            condition(&view(&[], &[]), t(1), &cfg, 0, 0).as_deref(),
            Some("no worker is live")
        );
    }

    #[test]
    fn zombie_fraction_needs_both_thresholds() {
        let cfg = BrakeConfig::default();
        let v = view(&["a", "b", "c"], &[]);
        assert!(condition(&v, t(1), &cfg, 9, 10).is_none()); // < min_zombies
        assert!(condition(&v, t(1), &cfg, 10, 100).is_none()); // < fraction
        assert!(condition(&v, t(1), &cfg, 10, 20).is_some());
    }

    #[test]
    fn engages_holds_and_releases_after_clear_period() {
        let cfg = BrakeConfig::default();
        let s = BrakeState::default().update(Some("x".into()), t(0), &cfg);
        assert!(s.engaged());
        assert_eq!(s.engaged_since, Some(t(0)));
        let s = s.update(None, t(10), &cfg);
        assert!(s.engaged());
        assert_eq!(s.clear_since, Some(t(10)));
        // condition comes back: the clear clock restarts
        let s = s.update(Some("y".into()), t(200), &cfg);
        assert_eq!(s.clear_since, None);
        assert_eq!(s.engaged_since, Some(t(0)));
        let s = s.update(None, t(300), &cfg);
        let s = s.update(None, t(599), &cfg);
        assert!(s.engaged());
        let s = s.update(None, t(600), &cfg);
        assert!(!s.engaged());
    }
}
