//! What the soak saw of ds-reaper's and the agents' own view while the
//! shared-host and missing-row faults ran, so that the report can show their
//! checks were not empty: the notes `GET /api/v1/ghosts` gave listed tasks
//! (`row_never_seen`, `database_mismatch`, ...), and which agent listed the
//! second worker's tasks (its own, as `own`; never the first worker's).

use reaper_core::agent::{AgentReport, Lineage};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use zookeeper_client as zk;

/// Where to look, as the simulator updates it.
#[derive(Default, Clone)]
pub(super) struct Targets {
    /// The replicas' `/api/v1/ghosts` URLs.
    pub ghosts_urls: Vec<String>,
    /// While a second worker is up: (first worker, second worker) node
    /// names and the second worker's task ids.
    pub pair: Option<(String, String, BTreeSet<i64>)>,
}

/// What was seen.
#[derive(Default, Debug)]
pub(super) struct Seen {
    /// note -> the task ids a replica's ghosts page gave it for.
    pub notes: BTreeMap<String, BTreeSet<i64>>,
    /// The second worker's tasks its own agent listed as `own`, and not.
    pub guest_own: BTreeSet<i64>,
    pub guest_orphan: BTreeSet<i64>,
    /// The second worker's tasks the first worker's agent listed (must be none).
    pub guest_by_first: BTreeSet<i64>,
    /// The first worker's tasks the second worker's agent listed (as orphans).
    pub first_by_guest: BTreeSet<i64>,
}

pub(super) type Shared<T> = Arc<Mutex<T>>;

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Samples every 3 s until `stop`.
pub(super) async fn sample(
    connect: String,
    agents_dir: String,
    targets: Shared<Targets>,
    seen: Shared<Seen>,
    stop: Arc<AtomicBool>,
) {
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(2))
        .build()
        .unwrap_or_default();
    let mut client: Option<zk::Client> = None;
    while !stop.load(Ordering::SeqCst) {
        let t = lock(&targets).clone();
        for url in &t.ghosts_urls {
            let Ok(r) = http.get(url).send().await else {
                continue;
            };
            let Ok(v) = r.json::<serde_json::Value>().await else {
                continue;
            };
            for g in v["ghosts"].as_array().into_iter().flatten() {
                if let (Some(note), Some(id)) = (g["note"].as_str(), g["task_id"].as_i64()) {
                    let note = note.split(':').next().unwrap_or(note).to_string();
                    lock(&seen).notes.entry(note).or_default().insert(id);
                }
            }
        }
        if let Some((first, guest, ids)) = &t.pair {
            if client.is_none() {
                client = tokio::time::timeout(
                    Duration::from_secs(3),
                    zk::Client::connector()
                        .with_session_timeout(Duration::from_secs(10))
                        .connect(&connect),
                )
                .await
                .ok()
                .and_then(|r| r.ok());
            }
            if let Some(c) = &client {
                let read = |w: &str| {
                    let node = format!("{agents_dir}/{w}");
                    async move {
                        let (data, _) = c.get_data(&node).await.ok()?;
                        AgentReport::parse(&node, &data).ok()
                    }
                };
                let a = tokio::time::timeout(Duration::from_secs(2), read(first)).await;
                let b = tokio::time::timeout(Duration::from_secs(2), read(guest)).await;
                match (a, b) {
                    (Ok(a), Ok(b)) => note_pair(&seen, ids, a, b),
                    _ => client = None,
                }
            }
        }
        tokio::time::sleep(Duration::from_secs(3)).await;
    }
}

/// Sorts the two agents' listings by whose tasks they are (`ids`: the
/// second worker's).
fn note_pair(
    seen: &Mutex<Seen>,
    ids: &BTreeSet<i64>,
    first: Option<AgentReport>,
    guest: Option<AgentReport>,
) {
    let mut s = lock(seen);
    for t in guest.iter().flat_map(|g| &g.tasks) {
        if !ids.contains(&t.task_id) {
            s.first_by_guest.insert(t.task_id);
        } else if t.lineage == Some(Lineage::Own) {
            s.guest_own.insert(t.task_id);
        } else {
            s.guest_orphan.insert(t.task_id);
        }
    }
    for t in first.iter().flat_map(|f| &f.tasks) {
        if ids.contains(&t.task_id) {
            s.guest_by_first.insert(t.task_id);
        }
    }
}

/// The report's lines.
pub(super) fn describe(s: &Seen) -> Vec<String> {
    let mut out = vec![format!(
        "shared host: the second worker's agent listed {} of its tasks as own ({} not as own); the \
         first worker's agent listed {} of them (must be 0); the second's listed {} of other tasks",
        s.guest_own.len(),
        s.guest_orphan.len(),
        s.guest_by_first.len(),
        s.first_by_guest.len()
    )];
    let notes: Vec<String> = s
        .notes
        .iter()
        .map(|(k, v)| format!("{k} {}", v.len()))
        .collect();
    out.push(format!(
        "ghosts page notes (distinct tasks): {}",
        if notes.is_empty() {
            "none".to_string()
        } else {
            notes.join(", ")
        }
    ));
    out
}
