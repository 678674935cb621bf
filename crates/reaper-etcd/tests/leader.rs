//! Leader election on a real etcd: exactly one of two replicas leads, and
//! the survivor takes over when the leader's lease is revoked, when the
//! leader's process is killed (`kill -9`: its lease expires) and when the
//! leader resigns.

mod etcd_setup;

use etcd_setup::*;
use reaper_etcd::EtcdLeader;
use std::process::Stdio;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio_util::sync::CancellationToken;

const PATH: &str = "/ds-reaper/leader";
const HELPER_NS: &str = "REAPER_ETCD_LEADER_HELPER_NS";
const HELPER_EPS: &str = "REAPER_ETCD_LEADER_HELPER_EPS";

fn start(eps: &[String], ns: &str, id: &str) -> EtcdLeader {
    EtcdLeader::start(
        settings(eps, ns),
        PATH.into(),
        id.into(),
        CancellationToken::new(),
    )
}

/// Samples both for `d`: never two leaders at once.
async fn never_two(a: &EtcdLeader, b: &EtcdLeader, d: Duration) {
    let end = tokio::time::Instant::now() + d;
    while tokio::time::Instant::now() < end {
        assert!(!(a.is_leader() && b.is_leader()), "two leaders at once");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// The lease of the key `id` stands with under the election.
async fn lease_of(eps: &[String], ns: &str, id: &str) -> i64 {
    let mut c = ds_sim::etcd::connect(eps).await.unwrap();
    let r = c
        .get(
            format!("{ns}{PATH}/"),
            Some(etcd_client::GetOptions::new().with_prefix()),
        )
        .await
        .unwrap();
    r.kvs()
        .iter()
        .find(|kv| kv.value() == id.as_bytes())
        .map(|kv| kv.lease())
        .expect("the candidate's key")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_elect_exactly_one_and_the_survivor_takes_over_when_the_leaders_lease_is_revoked(
) {
    let Some(eps) = shared_etcd().await else {
        return;
    };
    let (root, ns) = unique_namespace();
    let a = start(&eps, &ns, "replica-a");
    let b = start(&eps, &ns, "replica-b");
    wait_until("one leader", WAIT, || a.is_leader() || b.is_leader()).await;
    never_two(&a, &b, Duration::from_secs(2)).await;
    let (leader, follower, lid, fid) = if a.is_leader() {
        (&a, &b, "replica-a", "replica-b")
    } else {
        (&b, &a, "replica-b", "replica-a")
    };
    assert!(!follower.is_leader());
    wait_until("both name the leader", WAIT, || {
        leader.leader_id().as_deref() == Some(lid) && follower.leader_id().as_deref() == Some(lid)
    })
    .await;
    // the election's keys are etcd's own layout: <name>/<lease in hex>
    let lease = lease_of(&eps, &ns, lid).await;
    let keys = ds_sim::etcd::keys_with_leases(&eps, &format!("{ns}{PATH}/"))
        .await
        .unwrap();
    assert!(
        keys.contains(&(format!("{ns}{PATH}/{lease:x}"), lease)),
        "{keys:?}"
    );

    ds_sim::etcd::revoke_lease(&eps, lease).await.unwrap();
    wait_until("the survivor leads", Duration::from_secs(5), || {
        follower.is_leader()
    })
    .await;
    // The old leader learns of its revoked lease from its own keep-alive or
    // watch, which may come a moment after the survivor's win: a wait, not
    // an instant check.
    wait_until("the old leader stepped down", WAIT, || !leader.is_leader()).await;
    never_two(&a, &b, Duration::from_secs(1)).await;
    wait_until("the old leader stands again behind", WAIT, || {
        leader.leader_id().as_deref() == Some(fid)
    })
    .await;
    a.close().await;
    b.close().await;
    cleanup(&eps, &root).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closing_the_leader_resigns_at_once() {
    let Some(eps) = shared_etcd().await else {
        return;
    };
    let (root, ns) = unique_namespace();
    let a = start(&eps, &ns, "replica-a");
    wait_until("a leads", WAIT, || a.is_leader()).await;
    let b = start(&eps, &ns, "replica-b");
    wait_until("b follows a", WAIT, || {
        b.leader_id().as_deref() == Some("replica-a")
    })
    .await;
    let t = tokio::time::Instant::now();
    a.close().await;
    assert!(!a.is_leader());
    // well within the lease TTL (3 s): the key went with the revoked lease
    wait_until("b leads", Duration::from_secs(2), || b.is_leader()).await;
    eprintln!("takeover after resign: {:?}", t.elapsed());
    b.close().await;
    cleanup(&eps, &root).await;
}

/// Not a test of its own: the leader process that the test below kills.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore]
async fn helper_leader_process() {
    let (Ok(ns), Ok(eps)) = (std::env::var(HELPER_NS), std::env::var(HELPER_EPS)) else {
        return;
    };
    let eps = ds_sim::etcd::endpoints_from(&eps);
    let l = start(&eps, &ns, "child");
    wait_until("child leads", WAIT, || l.is_leader()).await;
    println!("LEADER");
    tokio::time::sleep(Duration::from_secs(120)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_leaders_lease_expires_and_the_survivor_takes_over() {
    let Some(eps) = shared_etcd().await else {
        return;
    };
    let (root, ns) = unique_namespace();
    let exe = std::env::current_exe().unwrap();
    let mut child = tokio::process::Command::new(exe)
        .args([
            "--exact",
            "helper_leader_process",
            "--ignored",
            "--nocapture",
        ])
        .env(HELPER_NS, &ns)
        .env(HELPER_EPS, eps.join(","))
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    tokio::time::timeout(WAIT, async {
        while let Some(l) = lines.next_line().await.unwrap() {
            if l.contains("LEADER") {
                return;
            }
        }
        panic!("the helper ended without leading");
    })
    .await
    .expect("the helper process leads");
    let b = start(&eps, &ns, "survivor");
    wait_until("the survivor follows the child", WAIT, || {
        b.leader_id().as_deref() == Some("child")
    })
    .await;
    assert!(!b.is_leader());
    let killed = tokio::time::Instant::now();
    child.start_kill().unwrap(); // SIGKILL
    child.wait().await.unwrap();
    wait_until("the survivor leads", WAIT, || b.is_leader()).await;
    let after = killed.elapsed();
    // lease_ttl is 3 s: the child's key lives until its lease expires
    assert!(after >= Duration::from_secs(1), "took over after {after:?}");
    eprintln!("takeover after kill -9: {after:?}");
    b.close().await;
    cleanup(&eps, &root).await;
}
