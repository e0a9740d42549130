#!/usr/bin/env bash
# stoker::vision's pipelines beside torchvision's, in one run, interleaved (for each worker
# count the loaders run back to back, so they see the same machine):
#   - the generated folder (bench/compare/gen_data.py: 2,000 JPEGs of 256-500 px): the val
#     pipeline, Resize(256) -> CenterCrop(224) -> RandomHorizontalFlip, stoker exact and fast
#     against torchvision, and stoker's decode-only workload (full-size decode, nothing else);
#   - real photographs of 1280-2560 px (Debian's mate-backgrounds, /usr/share/backgrounds/mate/
#     nature): the train pipeline, RandomResizedCrop(224) -> RandomHorizontalFlip, stoker exact
#     and fast against torchvision;
#   - vision_pipeline: the same pipelines on one core without a loader, and how far fast
#     mode's pixels are from exact mode's (mean |difference|, PSNR).
# Writes bench/results/vision.jsonl and the "Vision pipelines" section of docs/benchmarks.md
# (bench/compare/vision_report.py). bench/compare/run.sh runs this too, after its own workloads.
#
#   bench/compare/vision.sh [--quick]     --quick: fewer samples and worker counts (a smoke run)
set -euo pipefail
cd "$(dirname "$0")/../.."
quick=0
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) quick=1; shift ;;
    *) echo "usage: bench/compare/vision.sh [--quick]" >&2; exit 2 ;;
  esac
done
py=/usr/bin/python3
missing=()
for pkg in cmake g++ pkg-config libjpeg62-turbo-dev libpng-dev libwebp-dev python3-torch \
           python3-torchvision python3-pil python3-numpy; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "ok installed" || missing+=("$pkg")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "bench/compare/vision.sh: missing Debian packages: ${missing[*]}" >&2
  echo "install them with: apt-get install -y ${missing[*]}" >&2
  exit 1
fi
data=bench/compare/data
results=bench/results
mkdir -p "$results"
out=$results/vision.jsonl
: >"$out"
"$py" bench/compare/gen_data.py "$data"  # the same data as run.sh (images and tokens)
photos_src=/usr/share/backgrounds/mate/nature
photos=$data/photos
if [ -d "$photos_src" ]; then
  mkdir -p "$photos"
  ln -sfn "$photos_src" "$photos/nature"  # one class: ImageFolder's layout
else
  echo "bench/compare/vision.sh: no photographs at $photos_src (apt-get install -y" \
       "mate-backgrounds); the photo rows are skipped" >&2
  photos=""
fi

echo "== build ==" >&2
cmake -S . -B build/compare-stoker -DCMAKE_BUILD_TYPE=Release -DSTOKER_BUILD_TESTS=OFF \
  -DSTOKER_BUILD_EXAMPLES=OFF >/dev/null
cmake --build build/compare-stoker -j"${JOBS:-1}" --target stoker-bench vision_pipeline >/dev/null
stoker=build/compare-stoker/tools/stoker-bench

folder_samples=384
photo_samples=48
epochs=2
worker_counts=(0 1 2)
if [ "$quick" = 1 ]; then
  folder_samples=128
  photo_samples=24
  epochs=1
  worker_counts=(0 2)
fi

run() {  # run COMMAND...: appends the JSON line, or says it failed
  local line
  if line=$("$@" 2>>"$results/vision.stderr"); then
    echo "$line" >>"$out"
  else
    echo "  failed: $*" >&2
  fi
}

printf '{"impl": "meta", "commit": "%s", "date": "%s", "loadavg_start": "%s"}\n' \
  "$(git rev-parse --short HEAD 2>/dev/null || echo unknown)" "$(date -u '+%Y-%m-%d %H:%M UTC')" \
  "$(cut -d' ' -f1-3 /proc/loadavg)" >>"$out"
for set in folder photos; do
  if [ "$set" = folder ]; then
    root=$data/images pipeline=val samples=$folder_samples
  else
    [ -n "$photos" ] || continue
    root=$photos pipeline=train samples=$photo_samples
  fi
  echo "== $set ($pipeline) ==" >&2
  for workers in "${worker_counts[@]}"; do
    for variant in default persistent; do
      flag=()
      if [ "$variant" = persistent ]; then
        [ "$workers" = 0 ] && continue
        flag=(--persistent)
      fi
      common=(--workload folder --data "$root" --pipeline "$pipeline" --workers "$workers"
              --epochs "$epochs" --warmup 1 --samples "$samples" "${flag[@]}")
      echo "  workers=$workers $variant" >&2
      run "$py" bench/compare/torch_bench.py "${common[@]}"
      run "$stoker" "${common[@]}" --mode exact
      run "$stoker" "${common[@]}" --mode fast
      if [ "$set" = folder ]; then
        run "$stoker" --workload decode --data "$root" --workers "$workers" --epochs "$epochs" \
          --warmup 1 --samples "$samples" "${flag[@]}"
      fi
    done
  done
done

echo "== one core, no loader (vision_pipeline) ==" >&2
build/compare-stoker/bench/vision_pipeline --data "$data/images" --images 400 --repeat 3 |
  grep '^{' | sed 's/^{/{"set": "folder", /' >>"$out"
if [ -n "$photos" ]; then
  build/compare-stoker/bench/vision_pipeline --data "$photos" --repeat 3 |
    grep '^{' | sed 's/^{/{"set": "photos", /' >>"$out"
fi
printf '{"impl": "meta-end", "loadavg_end": "%s"}\n' "$(cut -d' ' -f1-3 /proc/loadavg)" >>"$out"
command="bench/compare/vision.sh"
[ "$quick" = 1 ] && command+=" --quick"
"$py" bench/compare/vision_report.py --results "$out" --doc docs/benchmarks.md --command "$command"
echo "== done: docs/benchmarks.md (Vision pipelines) ==" >&2
