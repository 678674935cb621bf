//! A full listing of the server nodes (and the agents' nodes, when read)
//! under the DS root, with their data:
//! the reads that end every gap in sight. In auto mode a direct child of
//! `/nodes/worker` is a worker if ephemeral (3.1.1+) or a group directory
//! (1.3 – 3.1.0) whose children are the workers. DS's master-failover locks
//! are read alongside ([`list_locks`]).

use crate::{bounded, ZkError};
use reaper_core::registry::{
    classify, is_lock_node, FailoverLockLayout, LayoutMode, ListedNode, Listing, NodeClass,
};
use std::collections::HashMap;
use std::time::Duration;
use zookeeper_client as zk;

/// Lists every server node of `mode` under `root` with its data, every call
/// bounded by `rt`. A node gone between the listing and its read is left out.
pub(crate) async fn list_all(
    client: &zk::Client,
    root: &str,
    mode: LayoutMode,
    agents: Option<&str>,
    rt: Duration,
) -> Result<Listing, ZkError> {
    let (leaves, legacy_dir) = leaf_paths(client, root, mode, agents, rt).await?;
    let nodes = read_leaves(client, root, leaves, rt).await?;
    Ok(Listing { nodes, legacy_dir })
}

/// A server node's path, and whether it is ephemeral when its listing
/// already told (a worker directly under `/nodes/worker`).
type Leaf = (String, Option<bool>);

/// The paths of every server (and agent) node, and whether a 1.2-style
/// `/workers` or `/masters` directory exists.
async fn leaf_paths(
    client: &zk::Client,
    root: &str,
    mode: LayoutMode,
    agents: Option<&str>,
    rt: Duration,
) -> Result<(Vec<Leaf>, bool), ZkError> {
    let full = |rel: &str| format!("{root}{rel}");
    let children = |rel: String| {
        let path = full(&rel);
        async move {
            match bounded(rt, client.get_children(&path)).await {
                Ok((c, stat)) => Ok(Some((rel, c, stat))),
                Err(ZkError::Zk(zk::Error::NoNode)) => Ok(None),
                Err(e) => Err(e),
            }
        }
    };
    let mut leaf_paths: Vec<Leaf> = Vec::new();
    let mut legacy_dir = false;
    let mut dirs = Vec::new();
    if mode.legacy_allowed() {
        dirs.push("/workers".to_string());
        dirs.push("/masters".to_string());
    }
    if mode.nodes_allowed() {
        dirs.push("/nodes/master".to_string());
    }
    for r in futures::future::join_all(dirs.into_iter().map(&children)).await {
        if let Some((rel, kids, _)) = r? {
            legacy_dir |= rel == "/workers" || rel == "/masters";
            leaf_paths.extend(kids.into_iter().map(|k| (format!("{rel}/{k}"), None)));
        }
    }
    if mode.nodes_allowed() {
        if let Some((_, kids, _)) = children("/nodes/worker".to_string()).await? {
            let subs = kids
                .into_iter()
                .map(|k| children(format!("/nodes/worker/{k}")));
            for r in futures::future::join_all(subs).await {
                let Some((rel, grand, stat)) = r? else {
                    continue;
                };
                let ephemeral = stat.ephemeral_owner != 0;
                match classify(mode, &rel, Some(ephemeral)) {
                    NodeClass::Server(_) => leaf_paths.push((rel, Some(ephemeral))),
                    NodeClass::Group => {
                        leaf_paths.extend(grand.into_iter().map(|g| (format!("{rel}/{g}"), None)))
                    }
                    NodeClass::Ignore => {}
                }
            }
        }
    }
    if let Some(dir) = agents {
        if let Some((rel, kids, _)) = children(dir.to_string()).await? {
            leaf_paths.extend(kids.into_iter().map(|k| (format!("{rel}/{k}"), None)));
        }
    }
    Ok((leaf_paths, legacy_dir))
}

/// The data of every leaf; a node gone since its listing is left out.
async fn read_leaves(
    client: &zk::Client,
    root: &str,
    leaves: Vec<Leaf>,
    rt: Duration,
) -> Result<Vec<ListedNode>, ZkError> {
    let reads = leaves.into_iter().map(|(rel, eph)| {
        let path = format!("{root}{rel}");
        async move {
            match bounded(rt, client.get_data(&path)).await {
                Ok((data, stat)) => Ok(Some(ListedNode {
                    path: rel,
                    data,
                    ephemeral: eph.unwrap_or(stat.ephemeral_owner != 0),
                })),
                Err(ZkError::Zk(zk::Error::NoNode)) => Ok(None),
                Err(e) => Err(e),
            }
        }
    });
    let mut nodes = Vec::new();
    for r in futures::future::join_all(reads).await {
        if let Some(n) = r? {
            nodes.push(n);
        }
    }
    Ok(nodes)
}

/// Reads DS's master-failover locks (SPEC §13) under `root`: per master (or
/// [`reaper_core::view::ANY_MASTER`]) how many Curator lock nodes — holders
/// and waiters — sit under its lock. A lock path that does not exist has none.
pub(crate) async fn list_locks(
    client: &zk::Client,
    root: &str,
    layout: &FailoverLockLayout,
    rt: Duration,
) -> Result<HashMap<String, usize>, ZkError> {
    let children = |rel: String| {
        let path = format!("{root}{rel}");
        async move {
            match bounded(rt, client.list_children(&path)).await {
                Ok(c) => Ok((rel, c)),
                Err(ZkError::Zk(zk::Error::NoNode)) => Ok((rel, Vec::new())),
                Err(e) => Err(e),
            }
        }
    };
    let mut holders: HashMap<String, usize> = HashMap::new();
    let dirs = layout.dirs.iter().map(|d| children(d.path.to_string()));
    let mut per_host = Vec::new();
    for r in futures::future::join_all(dirs).await {
        let (rel, kids) = r?;
        for kid in kids {
            if is_lock_node(&kid) {
                if let Some(m) = layout.lock_of(&rel) {
                    *holders.entry(m).or_default() += 1;
                }
            } else {
                let lock = format!("{rel}/{kid}");
                if let Some(m) = layout.lock_of(&lock) {
                    per_host.push((m, children(lock)));
                }
            }
        }
    }
    let (masters, reads): (Vec<_>, Vec<_>) = per_host.into_iter().unzip();
    for (m, r) in masters
        .into_iter()
        .zip(futures::future::join_all(reads).await)
    {
        let (_, kids) = r?;
        *holders.entry(m).or_default() += kids.len();
    }
    Ok(holders)
}
