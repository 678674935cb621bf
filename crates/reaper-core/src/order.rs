//! Kill orders for ghost processes (SPEC §15): what the leading daemon writes
//! to `<root>/ds-reaper/orders/<worker>/<task_id>` and what the agent answers
//! in its next report. The agent never kills on its own account: an order is
//! the only way a signal is ever sent, and it names each process by pid *and*
//! start time so that a pid reused since the order was written is refused.

use serde::{Deserialize, Serialize};

/// The registry folder, under the DS root (ZooKeeper) or the namespace
/// (etcd), that holds one child per worker, each holding one node per order.
pub const ORDERS_DIR: &str = "ds-reaper/orders";

/// `agent.kill_grace` by default: time for a task to end on SIGTERM (write
/// its last output, remove its temporary files) before SIGKILL. Here, not in
/// the agent, so that the config's checks need no agent runtime.
pub const DEFAULT_KILL_GRACE: std::time::Duration = std::time::Duration::from_secs(10);
/// The longest `agent.kill_grace`: an order is answered within it (and a few
/// seconds more), well before the daemon would re-issue it.
pub const MAX_KILL_GRACE: std::time::Duration = std::time::Duration::from_secs(300);

/// One process of the ghost task, as the daemon saw it in the agent's report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OrderPid {
    pub pid: i32,
    /// Epoch ms, as the agent reported it (`AgentProcess::started_at`).
    pub start_time: i64,
}

/// The data of an order node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KillOrder {
    pub task_id: i64,
    pub pids: Vec<OrderPid>,
    /// The reason name (`ghost_process`).
    pub reason: String,
    /// Epoch ms on the daemon's clock.
    pub issued_at: i64,
    /// Unique per issue: a re-issued order gets a new id, so an answer to an
    /// older issue is never taken for the newer one.
    pub order_id: String,
}

impl KillOrder {
    /// Parses an order node's data; unknown fields are ignored.
    pub fn parse(data: &[u8]) -> Result<KillOrder, serde_json::Error> {
        serde_json::from_slice(data)
    }

    pub fn to_json(&self) -> Vec<u8> {
        serde_json::to_vec(self).unwrap_or_default()
    }
}

/// The order node's path relative to the registry root.
pub fn order_path(worker: &str, task_id: i64) -> String {
    format!("{ORDERS_DIR}/{worker}/{task_id}")
}

/// What the agent did with an order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OrderResult {
    /// Every process of the task is gone after the signals.
    Killed,
    /// Nothing was left to signal: every pid had already exited (or been reused).
    Gone,
    /// Not carried out: kills not allowed, or a process failed the re-check.
    Refused,
    /// Signals sent, but some process survived SIGKILL or could not be signalled.
    Partial,
}

impl OrderResult {
    pub fn as_str(self) -> &'static str {
        match self {
            OrderResult::Killed => "killed",
            OrderResult::Gone => "gone",
            OrderResult::Refused => "refused",
            OrderResult::Partial => "partial",
        }
    }

    /// `killed` and `gone` end the order as done; the others as an error
    /// (SPEC §15: the audit's outcome).
    pub fn is_done(self) -> bool {
        matches!(self, OrderResult::Killed | OrderResult::Gone)
    }
}

/// One entry of a report's `orders`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OrderOutcome {
    pub order_id: String,
    pub result: OrderResult,
    #[serde(default)]
    pub detail: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_order_round_trips_in_the_specs_shape() {
        let order = KillOrder {
            task_id: 42,
            pids: vec![OrderPid {
                pid: 7,
                start_time: 1_700_000_000_000,
            }],
            reason: "ghost_process".into(),
            issued_at: 1_700_000_100_000,
            order_id: "o-1".into(),
        };
        let json: serde_json::Value = serde_json::from_slice(&order.to_json()).unwrap();
        assert_eq!(json["pids"][0]["start_time"], 1_700_000_000_000i64);
        assert_eq!(json["order_id"], "o-1");
        assert_eq!(KillOrder::parse(&order.to_json()).unwrap(), order);
        assert_eq!(
            order_path("10.0.0.1:1234", 42),
            "ds-reaper/orders/10.0.0.1:1234/42"
        );
    }

    #[test]
    fn outcomes_read_as_the_spec_names_them() {
        let o: OrderOutcome =
            serde_json::from_str(r#"{"order_id":"x","result":"partial"}"#).unwrap();
        assert_eq!(o.result, OrderResult::Partial);
        assert!(!o.result.is_done());
        assert!(OrderResult::Gone.is_done());
        assert!(
            serde_json::from_str::<OrderOutcome>(r#"{"order_id":"x","result":"maybe"}"#).is_err()
        );
    }
}
