#!/usr/bin/env bash
# make image: the operator image as an OCI archive, built without a Docker daemon.
#   1. a static release build of valkey-operator on the host (cargo, cached like every build);
#   2. buildah builds Containerfile with that binary as its `operator-binary` stage;
#      Its /usr/share/doc/valkey-operator/ holds LICENSE and whatever $IMAGE_DOCS (a folder)
#      holds: make release puts the SBOM and the crates' licenses there;
#   3. the image is written to $IMAGE_ARCHIVE (default $CARGO_TARGET_DIR/image/valkey-operator-<version>.oci.tar).
# Then checks the archive: its config's entrypoint, run from the unpacked layers as the image's
# user, prints `valkey-operator <version>`; and the command the chart gives the operator's
# container, started in the image by a container runtime (`buildah run`, which resolves it
# through the image's PATH as a kubelet's runtime does), prints it too. Prints the image size.
set -euo pipefail
cd "$(dirname "$0")/.."
log() { printf '[image] %s\n' "$*" >&2; }
version=$(cargo metadata --no-deps --format-version 1 | python3 -c 'import json,sys; print(next(p["version"] for p in json.load(sys.stdin)["packages"] if p["name"]=="valkey-operator"))')
target=${CARGO_TARGET_DIR:-target}
out=${IMAGE_ARCHIVE:-$target/image/valkey-operator-$version.oci.tar}
tag=localhost/valkey-operator:$version

log "static release build (valkey-operator $version)"
binary=$(bash e2e/release-build.sh)
stage=$(mktemp -d); trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/binary/out" "$stage/context"
cp "$binary" "$stage/binary/out/valkey-operator"
cp /etc/ssl/certs/ca-certificates.crt "$stage/binary/out/ca-certificates.crt"
mkdir "$stage/binary/out/doc"
cp LICENSE "$stage/binary/out/doc/"
if [ -n "${IMAGE_DOCS:-}" ]; then cp -r "$IMAGE_DOCS"/. "$stage/binary/out/doc/"; fi
strip "$stage/binary/out/valkey-operator" 2>/dev/null || true

log "buildah bud -f Containerfile (binary from the host build)"
buildah bud --quiet --isolation chroot --layers=false \
  --build-context "operator-binary=$stage/binary" --build-arg "VERSION=$version" \
  -f Containerfile -t "$tag" "$stage/context" >/dev/null
mkdir -p "$(dirname "$out")"; rm -f "$out"
buildah push --quiet "$tag" "oci-archive:$out:$tag" >/dev/null
buildah rmi "$tag" >/dev/null 2>&1 || true

log "checking $out"
python3 - "$out" "$stage/rootfs" "$version" <<'PY'
import json, os, subprocess, sys, tarfile
archive, rootfs, version = sys.argv[1], sys.argv[2], sys.argv[3]
tar = tarfile.open(archive)
members = {m.name.removeprefix("./"): m for m in tar.getmembers()}
member = lambda name: tar.extractfile(members[name])
blob = lambda d: member("blobs/sha256/" + d.split(":", 1)[1])
index = json.load(member("index.json"))
manifest = json.load(blob(index["manifests"][0]["digest"]))
config = json.load(blob(manifest["config"]["digest"]))["config"]
os.makedirs(rootfs)
for layer in manifest["layers"]:
    layer_tar = tarfile.open(fileobj=blob(layer["digest"]), mode="r:*")
    try:
        layer_tar.extractall(rootfs, filter="tar")
    except TypeError:  # Python without extraction filters (before 3.11.4)
        layer_tar.extractall(rootfs)
entrypoint, user = config["Entrypoint"], config.get("User", "")
assert entrypoint == ["/usr/local/bin/valkey-operator"], entrypoint
assert user == "65532:65532", f"image user {user!r}, want 65532:65532 (non-root)"
# Backup Jobs verify HTTPS object stores against the public CAs the image carries.
assert os.path.getsize(rootfs + "/etc/ssl/certs/ca-certificates.crt") > 100_000, "no CA bundle"
assert "Apache License" in open(rootfs + "/usr/share/doc/valkey-operator/LICENSE").read(), "no LICENSE"
uid, gid = user.split(":")
# The entrypoint, as the image's user, from the unpacked image (static: nothing else needed).
cmd = ["setpriv", f"--reuid={uid}", f"--regid={gid}", "--clear-groups",
       rootfs + entrypoint[0], "--version"]
got = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout.strip()
assert got == f"valkey-operator {version}", got
size = sum(l["size"] for l in manifest["layers"])
print(f"image {archive}: entrypoint {entrypoint} user {user} prints {got!r}; "
      f"compressed layers {size / 2**20:.1f} MiB, archive {os.path.getsize(archive) / 2**20:.1f} MiB")
PY

# What a kubelet runs: the chart's `command` for the operator container, in the image, as the
# image's user. `executable file not found in $PATH` here is the StartError a real node gives.
chart_command=$(bash e2e/chart-command.sh)
log "running the chart's command (${chart_command} --version) in the image"
ctr=$(buildah from --quiet "oci-archive:$out")
image_id=$(buildah inspect --format '{{.FromImageID}}' "$ctr")
trap 'buildah rm "$ctr" >/dev/null 2>&1; buildah rmi "$image_id" >/dev/null 2>&1; rm -rf "$stage"' EXIT
got=$(buildah run --isolation chroot "$ctr" -- "$chart_command" --version 2>&1) || {
  log "FAILED: the chart's command $chart_command does not start in the image: $got"
  exit 1
}
test "$got" = "valkey-operator $version" || { log "FAILED: chart command printed $got"; exit 1; }
log "the chart's command starts in the image: $got"
