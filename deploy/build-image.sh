#!/usr/bin/env bash
# Builds the flint image from nothing (no base image, no registry): a statically linked flint
# (glibc, crt-static; the musl target is not needed) copied into `FROM scratch`.
#   deploy/build-image.sh [IMAGE]   (default flint:latest)
set -euo pipefail
cd "$(dirname "$0")/.."
image="${1:-flint:latest}"
target=x86_64-unknown-linux-gnu
# Static only for the target: build scripts and proc macros stay dynamic host binaries. A target
# directory of its own, so that a test running under `cargo test` can build the image too.
export CARGO_TARGET_DIR=target/image-build
if [ ! -d "$CARGO_TARGET_DIR" ]; then
  # Measured on two cores: 3 min 17 s and 0.7 GB (docs/guide/deployment.md).
  echo "build-image: a release build of its own in $CARGO_TARGET_DIR, static: a few minutes and about 0.7 GB the first time" >&2
fi
RUSTFLAGS='-C target-feature=+crt-static' CARGO_PROFILE_RELEASE_DEBUG=0 \
  cargo build --release --locked --target "$target" -p flint
context=target/image
rm -rf "$context" && mkdir -p "$context"
cp "$CARGO_TARGET_DIR/$target/release/flint" deploy/Dockerfile "$context/"
mkdir -p "$context/mnt/pki/enroll" "$context/mnt/results" "$context/mnt/enroll"
chmod 1777 "$context/mnt/pki" "$context/mnt/pki/enroll" "$context/mnt/results" "$context/mnt/enroll"
# A dynamic binary names its libraries ("libc.so.6 => …"); a static one names none.
if ldd "$context/flint" 2>/dev/null | grep -q "=>"; then
  echo "build-image: $context/flint is not statically linked" >&2
  exit 1
fi
docker build -q -t "$image" "$context"
echo "built $image ($(du -h "$context/flint" | cut -f1) binary)"
