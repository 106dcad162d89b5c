"""The data shards' JSON lines in a stamped launch log (tests/test_data_shards*.sh): who took
and who finished each shard, and the examples finished an epoch, checked: each shard of each
epoch finished exactly once and each epoch's examples all finished."""
import collections
import json
import re


def read(path, shards, epochs, per_epoch, on_line=None, killed=None, credited=None):
    """(taken, done): shard -> the workers that took / finished it, in order. on_line(line) is
    called with every line first. Asserts each shard finished once, per_epoch examples an
    epoch.

    killed: a worker killed by SIGKILL. One take reports its shard done and takes the next on
    the ps before the worker prints either line, so a kill in between loses both: its last
    shard taken that nobody finished is counted finished by it (the ps's record), and appended
    to `credited`; the next one, never printed, shows as taken once by whoever got it again."""
    taken, done = collections.defaultdict(list), collections.defaultdict(list)
    examples = collections.Counter()
    size, last = {}, {}
    for line in open(path):
        if on_line:
            on_line(line)
        m = re.match(r"[0-9.]+ \[worker(\d)\] (\{\"event\":\"shard_(taken|done)\".*)", line)
        if not m:
            continue
        e = json.loads(m.group(2))
        assert e["worker"] == int(m.group(1)), line
        (taken if m.group(3) == "taken" else done)[e["shard"]].append(e["worker"])
        size[e["shard"]] = (e["epoch"], e["examples"])
        if m.group(3) == "taken":
            last[e["worker"]] = e["shard"]
        if m.group(3) == "done":
            examples[e["epoch"]] += e["examples"]
    s = last.get(killed)
    if s is not None and not done[s] and taken[s] == [killed]:
        done[s].append(killed)
        examples[size[s][0]] += size[s][1]
        if credited is not None:
            credited.append(s)
    for s in range(shards * epochs):
        assert len(done[s]) == 1, ("shard", s, "finished", done[s])
    assert dict(examples) == {e: per_epoch for e in range(epochs)}, examples
    return taken, done
