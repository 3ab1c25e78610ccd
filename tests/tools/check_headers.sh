#!/bin/sh
# Every public header compiles on its own (its own includes suffice), with the project's warnings,
# in both ways of compiling psflow.
# Usage: check_headers.sh <c++ compiler> <include dir>
# Syntax-only: a missing include fails in the front end; code generation would only cost time.
set -u
compiler=$1
include_dir=$(cd "$2" && pwd) || exit 2
failed=$(mktemp)
trap 'rm -f "$failed"' EXIT
cd "$include_dir" || exit 2
# Each header header-only (the default), and those that hide definitions from a separately
# compiled program's files (a PSFLOW_COMPILES_IMPLEMENTATION block or PSFLOW_DECL functions,
# core/compilation.hpp) also as such a file sees them (-DPSFLOW_SEPARATE_COMPILATION), where their
# declarations must stand without the definitions. The other headers differ between the two ways
# only in the headers they include, each checked both ways itself. psflow/impl/ is only for the
# second way, and its one header, src.hpp, is all that src/compiled.cpp includes: every build
# compiles it there, with the project's warnings, so it is not compiled again here.
# An umbrella header (nothing but includes, psflow.hpp and the like) is only preprocessed, which
# finds an include that names no header: each header it includes is compiled here on its own, and
# together they compile in src/compiled.cpp and, header-only, in the consumer project's program
# (tests/consumer), so compiling the umbrellas again (about 125 s of CPU) would find nothing new.
headers=$(find psflow -name '*.hpp' ! -path 'psflow/impl/*' | sort)
printf '%s\n' "$headers" | xargs -P "$(nproc)" -I{} sh -c '
  check=-fsyntax-only
  if ! grep -vE "^[[:space:]]*(//.*)?\$|^#pragma once|^#include |^#if PSFLOW_COMPILES_IMPLEMENTATION|^#endif" \
    "$1" | grep -q .; then
    check="-E -o /dev/null"  # an umbrella header
  fi
  for mode in "" -DPSFLOW_SEPARATE_COMPILATION; do
    if [ -n "$mode" ] &&
      ! grep -qE "PSFLOW_COMPILES_IMPLEMENTATION|PSFLOW_DECL|PSFLOW_REGISTERED_AT_STARTUP" "$1"; then
      continue
    fi
    printf "#include <%s>\n" "$1" |
      "$2" -std=c++20 $check -Wall -Wextra -Werror $mode -I"$3" -x c++ - 2>&1 ||
      echo "$1 ${mode:-(header-only)}" >> "$4"
  done' check {} "$compiler" "$include_dir" "$failed"
count=$(printf '%s\n' "$headers" | wc -l)
if [ -s "$failed" ]; then
  echo "headers that do not compile on their own:"
  cat "$failed"
  exit 1
fi
echo "all $count public headers stand on their own (umbrella headers preprocessed, the rest compiled)"
