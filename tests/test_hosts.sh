#!/usr/bin/env bash
# The emulated hosts of tools/hosts.sh: hosts reach each other by name at their
# 198.18.0.x address, a tbf cap holds a transfer near its rate, a cut link carries nothing
# and carries again once healed, tools/delay_forward.py adds its delay to a round trip, and
# after the run no namespace, /etc/netns folder or process of it is left, also when the
# script using the hosts is stopped with SIGINT. Skips (77) where namespaces cannot be made.
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
. "$root/tools/hosts.sh"
hosts_init || exit 77
fails=0
ok() { echo "ok   $*"; }
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
net="python3 $root/tests/hosts_net.py"

hosts_up a b || { echo "FAIL: hosts_up"; exit 1; }
hosts_exec b $net serve b:7000 >"$HOSTS_DIR/serve.log" 2>&1 &
if hosts_exec a $net reach b:7000 5 && [ "$(hosts_exec a getent hosts b | awk '{print $1}')" = 198.18.0.11 ]; then
  ok "host a reaches host b by name at $(hosts_ip b)"
else
  fail "a cannot reach b:7000: $(cat "$HOSTS_DIR/serve.log")"
fi

# 4 MB from a to b at a rate in Mbit/s within [$2, $3) (the machine is shared: wide bounds)
rate_within() {
  local mbps
  mbps=$(hosts_exec a $net send b:7000 4000000)
  if awk -v m="$mbps" -v lo="$2" -v hi="$3" 'BEGIN { exit !(m >= lo && m < hi) }'; then
    ok "$1: 4 MB at $mbps Mbit/s"
  else
    fail "$1: 4 MB at '$mbps' Mbit/s, not in [$2, $3)"
  fi
}
hosts_cap b 50mbit
rate_within "capped at 50mbit" 30 60 # 4 MB take ~0.67 s
hosts_uncap b
rate_within "uncapped again" 100 1000000

# a cut: no connection opens; healed: it does again
hosts_cut b
if ! hosts_exec a $net reach b:7000 1.5; then ok "a cut link carries nothing"; else fail "reached b through a cut link"; fi
hosts_heal b
if hosts_exec a $net reach b:7000 5; then ok "a healed link carries again"; else fail "b unreachable after the heal"; fi

# latency from the delaying forwarder: 20 ms each way, so a round trip >= 40 ms
hosts_exec a python3 "$root/tools/delay_forward.py" a:7100 b:7000 20 >"$HOSTS_DIR/fwd.log" 2>&1 &
hosts_exec a $net reach a:7100 5
direct=$(hosts_exec a $net rtt b:7000 10)
delayed=$(hosts_exec a $net rtt a:7100 10)
if awk -v d="$direct" -v l="$delayed" 'BEGIN { exit !(l >= 40 && l < 200 && d < 20) }'; then
  ok "round trip $direct ms direct, $delayed ms through a 20 ms forwarder"
else
  fail "round trips: direct '$direct' ms, forwarded '$delayed' ms: $(cat "$HOSTS_DIR/fwd.log")"
fi

# a run stopped by SIGINT removes its hosts and their processes
marker="$HOSTS_DIR/child"
# (an async job of a script starts with SIGINT ignored: give it back its default, as a
# terminal's foreground job has)
python3 -c 'import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); os.execvp("bash", sys.argv[1:])' \
  bash -c '. "$1/tools/hosts.sh"; hosts_init || exit 77; hosts_up x y || exit 1
         hosts_exec y sleep 300 & echo "$!" >"$2.pid"; echo "$HOSTS_ID" >"$2"; wait' child "$root" "$marker" &
child=$!
for _ in $(seq 100); do [ -s "$marker" ] && break; sleep 0.1; done
sleep 0.3
id=$(cat "$marker" 2>/dev/null)
kill -INT "$child"
wait "$child"
rc=$?
if [ -n "$id" ] && [ $rc = 130 ] && ! ip netns list | grep -q "psg-$id-" && ! ls /etc/netns 2>/dev/null | grep -q "psg-$id-" &&
   ! kill -0 "$(cat "$marker.pid")" 2>/dev/null; then
  ok "SIGINT: exit 130, its namespaces and /etc/netns folders removed, its processes gone"
else
  fail "SIGINT of a run (rc $rc, id '$id'): $(ip netns list | grep "psg-$id-")"
fi

ns_a=$(hosts_ns a)
hosts_down
if ! ip netns list | grep -q "psg-$HOSTS_ID-" && [ ! -e "/etc/netns/$ns_a" ]; then
  ok "hosts_down: no namespace left"
else
  fail "left: $(ip netns list | grep "psg-$HOSTS_ID-")"
fi
[ $fails = 0 ]
