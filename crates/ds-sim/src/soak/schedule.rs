//! The faults a soak draws from its seed.

use rand::rngs::StdRng;
use rand::Rng;

/// Every fault kind the soak knows, in the order the report lists them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Fault {
    /// A worker's session closes and its JVM is gone; it comes back later
    /// with a new startup time.
    WorkerCrash,
    /// A worker's session closes and it re-registers, same JVM, within the grace.
    WorkerFlap,
    /// A worker restarts at once with a new startup time.
    WorkerRestart,
    /// A worker's heartbeat stops being rewritten (a short pause, or a hang
    /// beyond `heartbeat_stale_after`).
    HeartbeatFreeze,
    /// A task process dies on a live worker with an agent.
    TaskProcessDeath,
    /// A task process dies and DS writes its result as ds-reaper would write.
    DsFinishRace,
    /// DS finishes a task but leaves its process running (a ghost).
    LingeringProcess,
    /// A master's session closes (JVM gone); it restarts later.
    MasterDeath,
    /// `ds-reaper agent` killed with -9 and started again.
    AgentRestart,
    /// A network blip drops a worker and its agent together (the agent's
    /// ZooKeeper connection cut long enough to lose its session).
    AgentSessionLoss,
    /// The (private) ZooKeeper stopped and started again.
    ZkRestart,
    /// The (private) MariaDB killed with -9 and started again.
    DbRestart,
    /// A ds-reaper replica killed with -9, restarted after a moment.
    ReplicaKill9,
    /// A ds-reaper replica SIGSTOPped, then SIGCONTed.
    ReplicaSigstop,
    /// One replica cut off from ZooKeeper (its registry connections through
    /// a proxy the soak controls), then let back.
    RegistryPartition,
    /// A second worker (a JVM stand-in of its own, its own agent) comes up
    /// on the same host and address as a worker with an agent, its task
    /// folders in the same exec base, runs tasks, and goes again (drained,
    /// or crashed with its tasks); the first worker's agent may restart
    /// meanwhile. Neither agent may list, nor ds-reaper kill, the other's.
    SharedHost,
    /// Task processes whose rows ds-reaper never read (another DS
    /// installation's, in another database; a burst of them looks like a
    /// wrong database), or a live task's row deleted under its process.
    MissingRow,
}

impl Fault {
    pub const ALL: [Fault; 17] = [
        Fault::WorkerCrash,
        Fault::WorkerFlap,
        Fault::WorkerRestart,
        Fault::HeartbeatFreeze,
        Fault::TaskProcessDeath,
        Fault::DsFinishRace,
        Fault::LingeringProcess,
        Fault::MasterDeath,
        Fault::AgentRestart,
        Fault::AgentSessionLoss,
        Fault::ZkRestart,
        Fault::DbRestart,
        Fault::ReplicaKill9,
        Fault::ReplicaSigstop,
        Fault::RegistryPartition,
        Fault::SharedHost,
        Fault::MissingRow,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Fault::WorkerCrash => "worker_crash",
            Fault::WorkerFlap => "worker_flap",
            Fault::WorkerRestart => "worker_restart",
            Fault::HeartbeatFreeze => "heartbeat_freeze",
            Fault::TaskProcessDeath => "task_process_death",
            Fault::DsFinishRace => "ds_finish_race",
            Fault::LingeringProcess => "lingering_process",
            Fault::MasterDeath => "master_death",
            Fault::AgentRestart => "agent_restart",
            Fault::AgentSessionLoss => "agent_session_loss",
            Fault::ZkRestart => "zk_restart",
            Fault::DbRestart => "db_restart",
            Fault::ReplicaKill9 => "replica_kill9",
            Fault::ReplicaSigstop => "replica_sigstop",
            Fault::RegistryPartition => "registry_partition",
            Fault::SharedHost => "shared_host",
            Fault::MissingRow => "missing_row",
        }
    }

    /// Relative frequency.
    fn weight(self) -> u32 {
        match self {
            Fault::WorkerCrash => 10,
            Fault::WorkerFlap => 10,
            Fault::WorkerRestart => 8,
            Fault::HeartbeatFreeze => 8,
            Fault::TaskProcessDeath => 12,
            Fault::DsFinishRace => 6,
            Fault::LingeringProcess => 4,
            Fault::MasterDeath => 3,
            Fault::AgentRestart => 4,
            Fault::AgentSessionLoss => 4,
            Fault::ZkRestart => 3,
            Fault::DbRestart => 3,
            Fault::ReplicaKill9 => 3,
            Fault::ReplicaSigstop => 3,
            Fault::RegistryPartition => 3,
            Fault::SharedHost => 3,
            Fault::MissingRow => 5,
        }
    }

    /// A fault of the shared infrastructure: one at a time, so that the
    /// daemon also gets to act between them.
    pub fn is_infrastructure(self) -> bool {
        matches!(
            self,
            Fault::ZkRestart
                | Fault::DbRestart
                | Fault::ReplicaKill9
                | Fault::ReplicaSigstop
                | Fault::RegistryPartition
        )
    }

    /// Draws the next kind.
    pub fn draw(rng: &mut StdRng) -> Fault {
        let total: u32 = Fault::ALL.iter().map(|f| f.weight()).sum();
        let mut x = rng.gen_range(0..total);
        for f in Fault::ALL {
            if x < f.weight() {
                return f;
            }
            x -= f.weight();
        }
        Fault::WorkerCrash
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn a_seed_draws_the_same_faults_and_every_kind_comes_up() {
        let draw = |seed| {
            let mut r = StdRng::seed_from_u64(seed);
            (0..2000).map(|_| Fault::draw(&mut r)).collect::<Vec<_>>()
        };
        assert_eq!(draw(7), draw(7));
        assert_ne!(draw(7), draw(8));
        let all = draw(7);
        for f in Fault::ALL {
            assert!(all.contains(&f), "{} never drawn", f.name());
        }
    }
}
