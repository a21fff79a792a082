#!/usr/bin/env bash
# Regenerates src/webhook/data/valkey-restart-settings.txt: for each pinned valkey-server build,
# the settings a running server will not change (CONFIG SET of the setting's own current value
# is refused as an immutable or protected config). Every other setting is live: a ValkeyConfig
# change to it is applied with CONFIG SET on the members instead of replacing them. Run after
# e2e/versions.env changes (the binaries come from `make tools`).
set -euo pipefail
REPO=$(cd "$(dirname "$0")/../.." && pwd)
source "$REPO/e2e/versions.env"
CACHE=${VK_CACHE:-$HOME/.cache/valkey-operator}
OUT="$REPO/src/webhook/data/valkey-restart-settings.txt"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
{
  echo "# Valkey settings a running server will not change (CONFIG SET of the current value is"
  echo "# refused: immutable or protected), per version; regenerate with"
  echo "# e2e/tools/valkey-restart-settings.sh."
  port=17700
  for v in $VALKEY_VERSIONS; do
    bin="$CACHE/valkey-$v/bin"
    port=$((port + 1))
    "$bin/valkey-server" --port "$port" --bind 127.0.0.1 --save "" --dir "$tmp" --daemonize yes \
      --pidfile "$tmp/$v.pid" --logfile "$tmp/$v.log"
    for _ in $(seq 50); do "$bin/valkey-cli" -p "$port" ping >/dev/null 2>&1 && break; sleep 0.1; done
    echo "[${v%.*}]"
    for name in $("$bin/valkey-cli" -p "$port" config get '*' | awk 'NR % 2 == 1' | sort -u); do
      value=$("$bin/valkey-cli" -p "$port" --raw config get "$name" | sed -n 2p)
      reply=$("$bin/valkey-cli" -p "$port" config set "$name" "$value" 2>&1 || true)
      case $reply in
        *immutable*|*protected*) echo "$name" ;;
      esac
    done
    "$bin/valkey-cli" -p "$port" shutdown nosave >/dev/null 2>&1 || true
  done
} > "$OUT"
echo "wrote $OUT"
