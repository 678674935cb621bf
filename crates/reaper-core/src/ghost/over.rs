//! Whether a listed task's row says its process should not run (SPEC §15),
//! and the proof `other_host` needs beyond a path.

use super::{GhostRow, Over};
use crate::agent::{AgentTask, Lineage};
use crate::host;
use crate::line::{DsLine, NEED_FAULT_TOLERANCE};
use crate::view::{NodeKind, RegistryView};
use crate::{delta, Instant};
use std::time::Duration;

/// Whether the row (or its absence) says the task is over for `worker`'s
/// process, and how. A live row on this worker — or one with no host yet —
/// is not over: its process is the task itself.
///
/// An `other_host` answer here is judged on the row alone: [`other_host_counts`]
/// decides whether the listing agent may take it as proof.
pub fn over(view: &RegistryView, worker: &str, row: Option<&GhostRow>) -> Option<Over> {
    let Some(r) = row else {
        return Some(Over::NoRow);
    };
    over_fields(view, worker, r.task.state, r.flag, r.task.host.as_deref())
}

/// [`over`] of a row given by the fields it looks at: the sweep asks it of
/// every listed task among its candidates, without a copy of each.
pub fn over_fields(
    view: &RegistryView,
    worker: &str,
    state: i32,
    flag: i32,
    row_host: Option<&str>,
) -> Option<Over> {
    if DsLine::is_finished_task_state(state) {
        return Some(Over::Terminal);
    }
    if state == NEED_FAULT_TOLERANCE {
        return Some(Over::NeedFaultTolerance);
    }
    if flag == 0 {
        return Some(Over::Superseded);
    }
    // A live row is another host's only when its host is a worker the view
    // knows (live or lost) and not this one: a host the view cannot place —
    // an address whose alias was forgotten — might be this worker's own, and
    // a live task's process is never a ghost.
    let h = row_host.filter(|h| !host::is_empty(Some(h)))?;
    let me = host::normalize(worker);
    let named = view.resolve(NodeKind::Worker, h);
    if named == me {
        return None;
    }
    let own_address = view
        .workers
        .get(me.as_ref())
        .and_then(|n| n.address.as_deref());
    let known =
        view.live(NodeKind::Worker, h).is_some() || view.lost_at(NodeKind::Worker, h).is_some();
    if known && named != me && own_address != Some(host::normalize(h).as_ref()) {
        return Some(Over::OtherHost);
    }
    None
}

/// Whether a live row naming `row_host` proves that `worker`'s agent lists
/// a process that should not run. Two workers may share a machine and its
/// execute paths, and each agent then sees the other's task trees: a path
/// is no proof there. So never when the row host is a live worker on the
/// same machine (same address, any port) unless the agent says the tree is
/// its own worker's, and never while the row host's own agent lists the task.
pub fn other_host_counts(
    view: &RegistryView,
    worker: &str,
    task: &AgentTask,
    row_host: &str,
    now: Instant,
    stale_after: Duration,
) -> bool {
    let named = view.resolve(NodeKind::Worker, row_host);
    // Its own agent's listing is positive evidence that the process is the
    // task there: any listing within agent_stale_after, whatever that
    // report's completeness or the node's presence since (a superset of
    // "fresh": the safe side, as the hold of SPEC §12).
    let listed_there = view.agents.get(named.as_ref()).is_some_and(|a| {
        a.listed_at
            .get(&task.task_id)
            .is_some_and(|at| now - *at <= delta(stale_after))
    });
    if listed_there {
        return false;
    }
    let live_beside =
        view.live(NodeKind::Worker, row_host).is_some() && same_machine(view, worker, row_host);
    !live_beside || task.lineage == Some(Lineage::Own)
}

/// Whether two workers (node names or heartbeat addresses) are on one
/// machine: any address of one equals any address of the other, ports aside.
pub fn same_machine(view: &RegistryView, a: &str, b: &str) -> bool {
    let (a, b) = (addresses(view, a), addresses(view, b));
    a.iter().any(|x| b.contains(x))
}

/// The address parts a worker is known by: its node name's, its heartbeat
/// address's, and the raw host's own.
fn addresses(view: &RegistryView, raw: &str) -> Vec<String> {
    let named = view.resolve(NodeKind::Worker, raw);
    let mut out = vec![ip_of(raw), ip_of(&named)];
    if let Some(a) = view
        .live(NodeKind::Worker, raw)
        .and_then(|n| n.address.as_deref())
    {
        out.push(ip_of(a));
    }
    out.retain(|s| !s.is_empty());
    out
}

fn ip_of(name: &str) -> String {
    host::normalize(host::host_part(name))
        .trim_matches(['[', ']'])
        .to_string()
}
