#!/usr/bin/env bash
# Regenerates the transformers fixtures in tests/data/ (run after adding an architecture).
# Installs torch and transformers into tests/tools/.venv when missing; CI never runs this.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
venv="$here/.venv"
if [ ! -x "$venv/bin/python" ]; then python3 -m venv "$venv"; fi
if ! cmp -s "$here/requirements.txt" "$venv/.requirements-installed" 2>/dev/null; then
  "$venv/bin/python" -m pip install -q --disable-pip-version-check -r "$here/requirements.txt"
  cp "$here/requirements.txt" "$venv/.requirements-installed"
fi
exec "$venv/bin/python" "$here/make_fixtures.py" "$@"
