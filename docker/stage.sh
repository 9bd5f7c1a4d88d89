#!/usr/bin/env bash
# Lays out the build context of docker/Dockerfile.prebuilt from binaries already built on this
# machine, so that an image costs no recompilation: the four binaries, the SentencePiece plugin,
# the bundled model, docker/install-runtime.sh and, for a CUDA build, the CUDA libraries the
# binaries load from /usr/local/cuda (cuBLASLt: redistributable; the runtime is linked
# statically; the driver, libcuda, comes from the host through the NVIDIA container toolkit).
#   bash docker/stage.sh build/cpu  build/image-cpu    # after scripts/build.sh build/cpu ...
#   bash docker/stage.sh build/cuda build/image-cuda   # after scripts/build.sh build/cuda ...
#   podman build --isolation chroot --format docker -f docker/Dockerfile.prebuilt \
#       -t localhost/linserve:cpu build/image-cpu
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:?usage: stage.sh BUILD_DIR OUT_DIR}
out=${2:?usage: stage.sh BUILD_DIR OUT_DIR}

binaries=(server/linserve client/cli/linserve-cli client/loadtest/linserve-loadtest
          tools/linserve-generate)
for b in "${binaries[@]}" lib/linserve/liblinserve_sentencepiece.so; do
  if [[ ! -f $build/$b ]]; then
    echo "stage.sh: $build/$b is missing; build it first (scripts/build.sh $build ...)" >&2
    exit 1
  fi
done

rm -rf "$out"
mkdir -p "$out/bin" "$out/lib/linserve" "$out/models"
for b in "${binaries[@]}"; do cp "$build/$b" "$out/bin/"; done
cp "$build/lib/linserve/liblinserve_sentencepiece.so" "$out/lib/linserve/"
cp -r "$root/models/shakespeare-linear" "$out/models/"
cp "$root/docker/install-runtime.sh" "$out/"

# Every library a binary resolves under /usr/local/cuda goes into the image (dereferenced: the
# image gets the file under the soname the binary asks for).
cuda_libs=$(for b in "${binaries[@]}"; do ldd "$build/$b"; done |
            awk '$3 ~ /^\/usr\/local\/cuda/ { print $3 }' | sort -u)
for lib in $cuda_libs; do cp -L "$lib" "$out/lib/"; done
echo "stage.sh: $out holds $(ls "$out/bin" | wc -l) binaries," \
     "$(echo "$cuda_libs" | grep -c . || true) CUDA libraries ($(du -sh "$out" | cut -f1))"
