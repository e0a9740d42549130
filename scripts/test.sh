#!/usr/bin/env bash
# The test command: installs missing Debian packages (as root), then configures, builds and
# runs ctest twice: an optimised build and an AddressSanitizer + UndefinedBehaviorSanitizer
# build (all but the torchvision parity run, which runs once), both with warnings as errors;
# after the optimised build's ctest, the Python package's pytest suite. The `stress`-labelled
# soak test runs in both (a few seconds in release); --no-stress leaves it out. Then
# scripts/fuzz.sh runs every libFuzzer target for STOKER_FUZZ_SECONDS (default 5) s where
# clang++ is installed (skipped with a message otherwise); --no-fuzz leaves it out.
#
#   scripts/test.sh            both builds, then the fuzz targets
#   scripts/test.sh release    one build (release or asan)
#   scripts/test.sh --no-stress  without the `stress`-labelled soak test
#   scripts/test.sh --no-fuzz    without the fuzz targets
set -euo pipefail
cd "$(dirname "$0")/.."
# Each step's wall time, printed as it ends and summed up at the end (CI's time budget).
started=$SECONDS
step_start=$SECONDS
step_times=()
step_done() {
  step_times+=("$1 $((SECONDS - step_start)) s")
  echo "=== stoker: $1 took $((SECONDS - step_start)) s"
  step_start=$SECONDS
}
source scripts/deps.sh
stoker_install_deps
step_done "dependencies"

presets=()
label_args=()
fuzz=1
for arg in "$@"; do
  case "$arg" in
    release|asan) presets+=("$arg") ;;
    --stress) label_args=() ;;  # the default; accepted for older instructions
    --no-stress) label_args=(-LE stress) ;;
    --no-fuzz) fuzz=0 ;;
    *) echo "usage: scripts/test.sh [release|asan] [--no-stress] [--no-fuzz]" >&2; exit 2 ;;
  esac
done
[ ${#presets[@]} -gt 0 ] || presets=(release asan)

for preset in "${presets[@]}"; do
  echo "=== stoker: $preset build"
  cmake --preset "$preset" >/dev/null
  cmake --build --preset "$preset"
  step_done "$preset build"
  preset_args=("${label_args[@]}")
  if [ "$preset" = asan ]; then
    # The torchvision parity run (label `parity`, two minutes under ASan) compares pixels: it
    # runs once, in the optimised build; the vision code's own tests run in both.
    if [ ${#label_args[@]} -gt 0 ]; then preset_args=(-LE 'stress|parity'); else preset_args=(-LE parity); fi
  fi
  ctest --preset "$preset" "${preset_args[@]}"
  step_done "$preset ctest"
  if [ "$preset" = release ]; then
    if [ -d build/release/python/stoker ]; then
      echo "=== stoker: Python package tests (python/tests, pytest)"
      STOKER_PYTHON_PATH=build/release/python /usr/bin/python3 -m pytest -v -rs \
        -p no:cacheprovider python/tests
      step_done "pytest"
    else
      echo "=== stoker: Python package tests skipped: the package was not built" \
        "(STOKER_BUILD_PYTHON is OFF; it needs python3-dev and pybind11-dev)"
    fi
  fi
done
if [ $fuzz -eq 1 ]; then
  scripts/fuzz.sh --seconds "${STOKER_FUZZ_SECONDS:-5}"
  step_done "fuzzing"
fi
echo "=== stoker: steps: $(IFS=';'; echo "${step_times[*]}"); $((SECONDS - started)) s in all"
echo "=== stoker: all tests passed (${presets[*]})"
