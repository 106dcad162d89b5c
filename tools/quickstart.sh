#!/usr/bin/env bash
# The main job: install what is missing, build, and train the CNN on
# Fashion-MNIST, printing progress and the final test accuracy.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/install-deps.sh
bash tools/build.sh build
exec build/cli/psgraph train --model cnn --data fashion-mnist --epochs 2 --threads "$(nproc)" "$@"
