#!/bin/sh
# Every tracked C++ file (include/, tests/, examples/, benchmarks/) is formatted with the
# project's .clang-format by Debian 12's clang-format 14. Fix with:
#   git ls-files '*.hpp' '*.cpp' | xargs clang-format-14 -i
# Usage: check_format.sh <source dir> [clang-format binary]
set -u
cd "$1" || exit 2
format=${2:-clang-format-14}
command -v "$format" >/dev/null || { echo "check_format: $format not found (scripts/setup.sh installs it)"; exit 2; }
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  files=$(git ls-files '*.hpp' '*.cpp')
else  # an exported tree without .git
  files=$(find include src tests examples benchmarks -name '*.hpp' -o -name '*.cpp' | sort)
fi
unformatted=$(for f in $files; do
  [ -f "$f" ] || continue
  "$format" --style=file --dry-run --Werror "$f" >/dev/null 2>&1 || echo "$f"
done)
if [ -n "$unformatted" ]; then
  echo "not formatted with $format and .clang-format:"
  echo "$unformatted" | sed 's/^/  /'
  echo "fix: $format -i <file> (or: git ls-files '*.hpp' '*.cpp' | xargs $format -i)"
  exit 1
fi
echo "all $(echo "$files" | wc -w) C++ files are formatted"
