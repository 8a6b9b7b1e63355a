#!/usr/bin/env bash
# Formatting check: runs Debian's clang-format in --dry-run -Werror mode (the .clang-format at
# the root) over every tracked *.cpp, *.h, *.cu and *.cuh file and lists the files `make format`
# would change. Exit 0 when none, 1 otherwise, 2 when clang-format is missing.
#   scripts/check-format.sh [REPO]
set -euo pipefail
repo=${1:-$(cd "$(dirname "$0")/.." && pwd)}
cd "$repo"
clang_format=${CLANG_FORMAT:-clang-format}
if ! command -v "$clang_format" > /dev/null; then
  echo "check-format: $clang_format not found (apt-get install clang-format)" >&2
  exit 2
fi
mapfile -t files < <(git ls-files '*.cpp' '*.h' '*.cu' '*.cuh')
bad=()
for f in "${files[@]}"; do
  "$clang_format" --dry-run -Werror --style=file "$f" > /dev/null 2>&1 || bad+=("$f")
done
if ((${#bad[@]})); then
  printf '%s\n' "${bad[@]}"
  echo "check-format: ${#bad[@]} of ${#files[@]} files differ from clang-format's output (make format fixes them)" >&2
  exit 1
fi
echo "check-format: ${#files[@]} files formatted"
