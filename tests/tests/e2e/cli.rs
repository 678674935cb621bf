//! The command line (SPEC §7): `check` and `reap` exit codes and output.

use ds_sim::db::{SimKind, TaskSpec, WorkflowSpec};
use reaper_core::NodeKind;
use reaper_e2e::*;

fn closed_port() -> u16 {
    // Bound then released at once: nothing listens there.
    free_port()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_exit_codes_and_json() -> anyhow::Result<()> {
    if !services_up().await {
        return Ok(());
    }
    let db = sim_db(SimKind::MySql, "3.2.2").await?;
    let line = db.line;
    let root = unique_root();
    let _m = server(&root, line, NodeKind::Master, "10.0.0.1:5678", &[]).await?;
    let _w1 = server(&root, line, NodeKind::Worker, "10.0.0.11:1234", &[]).await?;
    let _w2 = server(&root, line, NodeKind::Worker, "10.0.0.12:1234", &[]).await?;
    let wf = db.insert_workflow(&WorkflowSpec::default()).await?;
    let live = db
        .insert_task(&TaskSpec::new(wf, 1, Some("10.0.0.11:1234")))
        .await?;
    let cfg = CliConfig::new(db.url(), &root, "[policy]\nworker_lost = \"fail\"\n")?;

    // 0: no zombie.
    let (code, out, err) = cfg.run(&["check", "--format", "json"], &[]).await?;
    assert_eq!(code, 0, "stdout {out}\nstderr {err}");
    let doc: serde_json::Value = serde_json::from_str(&out)?;
    assert_eq!(doc["zombies"].as_array().map(Vec::len), Some(0), "{doc:#}");
    assert_eq!(doc["ds_line"], "3.2");

    // 1: a task on a host never seen: lost for an unknown time.
    let mut spec = TaskSpec::new(wf, 1, Some("10.9.9.9:1234"));
    spec.name = "orphan".into();
    let orphan = db.insert_task(&spec).await?;
    let (code, out, err) = cfg.run(&["check", "--format", "json"], &[]).await?;
    assert_eq!(code, 1, "stdout {out}\nstderr {err}");
    let doc: serde_json::Value = serde_json::from_str(&out)?;
    let zs = doc["zombies"].as_array().expect("zombies array");
    assert_eq!(zs.len(), 1, "{doc:#}");
    let z = &zs[0];
    assert_eq!(z["task_id"], orphan);
    assert_eq!(z["task_name"], "orphan");
    assert_eq!(z["host"], "10.9.9.9:1234");
    assert_eq!(z["reason"], "worker_lost");
    assert!(z["evidence"].is_object(), "{z:#}");
    assert!(
        z["evidence"].get("absent_for_seconds").is_some()
            && z["evidence"]["absent_for_seconds"].is_null(),
        "unseen loss has an unknown duration: {z:#}"
    );
    assert_eq!(z["action"], "fail", "the action policy would take");
    assert_eq!(z["owner_master_alive"], true);
    // check never writes.
    assert_eq!(db.task_state(orphan).await?.state, 1);
    assert_eq!(db.task_state(live).await?.state, 1);
    // The table says the same, with exit 1.
    let (code, out, _) = cfg.run(&["check"], &[]).await?;
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains(&orphan.to_string()) && out.contains("worker_lost"),
        "{out}"
    );
    // --observe watches first; the unseen host is still unknown-duration.
    let (code, out, err) = cfg
        .run(&["check", "--format", "json", "--observe", "2s"], &[])
        .await?;
    assert_eq!(code, 1, "{out}{err}");
    let doc: serde_json::Value = serde_json::from_str(&out)?;
    assert!(doc["zombies"][0]["evidence"]["absent_for_seconds"].is_null());

    // 2: bad config, every problem on its own line naming the key.
    let bad = CliConfig::new(
        db.url(),
        &root,
        "[policy]\nworker_lost = \"explode\"\nno_such_key = 1\n",
    )?;
    let (code, out, err) = bad
        .run(
            &["check"],
            &[("DS_REAPER__RECONCILE__GRACE_PERIOD", "soon")],
        )
        .await?;
    assert_eq!(code, 2, "stdout {out}\nstderr {err}");
    let lines: Vec<&str> = err.lines().collect();
    for key in [
        "policy.worker_lost",
        "policy.no_such_key",
        "DS_REAPER__RECONCILE__GRACE_PERIOD",
    ] {
        assert!(
            lines.iter().filter(|l| l.contains(key)).count() == 1,
            "one line naming {key}:\n{err}"
        );
    }
    let (code, _, err2) = bad.run(&["config", "check"], &[]).await?;
    assert_eq!(code, 2, "{err2}");
    assert!(err2.contains("policy.worker_lost"), "{err2}");
    let (code, _, err3) = cfg
        .run(&["check"], &[("DS_REAPER__RECONCILE__NOPE", "1")])
        .await?;
    assert_eq!(code, 2, "{err3}");
    assert!(err3.contains("DS_REAPER__RECONCILE__NOPE"), "{err3}");

    // 3: ZooKeeper unreachable.
    let zk_down = format!("127.0.0.1:{}", closed_port());
    let (code, out, err) = cfg
        .run(&["check"], &[("DS_REAPER__ZOOKEEPER__CONNECT", &zk_down)])
        .await?;
    assert_eq!(code, 3, "stdout {out}\nstderr {err}");
    assert!(err.to_lowercase().contains("zookeeper"), "{err}");

    // 3: database unreachable.
    let db_down = format!("mysql://ds:ds@127.0.0.1:{}/nothing", closed_port());
    let (code, out, err) = cfg
        .run(&["check"], &[("DS_REAPER__DATABASE__URL", &db_down)])
        .await?;
    assert_eq!(code, 3, "stdout {out}\nstderr {err}");
    assert!(err.to_lowercase().contains("database"), "{err}");

    cleanup(db, &root).await
}

/// Issue 24 item 4: what a person reads shows no Rust `Debug` forms.
fn assert_readable(out: &str, err: &str) {
    for text in [out, err] {
        for bad in ["Some(", "None", "\\\"", " { "] {
            assert!(!text.contains(bad), "{bad:?} in a message: {text}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reap_cli_refuses_or_writes() -> anyhow::Result<()> {
    if !services_up().await {
        return Ok(());
    }
    let db = sim_db(SimKind::Postgres, "3.1.9").await?;
    let line = db.line;
    let root = unique_root();
    let _m = server(&root, line, NodeKind::Master, "10.0.0.1:5678", &[]).await?;
    let _w1 = server(&root, line, NodeKind::Worker, "10.0.0.11:1234", &[]).await?;
    let _w2 = server(&root, line, NodeKind::Worker, "10.0.0.12:1234", &[]).await?;
    let wf = db.insert_workflow(&WorkflowSpec::default()).await?;
    let z1 = db
        .insert_task(&TaskSpec::new(wf, 1, Some("10.9.9.9:1234")))
        .await?;
    let z2 = db
        .insert_task(&TaskSpec::new(wf, 1, Some("10.9.9.9:1234")))
        .await?;
    let live = db
        .insert_task(&TaskSpec::new(wf, 1, Some("10.0.0.11:1234")))
        .await?;
    let finished = db
        .insert_task(&TaskSpec::new(wf, 7, Some("10.9.9.9:1234")))
        .await?;
    let cfg = CliConfig::new(db.url(), &root, "")?;
    let id = |t: i64| t.to_string();

    // A zombie with --yes: written.
    let (code, out, err) = cfg
        .run(&["reap", "--task-id", &id(z1), "--yes"], &[])
        .await?;
    assert_eq!(code, 0, "stdout {out}\nstderr {err}");
    let s = db.task_state(z1).await?;
    assert_eq!(s.state, 6);
    assert!(s.end_time.is_some());
    let audit = cfg.audit();
    let done: Vec<_> = audit
        .iter()
        .filter(|r| r["event"] == "done" && r["task_id"] == z1)
        .collect();
    assert_eq!(done.len(), 1, "{audit:#?}");
    assert_eq!(done[0]["reason"], "worker_lost");
    assert!(
        done[0]["actor"]
            .as_str()
            .is_some_and(|a| a.starts_with("cli:")),
        "{:#}",
        done[0]
    );
    assert!(audit
        .iter()
        .any(|r| r["event"] == "intent" && r["task_id"] == z1));

    // No --yes and no terminal to ask on: refused, nothing written.
    let (code, out, err) = cfg.run(&["reap", "--task-id", &id(z2)], &[]).await?;
    assert_eq!(code, 1, "stdout {out}\nstderr {err}");
    assert_readable(&out, &err);
    assert_eq!(db.task_state(z2).await?.state, 1);

    // Not a zombie: refused, in words a person reads.
    let (code, out, err) = cfg
        .run(&["reap", "--task-id", &id(live), "--yes"], &[])
        .await?;
    assert_eq!(code, 1, "stdout {out}\nstderr {err}");
    assert_readable(&out, &err);
    assert!(err.contains("10.0.0.11:1234"), "names the host: {err}");
    assert_eq!(db.task_state(live).await?.state, 1);

    // A finished row is never touched, even forced.
    let (code, out, err) = cfg
        .run(
            &["reap", "--task-id", &id(finished), "--force", "--yes"],
            &[],
        )
        .await?;
    assert_eq!(code, 1, "stdout {out}\nstderr {err}");
    assert_readable(&out, &err);
    assert_eq!(db.task_state(finished).await?.state, 7);

    // A workflow whose master lives: refused.
    let (code, out, err) = cfg
        .run(&["reap", "--workflow-instance", &id(wf), "--yes"], &[])
        .await?;
    assert_eq!(code, 1, "stdout {out}\nstderr {err}");
    assert_readable(&out, &err);

    // --force on a live, healthy row: written, audited as forced.
    let (code, out, err) = cfg
        .run(
            &[
                "reap",
                "--task-id",
                &id(live),
                "--force",
                "--yes",
                "--action",
                "kill",
            ],
            &[],
        )
        .await?;
    assert_eq!(code, 0, "stdout {out}\nstderr {err}");
    assert_eq!(db.task_state(live).await?.state, 9);
    let audit = cfg.audit();
    let done: Vec<_> = audit
        .iter()
        .filter(|r| r["event"] == "done" && r["task_id"] == live)
        .collect();
    assert_eq!(done.len(), 1, "{audit:#?}");
    assert_eq!(done[0]["reason"], "forced");
    assert_eq!(done[0]["to_state"], "KILL");
    assert!(audit
        .iter()
        .all(|r| r["task_id"] != z2 && r["task_id"] != finished || r["event"] != "done"));

    // An unknown task id: refused (exit 1).
    let (code, out, err) = cfg
        .run(&["reap", "--task-id", "987654321", "--yes"], &[])
        .await?;
    assert_eq!(code, 1, "{err}");
    assert_readable(&out, &err);
    // Bad arguments and a database that is not there.
    let (code, out, err) = cfg.run(&["reap", "--task-id", "x1", "--yes"], &[]).await?;
    assert_ne!(code, 0, "{err}");
    assert_readable(&out, &err);
    let (code, out, err) = cfg
        .run(
            &["reap", "--task-id", "1", "--yes"],
            &[("DS_REAPER__DATABASE__URL", "mysql://ds:ds@127.0.0.1:1/ds")],
        )
        .await?;
    assert_ne!(code, 0, "{err}");
    assert_readable(&out, &err);

    cleanup(db, &root).await
}

/// SPEC §7 `check --observe`: a loss seen while observing has a known
/// duration and loss time (unlike a host never seen).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_observe_sees_a_loss() -> anyhow::Result<()> {
    if !services_up().await {
        return Ok(());
    }
    let db = sim_db(SimKind::MySql, "3.2.2").await?;
    let line = db.line;
    let root = unique_root();
    let _m = server(&root, line, NodeKind::Master, "10.0.0.1:5678", &[]).await?;
    let mut w1 = server(&root, line, NodeKind::Worker, "10.0.0.11:1234", &[]).await?;
    let _w2 = server(&root, line, NodeKind::Worker, "10.0.0.12:1234", &[]).await?;
    let wf = db.insert_workflow(&WorkflowSpec::default()).await?;
    let seen = db
        .insert_task(&TaskSpec::new(wf, 1, Some("10.0.0.11:1234")))
        .await?;
    let unseen = db
        .insert_task(&TaskSpec::new(wf, 1, Some("10.9.9.9:1234")))
        .await?;
    let cfg = CliConfig::new(db.url(), &root, "")?;
    let p = cfg.path_str();
    // Built before the clock starts (the first use may build it).
    binary()?;
    let check = tokio::spawn(async move {
        run_cli(
            &[
                "--config",
                &p,
                "check",
                "--format",
                "json",
                "--observe",
                "20s",
            ],
            &[],
        )
        .await
    });
    // Well after the command has its registry view, well before it ends.
    hold(
        "check holds its registry view and is still observing",
        std::time::Duration::from_secs(8),
    )
    .await;
    w1.crash().await;
    let (code, out, err) = check.await??;
    assert_eq!(code, 1, "{out}{err}");
    let doc: serde_json::Value = serde_json::from_str(&out)?;
    let zs = doc["zombies"].as_array().expect("zombies");
    let find = |id: i64| {
        zs.iter()
            .find(|z| z["task_id"] == id)
            .unwrap_or_else(|| panic!("zombie {id} in {doc:#}"))
    };
    let z = find(seen);
    assert_eq!(z["reason"], "worker_lost");
    assert!(z["evidence"]["lost_at"].is_string(), "{z:#}\n{err}");
    assert!(
        z["evidence"]["absent_for_seconds"]
            .as_i64()
            .is_some_and(|s| s >= 2),
        "{z:#}"
    );
    let z = find(unseen);
    assert!(z["evidence"]["absent_for_seconds"].is_null(), "{z:#}");
    assert!(z["evidence"]["lost_at"].is_null(), "{z:#}");
    assert_eq!(db.task_state(seen).await?.state, 1, "check never writes");
    cleanup(db, &root).await
}
