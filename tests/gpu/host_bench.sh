#!/usr/bin/env bash
# On a lent GPU machine, its host CPU measured as issue 18 asks of a CPU, next to llama.cpp, in this order, each
# part under its own timeout and its table written to $OUT as it ends (a call cut short keeps what it measured):
#   2 threads pinned to two cores (the issue's two-core setting): single decode and pp128 on the 0.5B shape in
#     Q4_0, Q8_0 and F16, then x4;
#   all cores (at most 16): F16 prefill and x16; pp128, pp2048 and x4 in Q4_0, Q8_0 and Q4_K_S; SmolLM2-135M's shape
#     in Q4_1 (with GPT-2's vocabulary, 50257 tokens against SmolLM2's 49152): pp512, tg64, x16;
#   decode while a loop keeps one of the two cores busy (tests/bench/contention_bench.sh);
#   1-64 streaming clients against llama-server on the two cores (tests/bench/serve_bench.sh, 5 s a cell, one round).
#   tests/gpu/host_bench.sh LLAMA_DIR [PART...]
# LLAMA_DIR as host_cpu.sh's, with llama-server and its libraries too. About 9 minutes on a 16-core Xeon (a
# whole call); PARTs (2t-decode all-f16 all-quantized 2t-x4 all-smollm2 contention serve) run only those, for a
# second call that measures what the first did not reach.
set -uo pipefail
cd "$(dirname "$0")/../.."
llama=$(cd "${1:?usage: host_bench.sh LLAMA_DIR [PART...]}" && pwd)
shift
parts=" ${*:-2t-decode all-f16 all-quantized 2t-x4 all-smollm2 contention serve} "
wanted() { [[ $parts == *" $1 "* ]]; }
all=$(($(nproc) < 16 ? $(nproc) : 16))
OUT=${OUT:-/tmp/ftllm-gpu}
mkdir -p "$OUT"
. tests/gpu/host_common.sh
export FTLLM_BENCH="$C/bin/ftllm-bench" FTLLMD="$C/bin/ftllmd"
command -v taskset >/dev/null || taskset() { shift 2; "$@"; }  # without taskset the two-core parts run unpinned
start=$(date +%s)
elapsed() { echo $(($(date +%s) - start))s; }

m=/tmp/ftllm-host-bench
mapfile -t q05 < <(random_models $m qwen2.5-0.5b qwen2 q4_0 q8_0 q4_k_s f16)
smol=$(random_models $m smollm2-135m gpt-2 q4_1)
[ ${#q05[@]} -eq 4 ] && [ -n "$smol" ] || exit 1
q4_0=${q05[0]} q8_0=${q05[1]} q4_k_s=${q05[2]} f16=${q05[3]}
{
  lscpu | grep -E '^(Model name|CPU\(s\)|L2 cache|L3 cache)'
  "$FTLLM_BENCH" "$q4_0" -t 2 --prompt 1 --decode 1 --repeat 1 2>&1 | head -n 1
} | tee "$OUT/cpu.txt"

bench() {  # NAME SECONDS CPUS THREADS CELLS MODEL...
  local name=$1 seconds=$2 cpus=$3 threads=$4 cells=$5
  shift 5
  wanted "$name" || return 0
  echo "== $name ($(elapsed))"
  timeout "$seconds" taskset -c "$cpus" bash tests/bench/cpu_bench.sh "$llama" -t "$threads" -r 2 -c "$cells" "$@" 2>&1 |
    tee "$OUT/$name.txt"
}
bench 2t-decode 130 0,1 2 "tg64 pp128" "$q4_0" "$q8_0" "$f16"
bench all-f16 60 "0-$((all - 1))" "$all" "pp128 pp512 x16" "$f16"
bench all-quantized 150 "0-$((all - 1))" "$all" "pp128 pp2048 x4" "$q4_0" "$q8_0" "$q4_k_s"
bench 2t-x4 50 0,1 2 x4 "$q4_0" "$f16"
bench all-smollm2 40 "0-$((all - 1))" "$all" "pp512 tg64 x16" "$smol"
if wanted contention; then
  echo "== contention ($(elapsed))"
  timeout 120 taskset -c 0,1 bash tests/bench/contention_bench.sh -r 2 -l "$llama" "$q4_0" 2>&1 | tee "$OUT/contention.txt"
fi
wanted serve || exit 0
echo "== serve ($(elapsed))"
timeout 200 taskset -c 0,1 bash tests/bench/serve_bench.sh "$llama/llama-server" 5 "$q4_0" 1 \
  tests/data/chat-templates/Qwen-Qwen2.5-7B-Instruct.jinja 2>&1 | grep -v "^ftllmd: warning" | tee "$OUT/serve.txt"
echo "== done ($(elapsed))"
