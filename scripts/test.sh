#!/usr/bin/env bash
# The one test command: starts the local services (installing them on a fresh
# Debian machine), then format check, clippy, and every test of the workspace.
set -euo pipefail
cd "$(dirname "$0")/.."

bash deploy/dev/services.sh start
# shellcheck source=../deploy/dev/env.sh
source deploy/dev/env.sh

echo "== cargo fmt --check"
cargo fmt --all -- --check
echo "== cargo clippy"
cargo clippy --workspace --all-targets --locked -- -D warnings
echo "== cargo test"
# Integration tests share one ZooKeeper and one database server; each test uses
# its own ZooKeeper root and its own database, so they may run in parallel.
cargo test --workspace --locked -- --test-threads "${TEST_THREADS:-4}"
