//! Secrets never appear (SPEC §6): the database password (in the URL or in
//! `password_file`) and the HTTP token, in logs, `config check`, `check`, and
//! every endpoint.

use ds_sim::db::{SimKind, TaskSpec, WorkflowSpec};
use reaper_core::NodeKind;
use reaper_e2e::*;

/// `scheme://user:password@rest` with another user and password.
fn with_credentials(url: &str, user: &str, password: &str) -> String {
    let (scheme, rest) = url.split_once("://").unwrap_or(("postgres", url));
    let rest = rest.rsplit_once('@').map(|(_, r)| r).unwrap_or(rest);
    format!("{scheme}://{user}:{password}@{rest}")
}

fn assert_clean(what: &str, text: &str, secrets: &[&str]) {
    for s in secrets {
        assert!(
            !text.contains(s),
            "{what} reveals the secret {s:?}:\n{text}"
        );
    }
}

async fn every_endpoint(d: &Daemon) -> anyhow::Result<Vec<(String, String)>> {
    let mut out = Vec::new();
    for p in [
        "/",
        "/metrics",
        "/healthz",
        "/readyz",
        "/api/v1/status",
        "/api/v1/workers",
        "/api/v1/zombies",
        "/api/v1/audit?limit=100",
    ] {
        let (_, body) = d.get(p).await?;
        out.push((p.to_string(), body));
    }
    Ok(out)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn database_password_and_token_never_appear() -> anyhow::Result<()> {
    if !services_up().await {
        return Ok(());
    }
    let db = sim_db(SimKind::Postgres, "3.2.2").await?;
    let line = db.line;
    let root = unique_root();
    let n = std::process::id();
    let role = format!(
        "dsr_secret_{n}_{}",
        chrono::Utc::now().timestamp_micros() % 1_000_000
    );
    let password = format!("Pw-{n}-q7Xv2KzR");
    let decoy = format!("Decoy-{n}-m3Wp8LtN");
    let token = format!("Tk-{n}-h4Bn6YcS");
    db.exec(&format!(
        "CREATE ROLE {role} LOGIN PASSWORD '{password}';
         GRANT CONNECT ON DATABASE \"{}\" TO {role};
         GRANT ALL ON ALL TABLES IN SCHEMA public TO {role};
         GRANT ALL ON ALL SEQUENCES IN SCHEMA public TO {role};",
        db.name()
    ))
    .await?;
    let secrets = [password.as_str(), decoy.as_str(), token.as_str()];

    let _m = server(&root, line, NodeKind::Master, "10.0.0.1:5678", &[]).await?;
    let _w1 = server(&root, line, NodeKind::Worker, "10.0.0.11:1234", &[]).await?;
    let wf = db.insert_workflow(&WorkflowSpec::default()).await?;
    // A zombie so that zombies, audit and the status page have content.
    db.insert_task(&TaskSpec::new(wf, 1, Some("10.9.9.9:1234")))
        .await?;

    let dir = tempfile::tempdir()?;
    let pw_file = dir.path().join("db-password");
    std::fs::write(&pw_file, format!("{password}\n"))?;
    let tok_file = dir.path().join("token");
    std::fs::write(&tok_file, &token)?;
    let pw_path = pw_file.display().to_string();
    let tok_path = tok_file.display().to_string();

    // A: the password in the URL. B: a decoy in the URL, the real one in
    // password_file. (The local server may trust loopback connections, so
    // B getting ready does not by itself prove the override.)
    let url_a = with_credentials(db.url(), &role, &password);
    let url_b = with_credentials(db.url(), &role, &decoy);
    let env_b = [
        ("DS_REAPER__DATABASE__PASSWORD_FILE", pw_path.as_str()),
        ("DS_REAPER__HTTP__TOKEN_FILE", tok_path.as_str()),
    ];
    let mut a = Daemon::start_with_env(
        &url_a,
        &root,
        "",
        &[("DS_REAPER__HTTP__TOKEN_FILE", tok_path.as_str())],
    )
    .await?;
    let mut b = Daemon::start_with_env(&url_b, &root, "", &env_b).await?;
    a.wait_ready().await?;
    b.wait_ready().await?;
    for d in [&a, &b] {
        d.wait_metric("ds_reaper_zombies{reason=\"worker_lost\"}", |v| v == 1.0)
            .await?;
        // An authorised POST, so request handling has had the token too.
        let (code, body) = d.post("/api/v1/sweep", Some(&token), "").await?;
        assert_eq!(code, 200, "{body}");
        for (path, body) in every_endpoint(d).await? {
            assert_clean(&path, &body, &secrets);
        }
    }

    // CLI: config check and check, both ways.
    let cfg_a = CliConfig::new(&url_a, &root, "")?;
    let cfg_b = CliConfig::new(&url_b, &root, "")?;
    for (cfg, env) in [
        (
            &cfg_a,
            &[("DS_REAPER__HTTP__TOKEN_FILE", tok_path.as_str())][..],
        ),
        (&cfg_b, &env_b[..]),
    ] {
        let (code, out, err) = cfg.run(&["config", "check"], env).await?;
        assert_eq!(code, 0, "{out}{err}");
        assert!(
            out.contains("[database]"),
            "prints the effective config: {out}"
        );
        assert_clean("config check", &format!("{out}{err}"), &secrets);
        let (code, out, err) = cfg.run(&["check", "--format", "json"], env).await?;
        assert_eq!(code, 1, "the zombie is found: {out}{err}");
        assert_clean("check", &format!("{out}{err}"), &secrets);
    }

    // Failing connections must not leak the URL's password either.
    let closed = free_port();
    let down = with_credentials(
        &db.url().replace(":5432/", &format!(":{closed}/")),
        &role,
        &password,
    );
    assert!(down.contains(&format!(":{closed}/")), "{down}");
    let (code, out, err) = cfg_a
        .run(&["check"], &[("DS_REAPER__DATABASE__URL", down.as_str())])
        .await?;
    assert_eq!(code, 3, "{out}{err}");
    assert_clean(
        "check against a closed port",
        &format!("{out}{err}"),
        &secrets,
    );
    let mut c = Daemon::start(&down, &root, "").await?;
    wait_until("readyz names the database", || async {
        let (code, body) = c.get("/readyz").await?;
        Ok(code == 503 && body.contains("database"))
    })
    .await?;
    for (path, body) in every_endpoint(&c).await? {
        assert_clean(&path, &body, &secrets);
    }
    assert_eq!(c.terminate().await?, Some(0));
    assert_clean("daemon log (unreachable db)", &c.log_text(), &secrets);

    assert_eq!(a.terminate().await?, Some(0));
    assert_eq!(b.terminate().await?, Some(0));
    for d in [&a, &b] {
        let log = d.log_text();
        assert!(log.contains("starting ds-reaper"), "{log}");
        assert_clean("daemon log", &log, &secrets);
        assert_clean(
            "audit file",
            &std::fs::read_to_string(d.dir.path().join("audit.jsonl")).unwrap_or_default(),
            &secrets,
        );
    }

    db.exec(&format!(
        "REVOKE ALL ON ALL TABLES IN SCHEMA public FROM {role};
         REVOKE ALL ON ALL SEQUENCES IN SCHEMA public FROM {role};
         REVOKE ALL ON DATABASE \"{}\" FROM {role};",
        db.name()
    ))
    .await?;
    let _ = db.exec(&format!("DROP ROLE IF EXISTS {role}")).await;
    cleanup(db, &root).await
}
