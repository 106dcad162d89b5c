#!/usr/bin/env bash
# `psgraph train --init-from FILE.safetensors` (worker/init_from.c, docs/checkpoints.md): a
# file written here with plain Python (json + struct, as safetensors.numpy.save_file lays
# it out) gives the mlp its initial weights, by name: the first checkpoint holds them
# (lr 1e-9: one step moves nothing visible); the report names matched, missing and
# unexpected tensors, --strict fails on either kind alone, a shape mismatch always fails
# naming both shapes (of a column shard too, and says to transpose a PyTorch-layout weight); a
# sharded file's index (model.safetensors.index.json) loads its files, one that maps nothing is
# refused; in a cluster the whole fc1 weight fills the model's column shards part_0, part_1; any
# layout of a variable (whole, 2 or 5 column parts) loads into any other, a cluster's checkpoint
# into one process (issue 37); Inception-v3's classifier from Keras's names, of one class more
# (TF's background class) than the model's.
set -u
psgraph=$1
asan=${2:-}
fails=0
tmp=$(mktemp -d /tmp/psg_test_init_from.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
ok() { echo "ok   $*"; }
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

# write.py OUT [drop NAME] [extra NAME] [shape NAME R C]: the mlp's six tensors
cat >"$tmp/st.py" <<'PY'
import json, math, struct, sys

def mlp():
    t = {}
    for name, shape in [("model/fc1/weights", [784, 256]), ("model/fc1/biases", [256]),
                        ("model/fc2/weights", [256, 256]), ("model/fc2/biases", [256]),
                        ("model/fc3/weights", [256, 10]), ("model/fc3/biases", [10])]:
        n = math.prod(shape)
        seed = sum(map(ord, name))
        t[name] = (shape, [0.05 * math.sin(seed + 0.37 * i) for i in range(n)])
    return t

def save(path, tensors):
    header, blobs, off = {"__metadata__": {"format": "pt"}}, [], 0
    for name in sorted(tensors):
        shape, vals = tensors[name]
        b = struct.pack("<%df" % len(vals), *vals)
        header[name] = {"dtype": "F32", "shape": shape, "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))

def load(path):
    data = open(path, "rb").read()
    (n,) = struct.unpack_from("<Q", data)
    header = json.loads(data[8:8 + n])
    out = {}
    for k, v in header.items():
        if k == "__metadata__" or v["dtype"] != "F32":
            continue
        b, e = v["data_offsets"]
        out[k] = (v["shape"], list(struct.unpack_from("<%df" % ((e - b) // 4), data, 8 + n + b)))
    return out

if sys.argv[1] == "write":
    t, a = mlp(), sys.argv[3:]
    while a:
        if a[0] == "drop":
            del t[a[1]]; a = a[2:]
        elif a[0] == "extra":
            t[a[1]] = ([3], [1.0, 2.0, 3.0]); a = a[2:]
        elif a[0] == "shape":
            r, c = int(a[2]), int(a[3]); t[a[1]] = ([r, c], [0.0] * (r * c)); a = a[4:]
    save(sys.argv[2], t)
elif sys.argv[1] == "index":  # a sharded file as Hugging Face writes it: two files + an index
    d, t = sys.argv[2], mlp()  # [PAD: a metadata text of PAD bytes, for an index that size]
    parts = sys.argv[3:] == ["parts"]  # [parts: fc1's weight in 2 column parts, alone first]
    first = ["model/fc1/weights", "model/fc1/biases"]
    if parts:
        (r, c), v = t.pop("model/fc1/weights")
        for k in range(2):
            t["model/fc1/weights/part_%d" % k] = ([r, c // 2], [v[i * c + k * (c // 2) + j] for i in range(r) for j in range(c // 2)])
        first = ["model/fc1/weights/part_0", "model/fc1/weights/part_1"]
    files = {"model-00001-of-00002.safetensors": first,
             "model-00002-of-00002.safetensors": [k for k in t if k not in first]}
    wmap = {}
    for name, keys in files.items():
        save(d + "/" + name, {k: t[k] for k in keys})
        wmap.update({k: name for k in keys})
    meta = {"total_size": 4 * sum(math.prod(s) for s, _ in t.values())}
    if len(sys.argv) > 3 and not parts:
        meta["note"] = "x" * int(sys.argv[3])
    json.dump({"metadata": meta, "weight_map": wmap}, open(d + "/model.safetensors.index.json", "w"))
else:  # check CKPT_SHARD...: every mlp tensor equals the file's (shards joined by columns)
    want, got = mlp(), {}
    for p in sys.argv[2:]:
        got.update(load(p))
    for name, (shape, vals) in want.items():
        if name in got:
            g = got[name][1]
        else:
            parts = sorted(k for k in got if k.startswith(name + "/part_") and k.count("/") == name.count("/") + 1)
            assert parts, (name, sorted(got))
            rows = shape[0]
            g = []
            for r in range(rows):
                for k in parts:
                    c = got[k][0][1]
                    g.extend(got[k][1][r * c:(r + 1) * c])
        err = max(abs(a - b) for a, b in zip(g, vals))
        assert len(g) == len(vals) and err < 1e-5, (name, len(g), len(vals), err)
    print("all 6 tensors equal the file's")
PY
st() { python3 "$tmp/st.py" "$@"; }
run=(train --model mlp --data synthetic --batch 16 --steps 1 --lr 1e-9 --checkpoint-every 1 --log-every 10)

# 1. every name matches (--strict passes): the variables start from the file's values
st write "$tmp/w.safetensors"
out=$("$psgraph" "${run[@]}" --logdir "$tmp/l1" --init-from "$tmp/w.safetensors" --strict 2>&1); rc=$?
if [ $rc = 0 ] && grep -q "6 of its 6 tensors matched, 0 missing (keep their initializers), 0 unexpected" <<<"$out" &&
   res=$(st check "$tmp"/l1/model.ckpt-1-*.safetensors 2>&1); then
  ok "one process, --strict: $(grep -o -- '--init-from.*' <<<"$out" | head -1 | cut -c1-120); $res"
else
  fail "one process (rc $rc): $out ${res:-}"
fi

# 1b. a sharded file with its index (model.safetensors.index.json), as Hugging Face writes one
mkdir -p "$tmp/hf"
st index "$tmp/hf"
out=$("$psgraph" "${run[@]}" --logdir "$tmp/l1b" --init-from "$tmp/hf/model.safetensors.index.json" --strict 2>&1); rc=$?
if [ $rc = 0 ] && grep -q "6 of its 6 tensors matched" <<<"$out" &&
   res=$(st check "$tmp"/l1b/model.ckpt-1-*.safetensors 2>&1); then
  ok "a sharded index: $res"
else
  fail "a sharded index (rc $rc): $out ${res:-}"
fi

# ... and with fc1's weight in 2 column parts, alone in the first file (part_0 its first
# tensor): put together into the whole variable
mkdir -p "$tmp/hf3"
st index "$tmp/hf3" parts
out=$("$psgraph" "${run[@]}" --logdir "$tmp/l1b3" --init-from "$tmp/hf3/model.safetensors.index.json" --strict 2>&1); rc=$?
if [ $rc = 0 ] && grep -q "7 of its 7 tensors matched, 0 missing" <<<"$out" &&
   res=$(st check "$tmp"/l1b3/model.ckpt-1-*.safetensors 2>&1); then
  ok "a sharded index, fc1 in 2 parts first in their file: $res"
else
  fail "a sharded index, fc1 in 2 parts first in their file (rc $rc): $out ${res:-}"
fi

# 1b'. an index over 64 KiB (a large model's names; here its metadata), given by a relative
# path of 6 characters ("i.json", from its folder)
mkdir -p "$tmp/hf2"
st index "$tmp/hf2" 70000
mv "$tmp/hf2/model.safetensors.index.json" "$tmp/hf2/i.json"
psgraph_abs=$(realpath "$psgraph")
out=$(cd "$tmp/hf2" && "$psgraph_abs" "${run[@]}" --logdir "$tmp/l1b2" --init-from i.json --strict 2>&1); rc=$?
if [ $rc = 0 ] && [ "$(stat -c %s "$tmp/hf2/i.json")" -gt 65536 ] &&
   grep -q "6 of its 6 tensors matched" <<<"$out" && res=$(st check "$tmp"/l1b2/model.ckpt-1-*.safetensors 2>&1); then
  ok "an index of $(stat -c %s "$tmp/hf2/i.json") bytes named i.json: $res"
else
  fail "an index over 64 KiB named i.json (rc $rc): $out ${res:-}"
fi

# 1c. a psgraph checkpoint (its index) as the source: weights and slots, not its global_step
out=$("$psgraph" "${run[@]}" --logdir "$tmp/l1c" --init-from "$tmp/l1/model.ckpt-1.index.json" --strict 2>&1); rc=$?
if [ $rc = 0 ] && grep -q "12 of its 13 tensors matched, 0 missing (keep their initializers), 0 unexpected (no such variable); its global_step is not loaded" <<<"$out"; then
  ok "a psgraph checkpoint: $(grep -o '12 of its.*' <<<"$out")"
else
  fail "a psgraph checkpoint (rc $rc): $out"
fi

# ... and into column shards: each part's Momentum slot ("model/fc1/weights/part_3/Momentum")
# from the whole weight's slot
out=$("$psgraph" "${run[@]}" --logdir "$tmp/l1s" --init-from "$tmp/l1/model.ckpt-1.index.json" --strict --shard-bytes 65536 2>&1); rc=$?
if [ $rc = 0 ] && grep -q "12 of its 13 tensors matched, 0 missing (keep their initializers), 0 unexpected" <<<"$out"; then
  ok "a psgraph checkpoint into column shards, slots included: $(grep -o '12 of its[^;]*' <<<"$out")"
else
  fail "a psgraph checkpoint into column shards (rc $rc): $out"
fi

# ... and into 16 column parts with their slots (--shard-bytes 16 KiB): 40 variables filled
# from the file, more than the first size (32) of the list of those served
out=$("$psgraph" "${run[@]}" --logdir "$tmp/l1m" --init-from "$tmp/l1/model.ckpt-1.index.json" --strict --shard-bytes 16384 2>&1); rc=$?
n=$(python3 -c 'import json,sys; print(sum("/part_" in k for k in json.load(open(sys.argv[1]))["weight_map"]))' "$tmp/l1m/model.ckpt-1.index.json" 2>&1)
if [ $rc = 0 ] && grep -q "12 of its 13 tensors matched, 0 missing (keep their initializers), 0 unexpected" <<<"$out" &&
   [ "$n" = 32 ] && res=$(st check "$tmp"/l1m/model.ckpt-1-*.safetensors 2>&1); then
  ok "a psgraph checkpoint into 16 column parts, slots included ($n part variables): $res"
else
  fail "a psgraph checkpoint into 16 column parts (rc $rc, $n parts): $out ${res:-}"
fi

# 1d. two weights in column shards at once (--shard-bytes 64 KiB: fc1 in 8 parts, fc2 in 4),
# each part filled from its own whole weight's columns
out=$("$psgraph" "${run[@]}" --logdir "$tmp/l1d" --init-from "$tmp/w.safetensors" --strict --shard-bytes 65536 2>&1); rc=$?
if [ $rc = 0 ] && grep -q "6 of its 6 tensors matched" <<<"$out" &&
   res=$(st check "$tmp"/l1d/model.ckpt-1-*.safetensors 2>&1) &&
   python3 -c 'import json,sys; m=json.load(open(sys.argv[1]))["weight_map"]; assert "model/fc1/weights/part_7" in m and "model/fc2/weights/part_3" in m, m' "$tmp/l1d/model.ckpt-1.index.json"; then
  ok "fc1 in 8 and fc2 in 4 column shards: $res"
else
  fail "two sharded weights (rc $rc): $out ${res:-}"
fi

# 1e. a sharded file's index that maps no tensor is refused
printf '{"metadata": {}, "weight_map": {}}' >"$tmp/hf/empty.index.json"
out=$("$psgraph" "${run[@]}" --init-from "$tmp/hf/empty.index.json" 2>&1); rc=$?
if [ $rc = 1 ] && grep -q 'empty.index.json: no "weight_map" of tensor names to files' <<<"$out"; then
  ok "an index that maps nothing: $out"
else
  fail "an index that maps nothing (rc $rc): $out"
fi

# 2. missing and unexpected names: reported; with --strict an error naming them
st write "$tmp/partial.safetensors" drop model/fc3/biases extra head/extra
out=$("$psgraph" "${run[@]}" --logdir "$tmp/l2" --init-from "$tmp/partial.safetensors" 2>&1); rc=$?
out2=$("$psgraph" "${run[@]}" --logdir "$tmp/l3" --init-from "$tmp/partial.safetensors" --strict 2>&1); rc2=$?
if [ $rc = 0 ] && grep -q "5 of its 6 tensors matched, 1 missing (keep their initializers): model/fc3/biases, 1 unexpected (no such variable): head/extra" <<<"$out" &&
   [ $rc2 = 1 ] && grep -q -- "--strict: 1 missing: model/fc3/biases; 1 unexpected: head/extra" <<<"$out2" &&
   [ ! -e "$tmp/l3/model.ckpt-1.index.json" ]; then
  ok "missing and unexpected: $(tail -1 <<<"$out2")"
else
  fail "missing/unexpected (rc $rc, $rc2): $out --- $out2"
fi

# 2b. --strict fails on missing names alone, and on unexpected names alone (each its own run:
# a check of one kind must not hide behind the other)
st write "$tmp/missing.safetensors" drop model/fc3/biases
st write "$tmp/extra.safetensors" extra head/extra
out=$("$psgraph" "${run[@]}" --logdir "$tmp/l2m" --init-from "$tmp/missing.safetensors" --strict 2>&1); rc=$?
out2=$("$psgraph" "${run[@]}" --logdir "$tmp/l2u" --init-from "$tmp/extra.safetensors" --strict 2>&1); rc2=$?
if [ $rc = 1 ] && grep -q -- "--strict: 1 missing: model/fc3/biases; 0 unexpected" <<<"$out" &&
   [ ! -e "$tmp/l2m/model.ckpt-1.index.json" ] &&
   [ $rc2 = 1 ] && grep -q -- "--strict: 0 missing; 1 unexpected: head/extra" <<<"$out2" &&
   [ ! -e "$tmp/l2u/model.ckpt-1.index.json" ]; then
  ok "--strict, only missing: $(tail -1 <<<"$out"); only unexpected: $(tail -1 <<<"$out2")"
else
  fail "--strict with only missing or only unexpected names (rc $rc, $rc2): $out --- $out2"
fi

# 3. a shape mismatch fails, strict or not, naming the tensor and both shapes
st write "$tmp/bad.safetensors" shape model/fc2/weights 256 100
out=$("$psgraph" "${run[@]}" --init-from "$tmp/bad.safetensors" 2>&1); rc=$?
if [ $rc = 1 ] && grep -q "tensor 'model/fc2/weights' is f32\[256, 100\], variable 'model/fc2/weights' is f32\[256, 256\]" <<<"$out"; then
  ok "shape mismatch: $out"
else
  fail "shape mismatch (rc $rc): $out"
fi
# ... and for column shards (fc2 in 4 parts of 64 columns): a whole weight of other rows, and
# one of too few columns for its last part
st write "$tmp/rows.safetensors" shape model/fc2/weights 255 256
st write "$tmp/cols.safetensors" shape model/fc2/weights 256 200
out=$("$psgraph" "${run[@]}" --init-from "$tmp/rows.safetensors" --shard-bytes 65536 2>&1); rc=$?
out2=$("$psgraph" "${run[@]}" --init-from "$tmp/cols.safetensors" --shard-bytes 65536 2>&1); rc2=$?
if [ $rc = 1 ] && grep -q "tensor 'model/fc2/weights' is f32\[255, 256\], variable 'model/fc2/weights/part_0' is f32\[256, 64\] (a part of it)" <<<"$out" &&
   [ $rc2 = 1 ] && grep -q "tensor 'model/fc2/weights' is f32\[256, 200\], variable 'model/fc2/weights/part_3' is f32\[256, 64\] (a part of it)" <<<"$out2"; then
  ok "column shards that do not fit: $(tail -1 <<<"$out2")"
else
  fail "column shards that do not fit (rc $rc, $rc2): $out --- $out2"
fi

# 4. a cluster: fc1 (784 x 256 f32, over 512 KiB) is two column shards, filled from the whole
out=$(timeout 200 "$psgraph" launch --ps 2 --workers 1 -- "$psgraph" "${run[@]}" --logdir "$tmp/l4" \
  --init-from "$tmp/w.safetensors" --strict --step-timeout 30 2>&1); rc=$?
if [ $rc = 0 ] && grep -q "6 of its 6 tensors matched" <<<"$out" &&
   res=$(st check "$tmp"/l4/model.ckpt-1-*.safetensors 2>&1) &&
   python3 -c 'import json,sys; m=json.load(open(sys.argv[1]))["weight_map"]; assert "model/fc1/weights/part_1" in m, m' "$tmp/l4/model.ckpt-1.index.json"; then
  ok "cluster, sharded fc1: $res"
else
  fail "cluster (rc $rc): $(tail -8 <<<"$out") ${res:-}"
fi

# 5. issue 37: any layout of a variable into any other. A checkpoint's variables, whole or
# in column parts (--shard-bytes: 0 whole; 524288: fc1 in 2 parts; 200000: fc1 in 5, fc2 in
# 2), load into a model of each layout; --lr 0 keeps the weights, so the target's first
# checkpoint holds the source's values exactly (parts put together by columns), and its
# momentum slots equal those of the same-layout load (one step of the same gradient on them)
cat >"$tmp/layout.py" <<'PY'
import json, os, re, struct, sys

def load(index):
    ix, out = json.load(open(index)), {}
    for sh in ix["shards"]:
        data = open(os.path.join(os.path.dirname(index), sh["file"]), "rb").read()
        (n,) = struct.unpack_from("<Q", data)
        for k, v in json.loads(data[8:8 + n]).items():
            if k == "__metadata__" or v["dtype"] != "F32":
                continue
            b, e = v["data_offsets"]
            out[k] = (v["shape"], struct.unpack_from("<%df" % ((e - b) // 4), data, 8 + n + b))
    return out

def whole(t):  # every variable whole: "a/part_K/b" put back together by columns into "a/b"
    parts, out = {}, {}
    for k, v in t.items():
        m = re.fullmatch(r"(.*)/part_(\d+)(/.*)?", k)
        if m:
            parts.setdefault(m.group(1) + (m.group(3) or ""), {})[int(m.group(2))] = v
        else:
            out[k] = v
    for k, ps in parts.items():
        ps = [ps[i] for i in range(len(ps))]
        rows = ps[0][0][0]
        vals = []
        for r in range(rows):
            for shape, v in ps:
                vals.extend(v[r * shape[1]:(r + 1) * shape[1]])
        out[k] = ([rows, sum(s[1] for s, _ in ps)], tuple(vals))
    return out

src, dst, ref = (whole(load(p)) for p in sys.argv[1:4])
layout = sorted(k for k in load(sys.argv[2]) if "/part_" in k and "/Momentum" not in k)
for k, (shape, v) in src.items():
    if k.startswith("sync_replicas/"):  # a cluster job's counters, not the model's
        continue
    if k.endswith("/Momentum"):  # the same step on the same values as the same-layout load's
        assert dst[k][0] == shape and max(abs(a - b) for a, b in zip(dst[k][1], ref[k][1])) < 1e-5, k
    else:
        assert dst[k] == (shape, v), (k, shape, dst[k][0])
print("%d tensors equal (target parts: %s)" % (len(src), ", ".join(layout) or "none"))
PY
lay=(0 524288 200000)
name=(whole "2 parts" "5+2 parts")
for i in 0 1 2; do
  "$psgraph" "${run[@]}" --lr 0 --seed 7 --shard-bytes "${lay[$i]}" --logdir "$tmp/src$i" >"$tmp/src$i.out" 2>&1 ||
    fail "source layout ${name[$i]}: $(tail -3 "$tmp/src$i.out")"
done
for i in 0 1 2; do
  for j in 0 1 2; do
    "$psgraph" "${run[@]}" --lr 0 --shard-bytes "${lay[$j]}" --logdir "$tmp/dst$i$j" \
      --init-from "$tmp/src$i/model.ckpt-1.index.json" >"$tmp/dst$i$j.out" 2>&1
    echo $? >"$tmp/dst$i$j.rc"
  done
done
for i in 0 1 2; do
  for j in 0 1 2; do
    out=$(cat "$tmp/dst$i$j.out")
    n=$(python3 -c 'import json,sys; print(len(json.load(open(sys.argv[1]))["weight_map"]))' "$tmp/src$i/model.ckpt-1.index.json")
    if [ "$(cat "$tmp/dst$i$j.rc")" = 0 ] &&
       grep -q "$((n - 1)) of its $n tensors matched, 0 missing (keep their initializers), 0 unexpected" <<<"$out" &&
       res=$(python3 "$tmp/layout.py" "$tmp/src$i/model.ckpt-1.index.json" "$tmp/dst$i$j/model.ckpt-1.index.json" \
             "$tmp/dst$i$i/model.ckpt-1.index.json" 2>&1); then
      ok "layout ${name[$i]} -> ${name[$j]}: $res"
    else
      fail "layout ${name[$i]} -> ${name[$j]} (rc $(cat "$tmp/dst$i$j.rc")): $(grep -- --init-from <<<"$out" | head -2) ${res:-}"
    fi
  done
done

# 6. the cluster's own checkpoint (fc1 in part_0, part_1 on 2 ps) into one process, without
# --strict: every tensor used, none silently left out (the run of the issue started from random)
out=$("$psgraph" "${run[@]}" --lr 0 --logdir "$tmp/l6" --init-from "$tmp/l4/model.ckpt-1.index.json" 2>&1); rc=$?
if [ $rc = 0 ] && grep -q "0 missing (keep their initializers), 0 unexpected (no such variable); its global_step is not loaded (the run starts at step 0); its sync_replicas/worker_counts (a cluster job's counters) is not loaded" <<<"$out" &&
   res=$(python3 "$tmp/layout.py" "$tmp/l4/model.ckpt-1.index.json" "$tmp/l6/model.ckpt-1.index.json" \
         "$tmp/l6/model.ckpt-1.index.json" 2>&1); then
  ok "a cluster's checkpoint into one process: $(grep -o '[0-9]* of its.*unexpected[^;]*' <<<"$out"); $res"
else
  fail "a cluster's checkpoint into one process (rc $rc): $(grep -- --init-from <<<"$out") ${res:-}"
fi

# 7. a weight in PyTorch's [out, in] layout: the shape error says to transpose it
st write "$tmp/torch.safetensors" shape model/fc3/weights 10 256
out=$("$psgraph" "${run[@]}" --init-from "$tmp/torch.safetensors" 2>&1); rc=$?
if [ $rc = 1 ] && grep -q "tensor 'model/fc3/weights' is f32\[10, 256\], variable 'model/fc3/weights' is f32\[256, 10\]; it is the variable's transpose: psgraph keeps a weight as \[in, out\], PyTorch's nn.Linear as \[out, in\]: save it transposed (w.T)" <<<"$out"; then
  ok "a transposed weight: $(grep -o "it is the variable's transpose.*" <<<"$out")"
else
  fail "a transposed weight (rc $rc): $out"
fi

# 8. Keras's classifier names for Inception-v3's slim ones (examples/inception3_names.c), of
# one class more than the model's (slim's 1001 with TF's background class into 1000): the
# file's predictions/kernel and predictions/bias lose their column 0; of one class less
# (Keras's 1000 into slim's 1001): the variables get a zero column 0; the rest is the file's;
# of two more: a shape mismatch
cat >"$tmp/classes.py" <<'PY'
import json, math, struct, sys

W, B = "InceptionV3/Logits/Conv2d_1c_1x1/weights", "InceptionV3/Logits/Conv2d_1c_1x1/biases"

def head(c):  # Keras's classifier of c classes: kernel [2048, c], bias [c]
    return {"predictions/kernel": ([2048, c], [0.01 * math.sin(0.37 * i) for i in range(2048 * c)]),
            "predictions/bias": ([c], [0.5 + k for k in range(c)])}

if sys.argv[1] == "write":  # write OUT C
    tensors, header, blobs, off = head(int(sys.argv[3])), {}, [], 0
    for name, (shape, vals) in sorted(tensors.items()):
        b = struct.pack("<%df" % len(vals), *vals)
        header[name] = {"dtype": "F32", "shape": shape, "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header).encode()
    with open(sys.argv[2], "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))
else:  # check C F CKPT_SHARD...: the checkpoint's classifier of C classes from the file's of F
    c, cf, got = int(sys.argv[2]), int(sys.argv[3]), {}
    for path in sys.argv[4:]:
        with open(path, "rb") as f:
            (n,) = struct.unpack("<Q", f.read(8))
            hdr = json.loads(f.read(n))
            for k in (W, B):
                if k in hdr:
                    b, e = hdr[k]["data_offsets"]
                    f.seek(8 + n + b)
                    got[k] = (hdr[k]["shape"], struct.unpack("<%df" % ((e - b) // 4), f.read(e - b)))
    src = head(cf)
    (_, kv), (_, bv) = src["predictions/kernel"], src["predictions/bias"]
    rows = [kv[r * cf:(r + 1) * cf] for r in range(2048)] + [bv]
    rows = [row[1:] if cf == c + 1 else [0.0] + list(row) for row in rows]  # column 0 dropped or added
    want = {W: ([2048, c], [v for row in rows[:-1] for v in row]), B: ([c], rows[-1])}
    for k, (shape, vals) in want.items():
        assert k in got and got[k][0] == shape, (k, got.get(k, (None,))[0], shape)
        err = max(abs(a - b) for a, b in zip(got[k][1], vals))
        assert err < 1e-5, (k, err)
    print("%d classes from the file's %d (bias %s...)" % (c, cf, ", ".join("%g" % v for v in got[B][1][:3])))
PY
for cf in 11 9; do
  python3 "$tmp/classes.py" write "$tmp/keras$cf.safetensors" $cf
  out=$("$psgraph" train --model inception3 --data synthetic --classes 10 --image-size 75 --batch 1 --steps 1 \
    --test-examples 2 --moving-average-decay 0 --lr 1e-9 --checkpoint-every 1 --logdir "$tmp/l8_$cf" \
    --init-from "$tmp/keras$cf.safetensors" 2>&1); rc=$?
  if [ $rc = 0 ] && grep -q "2 of its 2 tensors matched" <<<"$out" &&
     res=$(python3 "$tmp/classes.py" check 10 $cf "$tmp"/l8_$cf/model.ckpt-1-*.safetensors 2>&1); then
    ok "Keras's classifier of $cf classes into inception3's 10: $res"
  else
    fail "Keras's classifier of $cf classes into inception3's 10 (rc $rc): $(grep -- --init-from <<<"$out" | head -3) ${res:-}"
  fi
  rm -rf "$tmp/l8_$cf"  # 260 MB
done
# ... and of two classes more: no column to add or drop, refused naming both shapes
python3 "$tmp/classes.py" write "$tmp/keras12.safetensors" 12
out=$("$psgraph" train --model inception3 --data synthetic --classes 10 --image-size 75 --batch 1 --steps 1 \
  --init-from "$tmp/keras12.safetensors" 2>&1); rc=$?
if [ $rc = 1 ] && grep -q "tensor 'predictions/kernel' is f32\[2048, 12\], variable 'InceptionV3/Logits/Conv2d_1c_1x1/weights' is f32\[2048, 10\]" <<<"$out"; then
  ok "Keras's classifier of 12 classes into inception3's 10: $(grep -o "tensor 'predictions.*" <<<"$out")"
else
  fail "Keras's classifier of 12 classes into inception3's 10 (rc $rc): $out"
fi
[ $fails = 0 ]
