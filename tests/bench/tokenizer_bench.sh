#!/usr/bin/env bash
# Encode MB/s of ftllm's tokenizer next to Hugging Face `tokenizers` on the same text, same run, one thread.
# Needs the build (scripts/build.sh) and tests/tools/.venv (tests/tools/make_fixtures.sh creates it).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
text=$(mktemp)
trap 'rm -f "$text"' EXIT
# About 1.5 MB: the GPL (English prose) and the multilingual test corpus, repeated.
for i in $(seq 40); do
  cat /usr/share/common-licenses/GPL-3
  "$root/tests/tools/.venv/bin/python" -c "import json,sys; sys.stdout.write('\n'.join(json.load(open('$root/tests/data/tokenizers/corpus.json'))['texts']))"
done > "$text"
for name in qwen3 llama3 llama2; do
  json="$root/tests/data/tokenizers/$name/tokenizer.json"
  ours=$("$root/build/tests/bench/ftllm-tokenizer-bench" "$json" "$text" | sed -E 's/.*: ([0-9.]+) MB\/s.*/\1/')
  theirs=$(RAYON_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false "$root/tests/tools/.venv/bin/python" - "$json" "$text" <<'PY'
import sys, time, statistics, tokenizers
tok = tokenizers.Tokenizer.from_file(sys.argv[1])
text = open(sys.argv[2], encoding="utf-8").read()
size = len(text.encode())
rates = []
for _ in range(5):
    t = time.perf_counter(); tok.encode(text, add_special_tokens=False); rates.append(size / 1e6 / (time.perf_counter() - t))
print(f"{statistics.median(rates):.2f}")
PY
)
  printf '%-8s ftllm %7.2f MB/s   HF tokenizers %7.2f MB/s   ratio %.2fx\n' "$name" "$ours" "$theirs" "$(echo "$ours / $theirs" | bc -l)"
done
