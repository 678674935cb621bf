//! The watch stream of a cycle: opening it from the read's revision, and
//! making sure a silent server is noticed.

use crate::keys::prefix_end;
use crate::{bounded, EtcdError};
use etcd_client::{WatchClient, WatchOptions, WatchRequestSender, WatchResponse, WatchStream};
use std::time::Duration;
use tokio::time::Instant as Tick;

/// How often the watch stream is asked for its progress: often enough that
/// a silent server is noticed within about twice the request timeout.
fn progress_every(rt: Duration) -> Duration {
    rt.clamp(Duration::from_millis(200), Duration::from_secs(5))
}

pub(super) fn cancel_reason(resp: &WatchResponse) -> String {
    match resp.cancel_reason() {
        "" => "no reason given".to_string(),
        r => r.to_string(),
    }
}

/// Why a watch stream is taken for down.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum StreamDown {
    #[error("etcd did not answer a watch progress request within {0:?}")]
    Silent(Duration),
    #[error("the etcd watch stream is closed")]
    Closed,
}

/// Keeps asking a watch stream for its progress: a stream that stays silent
/// for the request timeout after being asked is down, even if its
/// connection still looks open (a stopped or partitioned server).
pub(crate) struct Progress {
    rt: Duration,
    every: tokio::time::Interval,
    /// When a progress request was sent and nothing has arrived since.
    asked: Option<Tick>,
}

impl Progress {
    pub(crate) fn new(rt: Duration) -> Progress {
        let period = progress_every(rt);
        let mut every = tokio::time::interval_at(Tick::now() + period, period);
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        Progress {
            rt,
            every,
            asked: None,
        }
    }

    /// Something arrived on the stream.
    pub(crate) fn heard(&mut self) {
        self.asked = None;
    }

    /// Waits for the next tick, then asks for progress, or fails when the
    /// last request went unanswered for the request timeout. Cancel-safe.
    pub(crate) async fn check(
        &mut self,
        sender: &mut WatchRequestSender,
    ) -> Result<(), StreamDown> {
        self.every.tick().await;
        let rt = self.rt;
        match self.asked {
            Some(t) if t.elapsed() >= rt => Err(StreamDown::Silent(rt)),
            Some(_) => Ok(()),
            None => match tokio::time::timeout(rt, sender.request_progress()).await {
                Ok(Ok(())) => {
                    self.asked = Some(Tick::now());
                    Ok(())
                }
                _ => Err(StreamDown::Closed),
            },
        }
    }
}

/// Opens one stream with a watch per prefix from `start`, and waits (within
/// `rt`) until etcd confirmed every one. Responses with events that arrive
/// meanwhile are returned to be applied after the read.
pub(crate) async fn open_watches(
    wc: &mut WatchClient,
    prefixes: &[String],
    start: i64,
    rt: Duration,
) -> Result<(WatchStream, Vec<WatchResponse>), EtcdError> {
    let deadline = Tick::now() + rt;
    let opts = |p: &str| {
        WatchOptions::new()
            .with_range(prefix_end(p.as_bytes()))
            .with_start_revision(start)
    };
    let (first, rest) = prefixes
        .split_first()
        .ok_or_else(|| EtcdError::Watch("nothing to watch".into()))?;
    let left = deadline.saturating_duration_since(Tick::now());
    let mut stream = bounded("watch", left, wc.watch(first.as_str(), Some(opts(first)))).await?;
    for p in rest {
        let left = deadline.saturating_duration_since(Tick::now());
        bounded("watch", left, stream.watch(p.as_str(), Some(opts(p)))).await?;
    }
    let mut created = 0;
    let mut early = Vec::new();
    while created < prefixes.len() {
        let left = deadline.saturating_duration_since(Tick::now());
        let resp = match bounded("watch", left, stream.message()).await? {
            Some(r) => r,
            None => return Err(EtcdError::Watch("the stream ended".into())),
        };
        if resp.canceled() {
            if resp.compact_revision() > 0 {
                return Err(EtcdError::Compacted("watch"));
            }
            return Err(EtcdError::Watch(format!(
                "etcd cancelled the watch: {}",
                cancel_reason(&resp)
            )));
        }
        if resp.created() {
            created += 1;
        }
        if !resp.events().is_empty() {
            early.push(resp);
        }
    }
    Ok((stream, early))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn progress_is_asked_often_enough() {
        assert_eq!(
            progress_every(Duration::from_secs(10)),
            Duration::from_secs(5)
        );
        assert_eq!(
            progress_every(Duration::from_secs(2)),
            Duration::from_secs(2)
        );
        assert_eq!(progress_every(Duration::ZERO), Duration::from_millis(200));
    }
}
