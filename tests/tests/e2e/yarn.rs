//! Remote YARN applications (SPEC §17) against a real ResourceManager: a
//! MiniYARNCluster started by tests/yarn/launch.sh (Hadoop's
//! hadoop-client-minicluster from Maven Central, cached outside the
//! repository) with a NodeManager in a JVM of its own, real applications
//! that are RUNNING (their application master registers, then only
//! sleeps), a real agent reading their ids from `appInfo.log` and from the
//! task's log, and the daemon. Needs a JDK and Maven (`tests/yarn/launch.sh
//! prepare`: about 20 s cold) and runs about a minute: on with `YARN_TESTS=1`,
//! as `scripts/test.sh` and `scripts/yarn.sh` set, skipped (and said so)
//! otherwise; with it set, a launcher that cannot start fails the test.

use ds_sim::db::{SimKind, TaskSpec, WorkflowSpec};
use ds_sim::procs::{ExecBase, DEFINITION, DEFINITION_VERSION};
use reaper_e2e::*;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout};

/// Items 7-10 of issue 39 (foreign, shared and another user's applications;
/// a host that reads no id source; ghost applications; the kill's outcome
/// after the RM's final state) on the same cluster helpers.
mod evidence;

const WORKER: &str = "10.0.0.11:1234";

fn sql_now() -> String {
    chrono::Utc::now().format("%Y-%m-%d %H:%M:%S").to_string()
}

/// Reads the launcher's stdout to its end, passing on the protocol's lines.
fn drain(mut lines: Lines<BufReader<ChildStdout>>) -> tokio::sync::mpsc::UnboundedReceiver<String> {
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Ok(Some(line)) = lines.next_line().await {
            if ["rm ", "app ", "error "]
                .iter()
                .any(|p| line.starts_with(p))
            {
                let _ = tx.send(line);
            }
        }
    });
    rx
}

/// The rest of the launcher's next protocol line, which must start with
/// `prefix` (an `error ` line fails).
async fn answer(
    out: &mut tokio::sync::mpsc::UnboundedReceiver<String>,
    prefix: &str,
) -> anyhow::Result<String> {
    match out.recv().await {
        Some(line) => line
            .strip_prefix(prefix)
            .map(|r| r.trim().to_string())
            .ok_or_else(|| anyhow::anyhow!("the launcher said {line:?}")),
        None => anyhow::bail!("the launcher ended without {prefix:?}"),
    }
}

/// The launcher: a MiniYARNCluster and its RM's web address.
struct MiniYarn {
    child: Child,
    stdin: ChildStdin,
    /// The protocol's lines; the launcher's log lines, on the same stdout,
    /// are read and dropped so that the JVM never blocks on a full pipe.
    out: tokio::sync::mpsc::UnboundedReceiver<String>,
    url: String,
    _tmp: tempfile::TempDir,
}

impl MiniYarn {
    /// Whether the MiniYARNCluster tests run (said when not).
    fn on() -> bool {
        if std::env::var("YARN_TESTS").as_deref() != Ok("1") {
            eprintln!("SKIPPED: the MiniYARNCluster tests run with YARN_TESTS=1 (scripts/yarn.sh)");
            return false;
        }
        true
    }

    async fn start() -> anyhow::Result<Option<MiniYarn>> {
        if !Self::on() {
            return Ok(None);
        }
        Ok(Some(Self::launch(&[]).await?.0))
    }

    /// The launcher with `args`; also the RM's HA state when it says one.
    async fn launch(args: &[&str]) -> anyhow::Result<(MiniYarn, Option<String>)> {
        let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("yarn/launch.sh");
        let tmp = tempfile::tempdir()?;
        let mut child = tokio::process::Command::new("bash")
            .arg(&script)
            .arg("run")
            .args(args)
            .env("TMPDIR", tmp.path())
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::fs::File::create(tmp.path().join("yarn.log"))?)
            .kill_on_drop(true)
            .spawn()?;
        let stdin = child.stdin.take().expect("piped");
        let mut out = drain(BufReader::new(child.stdout.take().expect("piped")).lines());
        let first =
            tokio::time::timeout(std::time::Duration::from_secs(300), answer(&mut out, "rm "))
                .await
                .map_err(|_| anyhow::anyhow!("the ResourceManager did not start within 300 s"))?;
        let first = first.map_err(|e| {
            let log = std::fs::read_to_string(tmp.path().join("yarn.log")).unwrap_or_default();
            let tail: String = log.lines().rev().take(30).collect::<Vec<_>>().join("\n");
            anyhow::anyhow!("{e}; the launcher's stderr ends:\n{tail}")
        })?;
        let mut words = first.split_whitespace();
        let url = words.next().unwrap_or_default().to_string();
        let ha = words.next().map(str::to_string);
        Ok((
            MiniYarn {
                child,
                stdin,
                out,
                url,
                _tmp: tmp,
            },
            ha,
        ))
    }

    /// Submits an application (RUNNING once a NodeManager runs its master;
    /// ACCEPTED for good without one, as with the HA pair); its id.
    async fn submit(&mut self, name: &str) -> anyhow::Result<String> {
        self.stdin
            .write_all(format!("submit {name}\n").as_bytes())
            .await?;
        self.stdin.flush().await?;
        answer(&mut self.out, "app ").await
    }

    /// Submits an application as `user` (simple auth: the RM's `user` of
    /// the application); its id.
    async fn submit_as(&mut self, user: &str, name: &str) -> anyhow::Result<String> {
        self.stdin
            .write_all(format!("submit-as {user} {name}\n").as_bytes())
            .await?;
        self.stdin.flush().await?;
        answer(&mut self.out, "app ").await
    }

    /// The RM's state of `id`, over its REST API.
    async fn state(&self, id: &str) -> anyhow::Result<String> {
        Ok(self.app(id).await?["state"]
            .as_str()
            .unwrap_or_default()
            .to_string())
    }

    /// The RM's whole answer about `id` (`GET /ws/v1/cluster/apps/<id>`'s `app`).
    async fn app(&self, id: &str) -> anyhow::Result<serde_json::Value> {
        let v: serde_json::Value = reqwest::get(format!("{}/ws/v1/cluster/apps/{id}", self.url))
            .await?
            .json()
            .await?;
        Ok(v["app"].clone())
    }

    /// The RM's HA state (`/ws/v1/cluster/info`, which a standby answers itself).
    async fn ha_state(&self) -> anyhow::Result<String> {
        let v: serde_json::Value = reqwest::get(format!("{}/ws/v1/cluster/info", self.url))
            .await?
            .json()
            .await?;
        Ok(v["clusterInfo"]["haState"]
            .as_str()
            .unwrap_or_default()
            .to_string())
    }

    async fn stop(mut self) {
        let _ = self.stdin.write_all(b"quit\n").await;
        let _ = tokio::time::timeout(std::time::Duration::from_secs(20), self.child.wait()).await;
        let _ = self.child.kill().await;
    }
}

/// A lost worker's SPARK task whose applications run is held (not failed);
/// the ids (one from `appInfo.log`, one from the 3.2 task log) outlive the
/// agent, the worker and a daemon restarted between learning them and the
/// loss; a ghost's view shows its application; with `kill_remote_apps` the
/// daemon kills both, and the task row is written only after they are
/// KILLED. An RM that cannot be reached holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_application_holds_its_lost_task_and_kill_ends_it_first() -> anyhow::Result<()> {
    if !services_up().await {
        return Ok(());
    }
    let Some(mut yarn) = MiniYarn::start().await? else {
        return Ok(());
    };
    let started = std::time::Instant::now();
    let db = sim_db(SimKind::MySql, "3.2.2").await?;
    let line = db.line;
    let root = unique_root();
    let (_m, [mut w1, _w2, _w3]) =
        master_and_three_workers(&zk_connect(), &root, line, "10.0.0.1:5678", long_ago()).await?;
    let wf = db.insert_workflow(&WorkflowSpec::default()).await?;
    let mut spec = TaskSpec::new(wf, 1, Some(WORKER));
    spec.task_type = "SPARK".into();
    let task = db.insert_task(&spec).await?;
    // a SPARK task on the same worker whose row ends while its process (and
    // its application) go on: a ghost
    let ghost_task = db.insert_task(&spec).await?;
    let app1 = yarn.submit("spark-app-info").await?;
    let app2 = yarn.submit("spark-task-log").await?;
    let app3 = yarn.submit("spark-ghost").await?;
    // a NodeManager runs their application masters, which register
    wait_until("the applications run", || async {
        for app in [&app1, &app2, &app3] {
            if yarn.state(app).await? != "RUNNING" {
                return Ok(false);
            }
        }
        Ok(true)
    })
    .await?;

    // the worker side: the task's process writes app1 into appInfo.log (as
    // DS's aop collector does); its 3.2 task log names app2
    let exec = ExecBase::new()?;
    let logs = tempfile::tempdir()?;
    let log = logs
        .path()
        .join(chrono::Local::now().format("%Y%m%d").to_string())
        .join(DEFINITION.to_string())
        .join(DEFINITION_VERSION.to_string())
        .join(wf.to_string())
        .join(format!("{task}.log"));
    std::fs::create_dir_all(log.parent().unwrap())?;
    std::fs::write(&log, format!("INFO Client: Submitted application {app2}\n"))?;
    let mut p = exec.start_ds_command(
        line,
        wf,
        task,
        &format!("echo {app1} >> appInfo.log\nsleep 86400"),
    )?;
    let mut p_ghost = exec.start_ds_command(
        line,
        wf,
        ghost_task,
        &format!("echo {app3} >> appInfo.log\nsleep 86400"),
    )?;
    let agent_extra = format!("task_log_base = \"{}\"\n", logs.path().display());
    let mut agent = AgentProcess::start(&root, WORKER, exec.path(), &agent_extra).await?;

    let cfg = format!(
        "[policy]\nworker_lost = \"fail\"\n\n[yarn]\nresource_managers = [\"{}\"]\ntimeout = \"2s\"\n",
        yarn.url
    );
    let env = [
        ("DS_REAPER__RECONCILE__AGENT_STALE_AFTER", "3s"),
        ("DS_REAPER__RECONCILE__GHOST_AFTER", "3s"),
    ];
    let mut d = Daemon::start_with_env(db.url(), &root, &cfg, &env).await?;
    d.wait_ready().await?;
    let ids_file = d.dir.path().join("remote-apps.jsonl");
    wait_until("the ids are learned and kept on disk", || async {
        let text = std::fs::read_to_string(&ids_file).unwrap_or_default();
        Ok([&app1, &app2, &app3].iter().all(|a| text.contains(*a)))
    })
    .await?;

    // The ghost's view carries its application with the RM's state, as a
    // zombie's does.
    db.exec(&format!(
        "UPDATE t_ds_task_instance SET state = 7, end_time = '{}' WHERE id = {ghost_task}",
        sql_now()
    ))
    .await?;
    wait_until("the ghost shows its remote application", || async {
        let g = d.json("/api/v1/ghosts").await?;
        Ok(g["ghosts"].as_array().into_iter().flatten().any(|x| {
            x["task_id"] == ghost_task
                && x["remote_apps"]
                    == serde_json::json!([
                        {"id": app3, "state": "RUNNING", "final_status": "UNDEFINED"}
                    ])
        }))
    })
    .await?;

    // The ids outlive a daemon restart between learning them and the
    // worker's loss. So that nothing tells the restarted daemon again, the
    // task's files lose them and a fresh agent (whose memory of ids starts
    // empty) lists the task without them.
    std::fs::remove_file(exec.execute_path(line, wf, task)?.join("appInfo.log"))?;
    std::fs::write(&log, "")?;
    assert_eq!(agent.stop().await?, Some(0));
    agent = AgentProcess::start(&root, WORKER, exec.path(), &agent_extra).await?;
    let zk = zookeeper_client::Client::connect(&zk_connect()).await?;
    let node = format!("{root}/ds-reaper/agents/{WORKER}");
    wait_until("the fresh agent lists the task with no ids", || async {
        let Ok((data, _)) = zk.get_data(&node).await else {
            return Ok(false);
        };
        let r: serde_json::Value = serde_json::from_slice(&data).unwrap_or_default();
        Ok(r["tasks"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|t| t["task_id"] == task && t["app_ids"].as_array().is_none_or(|a| a.is_empty())))
    })
    .await?;
    d.crash_and_restart(&env).await?;
    d.wait_ready().await?;
    // the restarted daemon compacted the file: one line per task
    let kept: Vec<serde_json::Value> = std::fs::read_to_string(&ids_file)?
        .lines()
        .map(serde_json::from_str)
        .collect::<Result<_, _>>()?;
    assert_eq!(kept.len(), 2, "{kept:?}");
    assert!(
        kept.iter().any(|l| l["task_id"] == task
            && l["app_ids"] == serde_json::json!([app1.clone(), app2.clone()])),
        "{kept:?}"
    );
    d.wait_sweeps(2).await?;
    assert!(
        d.json("/api/v1/zombies").await?["zombies"]
            .as_array()
            .into_iter()
            .flatten()
            .all(|z| z["task_id"] != task),
        "its worker lives"
    );

    // Then the worker host dies with its agent and its processes: only the
    // file has the ids.
    w1.crash().await;
    assert_eq!(agent.stop().await?, Some(0));
    p.kill()?;
    p_ghost.kill()?;
    wait_until("the task is held as remote_app_running", || async {
        let zs = d.json("/api/v1/zombies").await?;
        Ok(zs["zombies"].as_array().into_iter().flatten().any(|z| {
            z["task_id"] == task
                && z["reason"] == "worker_lost"
                && z["note"] == "remote_app_running"
                && z["remote_apps"]
                    .as_array()
                    .is_some_and(|a| a.len() == 2 && a.iter().all(|x| x["state"] == "RUNNING"))
        }))
    })
    .await?;
    // and again after a restart that follows the loss
    d.crash_and_restart(&env).await?;
    d.wait_ready().await?;
    wait_until("the task is held again after the restart", || async {
        let zs = d.json("/api/v1/zombies").await?;
        Ok(zs["zombies"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|z| z["task_id"] == task && z["note"] == "remote_app_running"))
    })
    .await?;
    d.wait_sweeps(3).await?;
    assert_eq!(db.task_state(task).await?.state, 1, "held, not failed");
    assert!(d.audit_events("intent", Some(task)).is_empty());
    assert_eq!(
        d.metric("ds_reaper_remote_apps{state=\"running\"}").await?,
        Some(2.0)
    );
    // Not even a forced manual reap writes while the applications run.
    let cli = CliConfig::new(
        db.url(),
        &root,
        &format!("[yarn]\nresource_managers = [\"{}\"]\n", yarn.url),
    )?;
    std::fs::copy(&ids_file, cli.dir.path().join("remote-apps.jsonl"))?;
    let (code, out, err) = cli
        .run(
            &["reap", "--task-id", &task.to_string(), "--force", "--yes"],
            &[],
        )
        .await?;
    assert_ne!(code, 0, "stdout {out}\nstderr {err}");
    assert!(
        err.contains("remote_app_running") && err.contains(&app1),
        "{err}"
    );
    assert_eq!(db.task_state(task).await?.state, 1, "the reap was refused");
    // `check` shows the applications with the RM's states.
    let (_, out, err) = cli.run(&["check", "--format", "json"], &[]).await?;
    let v: serde_json::Value =
        serde_json::from_str(&out).map_err(|e| anyhow::anyhow!("{e}: {out}\n{err}"))?;
    let found = v["zombies"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|z| z["task_id"] == task)
        .cloned()
        .unwrap_or_default();
    let states: Vec<_> = found["remote_apps"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|a| {
            (
                a["id"].as_str().unwrap_or_default().to_string(),
                a["state"].clone(),
            )
        })
        .collect();
    assert_eq!(
        states,
        [
            (app1.clone(), serde_json::json!("RUNNING")),
            (app2.clone(), serde_json::json!("RUNNING"))
        ],
        "{out}"
    );

    // The RM down: a daemon pointed at a dead RM holds (remote_app_unknown),
    // and a daemon with kill on does not write either.
    let dead = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?;
    d.terminate().await?;
    let dead_cfg = format!(
        "[policy]\nworker_lost = \"fail\"\nkill_remote_apps = true\n\n[yarn]\nresource_managers = [\"http://{dead}\"]\ntimeout = \"1s\"\n"
    );
    let ids = std::fs::read_to_string(&ids_file)?;
    let mut down = Daemon::start(db.url(), &root, &dead_cfg).await?;
    std::fs::write(down.dir.path().join("remote-apps.jsonl"), &ids)?;
    down.crash_and_restart(&[]).await?;
    down.wait_ready().await?;
    wait_until("held as remote_app_unknown with the RM down", || async {
        let zs = down.json("/api/v1/zombies").await?;
        Ok(zs["zombies"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|z| z["task_id"] == task && z["note"] == "remote_app_unknown"))
    })
    .await?;
    down.wait_sweeps(3).await?;
    assert_eq!(db.task_state(task).await?.state, 1, "the RM down holds");
    assert_eq!(yarn.state(&app1).await?, "RUNNING");
    down.terminate().await?;

    // With kill: both applications are killed, then the task is failed.
    let kill_cfg = format!(
        "[policy]\nworker_lost = \"fail\"\nkill_remote_apps = true\n\n[yarn]\nresource_managers = [\"{}\"]\ntimeout = \"2s\"\n",
        yarn.url
    );
    let mut k = Daemon::start(db.url(), &root, &kill_cfg).await?;
    std::fs::write(k.dir.path().join("remote-apps.jsonl"), &ids)?;
    k.crash_and_restart(&[]).await?;
    k.wait_ready().await?;
    wait_until("the task is failed", || async {
        Ok(db.task_state(task).await?.state == 6)
    })
    .await?;
    assert_eq!(yarn.state(&app1).await?, "KILLED");
    assert_eq!(yarn.state(&app2).await?, "KILLED");
    let records = k.audit();
    let pos = |pred: &dyn Fn(&serde_json::Value) -> bool| records.iter().position(pred);
    let task_intent =
        pos(&|r| r["event"] == "intent" && r["kind"] == "task" && r["task_id"] == task)
            .expect("a task intent");
    for app in [&app1, &app2] {
        let done =
            pos(&|r| r["event"] == "done" && r["kind"] == "remote_app" && r["app_id"] == **app)
                .unwrap_or_else(|| panic!("a remote_app done for {app}: {records:#?}"));
        assert!(done < task_intent, "{app} killed before the task's write");
    }
    assert_eq!(
        k.metric("ds_reaper_remote_app_kills_total{result=\"killed\"}")
            .await?,
        Some(2.0)
    );
    eprintln!(
        "MiniYARNCluster scenario took {:?} after the cluster started",
        started.elapsed()
    );
    k.terminate().await?;
    yarn.stop().await;
    cleanup(db, &root).await
}

/// A port below the ephemeral range (32768 and up on Linux), where the
/// servers the other tests bind to port 0 never land; free when asked.
fn low_port() -> u16 {
    use std::sync::atomic::{AtomicU16, Ordering};
    static NEXT: AtomicU16 = AtomicU16::new(0);
    let seed = (std::process::id() as u16).wrapping_mul(7919);
    loop {
        let p = 20_000 + (seed.wrapping_add(NEXT.fetch_add(1, Ordering::Relaxed)) % 12_000);
        if std::net::TcpListener::bind(("127.0.0.1", p)).is_ok() {
            return p;
        }
    }
}

/// The HA pair's settings (both RMs' addresses, the elector's ZooKeeper
/// under `root`); returns the two web ports.
fn write_ha_conf(conf: &std::path::Path, root: &str) -> anyhow::Result<Vec<u16>> {
    let mut lines = vec![
        "yarn.resourcemanager.ha.enabled=true".to_string(),
        "yarn.resourcemanager.ha.rm-ids=rm1,rm2".into(),
        format!(
            "yarn.resourcemanager.cluster-id=ds-reaper-{}",
            root.replace('/', "-")
        ),
        format!("hadoop.zk.address={}", zk_connect()),
        format!("yarn.resourcemanager.zk-address={}", zk_connect()),
        format!("yarn.resourcemanager.ha.automatic-failover.zk-base-path={root}/yarn-leader"),
    ];
    let mut web = Vec::new();
    for rm in ["rm1", "rm2"] {
        for key in [
            "address",
            "scheduler.address",
            "resource-tracker.address",
            "admin.address",
            "webapp.address",
            "webapp.https.address",
        ] {
            let port = low_port();
            if key == "webapp.address" {
                web.push(port);
            }
            lines.push(format!("yarn.resourcemanager.{key}.{rm}=127.0.0.1:{port}"));
        }
    }
    std::fs::write(conf, lines.join("\n") + "\n")?;
    Ok(web)
}

/// Two real ResourceManagers in RM HA (one JVM each, the elector on a
/// ZooKeeper root of the test's own): the standby answers a real 307 to the
/// active, and ds-reaper gets the application's real state through it and
/// kills through it (a PUT followed by hand, its body kept).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standby_rms_redirect_is_followed_to_the_active_for_state_and_kill() -> anyhow::Result<()>
{
    if !services_up().await || !MiniYarn::on() {
        return Ok(());
    }
    let root = unique_root();
    let conf_dir = tempfile::tempdir()?;
    let conf = conf_dir.path().join("ha.conf");
    let conf_arg = conf.display().to_string();
    // A bind can still lose a race with the other tests' servers: the pair
    // is started again on other ports then.
    let mut tries = 0;
    let (mut active, standby, web) = loop {
        tries += 1;
        let web = write_ha_conf(&conf, &root)?;
        // rm1 first: it takes the lead; rm2 then stands by
        let pair = async {
            let (active, _) = MiniYarn::launch(&["ha", "rm1", &conf_arg]).await?;
            wait_until("rm1 is active", || async {
                Ok(active.ha_state().await.ok().as_deref() == Some("ACTIVE"))
            })
            .await?;
            let (standby, _) = MiniYarn::launch(&["ha", "rm2", &conf_arg]).await?;
            anyhow::Ok((active, standby))
        }
        .await;
        match pair {
            Ok((a, s)) => break (a, s, web),
            Err(e) if tries < 3 && e.to_string().contains("BindException") => {
                eprintln!("the RM pair did not start ({e}); again on other ports");
            }
            Err(e) => return Err(e),
        }
    };
    assert_eq!(standby.ha_state().await?, "STANDBY");
    assert_eq!(active.ha_state().await?, "ACTIVE");
    let app = active.submit("spark-ha").await?;
    assert_eq!(active.state(&app).await?, "ACCEPTED");

    // the standby's own answer: a redirect to the active, not the state
    let raw = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()?
        .get(format!("{}/ws/v1/cluster/apps/{app}", standby.url))
        .send()
        .await?;
    assert_eq!(raw.status().as_u16(), 307);
    let location = raw
        .headers()
        .get("Location")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    assert!(location.contains(&format!(":{}/", web[0])), "{location}");

    // A lost worker's SPARK task whose application id was learned earlier.
    let db = sim_db(SimKind::MySql, "3.2.2").await?;
    let line = db.line;
    let (_m, [mut w1, _w2, _w3]) =
        master_and_three_workers(&zk_connect(), &root, line, "10.0.0.1:5678", long_ago()).await?;
    let wf = db.insert_workflow(&WorkflowSpec::default()).await?;
    let mut spec = TaskSpec::new(wf, 1, Some(WORKER));
    spec.task_type = "SPARK".into();
    let task = db.insert_task(&spec).await?;
    let ids = format!(
        "{{\"task_id\":{task},\"app_id\":\"{app}\",\"host\":\"{WORKER}\",\"learned_at\":\"{}\"}}\n",
        chrono::Utc::now().to_rfc3339()
    );

    // [standby, active]: held on the real state, asked of the standby first
    let cfg = format!(
        "[policy]\nworker_lost = \"fail\"\n\n[yarn]\nresource_managers = [\"{}\", \"{}\"]\ntimeout = \"5s\"\n",
        standby.url, active.url
    );
    let mut d = Daemon::start(db.url(), &root, &cfg).await?;
    std::fs::write(d.dir.path().join("remote-apps.jsonl"), &ids)?;
    d.crash_and_restart(&[]).await?;
    d.wait_ready().await?;
    w1.crash().await;
    wait_until("held on the active's state, asked via the standby", || async {
        let zs = d.json("/api/v1/zombies").await?;
        Ok(zs["zombies"].as_array().into_iter().flatten().any(|z| {
            z["task_id"] == task
                && z["note"] == "remote_app_running"
                && z["remote_apps"]
                    == serde_json::json!([{"id": app, "state": "ACCEPTED", "final_status": "UNDEFINED"}])
        }))
    })
    .await?;
    assert_eq!(db.task_state(task).await?.state, 1);
    d.terminate().await?;

    // Only the standby named: its redirect leads to an RM the configuration
    // does not name, which is never followed (SPEC §17: anything could
    // answer there) — the state is unknown, the task held, nothing killed.
    let lone_cfg = format!(
        "[policy]\nworker_lost = \"fail\"\nkill_remote_apps = true\n\n[yarn]\nresource_managers = [\"{}\"]\ntimeout = \"5s\"\n",
        standby.url
    );
    let mut l = Daemon::start(db.url(), &root, &lone_cfg).await?;
    std::fs::write(l.dir.path().join("remote-apps.jsonl"), &ids)?;
    l.crash_and_restart(&[]).await?;
    l.wait_ready().await?;
    wait_until(
        "held: the standby's redirect leads outside resource_managers",
        || async {
            let zs = l.json("/api/v1/zombies").await?;
            Ok(zs["zombies"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|z| z["task_id"] == task && z["note"] == "remote_app_unknown"))
        },
    )
    .await?;
    assert_eq!(db.task_state(task).await?.state, 1);
    assert_eq!(active.state(&app).await?, "ACCEPTED");
    l.terminate().await?;

    // Both named, the standby first: the state and the kill both go through
    // its redirect; the task is written only once the application is KILLED.
    let kill_cfg = format!(
        "[policy]\nworker_lost = \"fail\"\nkill_remote_apps = true\n\n[yarn]\nresource_managers = [\"{}\", \"{}\"]\ntimeout = \"5s\"\n",
        standby.url, active.url
    );
    let mut k = Daemon::start(db.url(), &root, &kill_cfg).await?;
    std::fs::write(k.dir.path().join("remote-apps.jsonl"), &ids)?;
    k.crash_and_restart(&[]).await?;
    k.wait_ready().await?;
    wait_until("the task is failed", || async {
        Ok(db.task_state(task).await?.state == 6)
    })
    .await?;
    assert_eq!(active.state(&app).await?, "KILLED");
    let records = k.audit();
    assert!(
        records
            .iter()
            .any(|r| r["event"] == "done" && r["kind"] == "remote_app" && r["app_id"] == app),
        "{records:#?}"
    );
    k.terminate().await?;
    standby.stop().await;
    active.stop().await;
    cleanup(db, &root).await
}
