#!/usr/bin/env bash
# What stoker-bench's memory sampler costs: each workload run with the sampler off
# (--memory-interval-ms 0) and on (the default, 10 ms, within 1% of a core), alternately, R
# rounds (the order flips every round); prints the median samples/s of each, their ratio, and
# the sampler's own CPU time over the run's wall time.
#
#   bench/memory_overhead.sh [--rounds 9] [--bench build/release/tools/stoker-bench]
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=9
bench=build/release/tools/stoker-bench
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) rounds=$2; shift 2 ;;
    --bench) bench=$2; shift 2 ;;
    *) echo "usage: bench/memory_overhead.sh [--rounds R] [--bench PATH]" >&2; exit 2 ;;
  esac
done
[ -x "$bench" ] || { echo "bench/memory_overhead.sh: build $bench first" >&2; exit 1; }
configs=(
  "--workload image --workers 4 --epochs 3 --warmup 1"
  "--workload image --workers 4 --epochs 3 --warmup 1 --prefetch 2"
  "--workload tiny --workers 2 --epochs 5 --warmup 1 --persistent"
  "--workload cpu --workers 2 --epochs 2 --warmup 1 --samples 3200"
  "--workload image --workers 0 --epochs 3 --warmup 1"
)
out=$(mktemp)
trap 'rm -f "$out"' EXIT
echo "load average at the start: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
for round in $(seq "$rounds"); do
  for config in "${configs[@]}"; do
    order=(0 10)
    [ $((round % 2)) = 0 ] && order=(10 0)
    for interval in "${order[@]}"; do
      # shellcheck disable=SC2086
      line=$("$bench" $config --memory-interval-ms "$interval" 2>/dev/null)
      echo "{\"config\": \"$config\", \"interval\": $interval, \"run\": $line}" >>"$out"
    done
  done
done
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
/usr/bin/python3 - "$out" "$rounds" <<'EOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
configs = list(dict.fromkeys(r["config"] for r in rows))
print(f"{sys.argv[2]} rounds, sampler off and on alternately\n")
print("| stoker-bench | samples/s, sampler off (median) | on (median) | on / off | sampler CPU / run time |")
print("| --- | ---: | ---: | ---: | ---: |")
for c in configs:
    off = [r["run"]["samples_per_s"] for r in rows if r["config"] == c and r["interval"] == 0]
    on = [r for r in rows if r["config"] == c and r["interval"] > 0]
    share = statistics.median(r["run"]["memory_sampler"]["cpu_ms"] / 1e3 /
                              r["run"]["memory_sampler"]["seconds"] for r in on)
    a, b = statistics.median(off), statistics.median(r["run"]["samples_per_s"] for r in on)
    print(f"| `{c}` | {a:,.0f} | {b:,.0f} | {b / a:.3f} | {100 * share:.2f}% of a core |")
EOF
