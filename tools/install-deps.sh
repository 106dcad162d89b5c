#!/usr/bin/env bash
# Installs what psgraph needs from Debian's packages, only what is missing
# (a fresh Debian 12 machine, as root). Quiet when everything is there.
set -euo pipefail
pkgs=(gcc g++ make pkg-config meson ninja-build python3
      libzmq3-dev libczmq-dev libmsgpack-dev libopenblas-dev zlib1g-dev libjpeg62-turbo-dev libpng-dev
      dataset-fashion-mnist gnuplot-nox procps
      # serving (docs/serving.md): the ONNX writer (protobuf-c, protoc-c, onnx.proto from
      # libonnx-dev), the HTTP server (libmicrohttpd), the load generator of bench/serve.sh
      libprotobuf-c-dev protobuf-c-compiler libonnx-dev libmicrohttpd-dev wrk curl
      # tests over emulated hosts (tools/hosts.sh): ip, tc, an sshd in each host
      iproute2 openssh-server openssh-client python3-venv
      # launch --slurm under a real Slurm on emulated hosts (tests/hosts_slurm.sh)
      slurm-wlm munge
      clang clang-format # clang: the libFuzzer harnesses of tests/fuzz (tools/fuzz.sh); clang-format: tools/format_check.sh
      # the Python package (docs/python.md): its extension's headers, numpy, its tests
      python3-dev python3-numpy python3-pytest)
if [ "${PSG_WITH_PEERS:-0}" = 1 ]; then
  # the PyTorch peer of the benchmarks, on the OpenMP build of OpenBLAS
  pkgs+=(python3-torch python3-torchvision libopenblas0-openmp)
fi
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
echo "install-deps: installing ${missing[*]}" >&2
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO=sudo
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q >/dev/null
$SUDO apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
