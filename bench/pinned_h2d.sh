#!/usr/bin/env bash
# Host-to-device copy bandwidth of an image batch from pageable memory, a pinned staging block
# and a loader ring slot with and without pin_memory. Needs an NVIDIA GPU with its driver and a
# CUDA runtime (libcudart) the dynamic loader can find (or STOKER_CUDART=/path/libcudart.so);
# without one it says so and exits 0.
#
#   bench/pinned_h2d.sh [--copies N] [--build DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
build=build/release
args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --build) build=$2; shift 2 ;;
    --copies) args+=(--copies "$2"); shift 2 ;;
    *) echo "usage: bench/pinned_h2d.sh [--copies N] [--build DIR]" >&2; exit 2 ;;
  esac
done
if [ ! -d "$build" ]; then
  cmake --preset release >/dev/null
fi
cmake --build "$build" --target pinned_h2d -j2 >/dev/null
# The CUDA toolkit's runtime, when the dynamic loader does not know it.
if [ -z "${STOKER_CUDART:-}" ] && ! ldconfig -p 2>/dev/null | grep -q libcudart.so; then
  for lib in /usr/local/cuda/lib64/libcudart.so /usr/local/cuda/lib64/libcudart.so.*; do
    if [ -e "$lib" ]; then export STOKER_CUDART=$lib; break; fi
  done
fi
"$build/bench/pinned_h2d" "${args[@]}"
