#!/usr/bin/env bash
# Builds the release packages into target/packages/: a .deb (cargo-deb) and an
# .rpm (cargo-generate-rpm), both from the `dist` profile (fat LTO, one
# codegen unit, stripped) and the metadata in crates/reaper/Cargo.toml. The
# tools are installed with `cargo install --locked` when missing.
#   scripts/package.sh
set -euo pipefail
cd "$(dirname "$0")/.."
target="${CARGO_TARGET_DIR:-$PWD/target}"
out="$target/packages"
mkdir -p "$out"

if ! cargo deb --version >/dev/null 2>&1; then
    cargo install cargo-deb --locked --version 3.8.0
fi
if ! cargo generate-rpm --version >/dev/null 2>&1; then
    cargo install cargo-generate-rpm --locked --version 0.21.1
fi

cargo build -p reaper --bin ds-reaper --profile dist --locked
echo "== binary: $(stat -c %s "$target/dist/ds-reaper") bytes ($target/dist/ds-reaper)"
cargo deb -p reaper --no-build --profile dist -o "$out/"
cargo generate-rpm -p crates/reaper --profile dist -o "$out/"
ls -l "$out"
