//! The status page (`GET /`, SPEC §8) in a real browser: headless Chromium
//! renders the page of a running daemon that has zombies (one `worker_lost`
//! beside a lost worker, one `process_gone` beside a fresh agent), stuck
//! workflows (a lost master's, a stalled one), a worker with a fresh agent,
//! one with a stale agent, a failed task in the audit, and a few sweeps of
//! history. The test reads what a person sees — the text of each section and
//! the charts' elements — from Chromium's DOM, and keeps a screenshot at
//! 1366×900 under `target/` (its path is printed).
//!
//! Needs `chromium` (Debian package; `deploy/dev/services.sh` installs it):
//! missing, the test is skipped, except under CI=true where it fails.

use anyhow::{bail, Context, Result};
use ds_sim::db::{SimKind, TaskSpec, WorkflowSpec};
use reaper_core::agent::{AgentReport, AgentTask};
use reaper_core::NodeKind;
use reaper_e2e::*;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;
use zookeeper_client as zk;

/// The Chromium binary: `CHROMIUM`, else `chromium`, `chromium-browser` or
/// `google-chrome` on the PATH.
fn chromium() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("CHROMIUM") {
        return Some(PathBuf::from(p));
    }
    let path = std::env::var_os("PATH")?;
    ["chromium", "chromium-browser", "google-chrome"]
        .iter()
        .flat_map(|name| std::env::split_paths(&path).map(move |d| d.join(name)))
        .find(|p| p.is_file())
}

/// Runs headless Chromium on `url` with `args`; its stdout.
async fn browse(bin: &Path, profile: &Path, args: &[&str], url: &str) -> Result<String> {
    let mut cmd = tokio::process::Command::new(bin);
    cmd.args([
        "--headless",
        "--disable-gpu",
        "--no-sandbox",
        "--no-first-run",
        "--disable-dev-shm-usage",
        "--hide-scrollbars",
    ])
    .arg(format!("--user-data-dir={}", profile.display()))
    .args(args)
    .arg(url)
    .stdin(std::process::Stdio::null())
    .kill_on_drop(true);
    let out = tokio::time::timeout(Duration::from_secs(120), cmd.output())
        .await
        .context("chromium did not finish within 120 s")?
        .context("running chromium")?;
    if !out.status.success() {
        bail!(
            "chromium {args:?} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The text a person reads in an HTML fragment: tags dropped, the few
/// entities the page uses decoded, whitespace collapsed.
fn text(html: &str) -> String {
    let mut out = String::new();
    let mut in_tag = false;
    for c in html.chars() {
        match c {
            '<' => {
                in_tag = true;
                out.push(' ');
            }
            '>' => in_tag = false,
            c if !in_tag => out.push(c),
            _ => {}
        }
    }
    let out = out
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&nbsp;", " ")
        .replace("&amp;", "&");
    out.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The HTML of the element that starts with `start` (e.g. `<section
/// id="zombies"`), up to its closing `end` tag.
fn element<'a>(dom: &'a str, start: &str, end: &str) -> &'a str {
    let Some(i) = dom.find(start) else {
        panic!("no {start} in the page:\n{dom}")
    };
    let rest = &dom[i..];
    let j = rest.find(end).map_or(rest.len(), |j| j + end.len());
    &rest[..j]
}

/// A PNG's width and height (from its IHDR chunk).
fn png_size(png: &[u8]) -> Option<(u32, u32)> {
    if png.len() < 24 || &png[..8] != b"\x89PNG\r\n\x1a\n" || &png[12..16] != b"IHDR" {
        return None;
    }
    let be = |b: &[u8]| u32::from_be_bytes([b[0], b[1], b[2], b[3]]);
    Some((be(&png[16..20]), be(&png[20..24])))
}

fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target"))
}

fn report(worker: &str, seq: u64, tasks: &[(i64, i64)]) -> Vec<u8> {
    let now = chrono::Utc::now().timestamp_millis();
    AgentReport {
        tty_tasks: 0,
        app_id_sources: None,
        worker: worker.into(),
        agent_version: "e2e".into(),
        seq,
        scan_started_at: now,
        scan_ms: 3,
        exec_base: "/tmp/ds-exec".into(),
        unreadable: 0,
        orders: Vec::new(),
        blind: None,
        tasks: tasks
            .iter()
            .map(|&(task_id, workflow_instance_id)| AgentTask {
                lineage: None,
                task_id,
                workflow_instance_id,
                pids: vec![4242],
                started_at: now - 60_000,
                processes: vec![],
                app_ids: vec![],
            })
            .collect(),
    }
    .to_json()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_page_in_a_real_browser() -> Result<()> {
    if !services_up().await {
        return Ok(());
    }
    let Some(browser) = chromium() else {
        let msg = "chromium not found (Debian package 'chromium'; deploy/dev/services.sh installs it, or set CHROMIUM)";
        if std::env::var("CI").as_deref() == Ok("true") {
            panic!("{msg} (CI=true)");
        }
        eprintln!("SKIPPED: {msg}");
        return Ok(());
    };

    let db = sim_db(SimKind::MySql, "3.2.2").await?;
    let line = db.line;
    let root = unique_root();
    let (w1, w2, w3) = ("10.0.0.11:1234", "10.0.0.12:1234", "10.0.0.13:1234");
    let _m = server(&root, line, NodeKind::Master, "10.0.0.1:5678", &[]).await?;
    let _w1 = server(&root, line, NodeKind::Worker, w1, &[]).await?;
    let _w2 = server(&root, line, NodeKind::Worker, w2, &[]).await?;
    let mut dying = server(&root, line, NodeKind::Worker, w3, &[]).await?;

    // A running workflow of the live master with: a task whose process the
    // agent of w1 sees, one whose process is gone, and two on w3, which
    // dies: one of the batch group (failed by policy), one reported.
    let wf = db.insert_workflow(&WorkflowSpec::default()).await?;
    let task = |name: &str, host: &str, group: &str| {
        let mut t = TaskSpec::new(wf, 1, Some(host));
        t.name = name.into();
        t.worker_group = group.into();
        t
    };
    let running = db.insert_task(&task("load_orders", w1, "default")).await?;
    let gone = db
        .insert_task(&task("export_report", w1, "default"))
        .await?;
    let lost = db.insert_task(&task("sync_users", w3, "default")).await?;
    let failed = db.insert_task(&task("nightly_batch", w3, "batch")).await?;
    // A workflow whose master is gone, and a stalled one (master alive, no
    // unfinished task, started long ago).
    let wf_lost = db
        .insert_workflow(&WorkflowSpec {
            host: Some("10.0.0.9:5678".into()),
            ..Default::default()
        })
        .await?;
    let wf_stalled = db.insert_workflow(&WorkflowSpec::default()).await?;

    // Agents, written straight into ZooKeeper as `ds-reaper agent` would:
    // w1's rewritten every 500 ms listing `running`; w2's written once (it
    // goes stale).
    let zkc = zk::Client::connect(&zk_connect()).await?;
    let dir = format!("{root}/ds-reaper/agents");
    zkc.mkdir(
        &dir,
        &zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all()),
    )
    .await?;
    let ephemeral = zk::CreateMode::Ephemeral.with_acls(zk::Acls::anyone_all());
    let (n1, n2) = (format!("{dir}/{w1}"), format!("{dir}/{w2}"));
    // The first report lists `gone` too: its process is seen, then gone
    // (a task never listed is never process_gone, SPEC §12).
    zkc.create(
        &n1,
        &report(w1, 1, &[(running, wf), (gone, wf)]),
        &ephemeral,
    )
    .await?;
    zkc.create(&n2, &report(w2, 1, &[]), &ephemeral).await?;
    // `gone`'s process ends once the daemon has seen it listed.
    let gone_runs = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    let beat = {
        let zkc = zkc.clone();
        let gone_runs = gone_runs.clone();
        tokio::spawn(async move {
            for seq in 2.. {
                tokio::time::sleep(Duration::from_millis(500)).await;
                let mut tasks = vec![(running, wf)];
                if gone_runs.load(std::sync::atomic::Ordering::SeqCst) {
                    tasks.push((gone, wf));
                }
                if let Err(e) = zkc.set_data(&n1, &report(w1, seq, &tasks), None).await {
                    eprintln!("agent rewrite failed: {e}");
                }
            }
        })
    };

    let policy = "[policy]\nworker_lost = \"report\"\n\
                  [[policy.rules]]\nreason = \"worker_lost\"\nworker_group = \"batch\"\naction = \"fail\"\n";
    let mut d = Daemon::start_with_env(
        db.url(),
        &root,
        policy,
        &[
            ("DS_REAPER__RECONCILE__WORKFLOW_GRACE_PERIOD", "2s"),
            ("DS_REAPER__RECONCILE__PROCESS_GONE_AFTER", "2s"),
            ("DS_REAPER__RECONCILE__AGENT_STALE_AFTER", "5s"),
        ],
    )
    .await?;
    d.wait_ready().await?;
    wait_until("the daemon sees both of w1's task processes", || async {
        let w = d.json("/api/v1/workers").await?;
        Ok(w["workers"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|n| n["host"] == w1 && n["agent"]["fresh"] == true && n["agent"]["tasks"] == 2))
    })
    .await?;
    gone_runs.store(false, std::sync::atomic::Ordering::SeqCst);
    dying.crash().await;

    // Until the daemon's own API shows everything the page is to show.
    let last = std::sync::Mutex::new(String::new());
    let settled = wait_until("zombies, workflows, agents and a failed task", || {
        let d = &d;
        let db = &db;
        let last = &last;
        async move {
            let z = d.json("/api/v1/zombies").await?;
            let w = d.json("/api/v1/workers").await?;
            let f = d.json("/api/v1/workflows").await?;
            let reason_of = |id: i64| {
                z["zombies"]
                    .as_array()
                    .and_then(|v| v.iter().find(|z| z["task_id"] == id))
                    .map(|z| z["reason"].clone())
            };
            let agent_of = |host: &str| {
                w["workers"]
                    .as_array()
                    .and_then(|v| v.iter().find(|n| n["host"] == host))
                    .map(|n| n["agent"].clone())
            };
            let finding = |id: i64| {
                f["workflows"]
                    .as_array()
                    .and_then(|v| v.iter().find(|w| w["workflow_instance_id"] == id))
                    .map(|w| w["reason"].clone())
            };
            let a1 = agent_of(w1).unwrap_or_default();
            let a2 = agent_of(w2).unwrap_or_default();
            let ok = reason_of(gone) == Some("process_gone".into())
                && reason_of(lost) == Some("worker_lost".into())
                && reason_of(running).is_none()
                && a1["fresh"] == true
                && a1["tasks"] == 1
                && a2["fresh"] == false
                && finding(wf_lost) == Some("workflow_master_lost".into())
                && finding(wf_stalled) == Some("workflow_stalled".into())
                && db.task_state(failed).await?.state == 6
                && d.json("/api/v1/status").await?["last_sweep"]["zombies"] == 2;
            *last.lock().unwrap_or_else(|p| p.into_inner()) =
                format!("zombies {z}\nworkers {w}\nworkflows {f}");
            Ok(ok)
        }
    })
    .await;
    if let Err(e) = settled {
        let last = last.lock().unwrap_or_else(|p| p.into_inner()).clone();
        bail!("{e}\nlast seen:\n{last}\nlog:\n{}", d.log_text());
    }
    // The charts span an hour, about 12 s a pixel: until the sweeps cover
    // two columns, each chart is a dot at "now". Wait for lines (tasks and
    // workflows, actions, duration).
    wait_until("the charts draw lines", || async {
        let (_, html) = d.get("/").await?;
        Ok(html.matches("<polyline").count() == 4)
    })
    .await?;

    let profile = tempfile::tempdir()?;
    let url = d.url("/");
    let dom = browse(
        &browser,
        profile.path(),
        &["--dump-dom", "--window-size=1366,900"],
        &url,
    )
    .await?;
    let shots = target_dir().join("e2e-artifacts");
    std::fs::create_dir_all(&shots)?;
    let shots = shots.canonicalize()?;
    let shot = shots.join("status-page.png");
    let _ = std::fs::remove_file(&shot);
    browse(
        &browser,
        profile.path(),
        &[
            &format!("--screenshot={}", shot.display()),
            "--window-size=1366,900",
        ],
        &url,
    )
    .await?;
    std::fs::write(shots.join("status-page.html"), &dom)?;
    let _ = writeln!(
        std::io::stderr(),
        "status page screenshot: {} (DOM: {})",
        shot.display(),
        shots.join("status-page.html").display()
    );

    // The screenshot: a PNG of the laptop-sized window.
    let png =
        std::fs::read(&shot).with_context(|| format!("no screenshot at {}", shot.display()))?;
    assert_eq!(png_size(&png), Some((1366, 900)), "{}", shot.display());
    assert!(
        png.len() > 20_000,
        "a blank screenshot? {} bytes",
        png.len()
    );

    // The same page for a browser that prefers Chinese (Accept-Language).
    let zh_profile = tempfile::tempdir()?;
    let zh_dom = browse(
        &browser,
        zh_profile.path(),
        &[
            "--dump-dom",
            "--window-size=1366,900",
            "--accept-lang=zh-CN,zh",
        ],
        &url,
    )
    .await?;
    let zh_shot = shots.join("status-page-zh.png");
    let _ = std::fs::remove_file(&zh_shot);
    browse(
        &browser,
        zh_profile.path(),
        &[
            &format!("--screenshot={}", zh_shot.display()),
            "--window-size=1366,900",
            "--accept-lang=zh-CN,zh",
        ],
        &url,
    )
    .await?;
    std::fs::write(shots.join("status-page-zh.html"), &zh_dom)?;
    let _ = writeln!(
        std::io::stderr(),
        "Chinese status page screenshot: {}",
        zh_shot.display()
    );
    let zh_png = std::fs::read(&zh_shot)
        .with_context(|| format!("no screenshot at {}", zh_shot.display()))?;
    assert_eq!(
        png_size(&zh_png),
        Some((1366, 900)),
        "{}",
        zh_shot.display()
    );
    assert!(zh_dom.contains("<html lang=\"zh-CN\">"), "{zh_dom}");
    let zh_all = text(&zh_dom);
    for want in [
        "注意: 2 个僵尸任务; 2 个无法推进的工作流; 1 个过期的 agent （所在 Worker 存活）.",
        "僵尸任务 (2)",
        "卡住的工作流 (2)",
        "最近一次扫描",
        "process_gone",
        "worker_lost",
        "export_report",
    ] {
        assert!(
            zh_all.contains(want),
            "the Chinese page lacks {want:?}: {zh_all}"
        );
    }
    assert!(!zh_all.contains("Attention"), "{zh_all}");

    // What a person sees. The whole page: a verdict, no script, nothing
    // fetched from elsewhere, and it refreshes itself.
    assert!(!dom.contains("<script"), "{dom}");
    assert!(!dom.contains("src=\"http"), "{dom}");
    assert!(dom.contains("http-equiv=\"refresh\""), "{dom}");
    let all = text(&dom);
    assert!(
        all.contains("Attention: 2 zombie tasks; 2 workflows that cannot progress; 1 stale agent beside a live worker."),
        "{all}"
    );
    assert!(all.contains("refreshes every 10 s"), "{all}");
    assert!(all.contains("leader · DS 3.2"), "{all}");

    // Cards.
    let cards = text(element(&dom, "<div class=\"cards\"", "</div></a></div>"));
    for want in [
        "Zombie tasks 2",
        "process_gone 1",
        "worker_lost 1",
        "Stuck workflows 2",
        "workflow_master_lost 1",
        "workflow_stalled 1",
        "Live workers 2 agents: 1 fresh · 1 stale · 0 none",
        "Live masters 1 1 recently lost",
        "Registry view valid zookeeper · since",
        "Brake released",
        "Last sweep",
    ] {
        assert!(cards.contains(want), "cards lack {want:?}: {cards}");
    }

    // Zombies: both, with their evidence in words and an age on hover.
    let zs = element(&dom, "<section id=\"zombies\"", "</section>");
    let zt = text(zs);
    assert!(zt.starts_with("Zombie tasks (2)"), "{zt}");
    for want in [
        format!("{gone} export_report SHELL {wf} {w1} process_gone process missing since"),
        format!("{lost} sync_users SHELL {wf} {w3} worker_lost host lost"),
    ] {
        assert!(zt.contains(&want), "zombies lack {want:?}: {zt}");
    }
    assert!(
        !zt.contains("load_orders") && !zt.contains("nightly_batch"),
        "{zt}"
    );
    assert!(
        zs.contains(" ago</span>") && zs.contains("<span title=\"20"),
        "{zs}"
    );

    // Workflows: the lost master's and the stalled one.
    let wt = text(element(&dom, "<section id=\"workflows\"", "</section>"));
    assert!(wt.starts_with("Stuck workflows (2)"), "{wt}");
    for want in [
        format!("{wf_lost} wf RUNNING_EXECUTION 10.0.0.9:5678 lost workflow_master_lost"),
        format!("{wf_stalled} wf RUNNING_EXECUTION 10.0.0.1:5678 alive workflow_stalled"),
        "last progress".into(),
        "no unfinished task".into(),
    ] {
        assert!(wt.contains(&want), "workflows lack {want:?}: {wt}");
    }

    // Workers with their agents; the lost one; the master.
    let ws = element(&dom, "<section id=\"workers\"", "</section>");
    let wkt = text(ws);
    assert!(
        wkt.starts_with("Workers (2) agents: 1 fresh, 1 stale, 0 none"),
        "{wkt}"
    );
    assert!(wkt.contains(&format!("{w1} {w1}")), "{wkt}");
    assert!(wkt.contains("fresh 1 task process · report"), "{wkt}");
    assert!(wkt.contains("stale 0 task processes · report"), "{wkt}");
    assert!(
        ws.contains("<tr class=\"warn\">"),
        "the stale agent's row stands out: {ws}"
    );
    let lt = text(element(&dom, "<section id=\"lost\"", "</section>"));
    assert!(lt.contains(&format!("{w3} worker")), "{lt}");
    let mt = text(element(&dom, "<section id=\"masters\"", "</section>"));
    assert!(mt.contains("10.0.0.1:5678"), "{mt}");

    // The audit: the batch task failed by policy.
    let at = text(element(&dom, "<section id=\"audit\"", "</section>"));
    assert!(
        at.contains(&format!(
            "done task {failed} nightly_batch worker_lost fail RUNNING_EXECUTION → FAILURE daemon"
        )),
        "{at}"
    );

    // Charts: three inline SVGs with a title, axes, a line and last values.
    let charts = element(&dom, "<section id=\"charts\"", "</section>");
    assert_eq!(charts.matches("<svg").count(), 3, "{charts}");
    for title in ["Zombies found", "Actions taken", "Sweep duration"] {
        assert!(
            charts.contains(&format!(">{title}</text>")),
            "{title}: {charts}"
        );
    }
    assert_eq!(charts.matches(">-60 min</text>").count(), 3, "{charts}");
    assert_eq!(charts.matches(">now</text>").count(), 3, "{charts}");
    assert!(!charts.contains("no sweep in the last"), "{charts}");
    let svgs: Vec<&str> = charts.split("<svg").skip(1).collect();
    // Zombies: tasks and workflows, 2 each at the last sweep, on one scale.
    assert_eq!(svgs[0].matches("<polyline").count(), 2, "{}", svgs[0]);
    assert!(
        text(svgs[0]).contains("■ tasks 2 ■ workflows 2"),
        "{}",
        text(svgs[0])
    );
    // Actions: the sweep that failed the batch task is a point at the top
    // of the box (y = 26: 1 on an axis topped at 1); none since.
    assert!(svgs[1].contains("<polyline"), "{}", svgs[1]);
    assert!(svgs[1].contains(",26.0"), "{}", svgs[1]);
    assert!(
        text(svgs[1]).contains("Actions taken ■ last 0"),
        "{}",
        text(svgs[1])
    );
    // Duration: a line and the last sweep's time in ms or s.
    assert!(svgs[2].contains("<polyline"), "{}", svgs[2]);
    assert!(
        svgs[2].contains(" ms</text>") || svgs[2].contains(" s</text>"),
        "{}",
        svgs[2]
    );
    // Every plotted point lies inside the SVG's box.
    for pts in charts.split("points=\"").skip(1) {
        for xy in pts.split('"').next().unwrap_or("").split(' ') {
            let (x, y) = xy.split_once(',').context("x,y")?;
            let (x, y): (f64, f64) = (x.parse()?, y.parse()?);
            assert!(
                (0.0..=360.0).contains(&x) && (0.0..=150.0).contains(&y),
                "{xy}"
            );
        }
    }

    beat.abort();
    drop(zkc);
    assert_eq!(d.terminate().await?, Some(0));
    cleanup(db, &root).await
}
