#!/usr/bin/env python3
"""The mutation tool's own checks (tools/mutants.py, tools/mutate.py, docs/testing.md), in a
second: on a C snippet, each kind of mutant is made where it should be and nowhere in comments,
strings or preprocessor lines; every critical file exists and every test mapped to it is
registered in tests/meson.build; every survivor docs/testing.md lists parses as the tool reads
it. Not a mutation run (that takes hours: docs/testing.md)."""
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tools"))
import mutants  # noqa: E402
import mutate  # noqa: E402

SNIPPET = r'''/* a comment: if (a < b && c) x++; */
#define LIMIT (1 << 20)
#include <stdio.h>
static const char *s = "a < b || c == 0";
static int f(int a, int b, bool on) {
    int n = 0; // n < 3 || n > 4
    if (a < b && on) n += 2;
    while (n != 7) n++;
    g(a - b);
    return n * 3;
}
'''

failures = 0


def check(cond, what):
    global failures
    if not cond:
        failures += 1
        print("FAIL: " + what)


def test_snippet():
    made = [mutants.Mutant("x.c", SNIPPET, *m) for m in mutants.make_mutants(SNIPPET)]
    lines = {m.line for m in made}
    check(not lines & {1, 2, 3, 4}, "mutants only in code lines, got lines %s" % sorted(lines))
    got = {(m.line, m.op, m.old, m.repl) for m in made}
    want = {
        (7, "compare", "<", "<="), (7, "compare", "<", ">="), (7, "logic", "&&", "||"),
        (7, "arith", "+=", "-="), (7, "constant", "2", "3"), (7, "constant", "2", "1"),
        (7, "negate", "a < b && on", "!(a < b && on)"), (7, "drop", "n += 2;", ";"),
        (8, "compare", "!=", "=="), (8, "arith", "++", "--"), (8, "constant", "7", "8"),
        (9, "arith", "-", "+"), (9, "drop", "g(a - b);", ";"), (10, "arith", "*", "/"),
        (6, "constant", "0", "1"),
    }
    for w in sorted(want - got):
        check(False, "no mutant %s" % (w,))
    check(not any(m.op == "drop" and m.line in (5, 6, 10) for m in made),
          "no declaration or return dropped")
    m = next(m for m in made if (m.line, m.op, m.old) == (7, "logic", "&&"))
    check(m.apply(SNIPPET).splitlines()[6] == "    if (a < b || on) n += 2;", "apply: " + m.apply(SNIPPET).splitlines()[6])
    check(m.equivalent_key() == ("x.c", "if (a < b && on) n += 2;", "&&", "||"), "key %s" % (m.equivalent_key(),))
    check(m.bullet() == "- `x.c:7` `if (a < b && on) n += 2;`: `&&` \u2192 `||`:", "bullet " + m.bullet())


def test_map():
    registered = open(os.path.join(ROOT, "tests", "meson.build")).read()
    for f, tests in mutate.CRITICAL.items():
        check(os.path.isfile(os.path.join(ROOT, f)), "critical file %s exists" % f)
        for t in tests:
            check(re.search(r"['\"]%s['\"]" % re.escape(t), registered) is not None,
                  "%s (for %s) is a test in tests/meson.build" % (t, f))


def test_reviewed_list():
    text = open(mutate.REVIEWED_DOC, encoding="utf-8").read()
    section = text.split("\n## Survivors", 1)[1] if "\n## Survivors" in text else ""
    bullets = [line for line in section.splitlines() if line.startswith("- `")]
    for line in bullets:
        check(mutate.REVIEWED_RE.match(line) is not None, "docs/testing.md: the tool cannot read: " + line)
    check(len(mutate.load_reviewed()) > 0 or not bullets, "the reviewed survivors load")


def test_resume_and_baselines():
    """--resume reruns only what a new test could change: an unreviewed survivor; a cached
    baseline holds while the test's files are the same bytes, whatever their times."""
    key = ("x.c", "if (a < b && on) n += 2;", "&&", "||")
    reviewed = {key: "equivalent: ..."}
    for status in ("killed", "same_object", "stillborn"):
        check(mutate.reusable({"status": status}, key, {}), "an earlier %s is reused" % status)
    check(mutate.reusable({"status": "survived"}, key, reviewed), "a reviewed survivor is reused")
    check(not mutate.reusable({"status": "survived"}, key, {}), "an unreviewed survivor runs again")
    check(not mutate.reusable(None, key, reviewed), "a mutant never run runs")
    check(mutate.reusable(None, key, reviewed, True), "--trust-reviews: a reviewed mutant never run is taken")
    check(not mutate.reusable(None, key, {}, True), "--trust-reviews: an unreviewed mutant never run runs")
    taken = {"status": "survived", "review_taken": True}
    check(not mutate.reusable(taken, key, reviewed), "a review taken unrun runs in a later run without the option")
    check(mutate.reusable(taken, key, reviewed, True), "... and is taken again with it")
    with tempfile.TemporaryDirectory() as d:
        a, b = os.path.join(d, "test_x"), os.path.join(d, "test_x.sh")
        for p, data in ((a, b"\x7fELF one"), (b, b"#!/bin/sh\n")):
            open(p, "wb").write(data)
        fp = mutate.fingerprint([a, b])
        os.utime(a, (1, 1))
        check(mutate.fingerprint([b, a]) == fp, "a relink to the same bytes keeps the baseline")
        open(a, "wb").write(b"\x7fELF two")
        check(mutate.fingerprint([a, b]) != fp, "a changed program is timed again")


def test_report():
    """--report scores what results.jsonl holds for the sample, runs nothing, and counts the
    rest as not run."""
    f = "core/msgpack_check.c"
    src = open(os.path.join(ROOT, f), encoding="utf-8").read()
    listed = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "mutate.py"), "--list", "--per-file", "2",
                             "--files", f], capture_output=True, text=True).stdout
    ids = [m.id for m in (mutants.Mutant(f, src, *x) for x in mutants.make_mutants(src))
           if "  " + m.describe() + "    | " in listed]
    check(len(ids) == 2, "--list shows the 2 sampled mutants, got %d" % len(ids))
    with tempfile.TemporaryDirectory() as d:
        with open(os.path.join(d, "results.jsonl"), "w") as out:
            out.write(json.dumps({"id": ids[0] if ids else "x", "sha": hashlib.sha1(src.encode()).hexdigest(),
                                  "status": "killed", "by": "test_msgpack_check", "secs": 1.0, "desc": "x"}) + "\n")
        r = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "mutate.py"), "--report", "--per-file", "2",
                            "--files", f, "--build-dir", d], capture_output=True, text=True)
        row = next((line.split() for line in r.stdout.splitlines() if line.startswith(f)), [])
        check(r.returncode == 0 and row[2:4] == ["1", "1"] and "1 of its 2 sampled mutants not run yet" in r.stdout,
              "--report: 1 run, 1 killed, 1 not run: " + r.stdout + r.stderr)
        check(sorted(os.listdir(d)) == ["results.jsonl"], "--report builds nothing: %s" % os.listdir(d))


if __name__ == "__main__":
    for t in (test_snippet, test_map, test_reviewed_list, test_resume_and_baselines, test_report):
        before = failures
        t()
        print("%s %s" % ("ok  " if failures == before else "FAIL", t.__name__))
    sys.exit(1 if failures else 0)
