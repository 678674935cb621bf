//! A live-state task row as the SQL adapter reads it.

use crate::Instant;
use serde::{Deserialize, Serialize};
use std::collections::HashSet;
use std::sync::Arc;

/// A string most rows share with many others (a host, a task type, a
/// worker group): one allocation per distinct value, see [`shared`].
///
/// A thin pointer (8 bytes, `Option<Shared>` too) where `Arc<str>` is a fat
/// one (16): a sweep holds four of them per live row, 3.2 MiB at 100,000
/// rows; the extra indirection is paid per read of a value, not per row.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Shared(Arc<String>);

impl Shared {
    /// Whether `a` and `b` are the same allocation.
    pub fn ptr_eq(a: &Shared, b: &Shared) -> bool {
        Arc::ptr_eq(&a.0, &b.0)
    }

    fn holders(&self) -> usize {
        Arc::strong_count(&self.0)
    }
}

impl std::ops::Deref for Shared {
    type Target = str;
    fn deref(&self) -> &str {
        self.0.as_str()
    }
}

// `String` hashes and compares as `str`, so a set of `Shared` is searched by `&str`.
impl std::borrow::Borrow<str> for Shared {
    fn borrow(&self) -> &str {
        self
    }
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(&**self, f)
    }
}

impl std::fmt::Display for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self)
    }
}

impl From<&str> for Shared {
    fn from(s: &str) -> Self {
        shared(s)
    }
}

impl Serialize for Shared {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self)
    }
}

impl<'de> Deserialize<'de> for Shared {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        Ok(shared(&s))
    }
}

/// One `t_ds_task_instance` row with `flag = 1` in a live state, joined with
/// what the planner needs from its workflow instance.
///
/// A sweep holds every live row at once (100,000 rows: tens of MiB, the
/// daemon's peak): the values a few thousand distinct strings take over all
/// rows — host, task type, worker group, the workflow's host — are
/// [`Shared`], read through [`shared`], so that each is allocated once, not
/// once per row.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Candidate {
    pub id: i64,
    /// Boxed rather than a `String`: 8 bytes less per row held (no spare
    /// capacity to track), as for `execute_path`.
    pub name: Box<str>,
    pub task_type: Shared,
    /// The raw state code as read (the write is conditional on it).
    pub state: i32,
    /// Raw host as read (conditional writes compare it with `<=>`).
    pub host: Option<Shared>,
    pub submit_time: Option<Instant>,
    pub start_time: Option<Instant>,
    pub worker_group: Option<Shared>,
    pub project_code: Option<i64>,
    pub workflow_instance_id: Option<i64>,
    /// `host` of the owning workflow instance: the master that owns it.
    pub workflow_host: Option<Shared>,
    pub workflow_state: Option<i32>,
    /// The row's `execute_path` where the line has the column (1.3, 2.0-3.1)
    /// and DS wrote one: a task whose path is not under the agent's
    /// `exec_base` is never judged by its process (SPEC §12).
    #[serde(default)]
    pub execute_path: Option<Box<str>>,
    /// For a SUB_PROCESS / SUB_WORKFLOW task: the state of its child workflow
    /// instance (the line's parent-child relation), when there is one. While
    /// it is non-terminal the task is never acted on (SPEC §3).
    #[serde(default)]
    pub child_workflow_state: Option<i32>,
    /// The task of the definition the row runs (2.0+ `task_code`): two live
    /// rows of one code in one workflow instance are a duplicate (SPEC §16).
    #[serde(default)]
    pub task_code: Option<i64>,
}

impl Candidate {
    /// A minimal row, convenient for tests and the simulator.
    pub fn new(id: i64, task_type: &str, state: i32, host: Option<&str>) -> Self {
        Candidate {
            id,
            name: format!("task-{id}").into(),
            task_type: shared(task_type),
            state,
            host: host.map(shared),
            submit_time: None,
            start_time: None,
            worker_group: None,
            project_code: None,
            workflow_instance_id: None,
            workflow_host: None,
            workflow_state: None,
            execute_path: None,
            child_workflow_state: None,
            task_code: None,
        }
    }
}

thread_local! {
    /// The distinct values handed out on this thread, and how many there
    /// were after the last pruning.
    static SHARED: std::cell::RefCell<(HashSet<Shared>, usize)> =
        std::cell::RefCell::new((HashSet::new(), 0));
}

/// Above this many values the set is pruned of those no row holds any more.
const PRUNE_FLOOR: usize = 4096;

/// `s` as a [`Shared`] string: the same allocation as every earlier call
/// with an equal string on this thread whose result is still held. Values
/// no longer held are forgotten once the set has doubled, so it stays the
/// size of what the live rows hold (one copy per thread at most).
pub fn shared(s: &str) -> Shared {
    SHARED.with(|cell| {
        let mut cell = cell.borrow_mut();
        let (set, kept) = &mut *cell;
        if let Some(v) = set.get(s) {
            return v.clone();
        }
        if set.len() >= PRUNE_FLOOR.max(*kept * 2) {
            set.retain(|v| v.holders() > 1);
            *kept = set.len();
        }
        let v = Shared(Arc::new(s.to_string()));
        set.insert(v.clone());
        v
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_strings_share_one_allocation() {
        let a = shared("10.0.0.1:1234");
        let b = shared(&String::from("10.0.0.1:1234"));
        assert!(Shared::ptr_eq(&a, &b));
        assert_eq!(&*a, "10.0.0.1:1234");
        assert!(!Shared::ptr_eq(&a, &shared("10.0.0.2:1234")));
    }

    #[test]
    fn a_shared_value_is_one_pointer_wide_and_reads_as_its_string() {
        assert_eq!(std::mem::size_of::<Option<Shared>>(), 8);
        let h = shared("w1:1234");
        assert_eq!(serde_json::to_string(&h).unwrap(), "\"w1:1234\"");
        let back: Shared = serde_json::from_str("\"w1:1234\"").unwrap();
        assert!(Shared::ptr_eq(&h, &back), "read back through the same set");
        assert_eq!(format!("{h} {h:?}"), "w1:1234 \"w1:1234\"");
    }

    #[test]
    fn values_no_row_holds_are_forgotten() {
        let kept = shared("kept-host");
        for i in 0..3 * PRUNE_FLOOR {
            drop(shared(&format!("gone-{i}")));
        }
        let n = SHARED.with(|c| c.borrow().0.len());
        assert!(n <= 2 * PRUNE_FLOOR, "pruned: {n} values held");
        assert!(
            Shared::ptr_eq(&kept, &shared("kept-host")),
            "a held value stays shared"
        );
    }
}
