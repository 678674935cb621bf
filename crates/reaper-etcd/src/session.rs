//! The registry's outer loop: a client, then one read-and-watch cycle after
//! another on it until cancelled, with reaper-core's jittered [`Backoff`]
//! between failed attempts. A cycle that failed before its read completed
//! drops the client, so the next attempt starts from a fresh connection
//! (and a fresh authentication token).
//!
//! etcd has no session for a reader: a gap is a broken watch stream, and
//! nodes still there at the next read keep the `seen_at` they had
//! (`Gap::Connection`).

use crate::shared::Inner;
use crate::watch::{Outcome, Watcher};
use crate::{connect, EtcdSettings};
use reaper_core::registry::Backoff;
use std::hash::{BuildHasher, Hasher};
use std::time::Duration;

/// The first retry waits about this long; each failure doubles it...
const MIN_BACKOFF: Duration = Duration::from_millis(200);
/// ... up to this; a success starts again from [`MIN_BACKOFF`].
const MAX_BACKOFF: Duration = Duration::from_secs(10);

/// A fresh backoff for one retry loop, its jitter seeded from std's
/// per-process random hash keys so replicas do not retry in step.
pub(crate) fn backoff() -> Backoff {
    let seed = std::collections::hash_map::RandomState::new()
        .build_hasher()
        .finish();
    Backoff::new(MIN_BACKOFF, MAX_BACKOFF, seed)
}

fn describe(settings: &EtcdSettings) -> String {
    format!("etcd {}", settings.endpoints_text())
}

/// The registry's loop.
pub(crate) async fn run(mut w: Watcher) {
    let inner = w.inner.clone();
    let cancel = inner.cancel.clone();
    let mut backoff = backoff();
    let mut client: Option<etcd_client::Client> = None;
    loop {
        if cancel.is_cancelled() {
            break;
        }
        let c = match client.clone() {
            Some(c) => c,
            None => {
                let Some(r) = cancel.run_until_cancelled(connect(&inner.settings)).await else {
                    break;
                };
                match r {
                    Ok(c) => {
                        client = Some(c.clone());
                        c
                    }
                    Err(e) => {
                        Inner::count(&inner.errors);
                        tracing::warn!(error = %e, "cannot connect to {}", describe(&inner.settings));
                        w.invalidate(format!("connecting to {}: {e}", describe(&inner.settings)));
                        if cancel
                            .run_until_cancelled(tokio::time::sleep(backoff.next_delay()))
                            .await
                            .is_none()
                        {
                            break;
                        }
                        continue;
                    }
                }
            }
        };
        let outcome = cancel
            .run_until_cancelled(w.serve(&c, &mut backoff))
            .await
            .unwrap_or(Outcome::Cancelled);
        match outcome {
            Outcome::Cancelled => break,
            Outcome::Ended { reason, listed } => {
                Inner::count(&inner.errors);
                tracing::warn!(%reason, "etcd registry view interrupted; reading afresh");
                w.invalidate(reason);
                if !listed {
                    client = None;
                }
                if cancel
                    .run_until_cancelled(tokio::time::sleep(backoff.next_delay()))
                    .await
                    .is_none()
                {
                    break;
                }
            }
        }
    }
    w.invalidate("registry closed".to_string());
}
