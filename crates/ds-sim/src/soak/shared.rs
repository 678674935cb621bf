//! The shared-host fault (SPEC §12 `lineage`, §15 `other_host`): a second
//! DS worker — a JVM stand-in of its own, its own `ds-reaper agent` — comes
//! up on the same address as a worker with an agent (another port, as a
//! blue/green deployment or a second worker on one machine has it), its task
//! folders in the same exec base (DS's default `data.basedir.path` is one
//! for every worker), runs tasks whose rows name it, and goes again: drained
//! (DS finishes its tasks first) or crashed (its JVM and task processes die
//! together). The first worker's agent, bound while the second was down, may
//! be restarted meanwhile. Each agent sees the other's task processes; a
//! kill of either's live task is a wrong kill.

use super::oracle::{Death, ExternalDeath, RowFate, TaskTruth};
use super::{agent_config, now_ts, secs, Sim, Wf, RUNNING};
use crate::db::{TaskSpec, WorkflowSpec};
use crate::procs::{ChildProcess, JvmWorker};
use crate::reaper::{free_port, ReaperProcess, Spawn};
use crate::zk::{ServerKind, SimServer};
use anyhow::{Context, Result};
use chrono::Utc;
use rand::Rng;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// The second worker while it is up.
pub(super) struct Guest {
    /// The agent (index) of the worker whose host it shares.
    host_agent: usize,
    name: String,
    /// The fault's key in the report: `shared_host(drain)` or `(crash)`.
    label: String,
    crash: bool,
    jvm: JvmWorker,
    sim: SimServer,
    agent: ReaperProcess,
    tasks: BTreeMap<i64, GuestTask>,
    /// Every task id it was given.
    ids: std::collections::BTreeSet<i64>,
    leaves_at: Instant,
    /// When to restart the first worker's agent (it then binds anew while
    /// the second worker's tasks run beside its own).
    host_agent_restart: Option<Instant>,
}

struct GuestTask {
    proc: ChildProcess,
    alive: bool,
    over: bool,
    ends_at: Instant,
}

impl Sim {
    /// Brings the second worker up beside a quiet worker with an agent: the
    /// fault's key, or None when there is no target (or one is up already).
    pub(super) async fn start_guest(&mut self) -> Result<Option<String>> {
        if self.guest.is_some() {
            return Ok(None);
        }
        let quiet = self.quiet_workers(Some(true));
        let Some(w) = self.pick(&quiet) else {
            return Ok(None);
        };
        let Some(a) = self.workers[w].agent.filter(|a| !self.agents[*a].busy) else {
            return Ok(None);
        };
        let ip = self.workers[w].host.split(':').next().unwrap_or_default();
        let name = format!("{ip}:1235");
        let crash = self.rng.gen_bool(0.4);
        let label = format!("shared_host({})", if crash { "crash" } else { "drain" });
        let jvm = JvmWorker::start().context("the second worker's JVM stand-in")?;
        let pid = u32::try_from(jvm.pid())?;
        let sim = SimServer::register_as(
            &self.zk_connect,
            &self.root,
            (self.db.line, ServerKind::Worker),
            &name,
            &[],
            Utc::now(),
            self.sim_opts.clone(),
            pid,
        )
        .await?;
        let n = self.guest_runs;
        self.guest_runs += 1;
        let port = free_port()?;
        let cfg = self.opts.dir.join(format!("agent-shared-{n}.toml"));
        let exec = self.agents[a].exec.path();
        std::fs::write(
            &cfg,
            agent_config(&self.zk_connect, &self.root, &name, exec, port),
        )?;
        let agent = ReaperProcess::spawn(Spawn {
            bin: &self.opts.reaper,
            config: &cfg,
            command: "agent",
            log: &self.opts.dir.join(format!("agent-shared-{n}.log")),
            port,
            env: &[],
            patience: Duration::from_secs(60),
        })?;
        let life = secs(40.0, 100.0, &mut self.rng);
        let first = self.workers[w].host.clone();
        let host_agent_restart = self
            .rng
            .gen_bool(0.5)
            .then(|| Instant::now() + secs(8.0, life.as_secs_f64() - 5.0, &mut self.rng));
        let mut g = Guest {
            host_agent: a,
            name,
            label: label.clone(),
            crash,
            jvm,
            sim,
            agent,
            tasks: BTreeMap::new(),
            ids: Default::default(),
            leaves_at: Instant::now() + life,
            host_agent_restart,
        };
        for _ in 0..self.rng.gen_range(2..=4) {
            self.guest_dispatch(&mut g).await;
        }
        self.guest = Some(g);
        self.target_pair(Some(first));
        Ok(Some(label))
    }

    /// DS dispatches a task to the second worker: a workflow of its own, a
    /// row naming the second worker, a process the second JVM starts in the
    /// shared exec base.
    async fn guest_dispatch(&mut self, g: &mut Guest) {
        let Some(m) = self.pick(&self.up_masters()) else {
            return;
        };
        let spec = WorkflowSpec {
            host: Some(self.masters[m].host.clone()),
            start_time: Utc::now().naive_utc(),
            ..WorkflowSpec::default()
        };
        let Ok(wf) = self.db.insert_workflow(&spec).await else {
            self.errors += 1;
            return;
        };
        let inc = self.masters[m].incarnation;
        self.wfs.insert(
            wf,
            Wf {
                master: m,
                incarnation: inc,
                held: false,
                tasks: Vec::new(),
                done: false,
            },
        );
        self.hold(wf, m);
        let now = Utc::now();
        let mut spec = TaskSpec::new(wf, RUNNING, Some(&g.name));
        spec.submit_time = Some(now.naive_utc());
        spec.start_time = Some(now.naive_utc());
        let Ok(id) = self.db.insert_task(&spec).await else {
            self.errors += 1;
            return;
        };
        g.ids.insert(id);
        if let Some(p) = self
            .targets
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .pair
            .as_mut()
        {
            p.2.insert(id);
        }
        if let Some(x) = self.wfs.get_mut(&wf) {
            x.tasks.push(id);
        }
        self.truth.insert(
            id,
            TaskTruth {
                id,
                wf,
                host: g.name.clone(),
                agent: true,
                submitted: now.timestamp_micros() as f64 / 1e6,
                dead: None,
                ds_finished: None,
                superseded: None,
                ghost_from: None,
                restart_near_submit: false,
                row: RowFate::Kept,
                fault: Some(g.label.clone()),
            },
        );
        let started = self.agents[g.host_agent]
            .exec
            .execute_path(self.db.line, wf, id)
            .and_then(|dir| g.jvm.run_in(&dir));
        match started {
            Ok(proc) => {
                let ends_at = Instant::now() + secs(15.0, 60.0, &mut self.rng);
                g.tasks.insert(
                    id,
                    GuestTask {
                        proc,
                        alive: true,
                        over: false,
                        ends_at,
                    },
                );
            }
            Err(e) => {
                // DS would report the task failed: finish it at once
                self.notes
                    .push(format!("shared host: task {id}'s process: {e}"));
                self.ds_finish(id, false).await;
            }
        }
    }

    /// Runs the second worker's part of the loop: its tasks' deaths and
    /// ends, new tasks, the first agent's restart, and its leaving.
    pub(super) async fn guest_tick(&mut self) {
        let Some(mut g) = self.guest.take() else {
            return;
        };
        let now = Instant::now();
        let ts = now_ts();
        for (id, t) in g.tasks.iter_mut() {
            if t.alive && !t.proc.is_running() {
                t.alive = false;
                self.external.push(ExternalDeath { task: *id, ts });
                if let Some(tr) = self.truth.get_mut(id) {
                    if tr.dead.is_none() && tr.ds_finished.is_none() {
                        tr.dead = Some((ts, Death::ProcessDeath));
                    }
                }
            }
        }
        if g.host_agent_restart.is_some_and(|at| at <= now) {
            g.host_agent_restart = None;
            self.restart_agent(g.host_agent);
        }
        let leaving = now >= g.leaves_at;
        let due: Vec<i64> = g
            .tasks
            .iter()
            .filter(|(_, t)| !t.over && (leaving && !g.crash || t.ends_at <= now))
            .map(|(id, _)| *id)
            .collect();
        if !(leaving && g.crash) {
            for id in due {
                // DS's worker writes the result, then its process exits
                if self.ds_finish(id, false).await {
                    if let Some(t) = g.tasks.get_mut(&id) {
                        t.over = true;
                        t.alive = false;
                        t.proc.kill();
                    }
                }
            }
        }
        let live = g.tasks.values().filter(|t| !t.over).count();
        if !leaving && live < 2 {
            self.guest_dispatch(&mut g).await;
        }
        if leaving && (g.crash || live == 0) {
            self.guest_leave(g).await;
            return;
        }
        self.guest = Some(g);
    }

    /// The second worker goes: its session closes, its agent and JVM stop;
    /// crashed, its task processes die with the JVM (their rows left live).
    async fn guest_leave(&mut self, mut g: Guest) {
        self.target_pair(None);
        let ts = now_ts();
        if g.crash {
            for (id, t) in g.tasks.iter_mut().filter(|(_, t)| t.alive) {
                t.alive = false;
                if let Some(tr) = self.truth.get_mut(id) {
                    if tr.dead.is_none() && tr.ds_finished.is_none() {
                        tr.dead = Some((ts, Death::WorkerCrash));
                    }
                }
            }
            g.jvm.kill();
            g.sim.crash().await;
            let _ = g.agent.kill().await;
        } else {
            g.sim.crash().await;
            let _ = g.agent.stop().await;
            g.jvm.kill();
        }
    }

    /// Tells the evidence sampler which pair of agents to read (None: none).
    fn target_pair(&self, first: Option<String>) {
        let g = self.guest.as_ref();
        let mut t = self.targets.lock().unwrap_or_else(|e| e.into_inner());
        t.pair = first
            .zip(g)
            .map(|(f, g)| (f, g.name.clone(), g.ids.clone()));
    }

    /// The soak's end: the second worker, if up, goes without a trace.
    pub(super) async fn guest_shut_down(&mut self) {
        if let Some(mut g) = self.guest.take() {
            let _ = g.agent.stop().await;
            g.jvm.kill();
            g.sim.crash().await;
        }
    }
}
