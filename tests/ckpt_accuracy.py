#!/usr/bin/env python3
"""The test accuracy of an mlp checkpoint of psgraph, computed by numpy from the files alone
(the user's check of issue 37): the index's shard files read by hand (json + struct, as the
safetensors format lays them out), column parts (model/fc1/weights/part_K) put back
together, the Fashion-MNIST test set read from its idx files, the forward pass
784-256-256-10 with ReLU in float32, argmax against the labels. Not a reader of other
models. usage: ckpt_accuracy.py INDEX_OR_LOGDIR DATA_DIR [TEST_EXAMPLES]
prints one JSON line: {"checkpoint", "step", "global_step", "test_accuracy", "correct", "examples"}."""
import glob
import gzip
import json
import os
import re
import struct
import sys

import numpy as np

DT = {"F32": np.float32, "F64": np.float64, "I32": np.int32, "I64": np.int64, "U8": np.uint8}


def newest_index(path):
    if os.path.isfile(path):
        return path
    steps = []
    for p in glob.glob(os.path.join(path, "model.ckpt-*.index.json")):
        m = re.search(r"model\.ckpt-(\d+)\.index\.json$", p)
        if m:
            steps.append((int(m.group(1)), p))
    if not steps:
        sys.exit("ckpt_accuracy: no checkpoint index in " + path)
    return max(steps)[1]


def read_shard(path):
    raw = open(path, "rb").read()
    (n,) = struct.unpack_from("<Q", raw)
    header = json.loads(raw[8:8 + n])
    out = {}
    for name, v in header.items():
        if name == "__metadata__":
            continue
        b, e = v["data_offsets"]
        out[name] = np.frombuffer(raw[8 + n + b:8 + n + e], dtype=DT[v["dtype"]]).reshape(v["shape"])
    return header.get("__metadata__", {}), out


def whole(t, name):
    if name in t:
        return t[name]
    parts = sorted((int(m.group(1)), k) for k in t for m in [re.fullmatch(re.escape(name) + r"/part_(\d+)", k)] if m)
    if not parts or [k for k, _ in parts] != list(range(len(parts))):
        sys.exit("ckpt_accuracy: no %s, nor all its parts, in %s" % (name, sorted(t)))
    return np.concatenate([t[k] for _, k in parts], axis=1)


def idx(path):
    raw = gzip.open(path).read() if path.endswith(".gz") else open(path, "rb").read()
    (magic,) = struct.unpack_from(">I", raw)
    dims = struct.unpack_from(">%dI" % (magic & 0xff), raw, 4)
    return np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * len(dims)).reshape(dims)


def data_file(d, stem):
    for p in (os.path.join(d, stem + ".gz"), os.path.join(d, stem)):
        if os.path.exists(p):
            return p
    sys.exit("ckpt_accuracy: no %s in %s" % (stem, d))


def main():
    index = newest_index(sys.argv[1])
    data_dir = sys.argv[2]
    limit = int(sys.argv[3]) if len(sys.argv) > 3 else 0
    ix = json.load(open(index))
    t = {}
    for sh in ix["shards"]:
        _, part = read_shard(os.path.join(os.path.dirname(index), sh["file"]))
        t.update(part)
    x = idx(data_file(data_dir, "t10k-images-idx3-ubyte")).reshape(-1, 784).astype(np.float32) * np.float32(1 / 255)
    y = idx(data_file(data_dir, "t10k-labels-idx1-ubyte")).astype(np.int64)
    if limit > 0:
        x, y = x[:limit], y[:limit]
    h = x
    for layer, relu in (("fc1", True), ("fc2", True), ("fc3", False)):
        h = h @ whole(t, "model/%s/weights" % layer) + whole(t, "model/%s/biases" % layer)
        if relu:
            h = np.maximum(h, 0)
    correct = int((h.argmax(axis=1) == y).sum())
    gs = t.get("global_step")
    print(json.dumps({"checkpoint": index, "step": ix["metadata"]["global_step"],
                      "global_step": int(gs) if gs is not None else None,
                      "test_accuracy": round(correct / len(y), 4), "correct": correct, "examples": len(y)}))


if __name__ == "__main__":
    main()
