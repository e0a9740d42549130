#!/usr/bin/env bash
# The demo: installs missing Debian packages (as root), builds stoker, then runs
# examples/train_loop: a few epochs of a training-style loop over built-in synthetic images,
# with the loader's settings and per-epoch throughput. Arguments go to train_loop
# (try --workers 0, --workers 4, --persistent, --epochs 5).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/deps.sh
stoker_install_deps
cmake --preset release >/dev/null
cmake --build --preset release --target train_loop
exec build/release/examples/train_loop "$@"
