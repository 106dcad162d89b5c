#!/usr/bin/env bash
# On a lent GPU machine (the device tool), with .gpu/ from tools/gpu_bundle.sh carried:
# unpacks the libraries, finds CUDA's (cudart, cuBLAS, cuDNN: the toolkit's or PyTorch's
# wheels), then runs the steps named (default: all), each log under $OUT:
#   cuda       tests/test_cuda: every CUDA kernel against its CPU kernel
#   inception  bench/cuda_inception3.sh (op profile, f32 and mixed beside PyTorch, cluster)
#   python     the Python library's GPU tests (needs .gpu/py's extension for this python3)
#   layouts    Inception-v3 f32 and mixed with each cuDNN layout (PSG_CUDNN_LAYOUT), one line each
#   kernels    bench_cuda_gemm and bench_cuda_conv: psgraph's op against cuBLAS / cuDNN alone
#   bash tools/gpu_run.sh [step...]        env: BATCH (128), STEPS (10)
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-/tmp/gpu_out}
mkdir -p "$out" /tmp/psglib
tar -C /tmp/psglib -xJf .gpu/lib.tar.xz
[ -d build ] || cp -r .gpu/build build
cudadirs=$(for n in libcudnn.so.9 libcublas.so.13 libcudart.so.13; do
  find -L /usr/local/cuda/lib64/ /usr/local/cuda/targets/ /usr/lib/x86_64-linux-gnu/ /opt/ /usr/local/lib/ \
    -name "$n" 2>/dev/null | head -1 | xargs -r dirname
done | sort -u | paste -sd:)
export LD_LIBRARY_PATH=/tmp/psglib/lib:$cudadirs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export PSG_NO_BUILD=1
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm --format=csv,noheader
echo "cuda libraries: $cudadirs"
ldd build/libpsgraph_cuda.so build/cli/psgraph | grep 'not found' && echo "libraries missing"
steps=${*:-cuda inception python}
for step in $steps; do
  t0=$(date +%s)
  case $step in
    cuda) for layout in default nhwc; do
        PSG_CUDNN_LAYOUT=${layout/default/} timeout 240 build/tests/test_cuda >"$out/test_cuda_$layout.log" 2>&1
        rc=$?
        grep -E -i 'fail|mismatch|error' "$out/test_cuda_$layout.log" | grep -v '0 failed' | head -20
        echo "test_cuda (layout $layout): exit $rc, $(tail -1 "$out/test_cuda_$layout.log")"
      done ;;
    inception) timeout 420 bash bench/cuda_inception3.sh "${BATCH:-128}" "${STEPS:-10}" 2>&1 \
      | tee "$out/inception3.jsonl" ;;
    python) if [ -d .gpu/py ]; then
        PYTHONPATH=.gpu/py PSG_CUDA_MODULE=$PWD/build/libpsgraph_cuda.so timeout 240 \
          python3 -m pytest -q -p no:cacheprovider tests/python/test_gpu.py 2>&1 | tee "$out/python_gpu.log" | tail -15
      else echo "python: no .gpu/py extension carried"; fi ;;
    layouts) for precision in f32 mixed; do for layout in nhwc nchw; do
        PSG_CUDNN_LAYOUT=$layout timeout 120 build/cli/psgraph bench inception3 --device gpu \
          --batch "${BATCH:-128}" --warmup 3 --steps "${STEPS:-10}" --optimizer sgd \
          --log-every 1000000 --precision $precision 2>&1 | grep '^{"bench":"inception3"' | tail -1 |
          python3 -c 'import json, sys; o = json.loads(sys.stdin.read() or "{}"); print(json.dumps({"layout": sys.argv[1], "precision": sys.argv[2], "images_per_sec": o.get("images_per_sec"), "step_ms_median": o.get("step_ms_median"), "final_loss": o.get("final_loss")}))' $layout $precision
      done; done | tee "$out/layouts.jsonl" ;;
    kernels) { timeout 120 build/bench/bench_cuda_gemm; timeout 180 build/bench/bench_cuda_conv; } 2>&1 |
      tee "$out/kernels.jsonl" ;;
    *) echo "unknown step $step" ;;
  esac
  echo "== $step: $(( $(date +%s) - t0 )) s"
done
