#!/usr/bin/env bash
# Fuzzes the GGUF and safetensors header parsers with libFuzzer (clang, AddressSanitizer, UBSan).
#   tests/fuzz/run.sh [SECONDS]        default 300
# The corpus lives in tests/fuzz/corpus/ (seeded with small valid files) and grows as it runs; commit what
# it finds. A crash leaves crash-* in build-fuzz/ and the script exits non-zero.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
seconds=${1:-300}
command -v clang++ >/dev/null ||
  { echo "fuzz: clang++ not found; install it with: apt-get install clang libclang-rt-14-dev (libFuzzer)" >&2; exit 1; }
out=$root/build-fuzz
mkdir -p "$out" "$root/tests/fuzz/corpus"
clang++ -std=c++20 -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
  -I"$root/engine" "$root/tests/fuzz/model_headers_fuzz.cpp" \
  "$root/engine/model/gguf.cpp" "$root/engine/model/safetensors.cpp" "$root/engine/core/mapped_file.cpp" \
  "$root/engine/core/tensor.cpp" "$root/engine/core/dtype.cpp" "$root/engine/quant/ggml_blocks.cpp" \
  -lsimdjson -o "$out/model_headers_fuzz"
cd "$out"
./model_headers_fuzz "$root/tests/fuzz/corpus" -max_total_time="$seconds" -rss_limit_mb=2048 -max_len=4096 \
  -timeout=10 -print_final_stats=1
