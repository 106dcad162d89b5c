# What bench/ssh_start.sh and bench/slurm_start.sh share (sourced): the time a launcher takes
# until its tasks are up, and the best of a few numbers.

# Seconds from the start of command $2... until $1 tasks said they are up (a ps "serving on",
# a worker's first line "up"); then Ctrl-C to it. "null" when they never were.
time_up() {
  python3 - "$@" <<'PY'
import signal, subprocess, sys, time
want = int(sys.argv[1])
t0 = time.monotonic()
p = subprocess.Popen(sys.argv[2:], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
up, took = set(), None
for line in p.stdout:
    tag = line.split("]", 1)[0]
    if "serving on" in line or line.rstrip().endswith("] up"):
        up.add(tag)
    if len(up) == want and took is None:
        took = time.monotonic() - t0
        p.send_signal(signal.SIGINT)
p.wait()
print(f"{took:.3f}" if took is not None else "null")
PY
}

# The smallest of the numbers $@ ("" and "null" left out), or null.
best_of() {
  python3 -c "import sys; v=[float(x) for x in sys.argv[1:] if x not in ('', 'null')]; print(min(v) if v else 'null')" "$@"
}

# $2 - $1 rounded to ms, or null.
over() {
  python3 -c "import sys; print(round(float(sys.argv[2]) - float(sys.argv[1]), 3) if 'null' not in sys.argv[1:] else 'null')" "$1" "$2"
}
