"""The data shards' JSON lines in a stamped launch log (tests/test_data_shards*.sh): who took
and who finished each shard, and the examples finished an epoch, checked: each shard of each
epoch finished exactly once and each epoch's examples all finished."""
import collections
import json
import re


def read(path, shards, epochs, per_epoch, on_line=None):
    """(taken, done): shard -> the workers that took / finished it, in order. on_line(line) is
    called with every line first. Asserts each shard finished once, per_epoch examples an
    epoch."""
    taken, done = collections.defaultdict(list), collections.defaultdict(list)
    examples = collections.Counter()
    for line in open(path):
        if on_line:
            on_line(line)
        m = re.match(r"[0-9.]+ \[worker(\d)\] (\{\"event\":\"shard_(taken|done)\".*)", line)
        if not m:
            continue
        e = json.loads(m.group(2))
        assert e["worker"] == int(m.group(1)), line
        (taken if m.group(3) == "taken" else done)[e["shard"]].append(e["worker"])
        if m.group(3) == "done":
            examples[e["epoch"]] += e["examples"]
    for s in range(shards * epochs):
        assert len(done[s]) == 1, ("shard", s, "finished", done[s])
    assert dict(examples) == {e: per_epoch for e in range(epochs)}, examples
    return taken, done
