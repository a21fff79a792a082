#!/usr/bin/env bash
# Regenerates src/webhook/data/valkey-settings.txt: the setting names each pinned valkey-server
# build accepts (CONFIG GET *), one section per major.minor. Run after e2e/versions.env changes
# (the binaries come from `make tools`).
set -euo pipefail
REPO=$(cd "$(dirname "$0")/../.." && pwd)
source "$REPO/e2e/versions.env"
CACHE=${VK_CACHE:-$HOME/.cache/valkey-operator}
OUT="$REPO/src/webhook/data/valkey-settings.txt"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
{
  echo "# Valkey setting names per version (CONFIG GET * on the pinned valkey-server builds);"
  echo "# regenerate with e2e/tools/valkey-settings.sh."
  port=17500
  for v in $VALKEY_VERSIONS; do
    bin="$CACHE/valkey-$v/bin"
    port=$((port + 1))
    "$bin/valkey-server" --port "$port" --bind 127.0.0.1 --save "" --dir "$tmp" --daemonize yes \
      --pidfile "$tmp/$v.pid" --logfile "$tmp/$v.log"
    for _ in $(seq 50); do "$bin/valkey-cli" -p "$port" ping >/dev/null 2>&1 && break; sleep 0.1; done
    echo "[${v%.*}]"
    "$bin/valkey-cli" -p "$port" config get '*' | awk 'NR % 2 == 1' | sort -u
    "$bin/valkey-cli" -p "$port" shutdown nosave >/dev/null 2>&1 || true
  done
} > "$OUT"
echo "wrote $OUT"
