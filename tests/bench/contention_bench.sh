#!/usr/bin/env bash
# Decode while another process keeps one core busy (stress-ng --cpu 1, as a neighbour on a shared machine
# would): ftllm on 1 and 2 threads, quiet and busy, in alternating rounds, as medians with their spread
# (min-max). With -l, llama.cpp's llama-bench on 2 threads in the same rounds.
#   tests/bench/contention_bench.sh [-r ROUNDS] [-n TOKENS] [-l LLAMA_CPP_BIN_DIR] MODEL.gguf
# FTLLM_BENCH may name several ftllm-bench binaries separated by ':' (an A/B of two builds): each runs in
# every round, in turn.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
rounds=5 tokens=64 llama=""
while [[ $# -gt 0 && $1 == -* ]]; do
  case $1 in
    -r) rounds=$2; shift 2 ;;
    -n) tokens=$2; shift 2 ;;
    -l) llama=$2; shift 2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
model=${1:?usage: contention_bench.sh [-r ROUNDS] [-n TOKENS] [-l LLAMA_CPP_BIN_DIR] MODEL.gguf}
# Without stress-ng (a lent machine reaches no registry) a shell loop keeps the core busy instead.
busy_core() { if command -v stress-ng >/dev/null; then exec stress-ng --cpu 1 --timeout 600 --quiet; else while :; do :; done; fi; }
IFS=: read -r -a benches <<<"${FTLLM_BENCH:-$root/build/tests/bench/ftllm-bench}"
results=$(mktemp)
trap 'rm -f "$results"; kill "${busy:-0}" 2>/dev/null || true' EXIT

# Each run under a time limit (a run starved by its neighbour ends rather than taking the rest of a lent
# machine's minutes: it records no figure and says so).
ours() {  # bench threads -> decode tokens/s
  timeout 60 "$1" "$model" -t "$2" --prompt 16 --decode "$tokens" --repeat 1 | awk '/^decode/ {print $4}'
}
theirs() {  # threads -> tokens/s
  timeout 60 "$llama/llama-bench" -m "$model" -t "$1" -p 0 -n "$tokens" -r 1 -o csv 2>/dev/null |
    awk -F, 'NR == 1 { for (i = 1; i <= NF; ++i) if ($i ~ /avg_ts/) c = i } NR == 2 { gsub(/"/, ""); print $c }'
}
# Each figure printed as it comes (a run cut short still shows what it measured) and kept for the medians.
record() {  # "load program threads" tokens/s
  echo "round $round: $1 ${2:-(no figure: timed out or failed)}" >&2
  [[ -z $2 ]] || echo "$1 $2" >>"$results"
}
for ((round = 0; round < rounds; ++round)); do
  for load in quiet busy; do
    busy=0
    if [[ $load == busy ]]; then
      busy_core &
      busy=$!
      sleep 1
    fi
    for i in "${!benches[@]}"; do
      for t in 1 2; do record "$load ftllm#$i ${t}t" "$(ours "${benches[$i]}" "$t")"; done
    done
    [[ -n $llama ]] && record "$load llama.cpp 2t" "$(theirs 2)"
    if ((busy)); then kill "$busy"; wait "$busy" 2>/dev/null || true; fi
  done
done
echo "CPU: $(lscpu | awk -F: '/Model name/ {gsub(/^ +/, "", $2); print $2}'), $(nproc) cores; $rounds rounds of $tokens tokens"
for i in "${!benches[@]}"; do echo "ftllm#$i = ${benches[$i]}"; done
printf '%-6s %-10s %-4s %10s %16s\n' load program thr "median t/s" "spread"
awk '{ key = $1 " " $2 " " $3; v[key] = v[key] " " $4 } END { for (k in v) print k, v[k] }' "$results" | sort |
  while read -r load prog thr values; do
    sorted=$(tr ' ' '\n' <<<"$values" | grep -v '^$' | sort -g)
    n=$(wc -l <<<"$sorted")
    median=$(sed -n "$(( (n + 1) / 2 ))p" <<<"$sorted")
    printf '%-6s %-10s %-4s %10.1f %7.1f - %-7.1f\n' "$load" "$prog" "$thr" "$median" "$(head -1 <<<"$sorted")" "$(tail -1 <<<"$sorted")"
  done
