#!/usr/bin/env bash
# Sets up, builds and starts ftllmd in the foreground with the default config (Ctrl-C stops it).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
bash scripts/build.sh >&2

args=(--config config/ftllmd.conf)
socket=/run/ftllmd/admin.sock
if [ "$(id -u)" != 0 ]; then
  # Only root may create /run/ftllmd; an ordinary user gets the socket in their runtime directory.
  socket="${XDG_RUNTIME_DIR:-/tmp}/ftllmd/admin.sock"
  args+=(--admin-socket "$socket")
fi
cat >&2 <<TXT
ftllmd starts in the foreground. From another terminal:
  curl http://127.0.0.1:8080/health
  curl http://127.0.0.1:8080/v1/models
  $root/build/client/ftllmctl --socket $socket status
TXT
exec build/daemon/ftllmd "${args[@]}" "$@"
