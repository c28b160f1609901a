#!/usr/bin/env bash
# The Python package's tests: a virtual environment with the pinned tools
# (scripts/python-requirements.txt, cached by its hash under ~/.cache/lake), the package built
# into it by maturin (reusing the workspace's cargo target folder), then pytest on
# crates/lake-python/tests. S3 tests run when LAKE_TEST_S3_BUCKET is set (scripts/test.sh runs
# this under scripts/localstack.sh). Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=$(scripts/pinned-venv.sh scripts/python-requirements.txt python)
# `maturin develop` builds the extension (debug profile, as the Rust tests) and installs the
# package into the environment.
VIRTUAL_ENV="$venv" PATH="$venv/bin:$PATH" "$venv/bin/maturin" develop --quiet \
  --manifest-path crates/lake-python/Cargo.toml >&2
exec "$venv/bin/python" -m pytest -q crates/lake-python/tests "$@"
