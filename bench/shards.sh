#!/usr/bin/env bash
# Record shards against loose files (docs/benchmarks.md, "Record shards"): generates the image
# folder of bench/compare (2,000 JPEGs by default), packs it into WebDataset tar shards with
# stoker-shard, then runs shard_bench: loose files vs shards on a cold page cache (as root;
# it says so when the cache cannot be dropped), the shard reader's bytes/s against dd, and
# tiny (100-byte) records read by index.
#
#   bench/shards.sh [--images N] [--workers W] [--build DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
images=2000
workers=2
build=build/release
while [ $# -gt 0 ]; do
  case "$1" in
    --images) images=$2; shift 2 ;;
    --workers) workers=$2; shift 2 ;;
    --build) build=$2; shift 2 ;;
    *) echo "usage: bench/shards.sh [--images N] [--workers W] [--build DIR]" >&2; exit 2 ;;
  esac
done
if [ ! -x "$build/bench/shard_bench" ] || [ ! -x "$build/tools/stoker-shard" ]; then
  cmake --preset release >/dev/null
  cmake --build "$build" --target shard_bench stoker-shard
fi
data=bench/compare/data
/usr/bin/python3 bench/compare/gen_data.py "$data" --images "$images" --tokens 1000
out=$data/shards
rm -rf "$out" && mkdir -p "$out"
"$build/tools/stoker-shard" --images "$data/images" --output "$out/train-%04d.tar" \
  --shard-size 64M --shuffle --seed 1
last=$(ls "$out"/train-*.tar | wc -l)
pattern="$out/train-{0000..$(printf '%04d' $((last - 1)))}.tar"
"$build/bench/shard_bench" --images "$data/images" --shards "$pattern" --workers "$workers"
