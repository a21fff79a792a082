#!/usr/bin/env bash
# Regenerates src/webhook/data/valkey-setting-values.txt: for each pinned valkey-server build,
# the settings whose value is one of a fixed set (yes/no, or an enum such as maxmemory-policy)
# and that set, as Valkey itself states it when given a value it refuses. Mutable settings are
# asked with CONFIG SET on a throwaway server, immutable ones by starting a server with the
# refused value (it exits at once saying why). Run after e2e/versions.env changes.
set -euo pipefail
REPO=$(cd "$(dirname "$0")/../.." && pwd)
source "$REPO/e2e/versions.env"
CACHE=${VK_CACHE:-$HOME/.cache/valkey-operator}
OUT="$REPO/src/webhook/data/valkey-setting-values.txt"
BOGUS=__vk_refused__
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# The allowed values in Valkey's refusal: "yes|no", "a|b|c", or nothing (not a fixed set).
allowed() {
  sed -n -e "s/.*argument must be 'yes' or 'no'.*/yes|no/p" \
         -e 's/.*must be one of the following: \(.*\)$/\1/p' | head -1 | sed 's/, /|/g' | tr -d '\r'
}
{
  echo "# Valkey settings whose value is one of a fixed set, per version, as the pinned builds state"
  echo "# it when refusing a value (name = value|value...); regenerate with"
  echo "# e2e/tools/valkey-setting-values.sh."
  port=17600
  for v in $VALKEY_VERSIONS; do
    bin="$CACHE/valkey-$v/bin"
    port=$((port + 1))
    "$bin/valkey-server" --port "$port" --bind 127.0.0.1 --save "" --dir "$tmp" --daemonize yes \
      --pidfile "$tmp/$v.pid" --logfile "$tmp/$v.log"
    for _ in $(seq 50); do "$bin/valkey-cli" -p "$port" ping >/dev/null 2>&1 && break; sleep 0.1; done
    echo "[${v%.*}]"
    for name in $("$bin/valkey-cli" -p "$port" config get '*' | awk 'NR % 2 == 1' | sort -u); do
      reply=$("$bin/valkey-cli" -p "$port" config set "$name" "$BOGUS" 2>&1 || true)
      if [[ $reply == *"immutable config"* ]]; then
        reply=$(cd "$tmp" && timeout -s KILL 2 "$bin/valkey-server" --port 0 --save "" --"$name" "$BOGUS" 2>&1 || true)
      fi
      values=$(printf '%s\n' "$reply" | allowed)
      [ -n "$values" ] && echo "$name = $values"
    done
    "$bin/valkey-cli" -p "$port" shutdown nosave >/dev/null 2>&1 || true
  done
} > "$OUT"
echo "wrote $OUT"
