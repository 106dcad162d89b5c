"""What the Fashion-MNIST examples share: their flags, the initializers of the C models
(PyTorch's: uniform in +-1/sqrt(fan_in)), the training loop with psgraph train's timing
(examples/s after the first 20 steps, evaluation excluded) and one JSON line at the end.
A TF 1.x user would write the same loop; only the import differs."""
import json
import math
import time

import psgraph.compat.v1 as tf
from psgraph import data

flags = tf.app.flags
flags.DEFINE_integer("epochs", 3, "passes over the training set")
flags.DEFINE_integer("steps", 0, "stop after this many steps (0: the epochs)")
flags.DEFINE_integer("batch", 0, "batch size (0: the model's)")
flags.DEFINE_float("lr", 0.0, "learning rate (0: the model's)")
flags.DEFINE_float("momentum", 0.9, "momentum")
flags.DEFINE_integer("seed", 1, "data order and initial values")
flags.DEFINE_integer("threads", 1, "compute threads (intra_op_parallelism_threads)")
flags.DEFINE_string("init_from", "", "start from this checkpoint of `psgraph train --steps 0 "
                    "--logdir DIR` (the C model's initial values)")
flags.DEFINE_string("logdir", "", "TensorBoard summaries and checkpoints here")
flags.DEFINE_string("data_dir", data.FASHION_MNIST, "Fashion-MNIST's IDX files")
flags.DEFINE_integer("test_examples", 0, "evaluate on the first N test examples (0: all 10000)")
FLAGS = flags.FLAGS

WARMUP = 20


def torch_init(fan_in):
    """PyTorch's default init of Linear and Conv2d, which the C models use."""
    b = 1.0 / math.sqrt(fan_in)
    return tf.random_uniform_initializer(-b, b)


def train(name, build, default_batch, default_lr, c_names):
    """Builds the model (build(images) -> logits and its variables in C's order), trains it
    with momentum on Fashion-MNIST, evaluates after each epoch, prints one JSON line."""
    tf.set_random_seed(FLAGS.seed)
    batch = FLAGS.batch or default_batch
    lr = FLAGS.lr or default_lr
    images = tf.placeholder(tf.float32, [None, 28, 28, 1], name="images")
    labels = tf.placeholder(tf.int32, [None], name="labels")
    logits = build(images)
    loss = tf.losses.sparse_softmax_cross_entropy(labels, logits)
    correct = tf.reduce_sum(tf.cast(tf.equal(tf.argmax(logits, 1, output_type=tf.int32), labels),
                                    tf.float32))
    global_step = tf.train.get_or_create_global_step()
    train_op = tf.train.MomentumOptimizer(lr, FLAGS.momentum).minimize(loss, global_step=global_step)
    tf.summary.scalar("loss", loss)
    summaries = tf.summary.merge_all()
    model_vars = tf.trainable_variables()
    train_set = data.fashion_mnist(True, FLAGS.data_dir)
    test_set = data.fashion_mnist(False, FLAGS.data_dir)
    test_x, test_y = test_set.slice(0, FLAGS.test_examples or len(test_set))
    batches = train_set.batches(batch, seed=FLAGS.seed)
    per_epoch = batches.batches_per_epoch
    total = FLAGS.steps or per_epoch * FLAGS.epochs
    config = tf.ConfigProto(intra_op_parallelism_threads=FLAGS.threads, inter_op_parallelism_threads=1)
    writer = tf.summary.FileWriter(FLAGS.logdir) if FLAGS.logdir else None
    with tf.Session(config=config) as sess:
        sess.run(tf.global_variables_initializer())
        if FLAGS.init_from:
            tf.train.Saver(dict(zip(c_names, model_vars))).restore(sess, FLAGS.init_from)

        def evaluate():
            hits = 0.0
            for i in range(0, len(test_y), 1000):
                hits += sess.run(correct, {images: test_x[i:i + 1000], labels: test_y[i:i + 1000]})
            return hits / len(test_y)

        steady, steady_steps, acc, last = 0.0, 0, 0.0, float("nan")
        for step in range(total):
            x, y = next(batches)
            t0 = time.perf_counter()
            if writer and step % 100 == 0:
                last, _, s = sess.run([loss, train_op, summaries], {images: x, labels: y})
                writer.add_summary(s, step)
            else:
                last, _ = sess.run([loss, train_op], {images: x, labels: y})
            if step >= WARMUP:
                steady += time.perf_counter() - t0
                steady_steps += 1
            if (step + 1) % per_epoch == 0 or step + 1 == total:
                acc = evaluate()
                print("epoch %.2f  loss %.4f  test accuracy %.4f" % ((step + 1) / per_epoch, last, acc),
                      flush=True)
        if FLAGS.logdir:
            tf.train.Saver().save(sess, FLAGS.logdir + "/model.ckpt", global_step=global_step)
    if writer:
        writer.close()
    print(json.dumps({"event": "done", "model": name, "steps": total, "batch": batch,
                      "threads": FLAGS.threads, "final_loss": round(float(last), 6),
                      "test_accuracy": round(acc, 4),
                      "examples_per_sec": round(steady_steps * batch / steady, 1) if steady else 0}),
          flush=True)
