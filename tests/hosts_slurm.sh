# A Slurm cluster on emulated hosts (tools/hosts.sh), for tests and benches of
# `psgraph launch --slurm`: Debian's munged (one, on this machine: its socket is a file every
# namespace sees), slurmctld on a host of its own and one slurmd per compute host, each in
# its host's network namespace with the host's name as its hostname (a UTS namespace).
# Sourced after tools/hosts.sh and hosts_init:
#   slurm_setup || exit 77        # configs and the munge key under $HOSTS_DIR/slurm (why on stderr)
#   hosts_up ctl h1 h2 h3
#   slurm_start ctl h1 h2 h3      # slurmctld on ctl, a slurmd on each of h1 h2 h3; all idle
#   hosts_exec ctl sbatch ...     # SLURM_CONF is exported: sbatch, srun, squeue, scancel find it
#   slurm_wait_job ID [SECONDS]   # until the job has left the queue; prints its state
# Everything runs in the hosts' namespaces and goes with them (hosts_down); munged is
# stopped by HOSTS_AT_EXIT. Nothing under /etc/slurm or /etc/munge is read or written.

SLURM_DIR=
SLURM_NODES=()

slurm_setup() {
  local tool
  for tool in slurmctld slurmd slurmstepd munged sbatch srun scontrol scancel squeue unshare; do
    command -v "$tool" >/dev/null ||
      { echo "no $tool (Debian's slurm-wlm and munge; bash tools/install-deps.sh): skipped" >&2; return 1; }
  done
  SLURM_DIR=$HOSTS_DIR/slurm
  mkdir -p "$SLURM_DIR/state" "$SLURM_DIR/munge" && chmod 700 "$SLURM_DIR/munge" || return 1
  dd if=/dev/urandom of="$SLURM_DIR/munge/munge.key" bs=1 count=1024 status=none &&
    chmod 400 "$SLURM_DIR/munge/munge.key" || return 1
  local m=$SLURM_DIR/munge
  if ! munged --force --socket="$m/socket" --key-file="$m/munge.key" --pid-file="$m/munged.pid" \
      --log-file="$m/munged.log" --seed-file="$m/seed" 2>"$m/start.err"; then
    echo "munged does not start here: $(cat "$m/start.err" "$m/munged.log" 2>/dev/null | tail -3): skipped" >&2
    return 1
  fi
  HOSTS_AT_EXIT+=('[ -n "$SLURM_DIR" ] && kill "$(cat "$SLURM_DIR/munge/munged.pid" 2>/dev/null)" 2>/dev/null')
  export SLURM_CONF=$SLURM_DIR/slurm.conf
}

# Writes slurm.conf for controller $1 and nodes $2..., starts slurmctld and the slurmds,
# and waits until every node is idle. Returns 1 with the logs on stderr.
slurm_start() {
  local ctl=$1 h d=$SLURM_DIR
  shift
  SLURM_NODES=("$@")
  {
    echo "ClusterName=psgraph"
    echo "SlurmctldHost=$ctl($(hosts_ip "$ctl"))"
    echo "SlurmUser=root"
    echo "AuthType=auth/munge"
    echo "CredType=cred/munge"
    echo "AuthInfo=socket=$d/munge/socket"
    echo "StateSaveLocation=$d/state"
    echo "SlurmdSpoolDir=$d/spool-%n"
    echo "SlurmctldPidFile=$d/slurmctld.pid"
    echo "SlurmdPidFile=$d/slurmd-%n.pid"
    echo "SlurmctldLogFile=$d/slurmctld.log"
    echo "SlurmdLogFile=$d/slurmd-%n.log"
    # processes found by their parents in /proc: several slurmds share this machine's cgroups
    echo "ProctrackType=proctrack/linuxproc"
    echo "TaskPlugin=task/none"
    echo "JobAcctGatherType=jobacct_gather/none"
    echo "AccountingStorageType=accounting_storage/none"
    echo "SchedulerType=sched/builtin"
    echo "SelectType=select/cons_tres"
    echo "SelectTypeParameters=CR_Core"
    echo "MpiDefault=none"
    echo "ReturnToService=2"
    echo "KillWait=5"
    echo "MinJobAge=600"
    for h in "$@"; do echo "NodeName=$h NodeAddr=$(hosts_ip "$h") CPUs=2 State=UNKNOWN"; done
    echo "PartitionName=psgraph Nodes=$(IFS=,; echo "$*") Default=YES MaxTime=INFINITE State=UP"
  } >"$SLURM_CONF"
  # cgroups are not used (proctrack/linuxproc, task/none), yet slurmd loads the plugin: name
  # it, since `ip netns exec` mounts a /sys of its own without /sys/fs/cgroup
  echo "CgroupPlugin=cgroup/v1" >"$d/cgroup.conf"
  hosts_exec "$ctl" unshare --uts sh -c "hostname $ctl && exec slurmctld -f '$SLURM_CONF'" ||
    { echo "slurmctld: $(tail -5 "$d/slurmctld.log" 2>/dev/null)" >&2; return 1; }
  for h in "$@"; do
    mkdir -p "$d/spool-$h"
    hosts_exec "$h" unshare --uts sh -c "hostname $h && exec slurmd -f '$SLURM_CONF' -N $h" ||
      { echo "slurmd on $h: $(tail -5 "$d/slurmd-$h.log" 2>/dev/null)" >&2; return 1; }
  done
  local states
  for _ in $(seq 150); do
    states=$(hosts_exec "$ctl" sinfo -h -N -o '%N %T' 2>/dev/null)
    [ "$(grep -c ' idle$' <<<"$states")" = $# ] && return 0
    sleep 0.2
  done
  echo "the nodes did not come up idle: $states; $(tail -5 "$d/slurmctld.log")" >&2
  return 1
}

# Waits (default 300 s) until job $1 has ended; prints its JobState (COMPLETED, FAILED,
# CANCELLED, TIMEOUT...). Returns 1 when it has not ended by then.
slurm_wait_job() {
  local id=$1 limit=${2:-300} state
  for _ in $(seq $((limit * 5))); do
    state=$(hosts_exec "${SLURM_CTL:-ctl}" scontrol show job "$id" 2>/dev/null | sed -n 's/.*JobState=\([A-Z_]*\).*/\1/p')
    case $state in
      PENDING | RUNNING | CONFIGURING | COMPLETING | SUSPENDED | "") ;;
      *) echo "$state"; return 0 ;;
    esac
    sleep 0.2
  done
  echo "$state"
  return 1
}

# The processes on host $1 other than its slurmd (one pid a line).
slurm_task_pids() {
  local p slurmd
  slurmd=$(cat "$SLURM_DIR/slurmd-$1.pid" 2>/dev/null)
  for p in $(hosts_pids "$1"); do
    [ "$p" = "$slurmd" ] || echo "$p"
  done
}
