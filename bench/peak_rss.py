#!/usr/bin/env python3
"""Runs a command and writes its peak resident set size, so psgraph and its peer
are measured the same way by the benchmarks (train.sh, inception3.sh).

  bench/peak_rss.py OUT_FILE CMD [ARGS...]

CMD's stdout and stderr pass through; OUT_FILE gets {"peak_rss_mb": X, "rc": N}:
the largest RSS of CMD or of any process it waited for (getrusage of the
children: the peer's bash wrapper execs python, so that is one process).
"""
import json
import resource
import subprocess
import sys


def main():
    if len(sys.argv) < 3:
        sys.stderr.write(__doc__)
        return 2
    rc = subprocess.call(sys.argv[2:])
    kb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    with open(sys.argv[1], "w") as f:
        json.dump({"peak_rss_mb": round(kb / 1024.0, 1), "rc": rc}, f)
    return rc


if __name__ == "__main__":
    sys.exit(main())
