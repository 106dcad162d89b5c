#!/usr/bin/env bash
# Builds the libFuzzer harnesses of tests/fuzz (clang, ASan + UBSan, -Dfuzz=true) into
# build-fuzz/ and runs each on its corpus for SECONDS (default 15). New inputs go to a
# temporary folder, never into the repo; a crash fails the run, and its input is left in
# build-fuzz/crashes/ (copy it into tests/fuzz/corpus/NAME as a regression input).
# Usage: tools/fuzz.sh [SECONDS] [TARGET...]; skips (exit 0) when clang is absent.
set -uo pipefail
cd "$(dirname "$0")/.."
secs=${1:-15}
shift || true
if ! command -v clang >/dev/null; then
  echo "fuzz: skipped: clang is not installed"
  exit 0
fi
if [ ! -f build-fuzz/build.ninja ]; then
  CC=clang meson setup build-fuzz -Dfuzz=true -Db_sanitize=address,undefined -Db_lundef=false \
    -Dbuildtype=debug -Doptimization=1 -Dcuda=disabled -Dnative=false -Dpython=disabled >/dev/null || exit 1
fi
targets=("$@")
[ ${#targets[@]} -eq 0 ] && targets=(fuzz_wire fuzz_graph fuzz_requests fuzz_cluster fuzz_tfrecord fuzz_jpeg fuzz_png fuzz_idx fuzz_safetensors fuzz_rest fuzz_run fuzz_stream)
ninja -C build-fuzz "${targets[@]/#/tests/fuzz/}" >/dev/null || { echo "fuzz: build failed"; exit 1; }
mkdir -p build-fuzz/crashes
failed=0
for t in "${targets[@]}"; do
  work=$(mktemp -d /tmp/psg_fuzz_corpus.XXXXXX)
  log=build-fuzz/$t.log
  ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
    "build-fuzz/tests/fuzz/$t" "$work" "tests/fuzz/corpus/$t" -max_total_time="$secs" -rss_limit_mb=2048 \
    -timeout=10 -max_len=65536 -artifact_prefix="build-fuzz/crashes/$t-" -print_final_stats=1 >"$log" 2>&1
  rc=$?
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | cut -d' ' -f2)
  if [ $rc = 0 ]; then
    echo "{\"fuzz\":\"$t\",\"seconds\":$secs,\"executions\":${execs:-0},\"coverage\":${cov:-0},\"crashes\":0}"
  else
    echo "{\"fuzz\":\"$t\",\"seconds\":$secs,\"executions\":${execs:-0},\"coverage\":${cov:-0},\"crashes\":1}"
    grep -E "ERROR|SUMMARY|runtime error|Test unit written" "$log" | head -5
    failed=$((failed + 1))
  fi
  rm -rf "$work"
done
[ $failed -eq 0 ]
