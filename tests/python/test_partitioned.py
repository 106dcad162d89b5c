"""Partitioned variables (docs/python.md, "Partitioned variables"): TF 1.x's partitioners on
get_variable and variable_scope, the replica device setter's default cut of a big
tf.layers.dense kernel into row shards NAME/part_i (psgraph train --shard-bytes's rule), and
checkpoints restored across the two layouts (whole and shards) in one process."""
import json
import math
import os

import numpy as np
import pytest

import psgraph.compat.v1 as tf
from free_ports import free_ports


def _dense_model(setter, units=512, inputs=3136):
    """A dense layer of inputs x units (ReLU), a dense layer of 10, Momentum; under setter."""
    scope = tf.device(setter) if setter is not None else open(os.devnull)
    with scope:
        x = tf.placeholder(tf.float32, [None, inputs], name="x")
        h = tf.layers.dense(x, units, tf.nn.relu)
        y = tf.layers.dense(h, 10)
        gs = tf.train.get_or_create_global_step()
        train = tf.train.MomentumOptimizer(0.05, 0.9).minimize(tf.reduce_mean(tf.square(y)),
                                                               global_step=gs)
    return x, y, train


def _names(collection=None):
    return [v.op.name for v in (collection or tf.global_variables())]


def test_partitioners_split_as_tensorflow_s():
    """The shard counts of TF's three partitioners on known shapes."""
    f32 = tf.float32
    assert tf.fixed_size_partitioner(3)([10, 4], f32) == [3, 1]
    assert tf.fixed_size_partitioner(8)([5, 4], f32) == [5, 1]  # at most the rows
    # 1000 x 64 floats = 256000 bytes: ceil(256000 / 64 KiB) = 4, at most max_partitions
    assert tf.min_max_variable_partitioner(8, min_slice_size=64 << 10)([1000, 64], f32) == [4, 1]
    assert tf.min_max_variable_partitioner(2, min_slice_size=64 << 10)([1000, 64], f32) == [2, 1]
    # rows of 256 bytes, at most 1000 bytes a shard: 3 rows each, ceil(10 / 3) = 4 shards
    assert tf.variable_axis_size_partitioner(1000)([10, 64], f32) == [4, 1]
    assert tf.variable_axis_size_partitioner(1000, max_shards=2)([10, 64], f32) == [2, 1]
    with pytest.raises(ValueError, match="max_shard_bytes"):
        tf.variable_axis_size_partitioner(0)
    with tf.variable_scope("v", partitioner=tf.variable_axis_size_partitioner(1000)):
        w = tf.get_variable("w", [10, 64])
    assert [v.op.name for v in w] == ["v/w/part_%d" % i for i in range(4)]
    assert [int(v.shape[0]) for v in w] == [3, 3, 2, 2]  # TF's: the first 10 % 4 one row more


def test_the_replica_setter_cuts_a_big_dense_kernel_into_row_shards():
    """Under replica_device_setter a dense kernel over 512 KiB (3136 x 512 floats, 6.4 MB) is
    8 row shards on the ps, as psgraph train cuts its fc1 into 8 column shards; drawn with
    the whole kernel's glorot scale; the small layer, the biases and the same model without a
    setter stay whole."""
    _dense_model(tf.train.replica_device_setter(ps_tasks=1))
    parts = ["dense/kernel/part_%d" % i for i in range(8)]
    assert _names(tf.trainable_variables()) == parts + ["dense/bias", "dense_1/kernel",
                                                        "dense_1/bias"]
    shards = tf.trainable_variables()[:8]
    assert [v.shape.as_list() for v in shards] == [[392, 512]] * 8
    assert all(v.device == "/job:ps/task:0" for v in shards)
    assert "dense/kernel/part_3/Momentum" in _names()
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        kernel = np.concatenate(sess.run(shards))
    limit = math.sqrt(6.0 / (3136 + 512))  # glorot_uniform of the whole 3136 x 512
    assert np.abs(kernel).max() <= limit * (1 + 1e-6)
    assert np.abs(kernel).max() > 0.99 * limit, "a shard drawn with its own (wider) scale"
    with tf.Graph().as_default():
        _dense_model(None)
        assert "dense/kernel" in _names()


def test_the_cut_follows_shard_bytes_and_the_user_s_partitioner(monkeypatch):
    """shard_bytes=N cuts at N (0: off), as $PSGRAPH_SHARD_BYTES does; a partitioner of the
    user's variable scope wins over the default."""
    with tf.Graph().as_default():
        _dense_model(tf.train.replica_device_setter(ps_tasks=1, shard_bytes=0))
        assert "dense/kernel" in _names()
    with tf.Graph().as_default():  # 3136 x 512 floats / 2 MiB: 4 shards
        _dense_model(tf.train.replica_device_setter(ps_tasks=1, shard_bytes=2 << 20))
        assert _names(tf.trainable_variables())[:5] == ["dense/kernel/part_%d" % i
                                                        for i in range(4)] + ["dense/bias"]
    monkeypatch.setenv("PSGRAPH_SHARD_BYTES", "0")
    with tf.Graph().as_default():
        _dense_model(tf.train.replica_device_setter(ps_tasks=1))
        assert "dense/kernel" in _names()
    monkeypatch.setenv("PSGRAPH_SHARD_BYTES", "many")
    with pytest.raises(ValueError, match="PSGRAPH_SHARD_BYTES"):
        tf.train.replica_device_setter(ps_tasks=1)
    monkeypatch.delenv("PSGRAPH_SHARD_BYTES")
    with tf.Graph().as_default():
        with tf.device(tf.train.replica_device_setter(ps_tasks=1)):
            with tf.variable_scope("net", partitioner=tf.fixed_size_partitioner(2)):
                tf.layers.dense(tf.placeholder(tf.float32, [None, 3136]), 512)
        names = _names()
        assert "net/dense/kernel/part_1" in names and "net/dense/kernel/part_2" not in names
        assert "net/dense/bias/part_0" in names  # the scope's partitioner takes every variable


def _train_and_save(directory, setter):
    x, _, train = _dense_model(setter, units=300, inputs=500)  # 600 KB: 2 row shards
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        sess.run(train, {x: np.linspace(-1, 1, 4 * 500, dtype=np.float32).reshape(4, 500)})
        values = {v.op.name: sess.run(v) for v in tf.global_variables()}
        path = tf.train.Saver().save(sess, os.path.join(directory, "model.ckpt"), global_step=1)
    return values, path


def test_a_checkpoint_restores_across_the_two_layouts(tmp_path):
    """The shards' checkpoint (NAME/part_i, their Momentum slots NAME/part_i/Momentum) restored
    by the same model without a setter: the whole kernel is the shards' rows in order, the
    slot too, and a save then writes the whole names only; that checkpoint restored under the
    setter gives each shard its rows back."""
    with tf.Graph().as_default():
        cut, path = _train_and_save(str(tmp_path / "cut"), tf.train.replica_device_setter(ps_tasks=1))
    assert sorted(n for n, _ in tf.train.list_variables(path) if n.startswith("dense/kernel")) == [
        "dense/kernel/part_0", "dense/kernel/part_0/Momentum", "dense/kernel/part_1",
        "dense/kernel/part_1/Momentum"]
    with tf.Graph().as_default():
        _dense_model(None, units=300, inputs=500)
        with tf.Session() as sess:
            assert tf.train.Saver().restore(sess, path) == 1
            whole = {v.op.name: sess.run(v) for v in tf.global_variables()}
            again = tf.train.Saver().save(sess, str(tmp_path / "whole" / "model.ckpt"),
                                          global_step=1)
    for name in ("dense/kernel", "dense/kernel/Momentum"):
        part = name.replace("kernel", "kernel/part_%d")
        np.testing.assert_array_equal(whole[name], np.concatenate([cut[part % 0], cut[part % 1]]))
        assert whole[name].shape == (500, 300)
    assert np.any(cut["dense/kernel/part_0/Momentum"] != 0), "the step moved nothing"
    for name in ("dense/bias", "dense_1/kernel", "global_step"):
        np.testing.assert_array_equal(whole[name], cut[name])
    assert not [n for n, _ in tf.train.list_variables(again) if "/part_" in n]
    with tf.Graph().as_default():
        _dense_model(tf.train.replica_device_setter(ps_tasks=1), units=300, inputs=500)
        with tf.Session() as sess:
            tf.train.Saver().restore(sess, again)
            back = {v.op.name: sess.run(v) for v in tf.global_variables()}
    assert sorted(back) == sorted(cut)
    for name in cut:
        np.testing.assert_array_equal(back[name], cut[name], err_msg=name)


def _cluster(ps, workers):
    ports = free_ports(ps + workers)
    return {"ps": ["127.0.0.1:%d" % p for p in ports[:ps]],
            "worker": ["127.0.0.1:%d" % p for p in ports[ps:]]}


def test_a_cluster_trains_saves_and_restores_the_shards(tmp_path, monkeypatch):
    """In a cluster (a Python ps task and worker in this process) the default cut's shards
    live on the ps, train and are saved there as NAME/part_i; the cluster restores its own
    checkpoint; a checkpoint of the other layout is refused naming the variable and what to
    do; one process restores the cluster's checkpoint whole."""
    spec = _cluster(1, 1)
    monkeypatch.setenv("PSGRAPH_LOGDIR", str(tmp_path / "c"))  # where the ps task saves
    ps = tf.train.Server(spec, "ps", 0)
    worker = tf.train.Server(spec, "worker", 0)
    x, _, train = _dense_model(tf.train.replica_device_setter(cluster=spec), units=300,
                               inputs=500)
    feed = {x: np.linspace(-1, 1, 4 * 500, dtype=np.float32).reshape(4, 500)}
    with tf.Session(worker.target) as sess:
        sess.run(tf.global_variables_initializer())
        sess.run(train, feed)
        trained = {v.op.name: sess.run(v) for v in tf.global_variables()}
        path = tf.train.Saver().save(sess, str(tmp_path / "c" / "model.ckpt"), global_step=1)
        sess.run(train, feed)
        tf.train.Saver().restore(sess, path)
        restored = {v.op.name: sess.run(v) for v in tf.global_variables()}
        with tf.Graph().as_default():
            _, whole_path = _train_and_save(str(tmp_path / "w"), None)
        with pytest.raises(NotImplementedError, match="dense/kernel/part_0.*one variable "
                                                      "dense/kernel.*PSGRAPH_SHARD_BYTES=0"):
            tf.train.Saver().restore(sess, whole_path)
    held = {v["name"] for v in json.loads(ps._ts.inspect())["variables"]}
    assert {"dense/kernel/part_0", "dense/kernel/part_1", "dense/kernel/part_1/Momentum"} <= held
    assert "dense/kernel" not in held
    for name in trained:
        np.testing.assert_array_equal(restored[name], trained[name], err_msg=name)
    with tf.Graph().as_default():
        _dense_model(None, units=300, inputs=500)
        with tf.Session() as sess:
            tf.train.Saver().restore(sess, path)
            kernel = sess.run(tf.global_variables()[0])
    np.testing.assert_array_equal(kernel, np.concatenate([trained["dense/kernel/part_0"],
                                                          trained["dense/kernel/part_1"]]))
