#!/usr/bin/env bash
# Runs stoker-bench over the fixed workloads (tiny, image, cpu) x num_workers (0, 1, 2, 4),
# with and without persistent workers, plus the memcpy reference, and prints the results as a
# Markdown table (the raw JSON lines go to bench/results/core.jsonl).
#
#   bench/core.sh [--epochs E] [--build DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
epochs=5
build=build/release
while [ $# -gt 0 ]; do
  case "$1" in
    --epochs) epochs=$2; shift 2 ;;
    --build) build=$2; shift 2 ;;
    *) echo "usage: bench/core.sh [--epochs E] [--build DIR]" >&2; exit 2 ;;
  esac
done
bench="$build/tools/stoker-bench"
if [ ! -x "$bench" ]; then
  cmake --preset release >/dev/null
  cmake --build --preset release --target stoker-bench
  bench=build/release/tools/stoker-bench
fi
mkdir -p bench/results
out=bench/results/core.jsonl
: >"$out"
"$bench" --memcpy >>"$out"
for workload in tiny image cpu; do
  for workers in 0 1 2 4; do
    "$bench" --workload "$workload" --workers "$workers" --epochs "$epochs" --warmup 1 >>"$out"
    if [ "$workers" -gt 0 ]; then
      "$bench" --workload "$workload" --workers "$workers" --epochs "$epochs" --warmup 1 \
        --persistent >>"$out"
    fi
  done
done
python3 - "$out" <<'PY'
import json, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
memcpy = next(r["mb_per_s"] for r in rows if r["impl"] == "memcpy")
print(f"Single-thread memcpy of a 9.6 MB batch: {memcpy:,.0f} MB/s (`stoker-bench --memcpy`)\n")
print("| workload | workers | variant | samples/s | MB/s | first batch (ms, median) | cold first batch (ms) | CPU µs/sample | peak tree memory (MB) | ring (MB) | checksum |")
print("| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
for r in rows:
    if r["impl"] != "stoker":
        continue
    fb = sorted(r["first_batch_ms"])[len(r["first_batch_ms"]) // 2]
    mb = f'{r["mb_per_s"]:,.0f}'
    if r["workload"] == "image":
        mb += f' ({100 * r["mb_per_s"] / memcpy:.0f}% of memcpy)'
    print(f'| {r["workload"]} | {r["workers"]} | {r["variant"]} | {r["samples_per_s"]:,.0f} | {mb} | '
          f'{fb:.2f} | {r["first_batch_cold_ms"]:.1f} | {r["cpu_us_per_sample"]:.2f} | '
          f'{r["peak_tree_mb"]:.1f} | {r["ring_resident_mb"]:.1f} | '
          f'{"ok" if r["checksum_ok"] else "WRONG"} |')
PY
