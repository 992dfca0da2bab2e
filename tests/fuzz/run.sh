#!/usr/bin/env bash
# Fuzzes, with libFuzzer (clang, AddressSanitizer, UBSan): the GGUF and safetensors header parsers
# (model_headers_fuzz); what the daemon reads from clients and its config file: HTTP requests, the
# config (TOML) and OpenAI request bodies (daemon_inputs_fuzz); chat templates with their messages
# (chat_template_fuzz); and the tokenizers, text to ids and back (tokenizer_fuzz).
#   tests/fuzz/run.sh [SECONDS] [OUT_DIR]     SECONDS per target, default 300; OUT_DIR default build-fuzz/
# Each target's corpus is in tests/fuzz/ (corpus/, daemon_corpus/, template_corpus/, tokenizer_corpus/:
# small valid inputs and every finding)
# and is not written to (new units go to OUT_DIR); commit a finding there with the fix. A crash leaves
# crash-* in OUT_DIR and the script exits non-zero. `meson test fuzz` runs it for a few seconds a target.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
seconds=${1:-300}
out=${2:-$root/build-fuzz}
command -v clang++ >/dev/null ||
  { echo "fuzz: clang++ not found; install it with: apt-get install clang libclang-rt-14-dev (libFuzzer)" >&2; exit 1; }
mkdir -p "$out"
out=$(cd "$out" && pwd)  # the runs below work inside it
# Each source compiles to its own object (through ccache where there is one, with paths relative to the
# checkout so every clone shares the cache); each target links its objects.
compile=() objects=()
if command -v ccache >/dev/null; then
  compile=(ccache)
  export CCACHE_BASEDIR="$root" CCACHE_NOHASHDIR=1
fi
sanitize=(-O1 -g -fsanitize=address,undefined -fno-sanitize-recover=undefined)
objects_of() {  # sources relative to the checkout -> objects (in $objects)
  objects=()
  for src in "$@"; do
    local obj="$out/obj/${src//\//_}.o"
    mkdir -p "$out/obj"
    case "$src" in
      *.c) "${compile[@]}" clang "${sanitize[@]}" -fsanitize=fuzzer-no-link -w -I/usr/share/include/llhttp -c "$src" -o "$obj" ;;
      *) "${compile[@]}" clang++ -std=c++20 "${sanitize[@]}" -fsanitize=fuzzer-no-link -I"$root/engine" -I"$root/daemon" \
           -I/usr/share/include/llhttp -c "$root/$src" -o "$obj" ;;
    esac
    objects+=("$obj")
  done
}
link() {  # target, libraries...
  local target=$1
  shift
  clang++ "${sanitize[@]}" -fsanitize=fuzzer "${objects[@]}" "$@" -o "$out/$target"
}
cd "$root"  # relative sources, the same in every checkout
model_files=(engine/model/gguf.cpp engine/core/mapped_file.cpp engine/core/tensor.cpp engine/core/dtype.cpp
  engine/quant/ggml_blocks.cpp)
objects_of tests/fuzz/model_headers_fuzz.cpp engine/model/safetensors.cpp "${model_files[@]}"
link model_headers_fuzz -lsimdjson
objects_of tests/fuzz/daemon_inputs_fuzz.cpp daemon/http/request_parser.cpp daemon/config.cpp daemon/openai/request.cpp \
  /usr/share/llhttp/api.c /usr/share/llhttp/http.c /usr/share/llhttp/llhttp.c
link daemon_inputs_fuzz -lsimdjson
objects_of tests/fuzz/chat_template_fuzz.cpp engine/tokenizer/chat_template.cpp engine/core/mapped_file.cpp \
  $(cd "$root" && ls engine/tokenizer/jinja/*.cpp)
link chat_template_fuzz -lsimdjson
tokenizer_files=()
for f in bpe_model normalizer pretokenizer regex_split spm_model tokenizer tokenizer_gguf tokenizer_json utf8; do
  tokenizer_files+=("engine/tokenizer/$f.cpp")
done
objects_of tests/fuzz/tokenizer_fuzz.cpp "${tokenizer_files[@]}" "${model_files[@]}"
link tokenizer_fuzz -lsimdjson -lpcre2-8 -lutf8proc
cd "$out"
run() {  # target, corpus, longest input: a fresh copy grows in OUT_DIR, the committed one is only read
  mkdir -p "$out/$1-corpus"
  "./$1" "$out/$1-corpus" "$root/tests/fuzz/$2" -max_total_time="$seconds" -rss_limit_mb=2048 -max_len="${3:-4096}" -timeout=10 \
    -print_final_stats=1 2>&1 | tail -n 3
  return "${PIPESTATUS[0]}"
}
# Two targets at a time, one per core of a CI machine: the same fuzzing in half the time. Each one's
# summary is printed when both are done; a failure of either fails the run.
side_by_side() {  # two commands (strings)
  local status=0
  eval "$1" >"$out/first.log" 2>&1 &
  local first=$!
  eval "$2" >"$out/second.log" 2>&1 || status=$?
  wait "$first" || status=$?
  cat "$out/first.log" "$out/second.log"
  return "$status"
}
side_by_side "run model_headers_fuzz corpus" "run daemon_inputs_fuzz daemon_corpus"
side_by_side "run chat_template_fuzz template_corpus 16384" \
  "FTLLM_FUZZ_TOKENIZERS=\"$root/tests/data/tokenizers\" run tokenizer_fuzz tokenizer_corpus"
