"""The examples of examples/python train on their data sets (briefly here): the mlp and
the cnn of the model table with tf.layers, wide-and-deep with embedding_lookup on a click
log from `psgraph data ctr`, and the autoencoder the C table does not have."""
import json
import os
import subprocess
import sys

import pytest

from conftest import fashion_mnist_present

EXAMPLES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples", "python")


def run_example(name, *args):
    out = subprocess.run([sys.executable, os.path.join(EXAMPLES, name)] + list(args),
                         capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stdout + out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(not fashion_mnist_present(), reason="no Fashion-MNIST")
def test_mlp_and_cnn(tmp_path):
    mlp = run_example("mlp.py", "--steps", "200", "--test_examples", "2000", "--logdir", str(tmp_path / "mlp"))
    assert mlp["steps"] == 200 and mlp["test_accuracy"] > 0.7
    assert any(f.startswith("events.out.tfevents") for f in os.listdir(tmp_path / "mlp"))
    assert os.path.exists(tmp_path / "mlp" / "model.ckpt-200.index.json")
    cnn = run_example("cnn.py", "--steps", "40", "--batch", "32", "--test_examples", "500")
    assert cnn["steps"] == 40 and cnn["test_accuracy"] > 0.4


@pytest.mark.skipif(not fashion_mnist_present(), reason="no Fashion-MNIST")
def test_autoencoder():
    ae = run_example("autoencoder.py", "--steps", "150")
    assert ae["test_mse"] < 0.5 * ae["mean_image_mse"]


def test_wide_deep(tmp_path, psgraph_bin):
    ctr = str(tmp_path / "ctr.tsv")
    subprocess.run([psgraph_bin, "data", "ctr", "--rows", "30000", "--out", ctr], check=True,
                   capture_output=True, timeout=120)
    wd = run_example("wide_deep.py", "--data", ctr, "--buckets", "1000", "--epochs", "2")
    assert wd["held_out_rows"] == 3000
    assert wd["auc"] > 0.6 and wd["logloss"] < 0.6
