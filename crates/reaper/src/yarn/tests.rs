//! The RM client against a small local HTTP stub standing in for an active
//! and a standby ResourceManager (the real MiniYARNCluster tests are in
//! tests/yarn), and the learned-ids file.

use super::*;
use axum::extract::{Path as UrlPath, RawQuery, State};
use axum::http::{HeaderMap, Method, StatusCode};
use axum::response::IntoResponse;
use std::sync::Arc;

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
    axum::Json(serde_json::json!({"app": {"id": id, "state": state, "finalStatus": "UNDEFINED"}}))
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
