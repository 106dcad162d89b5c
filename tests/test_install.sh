#!/usr/bin/env bash
# libpsgraph as a user gets it: `meson install` into a temporary root, then
# docs/examples/train_mlp.c compiled with `pkg-config psgraph` against the
# installed headers and library only, and run: 300 steps of the MLP on
# Fashion-MNIST; the loss falls and the test accuracy passes 70%, and with OpenBLAS's
# generic kernel (the same on any x86-64) it prints exactly the line docs/api.md shows.
# Args: the build folder, the source root, "asan" for a sanitizer build.
set -euo pipefail
build=$1 src=$2 mode=${3:-}
data=/usr/share/datasets/fashion-mnist
if [ ! -f "$data/train-images-idx3-ubyte.gz" ]; then
  echo "skip: no Fashion-MNIST in $data (tools/install-deps.sh installs it)"
  exit 77
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
meson install -C "$build" --no-rebuild --destdir "$tmp/root" >"$tmp/install.log" 2>&1 ||
  { cat "$tmp/install.log"; exit 1; }
pc=$(find "$tmp/root" -name psgraph.pc | head -1)
[ -n "$pc" ] || { echo "FAIL: no psgraph.pc installed"; exit 1; }
# the installed psgraph.pc, its paths under the temporary root
export PKG_CONFIG_PATH=$(dirname "$pc") PKG_CONFIG_SYSROOT_DIR=$tmp/root
flags=$(pkg-config --cflags --libs psgraph)
case " $flags " in
  *"$src"*|*"$build"*) echo "FAIL: pkg-config points into the tree: $flags"; exit 1 ;;
esac
# every header psgraph.h includes is installed (public), none is left behind
inc=$(find "$tmp/root" -path '*/include/psgraph' -type d | head -1)
for h in $(sed -n 's/^#include "psgraph\/\(.*\)"/\1/p' "$inc/psgraph.h"); do
  [ -f "$inc/$h" ] || { echo "FAIL: psgraph.h includes $h, which is not installed"; exit 1; }
done
san=()
[ "$mode" = asan ] && san=(-fsanitize=address,undefined)
cc -std=c11 -Wall -Wextra -Werror "${san[@]}" "$src/docs/examples/train_mlp.c" $flags \
  -o "$tmp/train_mlp"
libdir=$(dirname "$(find "$tmp/root" -name 'libpsgraph.so' | head -1)")
out=$(LD_LIBRARY_PATH=$libdir "$tmp/train_mlp" "$data" 300)
echo "$out"
# the library the program ran with is the installed one
ldd_out=$(LD_LIBRARY_PATH=$libdir ldd "$tmp/train_mlp" | grep libpsgraph)
case "$ldd_out" in
  *"$tmp/root"*) ;;
  *) echo "FAIL: not linked against the installed library: $ldd_out"; exit 1 ;;
esac
echo "$out" | awk '{ if (!($6 < $4) || !($9 > 0.70)) { print "FAIL: loss " $4 " -> " $6 ", accuracy " $9; exit 1 } }'
# the numbers docs/api.md shows: with OpenBLAS's generic x86-64 kernel, the same on every x86-64
if [ "$(uname -m)" = x86_64 ]; then
  doc=$(grep -A1 '^OPENBLAS_CORETYPE=Prescott ' "$src/docs/api.md" | sed -n 's/^# //p')
  got=$(OPENBLAS_CORETYPE=Prescott LD_LIBRARY_PATH=$libdir "$tmp/train_mlp" "$data" 300)
  [ -n "$doc" ] && [ "$got" = "$doc" ] || { echo "FAIL: docs/api.md says '$doc', the program printed '$got'"; exit 1; }
  echo "$got (OPENBLAS_CORETYPE=Prescott): as docs/api.md says"
  # and the doc's first line where OpenBLAS picks the kernel it names (Zen)
  core=$(LD_LIBRARY_PATH=$libdir "$build/cli/psgraph" train --model mlp --data synthetic --steps 1 --batch 8 2>/dev/null |
         tail -1 | python3 -c 'import json,sys; print(json.loads(sys.stdin.read()).get("blas",""))' 2>/dev/null)
  if [ "$core" = Zen ] && [ -z "${OPENBLAS_CORETYPE:-}" ]; then
    doc=$(grep -A1 '^LD_LIBRARY_PATH=.*train_mlp' "$src/docs/api.md" | sed -n 's/^# //p' | head -1)
    [ "$out" = "$doc" ] || { echo "FAIL: docs/api.md says '$doc' on Zen, the program printed '$out'"; exit 1; }
    echo "$out (OpenBLAS's Zen kernel): as docs/api.md says"
  fi
fi
echo "ok: installed library, pkg-config, loss falls, accuracy above 70%, the doc's numbers"
