#!/usr/bin/env bash
# Remote shards against local ones (docs/remote.md, "Benchmark"): generates the image folder of
# bench/compare (2,600 JPEGs by default, about 105 MiB: two shards), packs it into WebDataset tar
# shards with stoker-shard, starts the test servers on 127.0.0.1 (tests/remote/servers.sh:
# nginx, and s3rver from scripts/npm_deps.sh), runs remote_bench (local files; stoker from S3
# and HTTP at 0, 20 and 100 ms round trips through tests/remote/fault_proxy; one GET per
# record; whole-shard downloads), and stops the servers.
#
#   bench/remote/run.sh [--images N] [--workers W] [--latencies 0,20,100] [--build DIR]
#                       [--clients local,s3,http,record,shard] [--trace DIR]
#                       [--part-sizes MIB,...] [--parts-in-flight N,...]
# --trace DIR keeps each proxy's request timeline (fault_proxy --trace) in DIR.
# --part-sizes / --parts-in-flight sweep RemoteOptions::part_size and parts_in_flight: s3 and
# http run once for each pair.
set -euo pipefail
cd "$(dirname "$0")/../.."
images=2600
workers=2
latencies=0,20,100
build=build/release
extra=()
while [ $# -gt 0 ]; do
  case "$1" in
    --images) images=$2; shift 2 ;;
    --workers) workers=$2; shift 2 ;;
    --latencies) latencies=$2; shift 2 ;;
    --build) build=$2; shift 2 ;;
    --clients) extra+=(--clients "$2"); shift 2 ;;
    --trace) mkdir -p "$2"; extra+=(--trace "$2"); shift 2 ;;
    --part-sizes|--parts-in-flight) extra+=("$1" "$2"); shift 2 ;;
    *) echo "usage: bench/remote/run.sh [--images N] [--workers W] [--latencies L]" \
         "[--build DIR] [--clients C] [--trace DIR] [--part-sizes L] [--parts-in-flight L]" >&2
       exit 2 ;;
  esac
done
if [ ! -x "$build/bench/remote_bench" ] || [ ! -x "$build/tools/stoker-shard" ] ||
   [ ! -x "$build/tests/fault_proxy" ]; then
  cmake --preset release >/dev/null
  cmake --build "$build" --target remote_bench stoker-shard fault_proxy
fi
scripts/npm_deps.sh
data=bench/compare/data
/usr/bin/python3 bench/compare/gen_data.py "$data" --images "$images" --tokens 1000
out=$data/remote-shards
# Packed again when the images were made again (gen_data.py's marker is newer).
if [ ! -f "$out/.done-$images" ] || [ "$data/.done-$images-1000" -nt "$out/.done-$images" ]; then
  rm -rf "$out" && mkdir -p "$out"
  "$build/tools/stoker-shard" --images "$data/images" --output "$out/train-%04d.tar" \
    --shard-size 64M --shuffle --seed 1
  touch "$out/.done-$images"
fi
last=$(ls "$out"/train-*.tar | wc -l)
pattern="$out/train-{0000..$(printf '%04d' $((last - 1)))}.tar"
state=$(mktemp -d /tmp/stoker-bench-servers-XXXXXX)
trap 'tests/remote/servers.sh stop "$state"' EXIT
STOKER_SERVERS_WATCH_PID=$$ tests/remote/servers.sh start "$state"
"$build/bench/remote_bench" --shards "$pattern" --servers "$state/servers.env" \
  --proxy "$build/tests/fault_proxy" --workers "$workers" --latencies "$latencies" "${extra[@]}"
