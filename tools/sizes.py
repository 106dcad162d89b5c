#!/usr/bin/env python3
"""Checks the house's size rules on every C and CUDA source: no file over 1,000 lines,
no function over 120 lines (from its opening line to its closing brace).

Usage: tools/sizes.py [ROOT]   (prints each offender; exit 1 when there is one)

A function is found the way the house writes one: its head starts in column 0 and its
body ends at the first `}` in column 0, so the check needs no C parser."""
import os
import re
import sys

MAX_FILE_LINES = 1000
MAX_FUNCTION_LINES = 120
FOLDERS = ["core", "graph", "ops", "runtime", "net", "ps", "examples", "sync", "worker",
           "cli", "bench", "tests", "include", "docs"]
HEAD_START = re.compile(r"^(?!typedef|struct|enum|union|#)[A-Za-z_][\w \*]*\b(\w+)\(")


def functions(lines):
    """Yields (name, first line, length) of each function in a file's lines."""
    i = 0
    while i < len(lines):
        m = HEAD_START.match(lines[i])
        if not m or lines[i].rstrip().endswith(";"):
            i += 1
            continue
        # the head may span lines; it ends with "{" before any ";"
        j = i
        while j < len(lines) and not lines[j].rstrip().endswith("{") and not lines[j].rstrip().endswith(";"):
            j += 1
        if j >= len(lines) or not lines[j].rstrip().endswith("{") or "=" in "".join(lines[i:j + 1]):
            i = j + 1
            continue
        k = j + 1
        while k < len(lines) and lines[k].rstrip() != "}":
            k += 1
        yield m.group(1), i + 1, k - i + 1
        i = k + 1


def main(argv):
    root = os.path.abspath(argv[1] if len(argv) > 1 else os.path.join(os.path.dirname(__file__), ".."))
    bad = 0
    for folder in FOLDERS:
        for dirpath, _, names in os.walk(os.path.join(root, folder)):
            for name in sorted(names):
                if not name.endswith((".c", ".h", ".cu")):
                    continue
                path = os.path.join(dirpath, name)
                rel = os.path.relpath(path, root)
                with open(path, encoding="utf-8", errors="replace") as f:
                    lines = f.read().split("\n")
                if len(lines) - 1 > MAX_FILE_LINES:
                    print(f"{rel}: {len(lines) - 1} lines (the limit is {MAX_FILE_LINES})")
                    bad += 1
                for fn, line, n in functions(lines):
                    if n > MAX_FUNCTION_LINES:
                        print(f"{rel}:{line}: function {fn} is {n} lines (the limit is {MAX_FUNCTION_LINES})")
                        bad += 1
    print(f"sizes: {bad} over the limits")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
