#!/usr/bin/env python3
"""An independent reader of psgraph checkpoints: parses the index and the
safetensors shards by hand (json, struct, zlib of the standard library),
checks framing, alignment, checksums and every value against an expected
JSON written by the C test; then loads them with the safetensors package
when it is installed (skipped with a message otherwise).
Not a library: a test, run as  read_safetensors.py INDEX_OR_FILE EXPECTED_JSON."""
import json
import os
import struct
import sys
import zlib

ST = {"F32": ("f", 4), "F64": ("d", 8), "I32": ("i", 4), "I64": ("q", 8),
      "U8": ("B", 1), "BOOL": ("?", 1), "F16": ("e", 2)}
PSG = {"f32": "F32", "f64": "F64", "i32": "I32", "i64": "I64", "u8": "U8", "bool": "BOOL"}


def fail(msg):
    print("read_safetensors: FAIL: " + msg)
    sys.exit(1)


def read_shard(path):
    """Returns (metadata, {name: (dtype, shape, values)}), checking the layout."""
    raw = open(path, "rb").read()
    if len(raw) < 8:
        fail(path + ": too short")
    (n,) = struct.unpack("<Q", raw[:8])
    if 8 + n > len(raw):
        fail(path + ": header length past the end")
    if (8 + n) % 8:
        fail(path + ": data does not start on a multiple of 8 (%d)" % (8 + n))
    header = json.loads(raw[8:8 + n].decode("utf-8"))
    data = raw[8 + n:]
    meta = header.pop("__metadata__", {})
    if not all(isinstance(v, str) for v in meta.values()):
        fail(path + ": __metadata__ values must be strings")
    if "data_crc32" in meta and int(meta["data_crc32"], 16) != zlib.crc32(data):
        fail(path + ": data_crc32 mismatch")
    spans = sorted((v["data_offsets"][0], v["data_offsets"][1], k) for k, v in header.items())
    at = 0
    for b, e, k in spans:
        if b != at:
            fail("%s: tensor %s starts at %d, expected %d" % (path, k, b, at))
        at = e
    if at != len(data):
        fail(path + ": tensors do not cover the data")
    out = {}
    for k, v in header.items():
        fmt, size = ST[v["dtype"]]
        b, e = v["data_offsets"]
        count = 1
        for d in v["shape"]:
            count *= d
        if e - b != count * size:
            fail("%s: %s: %d bytes for shape %s" % (path, k, e - b, v["shape"]))
        if (8 + n + b) % size:
            fail("%s: %s is not aligned to %d in the file" % (path, k, size))
        out[k] = (v["dtype"], v["shape"], list(struct.unpack("<%d%s" % (count, fmt), data[b:e])))
    return meta, out


def main():
    target, expected_path = sys.argv[1], sys.argv[2]
    expected = json.load(open(expected_path))
    tensors, files = {}, []
    if target.endswith(".json"):
        index = json.load(open(target))
        step = index["metadata"]["global_step"]
        folder = os.path.dirname(target)
        for i, sh in enumerate(index["shards"]):
            path = os.path.join(folder, sh["file"])
            raw = open(path, "rb").read()
            if len(raw) != sh["size"]:
                fail("%s: %d bytes, index says %d" % (path, len(raw), sh["size"]))
            if "%08x" % zlib.crc32(raw) != sh["crc32"]:
                fail(path + ": crc32 differs from the index")
            meta, ts = read_shard(path)
            if int(meta["global_step"]) != step or int(meta["shard"]) != i:
                fail(path + ": metadata step/shard differ from the index")
            for k, v in ts.items():
                if index["weight_map"].get(k) != sh["file"]:
                    fail("%s: weight_map does not map %s to %s" % (target, k, sh["file"]))
                tensors[k] = (i,) + v
            files.append(path)
        if len(index["weight_map"]) != len(tensors):
            fail(target + ": weight_map and shards differ")
    else:
        meta, ts = read_shard(target)
        step = int(meta["global_step"])
        tensors = {k: (0,) + v for k, v in ts.items()}
        files.append(target)
    if step != expected["global_step"]:
        fail("global step %s, expected %s" % (step, expected["global_step"]))
    exp = expected["tensors"]
    if set(exp) != set(tensors):
        fail("tensors %s, expected %s" % (sorted(tensors), sorted(exp)))
    for k, e in exp.items():
        shard, dtype, shape, values = tensors[k]
        if dtype != PSG[e["dtype"]] or shape != e["shape"] or (target.endswith(".json") and shard != e["shard"]):
            fail("%s: %s%s in shard %d, expected %s%s in %d" % (k, dtype, shape, shard, e["dtype"], e["shape"], e["shard"]))
        want = e["values"]
        if dtype == "F32":
            want = [struct.unpack("<f", struct.pack("<f", x))[0] for x in want]
        if dtype == "BOOL":
            want = [bool(x) for x in want]
        if values != want:
            fail("%s: values %s, expected %s" % (k, values[:8], want[:8]))
    print("read_safetensors: %d tensors in %d files, values, offsets, alignment and crc32 ok" % (len(tensors), len(files)))
    try:
        import numpy  # noqa: F401
        from safetensors import safe_open
    except ImportError as e:
        print("read_safetensors: safetensors package not loaded (%s): skipped that check" % e)
        return
    for path in files:
        with safe_open(path, framework="numpy") as f:
            for k in f.keys():
                arr = f.get_tensor(k)
                if list(arr.shape) != tensors[k][2] or arr.reshape(-1).tolist() != tensors[k][3]:
                    fail("safetensors: %s differs in %s" % (k, path))
    print("read_safetensors: the safetensors package loads the same %d tensors" % len(tensors))


if __name__ == "__main__":
    main()
