#!/usr/bin/env bash
# The whole test suite: installs the build's needs, builds the tests, starts LocalStack S3
# (scripts/localstack.sh: a cached venv from pinned requirements, a free loopback port), runs
# every test of the workspace including the S3 ones (`--include-ignored`: a plain `cargo test`
# reports them as ignored, "needs LocalStack S3"), runs the Python package's tests
# (scripts/python-test.sh: a pinned virtual environment, the package built by maturin, pytest),
# and stops LocalStack, also on failure.
# Extra arguments go to the test binaries (e.g. a test-name filter).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
# One Lance build for the demo, these tests and the Python extension, and no test feature in the
# lake binary's builds (seconds, no build).
scripts/check-builds.sh
# `--features lake-bench/bench`: the benchmark binary is built (and so kept compiling) only with
# its feature (crates/lake-bench/Cargo.toml).
cargo test --workspace --features lake-bench/bench --no-run
# `--skip child_process_helper`: tests that are child processes of other tests, not tests.
# Then the Python package's tests (scripts/python-test.sh), against the same LocalStack.
exec scripts/localstack.sh run -- bash -c '
  cargo test --workspace --features lake-bench/bench --no-fail-fast -- --include-ignored --skip child_process_helper "$@"
  rust=$?
  scripts/python-test.sh
  python=$?
  exit $(( rust != 0 ? rust : python ))
' test.sh "$@"
