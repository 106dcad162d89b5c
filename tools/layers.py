#!/usr/bin/env python3
"""The layers of psgraph: which folder may include which (docs/architecture.md).

  python3 tools/layers.py [check] [LIB...]
                                    prints the folder include graph; exits 1 on an
                                    upward include, a cycle, or a file in no layer.
                                    With the layers' libraries (libpsg_<layer>.a,
                                    libpsgraph_cuda.so, which is ops'), also the link
                                    direction (nm): each undefined psg_ symbol of a
                                    layer is defined by a layer it may use, and each
                                    function a public header declares is defined in
                                    that header's layer
  python3 tools/layers.py farm DIR  makes DIR/<layer>/ for the build: links to the
                                    folders and public headers that layer may use,
                                    its include path (so an upward include does not
                                    compile), and DIR/refused/<layer>/, searched
                                    first: a stub that fails with #error for each
                                    private header of another folder; prints the
                                    library layers, lowest first, one a line:
                                    "name dep dep..."

A folder's layer is its top-level name (ops/cpu/x.c is in ops); a public header
include/psgraph/x.h is in the layer PUBLIC names. A header named *_internal.h is
private to its folder, a friend header (FRIENDS) to its folder and the layers
named there: the check fails an include of one from elsewhere, and the farm
refuses it (a stub that fails with #error, found first). Not a C parser: it
reads the lines `#include "..."`.
"""
import os
import re
import shutil
import subprocess
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
    ("serving", ["worker"]),  # trained models out of the cluster: ONNX export, servables, REST
    ("api", ["serving"]),  # include/psgraph/psgraph.h, the one header of everything
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
    "core": ["error", "clock", "tensor", "threadpool", "half", "fp_mode"],
    "graph": ["graph", "op", "resource", "serialize", "device_name"],
    "ops": ["kernel", "ops_array", "ops_math", "ops_nn", "ops_train", "ops_sparse", "precision", "device", "rendezvous"],
    "runtime": ["autodiff", "optimizer", "placement", "session", "trace", "op_profile"],
    "net": ["wire", "cluster", "curve"],
    "ps": ["task_server", "checkpoint"],
    "examples": ["data", "models", "inception3", "simulate", "tfrecord", "imagenet", "criteo", "wide_deep"],
    "sync": ["sync_replicas", "straggler"],
    "worker": ["trainer", "towers", "dist_session", "summary"],
    "serving": ["onnx", "servable"],
    "api": ["psgraph"],
}

# Friend headers: the layers besides its own folder's that may include one. The
# executor reads nodes for every node of every step, so runtime sees the graph's
# layout; every other layer uses the accessors of psgraph/graph.h.
FRIENDS = {
    "graph/graph_layout.h": ["runtime"],
}

# Folders outside the layers: they may include anything.
OUTSIDE = {"tests", "bench", "tools", "docs", "include", ".ci", ".git"}

# Headers the build generates (serving/meson.build: protoc-c from Debian's onnx.proto).
GENERATED = {"onnx.pb-c.h"}

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


def hidden_from(rel):
    """The layers other than its own folder's that may include rel, or None when any
    may: a *_internal.h is private to its folder, a friend header (FRIENDS) is shared
    with the layers named."""
    if rel in FRIENDS:
        return set(FRIENDS[rel])
    if rel.endswith("_internal.h") and not rel.startswith("include/"):
        return set()
    return None


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


def check(libs=()):
    pub = public_layer()
    allowed = closure()
    known = set(allowed)
    edges = {}  # (from, to) -> [example "file -> include"]
    problems = []
    private = 0  # includes of a folder's private header from another folder
    friend_uses = {}  # friend header -> the files of its friend layers that include it
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
            if target is None and inc in GENERATED:
                continue
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
            friends = hidden_from(target)
            if friends is not None:
                if lay in friends:
                    friend_uses.setdefault(target, []).append(rel)
                else:
                    private += 1
                    problems.append('%s includes "%s", private to %s/%s' % (
                        rel, inc, tl, "".join(" and its friend %s/" % f for f in sorted(friends))))

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
    print("%d includes of a folder's private header from another folder" % private)
    for h in sorted(friend_uses):
        print("friend header %s: included by %s" % (h, " ".join(sorted(friend_uses[h]))))
    if libs:
        problems += check_links(libs)
    for p in sorted(set(problems)):
        print("error: " + p)
    return 1 if problems else 0


def library_layer(path):
    """The layer of a library of the build: libpsg_<layer>.a, and the CUDA module, which
    is compiled with the ops layer's path (its kernels are ops'). None for another."""
    base = os.path.basename(path)
    m = re.match(r"libpsg_(\w+)\.a$", base)
    if m:
        return m.group(1)
    if base.startswith("libpsgraph_cuda."):
        return "ops"
    return None


def nm_symbols(path):
    """(defined, undefined): the global psg_ symbols of an archive or a shared object."""
    dynamic = ".so" in os.path.basename(path)
    out = subprocess.run(["nm", "-g"] + (["-D"] if dynamic else []) + [path],
                         capture_output=True, text=True, check=True).stdout
    defined, undefined = set(), set()
    for line in out.splitlines():
        parts = line.split()
        if len(parts) < 2 or not parts[-1].startswith("psg_"):
            continue
        kind, name = parts[-2], parts[-1]
        if kind == "U":
            undefined.add(name)
        elif kind in "TDRBVWCGSi":
            defined.add(name)
    return defined, undefined


def header_functions(path):
    """The functions a public header declares (not those it defines inline): each
    top-level statement with a psg_ name followed by "(", not a typedef."""
    with open(path, encoding="utf-8") as fh:
        t = fh.read()
    t = re.sub(r"/\*.*?\*/", " ", t, flags=re.S)
    t = re.sub(r"//[^\n]*", " ", t)
    t = re.sub(r"^\s*#.*?(?<!\\)$", " ", t, flags=re.M | re.S)
    while True:  # brace blocks (struct bodies, inline functions) -> \x01
        u = re.sub(r"\{[^{}]*\}", "\x01", t)
        if u == t:
            break
        t = u
    out = []
    for stmt, end in re.findall(r"([^;\x01]*)([;\x01])", t):
        stmt = stmt.strip()
        if end != ";" or stmt.startswith("typedef") or stmt.startswith("static"):
            continue
        m = re.search(r"\b(psg_\w+)\s*\(", stmt)
        if m:
            out.append(m.group(1))
    return out


def check_links(libs):
    """The link direction (nm on the layers' libraries) and the public headers' layers.
    Returns the problems; prints the counts."""
    allowed = closure()
    problems = []
    defined = {}  # symbol -> the layers whose libraries define it
    undefined = {}  # layer -> its libraries' undefined psg_ symbols
    for path in libs:
        lay = library_layer(path)
        if lay is None or lay not in allowed:
            problems.append("%s: not the library of a layer" % path)
            continue
        d, u = nm_symbols(path)
        for sym in d:
            defined.setdefault(sym, set()).add(lay)
        undefined.setdefault(lay, set()).update(u)
    upward = 0
    for lay in sorted(undefined):
        for sym in sorted(undefined[lay]):
            where = defined.get(sym, set())
            if lay in where or where & allowed[lay]:
                continue
            if where:
                upward += 1
                problems.append("%s uses %s, defined in %s: an upward symbol" %
                                (lay, sym, " ".join(sorted(where))))
            else:
                problems.append("%s uses %s, which no layer's library defines" % (lay, sym))
    misplaced = 0
    for h, hl in sorted(public_layer().items()):
        if not os.path.isfile(os.path.join(ROOT, h)):
            continue
        for fn in header_functions(os.path.join(ROOT, h)):
            where = defined.get(fn, set())
            if hl not in where:
                misplaced += 1
                problems.append("%s (%s) declares %s, defined in %s" %
                                (h, hl, fn, " ".join(sorted(where)) or "no layer's library"))
    print("link: %d libraries, %d upward symbols, %d public functions outside their header's layer"
          % (len(libs), upward, misplaced))
    return problems


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
    refuse(os.path.join(outdir, "refused"), allowed)
    for lay, deps in LAYERS:
        if lay not in NOT_LIBRARIES:
            print(" ".join([lay] + deps))
    return 0


def refuse(root, allowed):
    """root/<layer>/<header>: a stub that fails with #error, for each private header of
    another folder that the layer's links would otherwise reach. Remade each time."""
    shutil.rmtree(root, ignore_errors=True)
    hidden = [rel for rel in sources() if hidden_from(rel) is not None]
    for lay, _ in LAYERS:
        os.makedirs(os.path.join(root, lay), exist_ok=True)
        for rel in hidden:
            owner = rel.split("/", 1)[0]
            friends = hidden_from(rel)
            if owner == lay or lay in friends or owner not in allowed[lay]:
                continue
            stub = os.path.join(root, lay, rel)
            os.makedirs(os.path.dirname(stub), exist_ok=True)
            with open(stub, "w", encoding="utf-8") as fh:
                fh.write('#error "%s is private to %s/%s (tools/layers.py): use the public '
                         'headers of %s/"\n' % (rel, owner, "".join(
                             " and its friend %s/" % f for f in sorted(friends)), owner))


def main(argv):
    if len(argv) >= 2 and argv[1] == "farm" and len(argv) == 3:
        return farm(os.path.abspath(argv[2]))
    if len(argv) == 1:
        return check()
    if argv[1] == "check":
        return check(argv[2:])
    sys.stderr.write(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
