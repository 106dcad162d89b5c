#!/usr/bin/env bash
# The main job: install what is missing, build, and train on Fashion-MNIST with a local
# cluster of 1 parameter server and 2 workers (psgraph launch, async between-graph
# replication), printing tagged progress lines and the chief's final test accuracy.
# Extra arguments go to `psgraph train` (e.g. --epochs 5).
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/install-deps.sh
bash tools/build.sh build
exec build/cli/psgraph launch --ps 1 --workers 2 -- \
  build/cli/psgraph train --model mlp --data fashion-mnist --epochs 3 --optimizer adam --lr 0.001 --batch 64 \
  --log-every 100 "$@"
