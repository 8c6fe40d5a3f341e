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
# Its web assets. Debian's link libraries into /usr/share/javascript, whole trees (one is 214 MB
# of time-zone builds): copy the asset folders of its own, and from the linked ones only the
# files its pages name, links followed.
web=/usr/share/prometheus/web
if [ -d "$web" ]; then
  dest="$context/rootfs$web"
  mkdir -p "$dest/static"
  find "$web" -mindepth 1 -maxdepth 1 ! -name static -exec cp -r {} "$dest/" \;
  find "$web/static" -mindepth 1 -maxdepth 1 ! -type l -exec cp -r {} "$dest/static/" \;
  grep -rhoE 'static/[A-Za-z0-9._-]+/[A-Za-z0-9._/-]+' "$web" | sort -u | while read -r f; do
    top="${f#static/}"
    if [ -L "$web/static/${top%%/*}" ] && [ -f "$web/$f" ]; then
      mkdir -p "$dest/$(dirname "$f")" && cp -L "$web/$f" "$dest/$f"
    fi
  done
  # A link left pointing outside (an icon font of a package not installed) would only dangle.
  find "$dest" -xtype l -delete
fi
mkdir -p "$context/rootfs/prometheus" "$context/rootfs/etc/prometheus"
cp deploy/prometheus/prometheus.yml "$context/rootfs/etc/prometheus/prometheus.yml"
cp deploy/prometheus/Dockerfile "$context/"
docker build -q -t "$image" "$context"
echo "built $image ($(du -sh "$context/rootfs" | cut -f1))"
