# Shell helpers of the membership tests (tests/test_membership*.sh), sourced after
# `psgraph=$1`: a private folder $tmp (removed at the end, a launch still running stopped),
# ok / fail counting into $fails, and $stamp, a Python filter that prefixes each line with
# the time it came.
fails=0
tmp=$(mktemp -d "/tmp/psg_$(basename "$0" .sh).XXXXXX")
launch_pid=
cleanup() {
  [ -n "$launch_pid" ] && kill -TERM "$launch_pid" 2>/dev/null
  wait 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT
# wait_launch ACT: while the launch $launch_pid runs (at most 240 s of polls 0.1 s apart), calls
# ACT, a function that acts once when the line it waits for has come; then waits for the
# launch: its exit code in $launch_rc, and $launch_pid cleared.
wait_launch() {
  for _ in $(seq 1 2400); do
    "$1"
    kill -0 "$launch_pid" 2>/dev/null || break
    sleep 0.1
  done
  wait "$launch_pid"
  launch_rc=$?
  launch_pid=
}
ok() { echo "ok   $*"; }
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
stamp='import sys, time
for line in sys.stdin:
    sys.stdout.write("%.3f %s" % (time.time(), line))
    sys.stdout.flush()'
