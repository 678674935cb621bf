//! Coalescing of data changes: a node is re-read at most once per
//! [`DATA_COALESCE`].

use super::DATA_COALESCE;
use std::collections::{HashMap, HashSet};
use tokio::time::Instant as Tick;

/// Data changes waiting to be re-read, and when each node was last read.
#[derive(Default)]
pub(super) struct Coalescer {
    /// Nodes whose data changed and has not been re-read yet.
    pub(super) dirty: HashSet<String>,
    pub(super) last_read: HashMap<String, Tick>,
}

impl Coalescer {
    /// A full listing read every node in `read` afresh.
    pub(super) fn listed(&mut self, read: &[String]) {
        self.dirty.clear();
        self.last_read.clear();
        self.read(read);
    }

    pub(super) fn read(&mut self, read: &[String]) {
        let now = Tick::now();
        for p in read {
            self.dirty.remove(p);
            self.last_read.insert(p.clone(), now);
        }
    }

    pub(super) fn forget(&mut self, path: &str) {
        self.dirty.remove(path);
        self.last_read.remove(path);
    }

    /// The dirty nodes still known whose last read is [`DATA_COALESCE`] old,
    /// taken out of the dirty set.
    pub(super) fn take_due(&mut self, known: impl Fn(&str) -> bool) -> Vec<String> {
        if self.dirty.is_empty() {
            return Vec::new();
        }
        let now = Tick::now();
        let due: Vec<String> = self
            .dirty
            .iter()
            .filter(|p| {
                known(p)
                    && self
                        .last_read
                        .get(*p)
                        .is_some_and(|t| now.duration_since(*t) >= DATA_COALESCE)
            })
            .cloned()
            .collect();
        for p in &due {
            self.dirty.remove(p);
        }
        due
    }
}
