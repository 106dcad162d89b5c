# Sourced by bench/train.sh and bench/inception3.sh: alternating rounds of psgraph and
# its PyTorch peer. The sourcing script defines run_ours W ROUND and run_peer W ROUND
# (each writes its JSON line to $tmp/ours_ROUND or $tmp/peer_ROUND) and sets $tmp and
# $rounds; bench/train_report.py reads the files.

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
