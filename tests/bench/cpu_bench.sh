#!/usr/bin/env bash
# Prefill (128, 512 and 2048 tokens) and decode speed of ftllm next to llama.cpp's llama-bench on the
# same GGUF files, same threads, same run, as ratios, with ftllm's fraction of the memory-bandwidth
# roofline (ftllm-bench measures it). Both feed a prompt in passes of 512 tokens (ftllm-bench's --slice,
# the daemon's max_batch_tokens; llama-bench's n_ubatch).
# Also decode on one thread (the 1 -> 2 thread scaling) and batched decode of 4 and 16 sequences next to
# llama-batched-bench (aggregate tokens/s; the roofline there is in steps, each reading the weights once).
#   tests/bench/cpu_bench.sh LLAMA_CPP_BIN_DIR [-t THREADS] [-r ROUNDS] [-c "CELL ..."] [-k KERNELS] MODEL.gguf ...
# Each cell runs ROUNDS (3) times on each engine, the two alternated and who goes first swapped each
# round, so a shared machine's drift falls on both; a cell prints each engine's median (min-max) and the
# ratio of the medians. -c runs only the cells named (default: all seven, below). -k forces ftllm's kernel
# table (ftllm-bench --kernels): `-k avx2` next to a llama.cpp built for AVX2 alone (cmake -DGGML_NATIVE=OFF
# -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_AVX512=OFF) is the AVX2-only machine (Zen 3) on this one.
# LLAMA_CPP_BIN_DIR holds llama-bench and llama-batched-bench built from the llama.cpp sources of the PyPI
# package llama-cpp-python, outside this tree. Random-weight models of real shapes:
# tests/bench/make_random_gguf.py then llama-quantize.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
llama=${1:?usage: cpu_bench.sh LLAMA_CPP_BIN_DIR [-t N] [-r N] [-c CELLS] [-k KERNELS] MODEL.gguf ...}
shift
threads=2 rounds=3 cells="pp128 pp512 pp2048 tg64 tg64-1t x4 x16" kernels=auto
while [[ $# -gt 0 && $1 == -* ]]; do
  case $1 in
    -t) threads=$2; shift 2 ;;
    -r) rounds=$2; shift 2 ;;
    -c) cells=$2; shift 2 ;;
    -k) kernels=$2; shift 2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
bench_bin="${FTLLM_BENCH:-$root/build/tests/bench/ftllm-bench}"
bench() { "$bench_bin" "$@" --kernels "$kernels"; }

# One measurement of a cell, tokens/s. ours CELL / theirs CELL; a cell is pp128, pp512, pp2048, tg64,
# tg64-1t, x4 or x16. ours prints the roofline fraction of its decode cells after the rate.
ours() {
  local out
  case $1 in
    pp*) out=$(bench "$model" -t "$threads" --prompt "${1#pp}" --decode 1 --repeat 2)
         awk '/^prefill/ {print $3, "-"}' <<<"$out"; return ;;
    tg64) out=$(bench "$model" -t "$threads" --prompt 16 --decode 64 --repeat 2) ;;
    tg64-1t) out=$(bench "$model" -t 1 --prompt 16 --decode 64 --repeat 2) ;;
    x*) out=$(bench "$model" -t "$threads" --prompt 16 --decode 32 --batch "${1#x}" --repeat 2) ;;
  esac
  awk '/^decode/ {print $4, $6}' <<<"$out"
}
# llama-bench's CSV names n_prompt, n_gen and avg_ts in its header.
llama_bench() {  # THREADS PROMPT GEN
  local csv
  csv=$("$llama/llama-bench" -m "$model" -t "$1" -p "$2" -n "$3" -r 2 -o csv 2>/dev/null)
  awk -F, 'NR == 1 {for (i = 1; i <= NF; ++i) {gsub(/"/, "", $i); if ($i == "avg_ts") c = i}} NR == 2 {gsub(/"/, "", $c); print $c}' <<<"$csv"
}
theirs() {
  case $1 in
    pp*) llama_bench "$threads" "${1#pp}" 0 ;;
    tg64) llama_bench "$threads" 0 64 ;;
    tg64-1t) llama_bench 1 0 64 ;;
    # llama-batched-bench: b sequences of a 1-token prompt, 32 tokens each; speed_tg is the aggregate.
    x*) "$llama/llama-batched-bench" -m "$model" -c 2048 -b 2048 -ub 512 -npp 1 -ntg 32 -npl "${1#x}" -t "$threads" \
          --output-format jsonl 2>/dev/null | grep -o '"speed_tg": [0-9.]*' | tail -1 | awk '{print $2}' ;;
  esac
}
# "median (min-max)" of the numbers given; called plainly (not in $(...)), it leaves the median in $med.
med=0
summary() {
  local sorted
  sorted=$(printf '%s\n' "$@" | sort -g)
  med=$(awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}' <<<"$sorted")
  printf '%.1f (%.1f-%.1f)' "$med" "$(head -1 <<<"$sorted")" "$(tail -1 <<<"$sorted")"
}

printf '%-28s %-8s %-24s %-24s %6s %9s\n' model test "ftllm tok/s" "llama.cpp tok/s" ratio roofline
for model in "$@"; do
  name=$(basename "$model" .gguf)
  for cell in $cells; do
    a=() b=() roof=-
    for ((r = 0; r < rounds; ++r)); do
      if ((r % 2 == 1)); then b+=("$(theirs "$cell")"); fi
      read -r rate roof <<<"$(ours "$cell")"
      a+=("$rate")
      if ((r % 2 == 0)); then b+=("$(theirs "$cell")"); fi
    done
    summary "${a[@]}" >/dev/null; ma=$med; sa=$(summary "${a[@]}")
    summary "${b[@]}" >/dev/null; mb=$med; sb=$(summary "${b[@]}")
    printf '%-28s %-8s %-24s %-24s %6.2f %9s\n' "$name" "$cell" "$sa" "$sb" "$(awk -v a="$ma" -v b="$mb" 'BEGIN {print (b > 0) ? a / b : 0}')" "$roof"
  done
done
bench "$model" -t "$threads" --prompt 1 --decode 1 --repeat 1 | grep '^read bandwidth' || true
