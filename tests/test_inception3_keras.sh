#!/usr/bin/env bash
# psgraph's Inception-v3 and Keras's InceptionV3 (TF 2.21) on the same weights and image:
# Keras's weights, saved to safetensors under Keras's names, go into psgraph through
# --init-from's name map, the forward passes agree within 1e-4 (relative), and psgraph's
# variables, written as a checkpoint, load back into Keras by the map that
# `psgraph train --model inception3 --print-keras-names` prints and give the same logits.
# TensorFlow lives in a venv this test makes under the build folder ($PSG_TF_VENV: one made
# already); when it cannot be made in time the test skips (77), saying why.
set -u
psgraph=$1
testbin=$2
builddir=$3
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d /tmp/psg_test_inception3_keras.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
venv=${PSG_TF_VENV:-$builddir/tf-venv}
if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c 'import tensorflow, safetensors' 2>/dev/null; then
  { python3 -m venv "$venv" &&
    timeout 900 "$venv/bin/pip" install -q tensorflow-cpu==2.21.0 safetensors; } >"$tmp/pip.log" 2>&1
fi
if ! "$venv/bin/python" -c 'import tensorflow, safetensors' 2>/dev/null; then
  echo "skip: cannot install tensorflow-cpu==2.21.0 into $venv: $(tail -2 "$tmp/pip.log" 2>/dev/null)"
  exit 77
fi
fails=0
S=75 C=10
if ! out=$("$venv/bin/python" "$here/keras_inception3.py" make "$tmp" $S $C 3 2>&1); then
  echo "FAIL: Keras's model: $(tail -5 <<<"$out")"
  exit 1
fi
echo "keras: $(tail -1 <<<"$out")"
if "$testbin" "$tmp" $S $C; then echo "ok   psgraph's forward pass on Keras's weights"; else fails=$((fails + 1)); fi
"$psgraph" train --model inception3 --image-size $S --classes $C --print-keras-names >"$tmp/names.json"
if out=$("$venv/bin/python" "$here/keras_inception3.py" load "$tmp" $S $C "$tmp/names.json" \
      "$tmp/psgraph/model.ckpt-0-00000-of-00001.safetensors" 2>&1) &&
   python3 -c 'import json,sys; d=json.loads(sys.argv[1]); assert d["assigned"] == d["of"] == 378 and d["max_relative_difference"] <= 1e-4, d' "$(tail -1 <<<"$out")"; then
  echo "ok   psgraph's checkpoint into Keras by the name map: $(tail -1 <<<"$out")"
else
  echo "FAIL: psgraph's checkpoint into Keras: $(tail -5 <<<"$out")"
  fails=$((fails + 1))
fi
[ $fails = 0 ]
