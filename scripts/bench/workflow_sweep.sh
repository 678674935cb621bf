#!/usr/bin/env bash
# The workflow part of a sweep (SPEC §13, issue 12) against raw SQL through
# mariadb/psql: N workflow instances (fixture 3.2.2), 1,000 running, five task
# rows each; a full sweep and an incremental one through the TaskStore port vs
# the same reads in raw SQL, and the incremental sweep from the smallest size
# to the largest (flat). Needs the local services (deploy/dev/services.sh);
# not part of CI.
# Usage: scripts/bench/workflow_sweep.sh [WORKFLOWS ...]   (default: 1000000 5000000)
#        BENCH_DB=mariadb|postgresql, BENCH_RUNS (default 5)
set -euo pipefail
cd "$(dirname "$0")/../.."
# shellcheck source=../../deploy/dev/env.sh
source deploy/dev/env.sh
command -v mariadb >/dev/null || { echo "mariadb client missing" >&2; exit 1; }
command -v psql >/dev/null || { echo "psql missing" >&2; exit 1; }
cargo run --release -q -p reaper-sql --example sweep_bench -- workflows "$@"
