#!/usr/bin/env bash
# Installs the npm packages the tests use into .deps/npm (ignored by git): s3rver, the S3
# server of the remote tests (tests/remote/servers.sh). Called by scripts/deps.sh; needs npm and
# the npm registry, and does nothing when the pinned version is there already.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
prefix="${STOKER_NPM_PREFIX:-$root/.deps/npm}"
s3rver_version=3.7.1
installed="$prefix/node_modules/s3rver/package.json"
if [ -f "$installed" ] && grep -q "\"version\": \"$s3rver_version\"" "$installed"; then
  exit 0
fi
# CI machines bring node and npm; elsewhere Debian's packages will do (as root).
if ! command -v npm >/dev/null && [ "$(id -u)" -eq 0 ]; then
  echo "stoker: installing Debian's nodejs and npm for s3rver"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends nodejs npm >/dev/null
fi
if ! command -v npm >/dev/null; then
  echo "stoker: npm not found: the remote tests need s3rver (Debian: apt-get install nodejs npm)" >&2
  exit 1
fi
echo "stoker: installing s3rver@$s3rver_version into $prefix"
mkdir -p "$prefix"
npm install --prefix "$prefix" --no-audit --no-fund --no-save --loglevel=error \
  "s3rver@$s3rver_version" >/dev/null
