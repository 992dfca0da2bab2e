#!/usr/bin/env bash
# The checkout's tracked files (about 73 MiB, most of it fixtures) are more than the device tool sends
# (64 MiB, with what a call carries). Before a call, `tests/gpu/slim.sh out` moves the fixtures that only the
# CPU cases read into /tmp/ftllm-slim.tar, keeping what tests/gpu/run.sh --quick, host_cpu.sh and host_bench.sh read
# (the models/ fixtures, the few others the CUDA cases read, Qwen2's and GPT-2's vocabularies and Qwen2.5's chat
# template); after the call, `tests/gpu/slim.sh back` restores them (git status is clean again).
set -euo pipefail
cd "$(dirname "$0")/../.."
hold=/tmp/ftllm-slim.tar
keep='^tests/data/(models/|gguf/(qwen3moe|deepseek-v3)-f32\.gguf$|vocab/ggml-vocab-(qwen2|gpt-2)\.gguf\.xz$|chat-templates/Qwen-Qwen2\.5-7B-Instruct\.jinja$|quantized/gpt-oss-mxfp4/|lora/)'
case "${1:-}" in
  out)
    [ ! -e "$hold" ] || { echo "$hold exists: run 'slim.sh back' first" >&2; exit 1; }
    git ls-files tests/data | grep -Ev "$keep" >/tmp/ftllm-slim.list
    tar -cf "$hold" -T /tmp/ftllm-slim.list
    xargs -d '\n' rm -f </tmp/ftllm-slim.list
    echo "moved $(wc -l </tmp/ftllm-slim.list) files; tracked tree now $(($(git ls-files -z | du -cb --files0-from=- 2>/dev/null | tail -n 1 | cut -f1) >> 20)) MiB"
    ;;
  back)
    tar -xf "$hold" && rm -f "$hold" /tmp/ftllm-slim.list
    git status --short tests/data
    ;;
  *) echo "usage: tests/gpu/slim.sh out|back" >&2; exit 2 ;;
esac
