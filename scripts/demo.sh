#!/usr/bin/env bash
# The one-command demo: on a fresh Debian machine as root (idempotent), starts
# the local services, builds ds-reaper and the simulator, then runs
# `ds-sim demo` against a simulated DS 3.2 cluster, step by step:
#   - the headline case: a task's process dies on a live worker while its row
#     stays RUNNING; `ds-reaper agent` sees it and ds-reaper fails the task
#     (process_gone; ZooKeeper only: the agent publishes through ZooKeeper);
#   - a ghost: a worker restarted as DS 3.3 restarts it leaves its task's
#     processes running while DS runs the task again elsewhere; ds-reaper
#     finds them (GET /api/v1/ghosts) and, with ghost_process = "kill", a
#     second agent with allow_kill = true ends them (ZooKeeper only);
#   - a worker dies with the masters that owned its workflows: ds-reaper fails
#     the orphaned tasks and queues DS's "recover from failed node" command;
#   - a master dies holding a workflow: ds-reaper hands it back with DS's own
#     master-failover rows; a stalled workflow is reported, never written.
# Exits non-zero when anything deviates (a zombie not reaped, a healthy row or
# a workflow written that should not be, a ghost not killed). Needs only this
# repository: the DS tables (and the JDBC registry's) come from ds-sim's own
# description of them (crates/ds-sim/src/schema.rs, checked against the real
# DS schemas by crates/ds-sim/tests/schema_agreement.rs); `--schema files`
# loads the real DS schema files from $DS_SCHEMA_DIR instead. Arguments go to
# `ds-sim demo`:
#   scripts/demo.sh [--registry zookeeper|etcd|jdbc]   (default zookeeper;
#                   etcd at $ETCD_ENDPOINTS; jdbc: DS's JDBC registry tables)
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

echo "== local services (ZooKeeper, MariaDB, PostgreSQL, etcd)"
bash deploy/dev/services.sh start
# shellcheck source=../deploy/dev/env.sh
source deploy/dev/env.sh

echo "== building ds-reaper and ds-sim (release; the first build takes a while)"
cargo build --release -q -p reaper -p ds-sim

target="${CARGO_TARGET_DIR:-target}/release"
exec "$target/ds-sim" demo --reaper "$target/ds-reaper" "$@"
