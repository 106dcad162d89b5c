#!/usr/bin/env bash
# Emulated hosts on one machine: each host a network namespace with its own address in
# 198.18.0.0/24 (RFC 2544's benchmarking range: nothing real is ever addressed), joined by
# a veth pair to a bridge in a switch namespace of its own, named through
# /etc/netns/NS/hosts, with a bandwidth cap (tc tbf) and a cut (link down) per link.
# Not a network simulator: no latency here (tools/delay_forward.py adds it per connection).
#
# Sourced by tests and benches:            Or by hand:
#   . tools/hosts.sh                         bash tools/hosts.sh shell h1 h2 h3
#   hosts_init || exit 77  # prints why      (a shell on h1; everything removed on exit)
#   hosts_up ps0 w0 w1     # names: [a-z0-9-], at most 12 hosts a run
#   hosts_exec w0 CMD...   # runs CMD on w0 (its network, its /etc/hosts)
#   hosts_cap w1 50mbit    # both directions of w1's link; hosts_uncap w1
#   hosts_cut ps0; hosts_heal ps0
#   hosts_alias ps0 psgraph-ps-0.psgraph   # one more name of ps0 on every host
#   hosts_pids ps0         # the processes left on ps0 (none after a clean run)
# Everything (processes in the namespaces, the namespaces, /etc/netns/NS) is removed at the
# end of the sourcing script: on exit, on failure, on Ctrl-C (SIGINT) and SIGTERM.
# Names are unique per run (psg-PID-RAND-host), so runs on one machine never meet; a run
# killed with SIGKILL leaves its namespaces, and the next hosts_init removes those whose PID
# is gone. The functions need root and `ip`; hosts_init returns 1 with the reason otherwise.

HOSTS_NET=198.18.0
HOSTS_NAMES=()
HOSTS_AT_EXIT=() # commands a test adds; run before the namespaces go
HOSTS_ID=
HOSTS_DIR=

# the namespace of host $1 (or of the switch: "sw")
hosts_ns() { echo "psg-$HOSTS_ID-$1"; }

hosts__index() {
  local i
  for i in "${!HOSTS_NAMES[@]}"; do
    [ "${HOSTS_NAMES[$i]}" = "$1" ] && { echo "$i"; return 0; }
  done
  echo "hosts: no emulated host '$1' (hosts: ${HOSTS_NAMES[*]})" >&2
  return 1
}

# the address of host $1
hosts_ip() {
  local i
  i=$(hosts__index "$1") || return 1
  echo "$HOSTS_NET.$((i + 10))"
}

# Checks that namespaces can be made here and removes the leftovers of killed runs.
# Returns 1 with the reason on stderr when they cannot (the caller exits 77: a skip).
hosts_init() {
  if [ "$(id -u)" != 0 ]; then
    echo "emulated hosts need root (network namespaces, veth, tc): skipped" >&2
    return 1
  fi
  local tool
  for tool in ip tc; do
    command -v "$tool" >/dev/null || { echo "emulated hosts need '$tool' (iproute2): skipped" >&2; return 1; }
  done
  HOSTS_ID="$$-$(od -An -N2 -tx2 /dev/urandom | tr -d ' ')"
  local probe
  probe=$(hosts_ns probe)
  if ! err=$(ip netns add "$probe" 2>&1); then
    echo "cannot make a network namespace here ($err): skipped" >&2
    return 1
  fi
  if ! err=$(ip -n "$probe" link add name a type veth peer name b 2>&1) ||
     ! err2=$(ip -n "$probe" link add name br type bridge 2>&1); then
    ip netns del "$probe" 2>/dev/null
    echo "cannot make veth pairs or bridges in a namespace (${err:-}${err2:-}): skipped" >&2
    return 1
  fi
  if ! err=$(ip -n "$probe" link set dev a up 2>&1 && tc -n "$probe" qdisc add dev a root tbf rate 1gbit \
             burst 64kb latency 50ms 2>&1); then
    ip netns del "$probe" 2>/dev/null
    echo "cannot cap a link with tc tbf ($err): skipped" >&2
    return 1
  fi
  ip netns del "$probe"
  hosts__gc
  HOSTS_DIR=$(mktemp -d "/tmp/psg-hosts-$HOSTS_ID.XXXXXX")
  trap hosts__exit EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM
  return 0
}

# The namespaces of runs whose process is gone (killed with SIGKILL: no trap ran).
hosts__gc() {
  local ns pid
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep '^psg-[0-9]*-[0-9a-f]*-'); do
    pid=${ns#psg-}
    pid=${pid%%-*}
    [ -d "/proc/$pid" ] && continue
    hosts__kill_ns "$ns"
    ip netns del "$ns" 2>/dev/null
    rm -rf "/etc/netns/$ns"
  done
}

hosts__kill_ns() {
  local p
  for p in $(ip netns pids "$1" 2>/dev/null); do kill -KILL "$p" 2>/dev/null; done
}

hosts__write_hosts_files() {
  local f=$HOSTS_DIR/hosts i name
  {
    echo "127.0.0.1 localhost"
    echo "::1 localhost ip6-localhost ip6-loopback"
    for i in "${!HOSTS_NAMES[@]}"; do
      echo "$HOSTS_NET.$((i + 10)) ${HOSTS_NAMES[$i]}${HOSTS_ALIASES[$i]:-}"
    done
  } >"$f"
  for name in "${HOSTS_NAMES[@]}"; do
    cp "$f" "/etc/netns/$(hosts_ns "$name")/hosts"
  done
}
HOSTS_ALIASES=()

# Makes hosts $@ (each a namespace with lo and eth0 up at its address, a port on the
# switch, a /etc/hosts naming every host). Returns 1 with the error on stderr.
hosts_up() {
  local sw i name ns
  sw=$(hosts_ns sw)
  if ! ip netns list | grep -q "^$sw\b"; then
    ip netns add "$sw" || return 1
    ip -n "$sw" link add name br0 type bridge || return 1
    ip -n "$sw" link set dev br0 up || return 1
  fi
  for name in "$@"; do
    if ! [[ $name =~ ^[a-z0-9][a-z0-9-]{0,14}$ ]]; then
      echo "hosts: bad host name '$name' ([a-z0-9-], at most 15)" >&2
      return 1
    fi
    i=${#HOSTS_NAMES[@]}
    [ "$i" -ge 200 ] && { echo "hosts: too many hosts" >&2; return 1; }
    ns=$(hosts_ns "$name")
    ip netns add "$ns" || return 1
    HOSTS_NAMES+=("$name")
    mkdir -p "/etc/netns/$ns"
    # the host's end is eth0 in its namespace, the switch's end is named for the host
    ip -n "$sw" link add name "$name" type veth peer name eth0 netns "$ns" || return 1
    ip -n "$sw" link set dev "$name" master br0 up || return 1
    ip -n "$ns" link set dev lo up || return 1
    ip -n "$ns" addr add "$HOSTS_NET.$((i + 10))/24" dev eth0 || return 1
    ip -n "$ns" link set dev eth0 up || return 1
  done
  hosts__write_hosts_files
}

# One more name for host $1 ($2: e.g. psgraph-ps-0.psgraph), on every host's /etc/hosts.
hosts_alias() {
  local i
  i=$(hosts__index "$1") || return 1
  HOSTS_ALIASES[$i]="${HOSTS_ALIASES[$i]:-} $2"
  hosts__write_hosts_files
}

# Runs $2... on host $1 (its network namespace and /etc/hosts).
hosts_exec() {
  local name=$1
  shift
  hosts__index "$name" >/dev/null || return 1
  ip netns exec "$(hosts_ns "$name")" "$@"
}

# Caps host $1's link at rate $2 (tc's units: 50mbit, 1gbit) in both directions: the
# host's egress on its eth0, its ingress as the switch port's egress.
hosts_cap() {
  local name=$1 rate=$2 bps burst
  hosts__index "$name" >/dev/null || return 1
  bps=$(tc_rate_bps "$rate") || { echo "hosts: bad rate '$rate'" >&2; return 1; }
  burst=$((bps / 8 / 250)) # 4 ms of the rate: smooth, yet more than one 64 KB TSO segment
  [ "$burst" -lt 65536 ] && burst=65536
  tc -n "$(hosts_ns "$name")" qdisc replace dev eth0 root tbf rate "$rate" burst "$burst" latency 50ms &&
    tc -n "$(hosts_ns sw)" qdisc replace dev "$name" root tbf rate "$rate" burst "$burst" latency 50ms
}

hosts_uncap() {
  hosts__index "$1" >/dev/null || return 1
  tc -n "$(hosts_ns "$1")" qdisc del dev eth0 root 2>/dev/null
  tc -n "$(hosts_ns sw)" qdisc del dev "$1" root 2>/dev/null
  return 0
}

# "50mbit" -> 50000000 (bit, kbit, mbit, gbit)
tc_rate_bps() {
  local v=${1%[kmgKMG]bit} unit=${1#"${1%[kmgKMG]bit}"}
  [ "$unit" = "$1" ] && { v=${1%bit}; unit=bit; }
  [[ $v =~ ^[0-9]+$ ]] || return 1
  case $unit in
    bit) echo "$v" ;; kbit|Kbit) echo $((v * 1000)) ;; mbit|Mbit) echo $((v * 1000000)) ;;
    gbit|Gbit) echo $((v * 1000000000)) ;; *) return 1 ;;
  esac
}

# Cuts host $1's link (its switch port down: its packets go nowhere, its connections stay
# open) and heals it.
hosts_cut() { hosts__index "$1" >/dev/null && ip -n "$(hosts_ns sw)" link set dev "$1" down; }
hosts_heal() { hosts__index "$1" >/dev/null && ip -n "$(hosts_ns sw)" link set dev "$1" up; }

# The pids of the processes on host $1 (in its network namespace), one a line.
hosts_pids() { ip netns pids "$(hosts_ns "$1")" 2>/dev/null; }

# Removes every host of this run: kills what runs there, deletes the namespaces and
# their /etc/netns folders. Safe to call twice.
hosts_down() {
  local name ns
  [ -n "$HOSTS_ID" ] || return 0
  for name in "${HOSTS_NAMES[@]}" sw; do
    ns=$(hosts_ns "$name")
    hosts__kill_ns "$ns"
  done
  for name in "${HOSTS_NAMES[@]}" sw; do
    ns=$(hosts_ns "$name")
    ip netns del "$ns" 2>/dev/null
    rm -rf "/etc/netns/$ns"
  done
  HOSTS_NAMES=()
  HOSTS_ALIASES=()
  [ -n "$HOSTS_DIR" ] && rm -rf "$HOSTS_DIR"
  HOSTS_DIR=
}

hosts__exit() {
  local rc=$? c
  trap - EXIT INT TERM
  for c in "${HOSTS_AT_EXIT[@]}"; do eval "$c"; done
  hosts_down
  exit $rc
}

# `bash tools/hosts.sh shell h1 h2 ...`: the hosts, a shell on the first, removed after.
if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  if [ "${1:-}" != shell ] || [ $# -lt 2 ]; then
    echo "usage: bash tools/hosts.sh shell HOST [HOST...]   (or source it: see its first lines)" >&2
    exit 2
  fi
  shift
  hosts_init || exit 77
  hosts_up "$@" || exit 1
  for h in "$@"; do echo "$h $(hosts_ip "$h") (namespace $(hosts_ns "$h"))"; done
  echo "a shell on $1; exit it to remove the hosts"
  hosts_exec "$1" "${SHELL:-bash}"
fi
