#!/usr/bin/env bash
# Registry adapter latencies against real ZooKeeper (prints, asserts nothing
# about time): node deletion -> view update (median of 20), ZooKeeper restart
# -> valid view (private server), and a 2,000-worker cluster under heartbeat load.
# Needs the local services (deploy/dev/services.sh); not part of CI.
# Usage: scripts/bench/zk_latency.sh [TEST_NAME_FILTER]
set -euo pipefail
cd "$(dirname "$0")/../.."
# shellcheck source=../../deploy/dev/env.sh
source deploy/dev/env.sh
cargo test --release -q -p reaper-zk --test bench_latency -- --ignored --nocapture --test-threads=1 "$@" 2>&1 \
  | grep -vE '^(running|test result|$)'
