#!/usr/bin/env bash
# The one test command: starts the local services (installing them on a fresh
# Debian machine), then format check, clippy, the deployment checks, and every
# test of the workspace (unit, integration against ZooKeeper/MariaDB/PostgreSQL,
# end-to-end against the ds-reaper binary, chaos, real Prometheus).
set -euo pipefail
cd "$(dirname "$0")/.."

# Each part says when it starts, in seconds since the start (where a run's time goes).
t0=$SECONDS
part() { echo "== [+$((SECONDS - t0)) s] $*"; }

# A CI run starts from a cold target dir: incremental compilation only adds
# work there (its caches are never reused), and the debug line tables only
# make the compile and the ~40 links longer.
if [[ "${CI:-}" == true ]]; then
  export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"
  export CARGO_PROFILE_DEV_DEBUG="${CARGO_PROFILE_DEV_DEBUG:-0}"
fi

bash deploy/dev/services.sh start
# shellcheck source=../deploy/dev/env.sh
source deploy/dev/env.sh

part "cargo fmt --check"
cargo fmt --all -- --check
part "cargo clippy"
cargo clippy --workspace --all-targets --locked -- -D warnings
part "build binaries (the end-to-end tests start them as processes)"
cargo build --workspace --bins --locked
part "fault soak, 90 s, fixed seed (scripts/soak.sh runs it longer, with other seeds)"
"${CARGO_TARGET_DIR:-target}/debug/ds-sim" soak --duration 90s --seed 7
part "real-DS smoke, in the background until the end-to-end suite (tests/real-ds: DS's own master,"
echo "   workers and API server from Maven Central; fidelity, zombie, ghost; scripts/real-ds.sh runs every scenario)"
realds_log=$(mktemp /tmp/ds-reaper-realds.XXXXXX.log)
python3 tests/real-ds/scenarios.py --version "${REALDS_VERSION:-3.1.1}" fidelity zombie ghost >"$realds_log" 2>&1 &
realds_pid=$!
part "YARN ResourceManager jars for the e2e yarn test, in the background (tests/yarn: a MiniYARNCluster"
echo "   from Maven Central into /var/tmp/ds-reaper-services/yarn; cold about 20 s, the tests about 2 x 100 s)"
yarn_log=$(mktemp /tmp/ds-reaper-yarn.XXXXXX.log)
bash tests/yarn/launch.sh prepare >"$yarn_log" 2>&1 &
yarn_pid=$!
part "deployment artifacts (promtool, systemd-analyze, dashboard, manifests)"
bash scripts/check-deploy.sh
part "the code's shape (import cycles between modules, files over 500 lines, functions over 80)"
python3 scripts/check-structure.py
part "the .deb, installed into an empty root (the debug binary just built; scripts/package.sh makes the release packages)"
bash scripts/check-package.sh
part "fuzz targets' build, in the background while the tests compile (its own toolchain and target dir)"
fuzz_log=$(mktemp /tmp/ds-reaper-fuzz-build.XXXXXX.log)
FUZZ_DEV=1 FUZZ_BUILD_ONLY=1 bash scripts/fuzz.sh >"$fuzz_log" 2>&1 &
fuzz_pid=$!
part "cargo test"
# Integration tests share one ZooKeeper and one server per database; each test
# uses its own ZooKeeper root and its own database, so they run in parallel.
cargo test --workspace --locked --exclude reaper-e2e -- --test-threads "${TEST_THREADS:-4}"
fuzz_rc=0
wait "$fuzz_pid" || fuzz_rc=$?
if [ "$fuzz_rc" -ne 0 ]; then cat "$fuzz_log"; echo "fuzz build FAILED (exit $fuzz_rc)" >&2; exit 1; fi
part "fuzz targets, 10 s each (unoptimised build; scripts/fuzz.sh SECONDS runs them longer)"
FUZZ_DEV=1 bash scripts/fuzz.sh "${FUZZ_SECONDS:-10}"
part "real-DS smoke (started after the build)"
realds_rc=0
wait "$realds_pid" || realds_rc=$?
cat "$realds_log"
if [ "$realds_rc" -ne 0 ]; then echo "real-DS smoke FAILED (exit $realds_rc)" >&2; exit 1; fi
part "YARN ResourceManager jars (started after the build)"
yarn_rc=0
wait "$yarn_pid" || yarn_rc=$?
if [ "$yarn_rc" -ne 0 ]; then cat "$yarn_log"; echo "tests/yarn/launch.sh prepare FAILED (exit $yarn_rc)" >&2; exit 1; fi
part "end-to-end suite (one binary; its tests mostly wait on processes and services, so many run at once)"
YARN_TESTS=1 cargo test -p reaper-e2e --locked -- --test-threads "${E2E_THREADS:-8}"
part "done"
