#!/usr/bin/env bash
# psgraph serve beside ONNX Runtime (docs/serving.md), JSON lines:
#  - "serve_cnn": `psgraph serve` of a trained cnn under wrk (8 connections, keep-alive, one
#    28 x 28 image a request, --max-batch 8) against ONNX Runtime's own in-process
#    InferenceSession.run of the exported model at batch 8: examples/sec, p50/p99 latency,
#    the ratio; PSG_BENCH_ROUNDS rounds (default 3) alternating the two, best and spread;
#  - "serve_cnn_nospin": the same with `--spin-us 0`: the compute threads sleep at once
#    when they have no share of a kernel left, instead of polling 50 us for the next one
#    during a batch (serve's default, as ONNX Runtime's intra-op threads spin by default);
#  - "serve_cnn_inprocess" (and "_spin": polling PSG_BENCH_SPIN_US, default 50, as serve does
#    by default): the same model's plan alone in one process
#    (bench_servable: psg_servable_run at batch 8, no HTTP, no JSON, no batcher) against the
#    same `run`, alternating, with each side's CPU ms a batch: what the kernels owe of the
#    serve's gap; ONNX Runtime is given the same cores (its default intra-op pool: one
#    thread a physical core, 2 here);
#  - "serve_inception3": the same for Inception-v3 at 299 x 299 (a checkpoint of one
#    training step), at batch 1 (1 connection, --max-batch 1) and batch 32 (8 connections
#    of 4 images a request, --max-batch 32: 32 connections of one would parse 32 bodies of
#    2.7 MB on 2 cores between batches), PSG_BENCH_INCEPTION_SECONDS of load a round at
#    batch 1 (default 30) and PSG_BENCH_INCEPTION32_SECONDS at 32 (default 60), and "serve_inception3_inprocess" the plan alone at each batch beside the
#    same `run`; "serve_inception3_nospin" batch 1 with --spin-us 0; "serve_inception3_lanes2" batch 32 served with --lanes 2 (its rows over two
#    one-thread plans; PSG_BENCH_LANES32=N another count, 0 none); PSG_BENCH_INCEPTION=0
#    skips them (minutes on 2 cores),
#    PSG_BENCH_INCEPTION_LOGDIR=DIR serves DIR's checkpoint instead of training one step;
#    PSG_BENCH_CNN=0 skips the cnn's lines;
#  - "hot_swap": training goes on in the served directory (new checkpoints every 10 steps)
#    under the cnn's wrk load: the versions loaded and the failed requests (non-2xx and
#    socket errors), which must be 0;
#  - "predict_accuracy": `psgraph predict` on Fashion-MNIST's 10,000 test images from the
#    trained checkpoint against the test accuracy the training run reported.
# Needs wrk (tools/install-deps.sh) and onnxruntime in build/onnx-venv (made here from PyPI).
set -uo pipefail
cd "$(dirname "$0")/.."
bash tools/build.sh build || exit 1
psg=$PWD/build/cli/psgraph
check=$PWD/tests/serving_check.py
rounds=${PSG_BENCH_ROUNDS:-3}
secs=${PSG_BENCH_SECONDS:-10}
threads=${PSG_BENCH_THREADS:-2}
spin=${PSG_BENCH_SPIN_US:-50}
fm=/usr/share/datasets/fashion-mnist
tmp=$(mktemp -d /tmp/psg_bench_serve.XXXXXX)
pids=()
trap 'for p in "${pids[@]}"; do kill $p 2>/dev/null; done; wait 2>/dev/null; rm -rf "$tmp"' EXIT
venv=build/onnx-venv
if ! "$venv/bin/python" -c "import onnxruntime, onnx, numpy" 2>/dev/null; then
  { python3 -m venv "$venv" && "$venv/bin/pip" install -q onnx onnxruntime numpy; } >&2 || exit 1
fi
command -v wrk >/dev/null || { echo "bench/serve.sh: wrk is missing (bash tools/install-deps.sh)" >&2; exit 1; }
cat >"$tmp/post.lua" <<'LUA'
wrk.method = "POST"
wrk.body = io.open(os.getenv("PSG_BODY")):read("*a")
wrk.headers["Content-Type"] = "application/json"
done = function(s, latency, requests)
  local e = s.errors
  io.write(string.format('{"requests":%d,"socket_errors":%d,"non_2xx":%d,"duration_s":%.3f,"p50_ms":%.3f,"p99_ms":%.3f}\n',
    s.requests, e.connect + e.read + e.write + e.timeout, e.status, s.duration / 1e6,
    latency:percentile(50) / 1000, latency:percentile(99) / 1000))
end
LUA

serve() { # serve OUT ARGS...: starts psgraph serve, waits for its URL (sets url, pid)
  local out=$1
  shift
  $psg serve --port 0 --threads "$threads" "$@" >"$out" 2>"$out.err" &
  pid=$!
  pids+=($pid)
  url=""
  for _ in $(seq 600); do grep -q '"event":"serving"' "$out" && break; kill -0 $pid 2>/dev/null || break; sleep 0.1; done
  url=$(grep -o '"url":"[^"]*"' "$out" | cut -d'"' -f4)
  [ -n "$url" ] || { echo "bench/serve.sh: psgraph serve did not start: $(cat "$out.err")" >&2; exit 1; }
}
wrk_run() { # wrk_run CONNECTIONS SECONDS BODY URL: wrk's JSON line
  PSG_BODY=$3 wrk -t "$(($1 < 2 ? 1 : 2))" -c "$1" -d "${2}s" --timeout 120s -s "$tmp/post.lua" "$4" | grep '^{'
}
body() { # body FILE N SIZE CHANNELS: N random instances
  python3 -c "
import json, random, sys
random.seed(1)
n, s, c = int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
json.dump({'instances': [[[[round(random.random(), 4)] * c for _ in range(s)] for _ in range(s)] for _ in range(n)]},
          open(sys.argv[1], 'w'))" "$@"
}

# compare NAME CONNECTIONS MAXBATCH MODELDIR ONNX BODY [SERVE ARGS...]: rounds of wrk against
# `psgraph serve` and of ONNX Runtime at batch MAXBATCH, alternating; PER (default 1) is the
# number of instances in BODY
compare() {
  local name=$1 conns=$2 batch=$3 dir=$4 onnx=$5 bodyf=$6
  shift 6
  : >"$tmp/$name.ours"
  : >"$tmp/$name.peer"
  serve "$tmp/$name.serve" --model-dir "$dir" --max-batch "$batch" --batch-timeout-us 2000 "$@"
  curl -s -o /dev/null -X POST --data-binary @"$bodyf" "$url:predict" # warm-up: one request, none left queued
  for r in $(seq "$rounds"); do
    wrk_run "$conns" "$secs" "$bodyf" "$url:predict" >>"$tmp/$name.ours"
    "$venv/bin/python" "$check" ortbench "$onnx" "$batch" "$secs" 1 >>"$tmp/$name.peer"
  done
  kill $pid
  wait $pid 2>/dev/null
  NAME=$name CONNS=$conns BATCH=$batch T=$threads PER=${PER:-1} python3 - "$tmp/$name.ours" "$tmp/$name.peer" <<'PY'
import json, os, sys
ours = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
peer = [json.loads(l) for l in open(sys.argv[2]) if l.strip()]
per = int(os.environ["PER"])  # examples a request
rate = [o["requests"] * per / o["duration_s"] for o in ours]
prate = [p["examples_per_sec"] for p in peer]
b = max(range(len(rate)), key=lambda i: rate[i])
pb = max(range(len(prate)), key=lambda i: prate[i])
print(json.dumps({"bench": os.environ["NAME"], "connections": int(os.environ["CONNS"]), "batch": int(os.environ["BATCH"]),
                  "examples_per_request": per, "load": open("/proc/loadavg").read().split()[0],
                  "threads": int(os.environ["T"]), "rounds": len(rate),
                  "psgraph_examples_per_sec": round(rate[b], 2), "psgraph_spread": [round(min(rate), 2), round(max(rate), 2)],
                  "psgraph_p50_ms": ours[b]["p50_ms"], "psgraph_p99_ms": ours[b]["p99_ms"],
                  "failed": sum(o["socket_errors"] + o["non_2xx"] for o in ours),
                  "onnxruntime_examples_per_sec": round(prate[pb], 2), "onnxruntime_spread": [round(min(prate), 2), round(max(prate), 2)],
                  "onnxruntime_p99_ms": round(peer[pb]["p99_ms"], 3), "onnxruntime": peer[pb]["version"],
                  "ratio": round(rate[b] / prate[pb], 3)}))
PY
}

# inprocess NAME MODELDIR ONNX BATCH: rounds of the plan alone in this process (sleeping, and
# polling as served: NAME_spin) and of ONNX Runtime's `run` at BATCH, alternating
inprocess() {
  local name=$1 dir=$2 onnx=$3 batch=$4
  : >"$tmp/$name.ours"
  : >"$tmp/$name.spin"
  : >"$tmp/$name.peer"
  for r in $(seq "$rounds"); do
    build/bench/bench_servable "$dir" "$batch" "$secs" "$threads" >>"$tmp/$name.ours" || exit 1
    build/bench/bench_servable "$dir" "$batch" "$secs" "$threads" 1 "$spin" >>"$tmp/$name.spin" || exit 1
    "$venv/bin/python" "$check" ortbench "$onnx" "$batch" "$secs" 1 >>"$tmp/$name.peer"
  done
  for v in ours spin; do
    NAME=$name$([ $v = spin ] && echo _spin) BATCH=$batch python3 - "$tmp/$name.$v" "$tmp/$name.peer" <<'PY'
import json, os, sys
ours = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
peer = [json.loads(l) for l in open(sys.argv[2]) if l.strip()]
rate, prate = [o["examples_per_sec"] for o in ours], [p["examples_per_sec"] for p in peer]
print(json.dumps({"bench": os.environ["NAME"], "batch": int(os.environ["BATCH"]), "threads": ours[0]["threads"],
                  "spin_us": ours[0]["spin_us"], "rounds": len(rate), "load": open("/proc/loadavg").read().split()[0],
                  "psgraph_examples_per_sec": max(rate), "psgraph_spread": [min(rate), max(rate)],
                  "psgraph_cpu_ms_per_batch": min(o["cpu_ms_per_run"] for o in ours),
                  "onnxruntime_examples_per_sec": round(max(prate), 2),
                  "onnxruntime_spread": [round(min(prate), 2), round(max(prate), 2)],
                  "onnxruntime_cpu_ms_per_batch": round(min(p["cpu_ms_per_run"] for p in peer), 3),
                  "ratio": round(max(rate) / max(prate), 3)}))
PY
  done
}

if [ "${PSG_BENCH_CNN:-1}" = 1 ]; then
# ---- the cnn: trained, exported, served ----
$psg train --model cnn --steps "${PSG_BENCH_CNN_STEPS:-300}" --threads "$threads" --logdir "$tmp/cnn" \
  --log-every 1000 >"$tmp/cnn.log" 2>&1 || { tail -3 "$tmp/cnn.log" >&2; exit 1; }
$psg export --logdir "$tmp/cnn" --out "$tmp/cnn.onnx" >/dev/null || exit 1
body "$tmp/one28.json" 1 28 1
compare serve_cnn 8 8 "$tmp/cnn" "$tmp/cnn.onnx" "$tmp/one28.json"
compare serve_cnn_nospin 8 8 "$tmp/cnn" "$tmp/cnn.onnx" "$tmp/one28.json" --spin-us 0
# in process: the plan alone with its threads sleeping at once, with them polling (--spin-us,
# as served by default), and ONNX Runtime, alternating
inprocess serve_cnn_inprocess "$tmp/cnn" "$tmp/cnn.onnx" 8

# ---- hot swap under the cnn's load ----
mkdir -p "$tmp/swap"
cp "$tmp"/cnn/model.ckpt-* "$tmp/swap/"
serve "$tmp/swap.serve" --model-dir "$tmp/swap" --max-batch 8 --poll-secs 0.2
PSG_BODY="$tmp/one28.json" wrk -t 2 -c 8 -d "$((secs + 20))s" --timeout 120s -s "$tmp/post.lua" "$url:predict" |
  grep '^{' >"$tmp/swap.wrk" &
wrkpid=$!
sleep 2
$psg train --model cnn --steps "$((${PSG_BENCH_CNN_STEPS:-300} + 30))" --checkpoint-every 10 --threads 1 \
  --logdir "$tmp/swap" >"$tmp/swap.log" 2>&1
wait $wrkpid
loaded=$(grep -c 'loaded' "$tmp/swap.serve.err")
kill $pid
python3 - "$tmp/swap.wrk" "$loaded" <<'PY'
import json, sys
w = json.loads(open(sys.argv[1]).read())
print(json.dumps({"bench": "hot_swap", "model": "cnn", "connections": 8, "requests": w["requests"],
                  "versions_loaded": int(sys.argv[2]), "failed": w["socket_errors"] + w["non_2xx"],
                  "p99_ms": w["p99_ms"]}))
PY

# ---- predict on the test set: training's accuracy ----
want=$(grep '"event":"eval"' "$tmp/cnn/metrics.jsonl" | tail -1 | grep -o '"test_accuracy":[0-9.]*' | cut -d: -f2)
t0=$(date +%s.%N)
$psg predict --model-dir "$tmp/cnn" --threads "$threads" --labels $fm/t10k-labels-idx1-ubyte.gz \
  $fm/t10k-images-idx3-ubyte.gz | tail -1 >"$tmp/acc.json"
t1=$(date +%s.%N)
python3 - "$tmp/acc.json" "$want" "$t0" "$t1" <<'PY'
import json, sys
a = json.load(open(sys.argv[1]))
want = float(sys.argv[2])
print(json.dumps({"bench": "predict_accuracy", "model": a["model"], "examples": a["examples"],
                  "predict_accuracy": a["accuracy"], "training_accuracy": want,
                  "exact": abs(a["accuracy"] - want) < 1e-9, "seconds": round(float(sys.argv[4]) - float(sys.argv[3]), 2)}))
PY

fi

# ---- Inception-v3 at 299 ----
if [ "${PSG_BENCH_INCEPTION:-1}" = 1 ]; then
  inc=${PSG_BENCH_INCEPTION_LOGDIR:-$tmp/inc}
  if [ -z "${PSG_BENCH_INCEPTION_LOGDIR:-}" ]; then
    $psg train --model inception3 --batch 1 --steps 1 --test-examples 1 --threads "$threads" --logdir "$inc" \
      >"$tmp/inc.log" 2>&1 || { tail -3 "$tmp/inc.log" >&2; exit 1; }
  fi
  $psg export --logdir "$inc" --out "$tmp/inc.onnx" >/dev/null || exit 1
  body "$tmp/one299.json" 1 299 3
  body "$tmp/four299.json" 4 299 3
  secs=${PSG_BENCH_INCEPTION_SECONDS:-30}
  if [ "${PSG_BENCH_INCEPTION1:-1}" = 1 ]; then
    compare serve_inception3 1 1 "$inc" "$tmp/inc.onnx" "$tmp/one299.json"
    compare serve_inception3_nospin 1 1 "$inc" "$tmp/inc.onnx" "$tmp/one299.json" --spin-us 0
    inprocess serve_inception3_inprocess "$inc" "$tmp/inc.onnx" 1
  fi
  # a batch of 32 takes seconds here: longer rounds, and a batch timeout that outlasts the
  # parsing of 8 bodies of 9 MB (a shorter one ran batches of 4 under load)
  secs=${PSG_BENCH_INCEPTION32_SECONDS:-60}
  PER=4 compare serve_inception3 8 32 "$inc" "$tmp/inc.onnx" "$tmp/four299.json" --batch-timeout-us 5000000
  # the same batch cut over one-thread plans side by side (--lanes): no barrier between the
  # threads inside a kernel (PSG_BENCH_LANES32=0 leaves it out)
  lanes=${PSG_BENCH_LANES32:-2}
  if [ "$lanes" -gt 1 ]; then
    PER=4 compare serve_inception3_lanes$lanes 8 32 "$inc" "$tmp/inc.onnx" "$tmp/four299.json" \
      --batch-timeout-us 5000000 --lanes "$lanes"
  fi
  inprocess serve_inception3_inprocess "$inc" "$tmp/inc.onnx" 32
fi
