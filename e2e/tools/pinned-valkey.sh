# Sourced by the generators of src/webhook/data/ (valkey-settings.sh, valkey-setting-values.sh,
# valkey-restart-settings.sh): a throwaway valkey-server of every pinned build
# (e2e/versions.env; the binaries come from `make tools`), asked one after the other.
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
source "$REPO/e2e/versions.env"
CACHE=${VK_CACHE:-$HOME/.cache/valkey-operator}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# For each pinned version: prints its section header `[major.minor]`, starts its server on the
# next port after <first port>, calls <function> with $bin (the build's bin directory) and
# $port set, and shuts the server down.
for_each_pinned_server() { # first-port function
  local v
  port=$1
  for v in $VALKEY_VERSIONS; do
    bin="$CACHE/valkey-$v/bin"
    port=$((port + 1))
    "$bin/valkey-server" --port "$port" --bind 127.0.0.1 --save "" --dir "$tmp" --daemonize yes \
      --pidfile "$tmp/$v.pid" --logfile "$tmp/$v.log"
    for _ in $(seq 50); do "$bin/valkey-cli" -p "$port" ping >/dev/null 2>&1 && break; sleep 0.1; done
    echo "[${v%.*}]"
    "$2"
    "$bin/valkey-cli" -p "$port" shutdown nosave >/dev/null 2>&1 || true
  done
}

# The setting names the running server knows (CONFIG GET *).
setting_names() {
  "$bin/valkey-cli" -p "$port" config get '*' | awk 'NR % 2 == 1' | sort -u
}
