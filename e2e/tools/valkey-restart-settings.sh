#!/usr/bin/env bash
# Regenerates src/webhook/data/valkey-restart-settings.txt: for each pinned valkey-server build,
# the settings a running server will not change (CONFIG SET of the setting's own current value
# is refused as an immutable or protected config). Every other setting is live: a ValkeyConfig
# change to it is applied with CONFIG SET on the members instead of replacing them. Run after
# e2e/versions.env changes (the binaries come from `make tools`).
set -euo pipefail
source "$(dirname "$0")/pinned-valkey.sh"
OUT="$REPO/src/webhook/data/valkey-restart-settings.txt"
# The settings the server refuses to set to their own current value.
restart_only() {
  local name value reply
  for name in $(setting_names); do
    value=$("$bin/valkey-cli" -p "$port" --raw config get "$name" | sed -n 2p)
    reply=$("$bin/valkey-cli" -p "$port" config set "$name" "$value" 2>&1 || true)
    case $reply in
      *immutable*|*protected*) echo "$name" ;;
    esac
  done
}
{
  echo "# Valkey settings a running server will not change (CONFIG SET of the current value is"
  echo "# refused: immutable or protected), per version; regenerate with"
  echo "# e2e/tools/valkey-restart-settings.sh."
  for_each_pinned_server 17700 restart_only
} > "$OUT"
echo "wrote $OUT"
