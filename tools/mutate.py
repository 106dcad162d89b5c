#!/usr/bin/env python3
"""Mutation testing of psgraph's critical files (docs/testing.md): puts one small bug at a time
into one file (tools/mutants.py says which kinds), rebuilds only what changes in a copy of the
tree (build-mut/), runs only the tests that cover that file, and prints the score and every
mutant no test noticed. Run by hand or on a schedule, never in CI: a run takes hours on two
cores.

  python3 tools/mutate.py                      # every critical file, 40 mutants each (seed 1)
  python3 tools/mutate.py --files ps/checkpoint.c --per-file 0   # every mutant of one file
  python3 tools/mutate.py --resume             # reuses the last run's kills and reviewed survivors
  python3 tools/mutate.py --list               # the mutants it would make, and exits
  python3 tools/mutate.py --report --per-file 20   # the score so far, from results.jsonl; runs nothing

Two passes, as tools/test.sh: a release build (with LeakSanitizer's scan at exit, so a dropped
free() is seen), then, for what survives it, ASan + UBSan (built and timed at the first
survivor). A test's unmutated time is kept in baselines.json and reused while its programs are
the same bytes. Each test gets a timeout of 3x its unmutated time + 20 s, and a mutant that
makes a test hang past it counts as killed. A mutant whose object code equals the original's
(the compiler folded it away) is equivalent and not run; one that does not compile is
stillborn. Neither counts in the score.
Not a test of speed, and not the fuzzers (tools/fuzz.sh).
"""
import argparse
import hashlib
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mutants import Mutant, make_mutants  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# The critical files and the tests that cover each (run fastest first: a mutant is killed by
# the first test that fails, the rest are not run).
CRITICAL = {
    "ops/state/accumulator.c": ["test_accumulator", "test_sync", "test_sparse_apply"],
    "ops/state/ssp_clock.c": ["test_ssp_clock"],
    "ps/checkpoint.c": ["test_checkpoint", "test_init_from"],
    "worker/init_from.c": ["test_init_from"],
    "net/curve_guard.c": ["test_curve"],
    "net/client.c": ["test_wire", "test_liveness", "test_dist", "test_curve"],
    "core/msgpack_check.c": ["test_msgpack_check", "test_serialize"],
    "runtime/placement.c": ["test_placement", "test_partition"],
    "ops/cpu/conv2d.c": ["test_ops_nn", "test_op_cases"],
    "ops/cpu/conv2d_direct.c": ["test_ops_nn", "test_op_cases"],
}

# The fast pass: release with LeakSanitizer alone (no instrumentation, a scan at exit). Its
# survivors go through the suite's other pass, ASan + UBSan as tools/test.sh runs it.
RELEASE = ("release", ["-Db_sanitize=leak"], {})
SANITIZERS = ("asan", ["-Db_sanitize=address,undefined", "-Dbuildtype=debug", "-Doptimization=1"],
              {"ASAN_OPTIONS": "detect_leaks=1", "UBSAN_OPTIONS": "print_stacktrace=1:halt_on_error=1"})

# Reviewed survivors that no test can kill, each with why: docs/testing.md's bullets
# "- `FILE:LINE` `the line`: `OLD` → `NEW`: why", matched by the file, the line's text and the
# change (not the line number, so that a review holds while the file moves).
REVIEWED_DOC = os.path.join(ROOT, "docs", "testing.md")
REVIEWED_RE = re.compile(r"^- `(?P<file>[^`:]+):\d+` `(?P<line>[^`]+)`: `(?P<old>[^`]+)` (?:->|\u2192) "
                         r"`(?P<new>[^`]+)`: (?P<why>.+)$")


def load_reviewed():
    reviewed = {}
    if os.path.exists(REVIEWED_DOC):
        for raw in open(REVIEWED_DOC, encoding="utf-8"):
            m = REVIEWED_RE.match(raw.rstrip("\n"))
            if m:
                reviewed[(m["file"], m["line"].strip(), m["old"], m["new"])] = m["why"]
    return reviewed


# ---- the copy of the tree and its builds ----------------------------------------------

def sh(cmd):
    return subprocess.run(cmd, check=True, text=True, capture_output=True).stdout


def ninja(build_dir, targets):
    r = subprocess.run(["ninja", "-C", build_dir] + targets, text=True, capture_output=True)
    return r.returncode == 0, r.stdout + r.stderr


def sync_tree(src_dir):
    """Copies the working tree's files (tracked, and untracked ones git does not ignore) into
    src_dir, only those that differ, so that ninja rebuilds only what changed."""
    files = sh(["git", "-C", ROOT, "ls-files", "-co", "--exclude-standard", "-z"]).split("\0")
    files = [f for f in files if f and os.path.isfile(os.path.join(ROOT, f))]
    for f in files:
        a, b = os.path.join(ROOT, f), os.path.join(src_dir, f)
        data = open(a, "rb").read()
        if os.path.exists(b) and open(b, "rb").read() == data:
            continue
        os.makedirs(os.path.dirname(b), exist_ok=True)
        with open(b, "wb") as out:
            out.write(data)
        shutil.copymode(a, b)
    want = set(files)
    for dirpath, _, names in os.walk(src_dir):
        for n in names:
            if os.path.relpath(os.path.join(dirpath, n), src_dir) not in want:
                os.unlink(os.path.join(dirpath, n))


def objects_of(build_dir, src_dir, path):
    """The object files compiled from src_dir/path (relative to build_dir)."""
    want = os.path.realpath(os.path.join(src_dir, path))
    return sorted({e["output"] for e in json.load(open(os.path.join(build_dir, "compile_commands.json")))
                   if os.path.realpath(os.path.join(e["directory"], e["file"])) == want})


def sweep(bdir):
    """Kills every process still running a program of the mutation builds (a test that failed
    may leave a server behind, stopped or not): they are this tool's own."""
    mine = os.path.realpath(bdir) + os.sep
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            exe = os.readlink("/proc/%s/exe" % pid)
        except OSError:
            continue
        if exe.startswith(mine):
            for sig in (signal.SIGCONT, signal.SIGKILL):
                try:
                    os.kill(int(pid), sig)
                except OSError:
                    pass


def run_test(test, build_dir, timeout, extra_env):
    """Runs one test as meson would, in its own process group; returns (passed, seconds,
    timed out, the output's tail)."""
    env = dict(os.environ)
    env.update(extra_env)
    env.update(test.get("env") or {})
    env.setdefault("MALLOC_PERTURB_", "165")
    t0 = time.time()
    p = subprocess.Popen(test["cmd"], cwd=test.get("workdir") or build_dir, env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    out, timed_out = b"", False
    try:
        out, _ = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        for sig, wait in ((signal.SIGTERM, 5), (signal.SIGKILL, 30)):  # a script's trap first
            try:
                os.killpg(p.pid, sig)
            except OSError:
                pass
            try:
                out, _ = p.communicate(timeout=wait)
                break
            except subprocess.TimeoutExpired:
                pass
    sweep(os.path.dirname(build_dir))
    return p.returncode == 0 and not timed_out, time.time() - t0, timed_out, (out or b"").decode(
        errors="replace")[-1500:]


def fingerprint(paths):
    """A digest of the files' names and contents (not their times: ninja relinks a test after
    each mutant, and the unmutated link is byte for byte the earlier one)."""
    h = hashlib.sha1()
    for p in sorted(paths):
        h.update(p.encode() + b"\0")
        with open(p, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                h.update(block)
    return h.hexdigest()


def reusable(prev, reviewed_key, reviewed, trust_reviews=False):
    """Whether --resume takes a mutant's earlier outcome instead of running it again: killed,
    same object and stillborn always (results are keyed by the file's text), a survivor when
    docs/testing.md reviews it (equivalent or unreachable: a new test cannot change that); an
    unreviewed survivor runs again, to see whether a test added since kills it. A reviewed
    mutant with no result on the file's text runs, to see that it still survives, unless
    --trust-reviews (a run short of time: the review is taken, and the report says so; main()
    trusts only a review of a line whose text is unique in the file); an outcome taken that way
    is not reused by a later run without the option."""
    if not prev:
        return trust_reviews and reviewed_key in reviewed
    if prev.get("review_taken"):
        return trust_reviews and reviewed_key in reviewed
    return prev["status"] in ("killed", "same_object", "stillborn") or \
        (prev["status"] == "survived" and reviewed_key in reviewed)


class Build:
    """One build of the copied tree: its tests, and how long each takes unmutated."""

    def __init__(self, bdir, name, options, env):
        self.name, self.dir, self.options, self.env = name, os.path.join(bdir, name), options, env
        self.base_time, self.tests = {}, None

    def configure(self, src_dir):
        """meson setup (once), meson again when a meson.build changed, and the tests' map."""
        if self.tests is not None:
            return
        if not os.path.exists(os.path.join(self.dir, "build.ninja")):
            subprocess.run(["meson", "setup", self.dir, src_dir, "-Dcuda=disabled"] + self.options,
                           check=True, stdout=subprocess.DEVNULL)
        ok, log = ninja(self.dir, ["build.ninja"])
        if not ok:
            sys.exit("mutate: cannot configure %s:\n%s" % (self.dir, log[-3000:]))
        self.tests = {t["name"]: t for t in json.loads(sh(["meson", "introspect", "--tests", self.dir]))}
        self.files_of = {t["id"]: [os.path.relpath(f, self.dir) for f in t["filename"]]
                         for t in json.loads(sh(["meson", "introspect", "--targets", self.dir]))}

    def prepare(self, src_dir, needed):
        """Builds the unmutated tree for the tests needed and times each unmutated run, or
        takes the time from baselines.json when the test's files (its programs, its script)
        are byte for byte those of the cached run: a restart does not rerun a 2-minute test."""
        self.configure(src_dir)
        todo = [t for t in needed if t not in self.base_time]
        if not todo:
            return
        missing = [t for t in todo if t not in self.tests]
        if missing:
            sys.exit("mutate: no test %s in %s" % (", ".join(missing), self.dir))
        ok, log = ninja(self.dir, self.targets(todo))
        if not ok:
            sys.exit("mutate: the unmutated tree does not build in %s:\n%s" % (self.dir, log[-3000:]))
        cache_path = os.path.join(self.dir, "baselines.json")
        cache = json.load(open(cache_path)) if os.path.exists(cache_path) else {}
        for t in todo:
            fp = fingerprint(self.test_files(t))
            if cache.get(t, {}).get("fp") == fp:
                self.base_time[t] = cache[t]["secs"]
                print("baseline %-8s %-20s %6.1f s (cached)" % (self.name, t, self.base_time[t]), flush=True)
                continue
            passed, secs, _, tail = run_test(self.tests[t], self.dir, self.tests[t].get("timeout") or 300, self.env)
            if not passed:
                sys.exit("mutate: %s fails in %s without a mutant:\n%s" % (t, self.dir, tail))
            self.base_time[t] = secs
            cache[t] = {"fp": fp, "secs": round(secs, 2)}
            with open(cache_path, "w") as fh:
                json.dump(cache, fh, indent=1)
            print("baseline %-8s %-20s %6.1f s" % (self.name, t, secs), flush=True)

    def test_files(self, t):
        """The files a test runs: the programs it depends on, and its command's files."""
        files = [os.path.join(self.dir, f) for f in self.targets([t])]
        return files + [a for a in self.tests[t]["cmd"] if os.path.isfile(a)]

    def targets(self, names):
        return sorted({x for t in names for d in self.tests[t].get("depends", []) for x in self.files_of.get(d, [])})

    def first_failing(self, names, factor):
        """Builds what the tests names need and runs them, fastest first: the first that
        fails (" (timeout)" when it hung), "stillborn" when it does not build, or None."""
        if not ninja(self.dir, self.targets(names))[0]:
            return "stillborn"
        for t in sorted(names, key=lambda t: self.base_time[t]):
            timeout = min(factor * self.base_time[t] + 20, self.tests[t].get("timeout") or 300)
            passed, _, timed_out, _ = run_test(self.tests[t], self.dir, timeout, self.env)
            if not passed:
                return t + (" (timeout)" if timed_out else "")
        return None


# ---- the run ----------------------------------------------------------------------------

def try_mutant(m, src, path, builds, base_obj, factor, src_dir):
    """(status, the test that killed it): killed, survived, same_object or stillborn. The
    sanitizer build is made and timed only when a mutant survives the release pass."""
    def write(text):
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(text)
    write(m.apply(src))
    try:
        release = builds[0]
        if not ninja(release.dir, list(base_obj))[0]:
            return "stillborn", None
        if all(open(os.path.join(release.dir, o), "rb").read() == data for o, data in base_obj.items()):
            return "same_object", None
        for b in builds:
            if b is not release and any(t not in b.base_time for t in CRITICAL[m.path]):
                write(src)  # its baselines on the unmutated file
                b.prepare(src_dir, CRITICAL[m.path])
                write(m.apply(src))
            by = b.first_failing(CRITICAL[m.path], factor)
            if by == "stillborn":
                return "stillborn", None
            if by:
                return "killed", by + ("" if b is release else " [%s]" % b.name)
        return "survived", None
    finally:
        write(src)  # the file back as it was, whatever happened


def report(summary, minutes, args):
    print("\nmutation score (seed %d, %s mutants a file, %.0f min)" % (args.seed, args.per_file or "all", minutes))
    print("%-26s %7s %4s %6s %6s %8s %8s %8s %9s %6s" % ("file", "mutants", "run", "killed", "(asan)", "survived",
                                                         "reviewed", "same-obj", "stillborn", "score"))
    k_all = s_all = r_all = 0
    for f, s in summary.items():
        k, sv, rv = s["killed"], len(s["survived"]), len(s["reviewed"])
        k_all, s_all, r_all = k_all + k, s_all + sv, r_all + rv
        print("%-26s %7d %4d %6d %6d %8d %8d %8d %9d %5.1f%%" % (
            f, s["mutants"], s["run"] - s["not_run"], k, s["by_sanitizers"], sv, rv, s["same_object"], s["stillborn"],
            100.0 * k / max(1, k + sv + rv)))
        if s["not_run"]:
            print("%-26s %d of its %d sampled mutants not run yet" % ("", s["not_run"], s["run"]))
        if s["review_taken"]:
            print("%-26s %d of its reviewed not run on this text (--trust-reviews)" % ("", s["review_taken"]))
    print("total: %d killed of %d mutants that compiled to new code: %.1f%%; of those not reviewed as "
          "equivalent (%d, docs/testing.md): %.1f%%" %
          (k_all, k_all + s_all + r_all, 100.0 * k_all / max(1, k_all + s_all + r_all), r_all,
           100.0 * k_all / max(1, k_all + s_all)))
    for s in summary.values():
        for m, _ in s["survived"]:
            print("SURVIVED " + m.bullet() + "    (mutated: " + m.new_line.strip() + ")")
    for s in summary.values():
        for m, reason in s["reviewed"]:
            print("REVIEWED " + m.bullet() + " " + reason)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--files", nargs="*", help="critical files to mutate (default: all of them)")
    ap.add_argument("--per-file", type=int, default=40, help="mutants sampled per file, 0: all")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--build-dir", default=os.path.join(ROOT, "build-mut"))
    ap.add_argument("--resume", action="store_true",
                    help="reuse the last run's killed, same-object, stillborn and reviewed mutants; rerun the rest")
    ap.add_argument("--trust-reviews", action="store_true",
                    help="with --resume: a mutant docs/testing.md reviews and never run on the file's text counts as "
                         "reviewed without running it (the report counts them)")
    ap.add_argument("--no-sanitizers", action="store_true", help="no ASan + UBSan pass for the survivors")
    ap.add_argument("--list", action="store_true", help="print the mutants and exit")
    ap.add_argument("--report", action="store_true",
                    help="the score of the sampled mutants from build-mut/results.jsonl (each one's last outcome on the "
                         "file's present text), running nothing; those never run are counted as not run")
    ap.add_argument("--timeout-factor", type=float, default=3.0)
    args = ap.parse_args()
    os.nice(19)

    files = args.files or list(CRITICAL)
    unknown = [f for f in files if f not in CRITICAL]
    if unknown:
        sys.exit("mutate: %s: not in the map of critical files (CRITICAL in tools/mutate.py)" % ", ".join(unknown))
    plan = []
    for f in files:
        src = open(os.path.join(ROOT, f), encoding="utf-8").read()
        ms = [Mutant(f, src, *m) for m in make_mutants(src)]
        chosen = ms if args.per_file <= 0 or args.per_file >= len(ms) else \
            sorted(random.Random("%d:%s" % (args.seed, f)).sample(ms, args.per_file), key=lambda m: m.start)
        plan.append((f, src, len(ms), chosen))
    if args.list:
        for f, _, n, chosen in plan:
            print("%s: %d mutants, %d chosen" % (f, n, len(chosen)))
            for m in chosen:
                print("  " + m.describe() + "    | " + m.new_line.strip())
        return 0

    bdir = os.path.abspath(args.build_dir)
    src_dir = os.path.join(bdir, "src")
    results_path = os.path.join(bdir, "results.jsonl")
    previous = {}
    if (args.resume or args.report) and os.path.exists(results_path):
        for line in open(results_path):
            r = json.loads(line)
            previous[(r["id"], r["sha"])] = r
    builds, base_obj = [], {}
    if not args.report:
        os.makedirs(src_dir, exist_ok=True)
        sweep(bdir)  # what an interrupted run left running
        sync_tree(src_dir)  # and the file it left mutated, back
        needed = sorted({t for f in files for t in CRITICAL[f]})
        builds = [Build(bdir, *b) for b in ([RELEASE] if args.no_sanitizers else [RELEASE, SANITIZERS])]
        builds[0].prepare(src_dir, needed)  # the sanitizer build: at the first survivor
    for f in files if builds else []:
        objs = objects_of(builds[0].dir, src_dir, f)
        if not objs:
            sys.exit("mutate: no object file is built from %s" % f)
        base_obj[f] = {o: open(os.path.join(builds[0].dir, o), "rb").read() for o in objs}
    reviewed = load_reviewed()

    out = open(os.devnull if args.report else results_path, "a" if args.resume else "w")
    summary, done, total, t_start = {}, 0, sum(len(p[3]) for p in plan), time.time()
    for f, src, n_all, chosen in plan:
        sha = hashlib.sha1(src.encode()).hexdigest()
        lines = [line.strip() for line in src.splitlines()]
        s = summary[f] = {"mutants": n_all, "run": len(chosen), "killed": 0, "by_sanitizers": 0,
                          "survived": [], "reviewed": [], "same_object": 0, "stillborn": 0, "not_run": 0,
                          "review_taken": 0}
        for m in chosen:
            done += 1
            prev = previous.get((m.id, sha))
            if args.report and not prev:
                s["not_run"] += 1
                continue
            # a review is taken only for a line whose text is the file's only one: a review names
            # its line by the text, and a second line of that text (an unlock) is another mutant
            trust = args.trust_reviews and lines.count(m.equivalent_key()[1]) == 1
            if args.resume and not args.report and reusable(prev, m.equivalent_key(), reviewed, trust) \
                    and (not prev or prev.get("review_taken")):
                status, by = "survived", "review taken, not run"  # --trust-reviews
                s["review_taken"] += 1
                if not prev:
                    out.write(json.dumps({"id": m.id, "sha": sha, "status": status, "by": None, "secs": 0,
                                          "review_taken": True, "desc": m.describe()}) + "\n")
                    out.flush()
            elif args.report or (args.resume and reusable(prev, m.equivalent_key(), reviewed)):
                status, by = prev["status"], prev.get("by")
                s["review_taken"] += bool(prev.get("review_taken"))
            else:
                t0 = time.time()
                status, by = try_mutant(m, src, os.path.join(src_dir, f), builds, base_obj[f], args.timeout_factor,
                                        src_dir)
                out.write(json.dumps({"id": m.id, "sha": sha, "status": status, "by": by,
                                      "secs": round(time.time() - t0, 1), "desc": m.describe()}) + "\n")
                out.flush()
            if status == "killed":
                s["killed"] += 1
                s["by_sanitizers"] += by.endswith("]")
            elif status == "survived":
                reason = reviewed.get(m.equivalent_key())
                (s["reviewed"] if reason else s["survived"]).append((m, reason))
            else:
                s[status] += 1
            print("[%d/%d] %-11s %s%s" % (done, total, status, m.describe(), " (%s)" % by if by else ""), flush=True)
    out.close()
    report(summary, (time.time() - t_start) / 60, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
