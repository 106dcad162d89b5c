#!/usr/bin/env bash
# Training throughput of psgraph beside PyTorch on the same workloads, in one
# run: one JSON line per workload with both figures, the ratio and both peak RSS.
#   bench/train.sh [mlp,cnn] [--quick]
# --quick: 1 epoch of the mlp and 300 steps of the cnn (psgraph) against the
# peer's shortest run; the default runs the peer's own epochs (mlp 3, cnn 1).
# Rounds: PSG_BENCH_ROUNDS (default 3) rounds alternate psgraph and the peer
# (odd rounds psgraph first, even rounds the peer first); the ratio is best
# against best, with each side's spread (worst/best) and the load average.
# The peer gets the OpenBLAS kernels psgraph uses (OPENBLAS_CORETYPE, from
# psgraph's "blas"): Debian's OpenBLAS falls back to SSE3 kernels on CPUs newer
# than it, and psgraph switches (ops/cpu/blas.c); PSG_PEER_CORETYPE=default
# leaves the peer's own choice, PSG_PEER_CORETYPE=NAME forces one.
# The peer needs python3-torch (PSG_WITH_PEERS=1 tools/install-deps.sh).
set -uo pipefail
cd "$(dirname "$0")/.."
workloads=${1:-mlp,cnn}
quick=0
[ "${2:-}" = --quick ] && quick=1
bash tools/build.sh build >/dev/null || exit 1
peer=${PSG_PEER:-../shared/peers/torch-peer} # a worktree beside main: PSG_PEER=/work/shared/peers/torch-peer
threads=${PSG_BENCH_THREADS:-2}
rounds=${PSG_BENCH_ROUNDS:-3}
have_torch=0
/usr/bin/python3 -c 'import torch' 2>/dev/null && [ -x "$peer" ] && have_torch=1
[ $have_torch = 1 ] || echo '{"bench":"train","note":"python3-torch or the peer script is missing: peer skipped (PSG_WITH_PEERS=1 tools/install-deps.sh)"}'
tmp=$(mktemp -d)
. bench/rounds.sh
trap 'rm -rf "$tmp"' EXIT

# run_ours W ROUND / run_peer W ROUND: one line of JSON each in $tmp, peak RSS beside it
run_ours() {
  python3 bench/peak_rss.py "$tmp/ours_rss_$2" build/cli/psgraph train "${args[@]}" \
    --threads "$threads" --log-every 1000000 | grep '"event":"done"' | tail -1 >"$tmp/ours_$2"
}
run_peer() {
  [ $have_torch = 1 ] || return 0
  peer_env
  "${penv[@]}" python3 bench/peak_rss.py "$tmp/peer_rss_$2" "$peer" --workloads "$1" --threads "$threads" \
    --mlp-epochs $([ $quick = 1 ] && echo 1 || echo 3) --cnn-epochs 1 2>/dev/null | tail -1 >"$tmp/peer_$2"
}

for w in ${workloads//,/ }; do
  case $w in
    mlp) args=(--model mlp --epochs $([ $quick = 1 ] && echo 1 || echo 3)) ;;
    cnn) args=(--model cnn $([ $quick = 1 ] && echo --steps 300 || echo --epochs 1)) ;;
    *) echo "{\"bench\":\"train\",\"error\":\"unknown workload $w\"}"; continue ;;
  esac
  load_start=$(cut -d' ' -f1 /proc/loadavg)
  alternate "$w"
  TMP="$tmp" W="$w" ROUNDS="$rounds" LOAD0="$load_start" python3 bench/train_report.py train
done
