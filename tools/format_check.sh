#!/usr/bin/env bash
# Checks that the C and CUDA files changed since the one-time reformat (the last revision in
# .git-blame-ignore-revs), committed or not, are as the root .clang-format lays them out.
# Skips (77) outside a git checkout or without clang-format. Lists each file that is not.
set -uo pipefail
cd "$(dirname "$0")/.."
command -v clang-format >/dev/null || { echo "format_check: no clang-format"; exit 77; }
git rev-parse --git-dir >/dev/null 2>&1 || { echo "format_check: not a git checkout"; exit 77; }
base=$(grep -E '^[0-9a-f]{40}$' .git-blame-ignore-revs | tail -1)
git cat-file -e "$base^{commit}" 2>/dev/null || { echo "format_check: $base is not in this clone"; exit 77; }
files=()
while IFS= read -r f; do
  [ -f "$f" ] && files+=("$f")
done < <({ git diff --name-only "$base" -- '*.c' '*.h' '*.cu' '*.cuh'; git ls-files --others --exclude-standard -- '*.c' '*.h' '*.cu' '*.cuh'; } | sort -u)
# one clang-format for all of them (a process per file took a minute on a busy machine):
# it names each file that differs in its "code should be clang-formatted" warnings
bad=0
if [ ${#files[@]} -gt 0 ]; then
  while IFS= read -r f; do
    echo "format_check: $f is not formatted (clang-format -i $f)"
    bad=$((bad + 1))
  done < <(clang-format --dry-run --Werror "${files[@]}" 2>&1 >/dev/null |
    sed -n 's/^\(.*\):[0-9]*:[0-9]*: error: code should be clang-formatted.*/\1/p' | sort -u)
fi
echo "format_check: ${#files[@]} changed files, $bad not formatted"
[ "$bad" -eq 0 ]
