#!/usr/bin/env bash
# stoker-bench's own peak memory (peak_tree_mb, from its sampling thread) against a measurement
# of the same run from outside (bench/tree_memory.py, every 2 ms, Pss_Anon and each memfd once),
# for the image workload with 4 workers (or --workload W --workers N), with the adaptive
# prefetch depth and with --prefetch 2, interleaved. Prints a Markdown table and the JSON lines
# (each holds both measurements).
#
#   bench/memory_check.sh [--runs 3] [--workload image] [--workers 4]
#                         [--bench build/release/tools/stoker-bench] [-- EXTRA ARGS]
#
# Needs root (the outside measurement reads /proc/PID/map_files).
set -euo pipefail
cd "$(dirname "$0")/.."
runs=3
workload=image
workers=4
bench=build/release/tools/stoker-bench
extra=()
while [ $# -gt 0 ]; do
  case "$1" in
    --runs) runs=$2; shift 2 ;;
    --workload) workload=$2; shift 2 ;;
    --workers) workers=$2; shift 2 ;;
    --bench) bench=$2; shift 2 ;;
    --) shift; extra=("$@"); break ;;
    *) echo "usage: bench/memory_check.sh [--runs R] [--workload W] [--workers N] [--bench PATH]" \
         "[-- EXTRA stoker-bench ARGS]" >&2
       exit 2 ;;
  esac
done
[ -x "$bench" ] || { echo "bench/memory_check.sh: build $bench first" >&2; exit 1; }
out=$(mktemp)
trap 'rm -f "$out"' EXIT
echo "load average at the start: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
for run in $(seq "$runs"); do
  for prefetch in adaptive 2; do
    flag=()
    [ "$prefetch" = 2 ] && flag=(--prefetch 2)
    /usr/bin/python3 bench/tree_memory.py --interval-ms 2 --prefix outside_ -- \
      "$bench" --workload "$workload" --workers "$workers" --epochs 3 --warmup 1 "${flag[@]}" \
      "${extra[@]}" \
      2>/dev/null >>"$out"
  done
done
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
/usr/bin/python3 - "$out" <<'EOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
print("| prefetch | depth reached | samples/s | stoker-bench peak (MB) | at (s) | outside peak (MB) | at (s) | inside / outside | ring (MB): inside / outside | sampler passes (exact), CPU ms |")
print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
worst = 0.0
for r in rows:
    s = r["memory_sampler"]
    ratio = r["peak_tree_mb"] / r["outside_peak_tree_mb"]
    worst = max(worst, abs(ratio - 1))
    print(f"| {r['prefetch_factor']} | {r['prefetch_depth']} | {r['samples_per_s']:,.0f} | "
          f"{r['peak_tree_mb']:.1f} | {r['peak_tree_at_s']:.2f} | {r['outside_peak_tree_mb']:.1f} | "
          f"{r['outside_peak_tree_at_s']:.2f} | {ratio:.3f} | {r['ring_resident_mb']:.1f} / "
          f"{r['outside_ring_resident_mb']:.1f} | {s['passes']} ({s['exact_passes']}), "
          f"{s['cpu_ms']:.1f} |")
print(f"\nlargest difference: {100 * worst:.1f}% (target: within 5%)\n")
for r in rows:
    print(json.dumps(r))
EOF
