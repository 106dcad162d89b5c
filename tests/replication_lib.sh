# Shell helpers of the replication tests (tests/test_replication*.sh), sourced.

# Whether two checkpoints (their .index.json) hold the same bytes in every tensor but the job's
# statistics: prints how many, or the assertion naming the ones that differ.
ckpt_same() { # ref.index.json other.index.json
  python3 - "$1" "$2" <<'PY' 2>&1
import json, os, struct, sys
def load(idx):  # every tensor's bytes, from the shard files read by hand
    out = {}
    for sh in json.load(open(idx))["shards"]:
        raw = open(os.path.join(os.path.dirname(idx), sh["file"]), "rb").read()
        (n,) = struct.unpack("<Q", raw[:8])
        for name, t in json.loads(raw[8:8 + n]).items():
            if name != "__metadata__":
                out[name] = raw[8 + n + t["data_offsets"][0]:8 + n + t["data_offsets"][1]]
    return out
a, b = load(sys.argv[1]), load(sys.argv[2])
# the job's statistics (compute seconds...) differ between any two runs
skip = {"sync_replicas/worker_counts"}
diff = sorted(k for k in (set(a) | set(b)) - skip if a.get(k) != b.get(k))
assert len(a) > 20 and not diff, diff
print(len(a) - len(skip & set(a)), "tensors equal, global_step", struct.unpack("<q", a["global_step"])[0])
PY
}
