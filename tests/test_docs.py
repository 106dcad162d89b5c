#!/usr/bin/env python3
"""The docs stay true (issue 37, item 7): every flag that a psgraph command's --help prints
appears in README.md or a docs/*.md page; every command of `psgraph --help` and every
benchmark that takes options answers --help with its usage, exit 0, without running; every
path the docs name in backticks (`worker/trainer.c`, `tests/test_*.sh`, `psgraph/cluster.h`,
`docs/examples/train_mlp.c`) exists; every public header is in docs/api.md's table.
usage: test_docs.py PSGRAPH SOURCE_ROOT BUILD_ROOT"""
import glob
import os
import re
import subprocess
import sys

psgraph, root, build = sys.argv[1], sys.argv[2], sys.argv[3]
fails = []


def fail(msg):
    fails.append(msg)
    print("FAIL: " + msg)


def run(argv):
    try:
        p = subprocess.run(argv, capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:  # it ran something instead of printing its usage
        return 124, "still running after 30 s"
    return p.returncode, p.stdout + p.stderr


docs = [os.path.join(root, "README.md")] + sorted(glob.glob(os.path.join(root, "docs", "*.md")))
text = {d: open(d, encoding="utf-8").read() for d in docs}
alltext = "\n".join(text.values())

# 1. the commands, from psgraph --help, and each one's --help
rc, top = run([psgraph, "--help"])
commands = re.findall(r"^  ([a-z]+) ", top, re.M)
if rc != 0 or len(commands) < 8:
    fail("psgraph --help (rc %d) lists %d commands: %s" % (rc, len(commands), top[:300]))
helps = {}
for c in commands:
    argv = [psgraph, c] + (["inception3"] if c == "bench" else []) + ["--help"]
    rc, out = run(argv)
    if rc != 0 or "usage" not in out:
        fail("%s: exit %d, no usage: %s" % (" ".join(argv[1:]), rc, out[:200]))
    helps[" ".join(argv[1:-1])] = out
rc, out = run([psgraph, "data", "ctr", "--help"])
helps["data ctr"] = out
flags = {}
for cmd, out in helps.items():
    for f in re.findall(r"(?<![A-Za-z0-9-])--[a-z0-9][a-z0-9-]*", out):
        flags.setdefault(f, set()).add(cmd)
undocumented = sorted(f for f in flags if f != "--help" and
                      not re.search(re.escape(f) + r"(?![a-z0-9-])", alltext))
for f in undocumented:
    fail("%s (psgraph %s --help) is in no doc (README.md, docs/*.md)" % (f, ", ".join(sorted(flags[f]))))
print("ok   %d flags of %d commands' --help, each in a doc" % (len(flags) - len(undocumented), len(helps)))

# 2. the benchmarks that take options say how, and run nothing, on --help
for b in ("bench_dist_rtt", "bench_transport", "bench_socket_floor", "bench_cuda_gemm",
          "bench_cuda_conv"):
    exe = os.path.join(build, "bench", b)
    if not os.path.exists(exe):
        print("skip %s: not built" % b)
        continue
    rc, out = run([exe, "--help"])
    if rc != 0 or "usage" not in out or "{" in out:
        fail("%s --help: exit %d: %s" % (b, rc, out[:200]))
print("ok   the benchmarks' --help print their usage")

# 3. the paths the docs name in backticks exist
tops = {d for d in os.listdir(root) if os.path.isdir(os.path.join(root, d)) and not d.startswith(".")}
tops -= {"build"}


def expand(p):
    m = re.search(r"\{([^{}]*)\}", p)
    if not m:
        return [p]
    return [q for alt in m.group(1).split(",") for q in expand(p[:m.start()] + alt + p[m.end():])]


# files a doc shows how to add (docs/sync.md's example strategy), not files of the tree
TO_BE_WRITTEN = {"sync/strategy_halved.c"}


def exists(p, doc):
    if p in TO_BE_WRITTEN:
        return True
    cands = [os.path.join(root, p), os.path.join(os.path.dirname(doc), p)]
    if p.startswith("tests/") and "." not in os.path.basename(p):  # a test's program
        cands += [os.path.join(root, p + ext) for ext in (".c", ".sh", ".py")]
    if p.startswith("psgraph/"):
        cands.append(os.path.join(root, "include", p))
    return any(glob.glob(c) if "*" in c else os.path.exists(c) for c in cands)


checked = 0
for doc, t in text.items():
    for tok in re.findall(r"`([^`\n]+)`", t):
        tok = tok.strip().rstrip(".,:;")
        if not re.fullmatch(r"[A-Za-z0-9_./{},*-]+", tok) or tok.startswith(("/", ".", "-")):
            continue
        first = tok.split("/")[0]
        named = ("/" in tok and (first in tops or first == "psgraph")) or \
                (os.path.basename(doc) == "api.md" and re.fullmatch(r"[a-z_0-9]+\.h", tok))
        if not named or (first == "psgraph" and not tok.endswith(".h")):
            continue
        for p in expand(tok):
            if os.path.basename(doc) == "api.md" and "/" not in p:
                p = "include/psgraph/" + p
            checked += 1
            if not exists(p, doc):
                fail("%s names `%s`, which does not exist" % (os.path.relpath(doc, root), p))
print("ok   %d backticked paths of README.md and docs/*.md checked" % checked)

# 4. every public header in docs/api.md's table
api = text[os.path.join(root, "docs", "api.md")]
for h in sorted(glob.glob(os.path.join(root, "include", "psgraph", "*.h"))):
    if not re.search(r"^\|[^\n]*`%s`" % re.escape(os.path.basename(h)), api, re.M):
        fail("include/psgraph/%s is not in docs/api.md's table of headers" % os.path.basename(h))
print("ok   the public headers are in docs/api.md's table")
sys.exit(1 if fails else 0)
