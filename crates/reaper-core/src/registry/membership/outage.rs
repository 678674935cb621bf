//! DS's JDBC registry after an outage of its database (SPEC §14 jdbc,
//! DS #18274): once no poll has succeeded for longer than DS's session
//! timeout, DS 3.3+ takes its live servers for dead when the database
//! returns, purges their heartbeat rows, and they never come back. Seen from
//! here they are lost, though they run. So every loss first seen within the
//! grace period after the return is the outage's: the brake holds (reason
//! `registry_outage`) until each such server is seen live again or the hold
//! has passed since the return. The adapter notes the return; the rest is
//! data in the view, which the planner's brake reads.

use super::{Changes, Membership};
use crate::view::{NodeKind, RegistryView};
pub use crate::view::{OutageServer, RegistryOutage};
use crate::{delta, Instant};
use std::time::Duration;

impl RegistryOutage {
    /// Nothing more can come of it: the hold is over, or the counting
    /// window closed with every server back.
    fn over(&self, now: Instant) -> bool {
        now >= self.hold_until || (now > self.counts_until && self.servers.is_empty())
    }

    /// Drops the servers live in `view`; while the window is open, adds
    /// every server whose loss was first seen in it.
    fn observe(&mut self, view: &RegistryView, now: Instant) {
        self.servers.retain(|s| !live(view, s.kind, &s.host));
        self.lost_before.retain(|s| !live(view, s.kind, &s.host));
        if now > self.counts_until {
            return;
        }
        let window = self.returned_at..=self.counts_until;
        for (kind, lost) in [
            (NodeKind::Worker, &view.lost_workers),
            (NodeKind::Master, &view.lost_masters),
        ] {
            for (host, at) in lost {
                let s = OutageServer {
                    kind,
                    host: host.clone(),
                };
                if window.contains(at) && !live(view, kind, host) && !self.lost_before.contains(&s)
                {
                    self.servers.insert(s);
                }
            }
        }
    }
}

fn live(view: &RegistryView, kind: NodeKind, host: &str) -> bool {
    match kind {
        NodeKind::Worker => view.workers.contains_key(host),
        NodeKind::Master => view.masters.contains_key(host),
    }
}

impl Membership {
    /// The registry's database answered at `now` after no poll had
    /// succeeded since `down_since`, longer than DS's session timeout.
    /// Call it before applying the listing of that poll, with the same
    /// `now`, then [`Membership::track_outage`] after it. Servers an earlier
    /// outage still waits for stay in the new one.
    pub fn outage_returned(
        &mut self,
        down_since: Instant,
        now: Instant,
        grace: Duration,
        hold: Duration,
    ) {
        let servers = self
            .view
            .registry_outage
            .take()
            .map(|o| o.servers)
            .unwrap_or_default();
        let v = &self.view;
        let lost_before = (v.lost_workers.keys().map(|h| (NodeKind::Worker, h)))
            .chain(v.lost_masters.keys().map(|h| (NodeKind::Master, h)))
            .map(|(kind, host)| OutageServer {
                kind,
                host: host.clone(),
            })
            .filter(|s| !servers.contains(s))
            .collect();
        self.view.registry_outage = Some(RegistryOutage {
            down_since,
            returned_at: now,
            counts_until: now + delta(grace),
            hold_until: now + delta(hold),
            servers,
            lost_before,
        });
    }

    /// Brings the outage up to date with the view at `now`: losses in its
    /// window join it, servers seen live leave it, and it is forgotten once
    /// nothing more can come of it.
    pub fn track_outage(&mut self, now: Instant) -> Changes {
        let Some(mut o) = self.view.registry_outage.take() else {
            return Changes::default();
        };
        let before = o.clone();
        o.observe(&self.view, now);
        let (next, publish) = if o.over(now) {
            (None, true)
        } else {
            let changed = o != before;
            (Some(o), changed)
        };
        self.view.registry_outage = next;
        Changes {
            publish,
            membership: publish,
            ..Changes::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::{LayoutMode, ListedNode, Listing};
    use crate::Zone;
    use chrono::TimeZone;

    const GRACE: Duration = Duration::from_secs(60);
    const HOLD: Duration = Duration::from_secs(1800);

    fn t(s: i64) -> Instant {
        chrono::Utc.timestamp_opt(1_700_000_000 + s, 0).unwrap()
    }

    fn listing(workers: &[&str]) -> Listing {
        Listing {
            nodes: workers
                .iter()
                .map(|w| ListedNode {
                    path: format!("/nodes/worker/{w}"),
                    data: Vec::new(),
                    ephemeral: true,
                })
                .collect(),
            ..Listing::default()
        }
    }

    fn machine(workers: &[&str]) -> Membership {
        let mut m = Membership::new(LayoutMode::Auto, Zone::Named(chrono_tz::UTC), t(0), "test");
        m.apply_listing(listing(workers), t(0));
        m
    }

    fn hosts(m: &Membership) -> Vec<String> {
        let o = m.view().registry_outage.as_ref();
        o.map(|o| o.servers.iter().map(|s| s.host.clone()).collect())
            .unwrap_or_default()
    }

    #[test]
    fn losses_in_the_window_after_the_return_are_the_outages_until_seen_again() {
        let mut m = machine(&["w1:1", "w2:1", "w3:1"]);
        m.invalidate(crate::registry::Gap::Connection, "poll failed", t(10));
        // the return: w3 was purged meanwhile
        m.outage_returned(t(5), t(200), GRACE, HOLD);
        m.apply_listing(listing(&["w1:1", "w2:1"]), t(200));
        assert!(m.track_outage(t(200)).publish);
        assert_eq!(hosts(&m), ["w3:1"]);
        // w2 purged a little later, still in the window
        m.apply_listing(listing(&["w1:1"]), t(230));
        m.track_outage(t(230));
        assert_eq!(hosts(&m), ["w2:1", "w3:1"]);
        assert!(m.view().registry_outage.as_ref().unwrap().holds(t(230)));
        // after the window a loss is an ordinary one; w3 comes back
        m.apply_listing(listing(&["w3:1"]), t(300));
        m.track_outage(t(300));
        assert_eq!(hosts(&m), ["w2:1"], "w1's loss came after the window");
        // w2 back (a new incarnation as much as the old one): nothing holds
        m.apply_listing(listing(&["w2:1", "w3:1"]), t(310));
        m.track_outage(t(310));
        assert!(m.view().registry_outage.is_none(), "over: forgotten");
    }

    #[test]
    fn the_hold_ends_at_outage_hold_after_the_return_whoever_is_missing() {
        let mut m = machine(&["w1:1", "w2:1"]);
        m.outage_returned(t(5), t(200), GRACE, HOLD);
        m.apply_listing(listing(&["w1:1"]), t(200));
        m.track_outage(t(200));
        let o = m.view().registry_outage.clone().unwrap();
        assert!(o.holds(t(200 + 1799)));
        assert!(!o.holds(t(200 + 1800)));
        m.track_outage(t(200 + 1800));
        assert!(m.view().registry_outage.is_none());
    }

    #[test]
    fn a_loss_seen_before_the_outage_is_not_the_outages() {
        let mut m = machine(&["w1:1", "w2:1", "w3:1"]);
        m.apply_listing(listing(&["w1:1", "w2:1"]), t(5));
        m.invalidate(crate::registry::Gap::Connection, "poll failed", t(6));
        m.outage_returned(t(5), t(200), GRACE, HOLD);
        // the listing that ends the gap restarts w3's absence clock
        m.apply_listing(listing(&["w1:1", "w2:1"]), t(200));
        m.track_outage(t(200));
        assert_eq!(m.view().lost_workers.get("w3:1"), Some(&t(200)));
        assert!(hosts(&m).is_empty());
        // back and gone again in the window: a loss first seen there
        m.apply_listing(listing(&["w1:1", "w2:1", "w3:1"]), t(210));
        m.track_outage(t(210));
        m.apply_listing(listing(&["w1:1", "w2:1"]), t(220));
        m.track_outage(t(220));
        assert_eq!(hosts(&m), ["w3:1"]);
    }

    #[test]
    fn no_loss_in_the_window_holds_nothing() {
        let mut m = machine(&["w1:1", "w2:1"]);
        m.outage_returned(t(5), t(200), GRACE, HOLD);
        m.apply_listing(listing(&["w1:1", "w2:1"]), t(200));
        m.track_outage(t(200));
        let o = m.view().registry_outage.clone().unwrap();
        assert!(!o.holds(t(200)), "kept only to count losses in the window");
        m.track_outage(t(261));
        assert!(m.view().registry_outage.is_none());
    }

    #[test]
    fn a_second_outage_keeps_the_servers_the_first_still_waits_for() {
        let mut m = machine(&["w1:1", "w2:1"]);
        m.outage_returned(t(5), t(200), GRACE, HOLD);
        m.apply_listing(listing(&["w1:1"]), t(200));
        m.track_outage(t(200));
        m.outage_returned(t(400), t(900), GRACE, HOLD);
        m.apply_listing(listing(&["w1:1"]), t(900));
        m.track_outage(t(900));
        assert_eq!(hosts(&m), ["w2:1"]);
        let o = m.view().registry_outage.as_ref().unwrap();
        assert_eq!(o.hold_until, t(900 + 1800));
    }
}
