"""The cnn of `psgraph train --model cnn` in TF 1.x's graph API (tf.layers) on psgraph: two
5x5 conv (SAME, ReLU) + 2x2 max pool blocks of 32 and 64 channels, dense 512 ReLU, dense 10;
momentum 0.9, lr 0.01, batch 64, on Fashion-MNIST.

  /usr/bin/python3 examples/python/cnn.py [--epochs 3] [--init_from DIR/model.ckpt-0] [--logdir DIR]
"""
import psgraph.compat.v1 as tf

import fashion_common as common

C_NAMES = ["model/%s/%s" % (layer, w) for layer in ("conv1", "conv2", "fc1", "fc2")
           for w in ("weights", "biases")]


def build(images):
    x = images
    for filters, fan_in in ((32, 25 * 1), (64, 25 * 32)):
        init = common.torch_init(fan_in)
        x = tf.layers.conv2d(x, filters, 5, padding="same", activation=tf.nn.relu,
                             kernel_initializer=init, bias_initializer=init)
        x = tf.layers.max_pooling2d(x, 2, 2)
    x = tf.layers.flatten(x)
    init = common.torch_init(7 * 7 * 64)
    x = tf.layers.dense(x, 512, tf.nn.relu, kernel_initializer=init, bias_initializer=init)
    init = common.torch_init(512)
    return tf.layers.dense(x, 10, kernel_initializer=init, bias_initializer=init)


def main(_):
    common.train("cnn", build, 64, 0.01, C_NAMES)


if __name__ == "__main__":
    tf.app.run()
