#!/usr/bin/env bash
# Run here, before a session's GPU check: builds build-gpu/ for the lent GPU's architecture only (sm_90,
# an H200; -a ARCH for another) and puts next to it the shared libraries that machine lacks (Debian's
# simdjson, Boost.Test, ...; the CUDA libraries are there already). Then, through the device tool:
#   run(command="bash tests/gpu/run.sh", timeout_s=540, carry=["build-gpu/tests/test_engine",
#       "build-gpu/tests/bench/ftllm-bench", "build-gpu/tests/bench/ftllm-gpu-bench", "build-gpu/libs",
#       "build-gpu/source_root"])
# (the tree and those files must stay under the tool's 64 MiB; this prints their size).
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
.venv/bin/meson compile -C build-gpu tests/test_engine tests/bench/ftllm-bench tests/bench/ftllm-gpu-bench
# The tests find their fixtures under the source root compiled into them; run.sh links it there.
echo "$root" >build-gpu/source_root
rm -rf build-gpu/libs && mkdir -p build-gpu/libs
for bin in build-gpu/tests/test_engine build-gpu/tests/bench/ftllm-bench build-gpu/tests/bench/ftllm-gpu-bench; do
  ldd "$bin" | awk '/=> \// { print $3 }' | while read -r lib; do
    case "$(basename "$lib")" in
      libc.so*|libm.so*|libdl.so*|libpthread.so*|librt.so*|libgcc_s.so*|libstdc++.so*|libcublas*|libcudart*) ;;
      *) cp -L "$lib" build-gpu/libs/ ;;
    esac
  done
done
carry=(build-gpu/tests/test_engine build-gpu/tests/bench/ftllm-bench build-gpu/tests/bench/ftllm-gpu-bench build-gpu/libs
       build-gpu/source_root)
tree=$(git ls-files -z | xargs -0 du -cb | tail -n 1 | cut -f1)
extra=$(du -cb "${carry[@]}" | tail -n 1 | cut -f1)
echo "tree $((tree >> 20)) MiB + carried $((extra >> 20)) MiB (the device tool takes 64 MiB)"
printf 'carry: '; printf '"%s" ' "${carry[@]}"; echo
