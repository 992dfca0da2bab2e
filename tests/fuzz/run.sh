#!/usr/bin/env bash
# Fuzzes, with libFuzzer (clang, AddressSanitizer, UBSan): the GGUF and safetensors header parsers
# (model_headers_fuzz), and what the daemon reads from clients and its config file: HTTP requests, the
# config (TOML) and OpenAI request bodies (daemon_inputs_fuzz).
#   tests/fuzz/run.sh [SECONDS] [OUT_DIR]     SECONDS per target, default 300; OUT_DIR default build-fuzz/
# Each target's corpus is in tests/fuzz/ (corpus/, daemon_corpus/: small valid inputs and every finding)
# and is not written to (new units go to OUT_DIR); commit a finding there with the fix. A crash leaves
# crash-* in OUT_DIR and the script exits non-zero. `meson test fuzz` runs it for a few seconds a target.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
seconds=${1:-300}
out=${2:-$root/build-fuzz}
command -v clang++ >/dev/null ||
  { echo "fuzz: clang++ not found; install it with: apt-get install clang libclang-rt-14-dev (libFuzzer)" >&2; exit 1; }
mkdir -p "$out"
flags=(-O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined)
clang++ -std=c++20 "${flags[@]}" -I"$root/engine" "$root/tests/fuzz/model_headers_fuzz.cpp" \
  "$root/engine/model/gguf.cpp" "$root/engine/model/safetensors.cpp" "$root/engine/core/mapped_file.cpp" \
  "$root/engine/core/tensor.cpp" "$root/engine/core/dtype.cpp" "$root/engine/quant/ggml_blocks.cpp" \
  -lsimdjson -o "$out/model_headers_fuzz"
llhttp=/usr/share/llhttp
for f in api http llhttp; do
  clang -O1 -g -fsanitize=fuzzer-no-link,address,undefined -w -I/usr/share/include/llhttp -c "$llhttp/$f.c" -o "$out/llhttp_$f.o"
done
clang++ -std=c++20 "${flags[@]}" -I"$root/engine" -I"$root/daemon" -I/usr/share/include/llhttp \
  "$root/tests/fuzz/daemon_inputs_fuzz.cpp" "$root/daemon/http/request_parser.cpp" "$root/daemon/config.cpp" \
  "$root/daemon/openai/request.cpp" "$out"/llhttp_*.o -lsimdjson -o "$out/daemon_inputs_fuzz"
cd "$out"
run() {  # target, corpus: a fresh copy grows in OUT_DIR, the committed one is only read
  mkdir -p "$out/$1-corpus"
  "./$1" "$out/$1-corpus" "$root/tests/fuzz/$2" -max_total_time="$seconds" -rss_limit_mb=2048 -max_len=4096 -timeout=10 \
    -print_final_stats=1 2>&1 | tail -n 3
  return "${PIPESTATUS[0]}"
}
run model_headers_fuzz corpus
run daemon_inputs_fuzz daemon_corpus
