# llama.cpp's peer, ready to run: sourced by bench/llamacpp/run.sh and bench/run_scaling.sh so
# that both use the same install, driver and model-file cache.
#   source bench/llamacpp/setup.sh
#   llamacpp_setup                        # install, compile the driver, check Q8_0
#   file=$(llamacpp_model gpt2 q8_0 8192) # a model file, written once and cached
# llamacpp_setup sets: llamacpp_dir (install directory), llamacpp_tag (llama.cpp's release),
# llamacpp_version (node-llama-cpp's), llamacpp_bins (the shared libraries, --backends of the
# driver) and llamacpp_bench (the compiled driver, bench/llamacpp/llamacpp_bench.cc).
llamacpp_here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
llamacpp_python=${LINSERVE_PYTHON:-/usr/bin/python3}

llamacpp_setup() {
  llamacpp_dir=$(bash "$llamacpp_here/install.sh")
  llamacpp_tag=$(cat "$llamacpp_dir/llama.cpp.tag")
  llamacpp_version=$(basename "$llamacpp_dir")
  llamacpp_bins=$llamacpp_dir/node_modules/@node-llama-cpp/linux-x64/bins/linux-x64
  llamacpp_bench=$llamacpp_dir/build/llamacpp_bench
  mkdir -p "$llamacpp_dir/build" "$llamacpp_dir/results"
  g++ -O2 -std=c++17 -Wall -Wextra -Werror -o "$llamacpp_bench" "$llamacpp_here/llamacpp_bench.cc" \
    -I"$llamacpp_dir/llama.cpp/include" -I"$llamacpp_dir/llama.cpp/ggml/include" \
    "$llamacpp_bins/libllama.$llamacpp_tag.so" "$llamacpp_bins/libggml.$llamacpp_tag.so" \
    "$llamacpp_bins/libggml-base.so" -Wl,-rpath,"$llamacpp_bins"
  "$llamacpp_python" "$llamacpp_here/q8_0_check.py" "$llamacpp_bins" >&2
}

# Prints the path of the model file of ARCH (gpt2, rwkv7) in DTYPE (f32, f16, q8_0) whose
# context_length (GPT-2's position table) is CONTEXT_LENGTH, writing it first if the cache lacks
# it. Files are cached per version of the writer (its hash names their directory); the
# 8192-position files keep the names run.sh has always given them.
llamacpp_model() {
  local arch=$1 dtype=$2 context_length=$3
  local writer_hash models file
  writer_hash=$(sha256sum "$llamacpp_here/gguf_writer.py" | cut -c1-12)
  models=${llamacpp_dir:?llamacpp_model: run llamacpp_setup first}/models/$writer_hash
  mkdir -p "$models"
  file=$models/$arch-$dtype.gguf
  [[ $context_length == 8192 ]] || file=$models/$arch-$dtype-ctx$context_length.gguf
  if [[ ! -f $file ]]; then
    echo "writing $file" >&2
    "$llamacpp_python" "$llamacpp_here/gguf_writer.py" --arch "$arch" --dtype "$dtype" \
      --context_length "$context_length" --out "$file.tmp"
    mv "$file.tmp" "$file"
  fi
  echo "$file"
}
