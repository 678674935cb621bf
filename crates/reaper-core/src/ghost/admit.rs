//! Which of a sweep's wanted kills are admitted: none while the database
//! looks like another one, none in a mass, the rest through the budget.

use super::{Ghost, GhostPolicy, DATABASE_MISMATCH};
use crate::budget::Budget;
use crate::plan::{Blocked, Disposition};
use crate::Instant;

/// What one sweep found of the listed tasks, for the kills it admits.
pub(super) struct Counts {
    /// Listed tasks whose id was read.
    pub(super) listed: usize,
    /// Distinct listed tasks the read found no row for.
    pub(super) no_row: usize,
}

/// Admits the wanted kills through the budget, in order — unless the
/// daemon's reading is more likely wrong than the cluster:
/// - `brake.min_zombies` or more listed tasks have no row at once (a lagging
///   replica, a restored backup, another DS's database): every kill is held,
///   noted `database_mismatch` (SPEC §15);
/// - so many of the listed tasks would be killed at once (as the brake does
///   for zombies, SPEC §4.4, the same `min_zombies` and `max_zombie_fraction`).
pub(super) fn admit_kills(
    ghosts: &mut [Ghost],
    wanted: &[usize],
    counts: &Counts,
    valid_since: Instant,
    now: Instant,
    policy: &GhostPolicy,
    budget: &mut Budget,
) {
    let (n, listed) = (wanted.len(), counts.listed);
    let mismatch = counts.no_row > 0 && counts.no_row >= policy.brake_min;
    let mass = n > 0
        && n >= policy.brake_min
        && (n as f64) >= policy.brake_fraction * (listed.max(1) as f64);
    for &i in wanted {
        let g = &mut ghosts[i];
        if mismatch {
            // said per ghost whatever else holds it: the operator must see
            // that the database, not the cluster, is in question
            g.disposition = Disposition::Blocked(Blocked::Brake(format!(
                "{DATABASE_MISMATCH}: {} of {listed} listed tasks have no row \
                 (brake.min_zombies {})",
                counts.no_row, policy.brake_min
            )));
            g.note = Some(DATABASE_MISMATCH.to_string());
            continue;
        }
        let disposition = if let Some(b) = budget.blocked(valid_since, now) {
            // a hold, the brake, the settle: said as the budget says them
            Disposition::Blocked(b)
        } else if mass {
            Disposition::Blocked(Blocked::Brake(format!(
                "{n} of {listed} listed tasks would be killed at once \
                 (brake.min_zombies {}, brake.max_zombie_fraction {})",
                policy.brake_min, policy.brake_fraction
            )))
        } else {
            budget.admit(valid_since, now)
        };
        // a hold (standby, check) is said once by the status, not per ghost
        if let Disposition::Blocked(b) = &disposition {
            if !matches!(b, Blocked::Hold(_)) {
                g.note = Some(b.describe());
            }
        }
        g.disposition = disposition;
    }
}
