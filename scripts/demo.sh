#!/usr/bin/env bash
# The one-command demo: on a fresh Debian machine as root (idempotent), starts
# the local services, builds ds-reaper and the simulator, then runs
# `ds-sim demo`: a simulated DS 3.2 cluster loses a worker and its master, and
# ds-reaper finds, fails and recovers the orphaned tasks, step by step.
# Exits non-zero when the expected reaping did not happen. Needs only this
# repository: the DS tables come from ds-sim's own description of them
# (crates/ds-sim/src/schema.rs, checked against the real DS schemas by
# crates/ds-sim/tests/schema_agreement.rs); `--schema files` loads the real DS
# schema file from $DS_SCHEMA_DIR instead.
#   scripts/demo.sh [--hold-seconds N]   (keeps the status page up N s at the end)
#   scripts/demo.sh --schema files|described|auto
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v cargo >/dev/null; then
  if [[ -x "$HOME/.cargo/bin/cargo" ]]; then
    export PATH="$HOME/.cargo/bin:$PATH"
  else
    echo "== installing a Rust toolchain (rustup, minimal profile)"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq curl ca-certificates build-essential pkg-config >/dev/null
    curl -sSf https://sh.rustup.rs | sh -s -- -y --profile minimal
    export PATH="$HOME/.cargo/bin:$PATH"
  fi
fi

echo "== local services (ZooKeeper, MariaDB, PostgreSQL)"
bash deploy/dev/services.sh start
# shellcheck source=../deploy/dev/env.sh
source deploy/dev/env.sh

echo "== building ds-reaper and ds-sim (release; the first build takes a while)"
cargo build --release -q -p reaper -p ds-sim

target="${CARGO_TARGET_DIR:-target}/release"
exec "$target/ds-sim" demo --reaper "$target/ds-reaper" "$@"
