#!/usr/bin/env bash
# make release: every artifact of a release, built on this machine, into $RELEASE_DIR
# (default $CARGO_TARGET_DIR/release-artifacts/<version>, outside the checkout):
#   valkey-operator-<v>.oci.tar          the operator image (e2e/image.sh), carrying its SBOM and
#                                        its crates' licenses in /usr/share/doc/valkey-operator/
#   valkey-operator-<v>.cdx.json         CycloneDX 1.5 SBOM of the operator binary (cargo-cyclonedx)
#   licenses.html                        each crate's license text (cargo-about, e2e/release/)
#   valkey-operator-<v>.tgz              the Helm chart (helm package; version = appVersion = <v>)
#   kubectl-valkey_linux_amd64.tar.gz    the kubectl plugin, a static binary, with LICENSE
#   kubectl-valkey-<v>.cdx.json          the plugin's SBOM
#   krew/valkey.yaml                     the plugin's krew manifest (sha256 of the archive above)
#   RELEASE-NOTES.md                     the CHANGELOG section of <v> (or "Unreleased")
#   SHA256SUMS                           of every file above
# Then checks them (e2e/release/check.py). With RELEASE_CHART_REPO=oci://<registry>/<path> the
# chart is also pushed there (`helm push`; RELEASE_PLAIN_HTTP=1 for a registry without TLS).
# RELEASE_HOMEPAGE is the project's page (default its GitHub repository) and RELEASE_URL where
# the plugin archive will be downloaded from (default the GitHub release of v<version>): both go
# into the krew manifest.
# The tools (cargo-cyclonedx, cargo-about) are installed from crates.io on first use.
set -euo pipefail
cd "$(dirname "$0")/.."
log() { printf '[release] %s\n' "$*" >&2; }
source e2e/versions.env
CACHE=${VALKEY_OPERATOR_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/valkey-operator}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$CACHE/target}
version=$(cargo metadata --no-deps --format-version 1 | python3 -c 'import json,sys; print(next(p["version"] for p in json.load(sys.stdin)["packages"] if p["name"]=="valkey-operator"))')
out=${RELEASE_DIR:-$CARGO_TARGET_DIR/release-artifacts/$version}
home=${RELEASE_HOMEPAGE:-https://github.com/valkey-operator/valkey-operator}
url=${RELEASE_URL:-$home/releases/download/v$version}
triple=x86_64-unknown-linux-gnu
rm -rf "$out"; mkdir -p "$out/krew"

# Built once per machine (versions in e2e/versions.env), in their own target dir.
tool() { # crate version [cargo install arguments]
  if ! grep -qF "$2" <<<"$(cargo "${1#cargo-}" --version 2>/dev/null || true)"; then
    log "installing $1 $2 from crates.io (once per machine)"
    env CARGO_TARGET_DIR="$CACHE/tools-target" cargo install --locked --quiet --version "$2" \
      "${@:3}" "$1"
  fi
}
tool cargo-cyclonedx "$CARGO_CYCLONEDX_VERSION"
tool cargo-about "$CARGO_ABOUT_VERSION" --features cli

log "SBOMs (CycloneDX 1.5, the crates each binary is built from, build dependencies left out)"
# cargo-cyclonedx writes next to each workspace member's Cargo.toml: moved out at once, so
# the checkout is left as it was.
cargo cyclonedx --format json --describe binaries --target "$triple" --spec-version 1.5 \
  --no-build-deps -q
mv valkey-operator_bin.cdx.json "$out/valkey-operator-$version.cdx.json"
mv kubectl-valkey_bin.cdx.json "$out/kubectl-valkey-$version.cdx.json"
rm -f ./*_bin.cdx.json e2e/*_bin.cdx.json
for sbom in "$out"/*.cdx.json; do python3 e2e/release/trim_sbom.py "$sbom" "$triple"; done

log "licenses of the crates (cargo-about)"
cargo about generate --fail --locked --target "$triple" -c e2e/release/about.toml \
  e2e/release/licenses.hbs -o "$out/licenses.html" 2>/dev/null

log "the operator image, with its SBOM and licenses"
docs=$(mktemp -d); trap 'rm -rf "$docs"' EXIT
cp "$out/valkey-operator-$version.cdx.json" "$docs/sbom.cdx.json"
cp "$out/licenses.html" LICENSE "$docs/"
IMAGE_DOCS=$docs IMAGE_ARCHIVE="$out/valkey-operator-$version.oci.tar" bash e2e/image.sh

log "the Helm chart"
helm=$CACHE/helm-v$HELM_VERSION/bin/helm
[ -x "$helm" ] || bash e2e/tools/install.sh >&2
"$helm" package charts/valkey-operator --version "$version" --app-version "$version" \
  --destination "$out" >/dev/null
if [ -n "${RELEASE_CHART_REPO:-}" ]; then
  log "pushing the chart to $RELEASE_CHART_REPO"
  "$helm" push "$out/valkey-operator-$version.tgz" "$RELEASE_CHART_REPO" \
    ${RELEASE_PLAIN_HTTP:+--plain-http} >&2
fi

log "the kubectl plugin (static) and its krew manifest"
RUSTFLAGS="-C target-feature=+crt-static" cargo build --release --locked --quiet \
  --target "$triple" --bin kubectl-valkey
plugin=$(mktemp -d); trap 'rm -rf "$docs" "$plugin"' EXIT
cp "$CARGO_TARGET_DIR/$triple/release/kubectl-valkey" LICENSE "$plugin/"
strip "$plugin/kubectl-valkey" 2>/dev/null || true
tar -C "$plugin" --owner=0 --group=0 --mtime=@0 -czf "$out/kubectl-valkey_linux_amd64.tar.gz" \
  kubectl-valkey LICENSE
sha=$(sha256sum "$out/kubectl-valkey_linux_amd64.tar.gz" | cut -d' ' -f1)
sed -e "s|@VERSION@|$version|g" -e "s|@SHA256@|$sha|g" -e "s|@URL@|$url|g" -e "s|@HOMEPAGE@|$home|g" \
  e2e/release/krew.yaml > "$out/krew/valkey.yaml"

log "release notes from CHANGELOG.md"
python3 e2e/release/notes.py CHANGELOG.md "$version" > "$out/RELEASE-NOTES.md"

(cd "$out" && find . -type f ! -name SHA256SUMS | sort | sed 's|^\./||' | xargs sha256sum > SHA256SUMS)
log "checking the artifacts"
python3 e2e/release/check.py "$out" "$version" "$helm" "$K8S_VERSION"
log "release $version in $out"
