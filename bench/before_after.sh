#!/usr/bin/env bash
# The same benchmark on an older commit and on the working tree, alternating, in one run:
# does a change (a refactor, a "faster" step) keep the figures? One JSON line per bench line
# of each round, tagged "tree":"before"|"after" and "round", then one summary line per
# bench line kind with every numeric field's best of each tree and the ratio after/before.
#   bench/before_after.sh REV ROUNDS -- COMMAND...
#   bench/before_after.sh 5b3a593 3 -- bench/dist.sh mlp --quick
# COMMAND runs from each tree's root (so bench/x.sh finds that tree's build/). The older
# tree is a detached git worktree in build-before/REV, built once (release, as tools/build.sh).
# "Best" is the larger value, except for fields named like times (_us, _ms, _s, seconds,
# latency), where it is the smaller; the load average is printed beside each round.
set -uo pipefail
cd "$(dirname "$0")/.."
usage="usage: bench/before_after.sh REV ROUNDS -- COMMAND..."
case ${1:-} in -h | --help) echo "$usage"; exit 0 ;; esac
[ $# -ge 3 ] && [ "$3" = "--" ] || {
  echo "$usage" >&2
  exit 2
}
rev=$1 rounds=$2
shift 3
sha=$(git rev-parse --verify --quiet "$rev^{commit}") || {
  echo "bench/before_after.sh: '$rev' is not a commit of this repository" >&2
  exit 2
}
before=build-before/${sha:0:12}
if [ ! -d "$before" ]; then
  git worktree add --detach "$before" "$sha" >/dev/null || exit 1
fi
bash tools/build.sh build >/dev/null || exit 1
(cd "$before" && bash tools/build.sh build >/dev/null) || {
  echo "bench/before_after.sh: $rev does not build in $before" >&2
  exit 1
}
out=$(mktemp /tmp/psg_before_after.XXXXXX)
trap 'rm -f "$out"' EXIT
for r in $(seq "$rounds"); do
  # odd rounds the old tree first, even rounds the new one: a slowing machine hurts both alike
  if [ $((r % 2)) = 1 ]; then order="before after"; else order="after before"; fi
  for t in $order; do
    dir=.
    [ "$t" = before ] && dir=$before
    load=$(cut -d' ' -f1 /proc/loadavg)
    (cd "$dir" && "$@" 2>/dev/null) | grep '^{' |
      TREE=$t ROUND=$r LOAD=$load python3 -c '
import json, os, sys
for line in sys.stdin:
    try:
        d = json.loads(line)
    except ValueError:
        continue
    d.update(tree=os.environ["TREE"], round=int(os.environ["ROUND"]), load=float(os.environ["LOAD"]))
    print(json.dumps(d))' | tee -a "$out"
  done
done
python3 - "$out" "$sha" <<'PY'
import json, re, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
timeish = re.compile(r"(_us|_ms|_s|seconds|latency|rss|_mb|_bytes)($|_)")  # psgraph_us_median too
skip = {"round", "load", "tree", "ab_rounds", "bytes", "batch"}
IDENTITY = ("bench", "workload", "step", "model", "op", "bytes", "batch")
def kind(d):  # what a line measures: its bench and, where it has them, workload, step, size
    return tuple((k, d[k]) for k in IDENTITY if k in d and not isinstance(d[k], (dict, list)))
kinds = {}
for d in rows:
    kinds.setdefault(kind(d), []).append(d)
for k, ds in kinds.items():
    summary = dict(k)
    summary.update(bench_before_after=True, before=sys.argv[2][:12],
                   ab_rounds=max(d["round"] for d in ds),
                   load_min=min(d["load"] for d in ds), load_max=max(d["load"] for d in ds))
    fields = {}
    for d in ds:
        for f, v in d.items():
            if f in skip or isinstance(v, bool) or not isinstance(v, (int, float)):
                continue
            fields.setdefault(f, {"before": [], "after": []})[d["tree"]].append(v)
    for f, v in fields.items():
        if not v["before"] or not v["after"]:
            continue
        pick = min if timeish.search(f) else max
        b, a = pick(v["before"]), pick(v["after"])
        summary[f] = {"before": b, "after": a, "ratio": round(a / b, 3) if b else None,
                      "spread_before": round(max(v["before"]) / min(v["before"]), 3) if min(v["before"]) else None,
                      "spread_after": round(max(v["after"]) / min(v["after"]), 3) if min(v["after"]) else None}
    print(json.dumps(summary))
PY
