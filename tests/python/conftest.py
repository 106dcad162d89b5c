"""Shared fixtures of the Python package's tests: each test builds in a fresh default graph;
`psgraph_bin` is the CLI of the same build (PSGRAPH, set by meson test)."""
import os

import numpy as np
import pytest

import psgraph.compat.v1 as tf


@pytest.fixture(autouse=True)
def fresh_graph():
    g = tf.Graph()
    g.seed = 1  # initial values repeat from run to run
    with g.as_default():
        yield g


@pytest.fixture
def sess(fresh_graph):
    s = tf.Session(graph=fresh_graph, config=tf.ConfigProto(intra_op_parallelism_threads=1))
    yield s
    s.close()


@pytest.fixture
def psgraph_bin():
    path = os.environ.get("PSGRAPH")
    if not path or not os.access(path, os.X_OK):
        pytest.skip("PSGRAPH (the psgraph binary) is not set: run through meson test")
    return path


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


def fashion_mnist_present():
    return os.path.exists("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz")
