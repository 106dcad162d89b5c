"""The mlp of `psgraph train --model mlp` in TF 1.x's graph API (tf.layers) on psgraph:
784 -> 256 -> 256 -> 10, ReLU, momentum 0.9, lr 0.05, batch 128, on Fashion-MNIST.

  /usr/bin/python3 examples/python/mlp.py [--epochs 3] [--init_from DIR/model.ckpt-0] [--logdir DIR]
"""
import psgraph.compat.v1 as tf

import fashion_common as common

C_NAMES = ["model/fc%d/%s" % (i, w) for i in (1, 2, 3) for w in ("weights", "biases")]


def build(images):
    x = tf.layers.flatten(images)
    for units, fan_in in ((256, 784), (256, 256)):
        init = common.torch_init(fan_in)
        x = tf.layers.dense(x, units, tf.nn.relu, kernel_initializer=init, bias_initializer=init)
    init = common.torch_init(256)
    return tf.layers.dense(x, 10, kernel_initializer=init, bias_initializer=init)


def main(_):
    common.train("mlp", build, 128, 0.05, C_NAMES)


if __name__ == "__main__":
    tf.app.run()
