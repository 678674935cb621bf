//! The RM client against a small local HTTP stub standing in for an active
//! and a standby ResourceManager (the real MiniYARNCluster tests are in
//! tests/yarn), and the learned-ids file.

use super::rm::absolute;
use super::*;
use crate::config::yarn::Yarn;
use axum::extract::{Path as UrlPath, RawQuery, State};
use axum::http::{HeaderMap, Method, StatusCode};
use axum::response::IntoResponse;
use reaper_core::Instant;
use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

fn learned(task_id: i64, app_id: &str) -> Learned {
    Learned {
        task_id,
        app_id: app_id.into(),
        host: "10.0.0.1:1234".into(),
        learned_at: chrono::Utc::now(),
    }
}

#[test]
fn learned_ids_survive_a_restart_and_a_malformed_line_is_skipped() {
    let dir = tempfile::tempdir().unwrap();
    let path = KnownApps::beside(&dir.path().join("audit.jsonl"));
    assert_eq!(path, dir.path().join("remote-apps.jsonl"));
    let k = KnownApps::load(path.clone());
    assert!(k.ids(7).is_empty());
    let new = k.unknown(vec![
        learned(7, "application_1_1"),
        learned(7, "application_1_1"),
        learned(8, "not-an-id"),
    ]);
    assert_eq!(new.len(), 1, "duplicates and bad ids are not new");
    k.learn(&new).unwrap();
    assert!(k.unknown(vec![learned(7, "application_1_1")]).is_empty());

    // a torn line, garbage and a wrong id in between
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(&path)
        .unwrap();
    f.write_all(b"{\"task_id\": 9, \"app_id\": \"appl\n{not json}\n\n")
        .unwrap();
    f.write_all(
        br#"{"task_id":9,"app_id":"x_1_2","host":"h","learned_at":"2026-01-01T00:00:00Z"}"#,
    )
    .unwrap();
    drop(f);
    let k = KnownApps::load(path.clone());
    assert_eq!(
        k.ids(7).into_iter().collect::<Vec<_>>(),
        ["application_1_1"]
    );
    assert!(k.ids(9).is_empty());
    // appending after a line without its newline starts a fresh line
    k.learn(&[learned(9, "application_1_9")]).unwrap();
    let k = KnownApps::load(path);
    assert_eq!(k.ids(9).len(), 1);
    assert_eq!(k.ids(7).len(), 1);
}

#[test]
fn an_unreadable_file_is_no_panic() {
    let dir = tempfile::tempdir().unwrap();
    // a directory where the file should be
    let path = dir.path().join("remote-apps.jsonl");
    std::fs::create_dir(&path).unwrap();
    let k = KnownApps::load(path);
    assert!(k.ids(1).is_empty());
    assert!(k.learn(&[learned(1, "application_1_1")]).is_err());
    assert!(
        k.ids(1).is_empty(),
        "nothing is remembered that is not on disk"
    );
}

fn learned_at(task_id: i64, app_id: &str, at: Instant) -> Learned {
    Learned {
        learned_at: at,
        ..learned(task_id, app_id)
    }
}

fn lines(path: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn all_ids(k: &KnownApps, tasks: &[i64]) -> Vec<(i64, Vec<String>)> {
    tasks
        .iter()
        .map(|t| (*t, k.ids(*t).into_iter().collect()))
        .collect()
}

#[test]
fn the_owner_compacts_to_one_line_per_task_keeping_every_id() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("remote-apps.jsonl");
    let k = KnownApps::load(path.clone());
    k.learn(&[learned(7, "application_1_1"), learned(8, "application_1_8")])
        .unwrap();
    k.learn(&[learned(7, "application_1_2")]).unwrap();
    // another process appended the same id again, then a line was torn
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(&path)
        .unwrap();
    f.write_all(
        br#"{"task_id":7,"app_id":"application_1_1","host":"h","learned_at":"2026-01-01T00:00:00Z"}"#,
    )
    .unwrap();
    f.write_all(b"\n{\"task_id\":9,\"app_id\":\"application_1_9\",\"ho")
        .unwrap();
    drop(f);

    let k = KnownApps::load(path.clone());
    k.own(chrono::Utc::now()).unwrap();
    let want = vec![
        (
            7,
            vec!["application_1_1".to_string(), "application_1_2".into()],
        ),
        (8, vec!["application_1_8".to_string()]),
        (9, vec![]),
    ];
    assert_eq!(all_ids(&k, &[7, 8, 9]), want);
    let file = lines(&path);
    assert_eq!(file.len(), 2, "one line per task: {file:?}");
    assert_eq!(file[0]["task_id"], 7);
    assert_eq!(
        file[0]["app_ids"],
        serde_json::json!(["application_1_1", "application_1_2"])
    );
    assert!(!dir.path().join("remote-apps.jsonl.tmp").exists());
    // read back as compacted, and appended to as before
    let k = KnownApps::load(path.clone());
    assert_eq!(all_ids(&k, &[7, 8, 9]), want);
    k.learn(&[learned(8, "application_1_80")]).unwrap();
    let k = KnownApps::load(path);
    assert_eq!(k.ids(8).len(), 2);
    assert_eq!(k.ids(7).len(), 2);
}

#[test]
fn a_crash_or_a_failure_mid_compaction_loses_no_id() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("remote-apps.jsonl");
    let tmp = dir.path().join("remote-apps.jsonl.tmp");
    let k = KnownApps::load(path.clone());
    k.learn(&[learned(1, "application_1_1"), learned(2, "application_1_2")])
        .unwrap();
    let before = std::fs::read(&path).unwrap();
    // A crash while the temp file was being written: part of it, its last
    // line torn, beside the intact file.
    std::fs::write(
        &tmp,
        "{\"task_id\":1,\"app_ids\":[\"application_1_1\"],\"host\":\"h\",\"learned_at\":\"2026-01-01T00:00:00Z\"}\n{\"task_id\":2,\"app_i",
    )
    .unwrap();
    let k = KnownApps::load(path.clone());
    assert_eq!(
        all_ids(&k, &[1, 2]),
        [
            (1, vec!["application_1_1".to_string()]),
            (2, vec!["application_1_2".to_string()])
        ]
    );
    assert_eq!(std::fs::read(&path).unwrap(), before, "load never writes");
    // the owner's compaction replaces both
    k.own(chrono::Utc::now()).unwrap();
    assert!(!tmp.exists());
    assert_eq!(lines(&path).len(), 2);

    // A compaction that cannot write (its temp path is taken by a
    // directory) leaves the file as it was, and appends go on.
    let before = std::fs::read(&path).unwrap();
    std::fs::create_dir(&tmp).unwrap();
    let k = KnownApps::load(path.clone());
    assert!(k.own(chrono::Utc::now()).is_err());
    assert_eq!(std::fs::read(&path).unwrap(), before);
    k.learn(&[learned(3, "application_1_3")]).unwrap();
    std::fs::remove_dir(&tmp).unwrap();
    let k = KnownApps::load(path);
    assert_eq!(
        all_ids(&k, &[1, 2, 3])
            .iter()
            .map(|x| x.1.len())
            .sum::<usize>(),
        3
    );
}

#[test]
fn the_owner_compacts_once_the_file_has_grown_past_its_bound() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("remote-apps.jsonl");
    let k = KnownApps::load(path.clone());
    k.own(chrono::Utc::now()).unwrap();
    let id = |i: usize| format!("application_1_{i}");
    let many: Vec<Learned> = (0..1000).map(|i| learned(1, &id(i))).collect();
    k.learn(&many).unwrap();
    assert_eq!(
        lines(&path).len(),
        1000,
        "within 2 x tasks + 1000: appended"
    );
    let more: Vec<Learned> = (1000..1003).map(|i| learned(1, &id(i))).collect();
    k.learn(&more).unwrap();
    let file = lines(&path);
    assert_eq!(file.len(), 1, "past the bound: compacted");
    assert_eq!(file[0]["app_ids"].as_array().unwrap().len(), 1003);
    assert_eq!(KnownApps::load(path.clone()).ids(1).len(), 1003);
    // a process that does not own the file never compacts it
    let reader = KnownApps::load(path.clone());
    let others: Vec<Learned> = (0..1003).map(|i| learned(2, &id(i))).collect();
    reader.learn(&others).unwrap();
    assert_eq!(lines(&path).len(), 1004);
    assert_eq!(
        reader
            .forget_over(&BTreeSet::new(), chrono::Utc::now())
            .unwrap(),
        0
    );
    assert_eq!(lines(&path).len(), 1004);
}

#[test]
fn only_tasks_long_over_are_forgotten_and_what_another_process_appended_is_kept() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("remote-apps.jsonl");
    let now = chrono::Utc::now();
    let days = |d: i64| chrono::TimeDelta::days(d);
    let k = KnownApps::load(path.clone());
    k.own(chrono::Utc::now()).unwrap();
    k.learn(&[
        // learned 8 days ago, its row over: forgotten after a day missing
        learned_at(1, "application_1_1", now - days(8)),
        // learned 8 days ago, its row live: kept
        learned_at(2, "application_1_2", now - days(8)),
        // learned yesterday, its row over: kept (not old enough)
        learned_at(3, "application_1_3", now - days(1)),
        // learned 8 days ago, missing for a while, then back: kept
        learned_at(4, "application_1_4", now - days(8)),
    ])
    .unwrap();
    let live = |ids: &[i64]| ids.iter().copied().collect::<BTreeSet<i64>>();
    assert_eq!(
        k.forget_over(&live(&[2]), now).unwrap(),
        0,
        "missing since now"
    );
    let hours = |h: i64| now + chrono::TimeDelta::hours(h);
    assert_eq!(k.forget_over(&live(&[2]), hours(12)).unwrap(), 0);
    assert_eq!(k.forget_over(&live(&[2, 4]), hours(20)).unwrap(), 0);
    // another process (a `reap`) appended an old id of a task this one
    // never saw missing: kept, and merged into the compacted file
    let cli = KnownApps::load(path.clone());
    cli.learn(&[learned_at(5, "application_1_5", now - days(30))])
        .unwrap();
    assert_eq!(k.forget_over(&live(&[2]), hours(25)).unwrap(), 1);
    let k2 = KnownApps::load(path.clone());
    assert!(k2.ids(1).is_empty(), "forgotten on disk");
    for t in [2, 3, 4, 5] {
        assert_eq!(k2.ids(t).len(), 1, "task {t}");
    }
    assert!(k.ids(1).is_empty());
    assert_eq!(
        k.ids(5).len(),
        1,
        "the other process's line is merged, not lost"
    );
    assert_eq!(lines(&path).len(), 4);
}

/// What the stub saw and how it answers.
#[derive(Default)]
struct Stub {
    /// Where a standby redirects to; None: this one is active.
    redirect_to: Option<String>,
    /// app id -> state
    apps: Mutex<BTreeMap<String, String>>,
    /// 202s still to give before a kill completes.
    pending_kills: Mutex<u32>,
    /// (method, path, query, body) of each request.
    seen: Mutex<Vec<(String, String, String, String)>>,
    /// Answers a GET naming this id instead of the one asked.
    names: Option<String>,
    /// Pads a GET's answer past 1 MiB.
    huge: bool,
}

async fn handle(
    State(stub): State<Arc<Stub>>,
    method: Method,
    UrlPath(rest): UrlPath<String>,
    RawQuery(q): RawQuery,
    _h: HeaderMap,
    body: String,
) -> axum::response::Response {
    let q = q.unwrap_or_default();
    stub.seen
        .lock()
        .unwrap()
        .push((method.to_string(), rest.clone(), q.clone(), body.clone()));
    if let Some(to) = &stub.redirect_to {
        let loc = format!("{to}/ws/v1/cluster/{rest}");
        return (
            StatusCode::TEMPORARY_REDIRECT,
            [("Location", loc)],
            "standby",
        )
            .into_response();
    }
    let parts: Vec<&str> = rest.split('/').collect();
    let id = parts.get(1).copied().unwrap_or_default().to_string();
    let state = stub.apps.lock().unwrap().get(&id).cloned();
    let Some(state) = state else {
        return (StatusCode::NOT_FOUND, "{}").into_response();
    };
    if method == Method::PUT {
        let v: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
        if v["state"] != "KILLED" {
            return (StatusCode::BAD_REQUEST, "{}").into_response();
        }
        let mut p = stub.pending_kills.lock().unwrap();
        if *p > 0 {
            *p -= 1;
            return (
                StatusCode::ACCEPTED,
                axum::Json(serde_json::json!({"state": state})),
            )
                .into_response();
        }
        stub.apps.lock().unwrap().insert(id, "KILLED".into());
        return axum::Json(serde_json::json!({"state": "KILLED"})).into_response();
    }
    let named = stub.names.clone().unwrap_or(id);
    let pad = if stub.huge {
        "x".repeat(1 << 20)
    } else {
        String::new()
    };
    axum::Json(
        serde_json::json!({"app": {"id": named, "state": state, "finalStatus": "UNDEFINED",
        "startedTime": 1_700_000_000_000i64, "user": "etl", "diagnostics": pad}}),
    )
    .into_response()
}

async fn serve(stub: Arc<Stub>) -> String {
    let app = axum::Router::new()
        .route("/ws/v1/cluster/{*rest}", axum::routing::any(handle))
        .with_state(stub);
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = format!("http://{}", l.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(l, app).await });
    addr
}

fn rm(bases: &[&str], user: &str) -> Rm {
    Rm::new(&Yarn {
        resource_managers: bases.iter().map(|b| b.to_string()).collect(),
        user: user.into(),
        timeout: Duration::from_secs(2),
        ..Yarn::default()
    })
    .unwrap()
}

/// A port nothing listens on.
fn dead() -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    format!("http://{}", l.local_addr().unwrap())
}

#[tokio::test]
async fn states_are_read_and_404_or_no_rm_is_unknown() {
    let active = Arc::new(Stub::default());
    active
        .apps
        .lock()
        .unwrap()
        .insert("application_1_1".into(), "RUNNING".into());
    let a = serve(active.clone()).await;
    let c = rm(&[&dead(), &a], "ds user");
    let (app, why) = c.app("application_1_1").await;
    assert_eq!(app.state.as_deref(), Some("RUNNING"), "{why:?}");
    assert_eq!(app.final_status.as_deref(), Some("UNDEFINED"));
    let q = active.seen.lock().unwrap()[0].2.clone();
    assert_eq!(q, "user.name=ds%20user");

    let (app, why) = c.app("application_1_2").await;
    assert_eq!(app.state, None);
    assert!(why.unwrap().contains("404"));

    let down = rm(&[&dead(), &dead()], "");
    let (app, why) = down.app("application_1_1").await;
    assert_eq!(app.state, None);
    assert!(why.unwrap().contains("no ResourceManager answered"));
    assert!(down.kill("application_1_1").await.is_err());
}

#[tokio::test]
async fn a_standbys_redirect_is_followed_keeping_the_put_and_its_body_and_202_until_200() {
    let active = Arc::new(Stub::default());
    active
        .apps
        .lock()
        .unwrap()
        .insert("application_5_5".into(), "ACCEPTED".into());
    *active.pending_kills.lock().unwrap() = 2;
    let a = serve(active.clone()).await;
    let standby = Arc::new(Stub {
        redirect_to: Some(a.clone()),
        ..Stub::default()
    });
    let s = serve(standby.clone()).await;
    let c = rm(&[&s, &a], "ds");

    c.kill("application_5_5").await.unwrap();
    let seen = active.seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 3, "two 202s, then 200: {seen:?}");
    for (method, path, query, body) in &seen {
        assert_eq!(method, "PUT");
        assert_eq!(path, "apps/application_5_5/state");
        assert_eq!(query, "user.name=ds");
        assert_eq!(body, r#"{"state":"KILLED"}"#);
    }
    assert_eq!(standby.seen.lock().unwrap()[0].0, "PUT");
    let (app, _) = c.app("application_5_5").await;
    assert_eq!(app.state.as_deref(), Some("KILLED"));
}

#[test]
fn locations_are_made_absolute() {
    assert_eq!(
        absolute("http://rm1:8088/ws/v1/x?user.name=a", "/ws/v1/y"),
        "http://rm1:8088/ws/v1/y"
    );
    assert_eq!(
        absolute("http://rm1:8088/ws/v1/x", "http://rm2:8088/ws/v1/x"),
        "http://rm2:8088/ws/v1/x"
    );
}

/// SPEC §17: an answer is believed only when it is JSON of at most 1 MiB
/// naming the id asked, and a redirect is followed only to a configured RM.
#[tokio::test]
async fn an_answer_about_another_id_a_huge_one_or_from_elsewhere_is_unknown() {
    let apps = || {
        Mutex::new(BTreeMap::from([(
            "application_1_1".to_string(),
            "RUNNING".to_string(),
        )]))
    };
    let other = Arc::new(Stub {
        apps: apps(),
        names: Some("application_9_9".into()),
        ..Stub::default()
    });
    let (app, why) = rm(&[&serve(other).await], "").app("application_1_1").await;
    assert_eq!(app.state, None, "an answer about another application");
    assert!(why.unwrap().contains("application_9_9"));

    let huge = Arc::new(Stub {
        apps: apps(),
        huge: true,
        ..Stub::default()
    });
    let (app, why) = rm(&[&serve(huge).await], "").app("application_1_1").await;
    assert_eq!(app.state, None, "an answer over 1 MiB");
    assert!(why.unwrap().contains("over"));

    // a standby sending the request to an RM that is not configured
    let elsewhere = Arc::new(Stub {
        apps: apps(),
        ..Stub::default()
    });
    let e = serve(elsewhere.clone()).await;
    let standby = Arc::new(Stub {
        redirect_to: Some(e),
        ..Stub::default()
    });
    let s = serve(standby).await;
    let (app, why) = rm(&[&s], "").app("application_1_1").await;
    assert_eq!(app.state, None, "a redirect outside resource_managers");
    assert!(why.unwrap().contains("not a configured ResourceManager"));
    assert!(elsewhere.seen.lock().unwrap().is_empty(), "never asked");

    // the RM's own answer carries what ownership is judged by
    let good = Arc::new(Stub {
        apps: apps(),
        ..Stub::default()
    });
    let (app, why) = rm(&[&serve(good).await], "").app("application_1_1").await;
    assert_eq!(app.state.as_deref(), Some("RUNNING"), "{why:?}");
    assert_eq!(app.started_time, Some(1_700_000_000_000));
    assert_eq!(app.user.as_deref(), Some("etl"));
}
