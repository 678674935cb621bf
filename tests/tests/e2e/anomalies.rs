//! Stuck under a live owner (SPEC §16), end to end on the real schemas: each
//! kind is found, reported (API, check, metrics, audit once) and its negative
//! is not — a fresh SUBMITTED row, a SERIAL_WAIT instance whose predecessor
//! runs, a retry whose old attempt has flag = 0, a READY_STOP that just made
//! progress — and with every policy set to act nothing of DS's changes.

use ds_sim::db::{SimDb, SimKind, TaskSpec, WorkflowSpec};
use reaper_core::{DsLine, NodeKind};
use reaper_e2e::*;

const MASTER: &str = "10.0.0.1:5678";
const W1: &str = "10.0.0.11:1234";
const W2: &str = "10.0.0.12:1234";

/// Every policy set to act: none of it may reach an anomaly.
const POLICY: &str = "[policy]
worker_lost = \"fail\"
worker_restarted = \"fail\"
heartbeat_stale = \"fail\"
master_lost = \"fail\"
no_host = \"fail\"
process_gone = \"fail\"
workflow = \"recover\"
workflow_master_lost = \"recover\"
";

fn wf(state: i32) -> WorkflowSpec {
    WorkflowSpec {
        state,
        host: Some(MASTER.into()),
        ..WorkflowSpec::default()
    }
}

fn now() -> chrono::NaiveDateTime {
    chrono::Utc::now().naive_utc()
}

/// Every task and workflow row and every command, as text.
async fn snapshot(db: &SimDb, workflows: i64) -> anyhow::Result<Vec<String>> {
    let mut out = Vec::new();
    for id in 1..=db.max_task_id().await? {
        out.push(format!("task {id}: {:?}", db.task_state(id).await?));
    }
    for id in 1..=workflows {
        for col in ["state", "host", "end_time"] {
            out.push(format!(
                "wf {id} {col}: {:?}",
                db.workflow_col(id, col).await?
            ));
        }
    }
    out.push(format!("commands: {:?}", db.commands().await?));
    Ok(out)
}

struct Ids {
    stalled_task: i64,
    dup: (i64, i64, i64),
    retried_wf: i64,
    stopping: i64,
    progressing: i64,
    serial: Option<(i64, i64)>,
    workflows: i64,
}

async fn fill(db: &SimDb, fixture: &str) -> anyhow::Result<Ids> {
    // dispatch_stalled: SUBMITTED since 2023 under the live master
    let queued = db.insert_workflow(&wf(1)).await?;
    let stalled_task = db.insert_task(&TaskSpec::new(queued, 0, None)).await?;
    // negative: SUBMITTED a moment ago, in a group of its own
    let mut fresh = TaskSpec::new(queued, 0, None);
    fresh.submit_time = Some(now());
    fresh.start_time = None;
    fresh.worker_group = "fresh".into();
    db.insert_task(&fresh).await?;

    // duplicate_attempt: two live rows of one task on two workers
    let dup_wf = db.insert_workflow(&wf(1)).await?;
    let mut a = TaskSpec::new(dup_wf, 1, Some(W1));
    a.task_code = Some(4_711);
    a.name = "load".into();
    let mut b = a.clone();
    b.host = Some(W2.into());
    let (ta, tb) = (db.insert_task(&a).await?, db.insert_task(&b).await?);
    // negative: a retry — the old attempt flag = 0, the new one live
    let retried_wf = db.insert_workflow(&wf(1)).await?;
    let mut old = TaskSpec::new(retried_wf, 1, Some(W1));
    old.task_code = Some(4_712);
    old.name = "extract".into();
    old.flag = 0;
    let mut new = old.clone();
    new.flag = 1;
    new.host = Some(W2.into());
    db.insert_task(&old).await?;
    db.insert_task(&new).await?;

    // workflow_stop_stuck: READY_STOP since 2023 under the live master
    let stopping = db.insert_workflow(&wf(4)).await?;
    // negative: READY_PAUSE whose last task ended just now
    let progressing = db.insert_workflow(&wf(2)).await?;
    let mut ended = TaskSpec::new(progressing, 7, Some(W1));
    ended.end_time = Some(now());
    db.insert_task(&ended).await?;

    // serial_wait_stuck (3.4): a waiting serial command, nothing of its
    // definition running; negative: one whose predecessor runs
    let serial = if fixture == "3.4.0" {
        let def = |code: i64, state: i32| WorkflowSpec {
            state,
            definition_code: code,
            ..wf(state)
        };
        let alone = db.insert_workflow(&def(500, 14)).await?;
        let behind = db.insert_workflow(&def(600, 14)).await?;
        let ahead = db.insert_workflow(&def(600, 1)).await?;
        // the predecessor has a task running: it is not stalled either
        db.insert_task(&TaskSpec::new(ahead, 1, Some(W1))).await?;
        for (w, code) in [(alone, 500), (behind, 600)] {
            db.exec(&format!(
                "INSERT INTO t_ds_serial_command (workflow_definition_code, \
                 workflow_definition_version, workflow_instance_id, state, command, create_time, \
                 update_time) VALUES ({code}, 1, {w}, 0, '{{}}', '2024-01-01 00:00:00', \
                 '2024-01-01 00:00:00')"
            ))
            .await?;
        }
        Some((alone, behind))
    } else {
        None
    };
    let workflows = serial.map_or(progressing, |(_, b)| b + 1);
    Ok(Ids {
        stalled_task,
        dup: (dup_wf, ta, tb),
        retried_wf,
        stopping,
        progressing,
        serial,
        workflows,
    })
}

async fn per_fixture(kind: SimKind, fixture: &str) -> anyhow::Result<()> {
    if !services_up().await {
        return Ok(());
    }
    let db = sim_db(kind, fixture).await?;
    let root = unique_root();
    let result = run(&db, &root, fixture).await;
    cleanup(db, &root).await?;
    result
}

async fn run(db: &SimDb, root: &str, fixture: &str) -> anyhow::Result<()> {
    let line = db.line;
    assert!(line >= DsLine::V3_2, "the fixtures of this test are 3.2+");
    let _m = server(root, line, NodeKind::Master, MASTER, &[]).await?;
    let _w1 = server(root, line, NodeKind::Worker, W1, &[]).await?;
    let _w2 = server(root, line, NodeKind::Worker, W2, &[]).await?;
    let ids = fill(db, fixture).await?;
    let before = snapshot(db, ids.workflows).await?;

    let mut d = Daemon::start(db.url(), root, POLICY).await?;
    d.wait_ready().await?;
    let want = if ids.serial.is_some() { 4 } else { 3 };
    wait_until(&format!("{fixture}: {want} anomalies"), || async {
        let doc = d.json("/api/v1/anomalies").await?;
        Ok(doc["anomalies"].as_array().map_or(0, Vec::len) >= want)
    })
    .await?;
    d.wait_sweeps(3).await?;

    let doc = d.json("/api/v1/anomalies").await?;
    let found = doc["anomalies"].as_array().cloned().unwrap_or_default();
    assert_eq!(found.len(), want, "{fixture}: {doc:#}");
    let of = |kind: &str| -> Vec<serde_json::Value> {
        found
            .iter()
            .filter(|a| a["kind"] == kind)
            .cloned()
            .collect()
    };
    let dispatch = of("dispatch_stalled");
    assert_eq!(
        dispatch.len(),
        1,
        "{fixture}: the fresh group has none: {doc:#}"
    );
    let ds = &dispatch[0];
    assert_eq!(ds["worker_group"], "default");
    assert_eq!(ds["count"], 1);
    assert_eq!(ds["task_ids"], serde_json::json!([ids.stalled_task]));
    assert_eq!(ds["evidence"]["oldest_task_id"], ids.stalled_task);
    assert_eq!(ds["owner_master"], MASTER);
    assert_eq!(ds["evidence"]["master_status"][MASTER], "NORMAL", "{ds:#}");
    assert!(ds["since"].is_string());

    let dups = of("duplicate_attempt");
    assert_eq!(dups.len(), 1, "{fixture}: a retry is no duplicate: {doc:#}");
    let (dup_wf, ta, tb) = ids.dup;
    assert_eq!(dups[0]["workflow_instance_id"], dup_wf);
    assert_eq!(dups[0]["task_ids"], serde_json::json!([ta, tb]));
    assert_eq!(dups[0]["count"], 2);
    assert_eq!(dups[0]["evidence"]["hosts"], serde_json::json!([W1, W2]));
    assert!(found
        .iter()
        .all(|a| a["workflow_instance_id"] != ids.retried_wf));

    let stops = of("workflow_stop_stuck");
    assert_eq!(stops.len(), 1, "{fixture}: {doc:#}");
    assert_eq!(stops[0]["workflow_instance_id"], ids.stopping);
    assert_eq!(stops[0]["evidence"]["workflow_state"], "READY_STOP");
    assert!(found
        .iter()
        .all(|a| a["workflow_instance_id"] != ids.progressing));
    // READY_STOP under a live master is not workflow_stalled
    let wfs = d.json("/api/v1/workflows").await?;
    assert!(
        wfs["workflows"]
            .as_array()
            .is_some_and(|w| w.iter().all(|w| w["workflow_instance_id"] != ids.stopping)),
        "{wfs:#}"
    );

    let serial = of("serial_wait_stuck");
    match ids.serial {
        Some((alone, _behind)) => {
            assert_eq!(
                serial.len(),
                1,
                "{fixture}: the one behind a running predecessor is none: {doc:#}"
            );
            assert_eq!(serial[0]["workflow_instance_id"], alone);
            assert_eq!(serial[0]["evidence"]["running_instances"], 0);
        }
        None => assert!(serial.is_empty(), "{fixture}: no serial table: {doc:#}"),
    }

    for (k, n) in [
        ("dispatch_stalled", 1.0),
        ("duplicate_attempt", 1.0),
        ("workflow_stop_stuck", 1.0),
        (
            "serial_wait_stuck",
            if ids.serial.is_some() { 1.0 } else { 0.0 },
        ),
    ] {
        assert_eq!(
            d.metric0(&format!("ds_reaper_anomalies{{kind=\"{k}\"}}"))
                .await?,
            n,
            "{fixture}: {k}"
        );
    }
    assert!(
        d.metric0("ds_reaper_oldest_live_seconds{state=\"SUBMITTED_SUCCESS\"}")
            .await?
            > 3600.0 * 24.0,
        "{fixture}: the 2023 SUBMITTED row"
    );
    // audited once each, however many sweeps saw them
    let records: Vec<_> = d
        .audit()
        .into_iter()
        .filter(|r| r["kind"] == "anomaly")
        .collect();
    assert_eq!(records.len(), want, "{fixture}: {records:#?}");
    assert!(records.iter().all(|r| r["event"] == "detected"));
    // nothing else was audited either: no intent, no write
    assert!(
        d.audit_events("intent", None).is_empty(),
        "{:#?}",
        d.audit()
    );

    // check: the same findings after the others, exit 1, nothing written
    let cfg = CliConfig::new(db.url(), root, POLICY)?;
    let (code, out, err) = cfg.run(&["check", "--format", "json"], &[]).await?;
    assert_eq!(code, 1, "stdout {out}\nstderr {err}");
    let doc: serde_json::Value = serde_json::from_str(&out)?;
    let mut kinds: Vec<&str> = doc["anomalies"]
        .as_array()
        .map(|a| a.iter().filter_map(|x| x["kind"].as_str()).collect())
        .unwrap_or_default();
    kinds.sort_unstable();
    let mut expect = vec![
        "dispatch_stalled",
        "duplicate_attempt",
        "workflow_stop_stuck",
    ];
    if ids.serial.is_some() {
        expect.push("serial_wait_stuck");
    }
    expect.sort_unstable();
    assert_eq!(kinds, expect, "{doc:#}");
    let (code, out, _) = cfg.run(&["check"], &[]).await?;
    assert_eq!(code, 1);
    assert!(out.contains("stuck under a live owner"), "{out}");

    assert_eq!(d.terminate().await?, Some(0));
    assert_eq!(
        snapshot(db, ids.workflows).await?,
        before,
        "{fixture}: with every policy set to act, nothing of DS's changed"
    );
    Ok(())
}

macro_rules! per_fixture {
    ($($name:ident: $kind:expr, $fixture:expr;)*) => {$(
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $name() -> anyhow::Result<()> {
            per_fixture($kind, $fixture).await
        }
    )*};
}

per_fixture! {
    anomalies_mysql_3_2_2: SimKind::MySql, "3.2.2";
    anomalies_pg_3_2_2: SimKind::Postgres, "3.2.2";
    anomalies_mysql_3_3_2: SimKind::MySql, "3.3.2";
    anomalies_pg_3_3_2: SimKind::Postgres, "3.3.2";
    anomalies_mysql_3_4_0: SimKind::MySql, "3.4.0";
    anomalies_pg_3_4_0: SimKind::Postgres, "3.4.0";
}
