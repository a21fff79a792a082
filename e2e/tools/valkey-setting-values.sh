#!/usr/bin/env bash
# Regenerates src/webhook/data/valkey-setting-values.txt: for each pinned valkey-server build,
# the settings whose value is one of a fixed set (yes/no, or an enum such as maxmemory-policy)
# and that set, as Valkey itself states it when given a value it refuses. Mutable settings are
# asked with CONFIG SET on a throwaway server, immutable ones by starting a server with the
# refused value (it exits at once saying why). Run after e2e/versions.env changes.
set -euo pipefail
source "$(dirname "$0")/pinned-valkey.sh"
OUT="$REPO/src/webhook/data/valkey-setting-values.txt"
BOGUS=__vk_refused__
# The allowed values in Valkey's refusal: "yes|no", "a|b|c", or nothing (not a fixed set).
allowed() {
  sed -n -e "s/.*argument must be 'yes' or 'no'.*/yes|no/p" \
         -e 's/.*must be one of the following: \(.*\)$/\1/p' | head -1 | sed 's/, /|/g' | tr -d '\r'
}
# Each setting whose refusal of a bogus value lists the values it takes.
fixed_values() {
  local name reply values
  for name in $(setting_names); do
    reply=$("$bin/valkey-cli" -p "$port" config set "$name" "$BOGUS" 2>&1 || true)
    if [[ $reply == *"immutable config"* ]]; then
      reply=$(cd "$tmp" && timeout -s KILL 2 "$bin/valkey-server" --port 0 --save "" --"$name" "$BOGUS" 2>&1 || true)
    fi
    values=$(printf '%s\n' "$reply" | allowed)
    [ -z "$values" ] || echo "$name = $values"
  done
}
{
  echo "# Valkey settings whose value is one of a fixed set, per version, as the pinned builds state"
  echo "# it when refusing a value (name = value|value...); regenerate with"
  echo "# e2e/tools/valkey-setting-values.sh."
  for_each_pinned_server 17600 fixed_values
} > "$OUT"
echo "wrote $OUT"
