//! Sweep benchmark (run by `scripts/bench/sweep.sh`; needs the local services).
//!
//! For each database and table size: fills `t_ds_task_instance` (fixture
//! 3.2.2) with N finished rows, makes 2,000 of the newest 50,000 live plus a
//! few old stragglers, then times
//! - the adapter's incremental sweep (mark 50,000 rows below the top, the
//!   stragglers tracked by id) vs the raw range-scan SQL over the same rows;
//! - the adapter's full scan vs the raw full-scan SQL;
//! - failing the 2,000 live rows with the adapter vs one raw `UPDATE … WHERE id IN (…)`.
//!
//! The adapter is used the way the engine uses it: through the `TaskStore`
//! port (`Arc<dyn TaskStore>` over a `SqlStore`), which keeps the cursor.
//!
//! `sweep_bench anomalies [N ...]` measures what SPEC §16 adds to a sweep
//! (`sweep_bench/anomalies.rs`): N task rows and N workflows, default 1M.
//!
//! `sweep_bench workflows [N ...]` measures the workflow part of a sweep
//! instead ([`workflows`]): N workflow instances (default 1M and 5M), 1,000 of
//! them running, five task rows each.
//!
//! Raw statements run through the command-line clients: `psql` with `\timing`,
//! `mariadb` with `SHOW PROFILES` (server-side duration). Each figure is the
//! best of five runs (`BENCH_RUNS`) after a warm-up (the machine is shared: the
//! minimum filters other load best).

use anyhow::{bail, Context, Result};
use ds_sim::db::{SimDb, SimKind, WorkflowSpec};
use reaper_core::ports::{Scan, TaskStore};
use reaper_core::{Action, Candidate, DsLine, Zone};
use reaper_sql::{Db, DbSettings, SqlStore, SweepCursor, TaskWrite, WriteOutcome};
use std::io::Write;
use std::process::{Command, Stdio};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

#[path = "sweep_bench/anomalies.rs"]
mod anomalies;

const FIXTURE: &str = "3.2.2";
const LIVE: i64 = 2_000;
const RECENT: i64 = 50_000;
/// Timed runs per figure, after a warm-up (`BENCH_RUNS`, default 5).
fn runs() -> usize {
    static RUNS: OnceLock<usize> = OnceLock::new();
    *RUNS.get_or_init(|| {
        std::env::var("BENCH_RUNS")
            .ok()
            .and_then(|v| v.parse().ok())
            .filter(|&n| n > 0)
            .unwrap_or(5)
    })
}
const STATES: [i32; 2] = [1, 17];

const SELECT: &str =
    "SELECT t.id, t.name, t.task_type, t.state, t.host, t.submit_time, t.start_time, \
    t.worker_group, NULL, t.project_code, t.process_instance_id, t.flag, w.host, w.state \
    FROM t_ds_task_instance t LEFT JOIN t_ds_process_instance w ON w.id = t.process_instance_id";

struct Row {
    db: &'static str,
    rows: u64,
    inc: f64,
    raw_range: f64,
    full: f64,
    raw_full: f64,
    write: f64,
    raw_update: f64,
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn min(v: &[f64]) -> f64 {
    v.iter().cloned().fold(f64::INFINITY, f64::min)
}

/// Runs `sql` `runs()` times in one client session; the best statement time in ms.
fn raw(kind: SimKind, url: &str, db: &str, sql: &str) -> Result<f64> {
    match kind {
        SimKind::Postgres => {
            let mut script = String::from("\\timing on\n\\o /dev/null\n");
            for _ in 0..runs() + 1 {
                script.push_str(sql);
                script.push_str(";\n");
            }
            let out = run_stdin(
                Command::new("psql").args(["-X", "-q", "-v", "ON_ERROR_STOP=1", url]),
                &script,
            )?;
            let times: Vec<f64> = out
                .lines()
                .filter_map(|l| l.strip_prefix("Time: "))
                .filter_map(|l| l.split_whitespace().next()?.parse().ok())
                .collect();
            if times.len() != runs() + 1 {
                bail!("psql printed {} timings: {out}", times.len());
            }
            Ok(min(&times[1..]))
        }
        SimKind::MySql => {
            let u = url::parse(url)?;
            let mut script = String::from("SET profiling = 1; SET profiling_history_size = 100;\n");
            for _ in 0..runs() + 1 {
                script.push_str(sql);
                script.push_str(";\n");
            }
            script.push_str("SHOW PROFILES;\n");
            let mut c = Command::new("mariadb");
            c.args([
                "--no-defaults",
                "-B",
                "-N",
                "-h",
                &u.host,
                "-P",
                &u.port,
                "-u",
                &u.user,
                db,
            ]);
            c.env("MYSQL_PWD", &u.password);
            let out = run_stdin(&mut c, &script)?;
            let head: String = sql.chars().take(12).collect();
            let times: Vec<f64> = out
                .lines()
                .filter_map(|l| {
                    let f: Vec<&str> = l.split('\t').collect();
                    if f.len() == 3 && f[0].parse::<u32>().is_ok() && f[2].starts_with(&head) {
                        f[1].parse::<f64>().ok().map(|s| s * 1000.0)
                    } else {
                        None
                    }
                })
                .collect();
            if times.len() != runs() + 1 {
                bail!("mariadb printed {} profiles", times.len());
            }
            Ok(min(&times[1..]))
        }
    }
}

fn run_stdin(c: &mut Command, input: &str) -> Result<String> {
    let mut child = c
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .context("starting the database client")?;
    // written from a thread: a script larger than the pipe buffers would
    // otherwise block on stdin while the client blocks on a full stdout
    let mut stdin = child.stdin.take().context("client stdin")?;
    let input = input.to_string();
    let writer = std::thread::spawn(move || stdin.write_all(input.as_bytes()));
    let out = child.wait_with_output()?;
    writer
        .join()
        .map_err(|_| anyhow::anyhow!("the stdin writer panicked"))??;
    if !out.status.success() {
        bail!("client failed: {}", String::from_utf8_lossy(&out.stderr));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

mod url {
    pub struct Parts {
        pub user: String,
        pub password: String,
        pub host: String,
        pub port: String,
    }
    /// `mysql://user:pw@host:port[/db]`.
    pub fn parse(url: &str) -> anyhow::Result<Parts> {
        let rest = url.split_once("://").map(|x| x.1).unwrap_or(url);
        let rest = rest.split('/').next().unwrap_or(rest);
        let (cred, hostport) = rest.rsplit_once('@').unwrap_or(("root", rest));
        let (user, password) = cred.split_once(':').unwrap_or((cred, ""));
        let (host, port) = hostport.split_once(':').unwrap_or((hostport, "3306"));
        Ok(Parts {
            user: user.into(),
            password: password.into(),
            host: host.into(),
            port: port.into(),
        })
    }
}

async fn bench(kind: SimKind, rows: u64) -> Result<Row> {
    let label = match kind {
        SimKind::MySql => "mariadb",
        SimKind::Postgres => "postgresql",
    };
    eprintln!("== {label}, {rows} rows: filling");
    let sim = SimDb::create(kind, FIXTURE).await?;
    let line = DsLine::V3_2;
    let wf = sim.insert_workflow(&WorkflowSpec::default()).await?;
    let t0 = Instant::now();
    let (first, last) = sim.bulk_fill(wf, rows, 7, "10.0.0.5:1234").await?;
    let every = RECENT / LIVE;
    let recent_from = last - RECENT;
    sim.exec(&format!(
        "UPDATE t_ds_task_instance SET state = 1, end_time = NULL WHERE id > {recent_from} AND MOD(id, {every}) = 0"
    ))
    .await?;
    let stragglers: Vec<i64> = (1..=5).map(|k| first + (k * (rows as i64)) / 7).collect();
    let strag_list = stragglers
        .iter()
        .map(|i| i.to_string())
        .collect::<Vec<_>>()
        .join(",");
    sim.exec(&format!(
        "UPDATE t_ds_task_instance SET state = 1, end_time = NULL WHERE id IN ({strag_list})"
    ))
    .await?;
    match kind {
        SimKind::MySql => sim.exec("ANALYZE TABLE t_ds_task_instance").await?,
        SimKind::Postgres => sim.exec("VACUUM ANALYZE t_ds_task_instance").await?,
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

    // full scan
    let mut full_t = vec![];
    let mut cands: Vec<Candidate> = vec![];
    for i in 0..runs() + 1 {
        store.set_cursor(SweepCursor::new()).await;
        let t = Instant::now();
        cands = port.candidates(line, &STATES, Scan::Full).await?;
        if i > 0 {
            full_t.push(ms(t.elapsed()));
        }
    }
    let base = store.cursor().await;
    if cands.len() as i64 != LIVE + stragglers.len() as i64 {
        bail!("full scan found {} candidates", cands.len());
    }
    // incremental over the newest RECENT rows, stragglers tracked by id
    let mark = recent_from;
    let mut inc_t = vec![];
    for i in 0..runs() + 1 {
        let mut c = base.clone();
        c.set_low_water(mark);
        store.set_cursor(c).await;
        let t = Instant::now();
        let got = port.candidates(line, &STATES, Scan::Incremental).await?;
        if i > 0 {
            inc_t.push(ms(t.elapsed()));
        }
        if got.len() != cands.len() {
            bail!("incremental found {} candidates", got.len());
        }
    }
    let fin = "3,5,6,7,9,13";
    let raw_range_sql = format!(
        "{SELECT} WHERE t.id > {mark} AND t.flag = 1 AND t.state NOT IN ({fin}) ORDER BY t.id"
    );
    let raw_strag_sql = format!("{SELECT} WHERE t.id IN ({strag_list}) ORDER BY t.id");
    let raw_full_sql = format!("{SELECT} WHERE t.flag = 1 AND t.state IN (1,17) ORDER BY t.id");
    let (url, name) = (sim.url().to_string(), sim.name().to_string());
    let raw_range =
        raw(kind, &url, &name, &raw_range_sql)? + raw(kind, &url, &name, &raw_strag_sql)?;
    let raw_full = raw(kind, &url, &name, &raw_full_sql)?;

    // writes: fail the 2,000 recent live rows
    let live: Vec<Candidate> = cands.into_iter().filter(|c| c.id > recent_from).collect();
    let ids = live
        .iter()
        .map(|c| c.id.to_string())
        .collect::<Vec<_>>()
        .join(",");
    let reset =
        format!("UPDATE t_ds_task_instance SET state = 1, end_time = NULL WHERE id IN ({ids})");
    let now = chrono::Utc::now();
    let writes: Vec<TaskWrite> = live
        .iter()
        .map(|c| TaskWrite {
            seen: c.clone(),
            action: Action::Fail,
            now,
        })
        .collect();
    let mut write_t = vec![];
    for i in 0..runs() + 1 {
        sim.exec(&reset).await?;
        let t = Instant::now();
        let out = port.write_tasks(line, &writes).await?;
        if i > 0 {
            write_t.push(ms(t.elapsed()));
        }
        if out.iter().any(|o| *o != WriteOutcome::Applied) {
            bail!("a bench write was not applied");
        }
    }
    let mut upd_t = vec![];
    let upd = format!(
        "UPDATE t_ds_task_instance SET state = 6, end_time = '2025-01-01 00:00:00' WHERE id IN ({ids})"
    );
    for _ in 0..runs() {
        sim.exec(&reset).await?;
        // one statement per client run so that every UPDATE changes rows
        let one = raw_once(kind, &url, &name, &upd)?;
        upd_t.push(one);
    }
    if std::env::var_os("BENCH_KEEP").is_some() {
        eprintln!("   kept database {}", sim.url());
    } else {
        sim.drop().await?;
    }
    Ok(Row {
        db: label,
        rows,
        inc: min(&inc_t),
        raw_range,
        full: min(&full_t),
        raw_full,
        write: min(&write_t),
        raw_update: min(&upd_t),
    })
}

/// One statement through the client, its time in ms.
fn raw_once(kind: SimKind, url: &str, db: &str, sql: &str) -> Result<f64> {
    match kind {
        SimKind::Postgres => {
            let script = format!("\\timing on\n\\o /dev/null\n{sql};\n");
            let out = run_stdin(
                Command::new("psql").args(["-X", "-q", "-v", "ON_ERROR_STOP=1", url]),
                &script,
            )?;
            out.lines()
                .filter_map(|l| l.strip_prefix("Time: "))
                .filter_map(|l| l.split_whitespace().next()?.parse().ok())
                .next()
                .context("no psql timing")
        }
        SimKind::MySql => {
            let u = url::parse(url)?;
            let script = format!("SET profiling = 1;\n{sql};\nSHOW PROFILES;\n");
            let mut c = Command::new("mariadb");
            c.args([
                "--no-defaults",
                "-B",
                "-N",
                "-h",
                &u.host,
                "-P",
                &u.port,
                "-u",
                &u.user,
                db,
            ]);
            c.env("MYSQL_PWD", &u.password);
            let out = run_stdin(&mut c, &script)?;
            out.lines()
                .filter_map(|l| {
                    let f: Vec<&str> = l.split('\t').collect();
                    (f.len() == 3 && f[2].starts_with("UPDATE"))
                        .then(|| f[1].parse::<f64>().ok())?
                })
                .map(|s| s * 1000.0)
                .next()
                .context("no mariadb profile")
        }
    }
}

#[tokio::main]
async fn main() -> Result<()> {
    if std::env::args().nth(1).as_deref() == Some("workflows") {
        return workflows::main(std::env::args().skip(2).collect()).await;
    }
    if std::env::args().nth(1).as_deref() == Some("anomalies") {
        return anomalies::main(std::env::args().skip(2).collect()).await;
    }
    let sizes: Vec<u64> = std::env::args()
        .skip(1)
        .map(|a| a.parse::<u64>())
        .collect::<Result<_, _>>()
        .context("sizes must be row counts")?;
    let sizes = if sizes.is_empty() {
        vec![1_000_000, 5_000_000]
    } else {
        sizes
    };
    let mut out = vec![];
    for &n in &sizes {
        let kinds = match std::env::var("BENCH_DB").as_deref() {
            Ok("mariadb") => vec![SimKind::MySql],
            Ok("postgresql") => vec![SimKind::Postgres],
            _ => vec![SimKind::MySql, SimKind::Postgres],
        };
        for &kind in &kinds {
            out.push(bench(kind, n).await?);
        }
    }
    println!(
        "\n{:<10} {:>9} | {:>10} {:>10} {:>6} | {:>10} {:>10} {:>6} | {:>10} {:>10} {:>6}",
        "database",
        "rows",
        "incr ms",
        "raw rng ms",
        "ratio",
        "full ms",
        "raw full",
        "ratio",
        "fail 2000",
        "raw UPDATE",
        "ratio"
    );
    for r in &out {
        println!(
            "{:<10} {:>9} | {:>10.1} {:>10.1} {:>6.2} | {:>10.1} {:>10.1} {:>6.2} | {:>10.1} {:>10.1} {:>6.2}",
            r.db,
            r.rows,
            r.inc,
            r.raw_range,
            r.inc / r.raw_range,
            r.full,
            r.raw_full,
            r.full / r.raw_full,
            r.write,
            r.raw_update,
            r.write / r.raw_update
        );
    }
    Ok(())
}

/// The workflow part of a sweep (SPEC §13, issue 12): `workflow_candidates`
/// through the port vs the raw SQL doing the same reads.
///
/// For each database and size N: N workflow instances of fixture 3.2.2
/// (finished), 1,000 of them running (spread over the whole table), five
/// task rows each (5N), one of a running workflow's five live. Then
/// Each round times the adapter's sweep and then the raw statements, one
/// after the other in one client session, so that both meet the same cache
/// (MariaDB's buffer pool here is 64 MB); each figure is the best round after
/// a warm-up one.
/// - a full sweep (`Scan::Full`, fresh cursor) vs the raw statements: the two
///   tops, the workflow table's non-terminal rows, the grouped task rows of
///   the tracked workflows (a literal `IN` list of their ids);
/// - an incremental sweep from a warmed cursor (a full scan and three
///   incremental sweeps) after the activity of one sweep interval — 200 new
///   workflows (100 running) with their task rows, 100 live tasks of old
///   running workflows finished — vs the raw statements: the tops, the
///   workflow range above the mark, the tracked workflows below it by id,
///   the task rows above the cursor's task bound, the known live tasks at or
///   below it by id (the adapter runs these five at once, on a pool of four
///   connections; the raw figure is their sum, one after the other).
mod workflows {
    use super::{min, ms, run_stdin, runs, url};
    use anyhow::{bail, Context, Result};
    use ds_sim::db::{SimDb, SimKind};
    use reaper_core::ports::{Scan, TaskStore};
    use reaper_core::{DsLine, Zone};
    use reaper_sql::{Db, DbSettings, SqlStore, WorkflowCursor};
    use std::process::Command;
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    const FIXTURE: &str = "3.2.2";
    const RUNNING: u64 = 1_000;
    const TASKS_PER: u64 = 5;
    const NEW: u64 = 200;
    const STATES: [i32; 3] = [1, 2, 4];
    const TASK_STATES: [i32; 2] = [1, 17];
    const OWNER: &str = "10.0.0.1:5678";
    const WF_SELECT: &str = "SELECT w.id, w.name, w.state, w.host, w.start_time, \
        w.restart_time, w.project_code FROM t_ds_process_instance w";
    const LIVE: &str = "CASE WHEN t.flag = 1 AND t.state NOT IN (3,5,6,7,9,13) THEN t.id END";
    const TOPS: &str = "SELECT (SELECT MAX(id) FROM t_ds_task_instance), \
        (SELECT MAX(id) FROM t_ds_process_instance)";

    struct Row {
        db: &'static str,
        workflows: u64,
        full: f64,
        raw_full: f64,
        inc: f64,
        raw_inc: f64,
    }

    /// Runs the statements of one sweep, in order, `rounds` times in one
    /// client session; each round's total in ms (server time on MariaDB,
    /// client time on PostgreSQL). A sweep's reads evict each other's pages
    /// from a small buffer pool (MariaDB's 64 MB here): timing each statement
    /// repeated back to back would measure it with its pages always cached.
    fn raw_seq(
        kind: SimKind,
        url: &str,
        db: &str,
        stmts: &[String],
        rounds: usize,
    ) -> Result<Vec<f64>> {
        let k = stmts.len();
        let times: Vec<f64> = match kind {
            SimKind::Postgres => {
                let mut script = String::from("\\timing on\n\\o /dev/null\n");
                for _ in 0..rounds {
                    for q in stmts {
                        script.push_str(q);
                        script.push_str(";\n");
                    }
                }
                let out = run_stdin(
                    Command::new("psql").args(["-X", "-q", "-v", "ON_ERROR_STOP=1", url]),
                    &script,
                )?;
                out.lines()
                    .filter_map(|l| l.strip_prefix("Time: "))
                    .filter_map(|l| l.split_whitespace().next()?.parse().ok())
                    .collect()
            }
            SimKind::MySql => {
                let u = url::parse(url)?;
                let mut script =
                    String::from("SET profiling = 1; SET profiling_history_size = 100;\n");
                for _ in 0..rounds {
                    for q in stmts {
                        script.push_str(q);
                        script.push_str(";\n");
                    }
                }
                script.push_str("SHOW PROFILES;\n");
                let mut c = Command::new("mariadb");
                c.args([
                    "--no-defaults",
                    "-B",
                    "-N",
                    "-h",
                    &u.host,
                    "-P",
                    &u.port,
                    "-u",
                    &u.user,
                    db,
                ]);
                c.env("MYSQL_PWD", &u.password);
                let out = run_stdin(&mut c, &script)?;
                out.lines()
                    .filter_map(|l| {
                        let f: Vec<&str> = l.split('\t').collect();
                        (f.len() == 3 && f[0].parse::<u32>().is_ok() && !f[2].starts_with("SET "))
                            .then(|| f[1].parse::<f64>().ok().map(|s| s * 1000.0))?
                    })
                    .collect()
            }
        };
        if times.len() != rounds * k {
            bail!(
                "the client timed {} statements, not {}",
                times.len(),
                rounds * k
            );
        }
        Ok(times.chunks(k).map(|c| c.iter().sum()).collect())
    }

    fn summary_sql(above: Option<i64>, ids: &str) -> String {
        let above = above
            .map(|a| format!("t.id > {a} AND "))
            .unwrap_or_default();
        format!(
            "SELECT t.process_instance_id, {LIVE}, MAX(t.state), MAX(t.host), MAX(t.end_time) \
             FROM t_ds_task_instance t WHERE {above}t.process_instance_id IN ({ids}) \
             GROUP BY t.process_instance_id, {LIVE}"
        )
    }

    async fn ids(sim: &SimDb, sql: &str) -> Result<String> {
        let v = all_ids(sim, sql).await?;
        if v.is_empty() {
            bail!("no ids from {sql}");
        }
        Ok(v.iter()
            .map(|i| i.to_string())
            .collect::<Vec<_>>()
            .join(","))
    }

    async fn all_ids(sim: &SimDb, sql: &str) -> Result<Vec<i64>> {
        Ok(match &sim.pool {
            ds_sim::db::SimPool::My(p) => sqlx::query_scalar(sql).fetch_all(p).await?,
            ds_sim::db::SimPool::Pg(p) => sqlx::query_scalar::<_, i32>(sql)
                .fetch_all(p)
                .await?
                .into_iter()
                .map(i64::from)
                .collect(),
        })
    }

    async fn bench(kind: SimKind, n: u64) -> Result<Row> {
        let label = match kind {
            SimKind::MySql => "mariadb",
            SimKind::Postgres => "postgresql",
        };
        eprintln!(
            "== workflows, {label}, {n} workflows, {} task rows: filling",
            n * TASKS_PER
        );
        let t0 = Instant::now();
        let sim = SimDb::create(kind, FIXTURE).await?;
        let line = DsLine::V3_2;
        let (w0, w1) = sim.bulk_fill_workflows(n, 7, OWNER).await?;
        // every (n / RUNNING)-th workflow runs: spread over the whole table
        // (ids may have gaps: picked by position, not by value)
        let all: Vec<i64> =
            all_ids(&sim, "SELECT id FROM t_ds_process_instance ORDER BY id").await?;
        let every = (all.len() / RUNNING as usize).max(1);
        let running: Vec<i64> = all
            .iter()
            .copied()
            .skip(every - 1)
            .step_by(every)
            .take(RUNNING as usize)
            .collect();
        for chunk in running.chunks(1000) {
            let list = chunk
                .iter()
                .map(|i| i.to_string())
                .collect::<Vec<_>>()
                .join(",");
            sim.exec(&format!(
                "UPDATE t_ds_process_instance SET state = 1 WHERE id IN ({list})"
            ))
            .await?;
        }
        sim.bulk_fill_spread((w0, w1), TASKS_PER, 7, "10.0.0.5:1234")
            .await?;
        // the newest of each running workflow's five tasks is live
        let live_sql = |from: i64| {
            format!(
                "UPDATE t_ds_task_instance SET state = 1, end_time = NULL WHERE id IN \
                 (SELECT m FROM (SELECT MAX(id) AS m FROM t_ds_task_instance \
                 WHERE process_instance_id IN (SELECT id FROM t_ds_process_instance \
                 WHERE state = 1 AND id >= {from}) GROUP BY process_instance_id) x)"
            )
        };
        sim.exec(&live_sql(w0)).await?;
        analyze(&sim, kind).await?;
        eprintln!("   filled in {:.1}s", t0.elapsed().as_secs_f64());

        let store = Arc::new(SqlStore::new(Db::connect_lazy(&DbSettings {
            url: sim.url().to_string(),
            password: None,
            max_connections: 4,
            statement_timeout: Duration::from_secs(300),
            zone: "UTC".parse::<Zone>()?,
        })?));
        let port: Arc<dyn TaskStore> = store.clone();
        let (url, name) = (sim.url().to_string(), sim.name().to_string());

        // full sweep; each round the adapter, then the raw statements (the
        // same cache state for both)
        let tracked = ids(
            &sim,
            "SELECT id FROM t_ds_process_instance WHERE state IN (0,1,2,4,12,14,15,17) ORDER BY id",
        )
        .await?;
        let raw_full_sql = [
            TOPS.to_string(),
            format!("{WF_SELECT} WHERE w.state IN (0,1,2,4,12,14,15,17) ORDER BY w.id"),
            summary_sql(None, &tracked),
        ];
        let (mut full_t, mut raw_full_t) = (vec![], vec![]);
        for i in 0..runs() + 1 {
            store.set_workflow_cursor(WorkflowCursor::new()).await;
            let t = Instant::now();
            let got = port
                .workflow_candidates(line, &STATES, &TASK_STATES, Scan::Full)
                .await?;
            let adapter = ms(t.elapsed());
            let raw = raw_seq(kind, &url, &name, &raw_full_sql, 1)?[0];
            if i > 0 {
                full_t.push(adapter);
                raw_full_t.push(raw);
            }
            if got.len() as u64 != RUNNING {
                bail!("full sweep found {} workflows", got.len());
            }
        }

        // a warmed cursor: a full scan and three incremental sweeps
        store.set_workflow_cursor(WorkflowCursor::new()).await;
        port.workflow_candidates(line, &STATES, &TASK_STATES, Scan::Full)
            .await?;
        for _ in 0..3 {
            port.workflow_candidates(line, &STATES, &TASK_STATES, Scan::Incremental)
                .await?;
        }
        let warm = store.workflow_cursor().await;
        let stats = warm.stats();
        let (mark, bound) = (
            stats.low_water.context("no mark")?,
            stats.task_bound.context("no task bound")?,
        );
        // one sweep interval's activity
        let (n0, n1) = sim.bulk_fill_workflows(NEW, 7, OWNER).await?;
        let new: Vec<i64> = all_ids(
            &sim,
            &format!("SELECT id FROM t_ds_process_instance WHERE id >= {n0} ORDER BY id"),
        )
        .await?;
        let list = new
            .iter()
            .step_by(2)
            .map(|i| i.to_string())
            .collect::<Vec<_>>()
            .join(",");
        sim.exec(&format!(
            "UPDATE t_ds_process_instance SET state = 1 WHERE id IN ({list})"
        ))
        .await?;
        sim.bulk_fill_spread((n0, n1), TASKS_PER, 7, "10.0.0.5:1234")
            .await?;
        sim.exec(&live_sql(n0)).await?;
        let finished = ids(
            &sim,
            &format!(
                "SELECT id FROM t_ds_task_instance WHERE state = 1 AND id <= {bound} \
                 ORDER BY id LIMIT 100"
            ),
        )
        .await?;
        // the live tasks the cursor knows, before 100 of them finish
        let known_live = ids(
            &sim,
            &format!(
                "SELECT id FROM t_ds_task_instance WHERE state = 1 AND id <= {bound} ORDER BY id"
            ),
        )
        .await?;
        sim.exec(&format!(
            "UPDATE t_ds_task_instance SET state = 7, end_time = '2025-01-01 00:00:00' \
             WHERE id IN ({finished})"
        ))
        .await?;
        analyze(&sim, kind).await?;
        let want = RUNNING + NEW / 2;

        let old = ids(
            &sim,
            &format!(
                "SELECT id FROM t_ds_process_instance WHERE state IN (0,1,2,4,12,14,15,17) \
                 AND id <= {mark} ORDER BY id"
            ),
        )
        .await?;
        let raw_inc_sql = [
            TOPS.to_string(),
            format!(
                "{WF_SELECT} WHERE w.id > {mark} AND w.state IN (0,1,2,4,12,14,15,17) ORDER BY w.id"
            ),
            format!("{WF_SELECT} WHERE w.id IN ({old}) ORDER BY w.id"),
            format!(
                "SELECT t.process_instance_id, t.id, t.state, t.flag, t.host, t.end_time \
                 FROM t_ds_task_instance t WHERE t.id > {bound} ORDER BY t.id"
            ),
            format!(
                "SELECT t.process_instance_id, t.id, t.state, t.flag, t.host, t.end_time \
                 FROM t_ds_task_instance t WHERE t.id IN ({known_live})"
            ),
        ];
        let (mut inc_t, mut raw_inc_t) = (vec![], vec![]);
        for i in 0..runs() + 1 {
            store.set_workflow_cursor(warm.clone()).await;
            let t = Instant::now();
            let got = port
                .workflow_candidates(line, &STATES, &TASK_STATES, Scan::Incremental)
                .await?;
            let adapter = ms(t.elapsed());
            let raw = raw_seq(kind, &url, &name, &raw_inc_sql, 1)?[0];
            if i > 0 {
                inc_t.push(adapter);
                raw_inc_t.push(raw);
            }
            if got.len() as u64 != want {
                bail!(
                    "incremental sweep found {} workflows, not {want}",
                    got.len()
                );
            }
        }
        eprintln!(
            "   workflows {w0}..{w1}, mark {mark}, task bound {bound}, cursor {:?}",
            store.workflow_cursor_stats().await
        );
        if std::env::var_os("BENCH_KEEP").is_some() {
            eprintln!("   kept database {}", sim.url());
        } else {
            sim.drop().await?;
        }
        Ok(Row {
            db: label,
            workflows: n,
            full: min(&full_t),
            raw_full: min(&raw_full_t),
            inc: min(&inc_t),
            raw_inc: min(&raw_inc_t),
        })
    }

    async fn analyze(sim: &SimDb, kind: SimKind) -> Result<()> {
        match kind {
            SimKind::MySql => {
                sim.exec("ANALYZE TABLE t_ds_task_instance, t_ds_process_instance")
                    .await?
            }
            SimKind::Postgres => {
                // one statement each: VACUUM runs outside a transaction block
                sim.exec("VACUUM ANALYZE t_ds_task_instance").await?;
                sim.exec("VACUUM ANALYZE t_ds_process_instance").await?
            }
        };
        Ok(())
    }

    pub async fn main(args: Vec<String>) -> Result<()> {
        let sizes: Vec<u64> = args
            .iter()
            .map(|a| a.parse::<u64>())
            .collect::<Result<_, _>>()
            .context("sizes must be workflow instance counts")?;
        let sizes = if sizes.is_empty() {
            vec![1_000_000, 5_000_000]
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
            "\nworkflow part of a sweep: fixture {FIXTURE}, {RUNNING} running workflows, \
             {TASKS_PER} task rows per workflow; incremental after {NEW} new workflows"
        );
        println!(
            "{:<10} {:<10} {:>9} {:>9} | {:>9} {:>9} {:>6} | {:>9} {:>9} {:>6}",
            "",
            "database",
            "workflows",
            "tasks",
            "full ms",
            "raw ms",
            "ratio",
            "incr ms",
            "raw ms",
            "ratio"
        );
        for r in &out {
            println!(
                "{:<10} {:<10} {:>9} {:>9} | {:>9.1} {:>9.1} {:>6.2} | {:>9.1} {:>9.1} {:>6.2}",
                "workflows",
                r.db,
                r.workflows,
                r.workflows * TASKS_PER,
                r.full,
                r.raw_full,
                r.full / r.raw_full,
                r.inc,
                r.raw_inc,
                r.inc / r.raw_inc
            );
        }
        // flatness: the incremental sweep at the largest size vs the smallest
        for db in ["mariadb", "postgresql"] {
            let rows: Vec<&Row> = out.iter().filter(|r| r.db == db).collect();
            if let (Some(a), Some(b)) = (rows.first(), rows.last()) {
                if a.workflows != b.workflows {
                    println!(
                        "workflows-flat {db} {} -> {} workflows: incremental {:.1} -> {:.1} ms ({:.2}x)",
                        a.workflows,
                        b.workflows,
                        a.inc,
                        b.inc,
                        b.inc / a.inc
                    );
                }
            }
        }
        Ok(())
    }
}
