#!/usr/bin/env bash
# Two stoker-bench builds side by side, interleaved (issue 22, defect 11: a deeper adaptive ring
# must pay for itself): samples/s, the peak tree memory and the share of the cores kept busy, for
# tiny, image and cpu and for the CPU-computing consumer (cpu, 20 us a sample, a 400 us step of
# its own per batch, persistent workers, the round-2 core-use case), 4 workers, the default
# (adaptive) prefetch depth. Every run is measured from outside by bench/tree_memory.py, so a
# build whose own memory figure is wrong (before issue 26) is measured the same way as the
# other. In each repetition the two builds alternate which goes first.
#
#   bench/depth_before_after.sh --before PATH --after PATH [--runs 3] [--workers 4]
#                               [--outside-share 0.02]
#
# --outside-share: the CPU share the outside sampler may take (tree_memory.py --max-cpu-share).
# The default keeps throughput and core use undisturbed, but makes only a few passes in these
# sub-second runs and can miss a late peak; --outside-share 1 samples every 2 ms for the memory
# columns (and takes CPU from the runs it measures).
#
# Prints the exact commands, a Markdown table (each run, then the medians) and the JSON lines.
# Needs root (tree_memory.py reads /proc/PID/map_files).
set -euo pipefail
cd "$(dirname "$0")/.."
before=""
after=""
runs=3
workers=4
share=0.02
while [ $# -gt 0 ]; do
  case "$1" in
    --before) before=$2; shift 2 ;;
    --after) after=$2; shift 2 ;;
    --runs) runs=$2; shift 2 ;;
    --workers) workers=$2; shift 2 ;;
    --outside-share) share=$2; shift 2 ;;
    *) echo "usage: bench/depth_before_after.sh --before PATH --after PATH [--runs R]" \
         "[--workers N] [--outside-share S]" >&2
       exit 2 ;;
  esac
done
for b in "$before" "$after"; do
  if [ -z "$b" ] || [ ! -x "$b" ]; then
    echo "bench/depth_before_after.sh: --before and --after must name stoker-bench binaries" \
      "('$b' is not executable)" >&2
    exit 2
  fi
done
declare -A args=(
  [tiny]="--workload tiny --workers $workers --epochs 3 --warmup 1"
  [image]="--workload image --workers $workers --epochs 3 --warmup 1"
  [cpu]="--workload cpu --workers $workers --epochs 3 --warmup 1"
  [consumer]="--workload cpu --workers $workers --persistent --epochs 3 --warmup 1 --sample-us 20 --consumer-cpu-us 400 --samples 32000"
)
interval=5
[ "$share" = 1 ] && interval=2
measure=(/usr/bin/python3 bench/tree_memory.py --interval-ms "$interval" --max-cpu-share "$share"
         --prefix outside_ --)
out=$(mktemp)
trap 'rm -f "$out"' EXIT
echo "before: $before"
echo "after:  $after"
for w in tiny image cpu consumer; do
  echo "$w: ${measure[*]} BUILD ${args[$w]}"
done
echo "load average at the start: $(cut -d' ' -f1-3 /proc/loadavg)"
for run in $(seq "$runs"); do
  order=(before after)
  [ $((run % 2)) = 0 ] && order=(after before)
  for w in tiny image cpu consumer; do
    for build in "${order[@]}"; do
      bin=$before
      [ "$build" = after ] && bin=$after
      # shellcheck disable=SC2086  # the workload's flags are words
      line=$("${measure[@]}" "$bin" ${args[$w]} 2>/dev/null | grep '^{' | tail -1) || true
      if [ -z "$line" ]; then
        echo "bench/depth_before_after.sh: $build $w run $run printed no result:" \
          "$bin ${args[$w]}" >&2
        exit 1
      fi
      printf '{"build": "%s", "run": %d, "case": "%s", "loadavg": "%s", "result": %s}\n' \
        "$build" "$run" "$w" "$(cut -d' ' -f1 /proc/loadavg)" "$line" >>"$out"
    done
  done
done
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
/usr/bin/python3 - "$out" "$(nproc)" <<'EOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
mib = 1e6 / 2**20
print("\n| case | build | run | samples/s | peak tree (MiB, outside) | stoker-bench's own figure (MB) | ring (MiB) | depth (limit) | core use | load |")
print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
for r in rows:
    x = r["result"]
    own = x.get("peak_tree_mb")
    own = f"peak_tree_mb {own:.1f}" if own is not None else f"peak_pss_mb {x.get('peak_pss_mb', 0):.1f}"
    print(f"| {r['case']} | {r['build']} | {r['run']} | {x['samples_per_s']:,.0f} | "
          f"{x['outside_peak_tree_mb'] * mib:.1f} | {own} | {x['outside_ring_resident_mb'] * mib:.1f} | "
          f"{x['prefetch_depth']} ({x['prefetch_depth_limit']}) | {x['core_use']:.3f} | {r['loadavg']} |")
print("\nMedians over the runs:\n")
print("| case | before: samples/s | after: samples/s | before: peak MiB | after: peak MiB | before: core use | after: core use |")
print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
for case in ["tiny", "image", "cpu", "consumer"]:
    med = {}
    for build in ["before", "after"]:
        xs = [r["result"] for r in rows if r["case"] == case and r["build"] == build]
        med[build] = (statistics.median(x["samples_per_s"] for x in xs),
                      statistics.median(x["outside_peak_tree_mb"] for x in xs) * mib,
                      statistics.median(x["core_use"] for x in xs))
    b, a = med["before"], med["after"]
    print(f"| {case} | {b[0]:,.0f} | {a[0]:,.0f} | {b[1]:.1f} | {a[1]:.1f} | {b[2]:.3f} | {a[2]:.3f} |")
print(f"\ncore use: samples/s x CPU time per sample / {sys.argv[2]} cores (stoker-bench's core_use)\n")
for r in rows:
    print(json.dumps(r))
EOF
