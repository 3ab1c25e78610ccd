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
# Each header twice: header-only (the default) and as a separately compiled program's files see
# it (-DPSFLOW_SEPARATE_COMPILATION, core/compilation.hpp), where the declarations must stand
# without the definitions. psflow/impl/ is only for the second.
find psflow -name '*.hpp' | sort | xargs -P "$(nproc)" -I{} sh -c '
  for mode in "" -DPSFLOW_SEPARATE_COMPILATION; do
    case "$1:$mode" in psflow/impl/*:) continue ;; esac
    printf "#include <%s>\n" "$1" |
      "$2" -std=c++20 -fsyntax-only -Wall -Wextra -Werror $mode -I"$3" -x c++ - 2>&1 ||
      echo "$1 ${mode:-(header-only)}" >> "$4"
  done' check {} "$compiler" "$include_dir" "$failed"
count=$(find psflow -name '*.hpp' | wc -l)
if [ -s "$failed" ]; then
  echo "headers that do not compile on their own:"
  cat "$failed"
  exit 1
fi
echo "all $count public headers compile on their own"
