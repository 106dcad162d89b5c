#!/usr/bin/env bash
# wide-deep (docs/sparse.md) in one process beside the PyTorch peer on the same file (best
# of PSG_BENCH_REPEAT runs each, default 3, alternating), and
# across 2 ps + 2 workers (rows/sec, bytes a step): one JSON line each.
#   bench/wide_deep.sh [ROWS] [BUCKETS]     (default 200000 rows, 100000 buckets a field)
# PSG_BENCH_LARGE=1 adds a table of 50 M rows x 16 (+1 wide) over 4 ps tasks against one of
# 1 M rows (10.2 GB with lazy Adam's slots; skipped when that is over 80% of the memory
# available), with each run's wall time, initialization included.
# The peer needs python3-torch (PSG_WITH_PEERS=1 bash tools/install-deps.sh).
set -uo pipefail
cd "$(dirname "$0")/.."
rows=${1:-200000}
buckets=${2:-100000}
threads=${PSG_BENCH_THREADS:-2}
bash tools/build.sh build || exit 1
psg=build/cli/psgraph
peer=${PSG_PEER:-../shared/peers/torch-peer} # a worktree beside main: PSG_PEER=/work/shared/peers/torch-peer
tmp=$(mktemp -d /tmp/psg_bench_wd.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
file=$tmp/ctr.tsv
$psg data ctr --rows "$rows" --out "$file" > "$tmp/data.json" || exit 1
planted=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["planted_auc"])' "$tmp/data.json")
train=(train --model wide-deep --data criteo --data-dir "$file" --buckets "$buckets" --epochs 1 --log-every 1000000)

# best of PSG_BENCH_REPEAT runs (default 3) of each, alternating psgraph and the peer, so
# that a burst of load from other work on the machine falls on both
repeat=${PSG_BENCH_REPEAT:-3}
have_peer=0
/usr/bin/python3 -c 'import torch' 2>/dev/null && [ -x "$peer" ] && have_peer=1
best() { # the line with the highest examples_per_sec of the lines on stdin
  python3 -c 'import json,sys; ls=[json.loads(l) for l in sys.stdin if l.strip()]; print(json.dumps(max(ls, key=lambda d: d.get("examples_per_sec") or 0)) if ls else "")'
}
: > "$tmp/ours.jsonl"
: > "$tmp/theirs.jsonl"
for r in $(seq "$repeat"); do # each side's peak RSS measured the same way (bench/peak_rss.py)
  python3 bench/peak_rss.py "$tmp/ours_rss_$r" $psg "${train[@]}" --threads "$threads" | grep '"event":"done"' |
    tail -1 >> "$tmp/ours.jsonl"
  [ "$have_peer" = 1 ] &&
    python3 bench/peak_rss.py "$tmp/peer_rss_$r" "$peer" --workloads wide-deep --ctr-file "$file" --buckets "$buckets" \
      --ctr-epochs 1 --threads "$threads" 2>/dev/null | tail -1 >> "$tmp/theirs.jsonl"
done
peak() { python3 -c 'import json,sys; v=[json.load(open(f))["peak_rss_mb"] for f in sys.argv[1:]]; print(max(v) if v else "")' "$@" 2>/dev/null; }
rss_ours=$(peak "$tmp"/ours_rss_*)
rss_theirs=$(peak "$tmp"/peer_rss_*)
ours=$(best < "$tmp/ours.jsonl")
theirs=$(best < "$tmp/theirs.jsonl")
OURS="$ours" THEIRS="$theirs" RSS_OURS="$rss_ours" RSS_THEIRS="$rss_theirs" REP=$repeat ROWS=$rows B=$buckets P=$planted T=$threads python3 - <<'PY'
import json, os
o = json.loads(os.environ["OURS"]) if os.environ["OURS"] else {}
t = json.loads(os.environ["THEIRS"]) if os.environ["THEIRS"] else {}
out = {"bench": "wide_deep", "setup": "one process, best of " + os.environ["REP"] + " alternating", "rows": int(os.environ["ROWS"]),
       "buckets": int(os.environ["B"]), "threads": int(os.environ["T"]), "planted_auc": float(os.environ["P"]),
       "psgraph_examples_per_sec": o.get("examples_per_sec"), "psgraph_test_auc": o.get("test_auc"),
       "psgraph_peak_rss_mb": float(os.environ["RSS_OURS"]) if os.environ["RSS_OURS"] else None}
if t:
    out.update({"torch_examples_per_sec": t.get("examples_per_sec"), "torch_test_auc": t.get("test_auc"),
                "torch_other_cpu_avg_cores": t.get("other_cpu_avg_cores"),
                "torch_peak_rss_mb": float(os.environ["RSS_THEIRS"]) if os.environ["RSS_THEIRS"] else None})
    if out["psgraph_peak_rss_mb"] and out["torch_peak_rss_mb"]:
        out["rss_ratio"] = round(out["psgraph_peak_rss_mb"] / out["torch_peak_rss_mb"], 3)
    if o.get("examples_per_sec") and t.get("examples_per_sec"):
        out["ratio"] = round(o["examples_per_sec"] / t["examples_per_sec"], 3)
else:
    out["note"] = "python3-torch or the peer is missing: peer skipped (PSG_WITH_PEERS=1 bash tools/install-deps.sh)"
print(json.dumps(out))
PY

# 2 ps + 2 workers, async: each worker's examples/sec and the bytes its steps move
cluster() { # ps workers buckets -> the chief's done line
  $psg launch --ps "$1" --workers "$2" -- "$psg" "${train[@]}" --buckets "$3" --threads 1 2>/dev/null |
    grep -o '{"event":"done".*' | tail -1
}
d=$(cluster 2 2 "$buckets")
D="$d" python3 - <<'PY'
import json, os
d = json.loads(os.environ["D"]) if os.environ["D"] else {}
keys = ["examples_per_sec", "test_auc", "unique_ids_per_step", "table_bytes_pulled_per_step",
        "table_bytes_pushed_per_step", "unique_ids_x_row_bytes", "bytes_pulled_per_step", "bytes_pushed_per_step"]
out = {"bench": "wide_deep", "setup": "2 ps + 2 workers (async)", **{k: d.get(k) for k in keys}}
if d.get("unique_ids_x_row_bytes"):
    out["push_ratio"] = round(d["table_bytes_pushed_per_step"] / d["unique_ids_x_row_bytes"], 3)
    out["pull_ratio"] = round(d["table_bytes_pulled_per_step"] / d["unique_ids_x_row_bytes"], 3)
print(json.dumps(out))
PY

if [ "${PSG_BENCH_LARGE:-0}" = 1 ]; then
  # the table and its two lazy-Adam slots: 3 x 26 x buckets x 17 x 4 bytes, over 4 ps tasks
  need=$(( 3 * 1923077 * 26 * 17 * 4 ))
  avail=$(( $(awk '/MemAvailable/ {print $2}' /proc/meminfo) * 1024 ))
  if [ "$need" -gt $(( avail * 8 / 10 )) ]; then
    echo "{\"bench\": \"wide_deep\", \"setup\": \"4 ps + 2 workers, 50 M x 17\", \"skipped\": \"the table and its slots need $need bytes, over 80% of the $avail bytes available\"}"
    exit 0
  fi
  timed() { # buckets -> the chief's done line with the run's wall seconds (init included)
    local t0 t1 d
    t0=$(date +%s.%N)
    d=$(cluster 4 2 "$1")
    t1=$(date +%s.%N)
    [ -n "$d" ] && echo "${d%\}},\"run_wall_sec\":$(python3 -c "print(round($t1 - $t0, 1))")}"
  }
  small=$(timed 38462)   # 26 x 38462 = 1 M rows
  large=$(timed 1923077) # 26 x 1923077 = 50 M rows
  S="$small" L="$large" NEED=$need python3 - <<'PY'
import json, os
s = json.loads(os.environ["S"]) if os.environ["S"] else {}
l = json.loads(os.environ["L"]) if os.environ["L"] else {}
out = {"bench": "wide_deep", "setup": "4 ps + 2 workers, 50 M x 17 against 1 M x 17 (lazy Adam: 2 slots)",
       "large_table_and_slots_bytes": int(os.environ["NEED"]),
       "small_examples_per_sec": s.get("examples_per_sec"), "large_examples_per_sec": l.get("examples_per_sec"),
       "small_run_wall_sec": s.get("run_wall_sec"), "large_run_wall_sec": l.get("run_wall_sec"),
       "small_test_auc": s.get("test_auc"), "large_test_auc": l.get("test_auc")}
if s.get("examples_per_sec") and l.get("examples_per_sec"):
    out["ratio"] = round(l["examples_per_sec"] / s["examples_per_sec"], 3)
print(json.dumps(out))
PY
fi
