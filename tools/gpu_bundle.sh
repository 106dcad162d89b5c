#!/usr/bin/env bash
# Packs what a lent GPU machine needs to run psgraph's GPU checks into .gpu/ (ignored through
# .git/info/exclude; carried with the device tool's `carry: [".gpu"]`): the release build's
# binaries in build/'s own layout, and every shared library they need that is not glibc's,
# compressed (OpenBLAS alone is 36 MB; the carry limit is 64 MiB). CUDA's own libraries
# (cudart, cuBLAS, cuDNN) are not packed: the GPU machine has them (tools/gpu_run.sh finds them).
#   tools/gpu_bundle.sh            then, there: bash tools/gpu_run.sh
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/build.sh build
rm -rf .gpu && mkdir -p .gpu/build/cli .gpu/build/tests .gpu/build/bench .gpu/lib
cp build/cli/psgraph .gpu/build/cli/
cp build/tests/test_cuda .gpu/build/tests/
cp build/bench/bench_cuda_gemm build/bench/bench_cuda_conv .gpu/build/bench/
cp build/libpsgraph.so build/libpsgraph_cuda.so .gpu/build/
# every library the binaries load, but glibc's, the C++ runtime (the GPU machine's is newer)
# and CUDA's
for f in .gpu/build/cli/psgraph .gpu/build/libpsgraph.so .gpu/build/libpsgraph_cuda.so; do
  ldd "$f"
done | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}' | sort -u | while read -r name path; do
  case "$name" in
    libc.so*|libm.so*|libpthread.so*|libdl.so*|librt.so*|ld-linux*|libresolv.so*) ;;
    libstdc++.so*|libgcc_s.so*|libcud*|libcublas*|libpsgraph*) ;;
    *) cp -L "$path" ".gpu/lib/$name" ;;
  esac
done
tar -C .gpu -cJf .gpu/lib.tar.xz lib && rm -rf .gpu/lib
du -sh .gpu

# The Python package for the GPU machine's python3 (3.12 there, with its own numpy): the
# extension compiled again with that version's headers, beside the build tree's pure-Python
# files, in .gpu/py. PY312: a python3.12 with headers; NUMPY_WHEEL: a numpy 2 wheel for it.
if [ -n "${PY312:-}" ] && [ -n "${NUMPY_WHEEL:-}" ]; then
  inc=$("$PY312" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')
  tmp=$(mktemp -d)
  unzip -q -o "$NUMPY_WHEEL" 'numpy/_core/include/*' -d "$tmp/np"
  ext=python/psgraph/_psgraph.cpython-311-x86_64-linux-gnu.so
  args=$(grep -A4 "c_COMPILER ../python/psgraph/../_psgraph/module.c" build/build.ninja | sed -n 's/^ ARGS = //p' |
    tr ' ' '\n' | grep -v -e python3.11 -e numpy/core/include | tr '\n' ' ')
  link=$(grep -A1 "^build $ext: c_LINKER" build/build.ninja | sed -n 's/^ LINK_ARGS = //p')
  objs=()
  for f in python/_psgraph/*.c; do
    o="$tmp/$(basename "$f" .c).o"
    (cd build && eval cc $args -I"$inc" -isystem "$tmp/np/numpy/_core/include" -c "../$f" -o "$o")
    objs+=("$o")
  done
  mkdir -p .gpu/py
  cp -r build/python/psgraph .gpu/py/
  rm -rf .gpu/py/psgraph/_psgraph.cpython-311-* .gpu/py/psgraph/*.p
  (cd build && eval cc -o ../.gpu/py/psgraph/_psgraph.cpython-312-x86_64-linux-gnu.so "${objs[*]}" $link)
  rm -rf "$tmp"
fi
