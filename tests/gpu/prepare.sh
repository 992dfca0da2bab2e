#!/usr/bin/env bash
# Run here, before a session's GPU check: builds build-gpu/ for the lent GPU's architecture only (sm_90,
# an H200; -a ARCH for another) and gathers into build-gpu/carry/ what tests/gpu/run.sh runs there: the
# test and benchmark programs, ftllmd, ftllmctl and ftllm-export, and the shared libraries that machine lacks (Debian's
# simdjson, Boost.Test, ...; the CUDA libraries are there already). Then, through the device tool:
#   tests/gpu/slim.sh out      (the tracked tree, 73 MiB, is over what the tool sends)
#   run(command="bash tests/gpu/run.sh --quick", carry=["build-gpu/carry.tar.gz"], timeout_s=300)
#   tests/gpu/slim.sh back
# For the host CPU too: tests/gpu/host_cpu.sh LLAMA_DIR (AMX) or tests/gpu/host_bench.sh LLAMA_DIR (the other CPU
# benchmarks, about 7 minutes) in the same command; their headers say what to carry.
# The tree and the carried files must stay under the tool's 64 MiB; this prints their size.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
arch=90
[ "${1:-}" = "-a" ] && arch=$2
bash scripts/setup.sh
command -v nvcc >/dev/null || export PATH="/usr/local/cuda/bin:$PATH"
if [ ! -f build-gpu/meson-private/coredata.dat ]; then
  .venv/bin/meson setup build-gpu --buildtype=release -Dcuda=enabled -Dgpu_archs="$arch" >/dev/null
fi
programs=(tests/test_engine tests/test_integration tests/bench/ftllm-bench tests/bench/ftllm-kernel-bench tests/bench/ftllm-gpu-bench daemon/ftllmd client/ftllmctl engine/ftllm-export)
.venv/bin/meson compile -C build-gpu "${programs[@]}"
carry=build-gpu/carry
rm -rf "$carry" && mkdir -p "$carry/bin" "$carry/libs"
for p in "${programs[@]}"; do
  cp "build-gpu/$p" "$carry/bin/"
  strip --strip-debug "$carry/bin/$(basename "$p")"
  ldd "build-gpu/$p" | awk '/=> \// { print $3 }' | while read -r lib; do
    case "$(basename "$lib")" in
      libc.so*|libm.so*|libdl.so*|libpthread.so*|librt.so*|libgcc_s.so*|libstdc++.so*|libcublas*|libcudart*) ;;
      *) cp -L "$lib" "$carry/libs/" ;;
    esac
  done
done
# The tests find their fixtures under the source root compiled into them; run.sh links it there.
echo "$root" >"$carry/source_root"
tar -C build-gpu -czf build-gpu/carry.tar.gz carry  # about a third of the size: the tool carries 64 MiB in all
tree=$(git ls-files -z | du -cb --files0-from=- | tail -n 1 | cut -f1)
extra=$(du -cb build-gpu/carry.tar.gz | tail -n 1 | cut -f1)
echo "tree $((tree >> 20)) MiB + build-gpu/carry.tar.gz $((extra >> 20)) MiB (the device tool carries 64 MiB)"
