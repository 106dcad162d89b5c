#!/usr/bin/env bash
# The main job: install what is missing, build, install the Python package where Debian's
# python3 finds it (/usr/local/lib/python3.X/dist-packages: `import psgraph.compat.v1`), and
# train on Fashion-MNIST with a local cluster of 1 parameter server and 2 workers (psgraph
# launch, async between-graph replication), printing tagged progress lines and the chief's
# final test accuracy. Extra arguments go to `psgraph train` (e.g. --epochs 5).
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/install-deps.sh
bash tools/build.sh build
# the Python package only (its extension carries the library): meson's python.*libdir set to
# the site folder of Debian's python3 (the default scheme's purelib, under /usr/local)
site=$(/usr/bin/python3 -c 'import sysconfig; print(sysconfig.get_path("purelib"))')
meson configure build -Dpython.purelibdir="$site" -Dpython.platlibdir="$site" >/dev/null
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO=sudo
$SUDO meson install -C build --tags python-runtime --quiet >/dev/null
exec build/cli/psgraph launch --ps 1 --workers 2 -- \
  build/cli/psgraph train --model mlp --data fashion-mnist --epochs 3 --optimizer adam --lr 0.001 --batch 64 \
  --log-every 100 "$@"
