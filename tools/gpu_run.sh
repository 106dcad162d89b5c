#!/usr/bin/env bash
# On a lent GPU machine (the device tool), with .gpu/ from tools/gpu_bundle.sh carried:
# unpacks the libraries, finds CUDA's (cudart, cuBLAS, cuDNN: the toolkit's or PyTorch's
# wheels), then runs the steps named (default: all), each log under $OUT:
#   cuda       tests/test_cuda: every CUDA kernel against its CPU kernel
#   inception  bench/cuda_inception3.sh (op profile, f32 and mixed beside PyTorch, cluster)
#   python     the Python library's GPU tests (needs .gpu/py's extension for this python3)
#   layouts    Inception-v3 f32 and mixed with each cuDNN layout (PSG_CUDNN_LAYOUT), one line each
#   accuracy   issue 36: Inception-v3 75x75 to accuracy on the GPU, one process and 1 ps +
#              2 workers + 1 backup from the same (psgraph's) initial weights
#              (bench/inception3_accuracy.sh; ACC_STEPS 2000, ACC_EVERY 250, ACC_TIMEOUT 200 s a run,
#              ACC_BATCH 8, ACC_LR 0.001, ACC_VALIDATION 100; ACC_PARALLEL=1 both runs at once;
#              ACC_PS the cluster's ps tasks, default 1; ACC_ONE_VIRTUAL=V the one process's
#              batch norm over groups of V, what each cluster worker normalizes: ACC_BATCH / 2)
#   kernels    bench_cuda_gemm and bench_cuda_conv: psgraph's op against cuBLAS / cuDNN alone
#   variants   Inception-v3 once with each environment assignment of VARIANTS (at PRECISIONS)
#   ab         Inception-v3 f32 and mixed, this build against .gpu_before/build (another
#              commit's psgraph, libpsgraph and CUDA module, carried beside .gpu), alternating
#   bash tools/gpu_run.sh [step...]        env: BATCH (128), STEPS (10), LAYOUTS ("nhwc nchw"),
#                                          ROUNDS (ab's rounds, 2)
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-/tmp/gpu_out}
mkdir -p "$out" /tmp/psglib
tar -C /tmp/psglib -xJf .gpu/lib.tar.xz
# always this bundle's build: the machine keeps an ignored build/ of an earlier call
rm -rf build && cp -r .gpu/build build
cudadirs=$(for n in libcudnn.so.9 libcublas.so.13 libcudart.so.13; do
  find -L /usr/local/cuda/lib64/ /usr/local/cuda/targets/ /usr/lib/x86_64-linux-gnu/ /opt/ /usr/local/lib/ \
    -name "$n" 2>/dev/null | head -1 | xargs -r dirname
done | sort -u | paste -sd:)
export LD_LIBRARY_PATH=/tmp/psglib/lib:$cudadirs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export PSG_NO_BUILD=1
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm --format=csv,noheader
echo "cuda libraries: $cudadirs"
ldd build/libpsgraph_cuda.so build/cli/psgraph | grep 'not found' && echo "libraries missing"
# one Inception-v3 run of the psgraph binary $1 at precision $2, as one JSON line named $3
inception_line() {
  timeout 150 "$1" bench inception3 --device gpu --batch "${BATCH:-128}" --warmup 3 \
    --steps "${STEPS:-10}" --optimizer sgd --log-every 1000000 --precision "$2" 2>&1 |
    tee "$out/run_${3// /_}_$2.log" | grep '^{"bench":"inception3"' | tail -1 |
    python3 -c 'import json, sys; o = json.loads(sys.stdin.read() or "{}"); print(json.dumps({"what": sys.argv[1], "precision": sys.argv[2], "images_per_sec": o.get("images_per_sec"), "step_ms_median": o.get("step_ms_median"), "final_loss": o.get("final_loss")}))' "$3" "$2"
}

steps=${*:-cuda inception python}
for step in $steps; do
  t0=$(date +%s)
  case $step in
    cuda) for layout in default ${LAYOUTS:-nhwc}; do
        PSG_CUDNN_LAYOUT=${layout/default/} timeout 240 build/tests/test_cuda >"$out/test_cuda_$layout.log" 2>&1
        rc=$?
        grep -E -i 'fail|mismatch|error' "$out/test_cuda_$layout.log" | grep -v '0 failed' | head -20
        echo "test_cuda (layout $layout): exit $rc, $(tail -1 "$out/test_cuda_$layout.log")"
      done ;;
    accuracy) PSG_BIN=build/cli/psgraph PSG_ACC_DEVICE=gpu PSG_ACC_INIT=none PSG_ACC_RUNS="one cluster" \
        PSG_ACC_OUT="$out/acc" PSG_ACC_TIMEOUT=${ACC_TIMEOUT:-200} PSG_ACC_BATCH=${ACC_BATCH:-8} \
        PSG_ACC_LR=${ACC_LR:-0.001} PSG_ACC_PARALLEL=${ACC_PARALLEL:-} PSG_ACC_PS=${ACC_PS:-1} PSG_ACC_VALIDATION=${ACC_VALIDATION:-100} \
        PSG_ACC_ONE_VIRTUAL=${ACC_ONE_VIRTUAL:-} \
        bash bench/inception3_accuracy.sh "${ACC_STEPS:-2000}" "${ACC_EVERY:-250}" 2>&1 | tee "$out/accuracy.jsonl"
      tail -3 "$out/acc/one.log" "$out/acc/cluster.log" 2>/dev/null ;;
    inception) timeout 420 bash bench/cuda_inception3.sh "${BATCH:-128}" "${STEPS:-10}" 2>&1 \
      | tee "$out/inception3.jsonl" ;;
    python) if [ -d .gpu/py ]; then
        PYTHONPATH=.gpu/py PSG_CUDA_MODULE=$PWD/build/libpsgraph_cuda.so timeout 240 \
          python3 -m pytest -q -p no:cacheprovider tests/python/test_gpu.py 2>&1 | tee "$out/python_gpu.log" | tail -15
      else echo "python: no .gpu/py extension carried"; fi ;;
    layouts) for precision in f32 mixed; do for layout in ${LAYOUTS:-nhwc nchw}; do
        PSG_CUDNN_LAYOUT=$layout inception_line build/cli/psgraph $precision "layout $layout"
      done; done | tee "$out/layouts.jsonl" ;;
    variants) for v in ${VARIANTS:-PSG_CUDNN_LAYOUT=nchw}; do for precision in ${PRECISIONS:-f32}; do
        (export "$v"; inception_line build/cli/psgraph $precision "$v")
      done; done | tee "$out/variants.jsonl" ;;
    ab) for round in $(seq "${ROUNDS:-2}"); do for side in before after; do for precision in f32 mixed; do
        bin=build/cli/psgraph
        [ $side = before ] && bin=.gpu_before/build/cli/psgraph
        [ -x "$bin" ] && inception_line "$bin" $precision "$side round $round"
      done; done; done | tee "$out/ab.jsonl" ;;
    kernels) { timeout 120 build/bench/bench_cuda_gemm; timeout 180 build/bench/bench_cuda_conv; } 2>&1 |
      tee "$out/kernels.jsonl" ;;
    *) echo "unknown step $step" ;;
  esac
  echo "== $step: $(( $(date +%s) - t0 )) s"
done
