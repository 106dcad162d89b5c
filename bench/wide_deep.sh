#!/usr/bin/env bash
# wide-deep (docs/sparse.md) in one process beside the PyTorch peer on the same file, and
# across 2 ps + 2 workers (rows/sec, bytes a step): one JSON line each.
#   bench/wide_deep.sh [ROWS] [BUCKETS]     (default 200000 rows, 100000 buckets a field)
# PSG_BENCH_LARGE=1 adds a table of 50 M rows x 16 (+1 wide) over 4 ps tasks against one of
# 1 M rows (about 10 GB with Adam's slots: not on a shared machine).
# The peer needs python3-torch (PSG_WITH_PEERS=1 bash tools/install-deps.sh).
set -uo pipefail
cd "$(dirname "$0")/.."
rows=${1:-200000}
buckets=${2:-100000}
threads=${PSG_BENCH_THREADS:-2}
bash tools/build.sh build || exit 1
psg=build/cli/psgraph
peer=../shared/peers/torch-peer
tmp=$(mktemp -d /tmp/psg_bench_wd.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
file=$tmp/ctr.tsv
$psg data ctr --rows "$rows" --out "$file" > "$tmp/data.json" || exit 1
planted=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["planted_auc"])' "$tmp/data.json")
train=(train --model wide-deep --data criteo --data-dir "$file" --buckets "$buckets" --epochs 1 --log-every 1000000)

ours=$($psg "${train[@]}" --threads "$threads" | grep '"event":"done"' | tail -1)
theirs=""
if /usr/bin/python3 -c 'import torch' 2>/dev/null && [ -x "$peer" ]; then
  theirs=$("$peer" --workloads wide-deep --ctr-file "$file" --buckets "$buckets" --ctr-epochs 1 --threads "$threads" 2>/dev/null | tail -1)
fi
OURS="$ours" THEIRS="$theirs" ROWS=$rows B=$buckets P=$planted T=$threads python3 - <<'PY'
import json, os
o = json.loads(os.environ["OURS"]) if os.environ["OURS"] else {}
t = json.loads(os.environ["THEIRS"]) if os.environ["THEIRS"] else {}
out = {"bench": "wide_deep", "setup": "one process", "rows": int(os.environ["ROWS"]),
       "buckets": int(os.environ["B"]), "threads": int(os.environ["T"]), "planted_auc": float(os.environ["P"]),
       "psgraph_examples_per_sec": o.get("examples_per_sec"), "psgraph_test_auc": o.get("test_auc")}
if t:
    out.update({"torch_examples_per_sec": t.get("examples_per_sec"), "torch_test_auc": t.get("test_auc"),
                "torch_other_cpu_avg_cores": t.get("other_cpu_avg_cores")})
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
  small=$(cluster 4 2 38462)   # 26 x 38462 = 1 M rows
  large=$(cluster 4 2 1923077) # 26 x 1923077 = 50 M rows
  S="$small" L="$large" python3 - <<'PY'
import json, os
s = json.loads(os.environ["S"]) if os.environ["S"] else {}
l = json.loads(os.environ["L"]) if os.environ["L"] else {}
out = {"bench": "wide_deep", "setup": "4 ps + 2 workers, 50 M x 17 against 1 M x 17",
       "small_examples_per_sec": s.get("examples_per_sec"), "large_examples_per_sec": l.get("examples_per_sec")}
if s.get("examples_per_sec") and l.get("examples_per_sec"):
    out["ratio"] = round(l["examples_per_sec"] / s["examples_per_sec"], 3)
print(json.dumps(out))
PY
fi
