#!/usr/bin/env bash
# Checks two rules of the builds, in seconds (`cargo tree`, no compilation):
#
# 1. The README's two commands compile Lance once. The `lake` binary (scripts/demo.sh:
#    `cargo run -p lake-cli`), the workspace's tests (scripts/test.sh: `cargo test --workspace
#    --features lake-bench/bench`) and the Python extension (scripts/python-test.sh: maturin
#    builds `-p lake-python`) must select the same features for every crate Lance depends on, or
#    cargo compiles Lance (about 10 minutes on 2 cores in debug) once per feature set.
# 2. No test or benchmark feature reaches a build of the `lake` binary: neither
#    `cargo build -p lake-cli` nor a workspace build (`cargo build --workspace`) selects
#    `unchecked` (GC without its checks), `failpoints` or `test-clock` of lake-gc or lake-store.
#    Only test builds (dev-dependencies) and the benchmark (`--features lake-bench/bench`) do.
# 3. The CLI and the Python package stand on the face: lake-cli and lake-python depend (outside
#    their tests) on the `lake` crate and on no lake crate below it.
#
# Prints what breaks a rule and exits 1; prints one line per rule and exits 0 otherwise.
set -euo pipefail
cd "$(dirname "$0")/.."

# `name version [features]` of every crate in a build's graph, build scripts' graphs included.
features() {
  cargo tree "$@" --prefix none -f '{p} [{f}]' | sed -e 's/ (\*)$//' -e 's/ (proc-macro)//' | sort -u
}
# The crates Lance is built from (name and version).
closure=$(cargo tree -p lance -e normal,build --prefix none -f '{p}' | awk '{print $1" "$2}' | sort -u)
in_closure() { awk 'NR == FNR { keep[$1" "$2] = 1; next } ($1" "$2) in keep' <(echo "$closure") -; }

status=0
binary=$(features -p lake-cli -e normal,build)
tests=$(features --workspace --features lake-bench/bench -e normal,build,dev)
python=$(features -p lake-python -e normal,build)
workspace=$(features --workspace -e normal,build)

lance_binary=$(echo "$binary" | in_closure)
for other in tests python; do
  if ! diff_out=$(diff <(echo "$lance_binary") <(echo "${!other}" | in_closure)); then
    echo "check-builds: the $other build selects other features than the lake binary's for crates Lance depends on" >&2
    echo "(< the binary's, > the $other build's; align them in the crate that adds the feature):" >&2
    echo "$diff_out" >&2
    status=1
  fi
done
[ "$status" -eq 0 ] && echo "check-builds: the binary, the tests and the Python extension share one feature set for Lance's $(echo "$closure" | wc -l) crates" >&2

for build in binary workspace; do
  leaked=$(echo "${!build}" | grep -E '^lake-(gc|store) ' | grep -E '\[.*\b(unchecked|failpoints|test-clock)\b' || true)
  if [ -n "$leaked" ]; then
    echo "check-builds: the $build build of lake selects a test or benchmark feature:" >&2
    echo "$leaked" >&2
    status=1
  fi
done
[ "$status" -eq 0 ] && echo "check-builds: no build of the lake binary selects unchecked, failpoints or test-clock" >&2
for package in lake-cli lake-python; do
  below=$(cargo tree -p "$package" -e normal --depth 1 --prefix none -f '{p}' | awk '{print $1}' | grep -E '^lake-(common|engine|store|gc|lance)$' || true)
  if [ -n "$below" ] || ! cargo tree -p "$package" -e normal --depth 1 --prefix none -f '{p}' | awk '{print $1}' | grep -qx lake; then
    echo "check-builds: $package must depend on the lake crate and on no crate below it; it depends on: ${below:-(not lake)}" >&2
    status=1
  fi
done
[ "$status" -eq 0 ] && echo "check-builds: lake-cli and lake-python depend on the lake crate alone among lake's crates" >&2
exit "$status"
