"""The Python script of tests/test_launch_k8s.sh's pods (`psgraph launch --k8s -- python3
k8s_job.py --train_dir DIR`): TF_CONFIG as the pod's command sets it, a dense layer of 600 x
300 (720 KB: the replica setter's two row shards) and one of 2 trained by
MonitoredTrainingSession for 40 global steps on a separable synthetic task; checkpoints in
--train_dir (the ps's --logdir there too). Prints one JSON line when done."""
import argparse
import json

import numpy as np

import psgraph.compat.v1 as tf

ap = argparse.ArgumentParser()
ap.add_argument("--train_dir", required=True)
ap.add_argument("--steps", type=int, default=40)
a = ap.parse_args()
r = tf.distribute.cluster_resolver.TFConfigClusterResolver()
server = tf.train.Server(r.cluster_spec(), r.task_type, r.task_id)
tf.set_random_seed(1)
with tf.device(tf.train.replica_device_setter(cluster=r.cluster_spec())):
    global_step = tf.train.get_or_create_global_step()
    x = tf.placeholder(tf.float32, [None, 600], name="x")
    y = tf.placeholder(tf.int32, [None], name="y")
    logits = tf.layers.dense(tf.layers.dense(x, 300, tf.nn.relu), 2)
    loss = tf.losses.sparse_softmax_cross_entropy(y, logits)
    train = tf.train.MomentumOptimizer(0.01, 0.9).minimize(loss, global_step=global_step)
rng = np.random.default_rng(1 + r.task_id)
step, value = 0, float("nan")
with tf.train.MonitoredTrainingSession(master=server.target, is_chief=r.task_id == 0,
                                       checkpoint_dir=a.train_dir, log_step_count_steps=0,
                                       hooks=[tf.train.StopAtStepHook(last_step=a.steps)]) as sess:
    while not sess.should_stop():
        xs = rng.normal(size=(32, 600)).astype(np.float32)
        _, value, step = sess.run([train, loss, global_step], {x: xs, y: (xs[:, 0] > 0).astype(np.int32)})
print(json.dumps({"event": "done", "task": r.task_id, "global_step": int(step), "loss": float(value)}),
      flush=True)
