#!/usr/bin/env bash
# The include rules the folder libraries' include roots cannot enforce alone (see the top CMakeLists.txt):
#  - no `#include "../…"`, `#include "/…"` or `#include "harness/…"` anywhere under harness/ (a quoted include is first
#    looked up beside the including file, so a relative path would bypass the include roots);
#  - in a folder library (and cli), every quoted include names the folder itself or one it declares (PUBLIC or
#    PRIVATE), `#include <ampcheck/amp/…>` counting as folder amp; a header (.h / .cuh) includes only the folder
#    itself or its PUBLIC dependencies (a PRIVATE one is not on its consumers' include path);
#  - every folder of harness/ with sources is a library with declared dependencies (tests, bench, fuzz and amp aside).
# usage: include_hygiene.sh SOURCE_DIR FOLDER_DEPS   (FOLDER_DEPS: <build>/include_roots/folder_deps.txt, written by
# CMake: "<folder>: PUBLIC <folders> PRIVATE <folders>" per line)
set -euo pipefail
src=$1 deps_file=$2
[ -d "$src/harness" ] || { echo "FAIL: $src/harness: no such directory" >&2; exit 2; }
[ -s "$deps_file" ] || { echo "FAIL: $deps_file: missing or empty" >&2; exit 2; }
deps_file=$(realpath "$deps_file")
cd "$src"
bad=0
fail() { echo "FAIL: $*"; bad=1; }

# 1. relative and absolute includes, everywhere
while IFS= read -r hit; do
  fail "$hit: include by a relative or absolute path"
done < <(grep -rnE '^[[:space:]]*#[[:space:]]*include[[:space:]]*"(\.\./|\./|/|harness/)' harness \
           --include='*.h' --include='*.cpp' --include='*.cu' --include='*.cuh' || true)

# 2. each folder's includes against its declared dependencies
declare -A public private
while IFS= read -r line; do
  [ -n "$line" ] || continue
  folder=${line%%:*}
  rest=${line#*: PUBLIC}
  public[$folder]=" ${rest%%PRIVATE*} "
  private[$folder]=" ${rest#*PRIVATE} "
done < "$deps_file"
[ "${#public[@]}" -gt 0 ] || { echo "FAIL: $deps_file lists no folder" >&2; exit 2; }

for dir in harness/*/; do
  folder=$(basename "$dir")
  case $folder in tests|bench|amp|fuzz) continue ;; esac
  if [ -z "${public[$folder]+x}" ]; then
    fail "harness/$folder has no library with declared dependencies (ampcheck_folder_library in CMakeLists.txt)"
    continue
  fi
  for file in "$dir"*; do
    case $file in *.h|*.cuh) header=1 ;; *.cpp|*.cu) header=0 ;; *) continue ;; esac
    n=0
    while IFS= read -r line; do
      n=$((n + 1))
      if [[ $line =~ ^[[:space:]]*#[[:space:]]*include[[:space:]]*\"([^\"]*)\" ]]; then
        path=${BASH_REMATCH[1]}
        [[ $path == */* ]] || { fail "$file:$n: \"$path\": name the folder (\"$folder/$path\")"; continue; }
        dep=${path%%/*}
      elif [[ $line =~ ^[[:space:]]*#[[:space:]]*include[[:space:]]*\<ampcheck/amp/ ]]; then
        dep=amp
      else
        continue
      fi
      [ "$dep" = "$folder" ] && continue
      if [[ ${public[$folder]} == *" $dep "* ]]; then continue; fi
      if [[ ${private[$folder]} == *" $dep "* ]]; then
        [ "$header" = 0 ] && continue
        fail "$file:$n: a header includes $dep, a PRIVATE dependency of $folder (make it PUBLIC or include it from a .cpp)"
        continue
      fi
      fail "$file:$n: $folder does not depend on $dep (declared: PUBLIC${public[$folder]}PRIVATE${private[$folder]})"
    done < "$file"
  done
done

if [ "$bad" = 0 ]; then
  echo "include hygiene: every include under harness/ follows the folders' declared dependencies"
else
  exit 1
fi
