#!/usr/bin/env bash
# Sweep benchmark of the SQL adapter against raw SQL through mariadb/psql.
# Needs the local services (deploy/dev/services.sh); not part of CI.
# Usage: scripts/bench/sweep.sh [ROWS ...]   (default: 1000000 5000000)
set -euo pipefail
cd "$(dirname "$0")/../.."
# shellcheck source=../../deploy/dev/env.sh
source deploy/dev/env.sh
command -v mariadb >/dev/null || { echo "mariadb client missing" >&2; exit 1; }
command -v psql >/dev/null || { echo "psql missing" >&2; exit 1; }
cargo run --release -q -p reaper-sql --example sweep_bench -- "$@"
