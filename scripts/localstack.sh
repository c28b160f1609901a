#!/usr/bin/env bash
# LocalStack S3 for lake's tests, without Docker (see ../shared/localstack/NOTES.md facts):
# the LocalStack runtime runs directly on the host from a virtual environment built from the
# pinned scripts/localstack-requirements.txt (cached by its hash under ~/.cache/lake).
#
#   scripts/localstack.sh run -- CMD [ARGS...]   start, export the endpoint, run CMD, always stop
#   scripts/localstack.sh start                  start in the background; prints `export ...` lines
#   scripts/localstack.sh stop                   stop what `start` started
#
# Exported for the tests: LAKE_TEST_S3_BUCKET (created empty), LAKE_TEST_S3_ENDPOINT, LAKE_TEST_S3_LOG (LocalStack's log, one line per
# request), AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_REGION, AWS_ALLOW_HTTP.
# Only 127.0.0.1 is used.
set -euo pipefail
cd "$(dirname "$0")/.."

REQ=scripts/localstack-requirements.txt
CACHE="${LAKE_CACHE_DIR:-$HOME/.cache/lake}"
STATE="$CACHE/localstack-state"
PYTHON="${PYTHON:-python3}"

venv_dir() {
  scripts/pinned-venv.sh --path-only "$REQ" localstack
}

install() {
  if [ ! -f "$(venv_dir)/.complete" ]; then
    echo "localstack: installing the pinned LocalStack (about 2 minutes, once)" >&2
    scripts/pinned-venv.sh "$REQ" localstack >/dev/null
    # A stale plugin cache from a broken install hides LocalStack's plugins.
    rm -rf "$HOME/.cache/plux"
  fi
}

free_port() {
  "$PYTHON" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}

start() {
  install
  local venv port dir
  venv=$(venv_dir)
  port=$(free_port)
  dir=$(mktemp -d "${TMPDIR:-/tmp}/lake-localstack.XXXXXX")
  mkdir -p "$STATE"
  (
    cd "$dir"
    GATEWAY_LISTEN="127.0.0.1:$port" SERVICES=s3 DNS_ADDRESS=0 EAGER_SERVICE_LOADING=1 \
      LOCALSTACK_VOLUME_DIR="$dir/volume" SKIP_SSL_CERT_DOWNLOAD=1 DISABLE_EVENTS=1 \
      exec "$venv/bin/python" -m localstack.runtime.main >"$dir/localstack.log" 2>&1
  ) &
  local pid=$!
  echo "$pid" >"$STATE/pid"
  echo "$dir" >"$STATE/dir"
  local endpoint="http://127.0.0.1:$port"
  for _ in $(seq 1 120); do
    if curl -fsS "$endpoint/_localstack/health" 2>/dev/null | grep -q '"s3": "\(available\|running\)"'; then
      # The bucket the tests use (each test works under its own prefix).
      curl -fsS -X PUT "$endpoint/lake-test" >/dev/null
      cat >"$STATE/env" <<ENV
export LAKE_TEST_S3_BUCKET=lake-test
export LAKE_TEST_S3_ENDPOINT=$endpoint
export LAKE_TEST_S3_LOG=$dir/localstack.log
export AWS_ENDPOINT_URL=$endpoint
export AWS_ACCESS_KEY_ID=test
export AWS_SECRET_ACCESS_KEY=test
export AWS_REGION=us-east-1
export AWS_ALLOW_HTTP=true
ENV
      echo "localstack: S3 ready at $endpoint (pid $pid, log $dir/localstack.log)" >&2
      cat "$STATE/env"
      return 0
    fi
    if ! kill -0 "$pid" 2>/dev/null; then
      echo "localstack: the process exited before becoming healthy; its log:" >&2
      tail -50 "$dir/localstack.log" >&2
      return 1
    fi
    sleep 0.5
  done
  echo "localstack: not healthy after 60 s; its log:" >&2
  tail -50 "$dir/localstack.log" >&2
  stop
  return 1
}

stop() {
  if [ -f "$STATE/pid" ]; then
    local pid
    pid=$(cat "$STATE/pid")
    if kill -0 "$pid" 2>/dev/null; then
      kill "$pid" 2>/dev/null || true
      for _ in $(seq 1 20); do kill -0 "$pid" 2>/dev/null || break; sleep 0.25; done
      kill -9 "$pid" 2>/dev/null || true
    fi
    rm -f "$STATE/pid" "$STATE/env"
    echo "localstack: stopped (pid $pid)" >&2
  fi
}

case "${1:-}" in
  install) install ;;
  start) start ;;
  stop) stop ;;
  run)
    shift
    [ "${1:-}" = "--" ] && shift
    [ $# -gt 0 ] || { echo "usage: $0 run -- CMD [ARGS...]" >&2; exit 2; }
    # A state folder of this run's own, so that concurrent runs never stop each other's server.
    STATE=$(mktemp -d "${TMPDIR:-/tmp}/lake-localstack-state.XXXXXX")
    trap 'stop; rm -rf "$STATE"' EXIT INT TERM
    eval "$(start)"
    "$@"
    ;;
  *) echo "usage: $0 {install|start|stop|run -- CMD...}" >&2; exit 2 ;;
esac
