#!/usr/bin/env bash
# Reaping latency of the release daemon: from a worker's ZooKeeper session
# close to its task row being FAILURE, grace 5 s (target <= grace + 1 s).
# Needs the local services (deploy/dev/services.sh); not part of CI.
# Usage: scripts/bench/latency.sh [TRIALS]   (default 20; BENCH_DB=postgres for PostgreSQL)
set -euo pipefail
cd "$(dirname "$0")/../.."
# shellcheck source=../../deploy/dev/env.sh
source deploy/dev/env.sh
cargo build --release -q -p reaper --bin ds-reaper
DS_REAPER_BIN="${CARGO_TARGET_DIR:-target}/release/ds-reaper"
export DS_REAPER_BIN
cargo run -q -p reaper-e2e --example daemon_bench -- latency "${1:-20}"
