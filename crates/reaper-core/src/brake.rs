//! The brake (SPEC §4.4): when too much looks dead at once, the likelier story
//! is that *we* cannot see (a partition, a ZooKeeper hiccup, a DB restore), so
//! nothing is written until the picture has been normal for `release_after`.

use crate::registry::OutageServer;
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

/// Which rule engaged the brake: a name for the status, the audit and logs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BrakeReason {
    NoWorker,
    LostWorkers,
    Zombies,
    /// SPEC §14 jdbc: servers lost right after the registry database's outage.
    RegistryOutage,
}

impl BrakeReason {
    pub fn as_str(self) -> &'static str {
        match self {
            BrakeReason::NoWorker => "no_worker",
            BrakeReason::LostWorkers => "lost_workers",
            BrakeReason::Zombies => "zombies",
            BrakeReason::RegistryOutage => "registry_outage",
        }
    }
}

/// A sweep's brake condition: the rule, its words, and the servers an
/// operator should check (the outage's; empty for the other rules).
#[derive(Debug, Clone, PartialEq)]
pub struct Condition {
    pub reason: BrakeReason,
    pub why: String,
    pub servers: Vec<OutageServer>,
}

impl Condition {
    fn new(reason: BrakeReason, why: String) -> Condition {
        Condition {
            reason,
            why,
            servers: Vec::new(),
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
    /// The rule of the latest condition seen while engaged.
    #[serde(default)]
    pub reason: Option<BrakeReason>,
    /// The servers that condition named (a registry outage's).
    #[serde(default)]
    pub servers: Vec<OutageServer>,
}

impl BrakeState {
    pub fn engaged(&self) -> bool {
        self.engaged_since.is_some()
    }

    /// The next state given this sweep's condition (None = clear).
    pub fn update(
        &self,
        condition: Option<Condition>,
        now: Instant,
        cfg: &BrakeConfig,
    ) -> BrakeState {
        match (condition, self.engaged_since) {
            (Some(c), since) => BrakeState {
                engaged_since: Some(since.unwrap_or(now)),
                why: Some(c.why),
                clear_since: None,
                reason: Some(c.reason),
                servers: c.servers,
            },
            (None, None) => BrakeState::default(),
            (None, Some(_)) => {
                let clear = self.clear_since.unwrap_or(now);
                if now - clear >= delta(cfg.release_after) {
                    BrakeState::default()
                } else {
                    BrakeState {
                        clear_since: Some(clear),
                        ..self.clone()
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

/// The brake condition of this sweep in words, or None when clear.
pub fn condition(
    view: &RegistryView,
    now: Instant,
    cfg: &BrakeConfig,
    acting_zombies: usize,
    candidates: usize,
) -> Option<String> {
    evaluate(view, now, cfg, acting_zombies, candidates).map(|c| c.why)
}

/// The brake condition of this sweep, or None when clear. A registry
/// outage comes first: it is the likeliest story behind the other rules'
/// losses too, and it names the servers to check.
pub fn evaluate(
    view: &RegistryView,
    now: Instant,
    cfg: &BrakeConfig,
    acting_zombies: usize,
    candidates: usize,
) -> Option<Condition> {
    if let Some(c) = outage_condition(view, now) {
        return Some(c);
    }
    if view.workers.is_empty() {
        return Some(Condition::new(
            BrakeReason::NoWorker,
            "no worker is live".to_string(),
        ));
    }
    let w = worker_window(view, now, cfg.window);
    if w.lost >= 2 && w.seen > 0 && w.lost as f64 / w.seen as f64 >= cfg.max_lost_worker_fraction {
        return Some(Condition::new(
            BrakeReason::LostWorkers,
            format!(
                "{} of {} workers seen in the last {}s are lost (max fraction {})",
                w.lost,
                w.seen,
                cfg.window.as_secs(),
                cfg.max_lost_worker_fraction
            ),
        ));
    }
    if acting_zombies > 0
        && acting_zombies >= cfg.min_zombies
        && candidates > 0
        && acting_zombies as f64 / candidates as f64 >= cfg.max_zombie_fraction
    {
        return Some(Condition::new(
            BrakeReason::Zombies,
            format!(
                "{acting_zombies} of {candidates} candidates would be acted on (min {}, max fraction {})",
                cfg.min_zombies, cfg.max_zombie_fraction
            ),
        ));
    }
    None
}

/// SPEC §14 jdbc: servers lost right after the registry database's outage
/// and not seen live since may run on, their heartbeats purged by DS.
fn outage_condition(view: &RegistryView, now: Instant) -> Option<Condition> {
    let o = view.registry_outage.as_ref().filter(|o| o.holds(now))?;
    let servers: Vec<OutageServer> = o.servers.iter().cloned().collect();
    let names: Vec<String> = servers
        .iter()
        .map(|s| format!("{} {}", kind_name(s.kind), s.host))
        .collect();
    let why = format!(
        "registry_outage: {} lost right after the registry database was unreachable for {}s \
         and not seen live since; DS may have purged their heartbeats while they run (DS #18274) \
         — held until each is seen again or until {}",
        names.join(", "),
        (o.returned_at - o.down_since).num_seconds(),
        o.hold_until.to_rfc3339()
    );
    Some(Condition {
        reason: BrakeReason::RegistryOutage,
        why,
        servers,
    })
}

fn kind_name(kind: crate::NodeKind) -> &'static str {
    match kind {
        crate::NodeKind::Worker => "worker",
        crate::NodeKind::Master => "master",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::view::{NodeInfo, NodeKind};
    use chrono::TimeZone;

    fn t(s: i64) -> Instant {
        chrono::Utc.timestamp_opt(1_700_000_000 + s, 0).unwrap()
    }

    fn cond(why: &str) -> Condition {
        Condition::new(BrakeReason::LostWorkers, why.into())
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
        let s = BrakeState::default().update(Some(cond("x")), t(0), &cfg);
        assert!(s.engaged());
        assert_eq!(s.engaged_since, Some(t(0)));
        let s = s.update(None, t(10), &cfg);
        assert!(s.engaged());
        assert_eq!(s.clear_since, Some(t(10)));
        // condition comes back: the clear clock restarts
        let s = s.update(Some(cond("y")), t(200), &cfg);
        assert_eq!(s.clear_since, None);
        assert_eq!(s.engaged_since, Some(t(0)));
        let s = s.update(None, t(300), &cfg);
        let s = s.update(None, t(599), &cfg);
        assert!(s.engaged());
        let s = s.update(None, t(600), &cfg);
        assert!(!s.engaged());
    }

    /// a, b, c live; d lost at the return of the registry's database (t 100)
    /// after an outage of 100 s, not seen since.
    fn after_outage() -> RegistryView {
        let mut v = view(&["a", "b", "c"], &[("d", 100)]);
        v.registry_outage = Some(crate::registry::RegistryOutage {
            down_since: t(0),
            returned_at: t(100),
            counts_until: t(160),
            hold_until: t(1900),
            servers: [OutageServer {
                kind: crate::NodeKind::Worker,
                host: "d".into(),
            }]
            .into(),
            lost_before: Default::default(),
        });
        v
    }

    #[test]
    fn a_registry_outage_holds_the_brake_until_its_servers_return_then_releases_as_every_brake() {
        let cfg = BrakeConfig::default();
        let v = after_outage();
        // one of four lost: no other rule would engage
        let mut plain = v.clone();
        plain.registry_outage = None;
        assert!(evaluate(&plain, t(100), &cfg, 0, 0).is_none());

        let c = evaluate(&v, t(100), &cfg, 0, 0).expect("the outage holds");
        assert_eq!(c.reason, BrakeReason::RegistryOutage);
        assert_eq!(c.servers.len(), 1);
        assert_eq!(c.servers[0].host, "d");
        assert!(
            c.why.contains("worker d") && c.why.contains("100s"),
            "{}",
            c.why
        );
        let s = BrakeState::default().update(Some(c), t(100), &cfg);
        assert!(s.engaged());
        assert_eq!(s.reason, Some(BrakeReason::RegistryOutage));
        assert_eq!(s.servers[0].host, "d");

        // d seen again: the adapter drops it, the condition clears, and the
        // brake releases after release_after like every brake
        let mut back = v.clone();
        back.registry_outage.as_mut().unwrap().servers.clear();
        assert!(evaluate(&back, t(400), &cfg, 0, 0).is_none());
        let s = s.update(None, t(400), &cfg);
        assert!(s.engaged(), "released only after release_after");
        assert_eq!(s.reason, Some(BrakeReason::RegistryOutage));
        assert!(!s.update(None, t(700), &cfg).engaged());

        // d never back: the hold ends outage_hold after the return
        assert!(evaluate(&v, t(1899), &cfg, 0, 0).is_some());
        assert!(evaluate(&v, t(1900), &cfg, 0, 0).is_none());
    }

    #[test]
    fn the_outage_is_named_before_the_rules_its_losses_also_trip() {
        let cfg = BrakeConfig::default();
        let mut v = after_outage();
        v.workers.clear();
        let c = evaluate(&v, t(100), &cfg, 0, 0).unwrap();
        assert_eq!(c.reason, BrakeReason::RegistryOutage);
        v.registry_outage = None;
        assert_eq!(
            evaluate(&v, t(100), &cfg, 0, 0).unwrap().reason,
            BrakeReason::NoWorker
        );
    }
}
