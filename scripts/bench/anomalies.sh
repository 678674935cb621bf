#!/usr/bin/env bash
# What SPEC §16 (stuck under a live owner, issue 23) adds to a sweep: the
# sweep's reads (task and workflow candidates through the TaskStore port) with
# and without the anomaly reads and judgement, at N task rows and N workflow
# instances (fixture 3.4.0, with 3.4's serial queue). Target: with <= 1.3x
# without. Needs the local services (deploy/dev/services.sh); not part of CI.
# Usage: scripts/bench/anomalies.sh [N ...]   (default: 1000000)
#        BENCH_DB=mariadb|postgresql, BENCH_RUNS (default 5)
set -euo pipefail
cd "$(dirname "$0")/../.."
# shellcheck source=../../deploy/dev/env.sh
source deploy/dev/env.sh
cargo run --release -q -p reaper-sql --example sweep_bench -- anomalies "$@"
