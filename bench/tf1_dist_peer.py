#!/usr/bin/env python3
"""One TF 1.x distributed script (between-graph replication: ClusterSpec, Server,
replica_device_setter, MonitoredTrainingSession, optionally SyncReplicasOptimizer), run on
TensorFlow (`--impl tensorflow`: tensorflow.compat.v1) or on psgraph (`--impl psgraph`:
psgraph.compat.v1): the import is the only difference. Workload: psgraph's mlp recipe
(784-256-256-10 ReLU, momentum 0.9, lr 0.05, batch 128 per worker) or, with --model cnn,
its cnn recipe (tf.layers: two 5x5 conv + 2x2 max pool blocks of 32 and 64 channels, dense
512, dense 10; momentum 0.9, lr 0.01, batch 64) on Fashion-MNIST, each worker on its share
of one epoch, fed with feed_dict from the same numpy arrays. With --sync every worker stops
at the global step of an epoch's share (StopAtStepHook), and prints its rate every 50 steps:
a TensorFlow worker left waiting for a token when the chief ends is killed after a grace
period, its last rate counted. Every worker starts training at once (the launcher's go file),
and async the chief evaluates once the global step has reached every worker's share (the
whole job's model, as psgraph train's chief evaluates).

  tf1_dist_peer.py launch --impl psgraph|tensorflow [--workers 2] [--sync] [--epochs 1] [--seed S]
    starts 1 ps + W workers on loopback, each with its TF_CONFIG, and prints one JSON line:
    aggregate examples/s (every worker's, after its first 20 steps), the chief's test
    accuracy, the global step.
  tf1_dist_peer.py task --impl ...   (one task; TF_CONFIG names it)
  tf1_dist_peer.py flops --impl ... [--model cnn]
    the FLOP of one training example (its MatMuls and convolutions, forward and backward,
    counted from the graph's shapes) and of its forward pass, as one JSON line.
  OPENBLAS_NUM_THREADS=1 tf1_dist_peer.py peak --impl psgraph
    one core's sgemm GFLOP/s (numpy's BLAS, one thread, best of short products: a loaded
    machine still shows it) and the machine's (times the cores), as one JSON line.
  tf1_dist_peer.py local --impl ... [--seed S] [--steps N]
    the recipe in one process, synchronous, from numpy-drawn initial weights: the test
    accuracy after one epoch (the two sides agree when they run the same recipe).
"""
import argparse
import gzip
import json
import os
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import time

import numpy as np

DATA = "/usr/share/datasets/fashion-mnist"


def read_idx(name):
    raw = gzip.open(os.path.join(DATA, name), "rb").read()
    nd = raw[3]
    dims = struct.unpack(">" + "I" * nd, raw[4:4 + 4 * nd])
    return np.frombuffer(raw, np.uint8, offset=4 + 4 * nd).reshape(dims)


def load():
    xtr = read_idx("train-images-idx3-ubyte.gz").reshape(-1, 784).astype(np.float32) / 255
    ytr = read_idx("train-labels-idx1-ubyte.gz").astype(np.int32)
    xte = read_idx("t10k-images-idx3-ubyte.gz").reshape(-1, 784).astype(np.float32) / 255
    yte = read_idx("t10k-labels-idx1-ubyte.gz").astype(np.int32)
    return xtr, ytr, xte, yte


def task(a):
    if a.impl == "psgraph":
        import psgraph.compat.v1 as tf
    else:
        import tensorflow.compat.v1 as tf
        tf.disable_eager_execution()
    conf = json.loads(os.environ["TF_CONFIG"])
    cluster = tf.train.ClusterSpec(conf["cluster"])
    job, index = conf["task"]["type"], conf["task"]["index"]
    cfg = tf.ConfigProto(intra_op_parallelism_threads=a.threads, inter_op_parallelism_threads=1,
                         device_filters=["/job:ps", "/job:worker/task:%d" % index])
    server = tf.train.Server(cluster, job_name=job, task_index=index, config=cfg)
    if job == "ps":
        server.join()
        return
    nw = cluster.num_tasks("worker")
    chief = index == 0
    # the run's seed: the initial weights (drawn by each side's own generator: one seed is
    # not the same weights on both) and, below, the order of the examples (the same on both)
    tf.set_random_seed(a.seed)
    with tf.device(tf.train.replica_device_setter(worker_device="/job:worker/task:%d" % index,
                                                  cluster=cluster)):
        x = tf.placeholder(tf.float32, [None, 784])
        y = tf.placeholder(tf.int32, [None])
        h = model(tf, a.model, x)
        loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=h))
        hits = tf.reduce_sum(tf.cast(tf.equal(tf.argmax(h, 1, output_type=tf.int32), y),
                                     tf.float32))
        gs = tf.train.get_or_create_global_step()
        opt = tf.train.MomentumOptimizer(a.lr or (0.01 if a.model == "cnn" else 0.05), 0.9)
        hooks = []
        if a.sync:
            opt = tf.train.SyncReplicasOptimizer(opt, replicas_to_aggregate=nw - a.backup,
                                                 total_num_replicas=nw)
        train = opt.minimize(loss, global_step=gs)
        if a.sync:
            hooks.append(opt.make_session_run_hook(chief))
    xtr, ytr, xte, yte = load()
    rng = np.random.RandomState(a.seed)
    bs = 64 if a.model == "cnn" else 128
    share = (xtr.shape[0] // nw) // bs  # this worker's steps of one epoch
    if a.sync:
        hooks.append(tf.train.StopAtStepHook(last_step=share * a.epochs))
    t0, seen, steps = None, 0, 0

    def rate():
        dt = time.perf_counter() - t0 if t0 else 0
        return {"task": index, "steps": steps,
                "examples_per_sec": round(seen / dt, 1) if dt else 0.0}
    with tf.train.MonitoredTrainingSession(master=server.target, is_chief=chief, hooks=hooks,
                                           config=cfg, save_checkpoint_secs=None,
                                           save_summaries_steps=None,
                                           log_step_count_steps=None) as sess:
        # every worker starts training at once (the launcher's go file, made once each is
        # ready): TensorFlow's non-chief polls for the chief's init every 30 s, and would else
        # train after the chief instead of beside it (a sequential run, not async)
        print(json.dumps({"ready": index}), flush=True)
        while a.go and not os.path.exists(a.go):
            time.sleep(0.05)
        epoch = 0
        while not sess.should_stop() and (a.sync or epoch < a.epochs):
            perm = rng.permutation(xtr.shape[0])[index::nw]
            epoch += 1
            for i in range(0, perm.shape[0] - bs + 1, bs):
                if sess.should_stop():
                    break
                idx = perm[i:i + bs]
                sess.run(train, {x: xtr[idx], y: ytr[idx]})
                steps += 1
                if steps == 20:
                    t0 = time.perf_counter()
                elif steps > 20:
                    seen += bs
                if a.sync and steps % 50 == 0:
                    print(json.dumps(rate()), flush=True)
        out = rate()
        if chief and not a.sync:
            # evaluate the model of the whole job, as psgraph train's chief does: the other
            # workers' last updates too (TensorFlow's non-chief starts up to 30 s after the
            # chief, psgraph's at once: evaluated at the chief's own end, the two sides saw
            # different shares of the job's updates)
            deadline = time.time() + 600
            while sess.run(gs) < share * nw * a.epochs and time.time() < deadline:
                time.sleep(0.1)
        if chief:
            # on the raw session: TensorFlow's monitored session refuses a run once a hook
            # stopped it ("Run called even after should_stop requested": the sync chief,
            # stopped by StopAtStepHook, printed no accuracy)
            def evaluate(step_context):
                raw = step_context.session
                n = sum(raw.run(hits, {x: xte[i:i + 1000], y: yte[i:i + 1000]})
                        for i in range(0, len(yte), 1000))
                return round(float(n) / len(yte), 4), int(raw.run(gs))
            out["test_accuracy"], out["global_step"] = sess.run_step_fn(evaluate)
        # said before the session closes: TensorFlow's sync chief may fail or hang in its
        # close (its queue runner's step after the last waits for gradients no worker sends)
        print(json.dumps(out), flush=True)


def model(tf, name, x):
    """The logits of the mlp or the cnn (psgraph train's recipes) on x [batch, 784]."""
    if name == "cnn":
        h = tf.reshape(x, [-1, 28, 28, 1])
        for filters in (32, 64):
            h = tf.layers.conv2d(h, filters, 5, padding="same", activation=tf.nn.relu)
            h = tf.layers.max_pooling2d(h, 2, 2)
        h = tf.layers.dense(tf.layers.flatten(h), 512, tf.nn.relu)
        return tf.layers.dense(h, 10)
    h = x
    for i, (n_in, n_out) in enumerate([(784, 256), (256, 256), (256, 10)]):
        w = tf.get_variable("w%d" % i, [n_in, n_out], initializer=tf.glorot_uniform_initializer())
        b = tf.get_variable("b%d" % i, [n_out], initializer=tf.zeros_initializer())
        h = tf.matmul(h, w) + b
        if i < 2:
            h = tf.nn.relu(h)
    return h


def local(a):
    """The recipe without the cluster: one process, synchronous, the initial weights drawn by
    numpy (seed) and loaded into the variables, the examples in the order of the cluster's
    worker 0 and 1 interleaved; the test accuracy and the last loss after one epoch, one JSON
    line. Deterministic on each side, so two sides running the same recipe agree to rounding."""
    if a.impl == "psgraph":
        import psgraph.compat.v1 as tf
    else:
        import tensorflow.compat.v1 as tf
        tf.disable_eager_execution()
    x = tf.placeholder(tf.float32, [None, 784])
    y = tf.placeholder(tf.int32, [None])
    h = model(tf, a.model, x)
    loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=h))
    hits = tf.reduce_sum(tf.cast(tf.equal(tf.argmax(h, 1, output_type=tf.int32), y), tf.float32))
    gs = tf.train.get_or_create_global_step()
    train = tf.train.MomentumOptimizer(a.lr or (0.01 if a.model == "cnn" else 0.05),
                                       0.9).minimize(loss, global_step=gs)
    xtr, ytr, xte, yte = load()
    rng = np.random.RandomState(a.seed)
    bs = 64 if a.model == "cnn" else 128
    cfg = tf.ConfigProto(intra_op_parallelism_threads=a.threads, inter_op_parallelism_threads=1)
    with tf.Session(config=cfg) as sess:
        sess.run(tf.global_variables_initializer())
        for v in sorted(tf.trainable_variables(), key=lambda v: v.name):
            shape = v.shape.as_list()
            if len(shape) < 2:  # a bias
                v.load(np.zeros(shape, np.float32), sess)
                continue
            # glorot uniform (a kernel's fans: its window times its in and out channels)
            window = int(np.prod(shape[:-2]))
            lim = np.sqrt(6.0 / (window * (shape[-2] + shape[-1])))
            v.load(rng.uniform(-lim, lim, shape).astype(np.float32), sess)
        perm = rng.permutation(xtr.shape[0])
        starts = range(0, perm.shape[0] - bs + 1, bs)
        for i in starts[:a.steps] if a.steps else starts:
            idx = perm[i:i + bs]
            _, last = sess.run([train, loss], {x: xtr[idx], y: ytr[idx]})
        n = sum(sess.run(hits, {x: xte[i:i + 1000], y: yte[i:i + 1000]})
                for i in range(0, len(yte), 1000))
        print(json.dumps({"impl": a.impl, "model": a.model, "seed": a.seed,
                          "steps": int(sess.run(gs)), "last_loss": round(float(last), 5),
                          "test_accuracy": round(float(n) / len(yte), 4)}))


# the multiply-add ops of a training step; the others (elementwise, pooling, the update) are
# memory-bound and left out, as an FMA peak counts only multiply-adds
_MULADD = ("MatMul", "Dense", "Conv2D", "Conv2DBackpropInput", "Conv2DBackpropFilter")


def _dims(t):
    return [int(d) for d in t.shape.as_list()]


def _op_flop(op):
    """2 x the multiply-adds of one MatMul (psgraph's Dense: x W + b, fused) or convolution,
    from its tensors' static shapes."""
    if op.type in ("MatMul", "Dense"):
        a = _dims(op.inputs[0])
        k = a[0] if op.type == "MatMul" and op.get_attr("transpose_a") else a[1]
        out = _dims(op.outputs[0])
        return 2 * out[0] * out[1] * k
    # Conv2D(x, W) -> y; Conv2DBackpropInput(x or its sizes, W, dy); Conv2DBackpropFilter(x,
    # W or its sizes, dy) -> dW: each is as many multiply-adds as the forward convolution
    if op.type == "Conv2D":
        kh, kw, ci, _ = _dims(op.inputs[1])
        n, ho, wo, co = _dims(op.outputs[0])
    else:
        w = op.outputs[0] if op.type == "Conv2DBackpropFilter" else op.inputs[1]
        kh, kw, ci, _ = _dims(w)
        n, ho, wo, co = _dims(op.inputs[2])
    return 2 * n * ho * wo * co * kh * kw * ci


def _reached(ops):
    """The ops a run of `ops` runs: their inputs' and control inputs' closure."""
    seen, todo = {}, list(ops)
    while todo:
        op = todo.pop()
        if op.name in seen:
            continue
        seen[op.name] = op
        todo.extend(t.op for t in op.inputs)
        todo.extend(op.control_inputs)
    return list(seen.values())


def flops(a):
    """The FLOP of one training example (forward and backward: every MatMul and convolution
    a training step runs, from the graph's shapes at a fixed batch) and of its forward pass
    alone, on the graph the task builds; one JSON line."""
    if a.impl == "psgraph":
        import psgraph.compat.v1 as tf
    else:
        import tensorflow.compat.v1 as tf
        tf.disable_eager_execution()
    bs = 64 if a.model == "cnn" else 128
    x = tf.placeholder(tf.float32, [bs, 784])
    y = tf.placeholder(tf.int32, [bs])
    h = model(tf, a.model, x)
    loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=h))
    gs = tf.train.get_or_create_global_step()
    train = tf.train.MomentumOptimizer(0.01, 0.9).minimize(loss, global_step=gs)

    def count(ops):
        by = {}
        for op in ops:
            if op.type in _MULADD:
                by[op.type] = by.get(op.type, 0) + _op_flop(op) // bs
        return by
    step, fwd = count(_reached([train])), count(_reached([loss.op]))
    print(json.dumps({"model": a.model, "impl": a.impl, "batch": bs,
                      "flop_per_example": sum(step.values()),
                      "forward_flop_per_example": sum(fwd.values()), "by_op": step}))


def peak(a):
    """One core's sgemm GFLOP/s (numpy's BLAS on one thread, 384-cube products): the best of
    many short products over a few seconds, so a loaded machine still shows a core's rate
    (a product that ran undisturbed), and the machine's: the cores times it."""
    n = 384
    rng = np.random.RandomState(0)
    x, w = rng.rand(n, n).astype(np.float32), rng.rand(n, n).astype(np.float32)
    out = np.empty((n, n), np.float32)
    best, end = float("inf"), time.time() + a.peak_secs
    while time.time() < end:
        t = time.perf_counter()
        np.matmul(x, w, out=out)
        best = min(best, time.perf_counter() - t)
    core = 2 * n ** 3 / best / 1e9
    if os.environ.get("OPENBLAS_NUM_THREADS") != "1":
        raise SystemExit("peak: run it with OPENBLAS_NUM_THREADS=1 (one core's rate)")
    print(json.dumps({"sgemm_gflops_one_core": round(core, 1), "cores": os.cpu_count(),
                      "sgemm_gflops_machine": round(core * os.cpu_count(), 1)}))


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def last_line(p, timeout, until=None):
    """The last JSON line of worker p; killed after timeout s (its last rate line kept).
    until: the timeout starts once a line holding it is read (before: no limit)."""
    killed, text = False, ""
    if until is not None:
        for line in p.stdout:
            text += line
            if until in line:
                break
    try:
        text += p.communicate(timeout=timeout)[0]
    except subprocess.TimeoutExpired:
        p.kill()
        text, killed = text + p.communicate()[0], True
    lines = [l for l in text.strip().splitlines() if l.startswith("{")]
    out = json.loads(lines[-1]) if lines else {"examples_per_sec": 0.0}
    out["killed"] = killed
    return out


def launch(a):
    transport = a.transport or ("ipc" if a.impl == "psgraph" else "tcp")
    made = []  # folders removed at the end: the sockets', the go file's
    if transport == "ipc":
        # what `psgraph launch` gives a script's tasks on one host (--transport ipc, its
        # default, as psgraph train's tasks in the bench get): Unix domain sockets in a
        # private folder; TensorFlow has only host:port
        if a.impl != "psgraph":
            raise SystemExit("--transport ipc: psgraph only (TensorFlow's tasks take host:port)")
        where = tempfile.mkdtemp(prefix="psg-")
        made.append(where)
        spec = {"ps": ["ipc://%s/ps0" % where],
                "worker": ["ipc://%s/worker%d" % (where, i) for i in range(a.workers)]}
    else:
        spec = {"ps": ["127.0.0.1:%d" % free_port()],
                "worker": ["127.0.0.1:%d" % free_port() for _ in range(a.workers)]}
    base = [sys.executable, os.path.abspath(__file__), "task", "--impl", a.impl, "--epochs",
            str(a.epochs), "--threads", str(a.threads), "--backup", str(a.backup), "--lr",
            str(a.lr), "--model", a.model, "--seed", str(a.seed)] + (["--sync"] if a.sync else [])

    def env(job, i):
        return dict(os.environ, CUDA_VISIBLE_DEVICES="", TF_CPP_MIN_LOG_LEVEL="2",
                    TF_CONFIG=json.dumps({"cluster": spec, "task": {"type": job, "index": i}}))
    made.append(tempfile.mkdtemp())
    go = os.path.join(made[-1], "go")
    base += ["--go", go]
    ps = subprocess.Popen(base, env=env("ps", 0), stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL)
    workers = [subprocess.Popen(base, env=env("worker", i), stdout=subprocess.PIPE, text=True)
               for i in range(a.workers)]
    try:
        for p in workers:  # each prints {"ready": i} once its session is made
            while True:
                line = p.stdout.readline()
                if not line or line.startswith('{"ready"'):
                    break
        open(go, "w").close()
        outs = [None] * a.workers
        # the chief's line with its accuracy, then a grace for its close
        outs[0] = last_line(workers[0], 60, until='"test_accuracy"')
        # a TF sync worker may wait for a token that never comes once the chief ended
        outs[1:] = [last_line(p, 60 if a.sync else None) for p in workers[1:]]
    finally:
        if a.impl == "tensorflow":
            ps.kill()  # tf.train.Server.join() never returns (tensorflow#4713)
        ps.wait()
        for d in made:
            shutil.rmtree(d, ignore_errors=True)
    chief = outs[0]
    print(json.dumps({"impl": a.impl, "model": a.model, "transport": transport, "ps": 1,
                      "workers": a.workers,
                      "sync": a.sync, "backup": a.backup, "epochs": a.epochs,
                      "killed": sum(1 for o in outs if o.get("killed")),
                      "examples_per_sec": round(sum(o["examples_per_sec"] for o in outs), 1),
                      "seed": a.seed, "test_accuracy": chief.get("test_accuracy"),
                      "global_step": chief.get("global_step")}), flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["launch", "task", "flops", "local", "peak"])
    ap.add_argument("--impl", choices=["psgraph", "tensorflow"], required=True)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--sync", action="store_true")
    ap.add_argument("--backup", type=int, default=0)
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--lr", type=float, default=0, help="0: 0.05 mlp, 0.01 cnn")
    ap.add_argument("--model", choices=["mlp", "cnn"], default="mlp")
    ap.add_argument("--transport", choices=["ipc", "tcp"],
                    help="(launch) the tasks' addresses: ipc (psgraph's default: `psgraph launch`'s) "
                    "or tcp (127.0.0.1 ports: TensorFlow's, the only one it has)")
    ap.add_argument("--go", default="", help="(task) start training once this file exists")
    ap.add_argument("--steps", type=int, default=0, help="(local) steps; 0: one epoch")
    ap.add_argument("--peak-secs", type=float, default=3.0, help="(peak) seconds of products")
    ap.add_argument("--seed", type=int, default=0,
                    help="the initial weights' graph seed and the examples' order")
    a = ap.parse_args()
    {"launch": launch, "task": task, "flops": flops, "local": local, "peak": peak}[a.mode](a)


if __name__ == "__main__":
    main()
