"""psgraph's strategies for a Python model (psgraph.train.Strategy, docs/python.md,
"Strategies"): the options checked against the C tables, and real jobs (a `psgraph server`
ps and two Python workers over loopback) whose answers are known: SSP with s = 0 and sync
with top-k of every entry give sync's parameters with b = 0 (tests/test_sync_dist.c's
known answers for `psgraph train`, here for a script's own model)."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import psgraph
from test_dist import cluster, env_for, finish

HERE = os.path.dirname(os.path.abspath(__file__))
JOB = os.path.join(HERE, "strategy_job.py")


def test_strategy_options_come_from_the_c_tables():
    s = psgraph.train.Strategy("ssp", staleness=1)
    assert s.flags() == ["--sync", "ssp", "--staleness", "1"]
    assert psgraph.train.Strategy.from_flags("local --local-steps 4").options == \
        [("--local-steps", "4")]
    for name in ("sync", "async", "ssp", "local", "easgd", "diloco"):
        assert name in psgraph.train.strategy_names()
    with pytest.raises(ValueError, match="unknown strategy 'spp' \\(closest: ssp"):
        psgraph.train.Strategy("spp")
    with pytest.raises(ValueError, match="unknown option '--stalenes'.*closest: --staleness"):
        psgraph.train.Strategy("ssp", stalenes=1)
    with pytest.raises(ValueError, match="--staleness"):
        psgraph.train.Strategy("ssp", staleness=-1)
    with pytest.raises(ValueError, match="--compress"):
        psgraph.train.Strategy("ssp", compress="topk")  # not an option of ssp


def run_job(psgraph_bin, tmp_path, name, spec, steps, want, workers=2, lr=0.1):
    """1 `psgraph server` ps + `workers` strategy_job.py workers (SGD of rate lr); the chief's
    variables (.npz) and the workers' done lines."""
    c = cluster(1, workers)
    out = str(tmp_path / (name + ".npz"))
    ps = subprocess.Popen([psgraph_bin, "server"], env=env_for(c, "ps", 0),
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    procs = [subprocess.Popen([sys.executable, JOB, str(steps), out, spec, str(want), str(lr)],
                              env=env_for(c, "worker", i), stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True) for i in range(workers)]
    return out, procs + [ps]


def finish_jobs(started):
    """Each job's chief variables, once its workers ended cleanly with the steps asked for,
    none dropped, the chief at its expected global step."""
    results = {}
    for name, steps, want, out, procs in started:
        res = finish(procs, timeout=300)
        for rc, text in res:
            assert rc == 0, "%s:\n%s" % (name, text)
        for k, (_, text) in enumerate(res[:-1]):
            d = done(text)
            assert d["steps"] == steps and d["stats"]["steps"] == steps, d
            assert d["stats"]["dropped"] == 0, d
            if k == 0:
                assert d["global_step"] == want, (name, d)
        results[name] = dict(np.load(out))
    return results


def done(text):
    lines = [json.loads(l) for l in text.splitlines() if l.startswith('{"event": "done"')]
    assert lines, text
    return lines[-1]


def worst_relative(a, b, prefix=""):
    """The C test's measure: |a - b| relative to the element, 1e-3 at least (a's variables
    named prefix + b's)."""
    worst = 0.0
    for k in ("w1", "b1", "w2", "b2"):
        d = np.abs(a[prefix + k].astype(np.float64) - b[k].astype(np.float64))
        worst = max(worst, float(np.max(d / np.maximum(np.abs(b[k]), 1e-3))))
    return worst


def test_ssp_s0_and_topk_ratio_1_equal_sync(psgraph_bin, tmp_path):
    """... and TF's SyncReplicasOptimizer(N = workers) is the sync strategy on the same C
    step function (its opt.stats are the stepper's): the same parameters, exactly."""
    steps = 20
    # ssp's global step counts each worker's update; sync's the averaged ones
    jobs = [("sync", "sync", steps), ("ssp", "ssp --staleness 0", 2 * steps),
            ("topk", "sync --compress topk --compress-ratio 1", steps),
            ("replicas", "replicas", steps)]
    started = [(name, steps, want) + run_job(psgraph_bin, tmp_path, name, spec, steps, want)
               for name, spec, want in jobs[:2]]
    results = finish_jobs(started)  # two jobs at a time
    started = [(name, steps, want) + run_job(psgraph_bin, tmp_path, name, spec, steps, want)
               for name, spec, want in jobs[2:]]
    results.update(finish_jobs(started))
    assert worst_relative(results["ssp"], results["sync"]) <= 1e-5
    assert worst_relative(results["topk"], results["sync"]) <= 1e-5
    for k in ("w1", "b1", "w2", "b2"):
        np.testing.assert_array_equal(results["replicas"][k], results["sync"][k], err_msg=k)
    # and the answer is not the initial values: the steps moved the parameters
    init = np.random.default_rng(7)
    w1_0 = (init.standard_normal((8, 16)) * 0.3).astype(np.float32)
    assert np.max(np.abs(results["sync"]["w1"] - w1_0)) > 1e-3


def test_compare_runs_a_python_script_under_each_strategy(psgraph_bin, tmp_path):
    """psgraph compare --script: the user's script as every worker under each strategy,
    the same JSON lines and plot as for the built-in models, read from the metrics.jsonl
    the script's strategy wrote."""
    outdir = tmp_path / "cmp"
    p = subprocess.run([psgraph_bin, "compare", "--script", os.path.join(HERE, "compare_job.py"),
                        "--python", sys.executable,
                        "--strategy", "async", "--strategy", "ssp --staleness 1",
                        "--ps", "1", "--workers", "2", "--straggler", "none",
                        "--eval-every", "10", "--target", "0.5", "--outdir", str(outdir),
                        "--", "--steps", "30"],
                       capture_output=True, text=True, timeout=600)
    logs = "".join((outdir / d / "run.log").read_text() for d in os.listdir(outdir)
                   if (outdir / d / "run.log").exists()) if outdir.exists() else ""
    assert p.returncode == 0, p.stdout + p.stderr + logs
    lines = [json.loads(l) for l in p.stdout.splitlines() if l.startswith('{"compare"')]
    runs = [r for r in lines if not r.get("summary")]
    assert [r["compare"] for r in lines if r.get("summary")] == ["async", "ssp --staleness 1"]
    assert [r["compare"] for r in runs] == ["async", "ssp --staleness 1"], p.stdout
    for r in runs:
        assert r["exit"] == 0 and r["sync"] == r["compare"].split()[0], r
        assert r["model"].endswith("compare_job.py"), r
        assert r["evaluations"] == 3, r  # steps 10, 20, 30 of the chief
        assert r["final_accuracy"] > 0.5 and r["time_to_target_sec"] is not None, r
        assert r["global_steps"] >= 30, r
    # each run's metrics.jsonl holds the strategy's per-step records, naming the task
    metrics = [json.loads(l) for l in (outdir / "1-ssp_--staleness_1" / "metrics.jsonl")
               .read_text().splitlines()]
    steps = [m for m in metrics if m.get("event") == "sync_step"]
    assert len(steps) == 30 and all(m["task"] == "/job:worker/task:0" for m in steps)
    assert (outdir / "compare.png").exists() and (outdir / "compare.csv").exists()


def test_local_model_strategies_give_known_answers(psgraph_bin, tmp_path):
    """local, diloco and easgd train each worker's own copy of the script's model
    (Strategy.replica_device_setter puts it on the worker; the ps holds the global or center
    copy), with tests/test_sync_dist.c's known answers: local SGD with H = 1 is sync's
    averaged step (b = 0); DiLoCo with outer lr 1 and momentum 0 is local SGD (H = 4); EASGD
    with one worker, tau = 1 and alpha = 1/2 takes both copies one SGD step of half the rate
    (the async step of rate 0.05). Each within 1e-5, the worker's copy and the ps's."""
    steps = 20
    # (name, strategy, steps, workers, global step (local: averages; easgd: none), lr)
    jobs = [("sync", "sync", steps, 2, steps, 0.1),
            ("local1", "local --local-steps 1", steps, 2, steps, 0.1),
            ("local4", "local --local-steps 4", steps, 2, steps // 4, 0.1),
            ("diloco", "diloco --local-steps 4 --outer-lr 1 --outer-momentum 0", steps, 2,
             steps // 4, 0.1),
            ("easgd", "easgd --elastic-alpha 0.5 --local-steps 1", 1, 1, 0, 0.1),
            ("half", "async", 1, 1, 1, 0.05)]
    results = {}
    for batch in (jobs[:3], jobs[3:]):  # three jobs at a time
        started = [(name, n, want) + run_job(psgraph_bin, tmp_path, name, spec, n, want, w, lr)
                   for name, spec, n, w, want, lr in batch]
        results.update(finish_jobs(started))
    for name in ("local1", "local4", "diloco", "easgd"):
        assert "ps_w1" in results[name], name  # the ps's copy beside the worker's own
    assert "ps_w1" not in results["sync"]
    for got, ref in (("local1", "sync"), ("diloco", "local4"), ("easgd", "half")):
        assert worst_relative(results[got], results[ref]) <= 1e-5, (got, ref)
        assert worst_relative(results[got], results[ref], "ps_") <= 1e-5, (got, ref)
    # the steps moved the parameters
    assert np.max(np.abs(results["local4"]["w1"] - results["half"]["w1"])) > 1e-3
