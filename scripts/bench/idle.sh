#!/usr/bin/env bash
# Footprint of the release daemon against a small idle cluster: RSS (VmRSS)
# and CPU % of one core (utime+stime over the window) (targets < 30 MB, < 1 %).
# Needs the local services (deploy/dev/services.sh); not part of CI.
# Usage: scripts/bench/idle.sh [SECONDS]   (default 60; BENCH_SWEEP_INTERVAL=30s for the default interval)
set -euo pipefail
cd "$(dirname "$0")/../.."
# shellcheck source=../../deploy/dev/env.sh
source deploy/dev/env.sh
cargo build --release -q -p reaper --bin ds-reaper
DS_REAPER_BIN="${CARGO_TARGET_DIR:-target}/release/ds-reaper"
export DS_REAPER_BIN
cargo run -q -p reaper-e2e --example daemon_bench -- idle "${1:-60}"
