//! A set of ids as one sorted slice: the SQL cursor tracks every live task
//! id between sweeps (100,000 of them) and the ghost step builds and probes
//! sets of every listed task (40,000 with 2,000 agents) each sweep, where a
//! tree or a hashed set costs a node or a hash per id and a sorted slice
//! costs one sort and a binary search. Boxed: no spare capacity is held.

/// Ids, sorted and without duplicates.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct IdSet(Box<[i64]>);

impl IdSet {
    pub fn new() -> Self {
        IdSet::default()
    }

    pub fn contains(&self, id: &i64) -> bool {
        self.0.binary_search(id).is_ok()
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn iter(&self) -> impl Iterator<Item = i64> + '_ {
        self.0.iter().copied()
    }

    pub fn as_slice(&self) -> &[i64] {
        &self.0
    }

    /// Keeps the ids `keep` says yes to.
    pub fn retain(&mut self, keep: impl FnMut(&i64) -> bool) {
        let mut v = std::mem::take(&mut self.0).into_vec();
        v.retain(keep);
        self.0 = v.into_boxed_slice();
    }

    pub fn into_vec(self) -> Vec<i64> {
        self.0.into_vec()
    }
}

impl From<Vec<i64>> for IdSet {
    /// Sorted and deduplicated in place: no second buffer.
    fn from(mut ids: Vec<i64>) -> Self {
        ids.sort_unstable();
        ids.dedup();
        IdSet(ids.into_boxed_slice())
    }
}

impl FromIterator<i64> for IdSet {
    fn from_iter<I: IntoIterator<Item = i64>>(iter: I) -> Self {
        IdSet::from(iter.into_iter().collect::<Vec<_>>())
    }
}

impl<const N: usize> From<[i64; N]> for IdSet {
    fn from(ids: [i64; N]) -> Self {
        IdSet::from(ids.to_vec())
    }
}

#[cfg(test)]
mod tests {
    use super::IdSet;

    #[test]
    fn sorted_without_duplicates_whatever_the_input_order() {
        let s: IdSet = [5, 1, 5, 3, 1].into_iter().collect();
        assert_eq!(s.as_slice(), &[1, 3, 5]);
        assert!(s.contains(&3));
        assert!(!s.contains(&2));
        assert!(!s.contains(&6));
        assert_eq!(s.len(), 3);
        assert!(IdSet::new().is_empty());
        assert_eq!(s.iter().collect::<Vec<_>>(), vec![1, 3, 5]);
    }

    #[test]
    fn retain_keeps_the_order() {
        let mut s = IdSet::from(vec![9, 2, 7, 4]);
        s.retain(|i| i % 2 == 0);
        assert_eq!(s.as_slice(), &[2, 4]);
        assert!(s.contains(&4) && !s.contains(&7));
    }
}
