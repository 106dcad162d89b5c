#!/usr/bin/env python3
"""The PyTorch side of tests/test_torch_parity.sh: trains psgraph's mlp or cnn recipe
(../shared/peers/torch_ref.py's models and optimizer) from the initial values of a
psgraph checkpoint shard (safetensors, read here with json + struct), on psgraph's own
data order (psg_data_epoch_order in examples/data/dataset.c: splitmix64 Fisher-Yates
shuffle per epoch, the last partial batch dropped), and prints one JSON line with the
test accuracy after each epoch.

  torch_parity.py SHARD.safetensors --model mlp|cnn --seed S [--epochs E] [--batch B] [--lr X]
                  [--steps N --compare LATER.safetensors]
With --steps N, it stops after N steps and prints instead the largest difference between
its weights and those of LATER (psgraph's checkpoint after the same N steps), in psgraph's
layout, beside the largest weight.
Not a benchmark: nothing here is timed.
"""
import argparse
import gzip
import json
import os
import struct

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

DATA = "/usr/share/datasets/fashion-mnist"
M64 = (1 << 64) - 1


def read_idx(path):
    raw = gzip.open(path, "rb").read()
    _, _, nd = struct.unpack(">HBB", raw[:4])
    dims = struct.unpack(">" + "I" * nd, raw[4:4 + 4 * nd])
    return np.frombuffer(raw, np.uint8, offset=4 + 4 * nd).reshape(dims)


def load(data_dir):
    f = lambda n: os.path.join(data_dir, n)
    x = lambda n: torch.from_numpy(read_idx(f(n)).astype(np.float32) * np.float32(1 / 255))
    y = lambda n: torch.from_numpy(read_idx(f(n)).astype(np.int64))
    return (x("train-images-idx3-ubyte.gz"), y("train-labels-idx1-ubyte.gz"),
            x("t10k-images-idx3-ubyte.gz"), y("t10k-labels-idx1-ubyte.gz"))


def read_safetensors(path):
    with open(path, "rb") as fp:
        raw = fp.read()
    (hlen,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + hlen])
    out = {}
    for name, h in header.items():
        if name == "__metadata__" or h["dtype"] != "F32":
            continue
        a, b = h["data_offsets"]
        buf = raw[8 + hlen + a:8 + hlen + b]
        out[name] = torch.from_numpy(np.frombuffer(buf, "<f4").reshape(h["shape"]).copy())
    return out


def splitmix64(st):
    st = (st + 0x9E3779B97F4A7C15) & M64
    z = st
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return st, z ^ (z >> 31)


def epoch_order(n, seed, epoch):
    """psg_data_epoch_order, bit for bit."""
    order = list(range(n))
    st = (seed * 0x9E3779B97F4A7C15) & M64
    st, _ = splitmix64(st)
    st ^= (epoch * 0xD1B54A32D192ED03) & M64
    for i in range(n - 1, 0, -1):
        st, r = splitmix64(st)
        j = r % (i + 1)
        order[i], order[j] = order[j], order[i]
    return torch.tensor(order, dtype=torch.int64)


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2, self.fc3 = nn.Linear(784, 256), nn.Linear(256, 256), nn.Linear(256, 10)

    def forward(self, x):
        return self.fc3(F.relu(self.fc2(F.relu(self.fc1(x.flatten(1))))))


class CNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(1, 32, 5, padding=2)
        self.c2 = nn.Conv2d(32, 64, 5, padding=2)
        self.f1, self.f2 = nn.Linear(3136, 512), nn.Linear(512, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.c1(x.unsqueeze(1))), 2)
        x = F.max_pool2d(F.relu(self.c2(x)), 2)
        return self.f2(F.relu(self.f1(x.flatten(1))))


def fc1_rows():
    """The cnn's fc1 rows in psgraph's NHWC order, indexed by PyTorch's NCHW order."""
    c, h, w = torch.meshgrid(torch.arange(64), torch.arange(7), torch.arange(7), indexing="ij")
    return ((h * 7 + w) * 64 + c).flatten()


def layers(model, kind):
    if kind == "mlp":
        return [(model.fc1, "fc1"), (model.fc2, "fc2"), (model.fc3, "fc3")]
    return [(model.c1, "conv1"), (model.c2, "conv2"), (model.f1, "fc1"), (model.f2, "fc2")]


def as_psgraph(layer, kind, name):
    """A layer's weight in psgraph's layout (the inverse of set_from)."""
    w = layer.weight.detach()
    if w.dim() == 4:
        return w.permute(2, 3, 1, 0)
    w = w.t()
    if kind == "cnn" and name == "fc1":
        out = torch.empty_like(w)
        out[fc1_rows()] = w
        return out
    return w


def set_from(model, kind, t):
    """psgraph's layouts into PyTorch's: a dense weight (in, out) is transposed; a conv
    weight (k, k, in, out) becomes (out, in, k, k); the cnn's fc1 reads a flattened NHWC
    (7, 7, 64) map, PyTorch's a flattened NCHW (64, 7, 7) one, so its rows are permuted."""
    def dense(layer, name, perm=None):
        w = t[f"model/{name}/weights"]
        if perm is not None:
            w = w[perm]
        layer.weight.copy_(w.t())
        layer.bias.copy_(t[f"model/{name}/biases"])

    with torch.no_grad():
        if kind == "mlp":
            for layer, name in ((model.fc1, "fc1"), (model.fc2, "fc2"), (model.fc3, "fc3")):
                dense(layer, name)
            return
        for layer, name in ((model.c1, "conv1"), (model.c2, "conv2")):
            layer.weight.copy_(t[f"model/{name}/weights"].permute(3, 2, 0, 1))
            layer.bias.copy_(t[f"model/{name}/biases"])
        dense(model.f1, "fc1", fc1_rows())
        dense(model.f2, "fc2")


@torch.no_grad()
def accuracy(model, x, y):
    model.eval()
    hits = sum((model(x[i:i + 1000]).argmax(1) == y[i:i + 1000]).sum().item()
               for i in range(0, x.shape[0], 1000))
    model.train()
    return hits / x.shape[0]


def report_diff(model, a):
    later = read_safetensors(a.compare)
    diff, top = 0.0, 0.0
    for layer, name in layers(model, a.model):
        for ours, key in ((as_psgraph(layer, a.model, name), "weights"), (layer.bias.detach(), "biases")):
            theirs = later[f"model/{name}/{key}"]
            diff = max(diff, (ours - theirs).abs().max().item())
            top = max(top, theirs.abs().max().item())
    print(json.dumps({"impl": "torch", "model": a.model, "seed": a.seed, "steps": a.steps,
                      "max_abs_diff": diff, "max_abs_weight": top}))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("shard")
    ap.add_argument("--model", choices=("mlp", "cnn"), required=True)
    ap.add_argument("--seed", type=int, required=True)
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--batch", type=int)
    ap.add_argument("--lr", type=float)
    ap.add_argument("--steps", type=int, default=0)
    ap.add_argument("--compare")
    ap.add_argument("--data-dir", default=DATA)
    a = ap.parse_args()
    bs = a.batch or (128 if a.model == "mlp" else 64)
    lr = a.lr or (0.05 if a.model == "mlp" else 0.01)
    torch.set_num_threads(1)
    xtr, ytr, xte, yte = load(a.data_dir)
    model = MLP() if a.model == "mlp" else CNN()
    set_from(model, a.model, read_safetensors(a.shard))
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    n, accs, losses = xtr.shape[0], [], []
    for ep in range(a.epochs):
        order, loss_sum = epoch_order(n, a.seed, ep), 0.0
        for i in range(n // bs):
            if a.steps and ep * (n // bs) + i == a.steps:
                return report_diff(model, a)
            idx = order[i * bs:(i + 1) * bs]
            opt.zero_grad(set_to_none=True)
            loss = F.cross_entropy(model(xtr[idx]), ytr[idx])
            loss.backward()
            opt.step()
            loss_sum += loss.item()
        losses.append(round(loss_sum / (n // bs), 5))
        accs.append(accuracy(model, xte, yte))
    print(json.dumps({"impl": "torch", "torch": torch.__version__, "model": a.model,
                      "seed": a.seed, "batch": bs, "lr": lr, "steps_per_epoch": n // bs,
                      "test_acc": accs, "train_loss_mean": losses}))


if __name__ == "__main__":
    main()
