#!/bin/sh
# Every public header compiles on its own (its own includes suffice), with the project's warnings.
# Usage: check_headers.sh <c++ compiler> <include dir>
# Syntax-only: a missing include fails in the front end; code generation would only cost time.
set -u
compiler=$1
include_dir=$(cd "$2" && pwd) || exit 2
failed=$(mktemp)
trap 'rm -f "$failed"' EXIT
cd "$include_dir" || exit 2
find psflow -name '*.hpp' | sort | xargs -P "$(nproc)" -I{} sh -c '
  printf "#include <%s>\n" "$1" |
    "$2" -std=c++20 -fsyntax-only -Wall -Wextra -Werror -I"$3" -x c++ - 2>&1 ||
    echo "$1" >> "$4"' check {} "$compiler" "$include_dir" "$failed"
count=$(find psflow -name '*.hpp' | wc -l)
if [ -s "$failed" ]; then
  echo "headers that do not compile on their own:"
  cat "$failed"
  exit 1
fi
echo "all $count public headers compile on their own"
