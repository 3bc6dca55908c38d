#!/usr/bin/env bash
# The README's test command: installs what the tests need (idempotent,
# cached downloads), refuses an unused dependency, and runs the whole suite,
# IREE-backed tests included.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
# A dependency declared in a Cargo.toml here (kiln's or fuzz/'s) that no code
# uses fails the run (exit 1), before any test is built (cargo-shear, installed
# by install-deps.sh; --locked: the lock files must not change). A false
# positive goes in that Cargo.toml's `[package.metadata.cargo-shear] ignored =
# [...]`, with a comment saying why.
source scripts/cache-dir.sh
SHEAR=$(compgen -G "$CACHE/cargo-shear-*/cargo-shear" | head -n1)
for dir in . fuzz; do
  echo "[test] cargo-shear --locked --deny-warnings $dir" >&2
  "$SHEAR" --locked --deny-warnings "$dir"
done
# Nothing skips here: a test whose resource is missing (IREE tools, GGUFs,
# vocabularies, qemu, lavapipe) fails, as under CI=true (tests/common).
export KILN_REQUIRE_IREE="${KILN_REQUIRE_IREE:-1}"
# tests/java_library.rs loads libkiln_runtime.so (kiln-runtime's cdylib) into
# a JVM from the target directory. `cargo test` builds kiln-runtime's library
# only as a dependency of the tests, which leaves the cdylib, if it builds it
# at all, in target/release/deps/; building the library itself first puts
# target/release/libkiln_runtime.so there (tests/common's
# kiln_runtime_library() takes the newer of the two). Same profile as the
# tests: the suite's build reuses what this compiles.
echo "[test] cargo build --release -p kiln-runtime --lib" >&2
cargo build --release -p kiln-runtime --lib
cargo test --release --workspace --no-fail-fast "$@"
