#!/usr/bin/env bash
# The README's test command: installs what the tests need (idempotent,
# cached downloads) and runs the whole suite, IREE-backed tests included.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
# Under CI=true a test that needs IREE fails (never skips) when a tool is missing.
export KILN_REQUIRE_IREE="${KILN_REQUIRE_IREE:-1}"
cargo test --release --no-fail-fast "$@"
