#!/usr/bin/env bash
# Configures (once) and builds psgraph into build/ (release) or the folder
# and meson options given: tools/build.sh build-asan -Db_sanitize=address,undefined
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-build}
shift || true
if [ ! -f "$dir/build.ninja" ]; then
  meson setup "$dir" "$@" >/dev/null
fi
ninja -C "$dir" >/dev/null
