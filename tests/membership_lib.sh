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
. "$(dirname "${BASH_SOURCE[0]}")/wait_launch.sh"
ok() { echo "ok   $*"; }
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
stamp='import sys, time
for line in sys.stdin:
    sys.stdout.write("%.3f %s" % (time.time(), line))
    sys.stdout.flush()'
