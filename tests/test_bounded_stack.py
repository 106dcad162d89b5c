#!/usr/bin/env python3
"""Nothing a peer's graph sizes lives on a thread's stack (issue 27): the layers that parse,
plan and run a graph a peer registered (graph/, ops/, runtime/, ps/) have no variable-length
array and no recursion. Each of their C files is compiled again, as the build compiles it
(compile_commands.json), with -Werror=vla and, under gcc, -fcallgraph-info, whose call graph
must have no cycle but the one allowed below.

Usage: test_bounded_stack.py BUILD_DIR"""
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile

LAYERS = ("graph", "ops", "runtime", "ps")
# Recursion that is bounded by construction, with the reason; anything else fails.
ALLOWED = {
    # run_continuation runs a run's ready nodes once, never while `continuing`: one level
    ("runtime/executor.c", "run_loop"),
    ("runtime/executor.c", "groups_node_done"),
    ("runtime/executor.c", "run_continuation"),
}


def layer_file(path):
    m = re.search(r"(?:^|/)(%s)/(?:[^/.][^/]*/)*[^/]+\.c$" % "|".join(LAYERS), path)
    if not m:
        return None
    return path[m.start(1):]


def compile_args(entry):
    args = entry.get("arguments") or shlex.split(entry["command"])
    out, skip = [], False
    for a in args:
        if skip:
            skip = False
            continue
        if a in ("-o", "-MF", "-MQ", "-MT"):
            skip = True
            continue
        if a in ("-MD", "-MMD", "-c"):
            continue
        out.append(a)
    return out


def cycles(ci_text):
    """Functions on a cycle of the call graph gcc wrote (.ci, VCG)."""
    edges = {}
    for m in re.finditer(r'edge: \{ sourcename: "([^"]+)" targetname: "([^"]+)"', ci_text):
        edges.setdefault(m.group(1), set()).add(m.group(2))
    found = []
    for start in edges:
        seen, stack = set(), [start]
        while stack:
            x = stack.pop()
            for y in edges.get(x, ()):
                if y == start:
                    found.append(start)
                    stack = []
                    break
                if y not in seen:
                    seen.add(y)
                    stack.append(y)
    return found


def main():
    build = sys.argv[1] if len(sys.argv) > 1 else "build"
    db = json.load(open(os.path.join(build, "compile_commands.json")))
    entries = [(layer_file(e["file"]), e) for e in db]
    entries = [(f, e) for f, e in entries if f]
    if not entries:
        print("no C file of %s in %s/compile_commands.json" % (", ".join(LAYERS), build))
        return 1
    failures, checked, graphs = [], 0, 0
    tmp = tempfile.mkdtemp(prefix="psg_stack_")
    for name, e in entries:
        args = compile_args(e)
        compiler = os.path.basename(args[0])
        obj = os.path.join(tmp, name.replace("/", "_") + ".o")
        cmd = args[1:] + ["-c", "-o", obj, "-Werror=vla", "-fdiagnostics-color=never"]
        gcc = "gcc" in compiler or compiler in ("cc", "c99")
        if gcc:
            cmd.append("-fcallgraph-info")
        r = subprocess.run([args[0]] + cmd, cwd=e["directory"], capture_output=True, text=True)
        checked += 1
        vla = [l for l in r.stderr.splitlines() if "vla" in l]
        if r.returncode != 0 or vla:
            failures.append("%s: %s" % (name, "\n  ".join(vla or r.stderr.splitlines()[:5])))
            continue
        ci = obj[:-2] + ".ci"
        if gcc and os.path.exists(ci):
            graphs += 1
            for fn in cycles(open(ci).read()):
                base = fn.split(":")[-1].split(".")[0]
                if (name, base) not in ALLOWED:
                    failures.append("%s: %s is recursive (its depth would be the graph's to choose)" % (name, base))
    subprocess.run(["rm", "-rf", tmp])
    print("checked %d files of %s for variable-length arrays, %d call graphs for recursion" %
          (checked, "/".join(LAYERS), graphs))
    for f in failures:
        print("FAIL " + f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
