//! One sweep, top to bottom, in five steps:
//!
//! `read` (everything a judgement needs, the ResourceManager's answers
//! included: `read.rs`) → `plan` (every planner, pure, on a view taken after
//! the read: `judge.rs`) → `publish` (metrics, status, what is first seen
//! audited) → `execute` (every effect through the one executor:
//! `effects.rs`) → `finish` (what the effects leave to remember, the
//! summary), once, whatever step stopped the sweep.
//!
//! `check` is the same sweep in [`Mode::Check`]: the same read and plan,
//! nothing published and nothing executed.

use super::effects::{Context, Outcome};
use super::judge::{Checked, Judgement};
use super::{ActionResult, Engine, Error, SweepResult, SweepState, SweepSummary, Trigger};
use reaper_core::Reason;
use std::collections::BTreeMap;
use tracing::Instrument;

/// A sweep that may act, or `check`'s, which never does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Mode {
    Sweep,
    Check,
}

/// Why a sweep ended before its last step (its summary's result and detail).
pub(super) enum Stop {
    /// Nothing judged (the registry view is not valid), with why, if known.
    Skipped(Option<String>),
    /// A read failed.
    Error(Error),
}

/// Wall time per step of one sweep.
struct StepClock {
    last: std::time::Instant,
    laps: Vec<(&'static str, std::time::Duration)>,
}

impl StepClock {
    fn start() -> StepClock {
        StepClock {
            last: std::time::Instant::now(),
            laps: Vec::with_capacity(8),
        }
    }

    fn lap(&mut self, step: &'static str) {
        let now = std::time::Instant::now();
        self.laps.push((step, now - self.last));
        self.last = now;
    }
}

impl std::fmt::Display for StepClock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (i, (step, d)) in self.laps.iter().enumerate() {
            let sep = if i == 0 { "" } else { " " };
            write!(f, "{sep}{step}={:.1}", d.as_secs_f64() * 1000.0)?;
        }
        Ok(())
    }
}

impl Engine {
    /// One pass: read, plan, publish and (as leader, unbraked) act. Passes
    /// run one at a time; a pass asked for while one runs waits for it.
    pub async fn sweep(&self, trigger: Trigger) -> SweepSummary {
        let span = tracing::info_span!("sweep", ?trigger);
        self.sweep_in_span().instrument(span).await
    }

    /// `check`: one judgement as a sweep would make it — a full read, a host
    /// whose loss was not seen counts as lost for an unknown time, no
    /// memory of earlier sweeps — and nothing published or carried out.
    pub async fn check(&self) -> Result<Checked, Error> {
        let mut st = self.state.lock().await;
        let mut summary = SweepSummary::skipped(self.now());
        let judged = async {
            let read = self.read(&mut st, Mode::Check, &mut summary).await?;
            self.judge(&st, read, Mode::Check, &mut summary)
        };
        match judged.await {
            Ok(j) => Ok(j.into()),
            Err(Stop::Skipped(_)) => Err(Error::ViewInvalid),
            Err(Stop::Error(e)) => Err(e),
        }
    }

    async fn sweep_in_span(&self) -> SweepSummary {
        let mut st = self.state.lock().await;
        let started = std::time::Instant::now();
        let mut summary = SweepSummary::skipped(self.now());
        if let Err(stop) = self.steps(&mut st, &mut summary).await {
            match stop {
                Stop::Skipped(detail) => summary.detail = detail,
                Stop::Error(why) => {
                    summary.result = SweepResult::Error;
                    summary.detail = Some(why.to_string());
                }
            }
        }
        self.finish(summary.clone(), started);
        summary
    }

    /// The sweep's steps in order; an `Err` ends it early.
    async fn steps(&self, st: &mut SweepState, summary: &mut SweepSummary) -> Result<(), Stop> {
        // Each step's time, in one debug line per sweep (where a slow sweep's
        // time goes, without a profiler).
        let mut clock = StepClock::start();
        let read = self.read(st, Mode::Sweep, summary).await?;
        clock.lap("read");
        let judged = self.judge(st, read, Mode::Sweep, summary)?;
        clock.lap("plan");
        self.publish(st, &judged).await;
        clock.lap("publish");
        let cx = Context {
            line: judged.line,
            actor: "daemon",
            gate: judged.gate,
        };
        let outcomes = self
            .execute(judged.effects(self.settings.policy.kill_remote_apps), &cx)
            .await;
        clock.lap("execute");
        self.settle(st, &judged, &outcomes, summary).await;
        clock.lap("settle");
        tracing::debug!(result = %summary.result, kind = summary.kind, candidates = summary.candidates,
            zombies = summary.zombies, actions = summary.actions, steps_ms = %clock, "sweep done");
        Ok(())
    }

    /// `publish`: the gauges and the status the API shows, and what is
    /// first seen audited (zombies, brake changes, workflow findings,
    /// ghosts, anomalies); the agents' answers to earlier kill orders.
    async fn publish(&self, st: &mut SweepState, j: &Judgement) {
        let mut per_reason: BTreeMap<Reason, i64> = Reason::ALL.iter().map(|r| (*r, 0)).collect();
        for z in j.zombies.iter() {
            *per_reason.entry(z.reason).or_default() += 1;
        }
        for (r, n) in per_reason {
            self.metrics.zombies.with_label_values(&[r.as_str()]).set(n);
        }
        self.metrics.candidates.set(j.candidates as i64);
        let brake = &j.next.brake;
        self.metrics.brake_engaged.set(brake.engaged() as i64);
        {
            let mut s = self.status_write();
            s.zombies = j.zombies.clone();
            s.zombies_at = Some(j.now);
            s.brake = brake.clone();
            s.wake = j.wake;
        }
        self.record_detection(st, &j.zombies, &j.live, j.line, j.now)
            .await;
        self.record_brake(j.was_engaged, &j.next.brake, j.line, j.now)
            .await;
        self.publish_workflows(st, &j.workflows, j.workflow_ids.as_ref(), j.line, j.now)
            .await;
        if let Some(apps) = &j.ghost_apps {
            st.ghost_apps = apps.clone();
        }
        if let Some((ghosts, _)) = &j.ghosts {
            self.publish_ghosts(st, ghosts, j.orders.as_deref(), &j.view, j.line, j.now)
                .await;
        }
        self.remote_gauge(&j.remote);
        self.publish_anomalies(st, &j.anomalies, j.line, j.now)
            .await;
    }

    /// What the effects leave for the next sweep: the plan's memory, the
    /// kill orders written, the summary's counts; after a full scan, the
    /// remote ids of tasks long over forgotten.
    async fn settle(
        &self,
        st: &mut SweepState,
        j: &Judgement,
        outcomes: &[Outcome],
        summary: &mut SweepSummary,
    ) {
        st.safety = j.next.clone();
        if let Some((_, memory)) = &j.ghosts {
            st.ghosts.memory = memory.clone();
        }
        let mut actions = 0;
        for o in outcomes {
            match o {
                Outcome::Tasks(Ok(done)) => {
                    actions += done.iter().filter(|(r, _)| *r == ActionResult::Ok).count()
                }
                Outcome::Tasks(Err(why)) => {
                    tracing::warn!(%why, "nothing written in this sweep")
                }
                Outcome::Recovered(r) if r.is_ok() => actions += 1,
                Outcome::Ordered { .. } => self.remember_order(st, o, j.now),
                _ => {}
            }
        }
        if j.full {
            self.forget_remote_apps(j.live.iter().collect(), &j.view, j.now)
                .await;
        }
        summary.result = SweepResult::Ok;
        summary.candidates = j.candidates;
        summary.zombies = j.zombies.len();
        summary.actions = actions;
        summary.workflows = j.workflows.len();
        let brake = &j.next.brake;
        if let (true, Some(b)) = (brake.engaged(), &brake.why) {
            summary.detail = Some(format!("brake engaged: {b}"));
        }
    }

    /// Counts the sweep and keeps its summary (and a chart point when it
    /// judged): called once per sweep, however it ended.
    fn finish(&self, summary: SweepSummary, started: std::time::Instant) {
        let m = &self.metrics;
        m.sweeps_total
            .with_label_values(&[summary.result.as_str()])
            .inc();
        let mut st = self.status_write();
        if summary.result != SweepResult::Skipped {
            let took = started.elapsed();
            m.sweep_duration_seconds.observe(took.as_secs_f64());
            m.last_sweep_timestamp_seconds
                .set(summary.at.timestamp_millis() as f64 / 1000.0);
            if summary.result == SweepResult::Ok {
                let h = &mut st.history;
                while h.len() >= super::HISTORY_POINTS
                    || h.front()
                        .is_some_and(|p| summary.at - p.at > super::HISTORY_WINDOW)
                {
                    h.pop_front();
                }
                h.push_back(super::SweepPoint {
                    at: summary.at,
                    zombies: summary.zombies,
                    workflows: summary.workflows,
                    actions: summary.actions,
                    duration_ms: took.as_millis() as u64,
                });
            }
        }
        st.last_sweep = Some(summary);
    }
}
