#!/usr/bin/env bash
# Regenerates src/webhook/data/valkey-settings.txt: the setting names each pinned valkey-server
# build accepts (CONFIG GET *), one section per major.minor. Run after e2e/versions.env changes
# (the binaries come from `make tools`).
set -euo pipefail
source "$(dirname "$0")/pinned-valkey.sh"
OUT="$REPO/src/webhook/data/valkey-settings.txt"
{
  echo "# Valkey setting names per version (CONFIG GET * on the pinned valkey-server builds);"
  echo "# regenerate with e2e/tools/valkey-settings.sh."
  for_each_pinned_server 17500 setting_names
} > "$OUT"
echo "wrote $OUT"
