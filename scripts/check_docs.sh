#!/usr/bin/env bash
# Checks the shell commands the documentation shows, so a renamed script, a missing program, a
# CMake target or option that no longer exists, or a flag a program does not take is caught.
#
#   scripts/check_docs.sh [--build DIR] [--timeout S] [--verbose] [FILE.md ...]
#
# Files: README.md and docs/*.md by default. Commands are the lines of fenced blocks tagged
# sh, bash, shell or console (in console blocks, and in untagged blocks, only lines starting
# with "$ "; the rest is output). A trailing " # comment" is ignored, a line ending in "\"
# continues on the next, and "&&", "||", ";" and "|" separate commands. For each command:
#
#   - the program must exist: a file in the repository (scripts/demo.sh); a program the build
#     makes (build/release/tools/stoker-bench: the last part must be an executable target
#     defined in tools/CMakeLists.txt); a stoker program cmake --install puts on PATH
#     (stoker-bench); a command on PATH or a shell builtin; or a tool from the table of
#     Debian packages below, which is reported, not failed, when it is not installed here;
#   - every argument that names a repository path (scripts/, bench/, examples/, build/<dir>/...)
#     must exist in the same way;
#   - every --flag given to a repository script or a stoker program must appear in its source
#     (the script, or the target's .cpp files);
#   - cmake --preset P and --build --preset P need preset P in CMakePresets.json, --target T a
#     target T, and -DSTOKER_X=... an option STOKER_X.
#
# With --build DIR, the commands that run a stoker program are also run for real, exactly as
# written except that build/<anything>/ becomes DIR, each within --timeout seconds (default
# 60), from the repository root. A program that was not built is reported, not failed.
# Repository scripts (which install packages and build) and other tools are never run.
#
# Markers, an HTML comment on a line of its own before a block:
#   <!-- docs-check: no-run -->  check the block's commands but do not run them (long ones)
#   <!-- docs-check: skip -->    ignore the block (pseudo-commands, placeholders)
set -euo pipefail
cd "$(dirname "$0")/.."

build=""
run_timeout=60
verbose=0
files=()
while [ $# -gt 0 ]; do
  case "$1" in
    --build) build=${2%/}; shift 2 ;;
    --timeout) run_timeout=$2; shift 2 ;;
    --verbose|-v) verbose=1; shift ;;
    -h|--help) sed -n '2,30s/^# \{0,1\}//p' "$0"; exit 0 ;;
    -*) echo "usage: scripts/check_docs.sh [--build DIR] [--timeout S] [--verbose] [FILE.md ...]" >&2; exit 2 ;;
    *) files+=("$1"); shift ;;
  esac
done
if [ ${#files[@]} -eq 0 ]; then
  files=(README.md docs/*.md)
fi
if [ -n "$build" ] && [ ! -d "$build" ]; then
  echo "check_docs: build directory $build does not exist" >&2
  exit 2
fi

# Tools the docs may show that are not part of a minimal system, and their Debian package.
declare -A debian_package=(
  [mpirun]=openmpi-bin [mpiexec]=openmpi-bin [docker]=docker.io [doxygen]=doxygen
  [gdb]=gdb [perf]=linux-perf [valgrind]=valgrind [clang-format]=clang-format
  [nvidia-smi]=nvidia-smi [srun]=slurm-client [hwloc-ls]=hwloc
  [lstopo]=hwloc [numactl]=numactl [pkg-config]=pkg-config [ninja]=ninja-build
)
# Words that start a command without being its program.
wrappers=" sudo env time nice exec command nohup "

errors=0
checked=0
ran=0
notes=()

fail() {  # fail LOCATION MESSAGE
  echo "check_docs: $1: $2" >&2
  errors=$((errors + 1))
}
note() {
  notes+=("$1: $2")
}

# Every CMakeLists.txt of the project (build trees excluded).
cmake_files() {
  find . -name CMakeLists.txt -not -path './build*' -not -path './.git/*' | sort
}

# The directory (relative, no ./) of the CMakeLists.txt that defines executable target NAME,
# or nothing. Targets come from add_executable(NAME ...) and stoker_example(NAME ...).
target_dir() {
  local name=$1 f
  while IFS= read -r f; do
    if grep -Eq "^[[:space:]]*(add_executable|stoker_example)\([[:space:]]*${name//./\\.}([[:space:])]|$)" "$f"; then
      local d=${f%/CMakeLists.txt}
      d=${d#./}
      [ "$d" = "." ] && d=""
      echo "$d"
      return 0
    fi
  done < <(cmake_files)
  return 1
}

# Any target (executable, library, custom, test helper) named NAME.
is_target() {
  local name=$1
  cmake_files | xargs grep -Eq "^[[:space:]]*(add_executable|add_library|add_custom_target|stoker_example|stoker_test|doxygen_add_docs)\([[:space:]]*${name//./\\.}([[:space:])]|$)"
}

# The source files of executable target NAME defined in DIR.
target_sources() {
  local name=$1 dir=$2 line
  local cm=${dir:+$dir/}CMakeLists.txt
  line=$(grep -E "^[[:space:]]*(add_executable|stoker_example)\([[:space:]]*$name([[:space:])]|$)" "$cm" | head -1)
  if [[ $line == *stoker_example* ]]; then
    echo "${dir:+$dir/}$name.cpp"
    return
  fi
  local word
  for word in ${line#*(}; do
    word=${word%)}
    [[ $word == *.cpp ]] && echo "${dir:+$dir/}$word"
  done
}

# Whether a stoker program NAME is installed by `cmake --install` (install(TARGETS NAME ...)).
is_installed_program() {
  cmake_files | xargs grep -Eq "install\(TARGETS[[:space:]]+$1([[:space:])]|$)"
}

# Checks that repository path P (program or argument) exists. For a build path
# (build/<dir>/<sub>/<name>) it sets repo_sub and repo_name to the target's source directory
# and name; otherwise it empties them. Returns 1 after reporting a failure.
repo_sub=""
repo_name=""
check_repo_path() {
  local where=$1 p=${2#./}
  repo_sub=""
  repo_name=""
  if [[ $p == build/*/* ]]; then
    local rest=${p#build/*/}
    local name=${rest##*/}
    local sub=""
    [[ $rest == */* ]] && sub=${rest%/*}
    local dir
    if ! dir=$(target_dir "$name"); then
      fail "$where" "'$p': no executable target '$name' in any CMakeLists.txt"
      return 1
    fi
    if [ "$dir" != "$sub" ]; then
      fail "$where" "'$p': target '$name' is defined in ${dir:-the top-level directory}/CMakeLists.txt, so it is built as build/<dir>/${dir:+$dir/}$name"
      return 1
    fi
    repo_sub=$sub
    repo_name=$name
    return 0
  fi
  if [[ $p == build/* ]]; then
    return 0  # a file a build writes; only programs are checked
  fi
  if [ ! -e "$p" ]; then
    fail "$where" "'$p' does not exist in the repository"
    return 1
  fi
  return 0
}

looks_like_repo_path() {
  [[ $1 =~ ^(\./)?(scripts|bench|tools|examples|docs|tests|include|src|cmake|build/[^/]+)/ ]] &&
    [[ $1 != *'*'* ]]
}

has_placeholder() {
  [[ $1 == *'<'*'>'* || $1 == *'{'*'}'* || $1 == *'…'* || $1 == *'...'* ]]
}

# Checks that each --flag in WORDS[1..] appears in FILES (quoted, or as a case label).
check_flags() {
  local where=$1 prog=$2
  shift 2
  local -a sources=()
  while [ $# -gt 0 ] && [ "$1" != "--" ]; do
    sources+=("$1")
    shift
  done
  shift
  local w flag
  for w in "$@"; do
    [[ $w == --?* ]] || continue
    flag=${w%%=*}
    if ! grep -qF -- "$flag" "${sources[@]}" 2>/dev/null; then
      fail "$where" "$prog does not take $flag (not found in ${sources[*]})"
    fi
  done
}

check_cmake() {
  local where=$1
  shift
  local -a w=("$@")
  local i
  for ((i = 0; i < ${#w[@]}; ++i)); do
    case "${w[i]}" in
      --preset)
        local p=${w[i + 1]:-}
        local kind=configure
        [[ " ${w[*]} " == *" --build "* ]] && kind=build
        if ! cmake --list-presets="$kind" 2>/dev/null | grep -qF "\"$p\""; then
          fail "$where" "cmake: no $kind preset named '$p' in CMakePresets.json"
        fi
        ;;
      --target|-t)
        local t=${w[i + 1]:-}
        case "$t" in
          all|clean|install|test|help) ;;
          *) is_target "$t" || fail "$where" "cmake: no target named '$t'" ;;
        esac
        ;;
      -DSTOKER_*)
        local var=${w[i]#-D}
        var=${var%%[:=]*}
        if ! cmake_files | xargs grep -Eq "(option\(|set\()${var}[[:space:]]"; then
          fail "$where" "cmake: there is no option $var"
        fi
        ;;
    esac
  done
}

# Runs a stoker program as the docs write it, with build/<x>/ replaced by the --build dir.
run_program() {
  local where=$1 exe=$2
  shift 2
  local -a args=()
  local a
  for a in "$@"; do
    if [[ $a =~ ^(\./)?build/[^/]+/(.*)$ ]]; then
      args+=("$build/${BASH_REMATCH[2]}")
    else
      args+=("$a")
    fi
  done
  local out
  out=$(mktemp)
  local rc=0
  timeout "$run_timeout" "$exe" "${args[@]}" >"$out" 2>&1 || rc=$?
  ran=$((ran + 1))
  if [ $rc -eq 124 ]; then
    fail "$where" "'${exe##*/} $*' did not finish within $run_timeout s (mark a long block <!-- docs-check: no-run -->)"
  elif [ $rc -ne 0 ]; then
    fail "$where" "'${exe##*/} $*' exited with $rc; its last lines:"
    tail -n 5 "$out" | sed 's/^/    /' >&2
  elif [ $verbose -eq 1 ]; then
    echo "  ran: ${exe##*/} $* (ok)"
  fi
  rm -f "$out"
}

# One simple command (no separators).
check_command() {
  local where=$1 mode=$2 text=$3
  local -a words
  read -ra words <<<"$text"
  # Leading VAR=value assignments and wrappers are not the program.
  while [ ${#words[@]} -gt 0 ]; do
    if [[ ${words[0]} =~ ^[A-Za-z_][A-Za-z0-9_]*= ]] || [[ $wrappers == *" ${words[0]} "* ]]; then
      words=("${words[@]:1}")
    elif [ "${words[0]}" = timeout ] && [ ${#words[@]} -gt 2 ]; then
      words=("${words[@]:2}")
    else
      break
    fi
  done
  [ ${#words[@]} -gt 0 ] || return 0
  checked=$((checked + 1))
  local prog=${words[0]}
  local placeholder=0
  has_placeholder "$text" && placeholder=1
  local w
  for w in "${words[@]:1}"; do
    if looks_like_repo_path "$w" && ! has_placeholder "$w"; then
      check_repo_path "$where" "$w" || true
    fi
  done

  local exe="" sub name
  if [[ $prog == */* ]]; then
    if [[ $prog == /* ]]; then
      note "$where" "absolute path $prog not checked"
      return 0
    fi
    check_repo_path "$where" "$prog" || return 0
    if [ -n "$repo_name" ]; then
      sub=$repo_sub
      name=$repo_name
      local -a srcs
      mapfile -t srcs < <(target_sources "$name" "$sub")
      if [ ${#srcs[@]} -gt 0 ]; then
        check_flags "$where" "$name" "${srcs[@]}" -- "${words[@]:1}"
      fi
      if [ -n "$build" ]; then exe="$build/${sub:+$sub/}$name"; fi
    else
      local script=${prog#./}
      if [ ! -x "$script" ]; then
        fail "$where" "'$script' is not executable (chmod +x, or the docs should say bash $script)"
      fi
      if [ -f "$script" ]; then
        local -a srcs=("$script")
        local t
        local t d
        while read -r t; do
          if d=$(target_dir "$t"); then
            mapfile -t -O ${#srcs[@]} srcs < <(target_sources "$t" "$d")
          fi
        done < <(grep -oE -- '--target [A-Za-z0-9_.-]+' "$script" | awk '{print $2}')
        check_flags "$where" "$script" "${srcs[@]}" -- "${words[@]:1}"
      fi
    fi
  elif sub=$(target_dir "$prog"); then
    # A stoker program by its bare name: on PATH once installed.
    if ! is_installed_program "$prog"; then
      fail "$where" "'$prog' is built (${sub:+$sub/}CMakeLists.txt) but not installed, so not on PATH: write build/release/${sub:+$sub/}$prog"
    fi
    local -a srcs
    mapfile -t srcs < <(target_sources "$prog" "$sub")
    if [ ${#srcs[@]} -gt 0 ]; then
      check_flags "$where" "$prog" "${srcs[@]}" -- "${words[@]:1}"
    fi
    if [ -n "$build" ]; then exe="$build/${sub:+$sub/}$prog"; fi
  elif [ "$prog" = cmake ]; then
    check_cmake "$where" "${words[@]:1}"
    return 0
  elif type -t "$prog" >/dev/null 2>&1; then
    return 0
  elif [ -n "${debian_package[$prog]:-}" ]; then
    note "$where" "$prog is not installed here (Debian: ${debian_package[$prog]}); not checked further"
    return 0
  else
    fail "$where" "'$prog' is not a repository file, a stoker program, or a command on PATH"
    return 0
  fi

  [ -n "$exe" ] || return 0
  if [ "$mode" = no-run ] || [ $placeholder -eq 1 ]; then
    return 0
  fi
  if [ ! -x "$exe" ]; then
    note "$where" "$exe is not built; not run"
    return 0
  fi
  run_program "$where" "$exe" "${words[@]:1}"
}

# Prints "file<TAB>line<TAB>mode<TAB>command" for every command line of a Markdown file.
extract() {
  awk -v file="$1" '
    function flush() {
      if (cmd != "") printf "%s\t%d\t%s\t%s\n", file, cmd_line, mode, cmd
      cmd = ""
    }
    /^[ \t]*```/ {
      if (!inside) {
        lang = $0
        sub(/^[ \t]*```[ \t]*/, "", lang)
        sub(/[ \t{].*$/, "", lang)
        inside = 1
        kind = ""
        if (lang == "sh" || lang == "bash" || lang == "shell") kind = "script"
        else if (lang == "console" || lang == "shell-session" || lang == "") kind = "prompt"
        if (marker == "skip") kind = ""
        mode = (marker == "no-run") ? "no-run" : "run"
        marker = ""
      } else {
        flush()
        inside = 0
      }
      next
    }
    inside {
      if (kind == "") next
      line = $0
      if (cmd == "") {
        if (kind == "prompt" || line ~ /^[ \t]*\$ /) {
          if (line !~ /^[ \t]*\$ /) next
          sub(/^[ \t]*\$ /, "", line)
        }
        if (line ~ /^[ \t]*(#|$)/) next
        cmd_line = NR
      }
      sub(/[ \t]+#.*$/, "", line)
      if (line ~ /\\$/) {
        sub(/\\$/, "", line)
        cmd = cmd line " "
        next
      }
      cmd = cmd line
      flush()
      next
    }
    /^[ \t]*<!--[ \t]*docs-check:[ \t]*skip[ \t]*-->/ { marker = "skip"; next }
    /^[ \t]*<!--[ \t]*docs-check:[ \t]*no-run[ \t]*-->/ { marker = "no-run"; next }
    /[^ \t]/ { marker = "" }
  ' "$1"
}

for f in "${files[@]}"; do
  if [ ! -f "$f" ]; then
    fail "$f" "no such file"
    continue
  fi
  while IFS=$'\t' read -r file line mode cmd; do
    [ $verbose -eq 1 ] && echo "$file:$line: $cmd"
    # Separators; naive about quotes, which the docs' commands do not need.
    while IFS= read -r part; do
      part=${part#"${part%%[![:space:]]*}"}
      [ -n "$part" ] && check_command "$file:$line" "$mode" "$part"
    done < <(sed -E 's/(&&|\|\||;|\|)/\n/g' <<<"$cmd")
  done < <(extract "$f")
done

for n in "${notes[@]+"${notes[@]}"}"; do
  echo "check_docs: note: $n"
done
echo "check_docs: ${#files[@]} files, $checked commands checked, $ran run, $errors problems"
[ $errors -eq 0 ]
