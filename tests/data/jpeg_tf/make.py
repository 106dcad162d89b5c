#!/usr/bin/env python3
"""Makes the JPEGs of tests/test_jpeg_tf.c with PIL and their reference pixels with
TensorFlow 2.21's decode_jpeg(channels=3): its default (dct_method "", which is
INTEGER_FAST) into NAME.fast.ppm and dct_method="INTEGER_ACCURATE" into NAME.accurate.ppm.
Run once in a venv with tensorflow-cpu==2.21.0 and pillow (the files are committed):
  python3 -m venv V && V/bin/pip install tensorflow-cpu==2.21.0 pillow
  V/bin/python tests/data/jpeg_tf/make.py tests/data/jpeg_tf"""
import os
import sys

os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
import numpy as np
import tensorflow as tf
from PIL import Image

out = sys.argv[1]
assert tf.__version__.startswith("2.21"), tf.__version__
h, w = 33, 47  # odd: partial 8x8 blocks and 16x16 MCUs at the right and bottom edges
y, x = np.mgrid[0:h, 0:w]
rng = np.random.default_rng(37)
rgb = np.stack([(x * 5) % 256, (y * 7) % 256, ((x + y) * 3) % 256], -1)
rgb = np.clip(rgb + rng.integers(-50, 50, rgb.shape), 0, 255).astype(np.uint8)
im = Image.fromarray(rgb, "RGB")
files = {
    "baseline.jpg": lambda p: im.save(p, quality=90),  # YCbCr 4:2:0
    "progressive.jpg": lambda p: im.save(p, quality=85, progressive=True),
    "s444.jpg": lambda p: im.save(p, quality=92, subsampling=0),
    "gray.jpg": lambda p: im.convert("L").save(p, quality=90),
    "cmyk.jpg": lambda p: im.convert("CMYK").save(p, quality=90),  # Adobe marker, inverted
}


def ppm(path, a):
    with open(path, "wb") as f:
        f.write(b"P6\n%d %d\n255\n" % (a.shape[1], a.shape[0]) + a.astype(np.uint8).tobytes())


for name, save in files.items():
    p = os.path.join(out, name)
    save(p)
    data = open(p, "rb").read()
    stem = name[:-4]
    ppm(os.path.join(out, stem + ".fast.ppm"), tf.io.decode_jpeg(data, channels=3).numpy())
    ppm(os.path.join(out, stem + ".accurate.ppm"),
        tf.io.decode_jpeg(data, channels=3, dct_method="INTEGER_ACCURATE").numpy())
    d = tf.io.decode_jpeg(data, channels=3).numpy()
    assert (d == tf.io.decode_jpeg(data, channels=3, dct_method="INTEGER_FAST").numpy()).all()
    assert (d == tf.io.decode_image(data, channels=3).numpy()).all()
print("written to", out, "with TensorFlow", tf.__version__)
