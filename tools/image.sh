#!/usr/bin/env bash
# An OCI image of psgraph built from Debian's packages only: a root filesystem made by
# mmdebstrap from the host's Debian release and package sources (Essential packages, plus
# the packages that hold the libraries psgraph links, found from its ldd), psgraph's
# `meson install` copied in, a non-root user (psgraph, uid 1000), imported into podman as
# psgraph:VERSION with psgraph on PATH. No base image from a registry. Not a CUDA image:
# the CUDA module (libpsgraph_cuda) is left out, since its libraries are no Debian packages.
#
#   bash tools/image.sh [--builddir DIR] [--tag NAME:TAG] [--out FILE.tar]
#
# --builddir DIR  install from this meson build folder (default: build-image, configured
#                 here with -Dnative=false -Dcuda=disabled so the binary runs on any x86-64)
# --tag NAME:TAG  the image's name (default psgraph:VERSION, VERSION from meson.build)
# --out FILE      also write the image as an OCI archive (podman save --format oci-archive)
# PSG_IMAGE_SOURCES=FILE  apt sources for mmdebstrap (default: the host's Debian sources)
# Prints the image's name and size on its last line. Needs root, mmdebstrap and podman
# (apt-get install mmdebstrap podman).
set -euo pipefail
cd "$(dirname "$0")/.."
usage() { sed -n '8,16p' "$0" | sed 's/^# \{0,1\}//'; }
builddir= tag= out=
while [ $# -gt 0 ]; do
  case $1 in
    --builddir) builddir=${2:?--builddir needs a folder}; shift 2 ;;
    --tag) tag=${2:?--tag needs NAME:TAG}; shift 2 ;;
    --out) out=${2:?--out needs a file}; shift 2 ;;
    -h | --help) usage; exit 0 ;;
    *) echo "tools/image.sh: unknown argument '$1'" >&2; usage >&2; exit 2 ;;
  esac
done
die() { echo "tools/image.sh: $*" >&2; exit 1; }
version=$(sed -n "s/^ *version : '\([^']*\)',*$/\1/p" meson.build | head -1)
[ -n "$version" ] || die "no version in meson.build"
tag=${tag:-psgraph:$version}
for tool in mmdebstrap podman dpkg-query ldd meson ninja; do
  command -v "$tool" >/dev/null || die "needs $tool (apt-get install mmdebstrap podman)"
done
[ "$(id -u)" = 0 ] || die "needs root (mmdebstrap's root mode, rootful podman)"
. /etc/os-release
suite=${VERSION_CODENAME:?}
# the host's Debian sources: the image gets the same release the binary was built against
sources=${PSG_IMAGE_SOURCES:-}
if [ -z "$sources" ]; then
  for f in /etc/apt/sources.list.d/debian.sources /etc/apt/sources.list; do
    [ -s "$f" ] && { sources=$f; break; }
  done
fi
[ -n "$sources" ] || die "no Debian apt sources on this host (PSG_IMAGE_SOURCES=FILE names some)"

if [ -z "$builddir" ]; then
  builddir=build-image
  [ -f "$builddir/build.ninja" ] || meson setup "$builddir" -Dnative=false -Dcuda=disabled >/dev/null
fi
ninja -C "$builddir" >/dev/null
work=$(mktemp -d /tmp/psgraph-image.XXXXXX)
trap 'rm -rf "$work"' EXIT
stage=$work/stage
meson install -C "$builddir" --no-rebuild --destdir "$stage" >"$work/install.log" 2>&1 ||
  { cat "$work/install.log" >&2; die "meson install failed"; }
bin=$(find "$stage" -path '*/bin/psgraph' -type f | head -1)
[ -n "$bin" ] || die "meson install put no bin/psgraph under $stage"
prefix=${bin%/bin/psgraph}
prefix=${prefix#"$stage"}
# the CPU image: the CUDA module's libraries (cudart, cuBLAS, cuDNN) are not Debian's
find "$stage" -name 'libpsgraph_cuda*' -exec rm -f {} +
libdirs=$(find "$stage" -name 'libpsgraph.so*' -printf '%h\n' | sort -u | paste -sd:)

# The Debian package of each library psgraph needs: the file as ldd names it, its real path,
# and both with and without /usr (bookworm's packages still list /lib paths).
owner() {
  local f cand
  for f in "$1" "$(realpath "$1")"; do
    for cand in "$f" "${f#/usr}" "/usr$f"; do
      dpkg-query -S "$cand" 2>/dev/null | head -1 | cut -d: -f1 && return 0
    done
  done
  return 1
}
pkgs=()
while read -r lib; do
  case $lib in "$stage"/*) continue ;; esac
  p=$(owner "$lib") || die "$lib (needed by psgraph) is in no Debian package: the image holds Debian's libraries only"
  pkgs+=("$p")
done < <(LD_LIBRARY_PATH=$libdirs ldd "$bin" | awk '$2 == "=>" && $3 ~ /^\// {print $3}')
if LD_LIBRARY_PATH=$libdirs ldd "$bin" | grep -q 'not found'; then
  die "psgraph's libraries are not all found here: $(LD_LIBRARY_PATH=$libdirs ldd "$bin" | grep 'not found')"
fi
include=$(printf '%s\n' "${pkgs[@]}" | sort -u | paste -sd,)
echo "tools/image.sh: $suite from $sources, Essential packages and $include" >&2

# the user: psgraph (1000:1000), home /home/psgraph; numeric in the image's config so that
# Kubernetes' runAsNonRoot can check it
user_hook='echo "psgraph:x:1000:1000:psgraph:/home/psgraph:/bin/sh" >>"$1/etc/passwd" &&
  echo "psgraph:x:1000:" >>"$1/etc/group" && echo "psgraph:*:20000:0:99999:7:::" >>"$1/etc/shadow" &&
  mkdir -p -m 0755 "$1/home/psgraph" && chown 1000:1000 "$1/home/psgraph"'
check_hook='chroot "$1" ldconfig && if chroot "$1" ldd '"$prefix"'/bin/psgraph | grep "not found"; then exit 1; fi &&
  chroot "$1" '"$prefix"'/bin/psgraph --help >/dev/null'
mmdebstrap --quiet --variant=essential --include="$include" \
  --hook-dir=/usr/share/mmdebstrap/hooks/merged-usr \
  --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/info/*' \
  --dpkgopt='path-exclude=/usr/share/locale/*' --dpkgopt='path-exclude=/usr/share/doc/*' \
  --dpkgopt='path-include=/usr/share/doc/*/copyright' \
  --customize-hook="sync-in '$stage' /" \
  --customize-hook="$user_hook" --customize-hook="$check_hook" \
  --customize-hook='rm -rf "$1"/var/cache/apt/* "$1"/var/lib/apt/lists/* "$1"/var/log/*' \
  "$suite" "$work/rootfs.tar" "$sources" || die "mmdebstrap failed"

old=$(podman image inspect --format '{{.Id}}' "$tag" 2>/dev/null || true)
podman import --quiet \
  --change "USER 1000:1000" --change "WORKDIR /home/psgraph" \
  --change "ENV PATH=$prefix/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" \
  --change "ENV HOME=/home/psgraph" --change 'CMD ["psgraph", "--help"]' \
  --change "LABEL org.opencontainers.image.title=psgraph" \
  --change "LABEL org.opencontainers.image.version=$version" \
  "$work/rootfs.tar" "$tag" >/dev/null || die "podman import failed"
# the image the tag named before, now nameless, is removed (one still in use stays)
[ -n "$old" ] && [ "$(podman image inspect --format '{{.Id}}' "$tag")" != "$old" ] &&
  podman rmi "$old" >/dev/null 2>&1 || true
if [ -n "$out" ]; then
  rm -f "$out"
  podman save --quiet --format oci-archive -o "$out" "$tag" || die "podman save $out failed"
fi
size=$(podman image inspect --format '{{.Size}}' "$tag")
echo "tools/image.sh: $tag built, $size bytes ($((size / 1000000)) MB)${out:+, saved as $out}"
