#!/usr/bin/env bash
# What a hostile peer costs a ps (issue 20), one JSON line each: parsing a 1 MB JSON object
# and cluster spec (beside Python's json), then PSG_REPLAY (default 100000) mutated requests
# captured from a short training run replayed at a live `psgraph server` (RSS before, once
# it took every request in, and 3 s later when every wait they started ended; Inspect's
# round trip during and after; targets: RSS within 50 MB, 50 ms), and how long SIGTERM
# takes to end it (target 2 s). The test test_hostile runs the same, shorter.
#   bench/hostile.sh
set -uo pipefail
cd "$(dirname "$0")/.."
bash tools/build.sh build >/dev/null || exit 1
build/bench/bench_limits
PSG_REPLAY=${PSG_REPLAY:-100000} build/tests/test_hostile build/cli/psgraph | grep '^{'
