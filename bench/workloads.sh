# Sourced by bench/train.sh and bench/dist.sh, which take [WORKLOADS] [--quick]:
# sets $workloads (default mlp,cnn) and $quick (1 with --quick), then builds build/
# (release), exiting on a failed build.
workloads=${1:-mlp,cnn}
quick=0
[ "${2:-}" = --quick ] && quick=1
bash tools/build.sh build >/dev/null || exit 1
