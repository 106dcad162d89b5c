"""A model the C table does not have: a dense autoencoder of Fashion-MNIST in TF 1.x's graph
API on psgraph. 784 -> 256 -> 32 -> 256 -> 784 (ReLU, sigmoid output), trained with Adam on
the pixels' binary cross-entropy; prints the test set's mean squared reconstruction error
beside that of the mean image (the error a model that learned nothing of each image makes).

  /usr/bin/python3 examples/python/autoencoder.py [--epochs 3] [--code 32] [--logdir DIR]
"""
import json
import time

import numpy as np

import psgraph.compat.v1 as tf
from psgraph import data

flags = tf.app.flags
flags.DEFINE_integer("epochs", 3, "passes over the training set")
flags.DEFINE_integer("steps", 0, "stop after this many steps (0: the epochs)")
flags.DEFINE_integer("batch", 128, "batch size")
flags.DEFINE_integer("code", 32, "the code's width")
flags.DEFINE_float("lr", 0.001, "Adam's learning rate")
flags.DEFINE_integer("threads", 1, "compute threads")
flags.DEFINE_integer("seed", 1, "data order and initial values")
flags.DEFINE_string("logdir", "", "TensorBoard summaries here")
FLAGS = flags.FLAGS


def main(_):
    tf.set_random_seed(FLAGS.seed)
    images = tf.placeholder(tf.float32, [None, 28, 28, 1])
    x = tf.layers.flatten(images)
    with tf.variable_scope("encoder"):
        h = tf.layers.dense(x, 256, tf.nn.relu)
        code = tf.layers.dense(h, FLAGS.code, tf.nn.relu)
    with tf.variable_scope("decoder"):
        h = tf.layers.dense(code, 256, tf.nn.relu)
        logits = tf.layers.dense(h, 784)
    recon = tf.sigmoid(logits)
    loss = tf.losses.sigmoid_cross_entropy(x, logits)
    mse = tf.reduce_mean(tf.square(recon - x))
    gs = tf.train.get_or_create_global_step()
    train_op = tf.train.AdamOptimizer(FLAGS.lr).minimize(loss, global_step=gs)
    tf.summary.scalar("loss", loss)
    tf.summary.histogram("code", code)
    summaries = tf.summary.merge_all()
    train_set = data.fashion_mnist(True)
    test_x, _ = data.fashion_mnist(False).arrays()
    batches = train_set.batches(FLAGS.batch, seed=FLAGS.seed, num_epochs=FLAGS.epochs)
    writer = tf.summary.FileWriter(FLAGS.logdir) if FLAGS.logdir else None
    mean_image = tf.reduce_mean(x, axis=0)
    baseline = tf.reduce_mean(tf.square(x - mean_image))
    steps, t_train = 0, 0.0
    with tf.Session(config=tf.ConfigProto(intra_op_parallelism_threads=FLAGS.threads)) as sess:
        sess.run(tf.global_variables_initializer())
        for bx, _ in batches:
            if FLAGS.steps and steps == FLAGS.steps:
                break
            t0 = time.perf_counter()
            if writer and steps % 100 == 0:
                last, _, s = sess.run([loss, train_op, summaries], {images: bx})
                writer.add_summary(s, steps)
            else:
                last, _ = sess.run([loss, train_op], {images: bx})
            t_train += time.perf_counter() - t0
            steps += 1
            if steps % batches.batches_per_epoch == 0:
                err = sess.run(mse, {images: test_x})
                print("epoch %d  loss %.4f  test reconstruction mse %.5f" % (
                    steps // batches.batches_per_epoch, last, err), flush=True)
        err, base = sess.run([mse, baseline], {images: test_x})
    if writer:
        writer.close()
    print(json.dumps({"event": "done", "model": "autoencoder", "steps": steps, "final_loss": round(float(last), 6),
                      "test_mse": round(float(err), 5), "mean_image_mse": round(float(base), 5),
                      "examples_per_sec": round(steps * FLAGS.batch / t_train, 1)}), flush=True)
    np.testing.assert_array_less(err, base)  # it learned something of each image


if __name__ == "__main__":
    tf.app.run()
