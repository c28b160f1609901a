#!/usr/bin/env bash
# The whole test suite: installs the build's needs, then runs every test of the workspace.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
cargo test --workspace --no-fail-fast "$@"
