"""Distributed training in TensorFlow 1.x's style (TF's mnist_replica.py, between-graph
replication), on psgraph: only the import differs. Every worker builds the same graph under
tf.train.replica_device_setter (the variables on the ps tasks), trains its own replica on
its share of Fashion-MNIST, asynchronously, or with --sync through
tf.train.SyncReplicasOptimizer (psgraph's sync replicas; --replicas_to_aggregate below the
workers leaves backup workers, whose stale gradients are dropped). The chief (worker 0)
initializes the variables or restores the newest checkpoint of --train_dir. --model cnn
trains psgraph train's cnn instead of the mlp (with --sync --replicas_to_aggregate 2 over 3
workers: sync replicas with one backup worker).

The cluster comes from TF_CONFIG (as `psgraph launch` sets it), or from --ps_hosts,
--worker_hosts, --job_name and --task_index:

  psgraph launch --ps 1 --workers 2 -- python3 examples/python/mnist_replica.py --train_steps 400
  psgraph launch --ps 1 --workers 3 -- python3 examples/python/mnist_replica.py --model cnn \
      --sync --replicas_to_aggregate 2 --train_steps 100
"""
import json
import os
import sys
import time

import psgraph.compat.v1 as tf
from psgraph import data

flags = tf.app.flags
flags.DEFINE_string("ps_hosts", "", "comma-separated host:port of the ps tasks (or TF_CONFIG)")
flags.DEFINE_string("worker_hosts", "", "comma-separated host:port of the workers")
flags.DEFINE_string("job_name", "", "ps or worker")
flags.DEFINE_integer("task_index", -1, "this task's index in its job")
flags.DEFINE_string("model", "mlp", "mlp (two hidden layers) or cnn (psgraph train's cnn)")
flags.DEFINE_integer("hidden_units", 256, "units of each of the mlp's two hidden layers")
flags.DEFINE_integer("train_steps", 400, "global steps to train (all workers together)")
flags.DEFINE_integer("batch_size", 0, "batch size of each worker (0: 128 mlp, 64 cnn)")
flags.DEFINE_float("learning_rate", 0, "momentum SGD's rate (0: 0.05 mlp, 0.01 cnn)")
flags.DEFINE_boolean("sync_replicas", False, "aggregate the workers' gradients each step")
flags.DEFINE_boolean("sync", False, "the same as --sync_replicas")
flags.DEFINE_integer("replicas_to_aggregate", 0, "gradients per step in sync mode (0: all)")
flags.DEFINE_string("train_dir", "", "checkpoints and summaries (the chief writes them)")
flags.DEFINE_integer("save_checkpoint_steps", 0, "a checkpoint every N global steps (0: 600 s)")
flags.DEFINE_integer("operation_timeout_ms", 0, "a step fails after this long (0: 30 s)")
flags.DEFINE_string("data_dir", data.FASHION_MNIST, "Fashion-MNIST's IDX files")
flags.DEFINE_integer("seed", 1, "initial values and data order")
flags.DEFINE_integer("eval_examples", 0, "the chief's test accuracy on the first N test images "
                     "(0: all 10,000)")
FLAGS = flags.FLAGS


def cluster_and_task():
    """(ClusterSpec, job, index) from the flags, else from TF_CONFIG."""
    if FLAGS.ps_hosts:
        spec = {"ps": FLAGS.ps_hosts.split(","), "worker": FLAGS.worker_hosts.split(",")}
        return tf.train.ClusterSpec(spec), FLAGS.job_name, FLAGS.task_index
    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    if not resolver.task_type:
        sys.exit("mnist_replica.py: give --ps_hosts, --worker_hosts, --job_name and "
                 "--task_index, or TF_CONFIG (psgraph launch sets it)")
    return resolver.cluster_spec(), resolver.task_type, resolver.task_id


def model(images):
    """The logits of --model: the mlp, or the cnn of `psgraph train --model cnn` (two 5x5
    conv + 2x2 max pool blocks of 32 and 64 channels, dense 512, dense 10)."""
    if FLAGS.model == "cnn":
        x = images
        for i, filters in enumerate((32, 64)):
            x = tf.layers.conv2d(x, filters, 5, padding="same", activation=tf.nn.relu,
                                 name="conv%d" % (i + 1))
            x = tf.layers.max_pooling2d(x, 2, 2)
        x = tf.layers.dense(tf.layers.flatten(x), 512, tf.nn.relu, name="fc1")
        return tf.layers.dense(x, 10, name="fc2")
    if FLAGS.model != "mlp":
        sys.exit("mnist_replica.py: --model %s: mlp or cnn" % FLAGS.model)
    x = tf.layers.flatten(images)
    x = tf.layers.dense(x, FLAGS.hidden_units, tf.nn.relu, name="fc1")
    x = tf.layers.dense(x, FLAGS.hidden_units, tf.nn.relu, name="fc2")
    return tf.layers.dense(x, 10, name="fc3")


def main(_):
    tf.logging.set_verbosity(tf.logging.INFO)
    cluster, job, index = cluster_and_task()
    # the server's Recvs wait as long as a step may (psgraph: at least 80 s)
    server = tf.train.Server(cluster, job_name=job, task_index=index,
                             config=tf.ConfigProto(device_filters=["/job:ps"],
                                                   operation_timeout_in_ms=FLAGS.operation_timeout_ms))
    if job == "ps":
        server.join()
        return
    num_workers = cluster.num_tasks("worker")
    is_chief = index == 0
    sync = FLAGS.sync_replicas or FLAGS.sync
    tf.set_random_seed(FLAGS.seed)
    with tf.device(tf.train.replica_device_setter(
            worker_device="/job:worker/task:%d" % index, cluster=cluster)):
        global_step = tf.train.get_or_create_global_step()
        images = tf.placeholder(tf.float32, [None, 28, 28, 1], name="images")
        labels = tf.placeholder(tf.int32, [None], name="labels")
        logits = model(images)
        loss = tf.losses.sparse_softmax_cross_entropy(labels, logits)
        correct = tf.reduce_sum(tf.cast(tf.equal(tf.argmax(logits, 1, output_type=tf.int32),
                                                 labels), tf.float32))
        cnn = FLAGS.model == "cnn"
        opt = tf.train.MomentumOptimizer(FLAGS.learning_rate or (0.01 if cnn else 0.05), 0.9)
        hooks = [tf.train.StopAtStepHook(last_step=FLAGS.train_steps)]
        if sync:
            # psgraph's timeout_ms: tokens and takes wait 3/4 of the step deadline, as
            # psgraph train's (60 s without one)
            wait = {"timeout_ms": FLAGS.operation_timeout_ms * 3 // 4} \
                if FLAGS.operation_timeout_ms else {}
            opt = tf.train.SyncReplicasOptimizer(
                opt, replicas_to_aggregate=FLAGS.replicas_to_aggregate or num_workers,
                total_num_replicas=num_workers, **wait)
        train_op = opt.minimize(loss, global_step=global_step)
        if sync:
            hooks.append(opt.make_session_run_hook(is_chief))
        tf.summary.scalar("loss", loss)

    train_set = data.fashion_mnist(True, FLAGS.data_dir)
    batches = train_set.batches(FLAGS.batch_size or (64 if cnn else 128), seed=FLAGS.seed + index)
    steps, examples, t0, last, first = 0, 0, None, float("nan"), float("nan")
    config = tf.ConfigProto(device_filters=["/job:ps", "/job:worker/task:%d" % index],
                            operation_timeout_in_ms=FLAGS.operation_timeout_ms)
    ckpt = dict(save_checkpoint_steps=FLAGS.save_checkpoint_steps) if FLAGS.save_checkpoint_steps \
        else {}
    with tf.train.MonitoredTrainingSession(master=server.target, is_chief=is_chief,
                                           checkpoint_dir=FLAGS.train_dir or None,
                                           hooks=hooks, log_step_count_steps=0, config=config,
                                           **ckpt) as sess:
        while not sess.should_stop():
            x_, y_ = next(batches)
            last, _ = sess.run([loss, train_op], {images: x_, labels: y_})
            steps += 1
            if steps == 1:
                first = last
            if steps == 20:
                t0 = time.perf_counter()
            elif steps > 20:
                examples += len(y_)
        elapsed = time.perf_counter() - t0 if t0 else 0.0
        result = {"event": "done", "task": "worker%d" % index, "model": FLAGS.model, "sync": sync,
                  "local_steps": steps, "first_loss": round(float(first), 6),
                  "final_loss": round(float(last), 6),
                  "examples_per_sec": round(examples / elapsed, 1) if elapsed else 0}
        if sync:  # this worker's gradients the accumulators kept, and the stale ones dropped
            result["gradients_used"] = hooks[-1].used
            result["gradients_dropped"] = hooks[-1].dropped
        if is_chief:
            test = data.fashion_mnist(False, FLAGS.data_dir)
            tx, ty = test.slice(0, min(FLAGS.eval_examples or len(test), len(test)))
            hits = sum(sess.run(correct, {images: tx[i:i + 1000], labels: ty[i:i + 1000]})
                       for i in range(0, len(ty), 1000))
            result["test_accuracy"] = round(float(hits) / len(ty), 4)
            result["global_step"] = int(sess.run(global_step))
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    tf.app.run()
