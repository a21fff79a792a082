#!/usr/bin/env bash
# The operator's release binary, static (no glibc version to match at run time): the one the
# image ships, the local cluster runs and `make bench` measures. Prints its path.
set -euo pipefail
cd "$(dirname "$0")/.."
target=${CARGO_TARGET_DIR:-target}
triple=x86_64-unknown-linux-gnu
RUSTFLAGS="-C target-feature=+crt-static" cargo build --release --locked --quiet \
  --target "$triple" --bin valkey-operator >&2
echo "$target/$triple/release/valkey-operator"
