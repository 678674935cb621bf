#!/usr/bin/env bash
# The randomized fault soak: `ds-sim soak` against a simulated DS 3.2 cluster
# (50 workers, 4 of them with `ds-reaper agent` and real task processes, 3
# masters) with two ds-reaper replicas electing a leader, on a private
# ZooKeeper and a private MariaDB (the shared services are never restarted).
# Faults are drawn from the seed; an oracle checks every row change and every
# command against the truth and prints faults by kind (with ds-reaper's kills
# of the tasks each made), zombies reaped, misses (each explained), wrong writes
# and wrong kills (each with its history), and a `summary seed N:` line. Faults
# include a second worker on a worker's host and exec base (`shared_host`) and
# listed processes without a row (`missing_row`); ghosts are killed
# (`ghost_process = "kill"`). Exits non-zero on any wrong write or kill.
#   scripts/soak.sh [--duration 3m] [--seed N] [other ds-sim soak options]
#   SOAK_SEEDS="1 2 3" scripts/soak.sh --duration 3m   (one soak per seed, in turn)
set -euo pipefail
cd "$(dirname "$0")/.."

bash deploy/dev/services.sh start >/dev/null
# shellcheck source=../deploy/dev/env.sh
source deploy/dev/env.sh
target=${CARGO_TARGET_DIR:-target}
if [[ -z "${SOAK_NO_BUILD:-}" ]]; then
  cargo build -p reaper -p ds-sim --bins
fi
if [[ -n "${SOAK_SEEDS:-}" ]]; then
  rc=0
  for s in $SOAK_SEEDS; do
    "$target/debug/ds-sim" soak --seed "$s" "$@" || rc=1
  done
  exit $rc
fi
exec "$target/debug/ds-sim" soak "$@"
