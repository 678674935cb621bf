//! One sweep, top to bottom, in named steps:
//!
//! `read` (line, candidates, the tasks agents list) → `judge` (the view after
//! the read, the task plan, detection and brake records, remote apps) →
//! `publish` (metrics, status) → `act` (the task writes) → the anomalies'
//! task part → `workflows` (SPEC §13) → `ghosts` (SPEC §15) → the anomalies
//! published (SPEC §16) → `finish`, once, whatever step stopped the sweep.
//!
//! The steps share one [`Budget`]: a hold, the brake, the settle, the
//! per-sweep cap and the token bucket are judged the same way for task,
//! workflow and ghost writes.

use super::act::{Item, NotWritten};
use super::ghosts::Listed;
use super::{ActionResult, Engine, Gate, SweepResult, SweepState, SweepSummary, Trigger};
use reaper_core::ports::Scan;
use reaper_core::{
    plan_within, Budget, Candidate, Disposition, DsLine, Instant, Reason, RegistryView,
    SafetyState, ViewState, Zombie,
};
use std::collections::BTreeMap;
use std::sync::Arc;
use tracing::Instrument;

/// Why a sweep ended before its last step (its summary's result and detail).
pub(super) enum Stop {
    /// Nothing judged (the registry view is not valid), with why, if known.
    Skipped(Option<String>),
    /// A read failed.
    Failed(String),
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

/// The `read` step's result.
struct Read {
    line: DsLine,
    /// Why the DS line holds writes, if it does.
    line_hold: Option<String>,
    states: Vec<i32>,
    full: bool,
    candidates: Vec<Candidate>,
    listed: Option<Listed>,
}

/// What the `judge` step decided on, for the steps after it.
pub(super) struct Judged {
    pub view: Arc<RegistryView>,
    pub now: Instant,
    pub gate: Gate,
    /// The sweep's admission: what the task plan left of it.
    pub budget: Budget,
    /// The task plan's memory for the next sweep (its bucket is the budget's).
    next: SafetyState,
    zombies: Arc<Vec<Zombie>>,
    /// The ResourceManager's answers of this sweep, asked once per id for
    /// zombies and ghosts alike (SPEC §17).
    pub remote: super::remote::Answers,
}

impl Judged {
    /// What the next sweep starts from: the plan's memory, the bucket as the
    /// last step left it.
    fn remembered(&self) -> SafetyState {
        SafetyState {
            bucket: self.budget.bucket,
            ..self.next.clone()
        }
    }
}

impl Engine {
    /// One pass: read, plan, and (as leader, unbraked) act. Passes run one
    /// at a time; a pass asked for while one runs waits for it.
    pub async fn sweep(&self, trigger: Trigger) -> SweepSummary {
        let span = tracing::info_span!("sweep", ?trigger);
        self.sweep_in_span().instrument(span).await
    }

    async fn sweep_in_span(&self) -> SweepSummary {
        let mut st = self.state.lock().await;
        let started = std::time::Instant::now();
        let mut summary = SweepSummary::skipped(self.now());
        if let Err(stop) = self.steps(&mut st, &mut summary).await {
            match stop {
                Stop::Skipped(detail) => summary.detail = detail,
                Stop::Failed(why) => {
                    summary.result = SweepResult::Error;
                    summary.detail = Some(why);
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
        let read = self.read(st, summary).await?;
        clock.lap("read");
        let mut judged = self.judge(st, &read, summary).await?;
        clock.lap("judge");
        self.publish(&judged, read.candidates.len());
        let applied = self.act_on_zombies(&judged, read.line).await;
        clock.lap("act");
        let anomalies = self
            .task_anomalies(
                read.line,
                &read.candidates,
                &read.states,
                &judged.view,
                judged.now,
            )
            .await;
        // The task rows are done with: let them go before the workflow step
        // reads its own, so the two never add up (at 100,000 live rows each
        // is tens of MiB).
        let Read {
            line,
            full,
            candidates,
            listed,
            ..
        } = read;
        let candidate_count = candidates.len();
        drop(candidates);
        clock.lap("task_anomalies");
        let wf = self.sweep_workflows(st, line, full, &mut judged).await;
        clock.lap("workflows");
        self.sweep_ghosts(st, line, listed, &mut judged).await;
        clock.lap("ghosts");
        self.remote_gauge(&judged.remote);
        st.safety = judged.remembered();
        self.publish_anomalies(st, anomalies, &wf.stopping, &judged.view, line, judged.now)
            .await;
        clock.lap("anomalies");

        summary.result = SweepResult::Ok;
        summary.candidates = candidate_count;
        summary.zombies = judged.zombies.len();
        summary.actions = applied + wf.actions;
        summary.workflows = wf.findings;
        let brake = &judged.next.brake;
        if let (true, Some(b)) = (brake.engaged(), &brake.why) {
            summary.detail = Some(format!("brake engaged: {b}"));
        }
        tracing::debug!(result = %summary.result, kind = summary.kind, candidates = summary.candidates,
            zombies = summary.zombies, actions = summary.actions, steps_ms = %clock, "sweep done");
        Ok(())
    }

    /// `read`: the line, the candidates (full or incremental), and the rows of
    /// the tasks the agents list. Skipped while the view is not valid.
    async fn read(&self, st: &mut SweepState, summary: &mut SweepSummary) -> Result<Read, Stop> {
        let before = self.registry.view();
        self.refresh_gauges(&before);
        if let ViewState::Invalid { reason, .. } = &before.state {
            return Err(Stop::Skipped(Some(format!(
                "registry view invalid: {reason}"
            ))));
        }
        drop(before);
        let (line, line_hold) = self
            .line(st)
            .await
            .map_err(|e| Stop::Failed(e.to_string()))?;
        let (states, _) = self.settings.live_states(line);
        let full = st.last_full.is_none_or(|t| {
            (self.now() - t) >= reaper_core::delta(self.settings.reconcile.full_scan_interval)
        });
        summary.kind = if full { "full" } else { "incremental" };
        let scan = if full { Scan::Full } else { Scan::Incremental };
        let candidates = match self.store.candidates(line, &states, scan).await {
            Ok(c) => c,
            Err(e) => {
                self.db_failed(&e);
                tracing::warn!(error = %e, "sweep failed reading candidates");
                return Err(Stop::Failed(e.to_string()));
            }
        };
        if full {
            st.last_full = Some(self.now());
        }
        self.status_write().db_error = None;
        let listed = self.read_listed(line, &candidates).await;
        Ok(Read {
            line,
            line_hold,
            states,
            full,
            candidates,
            listed,
        })
    }

    /// `judge`: the task plan against a view taken after the read (SPEC
    /// §4.1: a worker that registered during a long scan and got a task is
    /// then known, and a host the view never saw counts from the task's own
    /// time anyway); new zombies and brake changes audited; the remote
    /// applications' hold (SPEC §17).
    async fn judge(
        &self,
        st: &mut SweepState,
        read: &Read,
        summary: &mut SweepSummary,
    ) -> Result<Judged, Stop> {
        let view = self.registry.view();
        self.refresh_gauges(&view);
        let now = self.now();
        summary.at = now;
        let Some(valid_since) = view.valid_since() else {
            let detail = match &view.state {
                ViewState::Invalid { reason, .. } => {
                    Some(format!("registry view invalid: {reason}"))
                }
                ViewState::Valid { .. } => None,
            };
            return Err(Stop::Skipped(detail));
        };
        let hold = match self.is_leader() {
            false => Some("not the leader".to_string()),
            true => read.line_hold.clone(),
        };
        let policy = self.settings.policy(read.line);
        let mut budget = Budget::for_sweep(&st.safety, &policy, now).held(hold);
        let mut plan = plan_within(
            &view,
            &read.candidates,
            now,
            &policy,
            &st.safety,
            &mut budget,
        );
        let was_engaged = st.safety.brake.engaged();
        st.safety = plan.next.clone();
        self.record_detection(st, &plan, &read.candidates, read.line, now)
            .await;
        self.record_brake(was_engaged, &plan, read.line, now).await;
        let gate = Gate {
            valid_since,
            leader_only: true,
        };
        // SPEC §17: a task whose YARN application may still run is held.
        let remote = self
            .judge_remote_apps(&mut plan.zombies, &view, read.line, gate)
            .await;
        if read.full {
            self.forget_remote_apps(&read.candidates, &view, now).await;
        }
        Ok(Judged {
            zombies: Arc::new(std::mem::take(&mut plan.zombies)),
            next: plan.next,
            view,
            now,
            gate,
            budget,
            remote,
        })
    }

    /// `publish`: the task plan's gauges and the status the API shows.
    fn publish(&self, judged: &Judged, candidates: usize) {
        let mut per_reason: BTreeMap<Reason, i64> = Reason::ALL.iter().map(|r| (*r, 0)).collect();
        for z in judged.zombies.iter() {
            *per_reason.entry(z.reason).or_default() += 1;
        }
        for (r, n) in per_reason {
            self.metrics.zombies.with_label_values(&[r.as_str()]).set(n);
        }
        self.metrics.candidates.set(candidates as i64);
        let brake = &judged.next.brake;
        self.metrics.brake_engaged.set(brake.engaged() as i64);
        let mut s = self.status_write();
        s.zombies = judged.zombies.clone();
        s.zombies_at = Some(judged.now);
        s.brake = brake.clone();
    }

    /// `act`: the zombies the plan admitted, through the act pipeline.
    /// Returns how many writes were applied.
    async fn act_on_zombies(&self, judged: &Judged, line: DsLine) -> usize {
        let items: Vec<Item<'_>> = judged
            .zombies
            .iter()
            .filter(|z| z.disposition == Disposition::Act)
            .map(|zombie| Item {
                zombie,
                forced: false,
            })
            .collect();
        match self.act(&items, line, "daemon", judged.gate).await {
            Ok(done) => done.iter().filter(|(r, _)| *r == ActionResult::Ok).count(),
            Err(NotWritten::Gate(why) | NotWritten::Audit(why)) => {
                tracing::warn!(%why, planned = items.len(), "nothing written in this sweep");
                0
            }
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
