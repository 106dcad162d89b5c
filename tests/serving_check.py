#!/usr/bin/env python3
"""Clients of psgraph's serving, for tests/test_serving.sh and bench/serve.sh.

  serving_check.py rows MODEL.onnx N SEED OUT.csv   N random rows for the model's inputs
                                                   (CSV, in signature order; ids in range)
  serving_check.py ort MODEL.onnx ROWS.csv PRED.jsonl
      onnx.checker.check_model, then ONNX Runtime's logits on the CSV rows against those
      `psgraph predict --output logits` printed: one JSON line with the largest difference
      of a row relative to that row's largest logit; exits 1 past --tol (1e-5)
  serving_check.py load URL BODY.json SECONDS THREADS
      keep-alive clients POSTing BODY to URL for SECONDS: a JSON line with the requests,
      the failed ones (any status but 200, or a broken connection) and the versions seen
  serving_check.py ortbench MODEL.onnx BATCH SECONDS THREADS
      ONNX Runtime's own InferenceSession.run in this process at BATCH, THREADS callers
      (the peer of bench/serve.sh): inferences/sec, run latencies, the process's CPU ms a run
onnx, onnxruntime and numpy come from the caller's venv (never the product's).
"""
import json
import sys
import threading
import time


def rows(args):
    import numpy as np
    import onnx
    model, n, seed, out = args[0], int(args[1]), int(args[2]), args[3]
    m = onnx.load(model)
    rng = np.random.default_rng(seed)
    init = {t.name: t for t in m.graph.initializer}
    table_rows = None
    for name, t in init.items():
        if name.endswith("embeddings"):
            table_rows = t.dims[0]
    with open(out, "w") as f:
        for _ in range(n):
            vals = []
            for i in m.graph.input:
                shape = [d.dim_value for d in i.type.tensor_type.shape.dim[1:]]
                k = int(np.prod(shape))
                if i.type.tensor_type.elem_type == 7:  # int64: ids of the table's rows
                    vals += [str(int(v)) for v in rng.integers(0, table_rows or 2, k)]
                else:
                    vals += [repr(float(v)) for v in (rng.random(k, dtype=np.float32) * 2 - 1)]
            f.write(",".join(vals) + "\n")


def ort(args, tol=1e-5):
    import numpy as np
    import onnx
    import onnxruntime
    model, csv, pred = args[:3]
    m = onnx.load(model)
    onnx.checker.check_model(m, full_check=True)
    s = onnxruntime.InferenceSession(model, providers=["CPUExecutionProvider"])
    data = [l.split(",") for l in open(csv) if l.strip()]
    feeds, at = {}, 0
    for i in s.get_inputs():
        shape = list(i.shape[1:])
        k = int(np.prod(shape))
        dt = np.int64 if "int64" in i.type else np.float32
        feeds[i.name] = np.array([[float(v) for v in r[at:at + k]] for r in data]).astype(dt).reshape([len(data)] + shape)
        at += k
    want = s.run(["logits"], feeds)[0].astype(np.float64)
    got = np.array([json.loads(l)["logits"] for l in open(pred)], dtype=np.float64).reshape(want.shape)
    w2, g2 = want.reshape(len(data), -1), got.reshape(len(data), -1)
    scale = np.maximum(np.abs(w2).max(axis=1, keepdims=True), 1e-30)
    rel = float((np.abs(g2 - w2) / scale).max())
    print(json.dumps({"model": model, "opset": m.opset_import[0].version, "onnx": onnx.__version__,
                      "onnxruntime": onnxruntime.__version__, "rows": len(data), "max_rel_diff": rel,
                      "tolerance": tol, "ok": rel <= tol}))
    return 0 if rel <= tol else 1


def load(args):
    import http.client
    import urllib.parse
    url, body_path, secs, threads = args[0], args[1], float(args[2]), int(args[3])
    body = open(body_path, "rb").read()
    u = urllib.parse.urlparse(url)
    stats = {"requests": 0, "failed": 0, "versions": set(), "errors": []}
    lock = threading.Lock()
    end = time.time() + secs
    version_url = u.path.split(":")[0]

    def client():
        c = http.client.HTTPConnection(u.hostname, u.port, timeout=60)
        while time.time() < end:
            ok, err = False, None
            try:
                c.request("POST", u.path, body, {"Content-Type": "application/json"})
                r = c.getresponse()
                data = r.read()
                ok = r.status == 200 and b"predictions" in data[:20]
                err = None if ok else "%d %s" % (r.status, data[:200])
                c.request("GET", version_url)
                r = c.getresponse()
                status = r.read()
                v = json.loads(status).get("model_version_status", [{}])[0].get("version")
                if v is None:
                    ok, err = False, "status %d %s" % (r.status, status[:200])
            except Exception as e:  # a broken connection is a failed request
                err, v = repr(e), None
                c.close()
                c = http.client.HTTPConnection(u.hostname, u.port, timeout=60)
            with lock:
                stats["requests"] += 1
                stats["failed"] += 0 if ok else 1
                if v:
                    stats["versions"].add(v)
                if err and len(stats["errors"]) < 3:
                    stats["errors"].append(err)
        c.close()

    ts = [threading.Thread(target=client) for _ in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    stats["versions"] = sorted(stats["versions"], key=int)
    print(json.dumps(stats))
    return 0


def ortbench(args):
    import numpy as np
    import onnxruntime
    model, batch, secs, threads = args[0], int(args[1]), float(args[2]), int(args[3])
    s = onnxruntime.InferenceSession(model, providers=["CPUExecutionProvider"])
    i = s.get_inputs()[0]
    x = np.random.default_rng(1).random([batch] + list(i.shape[1:]), dtype=np.float32)
    s.run(None, {i.name: x})
    lat, lock = [], threading.Lock()
    end = time.time() + secs

    def caller():
        while time.time() < end:
            t0 = time.perf_counter()
            s.run(None, {i.name: x})
            with lock:
                lat.append(time.perf_counter() - t0)

    t0, c0 = time.time(), time.process_time()
    ts = [threading.Thread(target=caller) for _ in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    wall, cpu = time.time() - t0, time.process_time() - c0
    lat.sort()
    print(json.dumps({"peer": "onnxruntime", "version": onnxruntime.__version__, "batch": batch,
                      "threads": threads, "runs": len(lat), "examples_per_sec": len(lat) * batch / wall,
                      "p10_ms": 1e3 * lat[len(lat) // 10], "p50_ms": 1e3 * lat[len(lat) // 2], "p99_ms": 1e3 * lat[min(len(lat) - 1, int(0.99 * len(lat)))],
                      "cpu_ms_per_run": 1e3 * cpu / max(len(lat), 1)}))
    return 0


if __name__ == "__main__":
    cmd = sys.argv[1] if len(sys.argv) > 1 else ""
    fn = {"rows": rows, "ort": ort, "load": load, "ortbench": ortbench}.get(cmd)
    if not fn:
        sys.stderr.write(__doc__)
        sys.exit(2)
    sys.exit(fn(sys.argv[2:]) or 0)
