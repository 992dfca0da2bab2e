#!/usr/bin/env bash
# Sets up, builds and runs every test; ends with the line "N passed, N failed".
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
bash scripts/build.sh || { echo "0 passed, 1 failed"; exit 1; }

log=$(mktemp)
# The sanitizer builds (scripts/sanitize.sh, suite "sanitize") run too, unless FTLLM_SANITIZE=0.
skip=()
[ "${FTLLM_SANITIZE:-1}" = 0 ] && skip=(--no-suite sanitize)
.venv/bin/meson test -C build --print-errorlogs "${skip[@]}" "$@" 2>&1 | tee "$log"
status=${PIPESTATUS[0]}

# Meson's summary counts test programs: Ok passed; Fail, Unexpected Pass and Timeout failed.
count() { awk -v k="$1" -F: '$1 == k { gsub(/ /, "", $2); print $2 }' "$log" | tail -n 1; }
passed=$(( $(count "Ok") + 0 ))
failed=$(( $(count "Fail") + $(count "Unexpected Pass") + $(count "Timeout") + 0 ))
skipped=$(( $(count "Skipped") + 0 ))
rm -f "$log"
if ((passed + failed == 0)); then
  echo "no test ran"
  exit 1
fi
if ((skipped)); then
  echo "$passed passed, $failed failed, $skipped skipped"
else
  echo "$passed passed, $failed failed"
fi
exit "$status"
