#!/usr/bin/env bash
# Accuracy parity with PyTorch (issue 33): psgraph's mlp and cnn recipes are PyTorch's
# (../shared/peers/torch_ref.py: the same layers, initializer family, mean cross-entropy,
# SGD with momentum 0.9 as torch.optim.SGD updates, lr, batch, Fashion-MNIST scaled to
# [0, 1]). From the same initial values (psgraph's initial checkpoint, a safetensors shard,
# loaded by tests/torch_parity.py into PyTorch's layers) and the same data order (psgraph's
# epoch order, reproduced bit for bit in Python):
# - the weights after 100 mlp steps and 5 cnn steps agree to float rounding (1e-5;
#   measured 3e-7 and 1e-8), and a step that differs (twice the learning rate) is far
#   outside that (more than 1e-3);
# - the mlp's test accuracy after one epoch, mean of 3 seeds, agrees within 0.005 (the issue's
#   bound). Not each seed alone within 0.003: one epoch at lr 0.05 and momentum 0.9
#   amplifies a rounding difference (a ReLU that flips), and PyTorch against itself, its
#   initial weights moved by 1e-7 relative, ends 0.006 apart (docs/testing.md).
# PyTorch runs in a venv made here over the system's packages (Debian's python3-torch:
# PSG_WITH_PEERS=1 bash tools/install-deps.sh); without torch the test skips (77), saying so.
set -u
psgraph=$1
asan=${2:-}
here=$(dirname "$(readlink -f "$0")")
data=/usr/share/datasets/fashion-mnist
tol=0.005
# by hand (minutes each on 2 cores): PSG_PARITY_MODELS="mlp cnn" PSG_PARITY_EPOCHS=3
# PSG_PARITY_SEEDS="1 2 3 4" (docs/testing.md); CI: the mlp, 1 epoch, seeds 1-3
epoch_models=${PSG_PARITY_MODELS:-mlp}
epochs=${PSG_PARITY_EPOCHS:-1}
seeds=${PSG_PARITY_SEEDS:-1 2 3}
[ -f $data/train-images-idx3-ubyte.gz ] || { echo "skip: $data missing (dataset-fashion-mnist)"; exit 77; }
tmp=$(mktemp -d /tmp/psg_test_torch_parity.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
# a venv of our own that sees the system's torch; nothing is installed into the system
if ! /usr/bin/python3 -m venv --without-pip --system-site-packages "$tmp/venv" >"$tmp/venv.log" 2>&1; then
  echo "skip: /usr/bin/python3 -m venv failed (python3-venv): $(tail -1 "$tmp/venv.log")"
  exit 77
fi
py=$tmp/venv/bin/python
if ! "$py" -c "import torch, numpy" 2>"$tmp/import.log"; then
  echo "skip: PyTorch cannot be imported ($(tail -1 "$tmp/import.log")); install it with" \
    "PSG_WITH_PEERS=1 bash tools/install-deps.sh (Debian's python3-torch)"
  exit 77
fi
fails=0
acc() { sed -n 's/.*"event":"done".*"test_accuracy":\([0-9.]*\).*/\1/p'; }
torch_acc() { "$py" -c 'import json, sys; print(json.loads(sys.stdin.read())["test_acc"][-1])'; }

# MODEL SEED: psgraph's initial values, then one epoch of each from them; appends
# "ours theirs" to $tmp/MODEL.acc
epoch() {
  local model=$1 seed=$2 dir=$tmp/$1-$2
  if ! "$psgraph" train --model "$model" --steps 0 --seed "$seed" --logdir "$dir" >"$dir.init.log" 2>&1; then
    echo "FAIL: $model seed $seed: the initial checkpoint: $(tail -1 "$dir.init.log")"
    fails=$((fails + 1))
    return
  fi
  local shard ours theirs
  shard=$(ls "$dir"/model.ckpt-0-*.safetensors)
  ours=$("$psgraph" train --model "$model" --epochs "$epochs" --seed "$seed" --threads 1 \
    --init-from "$shard" --strict --log-every 1000000 2>"$dir.err" | acc)
  theirs=$("$py" "$here/torch_parity.py" "$shard" --model "$model" --seed "$seed" --epochs "$epochs" \
    2>"$dir.torch.err" | torch_acc)
  if [ -z "$ours" ] || [ -z "$theirs" ]; then
    echo "FAIL: $model seed $seed: no accuracy (psgraph: $(tail -1 "$dir.err"); torch: $(tail -1 "$dir.torch.err"))"
    fails=$((fails + 1))
    return
  fi
  echo "     $model seed $seed, $epochs epoch(s) from the same initial values: psgraph $ours, PyTorch $theirs"
  echo "$ours $theirs" >>"$tmp/$model.acc"
}

# MODEL: the means of $tmp/MODEL.acc within $tol
means() {
  local line
  line=$("$py" - "$tmp/$1.acc" "$tol" <<'PY'
import sys
rows = [tuple(map(float, l.split())) for l in open(sys.argv[1]) if l.strip()]
a, b = (sum(r[i] for r in rows) / len(rows) for i in (0, 1))
print(f"{abs(a - b) <= float(sys.argv[2]):d} {len(rows)} {a:.4f} {b:.4f}")
PY
)
  set -- "$1" $line
  if [ "${2:-0}" = 1 ]; then
    echo "ok   $1, $epochs epoch(s), mean of $3 seeds: psgraph $4, PyTorch $5 (within $tol)"
  else
    echo "FAIL: $1, $epochs epoch(s), mean of ${3:-0} seeds: psgraph ${4:-?}, PyTorch ${5:-?} (more than $tol apart)"
    fails=$((fails + 1))
  fi
}

# MODEL LR STEPS: the largest weight difference to PyTorch's (at the recipe's lr) after STEPS
steps() {
  local model=$1 dir=$tmp/steps-$1-$2 shard
  shard=$(ls "$tmp/$model"-1/model.ckpt-0-*.safetensors)
  "$psgraph" train --model "$model" --steps "$3" --seed 1 --lr "$2" --threads 1 \
    --init-from "$shard" --logdir "$dir" --log-every 1000000 --test-examples 100 >"$dir.log" 2>&1 &&
    "$py" "$here/torch_parity.py" "$shard" --model "$model" --seed 1 --steps "$3" \
      --compare "$(ls "$dir"/model.ckpt-"$3"-*.safetensors)" |
    "$py" -c 'import json, sys; print(json.loads(sys.stdin.read())["max_abs_diff"])'
}

# MODEL LR STEPS: same step (within 1e-5) or told apart (more than 1e-3)
check_steps() {
  local d
  d=$(steps "$1" "$2" "$3")
  if [ "$2" = "$4" ] && [ -n "$d" ] && "$py" -c "import sys; sys.exit(not $d <= 1e-5)"; then
    echo "ok   $1, $3 steps from the same values: weights within $d of PyTorch's"
  elif [ "$2" != "$4" ] && [ -n "$d" ] && "$py" -c "import sys; sys.exit(not $d > 1e-3)"; then
    echo "ok   $1, another step (lr $2 against PyTorch's $4) is told apart: weights $d apart"
  else
    echo "FAIL: $1, $3 steps at lr $2 against PyTorch's $4: weights '$d' apart"
    fails=$((fails + 1))
  fi
}

# the epochs take minutes in a sanitizer build: release only
if [ -z "$asan" ]; then
  for model in $epoch_models; do
    for seed in $seeds; do epoch "$model" "$seed"; done
    means "$model"
  done
fi
# the step checks start from seed 1's initial values
[ -d "$tmp/mlp-1" ] || "$psgraph" train --model mlp --steps 0 --seed 1 --logdir "$tmp/mlp-1" >/dev/null 2>&1
check_steps mlp 0.05 100 0.05
check_steps mlp 0.1 100 0.05
# the cnn: its steps (an epoch of it takes minutes on a shared 2-core machine, more in a
# sanitizer build; its accuracy is in docs/testing.md)
[ -d "$tmp/cnn-1" ] ||
  "$psgraph" train --model cnn --steps 0 --seed 1 --logdir "$tmp/cnn-1" >"$tmp/cnn-1.init.log" 2>&1 ||
  { echo "FAIL: cnn: the initial checkpoint: $(tail -1 "$tmp/cnn-1.init.log")"; fails=$((fails + 1)); }
check_steps cnn 0.01 5 0.01
check_steps cnn 0.02 5 0.01
[ $fails -eq 0 ] && echo "all passed" || echo "$fails failed"
exit $((fails > 0))
