#!/usr/bin/env bash
# Sparse variables across real processes (`psgraph launch`: ps tasks and workers as separate
# processes): wide-deep on a synthetic click log with its table in 2 shards on 2 ps tasks.
# 1 worker trains exactly as one process does (same loss, same held-out AUC); with 2
# workers each step pulls and pushes only the unique rows its batch touched: the table's
# bytes a step are within 1.0-1.1x unique ids x row bytes, far below the table's size.
# The trace's step events carry the bytes pushed and pulled.
# --sync sync (sparse accumulators on the ps): 2 workers of batch 512 train as one process
# of batch 1024; with a backup worker the late gradients are dropped and counted.
set -u
psgraph=$1
fails=0
tmp=$(mktemp -d /tmp/psg_test_ctr.XXXXXX)
cleanup() { rm -rf "$tmp"; }
trap cleanup EXIT
ok() { echo "ok   $*"; }
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
field() { python3 -c 'import json,sys; print(json.loads(sys.argv[1])[sys.argv[2]])' "$1" "$2"; }

"$psgraph" data ctr --rows 20000 --out "$tmp/ctr.tsv" > "$tmp/data.json" || fail "psgraph data ctr"
args=(train --model wide-deep --data criteo --data-dir "$tmp/ctr.tsv" --buckets 5000 --epochs 2 --lr 0.003 --log-every 1000)

one=$("$psgraph" "${args[@]}" --table-shards 2 | grep '"event":"done"')
[ -n "$one" ] || fail "one process: no done line"

# 1. one worker and 2 ps tasks: the same training as one process
"$psgraph" launch --ps 2 --workers 1 -- "$psgraph" "${args[@]}" --logdir "$tmp/ck" --checkpoint-every 30 > "$tmp/w1.log" 2>&1 || fail "launch 2 ps + 1 worker: $(tail -3 "$tmp/w1.log")"
dist=$(grep -o '{"event":"done".*' "$tmp/w1.log")
if [ -n "$one" ] && [ -n "$dist" ] &&
   python3 -c 'import json,sys; a,b=json.loads(sys.argv[1]),json.loads(sys.argv[2]); sys.exit(0 if abs(a["final_loss"]-b["final_loss"])<1e-4 and abs(a["test_auc"]-b["test_auc"])<1e-3 else 1)' "$one" "$dist"; then
  ok "2 ps + 1 worker trains as one process (loss $(field "$dist" final_loss), AUC $(field "$dist" test_auc))"
else
  fail "2 ps + 1 worker differs from one process: $one / $dist"
fi

# the sharded table and its lazy Adam slots are in the checkpoint, one safetensors file per ps
last=$(ls "$tmp"/ck/model.ckpt-*.index.json 2>/dev/null | sort -t- -k2 -n | tail -1)
if [ -n "$last" ] && [ "$(ls "$tmp"/ck/*.safetensors | wc -l)" -ge 2 ] &&
   "$psgraph" inspect "$last" > "$tmp/inspect.txt" 2>&1 &&
   grep -q "checksums ok" "$tmp/inspect.txt" &&
   [ "$(grep -cE '^wide_deep/embeddings/part_[01](/Adam(_1)?)? +f32 +\[65000, 17\]' "$tmp/inspect.txt")" -eq 6 ]; then
  ok "checkpoint $(basename "$last"): the table's 2 shards and their slots"
else
  fail "checkpoint of the sharded table: $(ls "$tmp/ck" 2>&1) $(cat "$tmp/inspect.txt" 2>/dev/null | head -5)"
fi

# 2. two workers: only touched rows travel
"$psgraph" launch --ps 2 --workers 2 -- "$psgraph" "${args[@]}" --trace "$tmp/tr.json" --trace-steps 5:8 > "$tmp/w2.log" 2>&1 || fail "launch 2 ps + 2 workers: $(tail -3 "$tmp/w2.log")"
done2=$(grep -o '{"event":"done".*' "$tmp/w2.log")
if [ -n "$done2" ] && python3 - "$done2" <<'PY'
import json, sys
d = json.loads(sys.argv[1])
want = d["unique_ids_x_row_bytes"]
pull, push = d["table_bytes_pulled_per_step"] / want, d["table_bytes_pushed_per_step"] / want
table = 26 * 5000 * 17 * 4
print(f"table bytes a step: pulled {pull:.3f}x, pushed {push:.3f}x unique ids x row bytes "
      f"({want:.0f} B of a {table} B table); held-out AUC {d['test_auc']}")
sys.exit(0 if 0.99 <= pull <= 1.1 and 1.0 <= push <= 1.1 and want < table / 4 and d["test_auc"] > 0.6 else 1)
PY
then ok "2 ps + 2 workers: only the touched rows travel"
else fail "2 ps + 2 workers: $done2 $(tail -3 "$tmp/w2.log")"
fi
# the trace's step events carry the bytes each step moved: about the done line's per step
if [ -n "$done2" ] && python3 - "$done2" "$tmp/tr.json" <<'PY'
import json, sys
d = json.loads(sys.argv[1])
steps = [e for e in json.load(open(sys.argv[2]))["traceEvents"] if e.get("cat") == "step"]
ok = len(steps) == 4 and all(0.9 < e["args"]["bytes_pushed"] / d["bytes_pushed_per_step"] < 1.1 and
                             0.9 < e["args"]["bytes_pulled"] / d["bytes_pulled_per_step"] < 1.1 for e in steps)
print("trace step events:", [(e["args"]["step"], e["args"]["bytes_pushed"], e["args"]["bytes_pulled"]) for e in steps])
sys.exit(0 if ok else 1)
PY
then ok "the trace's steps 5-8 carry the bytes pushed and pulled"
else fail "trace step events: $(ls "$tmp") $(grep -i trace "$tmp/w2.log" | head -3)"
fi
# 3. sync: the rows of both workers' gradients summed per id on the ps, their mean applied
# by lazy Adam: the same model as one process with the two batches as one
sargs=(train --model wide-deep --data criteo --data-dir "$tmp/ctr.tsv" --buckets 5000 --lr 0.003 --log-every 1000)
big=$("$psgraph" "${sargs[@]}" --steps 12 --batch 1024 --table-shards 2 | grep '"event":"done"')
"$psgraph" launch --ps 2 --workers 2 -- "$psgraph" "${sargs[@]}" --steps 24 --sync sync > "$tmp/s2.log" 2>&1 || fail "launch --sync sync: $(tail -3 "$tmp/s2.log")"
sync2=$(grep -o '{"event":"done".*' "$tmp/s2.log")
if [ -n "$big" ] && [ -n "$sync2" ] && python3 - "$big" "$sync2" <<'PY'
import json, sys
a, b = json.loads(sys.argv[1]), json.loads(sys.argv[2])
print(f"one process, batch 1024: AUC {a['test_auc']} log-loss {a['test_logloss']}; 2 workers sync: "
      f"AUC {b['test_auc']} log-loss {b['test_logloss']}, {b['global_steps']} steps, {b['gradients_used']} gradients used")
sys.exit(0 if b["sync"] == "sync" and b["global_steps"] == 12 and b["gradients_used"] == 24 and
         b["gradients_dropped"] == 0 and abs(a["test_auc"] - b["test_auc"]) < 1e-3 and
         abs(a["test_logloss"] - b["test_logloss"]) < 1e-3 else 1)
PY
then ok "2 ps + 2 workers --sync sync trains as one process of both batches"
else fail "--sync sync differs from one process of batch 1024: $big / $sync2 $(grep -i error "$tmp/s2.log" | head -3)"
fi
"$psgraph" launch --ps 2 --workers 2 -- "$psgraph" "${sargs[@]}" --steps 24 --sync sync --backup-workers 1 > "$tmp/b2.log" 2>&1 || fail "launch --backup-workers 1: $(tail -3 "$tmp/b2.log")"
back=$(grep -o '{"event":"done".*' "$tmp/b2.log")
if [ -n "$back" ] && python3 - "$back" <<'PY'
import json, sys
d = json.loads(sys.argv[1])
print(f"N=1 of 2 workers: {d['global_steps']} steps, {d['gradients_used']} gradients used, "
      f"{d['gradients_dropped']} dropped, AUC {d['test_auc']}")
sys.exit(0 if d["replicas_to_aggregate"] == 1 and d["gradients_dropped"] > 0 and
         d["gradients_used"] == d["global_steps"] and d["test_auc"] > 0.5 else 1)
PY
then ok "--sync sync --backup-workers 1: the late gradients dropped"
else fail "--backup-workers 1: $back $(grep -i error "$tmp/b2.log" | head -3)"
fi

# 4. a ps memory limit below the table with its Adam slots (26.5 MB): it spreads over the
# 2 ps tasks; a limit below what 2 tasks hold is refused at placement, naming the variable
lim=(--steps 3 --ps-memory-limit 16M)
"$psgraph" launch --ps 2 --workers 1 -- "$psgraph" "${args[@]}" "${lim[@]}" > "$tmp/m1.log" 2>&1
if grep -q '"event":"done".*"table_shards":2,' "$tmp/m1.log"; then ok "--ps-memory-limit 16M: a 26.5 MB table and slots over 2 ps"
else fail "--ps-memory-limit 16M: $(grep -E 'done|error' "$tmp/m1.log" | head -3)"; fi
"$psgraph" launch --ps 2 --workers 1 -- "$psgraph" "${args[@]}" --steps 3 --ps-memory-limit 10M > "$tmp/m2.log" 2>&1
if grep -q "does not fit on /job:ps/task:.*ps memory limit of 10485760 bytes" "$tmp/m2.log"; then
  ok "--ps-memory-limit 10M: refused at placement ($(grep -o "variable '[^']*' ([0-9]* bytes)" "$tmp/m2.log" | head -1))"
else fail "--ps-memory-limit 10M not refused: $(tail -3 "$tmp/m2.log")"; fi
[ "$fails" -eq 0 ] && echo "all ctr cluster checks passed"
exit $((fails > 0))
