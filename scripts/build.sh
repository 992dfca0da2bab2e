#!/usr/bin/env bash
# Sets up the machine (scripts/setup.sh) and builds ftllm into build/.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
bash scripts/setup.sh

# nvcc lives outside PATH in the CUDA toolkit's default install; the build finds it there.
if ! command -v nvcc >/dev/null && [ -x /usr/local/cuda/bin/nvcc ]; then
  export PATH="/usr/local/cuda/bin:$PATH"
fi

meson=".venv/bin/meson"
if [ ! -f build/meson-private/coredata.dat ]; then
  "$meson" setup build --buildtype=release
fi
"$meson" compile -C build
