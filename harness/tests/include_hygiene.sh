#!/usr/bin/env bash
# The include rules the folder libraries' include roots cannot enforce alone (see the top CMakeLists.txt):
#  - no `#include "../…"`, `#include "/…"` or `#include "harness/…"` anywhere under harness/ (a quoted include is first
#    looked up beside the including file, so a relative path would bypass the include roots);
#  - in a folder library (and cli), every quoted include names the folder itself or one it declares (PUBLIC or
#    PRIVATE), `#include <ampcheck/amp/…>` counting as folder amp; a header (.h / .cuh) includes only the folder
#    itself or its PUBLIC dependencies (a PRIVATE one is not on its consumers' include path);
#  - every folder of harness/ with sources is a library with declared dependencies (tests, bench, fuzz and amp aside);
#  - namespace = folder: a file under harness/<folder>/ declares only `namespace ampcheck::<folder>` or a namespace
#    inside it (`ampcheck::kernels::cuda`, `ampcheck::report::svg`) — never `namespace ampcheck {` itself nor
#    another folder's (`ampcheck::engine` in run/). Exempt: harness/tests/ (a test reopens the namespace it tests and
#    keeps its helpers in `ampcheck::testing`). amp's public headers (harness/amp/include/ampcheck/amp/) follow the
#    rule as they are: their folder is amp.
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

# 3. namespace = folder (the folder a file is in, at any depth below harness/<folder>/; fuzz corpora are data)
ns_exempt=(tests)  # reopen the namespaces they test; helpers in ampcheck::testing
ns_decl='^[[:space:]]*(inline[[:space:]]+)?namespace[[:space:]]+ampcheck([[:space:]]*::|[[:space:]]*\{|[[:space:]]*$)'
for dir in harness/*/; do
  folder=$(basename "$dir")
  [[ " ${ns_exempt[*]} " == *" $folder "* ]] && continue
  while IFS= read -r hit; do
    file=${hit%%:*} rest=${hit#*:} n=${rest%%:*} line=${rest#*:}
    if [[ $line =~ namespace[[:space:]]+ampcheck[[:space:]]*(::[[:space:]]*([A-Za-z_][A-Za-z0-9_]*))? ]]; then
      ns=${BASH_REMATCH[2]}
      [ "$ns" = "$folder" ] && continue
      fail "$file:$n: declares namespace ampcheck${ns:+::$ns}: files in harness/$folder/ belong to ampcheck::$folder"
    fi
  done < <({ grep -rnE "$ns_decl" "$dir" --include='*.h' --include='*.cpp' --include='*.cu' --include='*.cuh' \
               --exclude-dir=corpus --exclude-dir=regressions || true; } | LC_ALL=C sort)
done

if [ "$bad" = 0 ]; then
  echo "include hygiene: every include under harness/ follows the folders' declared dependencies," \
       "every namespace its folder"
else
  exit 1
fi
