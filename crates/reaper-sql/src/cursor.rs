//! What the incremental sweep remembers between passes.

// Row ids as `IdSet`s (ascending, distinct, 8 bytes an id): a `BTreeSet`
// filled as reads return ids (ascending) leaves its nodes about half empty —
// heaptrack put the live rows' set at ~39 bytes an id at 100,000 live rows —
// and a sweep holds two (the cursor's and the one its read fills) at its peak.
use reaper_core::{Candidate, IdSet};

/// What the incremental sweep remembers between passes.
///
/// `mark` lags one sweep behind the table's top id, so a row whose id was
/// allocated before a sweep but committed after it is still read by the next
/// one. Rows at or below the mark are re-read by id only while tracked:
/// `known` (live states), `pending` (other non-finished states, which may
/// turn live later) and `undecodable` (rows that could not be decoded and may
/// still be live: the mark moves past them, so they are re-read by id until
/// they decode, finish or go away — SPEC §4.12).
#[derive(Debug, Clone, Default)]
pub struct SweepCursor {
    mark: Option<i64>,
    top: Option<i64>,
    known: IdSet,
    pending: IdSet,
    undecodable: IdSet,
    /// The `flag = 1` non-finished rows outside the candidate states of the
    /// last read, for SPEC §16; taken by the store right after the read.
    others: Vec<Candidate>,
}

/// A cursor's figures, for status and benchmarks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CursorStats {
    /// Live rows known to the cursor.
    pub tracked: usize,
    /// Non-finished, not (yet) live rows tracked by id.
    pub pending: usize,
    /// Rows that could not be decoded, re-read by id on every incremental sweep.
    pub undecodable: usize,
    /// IdSet at or below this are only re-read when tracked; `None` before the first sweep.
    pub low_water: Option<i64>,
}

impl SweepCursor {
    pub fn new() -> Self {
        Self::default()
    }
    /// A cursor whose incremental sweeps start above `mark` (a restart, a benchmark).
    pub fn with_mark(mark: i64) -> Self {
        SweepCursor {
            mark: Some(mark),
            top: Some(mark),
            ..Self::default()
        }
    }
    /// Moves the low-water mark, keeping what the cursor tracks (a restart
    /// from a persisted mark, a benchmark of a given range).
    pub fn set_low_water(&mut self, mark: i64) {
        self.mark = Some(mark);
        self.top = Some(mark);
    }
    /// IdSet at or below this are only re-read when tracked.
    pub fn low_water(&self) -> Option<i64> {
        self.mark
    }
    /// Live rows known to the cursor.
    pub fn tracked(&self) -> usize {
        self.known.len()
    }
    /// Non-finished, not (yet) live rows tracked by id.
    pub fn pending(&self) -> usize {
        self.pending.len()
    }
    /// Rows that could not be decoded, re-read by id on every incremental sweep.
    pub fn undecodable(&self) -> usize {
        self.undecodable.len()
    }
    pub fn stats(&self) -> CursorStats {
        CursorStats {
            tracked: self.tracked(),
            pending: self.pending(),
            undecodable: self.undecodable(),
            low_water: self.low_water(),
        }
    }

    /// The last read's non-candidate live rows (SUBMITTED, DELAY, ...), once.
    pub fn take_others(&mut self) -> Vec<Candidate> {
        std::mem::take(&mut self.others)
    }

    pub(crate) fn set_others(&mut self, others: Vec<Candidate>) {
        self.others = others;
    }

    /// What a completed sweep learned; the mark moves one sweep behind `top_now`.
    pub(crate) fn replace(
        &mut self,
        known: IdSet,
        pending: IdSet,
        undecodable: IdSet,
        top_now: Option<i64>,
    ) {
        self.known = known;
        self.pending = pending;
        self.undecodable = undecodable;
        self.advance(top_now);
    }

    fn advance(&mut self, top_now: Option<i64>) {
        let prev = self.top.or(top_now);
        self.mark = match (self.mark, prev) {
            (Some(m), Some(p)) => Some(m.max(p)),
            (m, p) => m.or(p).or(Some(0)),
        };
        if top_now.is_some() {
            self.top = top_now;
        }
    }

    /// The tracked ids at or below the mark: the live ones as a slice of
    /// the cursor's own (not copied: at 100,000 live rows the read holds its
    /// new set beside it), then the others, ascending and distinct.
    pub(crate) fn old_tracked(&self) -> (&[i64], Vec<i64>) {
        let mark = self.mark.unwrap_or(0);
        let known = self.known.as_slice();
        let known = &known[..known.partition_point(|&id| id <= mark)];
        let rest: IdSet = self
            .pending
            .iter()
            .chain(self.undecodable.iter())
            .filter(|&id| id <= mark && known.binary_search(&id).is_err())
            .collect();
        (known, rest.into_vec())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursor_lags_one_sweep() {
        let mut c = SweepCursor::new();
        c.advance(Some(100));
        assert_eq!(c.low_water(), Some(100));
        c.advance(Some(150));
        assert_eq!(c.low_water(), Some(100));
        c.advance(Some(170));
        assert_eq!(c.low_water(), Some(150));
        c.advance(None);
        assert_eq!(c.low_water(), Some(170));
    }

    #[test]
    fn old_tracked_is_below_the_mark_and_distinct() {
        let mut c = SweepCursor::with_mark(10);
        c.replace(
            [3, 12].into(),
            [5].into(),
            [3, 7].into(),
            Some(20), // the mark stays at 10 for this sweep
        );
        let (known, rest) = c.old_tracked();
        assert_eq!((known, rest), (&[3][..], vec![5, 7]));
        assert_eq!(
            IdSet::from(vec![9, 3, 9, 1]).iter().collect::<Vec<_>>(),
            vec![1, 3, 9]
        );
        assert_eq!(
            c.stats(),
            CursorStats {
                tracked: 2,
                pending: 1,
                undecodable: 2,
                low_water: Some(10)
            }
        );
    }
}
