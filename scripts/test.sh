#!/usr/bin/env bash
# The whole test suite: installs the build's needs, builds the tests, starts LocalStack S3
# (scripts/localstack.sh: a cached venv from pinned requirements, a free loopback port), runs
# every test of the workspace including the S3 ones (`--include-ignored`: a plain `cargo test`
# reports them as ignored, "needs LocalStack S3"), and stops LocalStack, also on failure.
# Extra arguments go to the test binaries (e.g. a test-name filter).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
cargo test --workspace --no-run
# `--skip child_process_helper`: tests that are child processes of other tests, not tests.
exec scripts/localstack.sh run -- cargo test --workspace --no-fail-fast -- --include-ignored --skip child_process_helper "$@"
