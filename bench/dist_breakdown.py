#!/usr/bin/env python3
"""Where a distributed training step's time goes, from a merged cluster trace
(`psgraph launch ... -- psgraph train ... --trace FILE --trace-steps A:B`).

  bench/dist_breakdown.py FILE [--worker-pid P]
Prints one JSON line of medians over the traced steps, in microseconds, for one worker
(the first by default), each step being the worker's "step" event (the session's run):
  step          from one step's start to the next one's
  compute       the worker's ops of the step other than Send and Recv (forward, loss, backward)
  send          the worker's Send ops (each leaves its tensor in the rendezvous: the bytes are
                encoded and written when the ps pulls them, on other threads)
  idle          the step's time in which the compute thread ran no op of the step: waiting
                for a variable (a Recv), or for the step's replies at its end
  first_wait    from the step's start to its first compute op: the session's start of the
                step, and the wait for the first variable it needs
  last_wait     from the last op of the compute thread to the step's end: the RunGraph
                replies (the ps's updates, its reply)
  between       from a step's end to the next step's start (the trainer's loop, the feeds)
  ps_apply      the ps's update ops (Apply*) that ran within the step's span
  ps_read_send  the ps's ReadVariable and Send ops within the step's span
The encoding, the wire and the copies are not ops: they are in idle, first_wait and last_wait.
Not a timer of its own: what the trace recorded, nothing else.
"""
import json
import statistics
import sys


def union(intervals):
    total, end = 0.0, None
    for a, b in sorted(intervals):
        if end is None or a > end:
            total += b - a
            end = b
        elif b > end:
            total += b - end
            end = b
    return total


def main():
    args = sys.argv[1:]
    if not args:
        sys.exit(__doc__)
    events = json.load(open(args[0]))["traceEvents"]
    names = {e["pid"]: e["args"]["name"] for e in events
             if e.get("ph") == "M" and e.get("name") == "process_name"}
    workers = sorted(p for p, n in names.items() if "/job:worker/" in n)
    if not workers:
        sys.exit(f"{args[0]}: no worker process in the trace")
    wpid = int(args[args.index("--worker-pid") + 1]) if "--worker-pid" in args else workers[0]
    ops = [e for e in events if e.get("ph") == "X"]
    steps = sorted((e for e in ops if e["pid"] == wpid and e["cat"] == "step"), key=lambda e: e["ts"])
    by_step = {}
    for e in ops:
        if e["pid"] == wpid and e["cat"] != "step":
            by_step.setdefault(e["args"]["step"], []).append(e)
    ps_ops = [e for e in ops if "/job:ps/" in names.get(e["pid"], "")]
    rows = []
    for st, nxt in zip(steps, steps[1:]):
        t0, t1 = st["ts"], st["ts"] + st["dur"]
        w = by_step.get(st["args"]["step"], [])
        main = [e for e in w if e["tid"] == st["tid"] and e["cat"] != "Recv"]
        if not main:
            continue
        spans = [(e["ts"], e["ts"] + e["dur"]) for e in main]
        ps = [e for e in ps_ops if t0 <= e["ts"] < nxt["ts"]]
        rows.append({
            "step": nxt["ts"] - t0,
            "compute": sum(e["dur"] for e in w if e["cat"] not in ("Send", "Recv")),
            "send": sum(e["dur"] for e in w if e["cat"] == "Send"),
            "idle": st["dur"] - union(spans),
            "first_wait": min(a for a, _ in spans) - t0,
            "last_wait": t1 - max(b for _, b in spans),
            "between": nxt["ts"] - t1,
            "ps_apply": sum(e["dur"] for e in ps if e["cat"].startswith("Apply")),
            "ps_read_send": sum(e["dur"] for e in ps if e["cat"] in ("ReadVariable", "Send")),
        })
    if not rows:
        sys.exit(f"{args[0]}: fewer than 2 traced steps of worker pid {wpid}")
    keys = ["step", "compute", "send", "idle", "first_wait", "last_wait", "between", "ps_apply",
            "ps_read_send"]
    out = {"bench": "dist_breakdown", "worker": names[wpid], "steps": len(rows),
           "unit": "us, median over steps"}
    out.update({k: round(statistics.median(r[k] for r in rows), 1) for k in keys})
    print(json.dumps(out))


if __name__ == "__main__":
    main()
