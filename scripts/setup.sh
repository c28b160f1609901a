#!/usr/bin/env bash
# Installs what building lake needs on a fresh Debian machine: protoc (Lance's build runs
# prost-build). Idempotent: does nothing when protoc is already on PATH.
set -euo pipefail

if ! command -v protoc >/dev/null 2>&1; then
  echo "setup: installing protoc (Debian package protobuf-compiler)" >&2
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq protobuf-compiler >/dev/null
fi
protoc --version >&2
