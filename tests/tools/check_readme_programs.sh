#!/bin/sh
# README's C++ programs compile: every ```cpp block with a main() is written to a file and
# compiled (syntax and types only) against the repository's headers, so the README cannot drift
# from the API. As a file of a program that links psflow::compiled sees them
# (PSFLOW_SEPARATE_COMPILATION): the declarations and templates a program uses, without parsing
# psflow's implementation again (about 7 s a program instead of 35), which the header check
# compiles.
# Usage: check_readme_programs.sh <c++ compiler> <repository root>
set -eu
compiler=$1
root=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
awk -v dir="$work" '
  /^```cpp$/ { n++; file = dir "/program_" n ".cpp"; inside = 1; next }
  /^```$/ { inside = 0; next }
  inside { print > file }
' "$root/README.md"
checked=0
for program in "$work"/program_*.cpp; do
  [ -e "$program" ] || continue
  grep -q "int main" "$program" || continue
  echo "compiling README program $(basename "$program") ($(wc -l < "$program") lines)"
  "$compiler" -std=c++20 -fsyntax-only -Wall -Wextra -DPSFLOW_SEPARATE_COMPILATION -I"$root/include" \
    "$program"
  checked=$((checked + 1))
done
if [ "$checked" -lt 2 ]; then
  echo "expected README.md to hold at least 2 C++ programs with a main(), found $checked"
  exit 1
fi
echo "$checked README program(s) compile"
