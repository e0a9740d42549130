#!/usr/bin/env bash
# The pkg-config route of the README: compile the consumer against the installed stoker.pc
# (found under PREFIX) with `pkg-config --cflags --libs stoker` alone, then run it.
#   pkgconfig_build.sh PREFIX CXX SOURCE OUTPUT
set -euo pipefail
prefix=$1 cxx=$2 source=$3 output=$4
pc=$(find "$prefix" -name stoker.pc -print -quit)
[ -n "$pc" ] || { echo "no stoker.pc under $prefix" >&2; exit 1; }
export PKG_CONFIG_PATH="$(dirname "$pc")${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
flags=$(pkg-config --cflags --libs stoker)
echo "pkg-config --cflags --libs stoker: $flags"
# shellcheck disable=SC2086  # the flags are words
"$cxx" -O1 "$source" -o "$output" $flags
"$output"
