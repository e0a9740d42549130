#!/usr/bin/env bash
# Builds the libFuzzer targets (tests/fuzz/*_fuzz.cpp) with clang in build/fuzz and runs each
# for a bounded time, from a scratch copy of its seed corpus (tests/fuzz/corpus/<target>/ when
# there is one), so the repository is never written. Called by scripts/test.sh; skipped with a
# message when clang++ or its libFuzzer runtime (Debian: clang libclang-rt-14-dev) is missing.
# Fails when a target crashes, leaks or aborts; the input that did it is kept under
# build/fuzz/artifacts/.
#
#   scripts/fuzz.sh                         every target, 20 s each
#   scripts/fuzz.sh --seconds 60 [TARGET ...]
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=20
targets=()
while [ $# -gt 0 ]; do
  case "$1" in
    --seconds) seconds=$2; shift 2 ;;
    -h|--help) sed -n '2,11s/^# \{0,1\}//p' "$0"; exit 0 ;;
    -*) echo "usage: scripts/fuzz.sh [--seconds S] [TARGET ...]" >&2; exit 2 ;;
    *) targets+=("$1"); shift ;;
  esac
done
if [ ${#targets[@]} -eq 0 ]; then
  for f in tests/fuzz/*_fuzz.cpp; do
    t=${f##*/}
    targets+=("${t%.cpp}")
  done
fi

clang=$(command -v clang++ || true)
if [ -z "$clang" ]; then
  echo "=== stoker: fuzz targets skipped: clang++ is not installed" \
    "(Debian: clang libclang-rt-14-dev)"
  exit 0
fi
probe=$(mktemp -d)
trap 'rm -rf "$probe"' EXIT
echo 'extern "C" int LLVMFuzzerTestOneInput(const unsigned char*, unsigned long) { return 0; }' \
  >"$probe/probe.cpp"
if ! "$clang" -fsanitize=fuzzer "$probe/probe.cpp" -o "$probe/probe" 2>/dev/null; then
  echo "=== stoker: fuzz targets skipped: $clang cannot link -fsanitize=fuzzer" \
    "(Debian: libclang-rt-14-dev)"
  exit 0
fi

echo "=== stoker: fuzz targets, ${seconds} s each: ${targets[*]}"
# -O1 with line tables, as libFuzzer advises: less to compile than the default RelWithDebInfo,
# and stack traces still name the lines. (The build and 13 targets x 5 s took 5 min 12 s on
# the 2-core machine.)
cmake -S . -B build/fuzz -DCMAKE_CXX_COMPILER="$clang" -DSTOKER_BUILD_FUZZ=ON \
  -DCMAKE_BUILD_TYPE=None -DCMAKE_CXX_FLAGS="-O1 -gline-tables-only" \
  -DSTOKER_BUILD_TESTS=OFF -DSTOKER_BUILD_EXAMPLES=OFF -DSTOKER_BUILD_BENCH=OFF >/dev/null
cmake --build build/fuzz -j 2 --target "${targets[@]}"

mkdir -p build/fuzz/artifacts
# UBSan's findings end the run as ASan's do (its checks are built recoverable).
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
failed=()
for t in "${targets[@]}"; do
  work="$probe/$t"
  mkdir -p "$work"
  seeds=()
  [ -d "tests/fuzz/corpus/$t" ] && seeds=("tests/fuzz/corpus/$t")
  log="build/fuzz/$t.log"
  rc=0
  "build/fuzz/tests/fuzz/$t" -max_total_time="$seconds" -timeout=10 -print_final_stats=1 \
    -artifact_prefix="build/fuzz/artifacts/$t-" "$work" "${seeds[@]}" >"$log" 2>&1 || rc=$?
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  if [ $rc -ne 0 ]; then
    echo "fuzz: $t FAILED (exit $rc) after ${runs:-?} runs; its log:" >&2
    tail -n 40 "$log" | sed 's/^/    /' >&2
    echo "fuzz: reproduce with build/fuzz/tests/fuzz/$t build/fuzz/artifacts/$t-<file>" >&2
    failed+=("$t")
  else
    echo "fuzz: $t: ${runs:-?} runs in ${seconds} s, no failure"
  fi
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "=== stoker: fuzz targets failed: ${failed[*]}" >&2
  exit 1
fi
