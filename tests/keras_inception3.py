#!/usr/bin/env python3
"""Keras's InceptionV3 (TF 2.21, keras.applications) beside psgraph's, on the same weights.
  keras_inception3.py make DIR SIZE CLASSES SEED
      a fresh InceptionV3(weights=None, classifier_activation=None) with random batch-norm
      statistics and betas, its weights as DIR/keras.safetensors under Keras's own paths
      (conv2d_5/kernel, batch_normalization_5/beta, predictions/bias, ...), an image in
      [-1, 1] as DIR/image.f32 (1, SIZE, SIZE, 3) and Keras's logits of it (inference) as
      DIR/keras_logits.f32
  keras_inception3.py load DIR SIZE CLASSES NAMES.json PSGRAPH.safetensors
      psgraph's variables (slim names) into a fresh Keras model through the name map that
      `psgraph train --model inception3 --print-keras-names` prints, and the max relative
      difference of its logits of DIR/image.f32 from DIR/keras_logits.f32, as a JSON line
Only this test's venv has TensorFlow; psgraph's numbers are computed by psgraph."""
import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import numpy as np  # noqa: E402
import keras  # noqa: E402
from safetensors.numpy import load_file, save_file  # noqa: E402


def model(size, classes):
    return keras.applications.InceptionV3(weights=None, include_top=True,
                                          input_shape=(size, size, 3), classes=classes,
                                          classifier_activation=None)


def make(d, size, classes, seed):
    keras.utils.set_random_seed(seed)
    m = model(size, classes)
    rng = np.random.default_rng(seed)
    for layer in m.layers:  # statistics a trained model has, so that every weight matters
        if isinstance(layer, keras.layers.BatchNormalization):
            beta, mean, var = layer.get_weights()
            layer.set_weights([rng.normal(0, 0.1, beta.shape).astype(np.float32),
                               rng.normal(0, 0.1, mean.shape).astype(np.float32),
                               rng.uniform(0.5, 1.5, var.shape).astype(np.float32)])
    weights = {w.path: np.ascontiguousarray(w.numpy()) for w in m.weights}
    save_file(weights, os.path.join(d, "keras.safetensors"))
    x = rng.uniform(-1, 1, (1, size, size, 3)).astype(np.float32)
    x.tofile(os.path.join(d, "image.f32"))
    logits = np.asarray(m(x, training=False), dtype=np.float32)
    logits.tofile(os.path.join(d, "keras_logits.f32"))
    print(json.dumps({"keras": keras.__version__, "tensors": len(weights),
                      "logits": [round(float(v), 5) for v in logits.ravel()[:4]]}))


def load(d, size, classes, names_path, ours):
    names = json.load(open(names_path))
    tensors = load_file(ours)
    m = model(size, classes)
    by_path = {w.path: w for w in m.weights}
    n = 0
    for slim, path in names.items():
        if path is None:
            continue
        by_path[path].assign(tensors[slim])
        n += 1
    x = np.fromfile(os.path.join(d, "image.f32"), dtype=np.float32).reshape(1, size, size, 3)
    want = np.fromfile(os.path.join(d, "keras_logits.f32"), dtype=np.float32)
    got = np.asarray(m(x, training=False), dtype=np.float32).ravel()
    rel = float(np.max(np.abs(got - want)) / max(np.max(np.abs(want)), 1e-6))
    print(json.dumps({"assigned": n, "of": len(by_path), "max_relative_difference": rel}))


if __name__ == "__main__":
    if sys.argv[1] == "make":
        make(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]))
    else:
        load(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5], sys.argv[6])
