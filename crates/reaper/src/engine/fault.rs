//! Test-only fault points, for the real-DS tier (tests/real-ds, scenario
//! `leader-handover`): a leader must be killed between its task write and
//! its workflow step (SPEC §13, "a follow-up survives a change of leader"),
//! a window of milliseconds no outside timing hits reliably. With
//! `DS_REAPER_TEST_PAUSE_AFTER=<point>` in its environment the daemon logs
//! that it reached the point and then waits there for ever, so that the test
//! can `kill -9` it in exactly that state. Without the variable (every real
//! deployment) a fault point does nothing. Not a configuration key on
//! purpose: nothing an operator sets by `DS_REAPER__…` can arm it.

use std::future::Future;

/// The environment variable that arms a fault point (test-only).
pub(crate) const PAUSE_AFTER_ENV: &str = "DS_REAPER_TEST_PAUSE_AFTER";

/// Where the daemon can be held for a test.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FaultPoint {
    /// A task write applied, its workflow follow-up not yet begun.
    TaskWrite,
}

impl FaultPoint {
    /// The variable's value that arms it.
    pub(crate) fn name(self) -> &'static str {
        match self {
            FaultPoint::TaskWrite => "task_write",
        }
    }
}

/// Whether `value` (the variable's, if set) arms `point`: only its exact name.
fn armed(value: Option<&str>, point: FaultPoint) -> bool {
    value.is_some_and(|v| v.trim() == point.name())
}

/// Waits for ever when `value` arms `point`; else returns at once.
fn pause_if(value: Option<&str>, point: FaultPoint) -> impl Future<Output = ()> + 'static {
    let hold = armed(value, point);
    if hold {
        tracing::error!(
            point = point.name(),
            "test fault point reached ({PAUSE_AFTER_ENV}): waiting here until killed"
        );
    }
    async move {
        if hold {
            std::future::pending::<()>().await;
        }
    }
}

/// The fault point `point`, armed by [`PAUSE_AFTER_ENV`].
pub(super) async fn pause_after(point: FaultPoint) {
    let value = std::env::var(PAUSE_AFTER_ENV).ok();
    pause_if(value.as_deref(), point).await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn only_the_points_exact_name_arms_it() {
        assert!(armed(Some("task_write"), FaultPoint::TaskWrite));
        assert!(armed(Some(" task_write\n"), FaultPoint::TaskWrite));
        for inert in [
            None,
            Some(""),
            Some("1"),
            Some("true"),
            Some("task"),
            Some("TASK_WRITE"),
        ] {
            assert!(!armed(inert, FaultPoint::TaskWrite), "{inert:?}");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn an_armed_point_holds_and_an_unarmed_one_passes() {
        let held = tokio::time::timeout(
            Duration::from_secs(3600),
            pause_if(Some("task_write"), FaultPoint::TaskWrite),
        )
        .await;
        assert!(held.is_err(), "an armed fault point must not return");
        for value in [None, Some("other")] {
            let passed = tokio::time::timeout(
                Duration::from_millis(1),
                pause_if(value, FaultPoint::TaskWrite),
            )
            .await;
            assert!(passed.is_ok(), "{value:?} must not hold the daemon");
        }
    }

    /// Tests run without the variable: the daemon's own path is inert.
    #[tokio::test(start_paused = true)]
    async fn without_the_variable_the_daemon_is_not_held() {
        assert!(std::env::var_os(PAUSE_AFTER_ENV).is_none());
        let passed =
            tokio::time::timeout(Duration::from_millis(1), pause_after(FaultPoint::TaskWrite))
                .await;
        assert!(passed.is_ok());
    }
}
