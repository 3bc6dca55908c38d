#!/usr/bin/env bash
# The README's test command: installs what the tests need (idempotent,
# cached downloads), refuses an unused dependency, and runs the whole suite,
# IREE-backed tests included.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
# A dependency declared in a Cargo.toml here (kiln's or fuzz/'s) that no code
# uses fails the run (exit 1), before any test is built. A false positive (a
# crate used only through a macro or a feature) goes in that Cargo.toml's
# `[package.metadata.cargo-machete] ignored = [...]`, with a comment saying why.
echo "[test] cargo machete --skip-target-dir" >&2
cargo machete --skip-target-dir
# Under CI=true a test that needs IREE fails (never skips) when a tool is missing.
export KILN_REQUIRE_IREE="${KILN_REQUIRE_IREE:-1}"
cargo test --release --no-fail-fast "$@"
