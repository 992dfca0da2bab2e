#!/usr/bin/env bash
# On a lent GPU machine, its host CPU, often a Xeon with AMX (which this project's own machines lack): the CPU,
# the kernel table ftllm picks there and why, the AMX cases of the engine's tests on real tiles, then
# tests/bench/cpu_bench.sh with the AMX table and with the AVX-512 VNNI table next to llama.cpp on the same
# random-weight GGUF files of the 0.5B shape: TYPES, default "q4_0 q8_0 q4_k_s" (llama-quantize's names, or f16;
# the block types are what the AMX table takes), and CELLS, default "pp512 x16", cpu_bench's cells.
#   tests/gpu/host_cpu.sh LLAMA_DIR [THREADS]     (THREADS: default the machine's cores, at most 16)
# Uses what tests/gpu/prepare.sh packed (build-gpu/carry.tar.gz; host_common.sh). LLAMA_DIR holds llama-bench,
# llama-batched-bench and llama-quantize with their shared libraries, built here (that machine reaches no
# registry). python3 there needs numpy and gguf (carry the wheel; PYTHONPATH). Logs go to $OUT.
set -uo pipefail
cd "$(dirname "$0")/../.."
llama=$(cd "${1:?usage: host_cpu.sh LLAMA_DIR [THREADS]}" && pwd)
threads=${2:-$(($(nproc) < 16 ? $(nproc) : 16))}
OUT=${OUT:-/tmp/ftllm-gpu}
mkdir -p "$OUT"
. tests/gpu/host_common.sh
start=$(date +%s)
elapsed() { echo $(($(date +%s) - start))s; }

echo "== CPU"
{
  lscpu | grep -E '^(Model name|CPU\(s\)|Thread\(s\) per core|Socket\(s\)|L2 cache|L3 cache|NUMA node\(s\))'
  echo "AMX flags: $(grep -o -w 'amx[a-z0-9_]*' /proc/cpuinfo | sort -u | tr '\n' ' ')"
  echo "threads used: $threads"
} | tee "$OUT/cpu.txt"

echo "== AMX test cases ($(elapsed))"
"$C/bin/test_engine" --run_test='*/amx*' --log_level=message --report_level=short 2>&1 | tee "$OUT/amx-tests.log"
tests_rc=${PIPESTATUS[0]}

echo "== models ($(elapsed))"
mapfile -t models < <(random_models /tmp/ftllm-host-cpu qwen2.5-0.5b qwen2 ${TYPES:-q4_0 q8_0 q4_k_s})
[ ${#models[@]} -gt 0 ] || exit 1
# The table this machine picks on its own (AMX wherever the CPU grants it), or why not AMX.
picked=$("$C/bin/ftllm-bench" "${models[0]}" -t "$threads" --prompt 1 --decode 1 --repeat 1 2>&1 | head -n 1)
echo "$picked" | tee -a "$OUT/cpu.txt"
tables=avx512vnni
[[ $picked == *" avx512amx kernels"* ]] && tables="avx512amx avx512vnni"
for kernels in $tables; do
  echo "== cpu_bench -k $kernels ($(elapsed))"
  FTLLM_BENCH="$C/bin/ftllm-bench" timeout 150 bash tests/bench/cpu_bench.sh "$llama" -t "$threads" -r 2 -k "$kernels" \
    -c "${CELLS:-pp512 x16}" "${models[@]}" 2>&1 | tee "$OUT/cpu-bench-$kernels.txt"
done
echo "== done ($(elapsed))"
exit "$tests_rc"
