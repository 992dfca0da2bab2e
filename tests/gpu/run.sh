#!/usr/bin/env bash
# The GPU checks, on a lent machine (the device tool), from what tests/gpu/prepare.sh packed here into
# build-gpu/carry.tar.gz: every CUDA test case, the daemon on the GPU, then the kernel benchmark and the model
# benchmarks, ending with one table. Ends well inside 8 minutes on an H200. Logs go to $OUT (the device
# tool brings them back).
set -uo pipefail
cd "$(dirname "$0")/../.."
mkdir -p /tmp/ftllm-gpu-carry && tar -C /tmp/ftllm-gpu-carry -xzf build-gpu/carry.tar.gz || exit 1
C=/tmp/ftllm-gpu-carry/carry
OUT=${OUT:-/tmp/ftllm-gpu}
mkdir -p "$OUT"
start=$(date +%s)
# The tests read their fixtures from the source root prepare.sh built in; point that path here.
want=$(cat "$C/source_root" 2>/dev/null || true)
if [ -n "$want" ] && [ "$want" != "$PWD" ] && [ ! -e "$want" ]; then
  mkdir -p "$(dirname "$want")" && ln -s "$PWD" "$want"
fi
elapsed() { echo $(( $(date +%s) - start ))s; }
# The CUDA libraries: the toolkit's, or the ones PyTorch's wheels carry.
found() { (ls "/usr/local/cuda/lib64/$1" 2>/dev/null; find / -name "$1" -not -path '/proc/*' 2>/dev/null) | head -n 1; }
cublas=$(found libcublas.so.13)
nccl=$(found libnccl.so.2)
export LD_LIBRARY_PATH="$C/libs:$(dirname "${cublas:-/x/x}"):$(dirname "${nccl:-/x/x}"):${LD_LIBRARY_PATH:-}"
echo "cuBLAS: ${cublas:-not found}; NCCL: ${nccl:-not found}"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"

echo "== tests ($(elapsed))"
"$C/bin/test_engine" --run_test='cuda_*' --log_level=message --report_level=short 2>&1 | tee "$OUT/tests.log"
tests_rc=${PIPESTATUS[0]}
# The whole engine suite too: with a GPU present nothing skips, and the CPU cases must not mind it. Not with
# --quick, which also suits a tree sent without the fixtures only CPU cases read (tests/gpu/slim.sh).
all_rc=0
if [ "${1:-}" != --quick ]; then
  "$C/bin/test_engine" --report_level=short 2>&1 | tail -n 3 | tee -a "$OUT/tests.log"
  all_rc=${PIPESTATUS[0]}
fi
FTLLMD="$C/bin/ftllmd" FTLLMCTL="$C/bin/ftllmctl" FTLLM_EXPORT="$C/bin/ftllm-export" "$C/bin/test_integration" \
  --run_test=a_model_on_the_gpu_serves_and_moves_live --report_level=short 2>&1 | tee -a "$OUT/tests.log"
daemon_rc=${PIPESTATUS[0]}

echo "== kernels ($(elapsed))"
timeout 120 "$C/bin/ftllm-gpu-bench" 2>&1 | tee "$OUT/gpu-bench.txt"
bw=$(awk -F= '/^BANDWIDTH_GBPS=/ { print $2 }' "$OUT/gpu-bench.txt")

echo "== models ($(elapsed))"
rows=()
shapes=(qwen3-0.6b qwen3-8b)
[ "${1:-}" = --quick ] && shapes=(qwen3-0.6b)  # a first look, or a second try with less time left
for shape in "${shapes[@]}"; do
  for dtype in bf16 int8 int4g128; do
    dir=/tmp/ftllm-random-$shape-$dtype
    [ -d "$dir" ] || "$C/bin/ftllm-bench" --make-random "$dir" --shape "$shape" --dtype "$dtype" >/dev/null
    for batch in 1 16; do
      log="$OUT/bench-$shape-$dtype-x$batch.txt"
      timeout 120 "$C/bin/ftllm-bench" "$dir" --device cuda -t 8 --prompt 512 --decode 64 --repeat 2 \
        --batch "$batch" ${bw:+--bandwidth "$bw"} >"$log" 2>&1
      prefill=$(awk '/^prefill/ { print $3 }' "$log")
      decode=$(awk '/^decode/ { print $4 }' "$log")
      roof=$(awk '/^decode/ { print $6 }' "$log")
      rows+=("$(printf '%-12s %-9s x%-3s %10s %12s %9s' "$shape" "$dtype" "$batch" "${prefill:-fail}" "${decode:-fail}" "${roof:--}")")
    done
    rm -rf "$dir"  # disk: the 8B bf16 file is 16 GB
  done
done

echo "== summary ($(elapsed))"
{
  cat "$OUT/gpu.txt"
  echo "CUDA test cases: $(grep -E 'Test module|failures|No errors' "$OUT/tests.log" | tr '\n' ' ')"
  grep -E '^(copy|bf16|float16|int8|int4g128|fp8|q8_0|q4_0|q4_k|q6_k|[0-9]+ x)' "$OUT/gpu-bench.txt"
  printf '%-12s %-9s %-4s %10s %12s %9s\n' shape dtype bat "prefill/s" "decode tok/s" roofline
  printf '%s\n' "${rows[@]}"
} | tee "$OUT/summary.txt"
exit $(( tests_rc || all_rc || daemon_rc ))
