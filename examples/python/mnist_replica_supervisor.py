"""TF's own mnist_replica.py of the seed era (tf.Variable global step, tf.train.Supervisor,
prepare_or_wait_for_session, SyncReplicasOptimizer's chief queue runner and init tokens, a
plain loop of sess.run([train_step, global_step])), with the import changed and
Fashion-MNIST read by psgraph.data. The cluster comes from TF_CONFIG:

  psgraph launch --ps 1 --workers 2 -- python3 examples/python/mnist_replica_supervisor.py
  psgraph launch --ps 1 --workers 3 -- python3 examples/python/mnist_replica_supervisor.py \
      --sync_replicas --replicas_to_aggregate 2
"""
import json

import psgraph.compat.v1 as tf
from psgraph import data

flags = tf.app.flags
flags.DEFINE_boolean("sync_replicas", False, "")
flags.DEFINE_integer("replicas_to_aggregate", None, "")
flags.DEFINE_integer("train_steps", 100, "")
flags.DEFINE_string("train_dir", "", "")
FLAGS = flags.FLAGS


def main(_):
    r = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    cluster, job, task_index = r.cluster_spec(), r.task_type, r.task_id
    server = tf.train.Server(cluster, job_name=job, task_index=task_index)
    if job == "ps":
        server.join()
        return
    num_workers = cluster.num_tasks("worker")
    is_chief = task_index == 0
    with tf.device(tf.train.replica_device_setter(
            worker_device="/job:worker/task:%d" % task_index, ps_device="/job:ps/cpu:0",
            cluster=cluster)):
        global_step = tf.Variable(0, name="global_step", trainable=False, dtype=tf.int64)
        hid_w = tf.Variable(tf.truncated_normal([784, 100], stddev=1.0 / 28), name="hid_w")
        hid_b = tf.Variable(tf.zeros([100]), name="hid_b")
        sm_w = tf.Variable(tf.truncated_normal([100, 10], stddev=1.0 / 10), name="sm_w")
        sm_b = tf.Variable(tf.zeros([10]), name="sm_b")
        x = tf.placeholder(tf.float32, [None, 784])
        y_ = tf.placeholder(tf.int32, [None])
        hid = tf.nn.relu(tf.nn.xw_plus_b(x, hid_w, hid_b))
        logits = tf.nn.xw_plus_b(hid, sm_w, sm_b)
        cross_entropy = tf.reduce_mean(
            tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y_, logits=logits))
        opt = tf.train.AdamOptimizer(0.01)
        if FLAGS.sync_replicas:
            replicas_to_aggregate = FLAGS.replicas_to_aggregate or num_workers
            opt = tf.train.SyncReplicasOptimizer(opt, replicas_to_aggregate=replicas_to_aggregate,
                                                 total_num_replicas=num_workers,
                                                 name="mnist_sync_replicas")
        train_step = opt.minimize(cross_entropy, global_step=global_step)
        if FLAGS.sync_replicas:
            local_init_op = opt.chief_init_op if is_chief else opt.local_step_init_op
            ready_for_local_init_op = opt.ready_for_local_init_op
            chief_queue_runner = opt.get_chief_queue_runner()
            sync_init_op = opt.get_init_tokens_op()
        init_op = tf.global_variables_initializer()
        if FLAGS.sync_replicas:
            sv = tf.train.Supervisor(is_chief=is_chief, logdir=FLAGS.train_dir or None,
                                     init_op=init_op, local_init_op=local_init_op,
                                     ready_for_local_init_op=ready_for_local_init_op,
                                     recovery_wait_secs=1, global_step=global_step)
        else:
            sv = tf.train.Supervisor(is_chief=is_chief, logdir=FLAGS.train_dir or None,
                                     init_op=init_op, recovery_wait_secs=1,
                                     global_step=global_step)
        sess_config = tf.ConfigProto(allow_soft_placement=True, log_device_placement=False,
                                     device_filters=["/job:ps",
                                                     "/job:worker/task:%d" % task_index])
        sess = sv.prepare_or_wait_for_session(server.target, config=sess_config)
        if FLAGS.sync_replicas and is_chief:
            sess.run(sync_init_op)
            sv.start_queue_runners(sess, [chief_queue_runner])
        batches = data.fashion_mnist(True).batches(100, seed=task_index + 1)
        local_step = 0
        while True:
            bx, by = next(batches)
            _, step = sess.run([train_step, global_step], {x: bx.reshape(-1, 784), y_: by})
            local_step += 1
            if step >= FLAGS.train_steps or sv.should_stop():
                break
        tx, ty = data.fashion_mnist(False).slice(0, 10000)
        acc = sess.run(tf.reduce_mean(tf.cast(tf.equal(tf.argmax(logits, 1, output_type=tf.int32),
                                                       y_), tf.float32)),
                       {x: tx.reshape(-1, 784), y_: ty})
        sv.stop()
        print(json.dumps({"event": "done", "task": task_index, "local_steps": local_step,
                          "global_step": int(step), "test_accuracy": round(float(acc), 4)}),
              flush=True)


if __name__ == "__main__":
    tf.app.run()
