#!/usr/bin/env python3
"""The Keras peer of `psgraph train --model inception3` for time to accuracy: Keras's
InceptionV3 (TF 2.21) trained with TF's recipe as inception_distributed_train.py runs it,
on TF-format ImageNet shards read as TF's inception/image_processing.py reads them.

  inception3_keras_peer.py --data-dir DIR --classes C --size S --batch B --steps N
      [--eval-every E] [--lr 0.045] [--bn-decay 0.9997] [--seed 1] [--threads T]
      [--init-out FILE]   write the initial weights (Keras's names) and exit

- model: InceptionV3(weights=None, include_top=False, pooling='avg'), dropout 0.2 (slim's
  keep 0.8), Dense(C + 1) "predictions" (TF's background class at 0: labels 1..C as the
  shards hold them); batch-norm momentum --bn-decay (slim's 0.9997), epsilon 0.001, no scale
- loss: softmax cross-entropy against labels smoothed by 0.1, + 4e-5 x l2_loss of the
  convolution and classifier kernels (slim's weight decay)
- optimizer: TF1's RMSProp kernel (ResourceApplyRMSProp: ms starts at 1, epsilon inside the
  square root) at decay 0.9, momentum 0.9, epsilon 1.0; the rate lr x 0.94^floor(step /
  decay_steps), decay_steps = examples / batch x 2 (one replica)
- moving average: tf.train.ExponentialMovingAverage(0.9999, num_updates=step) of every
  variable (batch-norm statistics included), after each step
- input: training: decode_jpeg, sample_distorted_bounding_box over the record's boxes
  (0.1, 0.75-1.33, 0.05-1.0, 100 attempts), bilinear resize, random flip, distort_color
  (one of its two orders), [-1, 1]; evaluation: central_crop(0.875), bilinear resize
- evaluation every E steps and at the end: top-1 and top-5 of the weights and of their
  moving average on validation-*, one JSON line each.
Prints JSON lines only; a measuring instrument, not part of psgraph."""
import argparse
import glob
import json
import math
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
import keras  # noqa: E402


def parse(example):
    f = tf.io.parse_single_example(example, {
        "image/encoded": tf.io.FixedLenFeature([], tf.string),
        "image/class/label": tf.io.FixedLenFeature([], tf.int64),
        "image/object/bbox/xmin": tf.io.VarLenFeature(tf.float32),
        "image/object/bbox/ymin": tf.io.VarLenFeature(tf.float32),
        "image/object/bbox/xmax": tf.io.VarLenFeature(tf.float32),
        "image/object/bbox/ymax": tf.io.VarLenFeature(tf.float32)})
    box = tf.stack([tf.sparse.to_dense(f["image/object/bbox/" + k])
                    for k in ("ymin", "xmin", "ymax", "xmax")], axis=1)
    return f["image/encoded"], tf.cast(f["image/class/label"], tf.int32), box[tf.newaxis]


def distort_color(image, ordering):
    def order0(x):
        x = tf.image.random_brightness(x, 32. / 255.)
        x = tf.image.random_saturation(x, 0.5, 1.5)
        x = tf.image.random_hue(x, 0.2)
        return tf.image.random_contrast(x, 0.5, 1.5)

    def order1(x):
        x = tf.image.random_brightness(x, 32. / 255.)
        x = tf.image.random_contrast(x, 0.5, 1.5)
        x = tf.image.random_saturation(x, 0.5, 1.5)
        return tf.image.random_hue(x, 0.2)
    image = tf.cond(ordering == 0, lambda: order0(image), lambda: order1(image))
    return tf.clip_by_value(image, 0.0, 1.0)


def train_image(encoded, label, box, size):
    image = tf.image.convert_image_dtype(tf.io.decode_jpeg(encoded, channels=3), tf.float32)
    begin, sz, _ = tf.image.sample_distorted_bounding_box(
        tf.shape(image), bounding_boxes=box, min_object_covered=0.1,
        aspect_ratio_range=[0.75, 1.33], area_range=[0.05, 1.0], max_attempts=100,
        use_image_if_no_bounding_boxes=True)
    image = tf.slice(image, begin, sz)
    image = tf.image.resize(image, [size, size], method="bilinear")
    image = tf.image.random_flip_left_right(image)
    image = distort_color(image, tf.random.uniform([], 0, 2, dtype=tf.int32))
    return (image - 0.5) * 2.0, label


def eval_image(encoded, label, box, size):
    image = tf.image.convert_image_dtype(tf.io.decode_jpeg(encoded, channels=3), tf.float32)
    image = tf.image.central_crop(image, 0.875)
    image = tf.image.resize(image, [size, size], method="bilinear")
    return (image - 0.5) * 2.0, label


def build(classes, size, bn_decay):
    base = keras.applications.InceptionV3(weights=None, include_top=False,
                                          input_shape=(size, size, 3), pooling="avg")
    x = keras.layers.Dropout(0.2)(base.output)
    logits = keras.layers.Dense(classes + 1, name="predictions")(x)
    m = keras.Model(base.input, logits)
    for layer in m.layers:
        if isinstance(layer, keras.layers.BatchNormalization):
            layer.momentum = bn_decay
    return m


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data-dir", required=True)
    ap.add_argument("--classes", type=int, default=10)
    ap.add_argument("--size", type=int, default=75)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--eval-every", type=int, default=50)
    ap.add_argument("--lr", type=float, default=0.045)
    ap.add_argument("--bn-decay", type=float, default=0.9997)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--init-out")
    a = ap.parse_args()
    tf.config.threading.set_intra_op_parallelism_threads(a.threads)
    tf.config.threading.set_inter_op_parallelism_threads(a.threads)
    keras.utils.set_random_seed(a.seed)
    model = build(a.classes, a.size, a.bn_decay)
    if a.init_out:
        from safetensors.numpy import save_file
        save_file({w.path: np.ascontiguousarray(w.numpy()) for w in model.weights}, a.init_out)
        print(json.dumps({"init_out": a.init_out, "tensors": len(model.weights)}))
        return
    train_files = sorted(glob.glob(os.path.join(a.data_dir, "train-*")))
    val_files = sorted(glob.glob(os.path.join(a.data_dir, "validation-*")))
    n_train = sum(1 for _ in tf.data.TFRecordDataset(train_files))
    train = (tf.data.TFRecordDataset(train_files).map(parse).shuffle(n_train, seed=a.seed)
             .repeat().map(lambda e, l, b: train_image(e, l, b, a.size))
             .batch(a.batch, drop_remainder=True).prefetch(2))
    val = tf.data.TFRecordDataset(val_files).map(parse).map(
        lambda e, l, b: eval_image(e, l, b, a.size)).batch(50)
    trainable = model.trainable_variables
    decayed = [v for v in trainable if v.path.endswith("kernel")]
    ms = [tf.Variable(tf.ones_like(v.value)) for v in trainable]
    mom = [tf.Variable(tf.zeros_like(v.value)) for v in trainable]
    step = tf.Variable(0, dtype=tf.int64)
    ema = tf.train.ExponentialMovingAverage(0.9999, num_updates=step)
    averaged = [v.value for v in model.variables if v.dtype == "float32"]  # not dropout's seed
    ema.apply(averaged)
    decay_steps = max(1, int(n_train / a.batch * 2.0))
    C1 = a.classes + 1

    @tf.function
    def train_step(x, y):
        with tf.GradientTape() as tape:
            logits = model(x, training=True)
            target = tf.one_hot(y, C1) * 0.9 + 0.1 / C1
            xent = tf.reduce_mean(tf.nn.softmax_cross_entropy_with_logits(target, logits))
            loss = xent + 4e-5 * tf.add_n([tf.nn.l2_loss(v.value) for v in decayed])
        grads = tape.gradient(loss, [v.value for v in trainable])
        lr = a.lr * tf.pow(0.94, tf.floor(tf.cast(step, tf.float32) / decay_steps))
        for v, g, s, m in zip(trainable, grads, ms, mom):
            tf.raw_ops.ResourceApplyRMSProp(var=v.value.handle, ms=s.handle, mom=m.handle, lr=lr,
                                            rho=0.9, momentum=0.9, epsilon=1.0, grad=g)
        step.assign_add(1)
        ema.apply(averaged)
        return loss

    def evaluate(use_ema):
        saved = None
        if use_ema:
            saved = [v.numpy() for v in averaged]
            for v in averaged:
                v.assign(ema.average(v))
        top1 = top5 = n = 0
        for x, y in val:
            logits = model(x, training=False)
            top1 += int(tf.reduce_sum(tf.cast(tf.math.in_top_k(y, logits, 1), tf.int32)))
            top5 += int(tf.reduce_sum(tf.cast(tf.math.in_top_k(y, logits, 5), tf.int32)))
            n += int(tf.shape(y)[0])
        if saved:
            for v, s in zip(averaged, saved):
                v.assign(s)
        return top1 / n, top5 / n

    start = time.time()
    it = iter(train)
    losses = []
    for s in range(1, a.steps + 1):
        x, y = next(it)
        losses.append(float(train_step(x, y)))
        if not math.isfinite(losses[-1]):
            print(json.dumps({"step": s, "error": "loss %g" % losses[-1]}))
            sys.exit(1)
        if s % a.eval_every == 0 or s == a.steps:
            t1, t5 = evaluate(False)
            e1, e5 = evaluate(True)
            print(json.dumps({"peer": "keras", "step": s, "loss": sum(losses) / len(losses),
                              "top1": t1, "top5": t5, "top1_ema": e1, "top5_ema": e5,
                              "wall_sec": round(time.time() - start, 1),
                              "tf": tf.__version__, "keras": keras.__version__}), flush=True)
            losses = []


if __name__ == "__main__":
    main()
