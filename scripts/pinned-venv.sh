#!/usr/bin/env bash
# Prints the path of the virtual environment that holds the pinned requirements REQ, named NAME,
# cached by the file's hash under ${LAKE_CACHE_DIR:-~/.cache/lake}; installs it first when it is
# missing or incomplete (unless --path-only). Used by scripts/localstack.sh and
# scripts/python-test.sh.
#   scripts/pinned-venv.sh [--path-only] REQ NAME
set -euo pipefail
path_only=""
if [ "${1:-}" = "--path-only" ]; then path_only=1; shift; fi
REQ="$1"
NAME="$2"
CACHE="${LAKE_CACHE_DIR:-$HOME/.cache/lake}"
PYTHON="${PYTHON:-python3}"
venv="$CACHE/$NAME-venv-$(sha256sum "$REQ" | cut -c1-16)"
if [ -z "$path_only" ] && { [ ! -x "$venv/bin/python" ] || [ ! -f "$venv/.complete" ]; }; then
  echo "$NAME: installing the pinned $REQ into $venv (once)" >&2
  rm -rf "$venv"
  mkdir -p "$CACHE"
  "$PYTHON" -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check -r "$REQ" >&2
  touch "$venv/.complete"
fi
echo "$venv"
