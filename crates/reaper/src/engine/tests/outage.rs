//! SPEC §14 jdbc (DS #18274): a server lost right after the registry
//! database's outage holds the brake, named `registry_outage` in the status,
//! the audit and the metrics, until it is seen again or `outage_hold` passes;
//! then the brake releases as every brake does.

use super::*;
use reaper_core::registry::{OutageServer, RegistryOutage};

const HOLD: i64 = 1800;

/// w3 lost at the registry database's return, now, after 300 s away.
fn lose_w3_with_the_outage(r: &Rig) {
    let now = r.engine.now();
    r.lose("w3:1234");
    r.reg.update(|v| {
        v.registry_outage = Some(RegistryOutage {
            down_since: now - chrono::TimeDelta::seconds(300),
            returned_at: now,
            counts_until: now + chrono::TimeDelta::seconds(60),
            hold_until: now + chrono::TimeDelta::seconds(HOLD),
            servers: [OutageServer {
                kind: NodeKind::Worker,
                host: "w3:1234".into(),
            }]
            .into(),
            lost_before: Default::default(),
        })
    });
}

#[tokio::test(start_paused = true)]
async fn a_server_lost_with_the_registry_outage_holds_the_brake_by_name_until_outage_hold() {
    let r = rig(|s| s.brake.release_after = Duration::from_secs(300));
    r.store.insert(task(1, "w3:1234"));
    tokio::time::advance(Duration::from_secs(10)).await;
    lose_w3_with_the_outage(&r);

    // past the grace period: a zombie, but the outage holds the brake
    tokio::time::advance(Duration::from_secs(120)).await;
    let s = r.engine.sweep(Trigger::Tick).await;
    assert_eq!((s.zombies, s.actions), (1, 0), "{s:?}");
    let status = crate::views::StatusView::new(&r.engine);
    let brake = serde_json::to_value(&status.brake).unwrap();
    assert_eq!(brake["engaged"], true);
    assert_eq!(brake["reason"], "registry_outage");
    assert_eq!(brake["servers"][0]["host"], "w3:1234");
    assert_eq!(brake["servers"][0]["kind"], "worker");
    let audited: Vec<Record> = r
        .audit()
        .into_iter()
        .filter(|x| x.event == AuditEvent::Brake)
        .collect();
    assert_eq!(audited.len(), 1);
    assert_eq!(audited[0].reason.as_deref(), Some("registry_outage"));
    let ev = audited[0].evidence.clone().unwrap();
    assert_eq!(ev["servers"][0]["host"], "w3:1234");
    assert!(audited[0]
        .detail
        .as_deref()
        .unwrap()
        .contains("worker w3:1234"));
    r.engine.refresh_gauges(&r.reg.view());
    let gauge = &r.engine.metrics.registry_outage;
    assert_eq!(gauge.with_label_values(&["worker w3:1234"]).get(), 1);

    // outage_hold passes with w3 still away: the condition clears, and the
    // brake holds on for release_after like every brake
    tokio::time::advance(Duration::from_secs(HOLD as u64)).await;
    let s = r.engine.sweep(Trigger::Tick).await;
    assert_eq!(s.actions, 0, "{s:?}");
    assert!(r.engine.status_read().brake.engaged());
    r.engine.refresh_gauges(&r.reg.view());
    let text = r.engine.metrics.render();
    assert!(
        text.contains("ds_reaper_registry_outage{servers=\"\"} 0"),
        "{text}"
    );
    assert!(!text.contains("w3:1234"), "{text}");
    tokio::time::advance(Duration::from_secs(300)).await;
    let s = r.engine.sweep(Trigger::Tick).await;
    assert!(!r.engine.status_read().brake.engaged());
    assert_eq!(s.actions, 1, "{s:?}");
    assert_eq!(r.actions("fail", "ok"), 1);
}
