#!/usr/bin/env bash
# The images the local cluster's real nodes pull, built with buildah (no daemon) and pushed to
# the registry on the machine (e2e/cluster.sh starts it), under the names users see. Nodes
# reach them through containerd's registry mirrors (docker.io, quay.io and registry.local all
# point at that one registry), exactly as a user's cluster pulls them.
#
#   e2e/images/build.sh <registry host:port>
#
# Each image carries the hash of its inputs as a label; an image already in the registry with
# the same hash is not built again, so a warm `make up` pushes nothing.
#   registry.local/pause:3.10      the pod sandbox (pause.c, static)
#   valkey/valkey:<version>        valkey-server (the TLS build where e2e/versions.env has one)
#                                  and valkey-cli with their shared libraries, user valkey (999)
#   registry.local/sleep:1         busybox (sh, sleep, nc, ...), valkey-cli and getent: test pods
#   busybox                        the same busybox as root: local-path-provisioner's helper pods
#   rancher/local-path-provisioner:v<version>  the default StorageClass's provisioner
#   registry.local/coredns:<version>           CoreDNS (e2e/addons/coredns.yaml)
#   quay.io/jetstack/cert-manager-{controller,webhook,cainjector}:v<version>  the one binary of
#                                  e2e/tools/cert-manager, as cert-manager's own chart names them
#   registry.local/kube-network-policies:v<version>  NetworkPolicy enforcement
#   redis:7.0-tls                  Debian's redis-server: a plain TCP service for tests
#   registry.local/seaweedfs:<tag> SeaweedFS (weed): the S3-compatible store backups go to
#   oliver006/redis_exporter:v1.45.0  Debian's prometheus-redis-exporter (1.45.0) laid out as
#                                  upstream's image: /redis_exporter, user 59000: the default
#                                  image of a ValkeyConfig's metrics sidecar
#   registry.local/prometheus:2.42 Debian's Prometheus 2.42 (user nobody; storage in a volume at
#                                  /prometheus): the e2e metrics suite scrapes the sidecars with it
#   valkey-operator:dev            the image `make image` built (Containerfile); also as
#                                  valkey-operator:<version>, pulled as
#                                  registry.example.com/valkey-operator:<version> (quickstart)
set -euo pipefail
REPO=$(cd "$(dirname "$0")/../.." && pwd)
source "$REPO/e2e/versions.env"
CACHE=${VALKEY_OPERATOR_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/valkey-operator}
REGISTRY=${1:?usage: build.sh <registry host:port>}
log() { printf '[images] %s\n' "$*" >&2; }
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT

# The hash an image in the registry was built from, or nothing.
pushed_hash() { # repo:tag
  skopeo inspect --tls-verify=false --format '{{index .Labels "local.inputs"}}' \
    "docker://$REGISTRY/$1" 2>/dev/null || true
}

inputs_hash() { # files...
  { sha256sum "$@" | cut -d' ' -f1; sha256sum "$0" | cut -d' ' -f1; } | sha256sum | cut -c1-16
}

# Copies a dynamically linked executable and every shared library it loads into a rootfs, at
# the same paths (the loader included), so the image needs no distribution underneath.
copy_with_libraries() { # rootfs source-path dest-path
  local rootfs=$1 src=$2 dest=$3 lib
  install -D -m 0755 "$src" "$rootfs$dest"
  for lib in $(ldd "$src" 2>/dev/null | grep -o '/[^ ]*'); do
    [ -e "$rootfs$lib" ] || install -D -m 0755 "$(readlink -f "$lib")" "$rootfs$lib"
  done
}

# Commits a rootfs as an image (one layer) and pushes it. Remaining args: buildah config flags.
commit_and_push() { # rootfs repo:tag hash config-args...
  local rootfs=$1 ref=$2 hash=$3; shift 3
  local ctr; ctr=$(buildah from scratch)
  # As an archive: `buildah copy` of a directory makes every file root's, which left the Valkey
  # image's /data unwritable for its user (a pod without a volume there could not start).
  tar -C "$rootfs" --numeric-owner -cf "$rootfs.tar" .
  buildah add --quiet "$ctr" "$rootfs.tar" / >/dev/null
  buildah config --label "local.inputs=$hash" "$@" "$ctr"
  buildah commit --quiet --rm "$ctr" "local/$ref" >/dev/null
  buildah push --quiet --tls-verify=false "local/$ref" "docker://$REGISTRY/$ref" >/dev/null
  buildah rmi "local/$ref" >/dev/null 2>&1 || true
  log "pushed $ref"
}

users() { # rootfs
  mkdir -p "$1/etc" "$1/tmp" && chmod 1777 "$1/tmp"
  printf 'root:x:0:0:root:/root:/sbin/nologin\nvalkey:x:999:999:valkey:/data:/sbin/nologin\nnobody:x:65534:65534:nobody:/:/sbin/nologin\n' > "$1/etc/passwd"
  printf 'root:x:0:\nvalkey:x:999:\nnogroup:x:65534:\n' > "$1/etc/group"
}

pause_image() {
  local ref=pause:3.10 hash; hash=$(inputs_hash "$REPO/e2e/images/pause.c")
  [ "$(pushed_hash "$ref")" = "$hash" ] && return 0
  local rootfs=$work/pause; mkdir -p "$rootfs"
  gcc -static -Os -s -o "$rootfs/pause" "$REPO/e2e/images/pause.c"
  commit_and_push "$rootfs" "$ref" "$hash" --entrypoint '["/pause"]' --user 65535:65535
}

valkey_cli() { readlink -f "$(command -v redis-cli)"; }

valkey_image() { # version
  local v=$1 bin="$CACHE/valkey-$1/bin"
  [ -x "$CACHE/valkey-$v-tls/bin/valkey-server" ] && bin="$CACHE/valkey-$v-tls/bin"
  local ref=valkey/valkey:$v hash; hash=$(inputs_hash "$bin/valkey-server" "$(valkey_cli)")
  [ "$(pushed_hash "$ref")" = "$hash" ] && return 0
  local rootfs=$work/valkey-$v; mkdir -p "$rootfs"
  users "$rootfs"
  copy_with_libraries "$rootfs" "$bin/valkey-server" /usr/local/bin/valkey-server
  copy_with_libraries "$rootfs" "$(valkey_cli)" /usr/local/bin/valkey-cli
  ln -s valkey-server "$rootfs/usr/local/bin/valkey-check-aof"
  install -d -o 999 -g 999 "$rootfs/data"
  # As the official image: valkey-server on PATH, /data as the working directory, user valkey.
  commit_and_push "$rootfs" "$ref" "$hash" --env PATH=/usr/local/bin:/usr/bin:/bin \
    --workingdir /data --user 999:999 --cmd '["valkey-server"]' --port 6379
}

# busybox with every applet linked, and valkey-cli.
busybox_rootfs() { # rootfs
  mkdir -p "$1/bin"
  users "$1"
  install -m 0755 /bin/busybox "$1/bin/busybox"
  local applet
  for applet in $(/bin/busybox --list); do
    [ -e "$1/bin/$applet" ] || ln -s busybox "$1/bin/$applet"
  done
  copy_with_libraries "$1" "$(valkey_cli)" /usr/local/bin/valkey-cli
  ln -s valkey-cli "$1/usr/local/bin/redis-cli"
  # glibc's getent resolves names as applications do (busybox has none): with the NSS modules
  # it loads at run time, which ldd does not list.
  copy_with_libraries "$1" /usr/bin/getent /usr/local/bin/getent
  local nss
  for nss in /lib/x86_64-linux-gnu/libnss_files.so.2 /lib/x86_64-linux-gnu/libnss_dns.so.2; do
    [ -e "$nss" ] && install -D -m 0644 "$(readlink -f "$nss")" "$1$nss"
  done
  printf 'hosts: files dns\n' > "$1/etc/nsswitch.conf"
}

sleep_image() {
  local ref=sleep:1 hash; hash=$(inputs_hash /bin/busybox "$(valkey_cli)" /usr/bin/getent)
  [ "$(pushed_hash "$ref")" = "$hash" ] && return 0
  busybox_rootfs "$work/sleep"
  commit_and_push "$work/sleep" "$ref" "$hash" --env PATH=/usr/local/bin:/bin \
    --cmd '["sleep", "infinity"]' --user 65534:65534
}

busybox_image() {
  local ref=library/busybox:latest hash; hash=$(inputs_hash /bin/busybox "$(valkey_cli)" /usr/bin/getent)
  [ "$(pushed_hash "$ref")" = "$hash" ] && return 0
  busybox_rootfs "$work/busybox"
  commit_and_push "$work/busybox" "$ref" "$hash" --env PATH=/usr/local/bin:/bin --cmd '["sh"]'
}

local_path_image() {
  local bin="$CACHE/local-path-provisioner-v$LOCAL_PATH_VERSION/bin/local-path-provisioner"
  local ref=rancher/local-path-provisioner:v$LOCAL_PATH_VERSION hash; hash=$(inputs_hash "$bin")
  [ "$(pushed_hash "$ref")" = "$hash" ] && return 0
  local rootfs=$work/local-path; mkdir -p "$rootfs"
  users "$rootfs"
  install -D -m 0755 "$bin" "$rootfs/usr/local/bin/local-path-provisioner"
  commit_and_push "$rootfs" "$ref" "$hash" --env PATH=/usr/local/bin \
    --entrypoint '["local-path-provisioner"]'
}

# One executable (with its shared libraries) as the image's entrypoint, under the name it is
# called by: Debian's redis-server is a link to the multi-call redis-check-rdb, which picks its
# job from that name (copied under the target's name, "redis-server" was not on PATH and the
# pod ended in StartError). The executable goes to /usr/local/bin/<name>, or to <name> when that
# is an absolute path (an image laid out as its upstream one is).
binary_image() { # repo:tag executable user entrypoint-json [name in /usr/local/bin, or path]
  local ref=$1 bin=$2 user=$3 entrypoint=$4 name=${5:-$(basename "$2")} hash
  hash=$({ inputs_hash "$bin"; echo "$user $entrypoint"; } | sha256sum | cut -c1-16)
  [ "$(pushed_hash "$ref")" = "$hash" ] && return 0
  local rootfs=$work/${ref//[\/:]/-}; mkdir -p "$rootfs"
  users "$rootfs"
  [[ $name == /* ]] || name=/usr/local/bin/$name
  copy_with_libraries "$rootfs" "$(readlink -f "$bin")" "$name"
  commit_and_push "$rootfs" "$ref" "$hash" --env PATH=/usr/local/bin --user "$user" \
    --entrypoint "$entrypoint"
}

add_on_images() {
  binary_image "coredns:$COREDNS_VERSION" "$CACHE/coredns-v$COREDNS_VERSION/bin/coredns" 0:0 '["coredns"]'
  local component
  for component in controller webhook cainjector; do
    # The chart sets runAsNonRoot without a user: the image's must be numeric (as upstream's).
    binary_image "jetstack/cert-manager-$component:v$CERT_MANAGER_VERSION" \
      "$CACHE/cert-manager-v$CERT_MANAGER_VERSION/bin/cert-manager" 1000:1000 "[\"cert-manager\", \"$component\"]"
  done
  binary_image "kube-network-policies:v$KUBE_NETWORK_POLICIES_VERSION" \
    "$CACHE/kube-network-policies-v$KUBE_NETWORK_POLICIES_VERSION/bin/cmd" 0:0 '["netpol"]' netpol
  binary_image library/redis:7.0-tls "$(command -v redis-server)" 0:0 '["redis-server"]'
  binary_image "seaweedfs:$SEAWEEDFS_TAG" "$CACHE/seaweedfs-$SEAWEEDFS_TAG/bin/weed" 1000:1000 '["weed"]'
  # Valkey's metrics: the exporter under the upstream image's name, path and numeric user (a
  # member's sidecar runs as non-root without a user of its own), and a Prometheus to scrape it.
  binary_image oliver006/redis_exporter:v1.45.0 "$(command -v prometheus-redis-exporter)" 59000:59000 \
    '["/redis_exporter"]' /redis_exporter
  binary_image prometheus:2.42 "$(command -v prometheus)" 65534:65534 '["prometheus"]'
}

# The operator: the OCI archive `make image` wrote, copied as it is.
operator_image() {
  local archive; archive=$(ls -t "${CARGO_TARGET_DIR:-$CACHE/target}"/image/valkey-operator-*.oci.tar 2>/dev/null | head -1 || true)
  [ -n "$archive" ] || { log "no operator image yet (make image builds it): not pushed"; return 0; }
  local version want ref
  version=$(basename "$archive" .oci.tar); version=${version#valkey-operator-}
  want=$(skopeo inspect --format '{{.Digest}}' "oci-archive:$archive")
  # `dev` for the local install; `valkey-operator:<version>` is what docs/quickstart.md installs
  # as registry.example.com/valkey-operator:<version> (the nodes mirror that registry here).
  for ref in library/valkey-operator:dev "valkey-operator:$version"; do
    [ "$(skopeo inspect --tls-verify=false --format '{{.Digest}}' "docker://$REGISTRY/$ref" 2>/dev/null)" = "$want" ] \
      && continue
    skopeo copy --quiet --dest-tls-verify=false "oci-archive:$archive" "docker://$REGISTRY/$ref" >/dev/null
    log "pushed $ref ($(basename "$archive"))"
  done
}

pause_image
for v in $VALKEY_VERSIONS; do valkey_image "$v"; done
sleep_image
busybox_image
local_path_image
add_on_images
operator_image
