#!/usr/bin/env bash
# Trained models out of the cluster, checked by real clients (docs/serving.md):
# 1. `psgraph export` of every model of the table (mlp trained in a 2 ps + 1 worker cluster
#    with column shards, cnn, wide-deep with a row-sharded table, Inception-v3 at 75 x 75
#    with its moving averages): onnx.checker.check_model passes and ONNX Runtime's logits
#    equal `psgraph predict --output logits` on the same rows within 1e-5 of each row's
#    largest logit (onnx, onnxruntime, numpy from PyPI in a venv under the build folder;
#    skipped where PyPI cannot be reached);
# 2. `psgraph predict` on Fashion-MNIST's 10,000 test images gives the test accuracy the
#    training run reported, exactly;
# 3. `psgraph serve`: status, metadata, :predict in both formats and by version, the errors
#    (400 naming the field, 404, 405, 413) as {"error": ...}; a training run writing new
#    checkpoints into the served directory while 4 keep-alive clients send requests: the
#    new versions are served and no request fails; HTTPS with a self-signed key; plain HTTP
#    off loopback refused; `serve --k8s` objects pass kubernetes-validate --strict.
set -u
psgraph=$(realpath "$1")
builddir=${2:-$(dirname "$psgraph")/..}
root=$(cd "$(dirname "$0")/.." && pwd)
check="$root/tests/serving_check.py"
fails=0
ok() { echo "ok   $*"; }
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
tmp=$(mktemp -d /tmp/psg_test_serving.XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
  wait 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT
fm=/usr/share/datasets/fashion-mnist
P() { "$psgraph" "$@"; }

# ---- the models, trained briefly ----
P train --model mlp --epochs 1 --logdir "$tmp/mlp" --log-every 1000 >"$tmp/mlp.log" 2>&1 || fail "train mlp: $(tail -3 "$tmp/mlp.log")"
P launch --ps 2 --workers 1 -- "$psgraph" train --model mlp --steps 20 --shard-bytes 400000 --logdir "$tmp/mlp2" \
  >"$tmp/mlp2.log" 2>&1 || fail "train mlp in a cluster: $(tail -3 "$tmp/mlp2.log")"
P train --model cnn --steps 20 --logdir "$tmp/cnn" >"$tmp/cnn.log" 2>&1 || fail "train cnn: $(tail -3 "$tmp/cnn.log")"
P data ctr --rows 4000 --out "$tmp/ctr.tsv" >/dev/null
P train --model wide-deep --data criteo --data-dir "$tmp/ctr.tsv" --buckets 300 --table-shards 2 --steps 10 \
  --logdir "$tmp/wd" >"$tmp/wd.log" 2>&1 || fail "train wide-deep: $(tail -3 "$tmp/wd.log")"
P train --model inception3 --image-size 75 --classes 10 --batch 2 --steps 2 --test-examples 4 --logdir "$tmp/inc" \
  >"$tmp/inc.log" 2>&1 || fail "train inception3: $(tail -3 "$tmp/inc.log")"
shards=$(ls "$tmp"/mlp2/model.ckpt-*-of-00002.safetensors 2>/dev/null | wc -l)
parts=$(grep -o 'model/fc1/weights/part_[0-9]*' "$tmp"/mlp2/model.ckpt-*.index.json 2>/dev/null | sort -u | wc -l)
[ "$shards" -ge 2 ] && [ "$parts" -ge 2 ] && ok "the cluster's checkpoint: $shards shard files, fc1 in $parts column shards" ||
  fail "the cluster's mlp checkpoint has $shards shard files and $parts column shards of fc1"

# ---- 1. export, and ONNX Runtime against psgraph ----
venv=$builddir/onnx-venv
# the lock: tests/python/test_export_onnx.py may be making the same venv
exec 9>"$builddir/onnx-venv.lock"
flock 9
if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c "import onnx, onnxruntime, numpy" 2>/dev/null; then
  { python3 -m venv "$venv" && timeout 600 "$venv/bin/pip" install -q onnx onnxruntime numpy; } >"$tmp/pip.log" 2>&1
fi
flock -u 9
have_ort=0
"$venv/bin/python" -c "import onnx, onnxruntime, numpy" 2>/dev/null && have_ort=1
[ $have_ort = 1 ] || echo "skip ONNX Runtime: cannot install onnx, onnxruntime from PyPI into $venv: $(tail -2 "$tmp/pip.log")"
for m in mlp2 cnn wd inc; do
  size=""
  [ $m = inc ] && size="--image-size 75"
  if ! P export --logdir "$tmp/$m" --format onnx --out "$tmp/$m.onnx" $size >"$tmp/$m.export" 2>&1; then
    fail "export $m: $(cat "$tmp/$m.export")"
    continue
  fi
  [ $have_ort = 1 ] || continue
  "$venv/bin/python" "$check" rows "$tmp/$m.onnx" 6 7 "$tmp/$m.csv" &&
    P predict --model-dir "$tmp/$m" $size --output logits --batch 4 "$tmp/$m.csv" >"$tmp/$m.pred" 2>"$tmp/$m.err" ||
    { fail "predict $m: $(cat "$tmp/$m.err")"; continue; }
  if out=$("$venv/bin/python" "$check" ort "$tmp/$m.onnx" "$tmp/$m.csv" "$tmp/$m.pred" 2>&1); then
    ok "export $(grep -o '"model":"[^"]*"' "$tmp/$m.export")$(grep -o ',"ema":true' "$tmp/$m.export"): $out"
  else
    fail "ONNX Runtime against psgraph, $m: $out"
  fi
done
grep -q '"ema":true' "$tmp/inc.export" && ok "inception3 exports its moving averages of the weights" ||
  fail "inception3's export did not read the moving averages: $(cat "$tmp/inc.export")"

# an op without an ONNX form is refused naming the node (tests/test_serving.c); a model that
# is not one is refused naming what was looked for
mkdir -p "$tmp/empty" && cp "$tmp"/mlp2/model.ckpt-* "$tmp/empty/" 2>/dev/null
if ! P export --logdir "$tmp/empty" --model cnn --out "$tmp/x.onnx" 2>"$tmp/x.err" && grep -q "model/conv1/weights" "$tmp/x.err"; then
  ok "export of an mlp checkpoint as a cnn refused: $(head -c 160 "$tmp/x.err")"
else
  fail "export --model cnn of an mlp: $(cat "$tmp/x.err")"
fi

# ---- 2. predict on the test set: training's accuracy, exactly ----
want=$(grep '"event":"eval"' "$tmp/mlp/metrics.jsonl" | tail -1 | grep -o '"test_accuracy":[0-9.]*' | cut -d: -f2)
P predict --model-dir "$tmp/mlp" --labels $fm/t10k-labels-idx1-ubyte.gz $fm/t10k-images-idx3-ubyte.gz >"$tmp/pred.jsonl" 2>"$tmp/pred.err"
got=$(tail -1 "$tmp/pred.jsonl" | grep -o '"accuracy":[0-9.]*' | cut -d: -f2)
lines=$(grep -c '"classes"' "$tmp/pred.jsonl")
if [ -n "$want" ] && [ "$lines" = 10000 ] && python3 -c "import sys; sys.exit(abs($want - ${got:-9}) > 1e-9)"; then
  ok "predict on 10,000 test images: accuracy $got, training reported $want"
else
  fail "predict accuracy '$got' ($lines lines) against training's '$want': $(cat "$tmp/pred.err")"
fi

# an image file: a PNG written with zlib alone (an RGB 40 x 40 square), read as the 28 x 28 x 1 input
python3 - "$tmp/x.png" <<'PY'
import struct, sys, zlib
w = h = 40
raw = b"".join(b"\0" + b"".join(bytes([x * 6, y * 6, 128]) for x in range(w)) for y in range(h))
chunk = lambda t, d: struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d))
open(sys.argv[1], "wb").write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)) +
                              chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))
PY
if P predict --model-dir "$tmp/cnn" --top-k 3 "$tmp/x.png" >"$tmp/png.out" 2>&1 && grep -q '"classes":\[[0-9],[0-9],[0-9]\]' "$tmp/png.out"; then
  ok "predict on a PNG: $(cat "$tmp/png.out")"
else
  fail "predict on a PNG: $(cat "$tmp/png.out")"
fi

# wide-deep's ids out of the table's rows: refused naming the input
printf '0,0,0,0,0,0,0,0,0,0,0,0,0%s\n' "$(printf ',99999%.0s' $(seq 26))" >"$tmp/wd_bad.csv"
if ! P predict --model-dir "$tmp/wd" --output logits "$tmp/wd_bad.csv" >/dev/null 2>"$tmp/wd_bad.err" &&
  grep -q "input 'ids': its value 0 is 99999, no row of the table" "$tmp/wd_bad.err"; then
  ok "an id out of the table refused: $(cat "$tmp/wd_bad.err")"
else
  fail "an id out of the table: $(cat "$tmp/wd_bad.err")"
fi

# ---- 3. serve ----
mkdir -p "$tmp/served"
cp "$tmp"/mlp2/model.ckpt-* "$tmp/served/"
start_server() { # start_server OUT ARGS...: waits for its "serving" line; sets url and pid
  local out=$1
  shift
  "$psgraph" serve "$@" >"$out" 2>"$out.err" & # not through P: $! must be psgraph itself
  pid=$!
  pids+=($pid)
  for _ in $(seq 100); do grep -q '"event":"serving"' "$out" && break; kill -0 $pid 2>/dev/null || break; sleep 0.1; done
  url=$(grep -o '"url":"[^"]*"' "$out" | cut -d'"' -f4)
}
start_server "$tmp/serve.out" --model-dir "$tmp/served" --port 0 --poll-secs 0.2 --max-batch 16 --max-body 400000
if [ -z "$url" ]; then
  fail "psgraph serve did not start: $(cat "$tmp/serve.out.err")"
else
  req() { curl -s -o "$tmp/body" -w '%{http_code}' "$@"; }
  python3 -c "
import json, random
random.seed(1)
img = lambda: [[[random.random()] for _ in range(28)] for _ in range(28)]
json.dump({'instances': [img(), img()]}, open('$tmp/rows.json', 'w'))
json.dump({'inputs': [img()]}, open('$tmp/cols.json', 'w'))
json.dump({'instances': [[[[1.0]] * 28] * 27]}, open('$tmp/bad.json', 'w'))"
  code=$(req "$url")
  [ "$code" = 200 ] && grep -q '"state":"AVAILABLE"' "$tmp/body" && ok "GET status: $(cat "$tmp/body")" || fail "status $code $(cat "$tmp/body")"
  code=$(req "$url/metadata")
  python3 -c "
import json, sys
m = json.load(open('$tmp/body'))['metadata']['signature_def']['signature_def']['serving_default']
assert m['inputs']['images']['dtype'] == 'DT_FLOAT', m
assert [d['size'] for d in m['inputs']['images']['tensor_shape']['dim']] == ['-1', '28', '28', '1'], m
assert sorted(m['outputs']) == ['logits', 'probabilities'], m" 2>"$tmp/meta.err" && [ "$code" = 200 ] &&
    ok "GET metadata: images DT_FLOAT [-1, 28, 28, 1] -> logits, probabilities" || fail "metadata $code: $(cat "$tmp/meta.err")"
  code=$(req -X POST --data-binary @"$tmp/rows.json" "$url:predict")
  python3 -c "
import json
p = json.load(open('$tmp/body'))['predictions']
assert len(p) == 2 and len(p[0]['logits']) == 10 and abs(sum(p[1]['probabilities']) - 1) < 1e-5, p" 2>/dev/null &&
    [ "$code" = 200 ] && ok "POST :predict, row format: 2 predictions of 10 logits" || fail "row predict $code $(head -c 300 "$tmp/body")"
  version=$(grep -o '"version":[0-9]*' "$tmp/serve.out" | cut -d: -f2)
  code=$(req -X POST --data-binary @"$tmp/cols.json" "$url/versions/$version:predict")
  [ "$code" = 200 ] && grep -q '^{"outputs":{"logits":\[\[' "$tmp/body" && ok "POST versions/$version:predict, columnar: outputs" ||
    fail "columnar predict $code $(head -c 300 "$tmp/body")"
  code=$(req -X POST --data-binary @"$tmp/bad.json" "$url:predict")
  [ "$code" = 400 ] && grep -q "'images' must be f32\[?, 28, 28, 1\]: an array of 27 where 28 belong" "$tmp/body" &&
    ok "a wrong shape: 400 $(cat "$tmp/body")" || fail "wrong shape $code $(cat "$tmp/body")"
  code=$(req -X POST -d '{"instances": [1' "$url:predict")
  [ "$code" = 400 ] && grep -q '"error":"the body is not JSON' "$tmp/body" && ok "broken JSON: 400" || fail "broken JSON $code $(cat "$tmp/body")"
  code=$(req -X POST --data-binary @"$tmp/rows.json" "${url%/*}/other:predict")
  [ "$code" = 404 ] && grep -q 'Servable not found' "$tmp/body" && ok "another model: 404" || fail "other model $code $(cat "$tmp/body")"
  code=$(req -X POST --data-binary @"$tmp/rows.json" "$url/versions/99999:predict")
  [ "$code" = 404 ] && ok "an unknown version: 404 $(cat "$tmp/body")" || fail "unknown version $code $(cat "$tmp/body")"
  code=$(req "$url:predict")
  [ "$code" = 405 ] && ok "GET :predict: 405" || fail "GET :predict $code"
  head -c 500000 /dev/zero | tr '\0' ' ' >"$tmp/big.json"
  code=$(req -X POST --data-binary @"$tmp/big.json" "$url:predict")
  [ "$code" = 413 ] && grep -q -- '--max-body' "$tmp/body" && ok "a body over --max-body: 413" || fail "big body $code $(cat "$tmp/body")"
  kill -0 "$pid" 2>/dev/null && ok "the server is up after every bad request" || fail "the server died"

  # hot swap under load: training goes on in the served directory
  if true; then
    python3 "$check" load "$url:predict" "$tmp/rows.json" 12 4 >"$tmp/load.json" 2>&1 &
    loadpid=$!
    sleep 1
    P launch --ps 2 --workers 1 -- "$psgraph" train --model mlp --steps 40 --shard-bytes 400000 --checkpoint-every 5 \
      --logdir "$tmp/served" >"$tmp/resume.log" 2>&1 || fail "training on in the served directory: $(tail -3 "$tmp/resume.log")"
    wait $loadpid
    if python3 -c "
import json, sys
s = json.load(open('$tmp/load.json'))
assert s['requests'] > 20 and s['failed'] == 0 and len(s['versions']) >= 2, s" 2>"$tmp/load.err"; then
      ok "hot swap under load: $(cat "$tmp/load.json"); $(grep -c 'loaded' "$tmp/serve.out.err") versions loaded"
    else
      fail "hot swap: $(cat "$tmp/load.json") $(cat "$tmp/load.err") $(tail -3 "$tmp/serve.out.err")"
    fi
  fi
  kill "$pid"
  wait "$pid" 2>/dev/null
fi

# HTTPS with the library's TLS, and no plain HTTP off loopback
if openssl req -x509 -newkey rsa:2048 -nodes -keyout "$tmp/key.pem" -out "$tmp/cert.pem" -days 1 -subj /CN=127.0.0.1 \
  >/dev/null 2>&1; then
  start_server "$tmp/tls.out" --model-dir "$tmp/cnn" --port 0 --tls-key "$tmp/key.pem" --tls-cert "$tmp/cert.pem"
  if [[ "$url" == https://* ]] && curl -s --cacert "$tmp/cert.pem" "$url" | grep -q AVAILABLE && ! curl -s "${url/https/http}" >/dev/null 2>&1; then
    ok "HTTPS with --tls-key/--tls-cert: $url answers, plain HTTP does not"
  else
    fail "HTTPS: '$url' $(cat "$tmp/tls.out.err")"
  fi
  kill "$pid"
fi
if ! P serve --model-dir "$tmp/cnn" --listen 0.0.0.0 --port 0 >/dev/null 2>"$tmp/open.err" && grep -q "refusing plain HTTP" "$tmp/open.err"; then
  ok "plain HTTP off loopback refused: $(cat "$tmp/open.err")"
else
  fail "--listen 0.0.0.0 without TLS: $(cat "$tmp/open.err")"
fi

# ---- Kubernetes objects ----
P serve --k8s --model-dir /models/mlp --name mlp --replicas 2 --model-volume models --max-batch 8 --image reg.example/psgraph:1 \
  --out "$tmp" >/dev/null 2>"$tmp/k8s.err" || fail "serve --k8s: $(cat "$tmp/k8s.err")"
kvenv=$builddir/k8s-venv
if [ ! -x "$kvenv/bin/kubernetes-validate" ]; then
  { python3 -m venv "$kvenv" && timeout 180 "$kvenv/bin/pip" install -q kubernetes-validate; } >"$tmp/kpip.log" 2>&1
fi
if [ -x "$kvenv/bin/kubernetes-validate" ]; then
  sed 's/replicas: 2/replicas: two/' "$tmp/mlp.yaml" >"$tmp/broken.yaml"
  if out=$("$kvenv/bin/kubernetes-validate" --strict "$tmp/mlp.yaml" 2>&1) &&
    ! "$kvenv/bin/kubernetes-validate" --strict "$tmp/broken.yaml" >/dev/null 2>&1 && grep -q '"--max-batch", "8"' "$tmp/mlp.yaml"; then
    ok "serve --k8s: a Deployment and a Service pass kubernetes-validate --strict, a broken copy fails"
  else
    fail "kubernetes-validate: $out"
  fi
else
  echo "skip kubernetes-validate: cannot install it from PyPI into $kvenv"
fi

echo "$fails failed"
[ $fails = 0 ]
