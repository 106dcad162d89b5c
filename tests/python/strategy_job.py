"""One worker of tests/python/test_strategy.py's jobs (TF_CONFIG names it): a small MLP
under psgraph.train.Strategy, trained on a fixed sequence of batches of its own; the chief
waits for the job's last update and writes the variables to an .npz (with a local-model
strategy, its own copy, and the ps's global or center copy as ps_<name>).

    strategy_job.py STEPS OUT.npz "ssp --staleness 0" [EXPECTED_GLOBAL_STEP [LR]]

The strategy "replicas" is TF's tf.train.SyncReplicasOptimizer(opt, workers, workers) under
tf.train.replica_device_setter: psgraph's sync strategy with no backup worker."""
import json
import sys
import time

import numpy as np

import psgraph
import psgraph.compat.v1 as tf

steps, out, spec = int(sys.argv[1]), sys.argv[2], sys.argv[3]
want = int(sys.argv[4]) if len(sys.argv) > 4 else steps
lr = float(sys.argv[5]) if len(sys.argv) > 5 else 0.1
replicas = spec == "replicas"
strategy = psgraph.train.Strategy.from_flags("sync" if replicas else spec, timeout_ms=60000)
r = tf.distribute.cluster_resolver.TFConfigClusterResolver()
server = tf.train.Server(r.cluster_spec(), r.task_type, r.task_id)
index = r.task_id
chief = index == 0
init = np.random.default_rng(7)  # the same initial values in every job
# the replica setter; a local-model strategy's keeps the model on this worker
with tf.device(strategy.replica_device_setter(cluster=r.cluster_spec())):
    x = tf.placeholder(tf.float32, [16, 8], name="x")
    y = tf.placeholder(tf.int64, [16], name="y")
    w1 = tf.Variable((init.standard_normal((8, 16)) * 0.3).astype(np.float32), name="w1")
    b1 = tf.Variable(np.zeros(16, np.float32), name="b1")
    w2 = tf.Variable((init.standard_normal((16, 4)) * 0.3).astype(np.float32), name="w2")
    b2 = tf.Variable(np.zeros(4, np.float32), name="b2")
    logits = tf.matmul(tf.nn.relu(tf.matmul(x, w1) + b1), w2) + b2
    loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))
    gs = tf.train.get_or_create_global_step()
    if replicas:
        n = r.cluster_spec().num_tasks("worker")
        opt = tf.train.SyncReplicasOptimizer(tf.train.GradientDescentOptimizer(lr), n, n)
    else:
        opt = strategy.optimizer(tf.train.GradientDescentOptimizer(lr))
    train_op = opt.minimize(loss, global_step=gs)
data = np.random.default_rng(100 + index)  # this worker's batches, the same in every job
batches = [(data.standard_normal((16, 8)).astype(np.float32), data.integers(0, 4, 16))
           for _ in range(steps)]
losses = []
with tf.train.MonitoredTrainingSession(master=server.target, is_chief=chief,
                                       hooks=[opt.make_session_run_hook(chief)]) as sess:
    for xb, yb in batches:
        _, lv = sess.run([train_op, loss], {x: xb, y: yb})
        losses.append(float(lv))
    if chief:
        deadline = time.time() + 120
        while sess.run(gs) < want and time.time() < deadline:
            time.sleep(0.05)
        fetch = {"w1": w1, "b1": b1, "w2": w2, "b2": b2, "global_step": gs}
        for v in tf.global_variables():  # local_sgd/global/w1, easgd/center/w1, ...
            where, _, own = v.op.name.rpartition("/")
            if where in ("local_sgd/global", "easgd/center") and own in fetch:
                fetch["ps_" + own] = v
        values = sess.run(fetch)
        np.savez(out, **values)
print(json.dumps({"event": "done", "worker": index, "steps": len(losses),
                  "global_step": int(values["global_step"]) if chief else None,
                  "first_loss": losses[0], "last_loss": losses[-1], "stats": opt.stats}),
      flush=True)
