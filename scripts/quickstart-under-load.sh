#!/usr/bin/env bash
# The README's Python quickstart (crates/lake-python/examples/quickstart.py), run N times in a
# row (default 10) beside two busy loops, on a local root and, under LocalStack, on S3: the
# first thing a user runs must pass on a slow machine. Uses the package as scripts/python-test.sh
# built it. Prints one line per run and fails at the first failure.
#
#   scripts/quickstart-under-load.sh [N]
set -euo pipefail
cd "$(dirname "$0")/.."
n="${1:-10}"
venv=$(scripts/pinned-venv.sh scripts/python-requirements.txt python)
example=crates/lake-python/examples/quickstart.py
yes >/dev/null & busy1=$!
yes >/dev/null & busy2=$!
trap 'kill $busy1 $busy2 2>/dev/null || true' EXIT
run() {
  local where=$1 root=$2 i=$3 start=$SECONDS
  if "$venv/bin/python" "$example" "$root" >/tmp/quickstart-$$.out 2>&1; then
    echo "$where run $i: passed in $((SECONDS - start)) s"
  else
    echo "$where run $i: FAILED"; cat /tmp/quickstart-$$.out; exit 1
  fi
}
for i in $(seq 1 "$n"); do run local "$(mktemp -d)/lake" "$i"; done
scripts/localstack.sh run -- bash -c '
  for i in $(seq 1 '"$n"'); do
    start=$SECONDS
    if "'"$venv"'/bin/python" "'"$example"'" "s3://$LAKE_TEST_S3_BUCKET/quickstart-$i" >/tmp/quickstart-s3.out 2>&1; then
      echo "s3 run $i: passed in $((SECONDS - start)) s"
    else
      echo "s3 run $i: FAILED"; cat /tmp/quickstart-s3.out; exit 1
    fi
  done'
