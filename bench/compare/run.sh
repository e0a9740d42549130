#!/usr/bin/env bash
# Runs stoker (stoker-bench), PyTorch (torch.utils.data.DataLoader, torch_bench.py) and libtorch
# (torch::data, libtorch_bench) on the same workloads, interleaved: for each workload and worker
# count the three run back to back, so they see the same machine. Every row's peak memory comes
# from the same sampler (src/os/proc.hpp's TreeMemorySampler): stoker-bench runs it on its own
# tree, and around the other two (`stoker-bench --measure-command`), which needs root to read
# their shared-memory files through /proc/PID/map_files. Then profiles stoker-bench
# with callgrind (when valgrind is installed) and regenerates docs/benchmarks.md and
# docs/benchmarks.svg from the figures of this run.
#
#   bench/compare/run.sh [--quick] [--no-profile] [--no-vision]
#     --quick: one timed epoch, smaller epochs (a smoke run); --no-profile: no callgrind (the
#     page keeps its profile section); --no-vision: the vision section is not run again
#
# Installs nothing: it names the Debian packages that are missing and stops.
set -euo pipefail
cd "$(dirname "$0")/../.."
quick=0
no_profile=0
no_vision=0
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) quick=1; shift ;;
    --no-profile) no_profile=1; shift ;;
    --no-vision) no_vision=1; shift ;;
    *) echo "usage: bench/compare/run.sh [--quick] [--no-profile] [--no-vision]" >&2; exit 2 ;;
  esac
done

py=/usr/bin/python3
missing=()
for pkg in cmake g++ pkg-config libfmt-dev libspdlog-dev libhwloc-dev libturbojpeg0-dev libpng-dev \
           libtorch-dev python3-torch python3-torchvision python3-numpy python3-pil; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "ok installed" || missing+=("$pkg")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "bench/compare/run.sh: missing Debian packages: ${missing[*]}" >&2
  echo "install them with: apt-get install -y ${missing[*]}" >&2
  echo "(valgrind is optional: with it the run also profiles stoker-bench)" >&2
  exit 1
fi
have_valgrind=0
command -v valgrind >/dev/null && have_valgrind=1

start_s=$(date +%s)
data=bench/compare/data
results=bench/results
mkdir -p "$results"
out=$results/compare.jsonl
: >"$out"

echo "== data (generated once, fixed seed) ==" >&2
"$py" bench/compare/gen_data.py "$data"

echo "== build ==" >&2
cmake -S . -B build/compare-stoker -DCMAKE_BUILD_TYPE=Release -DSTOKER_BUILD_TESTS=OFF \
  -DSTOKER_BUILD_EXAMPLES=OFF >/dev/null
cmake --build build/compare-stoker -j"${JOBS:-1}" --target stoker-bench >/dev/null
cmake -S bench/compare -B build/compare-libtorch -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build/compare-libtorch -j"${JOBS:-1}" >/dev/null
stoker=build/compare-stoker/tools/stoker-bench
libtorch=build/compare-libtorch/libtorch_bench

# samples per epoch, warm-up epochs, timed epochs: the same for all three implementations.
declare -A samples=([tiny]=25600 [image]=3200 [cpu]=3200 [folder]=384 [tokens]=8192)
warmup=1
epochs=3
folder_epochs=2
if [ "$quick" = 1 ]; then
  samples=([tiny]=12800 [image]=640 [cpu]=640 [folder]=128 [tokens]=2048)
  epochs=1
  folder_epochs=1
fi

run() {  # run LABEL COMMAND...: appends the JSON line, or a failure record
  local line
  if line=$("${@:2}" 2>>"$results/compare.stderr"); then
    echo "$line" >>"$out"
  else
    echo "  $1 failed: ${*:2}" >&2
  fi
}

commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
[ -n "$(git status --porcelain --untracked-files=no 2>/dev/null)" ] && commit+=" (with uncommitted changes)"
printf '{"impl": "meta", "commit": "%s", "date": "%s", "loadavg_start": "%s"}\n' "$commit" \
  "$(date -u '+%Y-%m-%d %H:%M UTC')" "$(cut -d' ' -f1-3 /proc/loadavg)" >>"$out"
"$stoker" --memcpy >>"$out"
for workload in tiny image cpu folder tokens; do
  echo "== $workload ==" >&2
  e=$epochs
  [ "$workload" = folder ] && e=$folder_epochs
  extra=(--samples "${samples[$workload]}")
  case "$workload" in
    folder) extra+=(--data "$data/images") ;;
    tokens) extra+=(--data "$data/tokens.bin") ;;
  esac
  for workers in 0 1 2 4; do
    for variant in default persistent; do
      flag=()
      if [ "$variant" = persistent ]; then
        [ "$workers" = 0 ] && continue
        flag=(--persistent)
      fi
      common=(--workload "$workload" --workers "$workers" --epochs "$e" --warmup "$warmup" "${extra[@]}")
      echo "  workers=$workers $variant" >&2
      run stoker "$stoker" "${common[@]}" "${flag[@]}"
      run pytorch "$stoker" --measure-command "$py" bench/compare/torch_bench.py "${common[@]}" \
        "${flag[@]}"
      # libtorch's worker threads live as long as its DataLoader: one run covers both variants.
      if [ "$variant" = default ] && [[ "$workload" =~ ^(tiny|image|cpu)$ ]]; then
        run libtorch "$stoker" --measure-command "$libtorch" --workload "$workload" \
          --workers "$workers" --epochs "$e" --warmup "$warmup" --samples "${samples[$workload]}"
      fi
    done
  done
done

keep_profile=()
if [ "$no_profile" = 1 ]; then
  echo "== profile not run (--no-profile): docs/benchmarks.md keeps its profile section ==" >&2
  keep_profile=(--keep-profile)
elif [ "$have_valgrind" = 1 ]; then
  echo "== profile (callgrind) ==" >&2
  "$py" bench/compare/profile.py "$stoker" "$results/callgrind" >"$results/profile.json" || echo "  profile failed" >&2
else
  echo "== profile skipped: valgrind is not installed (apt-get install -y valgrind) ==" >&2
  rm -f "$results/profile.json"
fi

printf '{"impl": "meta-end", "loadavg_end": "%s"}\n' "$(cut -d' ' -f1-3 /proc/loadavg)" >>"$out"
elapsed=$(( $(date +%s) - start_s ))
command="bench/compare/run.sh"
[ "$quick" = 1 ] && command+=" --quick"
[ "$no_profile" = 1 ] && command+=" --no-profile"
[ "$no_vision" = 1 ] && command+=" --no-vision"
"$py" bench/compare/report.py --results "$out" --profile "$results/profile.json" \
  --elapsed "$elapsed" --command "$command" --doc docs/benchmarks.md --svg docs/benchmarks.svg \
  --readme README.md "${keep_profile[@]}"
echo "== done in ${elapsed}s: docs/benchmarks.md, docs/benchmarks.svg, README.md ==" >&2
# stoker::vision's pipelines against torchvision: their own section of docs/benchmarks.md.
[ "$no_vision" = 1 ] && exit 0
vision_flag=()
[ "$quick" = 1 ] && vision_flag=(--quick)
bench/compare/vision.sh "${vision_flag[@]}"
