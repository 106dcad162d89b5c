#!/usr/bin/env bash
# Builds psgraph and runs every test twice: a release build, then a debug
# build (-O1, as the fuzzers) under AddressSanitizer + UndefinedBehaviorSanitizer. Ends with the
# line "N passed, N failed". PSG_NO_ASAN=1 skips the sanitizer pass; then each libFuzzer
# harness runs PSG_FUZZ_SECONDS (12) on its corpus when clang is there (PSG_NO_FUZZ=1 skips).
set -uo pipefail
cd "$(dirname "$0")/.."
bash tools/install-deps.sh || { echo "0 passed, 1 failed"; exit 1; }
passed=0
failed=0
skipped=0
run_suite() { # name builddir meson-options...
  local name=$1 dir=$2
  shift 2
  if ! bash tools/build.sh "$dir" "$@"; then
    echo "$name: build failed"
    failed=$((failed + 1))
    return
  fi
  local log
  log=$(meson test -C "$dir" --print-errorlogs --num-processes 2 2>&1)
  echo "$log" | grep -E '^ *[0-9]+/[0-9]+ ' | sed "s/^/[$name] /"
  # a failed test's own output follows its result line (meson 1.0 frames it with '―' rules)
  echo "$log" | awk '/^ *[0-9]+\/[0-9]+ .* (FAIL|TIMEOUT|ERROR|UNEXPECTEDPASS) / && !seen[$0]++ {n = 110}
                     n > 0 {print; n--}' | head -400 || true
  local ok fail
  ok=$(echo "$log" | awk '/^Ok:/ {print $2}')
  fail=$(echo "$log" | awk '/^(Fail|Timeout|Unexpected Pass):/ {s += $2} END {print s + 0}')
  local skip
  skip=$(echo "$log" | awk '/^Skipped:/ {print $2}')
  skipped=$((skipped + ${skip:-0}))
  passed=$((passed + ${ok:-0}))
  failed=$((failed + fail))
}
run_suite release build
if [ "${PSG_NO_ASAN:-0}" != 1 ]; then
  ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    run_suite asan build-asan -Db_sanitize=address,undefined -Dbuildtype=debug -Doptimization=1
fi
# the libFuzzer harnesses, a short time each on their corpora (tools/fuzz.sh): a crash fails
if [ "${PSG_NO_FUZZ:-0}" != 1 ]; then
  if fuzz=$(bash tools/fuzz.sh "${PSG_FUZZ_SECONDS:-12}" 2>&1); then
    echo "$fuzz" | sed 's/^/[fuzz] /'
    passed=$((passed + 1))
  else
    echo "$fuzz" | sed 's/^/[fuzz] /'
    echo "fuzz: a harness crashed (its input is in build-fuzz/crashes/)"
    failed=$((failed + 1))
  fi
fi
echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
