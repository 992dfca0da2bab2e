# Sourced by host_cpu.sh and host_bench.sh on a lent machine: unpacks what tests/gpu/prepare.sh packed
# (build-gpu/carry.tar.gz) into $C, puts its libraries and llama.cpp's ($llama) on the library path, and
# offers random_models, which writes random-weight GGUFs of a real shape in llama-quantize's types.
# python3 there needs numpy and gguf (carry the wheel; PYTHONPATH) for tests/bench/make_random_gguf.py.
C=/tmp/ftllm-gpu-carry/carry
[ -d "$C" ] || { mkdir -p /tmp/ftllm-gpu-carry && tar -C /tmp/ftllm-gpu-carry -xzf build-gpu/carry.tar.gz; } || exit 1
export LD_LIBRARY_PATH="$C/libs:$llama:${LD_LIBRARY_PATH:-}"

# random_models DIR SHAPE VOCAB TYPE... : DIR/SHAPE-TYPE.gguf for each TYPE (f16, or a llama-quantize type),
# with the vocabulary of tests/data/vocab/ggml-vocab-VOCAB.gguf.xz; prints the paths.
random_models() {
  local dir=$1 shape=$2 vocab=$3 t
  shift 3
  mkdir -p "$dir"
  xz -dc "tests/data/vocab/ggml-vocab-$vocab.gguf.xz" >"$dir/vocab-$vocab.gguf"
  python3 tests/bench/make_random_gguf.py "$shape" "$dir/$shape-f16.gguf" "$dir/vocab-$vocab.gguf" >/dev/null || return 1
  for t in "$@"; do
    [ "$t" = f16 ] || "$llama/llama-quantize" "$dir/$shape-f16.gguf" "$dir/$shape-$t.gguf" "$t" "$(nproc)" >/dev/null 2>&1 ||
      echo "llama-quantize $t failed" >&2
    echo "$dir/$shape-$t.gguf"
  done
}
