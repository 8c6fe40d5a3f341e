#!/usr/bin/env bash
# Builds the Prometheus image of the compose `monitoring` profile from nothing (no base image,
# no registry): Debian's prometheus package's binary, the libraries `ldd` names for it and its
# web assets, copied into `FROM scratch`.
#   deploy/build-prometheus-image.sh [IMAGE]   (default flint-prometheus:latest)
# Needs Debian's package: apt-get install --no-install-recommends prometheus
set -euo pipefail
cd "$(dirname "$0")/.."
image="${1:-flint-prometheus:latest}"
binary=/usr/bin/prometheus
if [ ! -x "$binary" ]; then
  echo "build-prometheus-image: $binary not found; install Debian's package: apt-get install --no-install-recommends prometheus" >&2
  exit 1
fi
context=target/prometheus-image
rm -rf "$context" && mkdir -p "$context/rootfs"
copy() { mkdir -p "$context/rootfs$(dirname "$1")" && cp -L "$1" "$context/rootfs$1"; }
copy "$binary"
# The dynamic loader and every library it loads ("libc.so.6 => /lib/…", "/lib64/ld-linux…").
for lib in $(ldd "$binary" | grep -o '/[^ ]*'); do
  copy "$lib"
done
if [ -d /usr/share/prometheus ]; then
  mkdir -p "$context/rootfs/usr/share"
  cp -r /usr/share/prometheus "$context/rootfs/usr/share/"
fi
mkdir -p "$context/rootfs/prometheus" "$context/rootfs/etc/prometheus"
cp deploy/prometheus/prometheus.yml "$context/rootfs/etc/prometheus/prometheus.yml"
cp deploy/prometheus/Dockerfile "$context/"
docker build -q -t "$image" "$context"
echo "built $image ($(du -sh "$context/rootfs" | cut -f1))"
