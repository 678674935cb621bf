//! The batched read of listed task ids for ghost detection (SPEC §15), on
//! every line's real schema, MariaDB and PostgreSQL: rows in any state with
//! their end time, the newer attempt of a `flag = 0` row, gone rows absent,
//! and more ids than one statement takes.

mod sql_setup;

use chrono::TimeZone;
use ds_sim::db::{SimKind, TaskSpec, WorkflowSpec};
use reaper_core::ports::TaskStore;
use reaper_sql::*;
use sql_setup::*;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

async fn listed_rows(kind: SimKind, fixture: &str) {
    let Some(sim) = setup(kind, fixture).await else {
        return;
    };
    let line = sim.line;
    let store: Arc<dyn TaskStore> = Arc::new(SqlStore::new(connect(&sim, Duration::from_secs(30))));
    let wf = sim.insert_workflow(&WorkflowSpec::default()).await.unwrap();
    let end = chrono::NaiveDate::from_ymd_opt(2025, 3, 4)
        .unwrap()
        .and_hms_opt(5, 0, 0)
        .unwrap();
    let mut done = TaskSpec::new(wf, 7, Some("10.0.0.5:1234"));
    done.end_time = Some(end);
    let done = sim.insert_task(&done).await.unwrap();
    // the old attempt handed to fault tolerance, and DS's new one elsewhere
    let mut old = TaskSpec::new(wf, 8, Some("10.0.0.5:1234"));
    old.flag = 0;
    old.name = "step".into();
    let old = sim.insert_task(&old).await.unwrap();
    let mut newer = TaskSpec::new(wf, 1, Some("10.0.0.6:1234"));
    newer.name = "step".into();
    let newer = sim.insert_task(&newer).await.unwrap();
    // another task of the same workflow, live: not an attempt of `step`
    let mut other = TaskSpec::new(wf, 1, Some("10.0.0.7:1234"));
    other.name = "other".into();
    let other = sim.insert_task(&other).await.unwrap();
    if sim.has_column("t_ds_task_instance", "task_code") {
        // task codes tell tasks apart from 2.0 on (the simulator gives all 77)
        sim.exec(&format!(
            "UPDATE t_ds_task_instance SET task_code = 78 WHERE id = {other}"
        ))
        .await
        .unwrap();
        sim.exec(&format!(
            "UPDATE t_ds_task_instance SET task_code = 79 WHERE id IN ({old}, {newer})"
        ))
        .await
        .unwrap();
    }
    let running = sim
        .insert_task(&TaskSpec::new(wf, 1, Some("10.0.0.5:1234")))
        .await
        .unwrap();
    let gone = 999_999_999;

    let read = store
        .ghost_rows(line, &[done, old, running, gone])
        .await
        .unwrap();
    assert!(read.undecodable.is_empty(), "{kind:?} {fixture}");
    let rows: BTreeMap<i64, _> = read.rows.into_iter().map(|r| (r.task.id, r)).collect();
    assert_eq!(
        rows.keys().copied().collect::<Vec<_>>(),
        [done, old, running],
        "{kind:?} {fixture}: a gone row is absent"
    );
    let d = &rows[&done];
    assert_eq!((d.task.state, d.flag), (7, 1));
    assert_eq!(
        d.end_time,
        Some(chrono::Utc.from_utc_datetime(&end)),
        "{kind:?} {fixture}"
    );
    assert_eq!(d.task.host.as_deref(), Some("10.0.0.5:1234"));
    assert_eq!(d.task.workflow_instance_id, Some(wf));
    assert!(d.newer_attempt.is_none());
    let o = &rows[&old];
    assert_eq!((o.task.state, o.flag), (8, 0));
    let n = o
        .newer_attempt
        .as_ref()
        .unwrap_or_else(|| panic!("{kind:?} {fixture}: the newer attempt"));
    assert_eq!(n.id, newer, "{kind:?} {fixture}");
    assert_ne!(n.id, other);
    assert_eq!(n.host.as_deref(), Some("10.0.0.6:1234"));
    assert!(n.submit_time.is_some());
    let r = &rows[&running];
    assert_eq!((r.task.state, r.flag, r.end_time.is_none()), (1, 1, true));
    assert!(r.newer_attempt.is_none());

    // more ids than one statement takes: every row, none twice
    let (first, last) = sim.bulk_fill(wf, 2_500, 7, "10.0.0.5:1234").await.unwrap();
    let ids: Vec<i64> = (first..=last).collect();
    let read = store.ghost_rows(line, &ids).await.unwrap();
    assert_eq!(read.rows.len(), ids.len(), "{kind:?} {fixture}");
    let mut got: Vec<i64> = read.rows.iter().map(|r| r.task.id).collect();
    got.sort();
    assert_eq!(got, ids);
    assert!(store.ghost_rows(line, &[]).await.unwrap().rows.is_empty());
    sim.drop().await.unwrap();
}

macro_rules! lines {
    ($($name:ident: $kind:expr, $fixture:expr;)*) => {$(
        #[tokio::test]
        async fn $name() {
            listed_rows($kind, $fixture).await;
        }
    )*};
}

lines! {
    listed_rows_mysql_1_2_1: SimKind::MySql, "1.2.1";
    listed_rows_mysql_1_3_9: SimKind::MySql, "1.3.9";
    listed_rows_mysql_2_0_9: SimKind::MySql, "2.0.9";
    listed_rows_mysql_3_1_9: SimKind::MySql, "3.1.9";
    listed_rows_mysql_3_2_2: SimKind::MySql, "3.2.2";
    listed_rows_mysql_3_3_2: SimKind::MySql, "3.3.2";
    listed_rows_mysql_3_4_0: SimKind::MySql, "3.4.0";
    listed_rows_pg_1_2_1: SimKind::Postgres, "1.2.1";
    listed_rows_pg_1_3_9: SimKind::Postgres, "1.3.9";
    listed_rows_pg_2_0_9: SimKind::Postgres, "2.0.9";
    listed_rows_pg_3_1_9: SimKind::Postgres, "3.1.9";
    listed_rows_pg_3_2_2: SimKind::Postgres, "3.2.2";
    listed_rows_pg_3_3_2: SimKind::Postgres, "3.3.2";
    listed_rows_pg_3_4_0: SimKind::Postgres, "3.4.0";
}
