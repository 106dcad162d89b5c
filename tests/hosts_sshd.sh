# An OpenSSH server on emulated hosts (tools/hosts.sh), for tests and benches of
# `psgraph launch --ssh`. Sourced after tools/hosts.sh and hosts_init:
#   sshd_setup || exit 77     # keys and configs under $HOSTS_DIR/ssh (skips: why on stderr)
#   sshd_start HOST...        # an sshd on each host, at its address, port 22
#   ssh -F "$SSH_CONFIG" HOST CMD   # as the launcher does with --ssh-config "$SSH_CONFIG"
# The keys are made here for this run: a host key every sshd serves, a client key it
# accepts for root, a known_hosts naming each host with that key. Nothing under ~/.ssh is
# read or written (the client's config is -F $SSH_CONFIG). The sshds run in the hosts'
# namespaces and go with them (hosts_down).

SSH_CONFIG=
SSHD_DIR=

sshd_setup() {
  local tool
  for tool in /usr/sbin/sshd ssh ssh-keygen; do
    command -v "$tool" >/dev/null ||
      { echo "no $tool (Debian's openssh-server and openssh-client; bash tools/install-deps.sh): skipped" >&2; return 1; }
  done
  SSHD_DIR=$HOSTS_DIR/ssh
  mkdir -p "$SSHD_DIR" && chmod 700 "$SSHD_DIR"
  # sshd's privilege separation folder (made by its service on a booted system)
  [ -d /run/sshd ] || mkdir -p -m 755 /run/sshd
  ssh-keygen -q -t ed25519 -N '' -C "psgraph-test-host" -f "$SSHD_DIR/host_key" || return 1
  ssh-keygen -q -t ed25519 -N '' -C "psgraph-test-client" -f "$SSHD_DIR/id" || return 1
  cp "$SSHD_DIR/id.pub" "$SSHD_DIR/authorized_keys"
  : >"$SSHD_DIR/known_hosts"
  cat >"$SSHD_DIR/sshd_config" <<EOF
HostKey $SSHD_DIR/host_key
AuthorizedKeysFile $SSHD_DIR/authorized_keys
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
PrintMotd no
AcceptEnv none
MaxStartups 100
# a client gone with its link (cut, host down) ends its session within 6 s, so the remote
# side of psgraph launch sees its stdin close and stops the task
ClientAliveInterval 2
ClientAliveCountMax 3
LogLevel ERROR
EOF
  SSH_CONFIG=$SSHD_DIR/ssh_config
  cat >"$SSH_CONFIG" <<EOF
Host *
  User root
  IdentityFile $SSHD_DIR/id
  IdentitiesOnly yes
  UserKnownHostsFile $SSHD_DIR/known_hosts
  GlobalKnownHostsFile /dev/null
  StrictHostKeyChecking yes
  BatchMode yes
  ConnectTimeout 5
  LogLevel ERROR
EOF
}

# Starts an sshd on each host $@ (their names and addresses in known_hosts).
sshd_start() {
  local h ip
  for h in "$@"; do
    ip=$(hosts_ip "$h") || return 1
    echo "$h,$ip $(cut -d' ' -f1-2 "$SSHD_DIR/host_key.pub")" >>"$SSHD_DIR/known_hosts"
    hosts_exec "$h" /usr/sbin/sshd -f "$SSHD_DIR/sshd_config" -o "ListenAddress=$ip" \
      -o "PidFile=$SSHD_DIR/$h.pid" -E "$SSHD_DIR/$h.log" || { echo "sshd on $h: $(cat "$SSHD_DIR/$h.log")" >&2; return 1; }
  done
  for h in "$@"; do
    for _ in $(seq 50); do
      hosts_exec "$h" python3 -c "import socket,sys; socket.create_connection(('$(hosts_ip "$h")', 22), 0.2)" \
        2>/dev/null && break
      sleep 0.1
    done
  done
}

# The number of processes on hosts $@ other than their sshd (waits up to 10 s for them to
# go): 0 once a launch left nothing behind.
sshd_left_on() {
  local n h p
  for _ in $(seq 100); do
    n=0
    for h in "$@"; do
      for p in $(hosts_pids "$h"); do [ "$p" = "$(cat "$SSHD_DIR/$h.pid")" ] || n=$((n + 1)); done
    done
    [ $n = 0 ] && break
    sleep 0.1
  done
  echo $n
}
