#!/usr/bin/env bash
# Installs llama.cpp's prebuilt CPU libraries from npm, pinned, outside the repository, and
# prints the install directory on stdout. Idempotent: a finished install is reused.
#   bash bench/llamacpp/install.sh
# node-llama-cpp@3.21.1 carries the llama.cpp source it was built from (llama/gitRelease.bundle,
# tag in llama/llama.cpp.info.json, checked against the libraries' build metadata), whose
# include/ and ggml/include/ give the exact llama.h of the libraries; @node-llama-cpp/linux-x64@3.21.1 carries the libraries (libllama, libggml*,
# one libggml-cpu-<microarchitecture>.so per x86-64 level, picked at run time by ggml).
# Install scripts are not run (node-llama-cpp's would try to download or build llama.cpp).
set -euo pipefail
version=3.21.1
# Default: ~/.cache/linserve/llamacpp
cache=${LINSERVE_LLAMACPP_CACHE:-$HOME/.cache/linserve/llamacpp}
dir=$cache/$version
if [[ -f $dir/.complete ]]; then
  echo "$dir"
  exit 0
fi
rm -rf "$dir"
mkdir -p "$dir"
echo "installing node-llama-cpp@$version into $dir" >&2
npm install --prefix "$dir" --no-save --no-audit --no-fund --ignore-scripts --omit=optional \
  "node-llama-cpp@$version" "@node-llama-cpp/linux-x64@$version" >&2
pkg=$dir/node_modules/node-llama-cpp
bins=$dir/node_modules/@node-llama-cpp/linux-x64/bins/linux-x64
tag=$(sed -n 's/.*"tag": *"\([^"]*\)".*/\1/p' "$pkg/llama/llama.cpp.info.json")
built=$(sed -n 's/.*"release":"\([^"]*\)".*/\1/p' "$bins/_nlcBuildMetadata.json")
if [[ -z $tag || $tag != "$built" ]]; then
  echo "llama.cpp source tag '$tag' differs from the libraries' release '$built'" >&2
  exit 1
fi
# Only the headers and the licence are kept from the source (llama.h includes ggml's headers).
git clone --quiet --bare "$pkg/llama/gitRelease.bundle" "$dir/llama.cpp.git"
mkdir -p "$dir/llama.cpp"
git --git-dir="$dir/llama.cpp.git" archive HEAD include ggml/include LICENSE | tar -x -C "$dir/llama.cpp"
rm -rf "$dir/llama.cpp.git"
for f in "$dir/llama.cpp/include/llama.h" "$bins/libllama.$tag.so"; do
  [[ -f $f ]] || { echo "missing $f" >&2; exit 1; }
done
echo "$tag" > "$dir/llama.cpp.tag"
touch "$dir/.complete"
echo "$dir"
