"""A chief worker of tests/python/test_dist.py's exit tests (TF_CONFIG names the cluster): a
small sync-replicas model whose session start or training fails, as a user's script fails;
the process must end with the Python exception and exit status 1, not an abort at exit.

    exit_job.py hook   a user's hook fails the session's start after the sync hook started
                       the chief's runner
    exit_job.py raise  the script raises after 3 steps, its session never closed
    exit_job.py no_ps  the session's start fails: no ps task answers (2 s timeout)"""
import sys

import psgraph.compat.v1 as tf

mode = sys.argv[1]
r = tf.distribute.cluster_resolver.TFConfigClusterResolver()
server = tf.train.Server(r.cluster_spec(), r.task_type, r.task_id)
with tf.device(tf.train.replica_device_setter(cluster=r.cluster_spec())):
    step = tf.train.get_or_create_global_step()
    w = tf.get_variable("w", initializer=tf.constant([1.0, 2.0]))
    loss = tf.reduce_sum(tf.square(w))
    opt = tf.train.SyncReplicasOptimizer(tf.train.GradientDescentOptimizer(0.1), 1, 1)
    train = opt.minimize(loss, global_step=step)


class FailingHook(tf.train.SessionRunHook):
    def after_create_session(self, session, coord):
        raise RuntimeError("the user's hook failed")


hooks = [opt.make_session_run_hook(True)] + ([FailingHook()] if mode == "hook" else [])
config = tf.ConfigProto(operation_timeout_in_ms=2000) if mode == "no_ps" else None
sess = tf.train.MonitoredTrainingSession(master=server.target, is_chief=True, hooks=hooks,
                                         config=config)
for _ in range(3):
    sess.run(train)
print("trained 3 steps", flush=True)
raise RuntimeError("the script failed after training")
