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
    child
        .stdin
        .take()
        .context("client stdin")?
        .write_all(input.as_bytes())?;
    let out = child.wait_with_output()?;
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
