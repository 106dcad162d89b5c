#!/usr/bin/env bash
# The psgraph binary as a user runs it: usage, option errors, a short run's output.
set -u
psgraph=$1
fails=0
check() { # description, command..., expects exit code $expect and output containing $want
  local out rc
  out=$("${@:3}" 2>&1); rc=$?
  if [ "$rc" != "$1" ] || ! grep -qF -- "$2" <<<"$out"; then
    echo "FAIL: ${*:3} -> rc $rc, wanted $1 and '$2'; got: $out" | head -5
    fails=$((fails + 1))
  else
    echo "ok   ${*:3}"
  fi
}
check 2 "usage: psgraph" "$psgraph"
# the CUDA libraries are a module loaded on the first GPU use, never linked in
if ldd "$psgraph" | grep -q -E 'libcublas|libcudnn|libcudart'; then
  echo "FAIL: psgraph links CUDA libraries: $(ldd "$psgraph" | grep -E 'cublas|cudnn|cudart')"
  fails=$((fails + 1))
else
  echo "ok   psgraph maps no CUDA library until a GPU is used"
fi
check 0 "train" "$psgraph" --help
check 2 "unknown command 'frobnicate'" "$psgraph" frobnicate
# the one table of models (examples/models.c) in --help and in every message
check 0 "--model mlp|cnn|inception3" "$psgraph" train --help
check 0 "inception3  batch 32, lr 0.045" "$psgraph" train --help
check 2 "unknown option '--colour'" "$psgraph" train --colour red
check 2 "--batch: 'many' is not a number" "$psgraph" train --batch many
check 2 "missing value for '--steps'" "$psgraph" train --steps
check 1 "unknown model 'vgg' (known: mlp, cnn, inception3, wide-deep)" "$psgraph" train --model vgg --steps 1
# a TF_CONFIG without a ps job (MultiWorkerMirroredStrategy's form) is refused, saying why
# (exit 2: a wrong TF_CONFIG, as for server and bench)
check 2 'the cluster has no "ps" job' env TF_CONFIG='{"cluster":{"worker":["127.0.0.1:1","127.0.0.1:2"]},"task":{"type":"worker","index":0}}' "$psgraph" train --model mlp --data synthetic --steps 1
check 2 "the evaluator task runs \`psgraph train\`" env TF_CONFIG='{"cluster":{"ps":["127.0.0.1:1"],"worker":["127.0.0.1:2"]},"task":{"type":"evaluator","index":0}}' "$psgraph" server
# issue 37: a TF_CONFIG that names no task for this process is said so, in one words and one
# exit code (2) by train, server and bench; a malformed one too; '{}' is local training
notask='{"cluster":{"ps":["127.0.0.1:1"],"worker":["127.0.0.1:2"]}}'
check 2 'psgraph server: TF_CONFIG names no task for this process: give it "task": {"type": "ps", "index": I}' env TF_CONFIG="$notask" "$psgraph" server
check 2 'psgraph train: TF_CONFIG names no task for this process: give it "task": {"type": "worker", "index": I}' env TF_CONFIG="$notask" "$psgraph" train --model mlp --data synthetic --steps 1
check 2 'TF_CONFIG names no task for this process' env TF_CONFIG="$notask" "$psgraph" bench inception3 --image-size 75 --classes 4 --batch 1 --steps 1
check 2 'psgraph train: TF_CONFIG: unknown field "clutser"' env TF_CONFIG='{"clutser":{}}' "$psgraph" train --model mlp --data synthetic --steps 1
check 2 'psgraph server: TF_CONFIG: unknown field "clutser"' env TF_CONFIG='{"clutser":{}}' "$psgraph" server
check 0 '"event":"done","model":"mlp"' env TF_CONFIG='{}' "$psgraph" train --model mlp --data synthetic --steps 2 --batch 8
check 0 '"event":"done","model":"mlp"' env TF_CONFIG='{"cluster":{}}' "$psgraph" train --model mlp --data synthetic --steps 2 --batch 8
# a server for a worker task serves it and says it trains nothing
port=$(python3 "$(dirname "$0")/python/free_ports.py" 1)
check 0 "/job:worker/replica:0/task:0 is a worker task: this process only serves it" env TF_CONFIG="{\"cluster\":{\"ps\":[\"127.0.0.1:1\"],\"worker\":[\"127.0.0.1:$port\"]},\"task\":{\"type\":\"worker\",\"index\":0}}" "$psgraph" server --idle-timeout 1
# --lr 0 trains nothing, as TensorFlow allows; a 1-step run still measures its pace
check 0 "psgraph train: model mlp, synthetic, batch 8, momentum lr 0," "$psgraph" train --model mlp --data synthetic --steps 1 --batch 8 --lr 0
line=$("$psgraph" train --model mlp --data synthetic --steps 1 --batch 8 2>&1 | tail -1)
if python3 -c 'import json,sys; d=json.loads(sys.argv[1]); assert d["steps"] == 1 and d["examples_per_sec"] > 0, d' "$line"; then
  echo "ok   a 1-step run: examples_per_sec $(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["examples_per_sec"])' "$line")"
else
  echo "FAIL: a 1-step run's examples_per_sec: $line"
  fails=$((fails + 1))
fi
check 1 "/nowhere/train-images-idx3-ubyte.gz" "$psgraph" train --data-dir /nowhere --steps 1
check 2 "precision 'fp8' is not f32, mixed (bf16) or mixed-f16" "$psgraph" train --precision fp8
check 0 '"precision":"mixed"' "$psgraph" train --model cnn --data synthetic --steps 3 --precision mixed --batch 8 --test-examples 500
check 0 '"params":23851784' "$psgraph" bench inception3 --print-model
check 2 "--workers: 'x' is not a list of counts" "$psgraph" simulate --workers x
check 0 '"simulate":"sync_replicas","workers":8,"backups":1' "$psgraph" simulate --workers 8 --backups 0,1
# the CPU bounds: 3 workers of 10 ms CPU, a ps of 4 ms a worker served: its path 10 + 3 x 4;
# on 2 shared cores the 3 workers' CPU takes 3 x 10 / 2 of them: 15 + 12; on 1 core and 2
# ps tasks, the cores' bound, all of it: 3 x 10 + 3 x 4 (the path 30 + 12 / 2) (each above
# the model's 5 ms compute + 2 + links)
sim_cpu=(simulate --workers 3 --backups 0 --tail none --step-ms 5 --bytes 0 --worker-cpu-ms 10 --ps-cpu-ms 4)
check 0 '"path_step_ms":22.00,"workers_per_step":3.000,"bound":"path"}' "$psgraph" "${sim_cpu[@]}" --ps 1
check 0 '"path_step_ms":27.00,"workers_per_step":3.000,"bound":"path"}' "$psgraph" "${sim_cpu[@]}" --ps 1 --cores 2
check 0 '"step_ms":42.00,' "$psgraph" "${sim_cpu[@]}" --ps 2 --cores 1
check 0 '"bound":"cores"}' "$psgraph" "${sim_cpu[@]}" --ps 2 --cores 1
out=$("$psgraph" train --model mlp --data synthetic --steps 25 --log-every 10 --threads 2 2>&1)
rc=$?
last=$(tail -1 <<<"$out")
if [ $rc = 0 ] && grep -q '^step 20 ' <<<"$out" && python3 -c 'import json,sys; d=json.loads(sys.argv[1]); assert d["event"]=="done" and d["steps"]==25 and d["model"]=="mlp" and d["examples_per_sec"]>0' "$last"; then
  echo "ok   short synthetic run: progress lines and one final JSON line"
else
  echo "FAIL: short run: $out" | head -20
  fails=$((fails + 1))
fi
# checkpoints, inspect, plot (docs/checkpoints.md)
check 2 "--checkpoint-every: 'often'" "$psgraph" train --checkpoint-every often
check 2 "--trace-steps: '5:4'" "$psgraph" train --trace-steps 5:4
check 2 "usage: psgraph inspect" "$psgraph" inspect
check 1 "/nowhere.safetensors: missing" "$psgraph" inspect /nowhere.safetensors
ckdir=$(mktemp -d)
"$psgraph" train --model mlp --data synthetic --steps 30 --log-every 10 --checkpoint-every 15 --logdir "$ckdir" >/dev/null 2>&1
check 0 "global step 30, 13 tensors" "$psgraph" inspect "$ckdir/model.ckpt-30.index.json"
check 0 "model/fc1/weights/Momentum" "$psgraph" inspect "$ckdir"
check 0 "global_step                              i64" "$psgraph" inspect "$ckdir/model.ckpt-15-00000-of-00001.safetensors"
printf 'x' | dd of="$ckdir/model.ckpt-30-00000-of-00001.safetensors" bs=1 seek=2000 conv=notrunc 2>/dev/null
check 1 "model.ckpt-30-00000-of-00001.safetensors: data crc32" "$psgraph" inspect "$ckdir/model.ckpt-30.index.json"
check 0 "global step 15" "$psgraph" inspect "$ckdir"
# issue 20: 88 bytes claiming [2^40, 2^22] f32 in 0 bytes (numel * 4 wrapped to 0: SIGSEGV)
bomb="$ckdir/bomb.safetensors"
python3 -c 'import struct,sys; h=b"{\"t\":{\"dtype\":\"F32\",\"shape\":[1099511627776,4194304],\"data_offsets\":[0,0]}}"; open(sys.argv[1],"wb").write(struct.pack("<Q",len(h))+h)' "$bomb"
check 1 "tensor 't': shape of 4611686018427387904 elements overflows its byte size" "$psgraph" inspect "$bomb"
# issue 37: [2^40, 2^40, 2^40] in 0 bytes: the dims' product itself wraps to 0 (once "1 tensors,
# 0 bytes, checksums ok")
python3 -c 'import struct,sys; h=b"{\"t\":{\"dtype\":\"F32\",\"shape\":[1099511627776,1099511627776,1099511627776],\"data_offsets\":[0,0]}}"; open(sys.argv[1],"wb").write(struct.pack("<Q",len(h))+h)' "$bomb"
check 1 "tensor 't': bad dimension 1" "$psgraph" inspect "$bomb"
rm -f "$bomb"
# issue 37: a safetensors file another writer made carries no checksum: inspect says so, and
# counts what it can (NaN, Inf) after its data bytes were overwritten
py="$ckdir/py.safetensors"
mkpy() { # the data bytes of tensor "b" as given (hex), "a" 2 zeros
  python3 -c 'import json,struct,sys
h=json.dumps({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2,2],"data_offsets":[8,24]},"__metadata__":{"format":"np"}}).encode()
h+=b" "*((8-len(h)%8)%8)
open(sys.argv[1],"wb").write(struct.pack("<Q",len(h))+h+bytes(8)+bytes.fromhex(sys.argv[2]))' "$py" "$1"
}
mkpy 0000803f000000400000404000008040
check 0 "py.safetensors: no global step, 2 tensors, 24 bytes, no checksums (the file carries no data_crc32: sizes and offsets checked, the values cannot be), no NaN or Inf" "$psgraph" inspect "$py"
mkpy ffffffffffffffff0000807f000080ff
check 0 "no checksums (the file carries no data_crc32: sizes and offsets checked, the values cannot be), 2 NaN and 2 Inf in 1 tensor" "$psgraph" inspect "$py"
check 0 "b                                        f32   [2, 2]                       16            -            -            -      2      2" "$psgraph" inspect "$py"
head -c 100 "$py" >"$py.cut" && mv "$py.cut" "$py"
check 1 "py.safetensors" "$psgraph" inspect "$py"
check 0 "global step 15, 13 tensors, 2154584 bytes, checksums ok, no NaN or Inf" "$psgraph" inspect "$ckdir"
check 1 "gnuplot is not on PATH" env PATH=/nonexistent "$psgraph" plot "$ckdir"
if command -v gnuplot >/dev/null; then
  check 0 "metrics.png: loss and examples/sec at 3 steps" "$psgraph" plot "$ckdir"
  [ -s "$ckdir/metrics.png" ] || { echo "FAIL: no metrics.png"; fails=$((fails + 1)); }
else
  echo "skip psgraph plot: gnuplot is not installed"
fi
# --logdir makes its missing parents, as TensorFlow does (docs/checkpoints.md's `--logdir runs/cnn`)
check 0 '"event":"done"' "$psgraph" train --model mlp --data synthetic --steps 2 --batch 8 --logdir "$ckdir/runs/new/mlp"
[ -f "$ckdir/runs/new/mlp/model.ckpt-2.index.json" ] || { echo "FAIL: --logdir with missing parents: no checkpoint"; fails=$((fails + 1)); }
rm -rf "$ckdir"

# strategies: names and options from one table (sync/strategies.c), psgraph compare
check 0 "--staleness S" "$psgraph" train --help
# the table's names, as --help lists them: an added strategy needs no change here
strategies=$("$psgraph" train --help | sed -n 's/^  --sync none|//p')
case "$strategies" in
  sync,*async*) echo "ok   psgraph train --help lists the strategies: $strategies" ;;
  *) echo "FAIL: psgraph train --help lists no strategies: '$strategies'"; fails=$((fails + 1)) ;;
esac
check 2 "unknown strategy 'bsp' (known: $strategies)" "$psgraph" train --sync bsp
check 2 "--local-steps: '0' is not an integer in [1, " "$psgraph" train --local-steps 0
check 2 "unknown option '--colour'" "$psgraph" compare --colour red
# a misspelt strategy or option is refused before anything starts, naming the closest known one
for bad in "sycn|unknown strategy 'sycn' (closest: sync;" \
           "ssp --stalenes 2|ssp: unknown option '--stalenes', closest: --staleness" \
           "sync --staleness 2|sync: unknown option '--staleness' (an option of ssp)" \
           "ssp --staleness|ssp: --staleness needs a value" \
           "local --local-steps 0|local: --local-steps: '0' is not an integer"; do
  nodir=$(mktemp -u /tmp/psg_test_cli_cmp.XXXXXX)
  check 2 "--strategy '${bad%%|*}': ${bad#*|}" "$psgraph" compare --strategy sync --variant "${bad%%|*}" \
    --outdir "$nodir" --data synthetic -- --steps 1
  if [ -e "$nodir" ]; then echo "FAIL: compare --variant '${bad%%|*}' made $nodir"; fails=$((fails + 1)); rm -rf "$nodir"; fi
done
# so are the train options after --: unknown, out of range, another model's
for bad in "--bogus|1|unknown option '--bogus'" "--batch|0|--batch: '0' is not an integer in [1," \
           "--label-smoothing|0.1|--label-smoothing is an option of --model inception3, not of --model mlp" \
           "--label-offset|1|--label-offset is an option of --data imagenet, not of --data synthetic"; do
  IFS='|' read -r flag value want <<<"$bad"
  nodir=$(mktemp -u /tmp/psg_test_cli_cmp.XXXXXX)
  check 2 "after --, the train options of every run: $want" "$psgraph" compare --outdir "$nodir" \
    --data synthetic -- --steps 1 "$flag" "$value"
  if [ -e "$nodir" ]; then echo "FAIL: compare -- $flag $value made $nodir"; fails=$((fails + 1)); rm -rf "$nodir"; fi
done
check 2 "--label-smoothing is an option of --model inception3, not of --model mlp" \
  "$psgraph" train --model mlp --label-smoothing 0.1
# and a data set's options with another data set (they would do nothing)
check 2 "--classes is an option of --model inception3 or --data imagenet, not of --model mlp --data fashion-mnist" \
  "$psgraph" train --model mlp --classes 5
check 2 "--decode-threads is an option of --data imagenet, not of --data synthetic" \
  "$psgraph" train --model cnn --data synthetic --decode-threads 3
cmpdir=$(mktemp -d)
if command -v gnuplot >/dev/null; then
  # two strategies on the same short synthetic run: a JSON line each, both ran, one plot
  # (--variant, --strategy's older name, still taken)
  out=$("$psgraph" compare --data synthetic --workers 2 --strategy sync --variant "ssp --staleness 1" \
        --straggler none --target 0.01 --eval-every 3 --outdir "$cmpdir" -- --steps 6 --batch 16 2>&1)
  n=$(grep -c '"compare":.*"exit":0,.*"time_to_target_sec":[0-9]' <<<"$out")
  if [ "$n" = 2 ] && [ -s "$cmpdir/compare.png" ] && grep -q '"compare":"ssp --staleness 1","sync":"ssp"' <<<"$out"; then
    echo "ok   psgraph compare: 2 strategies, 2 JSON lines, compare.png"
  else
    echo "FAIL: psgraph compare: $out" | head -20
    fails=$((fails + 1))
  fi
  # local SGD with H = 2: the chief's evaluation after its step 3 is its own copy, between
  # averages (left out of the time to the target, counted); the one after step 6 (the last)
  # is the average's: the target's step is 6 (sync's: 3)
  out=$("$psgraph" compare --data synthetic --workers 2 --strategy sync --strategy "local --local-steps 2" \
        --straggler none --target 0.01 --eval-every 3 --outdir "$cmpdir/local" -- --steps 6 --batch 16 2>&1)
  if grep -q '"compare":"sync",.*"steps_to_target":3,.*"evaluations_between_averages":0,' <<<"$out" &&
     grep -q '"compare":"local --local-steps 2",.*"steps_to_target":6,.*"evaluations_between_averages":1,' <<<"$out"; then
    echo "ok   psgraph compare: local SGD's evaluations between averages left out of the target"
  else
    echo "FAIL: psgraph compare, local SGD's rounds: $out" | head -20
    fails=$((fails + 1))
  fi
  # repeats: the strategies interleaved (sync, ssp, sync, ssp), each run its seed and the
  # machine's load, then a line per strategy over its repeats
  out=$("$psgraph" compare --data synthetic --workers 2 --strategy sync --strategy "ssp --staleness 1" \
        --seeds 3,4 --straggler none --target 0.01 --eval-every 3 --outdir "$cmpdir/rep" -- --steps 6 --batch 16 2>/dev/null)
  order=$(python3 -c '
import json, sys
runs, sums = [], {}
for line in sys.stdin:
    d = json.loads(line)
    if d.get("summary"):
        sums[d["compare"]] = d
    else:
        assert d["exit"] == 0 and d["load"] >= 0 and d["others_cpu_sec"] >= 0, d
        runs.append("%s/%d" % (d["sync"], d["seed"]))
for name, d in sums.items():
    t = d["time_to_target_sec"]
    assert d["runs"] == 2 and t["n"] == 2 and t["min"] <= t["mean"] <= t["max"], d
    assert t["ci95"][0] <= t["mean"] <= t["ci95"][1] and d["final_accuracy"]["n"] == 2, d
print(" ".join(runs), len(sums))' <<<"$out" 2>&1)
  # the CSV beside the PNG: every evaluation and every worker step of the 4 runs (2 workers x
  # 6 steps each at least), with the loss and the bytes of each step
  csvcheck=$(python3 -c '
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
runs = {(r["strategy"], r["repeat"]) for r in rows}
steps = [r for r in rows if r["event"] == "step"]
evals = [r for r in rows if r["event"] == "eval"]
assert len(runs) == 4 and len(steps) >= 4 * 12 and len(evals) >= 4, (runs, len(steps), len(evals))
assert all(float(r["loss"]) > 0 and int(r["push_bytes"]) >= 0 for r in steps), steps[:2]
assert all(0 <= float(r["test_accuracy"]) <= 1 for r in evals)
print("ok")' "$cmpdir/rep/compare.csv" 2>&1)
  if [ "$order" = "sync/3 ssp/3 sync/4 ssp/4 2" ] && [ "$csvcheck" = ok ] && [ -s "$cmpdir/rep/compare.png" ]; then
    echo "ok   psgraph compare --seeds 3,4: runs interleaved, a summary line per strategy, compare.csv, compare.png"
  else
    echo "FAIL: psgraph compare --seeds 3,4: csv: $csvcheck" | head -5
    echo "FAIL: psgraph compare --seeds 3,4: $order; $out" | head -20
    fails=$((fails + 1))
  fi
else
  echo "skip psgraph compare: gnuplot is not installed"
fi
check 2 "--repeats 3 but --seeds '1,2' gives 2 seeds" "$psgraph" compare --repeats 3 --seeds 1,2
rm -rf "$cmpdir"

# psgraph data ctr: its JSON line parses even when the held-out rows are all of one label
# (20 rows, seed 3: 2 held out, no click; the planted AUC is null, not NaN)
ctrdir=$(mktemp -d /tmp/psg_test_cli_ctr.XXXXXX)
line=$("$psgraph" data ctr --rows 20 --seed 3 --out "$ctrdir/c.tsv" 2>&1 | tail -1)
if python3 -c 'import json, sys; d = json.loads(sys.argv[1]); assert d["rows"] == 20 and d["planted_auc"] is None' "$line"; then
  echo "ok   psgraph data ctr --rows 20: valid JSON, planted_auc null"
else
  echo "FAIL: psgraph data ctr --rows 20: $line"
  fails=$((fails + 1))
fi
rm -rf "$ctrdir"

[ $fails = 0 ]
