"""A worker of tests/python/test_dist.py's files test (TF_CONFIG names the cluster): psgraph
train's mlp (its variable names: model/fc1/weights, ...) trained by MonitoredTrainingSession
into checkpoint_dir, which also gets the chief's summaries (the loss every 5 steps) and one
traced step (RunOptions FULL_TRACE) as timeline.json: the files a test reads with psgraph's
tools.

    files_job.py DIR STEPS"""
import json
import os
import sys

import psgraph.compat.v1 as tf
from psgraph import data, timeline

logdir, steps = sys.argv[1], int(sys.argv[2])
r = tf.distribute.cluster_resolver.TFConfigClusterResolver()
server = tf.train.Server(r.cluster_spec(), r.task_type, r.task_id)
chief = r.task_id == 0
tf.set_random_seed(1)
with tf.device(tf.train.replica_device_setter(cluster=r.cluster_spec())):
    global_step = tf.train.get_or_create_global_step()
    images = tf.placeholder(tf.float32, [None, 28, 28, 1], name="images")
    labels = tf.placeholder(tf.int32, [None], name="labels")
    h = tf.reshape(images, [-1, 784])
    with tf.variable_scope("model"):
        for name, units in (("fc1", 256), ("fc2", 256), ("fc3", 10)):
            with tf.variable_scope(name):
                w = tf.get_variable("weights", [h.shape[1], units],
                                    initializer=tf.glorot_uniform_initializer())
                b = tf.get_variable("biases", [units], initializer=tf.zeros_initializer())
            h = tf.matmul(h, w) + b
            if name != "fc3":
                h = tf.nn.relu(h)
    loss = tf.losses.sparse_softmax_cross_entropy(labels, h)
    train = tf.train.MomentumOptimizer(0.05, 0.9).minimize(loss, global_step=global_step)
    tf.summary.scalar("loss", loss)

batches = data.fashion_mnist(True).batches(128, seed=1 + r.task_id)
hooks = [tf.train.StopAtStepHook(last_step=steps)]
with tf.train.MonitoredTrainingSession(master=server.target, is_chief=chief, checkpoint_dir=logdir,
                                       hooks=hooks, save_summaries_steps=5,
                                       save_checkpoint_steps=steps // 2,
                                       log_step_count_steps=0) as sess:
    local = 0
    while not sess.should_stop():
        x, y = next(batches)
        local += 1
        if chief and local == 1:  # the chief may run only a few of the steps
            meta = tf.RunMetadata()
            sess.run(train, {images: x, labels: y}, run_metadata=meta,
                     options=tf.RunOptions(trace_level=tf.RunOptions.FULL_TRACE))
            with open(os.path.join(logdir, "timeline.json"), "w") as f:
                f.write(timeline.Timeline(meta.step_stats).generate_chrome_trace_format())
        else:
            sess.run(train, {images: x, labels: y})
print(json.dumps({"event": "done", "task": r.task_id, "local_steps": local}), flush=True)
