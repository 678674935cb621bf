//! The cost of SPEC §16 in a sweep (issue 23): a sweep's reads (task
//! candidates and workflow candidates, both through the port) with and
//! without what the anomalies add — `anomaly_rows` (the other live rows the
//! candidate read already returned, and 3.4's serial queue: one join and one
//! grouped count) and the pure judgement — at N task rows and N workflow
//! instances of fixture 3.4.0. Each round runs the sweep without and with
//! (which goes first alternates), from the same cursors; each figure is the
//! best round after a warm-up one.

use super::{min, ms, runs};
use anyhow::{bail, Result};
use ds_sim::db::{SimDb, SimKind};
use reaper_core::anomaly::{plan_anomalies, AnomalySettings, SweepRows};
use reaper_core::ports::{Scan, TaskStore};
use reaper_core::{DsLine, NodeInfo, NodeKind, RegistryView, ViewState, Zone};
use reaper_sql::{Db, DbSettings, SqlStore, SweepCursor, WorkflowCursor};
use std::sync::Arc;
use std::time::{Duration, Instant};

const FIXTURE: &str = "3.4.0";
const OWNER: &str = "10.0.0.1:5678";
const RUNNING_WF: i64 = 1_000;
const RECENT: i64 = 50_000;
const LIVE: i64 = 2_000;
const SERIAL: i64 = 20;
const STATES: [i32; 2] = [1, 17];
const WF_STATES: [i32; 3] = [1, 2, 4];

struct Row {
    db: &'static str,
    n: u64,
    inc: f64,
    inc_with: f64,
    full: f64,
    full_with: f64,
    extra: f64,
    found: usize,
}

/// Which goes first alternates by round: the second meets the cache the
/// first warmed.
fn order(round: usize) -> [bool; 2] {
    if round.is_multiple_of(2) {
        [false, true]
    } else {
        [true, false]
    }
}

fn view() -> RegistryView {
    let now = chrono::Utc::now();
    let mut v = RegistryView::invalid(now, "bench");
    v.state = ViewState::Valid { since: now };
    v.upsert(NodeKind::Master, NodeInfo::new(OWNER, now));
    v.upsert(NodeKind::Worker, NodeInfo::new("10.0.0.5:1234", now));
    v
}

/// One sweep's reads; with `anomalies`, also SPEC §16's reads and judgement.
async fn sweep(
    port: &dyn TaskStore,
    scan: Scan,
    anomalies: bool,
    view: &RegistryView,
) -> Result<(f64, usize, f64)> {
    let line = DsLine::V3_3;
    let t = Instant::now();
    let cands = port.candidates(line, &STATES, scan).await?;
    let mut found = 0;
    let mut extra = Duration::ZERO;
    if anomalies {
        let a = Instant::now();
        let rows = port.anomaly_rows(line).await?;
        extra += a.elapsed();
        let wfs = port
            .workflow_candidates(line, &WF_STATES, &STATES, scan)
            .await?;
        let p = Instant::now();
        let report = plan_anomalies(
            view,
            line,
            SweepRows {
                candidates: &cands,
                rows: &rows,
                workflows: &wfs,
                candidate_states: &STATES,
            },
            chrono::Utc::now(),
            &AnomalySettings::default(),
        );
        found = report.anomalies.len();
        extra += p.elapsed();
    } else {
        port.workflow_candidates(line, &WF_STATES, &STATES, scan)
            .await?;
    }
    Ok((ms(t.elapsed()), found, ms(extra)))
}

async fn bench(kind: SimKind, n: u64) -> Result<Row> {
    let label = match kind {
        SimKind::MySql => "mariadb",
        SimKind::Postgres => "postgresql",
    };
    eprintln!("== anomalies, {label}, {n} task rows and {n} workflows: filling");
    let t0 = Instant::now();
    let sim = SimDb::create(kind, FIXTURE).await?;
    let (w0, w1) = sim.bulk_fill_workflows(n, 7, OWNER).await?;
    let every = (n as i64 / RUNNING_WF).max(1);
    sim.exec(&format!(
        "UPDATE t_ds_workflow_instance SET state = 1 WHERE MOD(id, {every}) = 0"
    ))
    .await?;
    let (first, last) = sim
        .bulk_fill_spread((w0, w1), 1, 7, "10.0.0.5:1234")
        .await?;
    // the newest rows: 2,000 live, a tenth of them SUBMITTED; old stragglers
    let recent_from = last - RECENT;
    let step = RECENT / LIVE;
    sim.exec(&format!(
        "UPDATE t_ds_task_instance SET state = 1, end_time = NULL \
         WHERE id > {recent_from} AND MOD(id, {step}) = 0"
    ))
    .await?;
    sim.exec(&format!(
        "UPDATE t_ds_task_instance SET state = 0, host = NULL, end_time = NULL \
         WHERE id > {recent_from} AND MOD(id, {}) = 0",
        step * 10
    ))
    .await?;
    let strag: Vec<String> = (1..=5)
        .map(|k| (first + k * (last - first) / 7).to_string())
        .collect();
    sim.exec(&format!(
        "UPDATE t_ds_task_instance SET state = 1, end_time = NULL WHERE id IN ({})",
        strag.join(",")
    ))
    .await?;
    // 3.4's serial queue: SERIAL_WAIT workflows with waiting serial commands,
    // each of a serial definition of its own (the bulk's one definition has
    // all N instances: the grouped count reads a definition's instances)
    let serial_every = (n as i64 / SERIAL).max(1);
    sim.exec(&format!(
        "UPDATE t_ds_workflow_instance SET state = 14, workflow_definition_code = 100000 + id \
         WHERE MOD(id, {serial_every}) = 7 AND state = 7"
    ))
    .await?;
    sim.exec(
        "INSERT INTO t_ds_serial_command (workflow_definition_code, workflow_definition_version, \
         workflow_instance_id, state, command, create_time, update_time) \
         SELECT workflow_definition_code, 1, id, 0, '{}', '2024-01-01 00:00:00', \
         '2024-01-01 00:00:00' FROM t_ds_workflow_instance WHERE state = 14",
    )
    .await?;
    match kind {
        SimKind::MySql => {
            sim.exec("ANALYZE TABLE t_ds_task_instance, t_ds_workflow_instance")
                .await?
        }
        SimKind::Postgres => {
            sim.exec("VACUUM ANALYZE t_ds_task_instance").await?;
            sim.exec("VACUUM ANALYZE t_ds_workflow_instance").await?
        }
    };
    eprintln!("   filled in {:.1}s", t0.elapsed().as_secs_f64());

    let store = Arc::new(SqlStore::new(Db::connect_lazy(&DbSettings {
        url: sim.url().to_string(),
        password: None,
        max_connections: 4,
        statement_timeout: Duration::from_secs(300),
        zone: "UTC".parse::<Zone>()?,
    })?));
    let port: Arc<dyn TaskStore> = store.clone();
    let v = view();

    let (mut full, mut full_with) = (vec![], vec![]);
    // what the anomalies alone add (their reads and judgement), per sweep
    let mut extra = vec![];
    let mut found = 0;
    for i in 0..runs() + 1 {
        for with in order(i) {
            store.set_cursor(SweepCursor::new()).await;
            store.set_workflow_cursor(WorkflowCursor::new()).await;
            let (t, f, x) = sweep(port.as_ref(), Scan::Full, with, &v).await?;
            if i > 0 {
                if with {
                    full_with.push(t);
                    extra.push(x);
                    found = f;
                } else {
                    full.push(t);
                }
            }
        }
    }
    // warmed cursors: a full sweep, then incremental ones over the newest rows
    store.set_cursor(SweepCursor::new()).await;
    store.set_workflow_cursor(WorkflowCursor::new()).await;
    sweep(port.as_ref(), Scan::Full, false, &v).await?;
    for _ in 0..3 {
        sweep(port.as_ref(), Scan::Incremental, false, &v).await?;
    }
    let mut tasks = store.cursor().await;
    tasks.set_low_water(recent_from);
    let wfs = store.workflow_cursor().await;
    let (mut inc, mut inc_with) = (vec![], vec![]);
    for i in 0..runs() + 1 {
        for with in order(i) {
            store.set_cursor(tasks.clone()).await;
            store.set_workflow_cursor(wfs.clone()).await;
            let (t, f, x) = sweep(port.as_ref(), Scan::Incremental, with, &v).await?;
            if i > 0 {
                if with {
                    inc_with.push(t);
                    extra.push(x);
                    if f != found {
                        bail!("incremental found {f} anomalies, full {found}");
                    }
                } else {
                    inc.push(t);
                }
            }
        }
    }
    // one dispatch_stalled finding and the serial waits: the judgement ran on real rows
    if found < 2 {
        bail!("only {found} anomalies found: the bench's rows are not what it meant");
    }
    if std::env::var_os("BENCH_KEEP").is_some() {
        eprintln!("   kept database {}", sim.url());
    } else {
        sim.drop().await?;
    }
    Ok(Row {
        db: label,
        n,
        inc: min(&inc),
        inc_with: min(&inc_with),
        full: min(&full),
        full_with: min(&full_with),
        extra: min(&extra),
        found,
    })
}

pub async fn main(args: Vec<String>) -> Result<()> {
    let sizes: Vec<u64> = args
        .iter()
        .map(|a| a.parse::<u64>())
        .collect::<Result<_, _>>()?;
    let sizes = if sizes.is_empty() {
        vec![1_000_000]
    } else {
        sizes
    };
    let kinds = match std::env::var("BENCH_DB").as_deref() {
        Ok("mariadb") => vec![SimKind::MySql],
        Ok("postgresql") => vec![SimKind::Postgres],
        _ => vec![SimKind::MySql, SimKind::Postgres],
    };
    let mut out = vec![];
    for &n in &sizes {
        for &kind in &kinds {
            out.push(bench(kind, n).await?);
        }
    }
    println!(
        "\nsweep with SPEC §16 anomalies vs without: fixture {FIXTURE}, N task rows and N \
         workflows, {LIVE} live task rows ({} SUBMITTED), {RUNNING_WF} running workflows, \
         SERIAL_WAIT with serial commands",
        LIVE / 10
    );
    println!(
        "{:<10} {:<10} {:>9} | {:>9} {:>9} {:>6} | {:>9} {:>9} {:>6} | {:>5} {:>9}",
        "",
        "database",
        "N",
        "incr ms",
        "with ms",
        "ratio",
        "full ms",
        "with ms",
        "ratio",
        "found",
        "extra ms"
    );
    for r in &out {
        println!(
            "{:<10} {:<10} {:>9} | {:>9.1} {:>9.1} {:>6.2} | {:>9.1} {:>9.1} {:>6.2} | {:>5} {:>9.2}",
            "anomalies",
            r.db,
            r.n,
            r.inc,
            r.inc_with,
            r.inc_with / r.inc,
            r.full,
            r.full_with,
            r.full_with / r.full,
            r.found,
            r.extra
        );
    }
    Ok(())
}
