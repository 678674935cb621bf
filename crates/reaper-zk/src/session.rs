//! ZooKeeper sessions: connecting (bounded in time), closing at once, telling
//! a terminal state, and reaper-core's jittered [`Backoff`] between failed
//! attempts. The registry's loop and the leader election build their own
//! sessions from these pieces.

use crate::{bounded, ZkError, ZkSettings};
use reaper_core::registry::Backoff;
use std::hash::{BuildHasher, Hasher};
use std::time::Duration;
use zookeeper_client as zk;

/// The first retry waits about this long; each failure doubles it...
const MIN_BACKOFF: Duration = Duration::from_millis(200);
/// ... up to this; a success starts again from [`MIN_BACKOFF`].
const MAX_BACKOFF: Duration = Duration::from_secs(10);

/// A fresh backoff for one retry loop. Its jitter is seeded from std's
/// per-process random hash keys, so replicas (and the loops of one replica)
/// do not retry in step.
pub(crate) fn backoff() -> Backoff {
    let seed = std::collections::hash_map::RandomState::new()
        .build_hasher()
        .finish();
    Backoff::new(MIN_BACKOFF, MAX_BACKOFF, seed)
}

/// Sleeps the backoff's next delay; false when cancelled meanwhile.
pub(crate) async fn wait_to_retry(
    cancel: &tokio_util::sync::CancellationToken,
    backoff: &mut Backoff,
) -> bool {
    cancel
        .run_until_cancelled(tokio::time::sleep(backoff.next_delay()))
        .await
        .is_some()
}

/// Opens a session, bounded by the session timeout plus one request timeout.
pub(crate) async fn connect(settings: &ZkSettings) -> Result<zk::Client, ZkError> {
    let st = settings.session_timeout;
    bounded(
        st + settings.request_timeout,
        zk::Client::connector()
            .with_session_timeout(st)
            .with_fail_eagerly()
            .connect(&settings.connect),
    )
    .await
}

/// How serving one session ended.
pub(crate) enum Outcome {
    Cancelled,
    Expired,
    Ended(String),
}

/// The outcome a terminal session state stands for; None while it may recover.
pub(crate) fn terminal(s: zk::SessionState) -> Option<Outcome> {
    match s {
        zk::SessionState::Expired => Some(Outcome::Expired),
        zk::SessionState::Closed => Some(Outcome::Ended("ZooKeeper session closed".to_string())),
        zk::SessionState::AuthFailed => Some(Outcome::Ended(
            "ZooKeeper authentication failed".to_string(),
        )),
        _ => None,
    }
}

/// Closes a session at once (ephemeral nodes go now, not after the timeout).
pub(crate) async fn close_client(client: zk::Client) {
    let mut states = client.state_watcher();
    drop(client);
    let _ = tokio::time::timeout(Duration::from_secs(3), async {
        while !states.peek_state().is_terminated() {
            states.changed().await;
        }
    })
    .await;
}
