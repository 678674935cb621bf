#!/usr/bin/env bash
# Runs every cargo-fuzz target for SECONDS each (default 60): the parsers of
# outside data (heartbeats of every line, agent reports, registry contents
# through the membership, the agent's execute paths and command files, JDBC
# registry rows, the config file and DS_REAPER__ variables, the HTTP API's
# reap path and body and audit limit). Seeds from fuzz/seeds/<target>; the growing corpus and any
# crash artifacts live outside the repository (FUZZ_DIR, default
# /var/tmp/ds-reaper-fuzz). Exits non-zero when a target finds a crash: turn
# the artifact into a regression test before fixing it.
#   scripts/fuzz.sh [SECONDS] [TARGET...]
# FUZZ_DEV=1 builds the targets without optimisation: a much shorter build for
# the test command's short bounded run, fewer executions per second.
set -euo pipefail
cd "$(dirname "$0")/.."
secs="${1:-60}"
shift || true
work="${FUZZ_DIR:-/var/tmp/ds-reaper-fuzz}"

if ! rustup toolchain list | grep -q '^nightly'; then
    rustup toolchain install nightly --profile minimal
fi
if ! cargo fuzz --version >/dev/null 2>&1; then
    cargo install cargo-fuzz --locked
fi

cd fuzz
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
    mapfile -t targets < <(cargo +nightly fuzz list)
fi
# No sanitizer: safe Rust, and the build stays short enough for every CI run;
# what we look for are panics, which libFuzzer reports as crashes either way.
profile=()
if [ "${FUZZ_DEV:-0}" = 1 ]; then profile=(--dev); fi
cargo +nightly fuzz build -s none "${profile[@]}"
# FUZZ_BUILD_ONLY=1: the build alone (the test command builds in the background
# while the workspace tests compile, and runs the targets later).
if [ "${FUZZ_BUILD_ONLY:-0}" = 1 ]; then exit 0; fi
failed=0
for t in "${targets[@]}"; do
    corpus="$work/corpus/$t"
    artifacts="$work/artifacts/$t/"
    mkdir -p "$corpus" "$artifacts"
    echo "== fuzz $t for ${secs}s"
    start=$(date +%s)
    if cargo +nightly fuzz run -s none "${profile[@]}" "$t" "$corpus" "seeds/$t" -- \
        -max_total_time="$secs" -artifact_prefix="$artifacts" -print_final_stats=1 \
        >"$work/$t.log" 2>&1; then
        runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$work/$t.log" | grep -o '[0-9]*$' || echo "?")
        echo "   ok: $runs runs in $(( $(date +%s) - start ))s, corpus $(ls "$corpus" | wc -l) inputs"
    else
        echo "   CRASH in $t: see $work/$t.log and $artifacts" >&2
        tail -n 30 "$work/$t.log" >&2
        failed=1
    fi
done
exit "$failed"
