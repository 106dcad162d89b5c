#!/usr/bin/env python3
"""The JSON line of one workload of bench/train.sh or bench/inception3.sh: the
best of the alternating rounds of psgraph and of the PyTorch peer, their ratio,
each side's spread and peak RSS, and the load average around the rounds.

  TMP=DIR W=WORKLOAD ROUNDS=R LOAD0=X bench/train_report.py train|inception3

DIR holds, per round r: ours_r and peer_r (each side's last JSON line),
ours_rss_r and peer_rss_r (bench/peak_rss.py's), and peer_core (the
OPENBLAS_CORETYPE the peer ran with, empty for its own choice).
"""
import json
import os
import sys


def read(path):
    try:
        with open(path) as f:
            text = f.read().strip()
        return json.loads(text) if text else {}
    except (OSError, ValueError):
        return {}


def best_and_spread(values):
    values = [v for v in values if v]
    if not values:
        return None, None
    return max(values), round(max(values) / min(values), 3)


def main():
    kind = sys.argv[1]
    tmp, rounds = os.environ["TMP"], int(os.environ["ROUNDS"])
    ours = [read(f"{tmp}/ours_{r}") for r in range(1, rounds + 1)]
    peer = [read(f"{tmp}/peer_{r}") for r in range(1, rounds + 1)]
    ours_rss = [read(f"{tmp}/ours_rss_{r}").get("peak_rss_mb") for r in range(1, rounds + 1)]
    peer_rss = [read(f"{tmp}/peer_rss_{r}").get("peak_rss_mb") for r in range(1, rounds + 1)]
    ours_key, peer_key = (("examples_per_sec", "examples_per_sec") if kind == "train"
                          else ("images_per_sec", "train_images_per_sec"))
    o_vals = [d.get(ours_key) for d in ours]
    p_vals = [d.get(peer_key) for d in peer]
    o_best, o_spread = best_and_spread(o_vals)
    p_best, p_spread = best_and_spread(p_vals)
    last_o = next((d for d in reversed(ours) if d), {})
    last_p = next((d for d in reversed(peer) if d), {})
    out = {"bench": kind, "workload": os.environ["W"], "rounds": rounds,
           f"psgraph_{ours_key}": o_best, "psgraph_rounds": o_vals, "psgraph_spread": o_spread,
           "psgraph_peak_rss_mb": max([v for v in ours_rss if v] or [0]) or None,
           "psgraph_blas": last_o.get("blas")}
    if kind == "train":
        out["psgraph_test_accuracy"] = last_o.get("test_accuracy")
    else:
        out["psgraph_final_loss"] = last_o.get("final_loss")
        out["threads"] = last_o.get("threads")
    if any(peer):
        core = ""
        try:
            with open(f"{tmp}/peer_core") as f:
                core = f.read().strip()
        except OSError:
            pass
        blas = " ".join(last_p.get("blas", []))
        out.update({f"torch_{peer_key}": p_best, "torch_rounds": p_vals, "torch_spread": p_spread,
                    "torch_peak_rss_mb": max([v for v in peer_rss if v] or [0]) or None,
                    "torch_blas": blas, "torch_openblas_coretype": core or "its own choice",
                    "torch_other_cpu_avg_cores": [d.get("other_cpu_avg_cores") for d in peer],
                    "fair_peer": "openblas-openmp" in blas})
        if kind == "train":
            out["torch_test_accuracy"] = (last_p.get("test_acc") or [None])[-1]
        else:
            out["torch_infer_images_per_sec"] = last_p.get("infer_images_per_sec")
        if o_best and p_best:
            out["ratio"] = round(o_best / p_best, 3)
            pairs = [round(o / p, 3) for o, p in zip(o_vals, p_vals) if o and p]
            out["ratio_per_round"] = pairs
        if out.get("psgraph_peak_rss_mb") and out.get("torch_peak_rss_mb"):
            out["rss_ratio"] = round(out["psgraph_peak_rss_mb"] / out["torch_peak_rss_mb"], 3)
    with open("/proc/loadavg") as f:
        out["loadavg_start_end"] = [float(os.environ.get("LOAD0", "0")), float(f.read().split()[0])]
    out["cores"] = os.cpu_count()
    print(json.dumps(out))


if __name__ == "__main__":
    main()
