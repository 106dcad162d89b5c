#!/usr/bin/env bash
# What a hostile peer costs a ps (issue 20), one JSON line each: parsing a 1 MB JSON object
# and cluster spec (beside Python's json), then PSG_REPLAY (default 100000) mutated requests
# captured from a short training run replayed at a live `psgraph server` (RSS before, once
# it took every request in, and 3 s later when every wait they started ended; Inspect's
# round trip during and after; targets: RSS within 50 MB, 50 ms), and how long SIGTERM
# takes to end it (target 2 s). The test test_hostile runs the same, shorter.
#   bench/hostile.sh
#   bench/hostile.sh --waits [ROUNDS]
# (issue 27) a real `psgraph train` (mlp, 300 steps) beside a ps, alone and beside 4
# connections of 8 takes each waiting, ROUNDS times alternated: steps/s of each, the ratio.
#   bench/hostile.sh --beside [ROUNDS]
# (issue 27) the same job (PSG_BESIDE_STEPS, default 300 steps) alone and beside each
# reproducer of findings 1-4 looping against its ps, alternated, ROUNDS times: steps/s of
# each and the ratio (target 0.8), then per finding the best ratio and the spread, and
# (medians) the cores the reproducer took (it runs on this host, in the test's process: a
# hostile peer runs on its own, so on a 2-core machine part of the job's loss is the
# reproducer's own CPU, not the ps's), the ps's extra cores beside it, and the ps's CPU ms
# per reproduction. PSG_BESIDE_FINDINGS=3 runs finding 3 only (any of 1234).
#   bench/hostile.sh --graphs [PAIRS] [CLIENTS]
# (issue 27) PAIRS (default 100000) mutated RegisterGraph + RunGraph pairs from the seeds of
# tests/fuzz/corpus/fuzz_run against one AddressSanitizer + UBSan `psgraph server
# --memory-limit 256M` (build-asan), sent by CLIENTS processes at once (default 8; a pair
# mostly waits on the server's 1 s bounds, so one client takes about 4 hours): its RSS growth,
# the task's memory peak as it counted it, and the sanitizer reports in its log (target: none,
# +50 MB, the peak under the limit).
set -uo pipefail
cd "$(dirname "$0")/.."
bash tools/build.sh build >/dev/null || exit 1
if [ "${1:-}" = "--waits" ]; then # a real job's steps/s alone and beside 32 waiting takes, ROUNDS times
  for _ in $(seq "${2:-3}"); do
    PSG_HOSTILE_ONLY=test_waits_hold_no_runner build/tests/test_hostile_graphs build/cli/psgraph | grep '^{"bench":"hostile_waits"'
  done
  exit
fi
if [ "${1:-}" = "--beside" ]; then # a real job's steps/s alone and beside each finding's reproducer
  out=$(mktemp /tmp/psg_hostile_beside.XXXXXX)
  for _ in $(seq "${2:-3}"); do
    PSG_BESIDE_STEPS=${PSG_BESIDE_STEPS:-300} PSG_HOSTILE_ONLY=test_job_beside_reproducers \
      build/tests/test_hostile_graphs build/cli/psgraph | grep '^{"bench":"hostile_beside"' | tee -a "$out"
  done
  python3 - "$out" <<'PY'
import json, sys
by = {}
for line in open(sys.argv[1]):
    r = json.loads(line)
    by.setdefault((r["finding"], r["reproducer"]), []).append(r)
for (f, name), runs in sorted(by.items()):
    ratios = [r["ratio"] for r in runs]
    # the cores each took while the job ran beside the reproducer: the reproducer runs on this
    # host (a hostile peer runs on its own), so what it takes of the machine's is not the ps's
    def cores(key, secs):
        v = sorted(r[key] / r[secs] for r in runs if r.get(secs))
        return round(v[len(v) // 2], 2) if v else None
    ps_extra = [r["ps_cpu_beside"] / r["seconds_beside"] - r["ps_cpu_alone"] / r["seconds_alone"]
                for r in runs if r.get("seconds_beside") and r.get("seconds_alone")]
    print(json.dumps({"bench": "hostile_beside_summary", "finding": f, "reproducer": name,
                      "runs": len(ratios), "best_ratio": max(ratios),
                      "spread": round(max(ratios) - min(ratios), 2), "target": 0.8,
                      "cores": runs[0].get("cores"),
                      "reproducer_cores": cores("reproducer_cpu", "seconds_beside"),
                      "ps_extra_cores": round(sorted(ps_extra)[len(ps_extra) // 2], 2) if ps_extra else None,
                      "ps_cpu_ms_per_reproduction": round(1e3 * sorted(
                          (r["ps_cpu_beside"] - r["ps_cpu_alone"] * r["seconds_beside"] / r["seconds_alone"])
                          / r["reproductions"] for r in runs)[len(runs) // 2], 3)
                      if all(r.get("seconds_alone") for r in runs) else None}))
PY
  rm -f "$out"
  exit
fi
if [ "${1:-}" = "--graphs" ]; then
  bash tools/build.sh build-asan -Db_sanitize=address,undefined -Dbuildtype=debug -Doptimization=1 >/dev/null || exit 1
  log=$(mktemp /tmp/psg_hostile_graphs_ps.XXXXXX)
  # a small quarantine: freed memory would otherwise stay in RSS for 256 MB
  ASAN_OPTIONS=allocator_may_return_null=1:quarantine_size_mb=16:detect_leaks=1 \
    UBSAN_OPTIONS=print_stacktrace=1 \
    build/bench/bench_hostile_graphs build-asan/cli/psgraph tests/fuzz/corpus/fuzz_run "${2:-100000}" 256M "$log" "${3:-8}"
  rc=$?
  reports=$(grep -cE "ERROR: (Address|Leak)Sanitizer|runtime error:" "$log")
  echo "{\"bench\":\"hostile_graphs_sanitizer\",\"reports\":$reports,\"server_log\":\"$log\"}"
  [ "$rc" = 0 ] && [ "$reports" = 0 ]
  exit
fi
build/bench/bench_limits
PSG_REPLAY=${PSG_REPLAY:-100000} build/tests/test_hostile build/cli/psgraph | grep '^{'
