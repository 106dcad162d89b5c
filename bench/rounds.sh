# Sourced by bench/train.sh and bench/inception3.sh: alternating rounds of psgraph and
# its PyTorch peer. The sourcing script calls peer_setup, defines run_ours W ROUND and
# run_peer W ROUND (each writes its JSON line to $tmp/ours_ROUND or $tmp/peer_ROUND) and
# calls alternate_report per workload; bench/train_report.py reads the files.

# peer_setup BENCH MODULES NEEDS: $peer (the peer script), $threads (PSG_BENCH_THREADS,
# default 2), $rounds (PSG_BENCH_ROUNDS, default 3), $have_torch (1 when python3 imports
# MODULES and the peer script is there; else a note line for BENCH naming NEEDS) and $tmp,
# a folder removed on exit.
peer_setup() {
  peer=${PSG_PEER:-../shared/peers/torch-peer} # a worktree beside main: PSG_PEER=/work/shared/peers/torch-peer
  threads=${PSG_BENCH_THREADS:-2}
  rounds=${PSG_BENCH_ROUNDS:-3}
  have_torch=0
  /usr/bin/python3 -c "import $2" 2>/dev/null && [ -x "$peer" ] && have_torch=1
  [ $have_torch = 1 ] ||
    echo "{\"bench\":\"$1\",\"note\":\"$3 or the peer script is missing: peer skipped (PSG_WITH_PEERS=1 tools/install-deps.sh)\"}"
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
}

# peer_env: the command prefix (array penv) that gives the peer the OpenBLAS kernels
# psgraph used in round 1 ("blas" in $tmp/ours_1), or PSG_PEER_CORETYPE (default: the
# peer's own choice); written to $tmp/peer_core for the report.
peer_env() {
  local core=${PSG_PEER_CORETYPE:-}
  [ -z "$core" ] && core=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1])).get("blas",""))' "$tmp/ours_1" 2>/dev/null)
  [ "$core" = default ] && core=""
  penv=()
  [ -n "$core" ] && penv=(env OPENBLAS_CORETYPE="$core")
  echo "$core" >"$tmp/peer_core"
}

# alternate W: round 1 psgraph first (the peer needs its "blas"), then even rounds the
# peer first and odd rounds psgraph first.
alternate() {
  rm -f "$tmp"/*
  run_ours "$1" 1
  run_peer "$1" 1
  for ((r = 2; r <= rounds; r++)); do
    if ((r % 2 == 0)); then run_peer "$1" $r; run_ours "$1" $r; else run_ours "$1" $r; run_peer "$1" $r; fi
  done
}

# alternate_report BENCH W NAME: the rounds of workload W, then one JSON line (train_report.py
# BENCH) for it under NAME, with the load average at its start.
alternate_report() {
  local load_start
  load_start=$(cut -d' ' -f1 /proc/loadavg)
  alternate "$2"
  TMP="$tmp" W="$3" ROUNDS="$rounds" LOAD0="$load_start" python3 bench/train_report.py "$1"
}
