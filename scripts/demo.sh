#!/usr/bin/env bash
# The main job on real files: `lake demo` on a fresh local-folder lake, ingesting this
# repository's tracked files. Extra arguments go to `lake demo` (e.g. --root DIR --from DIR).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
exec cargo run -p lake-cli --bin lake -- demo "$@"
