#!/usr/bin/env bash
# Prints the executable the chart's operator container runs (the first word of its `command`,
# as rendered with the default values): what e2e/image.sh starts inside the image.
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
source "$REPO/e2e/versions.env"
CACHE=${VALKEY_OPERATOR_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/valkey-operator}
HELM="$CACHE/helm-v$HELM_VERSION/bin/helm"
"$HELM" template vo "$REPO/charts/valkey-operator" --kube-version 1.34.0 --show-only templates/operator.yaml |
  python3 -c '
import json, re, sys
commands = re.findall(r"^\s*command:\s*(\[.*\])\s*$", sys.stdin.read(), re.M)
assert len(commands) == 1, f"want one command in the operator Deployment, found {commands}"
print(json.loads(commands[0])[0])'
