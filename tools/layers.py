#!/usr/bin/env python3
"""The layers of psgraph: which folder may include which (docs/architecture.md).

  python3 tools/layers.py [check]   prints the folder include graph; exits 1 on an
                                    upward include, a cycle, or a file in no layer
  python3 tools/layers.py farm DIR  makes DIR/<layer>/ for the build: links to the
                                    folders and public headers that layer may use,
                                    its only include path (so an upward include
                                    does not compile); prints the library layers,
                                    lowest first, one a line: "name dep dep..."

A folder's layer is its top-level name (ops/cpu/x.c is in ops); a public header
include/psgraph/x.h is in the layer PUBLIC names. Not a C parser: it reads the
lines `#include "..."`.
"""
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Each layer and the layers it uses directly, lowest first. A layer may include
# what these use too (the closure); nothing else.
LAYERS = [
    ("core", []),
    ("graph", ["core"]),
    ("ops", ["graph"]),
    ("runtime", ["ops"]),
    ("net", ["core"]),
    ("ps", ["runtime", "net"]),
    ("examples", ["runtime"]),
    ("sync", ["ps"]),
    ("worker", ["sync", "examples"]),
    ("api", ["worker"]),  # include/psgraph/psgraph.h, the one header of everything
    ("cli", ["api"]),
    ("python", ["api"]),  # the Python package's extension: binds the public API only
]

# The layers that are no static library of their own.
NOT_LIBRARIES = {"api", "cli", "python"}

# The layers that may include only the public headers (include/psgraph/) of the layers
# below them, never an internal header beside its code: a face over the C API.
PUBLIC_ONLY = {"python"}

# include/psgraph/<name>.h -> the layer that defines what it declares.
PUBLIC = {
    "core": ["error", "clock", "tensor", "threadpool", "half"],
    "graph": ["graph", "op", "resource", "serialize", "device_name"],
    "ops": ["ops_array", "ops_math", "ops_nn", "ops_train", "ops_sparse", "precision", "device", "rendezvous"],
    "runtime": ["autodiff", "optimizer", "placement", "session", "trace", "op_profile"],
    "net": ["wire", "cluster", "curve"],
    "ps": ["task_server", "checkpoint"],
    "examples": ["data", "models", "inception3", "simulate", "tfrecord", "imagenet", "criteo", "wide_deep"],
    "sync": ["sync_replicas", "straggler"],
    "worker": ["trainer", "towers", "dist_session", "summary"],
    "api": ["psgraph"],
}

# Folders outside the layers: they may include anything.
OUTSIDE = {"tests", "bench", "tools", "docs", "include", ".ci", ".git"}

INCLUDE_RE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
SOURCE_EXT = (".c", ".h", ".cu")


def closure():
    """layer -> the set of layers it may include (itself included)."""
    direct = dict(LAYERS)
    out = {}
    for name, _ in LAYERS:  # lowest first: the lower closures exist already
        s = {name}
        for d in direct[name]:
            s |= out[d]
        out[name] = s
    return out


def public_layer():
    m = {}
    for layer, names in PUBLIC.items():
        for n in names:
            m["include/psgraph/%s.h" % n] = layer
    return m


def layer_of(rel, pub):
    """The layer of a file (path relative to the root), or None outside."""
    if rel.startswith("include/psgraph/"):
        return pub.get(rel, "?")
    top = rel.split("/", 1)[0]
    if top in OUTSIDE or "/" not in rel:
        return None
    return top


def resolve(rel, inc):
    """The file (relative to the root) a quoted include names, or None."""
    for base in (os.path.dirname(rel), "", "include"):
        cand = os.path.normpath(os.path.join(base, inc))
        if os.path.isfile(os.path.join(ROOT, cand)):
            return cand
    return None


def sources():
    for dirpath, dirnames, filenames in os.walk(ROOT):
        reldir = os.path.relpath(dirpath, ROOT)
        top = reldir.split(os.sep, 1)[0]
        if reldir != "." and (top in OUTSIDE - {"include"} or top.startswith("build")):
            dirnames[:] = []
            continue
        dirnames.sort()
        for f in sorted(filenames):
            if f.endswith(SOURCE_EXT):
                yield os.path.normpath(os.path.join(reldir, f))


def check():
    pub = public_layer()
    allowed = closure()
    known = set(allowed)
    edges = {}  # (from, to) -> [example "file -> include"]
    problems = []
    for rel in sources():
        lay = layer_of(rel, pub)
        if lay is None:
            continue
        if lay == "?" or lay not in known:
            problems.append("%s: in no layer (add it to LAYERS or PUBLIC in tools/layers.py)" % rel)
            continue
        with open(os.path.join(ROOT, rel), encoding="utf-8", errors="replace") as fh:
            text = fh.read()
        for inc in INCLUDE_RE.findall(text):
            target = resolve(rel, inc)
            if target is None:
                problems.append('%s: includes "%s", which is not in the tree' % (rel, inc))
                continue
            tl = layer_of(target, pub)
            if tl is None or tl == lay:
                continue
            if tl == "?":
                problems.append("%s: in no layer (add it to PUBLIC in tools/layers.py)" % target)
                continue
            edges.setdefault((lay, tl), []).append("%s -> %s" % (rel, inc))
            if lay in PUBLIC_ONLY and not target.startswith("include/psgraph/"):
                problems.append('%s (%s) includes "%s", an internal header: it binds the public '
                                'API only' % (rel, lay, inc))
            if tl not in allowed[lay]:
                problems.append('%s (%s) includes "%s" (%s): an upward include' % (rel, lay, inc, tl))

    order = [n for n, _ in LAYERS]
    print("folder include graph (a -> the layers it includes):")
    for a in order:
        outs = [b for b in order if (a, b) in edges]
        print("  %-9s -> %s" % (a, " ".join(outs) if outs else "(nothing)"))
    cycle = find_cycle(order, edges)
    if cycle:
        problems.append("cycle: " + " -> ".join(cycle))
    print("%d edges, %d cycles, %d upward includes" %
          (len(edges), 1 if cycle else 0, sum("upward" in p for p in problems)))
    for p in sorted(set(problems)):
        print("error: " + p)
    return 1 if problems else 0


def find_cycle(order, edges):
    succ = {a: [b for b in order if (a, b) in edges] for a in order}
    state = {}

    def dfs(a, path):
        state[a] = 1
        path.append(a)
        for b in succ[a]:
            if state.get(b) == 1:
                return path[path.index(b):] + [b]
            if b not in state:
                c = dfs(b, path)
                if c:
                    return c
        state[a] = 2
        path.pop()
        return None

    for a in order:
        if a not in state:
            c = dfs(a, [])
            if c:
                return c
    return None


def farm(outdir):
    """DIR/<layer>/<folder> -> the folder, DIR/<layer>/psgraph/<h> -> the public
    header, for every layer that <layer> may use. Relative links, remade each time."""
    pub = public_layer()
    allowed = closure()
    folders = {n for n, _ in LAYERS if os.path.isdir(os.path.join(ROOT, n))}
    for lay, _ in LAYERS:
        d = os.path.join(outdir, lay)
        os.makedirs(os.path.join(d, "psgraph"), exist_ok=True)
        for old in os.listdir(d):
            if os.path.islink(os.path.join(d, old)):
                os.unlink(os.path.join(d, old))
        for old in os.listdir(os.path.join(d, "psgraph")):
            os.unlink(os.path.join(d, "psgraph", old))
        for f in sorted(allowed[lay] & folders):
            os.symlink(os.path.relpath(os.path.join(ROOT, f), d), os.path.join(d, f))
        for h, hl in sorted(pub.items()):
            if hl in allowed[lay] and os.path.isfile(os.path.join(ROOT, h)):
                dst = os.path.join(d, "psgraph")
                os.symlink(os.path.relpath(os.path.join(ROOT, h), dst),
                           os.path.join(dst, os.path.basename(h)))
    for lay, deps in LAYERS:
        if lay not in NOT_LIBRARIES:
            print(" ".join([lay] + deps))
    return 0


def main(argv):
    if len(argv) >= 2 and argv[1] == "farm" and len(argv) == 3:
        return farm(os.path.abspath(argv[2]))
    if len(argv) == 1 or (len(argv) == 2 and argv[1] == "check"):
        return check()
    sys.stderr.write(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
