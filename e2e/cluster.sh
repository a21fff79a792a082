#!/usr/bin/env bash
# The local Kubernetes cluster: etcd, kube-apiserver, kube-controller-manager, kube-scheduler
# kube-proxy (built from Go modules by e2e/tools/install.sh), real nodes (upstream kubelet,
# containerd, images from a registry on the machine: e2e/real-node.sh) with pods on bridge vkbr0
# (198.18.0.0/15), CoreDNS as a pod behind the kube-dns Service (e2e/addons/coredns.yaml),
# NetworkPolicy enforcement and the default StorageClass.
#
#   e2e/cluster.sh up               tools + control plane + kubelet (+ CRDs, operator, samples
#                                   when the repo provides them); idempotent
#   e2e/cluster.sh up-controlplane  bridge, PKI, etcd, apiserver, kcm, scheduler only
#   e2e/cluster.sh down             stop everything, remove namespaces, links and the bridge
#   e2e/cluster.sh status           what is running
#
# Every process is started here, recorded in $LC_DIR/pids and stopped by `down`.
# All state and logs live in $LC_DIR (default <repo>/.localcluster, gitignored).
# Needs root (network namespaces, veth, bridge), like kind needs Docker.
set -euo pipefail

REPO=$(cd "$(dirname "$0")/.." && pwd)
source "$REPO/e2e/versions.env"
LC_DIR=${LC_DIR:-$REPO/.localcluster}
CACHE=${VALKEY_OPERATOR_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/valkey-operator}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$CACHE/target}
K8S_BIN=$CACHE/k8s-v$K8S_VERSION/bin
ETCD_BIN=$CACHE/etcd-v$ETCD_VERSION/bin
KUBECTL="$K8S_BIN/kubectl --kubeconfig $LC_DIR/kubeconfig"
HELM="$CACHE/helm-v$HELM_VERSION/bin/helm"

BRIDGE=vkbr0
GATEWAY=198.18.0.1
BRIDGE_CIDR=$GATEWAY/15
POD_CIDR=198.18.0.0/15
SERVICE_CIDR=198.19.0.0/16
FIRST_SERVICE_IP=198.19.0.1
DNS_SERVICE_IP=198.19.0.10
CLUSTER_DOMAIN=cluster.local
APISERVER_PORT=6443
ETCD_CLIENT_PORT=23790
ETCD_PEER_PORT=23800

PKI=$LC_DIR/pki
LOGS=$LC_DIR/logs
PIDS=$LC_DIR/pids

log() { printf '[cluster] %s\n' "$*" >&2; }
die() { printf '[cluster] error: %s\n' "$*" >&2; exit 1; }

source "$REPO/e2e/real-node.sh"

require_root() {
  [ "$(id -u)" = 0 ] || die "the local cluster needs root (network namespaces, veth pairs, a bridge); run as root"
}

# ---------------------------------------------------------------- processes
# Alive and not a zombie: a killed daemon whose parent does not reap it stays a zombie, and
# `kill -0` would still succeed on it.
alive() { # pid
  local state
  state=$(ps -o stat= -p "$1" 2>/dev/null) || return 1
  [ -n "$state" ] && [ "${state#Z}" = "$state" ]
}

is_running() { # name
  local f=$PIDS/$1.pid
  [ -f "$f" ] && alive "$(cat "$f")"
}

start_daemon() { # name cmd...
  local name=$1; shift
  if is_running "$name"; then return 0; fi
  mkdir -p "$LOGS" "$PIDS"
  [ -f "$LOGS/$name.log" ] && mv -f "$LOGS/$name.log" "$LOGS/$name.prev.log"
  # setsid: its own process group, so `down` can stop it with everything it spawned.
  setsid "$@" >>"$LOGS/$name.log" 2>&1 < /dev/null &
  echo $! > "$PIDS/$name.pid"
  log "started $name (pid $!, log $LOGS/$name.log)"
}

stop_daemon() { # name [grace-seconds]
  local name=$1 grace=${2:-10} f=$PIDS/$1.pid pid
  [ -f "$f" ] || return 0
  pid=$(cat "$f")
  if alive "$pid"; then
    kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq $((grace * 10))); do alive "$pid" || break; sleep 0.1; done
    kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null || true
    log "stopped $name"
  fi
  rm -f "$f"
}

wait_for() { # description timeout-seconds command...
  local what=$1 timeout=$2; shift 2
  local deadline=$((SECONDS + timeout))
  until "$@" >/dev/null 2>&1; do
    [ $SECONDS -lt $deadline ] || die "timed out after ${timeout}s waiting for $what (logs: $LOGS)"
    sleep 0.5
  done
}

# ---------------------------------------------------------------- network
bridge_up() {
  if ! ip link show "$BRIDGE" >/dev/null 2>&1; then
    ip link add "$BRIDGE" type bridge
    log "created bridge $BRIDGE"
  fi
  # Capture first: `ip ... | grep -q` under pipefail fails when grep exits at the first match
  # and ip gets SIGPIPE, which added the address a second time ("Address already assigned").
  local addrs; addrs=$(ip addr show dev "$BRIDGE")
  [[ $addrs == *"inet $BRIDGE_CIDR"* ]] || ip addr add "$BRIDGE_CIDR" dev "$BRIDGE"
  ip link set "$BRIDGE" up
}

# Removes every veth of ours, then the bridge (the nodes' pod network namespaces went with
# real_nodes_down). Safe to run anytime.
network_down() {
  local link
  # Whatever is still attached to the bridge is ours (a real node's CNI veth whose pod
  # namespace outlived its name, e.g. after a killed run): deleting one end removes both.
  if ip link show "$BRIDGE" >/dev/null 2>&1; then
    for link in $(ip -o link show master "$BRIDGE" 2>/dev/null | awk -F': ' '{print $2}' | cut -d@ -f1); do
      ip link delete "$link" 2>/dev/null || true
    done
    ip link delete "$BRIDGE"
    log "removed bridge $BRIDGE"
  fi
}

# ---------------------------------------------------------------- PKI
gen_cert() { # name subject [sans] [ca-name]
  local name=$1 subj=$2 sans=${3:-} ca=${4:-ca}
  [ -f "$PKI/$name.crt" ] && return 0
  openssl genrsa -out "$PKI/$name.key" 2048 2>/dev/null
  openssl req -new -key "$PKI/$name.key" -subj "$subj" -out "$PKI/$name.csr" 2>/dev/null
  {
    echo "basicConstraints=CA:FALSE"
    echo "keyUsage=critical,digitalSignature,keyEncipherment"
    if [ -n "$sans" ]; then
      echo "extendedKeyUsage=serverAuth,clientAuth"
      echo "subjectAltName=$sans"
    else
      echo "extendedKeyUsage=clientAuth"
    fi
  } > "$PKI/$name.ext"
  openssl x509 -req -in "$PKI/$name.csr" -CA "$PKI/$ca.crt" -CAkey "$PKI/$ca.key" -CAcreateserial \
    -days 365 -sha256 -extfile "$PKI/$name.ext" -out "$PKI/$name.crt" 2>/dev/null
  rm -f "$PKI/$name.csr" "$PKI/$name.ext"
}

write_kubeconfig() { # file cert-name
  local file=$1 cert=$2
  cat > "$file" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: local
  cluster:
    server: https://$GATEWAY:$APISERVER_PORT
    certificate-authority-data: $(base64 -w0 < "$PKI/ca.crt")
users:
- name: $cert
  user:
    client-certificate-data: $(base64 -w0 < "$PKI/$cert.crt")
    client-key-data: $(base64 -w0 < "$PKI/$cert.key")
contexts:
- name: local
  context: {cluster: local, user: $cert}
current-context: local
EOF
  chmod 600 "$file"
}

pki() {
  mkdir -p "$PKI"
  if [ ! -f "$PKI/ca.crt" ]; then
    openssl genrsa -out "$PKI/ca.key" 2048 2>/dev/null
    openssl req -x509 -new -key "$PKI/ca.key" -subj "/CN=valkey-operator-local-ca" -days 3650 \
      -sha256 -out "$PKI/ca.crt" 2>/dev/null
    log "generated cluster CA"
  fi
  if [ ! -f "$PKI/front-proxy-ca.crt" ]; then
    # Separate CA for the aggregation layer's request-header authentication.
    openssl genrsa -out "$PKI/front-proxy-ca.key" 2048 2>/dev/null
    openssl req -x509 -new -key "$PKI/front-proxy-ca.key" -subj "/CN=valkey-operator-local-front-proxy-ca" \
      -days 3650 -sha256 -out "$PKI/front-proxy-ca.crt" 2>/dev/null
  fi
  gen_cert front-proxy-client "/CN=front-proxy-client" "" front-proxy-ca
  gen_cert apiserver "/CN=kube-apiserver" \
    "IP:$GATEWAY,IP:$FIRST_SERVICE_IP,IP:127.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
  gen_cert admin "/O=system:masters/CN=kubernetes-admin"
  gen_cert controller-manager "/CN=system:kube-controller-manager"
  gen_cert scheduler "/CN=system:kube-scheduler"
  gen_cert kube-proxy "/CN=system:kube-proxy"
  # The CSI sidecars of the expandable class (on the host, like kube-proxy): cluster admins, as
  # the local cluster's control-plane components are, rather than a copy of their RBAC.
  gen_cert csi-sidecars "/O=system:masters/CN=csi-sidecars"
  gen_cert apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client"
  [ -f "$PKI/sa.key" ] || { openssl genrsa -out "$PKI/sa.key" 2048 2>/dev/null; openssl rsa -in "$PKI/sa.key" -pubout -out "$PKI/sa.pub" 2>/dev/null; }
  write_kubeconfig "$LC_DIR/kubeconfig" admin
  write_kubeconfig "$PKI/controller-manager.kubeconfig" controller-manager
  write_kubeconfig "$PKI/scheduler.kubeconfig" scheduler
  write_kubeconfig "$PKI/kube-proxy.kubeconfig" kube-proxy
  write_kubeconfig "$PKI/csi-sidecars.kubeconfig" csi-sidecars
}

# ---------------------------------------------------------------- components
apiserver_ready() { $KUBECTL get --raw /readyz; }

controlplane_up() {
  require_root
  [ -x "$K8S_BIN/kube-apiserver" ] && [ -x "$ETCD_BIN/etcd" ] || die "control-plane binaries missing in $CACHE; run e2e/tools/install.sh"
  mkdir -p "$LC_DIR" "$LOGS" "$PIDS"
  bridge_up
  pki
  start_daemon etcd "$ETCD_BIN/etcd" --name local --data-dir "$LC_DIR/etcd" \
    --listen-client-urls "http://127.0.0.1:$ETCD_CLIENT_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_CLIENT_PORT" \
    --listen-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
    --initial-cluster "local=http://127.0.0.1:$ETCD_PEER_PORT" --unsafe-no-fsync --quota-backend-bytes=4294967296
  wait_for "etcd" 60 curl -sf "http://127.0.0.1:$ETCD_CLIENT_PORT/health"
  start_daemon kube-apiserver "$K8S_BIN/kube-apiserver" \
    --etcd-servers "http://127.0.0.1:$ETCD_CLIENT_PORT" \
    --bind-address "$GATEWAY" --advertise-address "$GATEWAY" --secure-port "$APISERVER_PORT" \
    --tls-cert-file "$PKI/apiserver.crt" --tls-private-key-file "$PKI/apiserver.key" \
    --client-ca-file "$PKI/ca.crt" \
    --requestheader-client-ca-file "$PKI/front-proxy-ca.crt" --requestheader-allowed-names front-proxy-client \
    --requestheader-username-headers X-Remote-User --requestheader-group-headers X-Remote-Group \
    --requestheader-extra-headers-prefix X-Remote-Extra- \
    --proxy-client-cert-file "$PKI/front-proxy-client.crt" --proxy-client-key-file "$PKI/front-proxy-client.key" \
    --service-account-issuer https://kubernetes.default.svc.cluster.local \
    --service-account-key-file "$PKI/sa.pub" --service-account-signing-key-file "$PKI/sa.key" \
    --service-cluster-ip-range "$SERVICE_CIDR" \
    --authorization-mode Node,RBAC \
    --enable-aggregator-routing=true \
    --kubelet-client-certificate "$PKI/apiserver-kubelet-client.crt" --kubelet-client-key "$PKI/apiserver-kubelet-client.key" \
    --kubelet-preferred-address-types InternalIP \
    --allow-privileged=true --profiling=false --v=1
  wait_for "kube-apiserver /readyz" 120 apiserver_ready
  start_daemon kube-controller-manager "$K8S_BIN/kube-controller-manager" \
    --kubeconfig "$PKI/controller-manager.kubeconfig" \
    --authentication-kubeconfig "$PKI/controller-manager.kubeconfig" \
    --authorization-kubeconfig "$PKI/controller-manager.kubeconfig" \
    --bind-address 127.0.0.1 --secure-port 10257 \
    --leader-elect=false --use-service-account-credentials=true \
    --service-account-private-key-file "$PKI/sa.key" --root-ca-file "$PKI/ca.crt" \
    --service-cluster-ip-range "$SERVICE_CIDR" --allocate-node-cidrs=false \
    --controllers '*,-bootstrapsigner,-tokencleaner,-csrsigning,-csrapproving,-csrcleaner,-cloud-node-lifecycle' \
    --profiling=false --v=1
  start_daemon kube-scheduler "$K8S_BIN/kube-scheduler" \
    --kubeconfig "$PKI/scheduler.kubeconfig" \
    --authentication-kubeconfig "$PKI/scheduler.kubeconfig" \
    --authorization-kubeconfig "$PKI/scheduler.kubeconfig" \
    --bind-address 127.0.0.1 --secure-port 10259 --leader-elect=false --profiling=false --v=1
  wait_for "the default service account token controller" 120 $KUBECTL -n default get serviceaccount default
  # kubectl keeps discovery for 6 hours per server address; one left by an earlier cluster at
  # this address (say, with v1beta1 still served) would pick the wrong default version.
  rm -rf "$HOME/.kube/cache/discovery/${GATEWAY}_$APISERVER_PORT"
  log "control plane up: export KUBECONFIG=$LC_DIR/kubeconfig"
}

# Service ClusterIPs route from pods and from the host: kube-proxy (iptables mode) on the host,
# one for all nodes as they share it. --masquerade-all: a pod reaching a Service backed by a
# pod on the same bridge gets its reply through the host (which undoes the NAT), not straight
# over the bridge. The host must forward between pods for that; the value it had is restored
# by `down`. Left alone: localhost NodePorts (route_localnet) and conntrack limits.
service_routing_up() {
  [ -f "$LC_DIR/ip_forward.orig" ] || cat /proc/sys/net/ipv4/ip_forward > "$LC_DIR/ip_forward.orig"
  echo 1 > /proc/sys/net/ipv4/ip_forward
  start_daemon kube-proxy "$K8S_BIN/kube-proxy" --kubeconfig "$PKI/kube-proxy.kubeconfig" \
    --proxy-mode iptables --hostname-override node-a --cluster-cidr "$POD_CIDR" --masquerade-all \
    --iptables-localhost-nodeports=false --conntrack-max-per-core 0 \
    --metrics-bind-address 127.0.0.1:10249 --healthz-bind-address 127.0.0.1:10256 --v=1
  wait_for "kube-proxy to program the kubernetes Service" 60 iptables -t nat -S KUBE-SERVICES
}

service_routing_down() {
  stop_daemon kube-proxy
  # kube-proxy's chains and rules go with it; nothing of ours stays in the host's tables.
  local rules; rules=$(iptables -t nat -S 2>/dev/null || true)   # not `| grep -q`: pipefail
  if [ -x "$K8S_BIN/kube-proxy" ] && [[ $rules == *KUBE-* ]]; then
    "$K8S_BIN/kube-proxy" --cleanup >>"$LOGS/kube-proxy.log" 2>&1 || true
  fi
  if [ -f "$LC_DIR/ip_forward.orig" ]; then
    cat "$LC_DIR/ip_forward.orig" > /proc/sys/net/ipv4/ip_forward
    rm -f "$LC_DIR/ip_forward.orig"
  fi
}

# Cluster DNS: CoreDNS as a pod behind kube-dns (the kubelet points pods at it).
dns_up() {
  sed -e "s/@COREDNS_VERSION@/$COREDNS_VERSION/g" -e "s/@DNS_IP@/$DNS_SERVICE_IP/g" \
    "$REPO/e2e/addons/coredns.yaml" | $KUBECTL apply --server-side --force-conflicts -f - >/dev/null
  $KUBECTL -n kube-system rollout status deployment/coredns --timeout=120s >/dev/null \
    || die "CoreDNS did not become ready: $KUBECTL -n kube-system logs deploy/coredns"
  log "cluster DNS serving at $DNS_SERVICE_IP ($CLUSTER_DOMAIN)"
}

# NetworkPolicy enforced: kube-network-policies (e2e/addons/network-policies.yaml) judges the
# first packet of every TCP connection between pod addresses, handed to it through the netfilter
# queue NFQUEUE_ID by the mangle chain VK-NETPOL (POSTROUTING: after kube-proxy's DNAT, so the
# destination is the backing pod, and before its masquerade, so the source is still the client
# pod; bridged packets reach it through br_netfilter). Left out, as on a real cluster: the host
# (kubelet probes, the apiserver, the test harness), and UDP (DNS would meet the conntrack race
# of netfilter bug 1766; every policy of this project is TCP). --queue-bypass: while nothing
# listens on the queue, packets pass; network_policies_up waits for the listener.
NFQUEUE_ID=100
NETPOL_CHAIN=VK-NETPOL
NETPOL_JUMP=(POSTROUTING -s "$POD_CIDR" -d "$POD_CIDR" -j "$NETPOL_CHAIN")
network_policies_up() {
  sed -e "s/@KUBE_NETWORK_POLICIES_VERSION@/$KUBE_NETWORK_POLICIES_VERSION/g" -e "s/@NFQUEUE_ID@/$NFQUEUE_ID/g" \
    "$REPO/e2e/addons/network-policies.yaml" | $KUBECTL apply --server-side --force-conflicts -f - >/dev/null
  $KUBECTL -n kube-system rollout status deployment/kube-network-policies --timeout=120s >/dev/null \
    || die "kube-network-policies did not become ready: $KUBECTL -n kube-system logs deploy/kube-network-policies"
  queue_bound() { grep -qE "^ *$NFQUEUE_ID " /proc/net/netfilter/nfnetlink_queue; }
  wait_for "kube-network-policies to listen on netfilter queue $NFQUEUE_ID" 60 queue_bound
  iptables -t mangle -N "$NETPOL_CHAIN" 2>/dev/null || iptables -t mangle -F "$NETPOL_CHAIN"
  iptables -t mangle -A "$NETPOL_CHAIN" -s "$GATEWAY" -j RETURN
  iptables -t mangle -A "$NETPOL_CHAIN" -p tcp -m conntrack --ctstate NEW \
    -j NFQUEUE --queue-num "$NFQUEUE_ID" --queue-bypass
  iptables -t mangle -C "${NETPOL_JUMP[@]}" 2>/dev/null || iptables -t mangle -A "${NETPOL_JUMP[@]}"
  log "NetworkPolicy enforced by kube-network-policies (netfilter queue $NFQUEUE_ID)"
}

network_policies_down() {
  while iptables -t mangle -D "${NETPOL_JUMP[@]}" 2>/dev/null; do :; done
  iptables -t mangle -F "$NETPOL_CHAIN" 2>/dev/null || true
  iptables -t mangle -X "$NETPOL_CHAIN" 2>/dev/null || true
}

# The default StorageClass: local-path-provisioner, volumes in each real node's directory.
storage_up() {
  local paths="" node
  for node in $REAL_NODES; do
    paths="$paths${paths:+, }{\"node\": \"$node\", \"paths\": [\"$LC_DIR/real/$node/volumes\"]}"
  done
  sed -e "s|@LOCAL_PATH_VERSION@|$LOCAL_PATH_VERSION|g" -e "s|@REAL_NODE_TAINT@|$REAL_NODE_TAINT|g" \
    -e "s|@NODE_PATHS@|$paths|g" "$REPO/e2e/addons/local-path-storage.yaml" \
    | $KUBECTL apply --server-side --force-conflicts -f - >/dev/null
  $KUBECTL -n local-path-storage rollout status deployment/local-path-provisioner --timeout=120s >/dev/null \
    || die "local-path-provisioner did not become ready: $KUBECTL -n local-path-storage logs deploy/local-path-provisioner"
  log "default StorageClass local-path (volumes on the real nodes: $REAL_NODES)"
}

# The expandable StorageClass (`expandable`, not the default): volumes that grow online, which
# local-path cannot. On the host, as kube-proxy is: e2e/tools/csi-expandable serves the CSI
# controller to the upstream csi-provisioner and csi-resizer and one node endpoint per kubelet,
# registered through the kubelet's plugins_registry as node-driver-registrar would; the
# volumes are directories under $CSI_DIR/volumes, bind-mounted into pods.
CSI_DIR=$LC_DIR/csi
CSI_DRIVER=expandable.csi.valkey-operator.local
expandable_storage_up() {
  local node nodes=()
  for node in $REAL_NODES; do nodes+=(--node "$node=$LC_DIR/real/$node/kubelet"); done
  start_daemon csi-expandable "$CACHE/csi-expandable/bin/csi-expandable" --name "$CSI_DRIVER" \
    --volumes "$CSI_DIR/volumes" --controller-socket "$CSI_DIR/controller.sock" "${nodes[@]}"
  wait_for "csi-expandable's controller socket" 30 test -S "$CSI_DIR/controller.sock"
  local sidecar=(--csi-address "$CSI_DIR/controller.sock" --kubeconfig "$PKI/csi-sidecars.kubeconfig"
    --leader-election=false --timeout=30s)
  start_daemon csi-provisioner "$CACHE/csi-provisioner-v$CSI_PROVISIONER_VERSION/bin/csi-provisioner" "${sidecar[@]}"
  start_daemon csi-resizer "$CACHE/csi-resizer-v$CSI_RESIZER_VERSION/bin/csi-resizer" "${sidecar[@]}"
  sed -e "s|@CSI_DRIVER@|$CSI_DRIVER|g" "$REPO/e2e/addons/expandable-storage.yaml" \
    | $KUBECTL apply --server-side --force-conflicts -f - >/dev/null
  for node in $REAL_NODES; do
    wait_for "the kubelet of $node to register $CSI_DRIVER" 60 csi_registered "$node"
  done
  log "StorageClass expandable ($CSI_DRIVER: volumes in $CSI_DIR/volumes, online expansion)"
}

csi_registered() { # node
  $KUBECTL get csinode "$1" -o jsonpath='{.spec.drivers[*].name}' | grep -qw "$CSI_DRIVER"
}

expandable_storage_down() {
  stop_daemon csi-provisioner
  stop_daemon csi-resizer
  stop_daemon csi-expandable
  # Volumes are mounted only under the kubelets' directories (real_node_down unmounts them).
  rm -rf "$CSI_DIR"
}

# The object store backups go to: SeaweedFS's S3 gateway (e2e/addons/object-store.yaml).
object_store_up() {
  sed -e "s|@SEAWEEDFS_TAG@|$SEAWEEDFS_TAG|g" -e "s|@REAL_NODE_TAINT@|$REAL_NODE_TAINT|g" \
    "$REPO/e2e/addons/object-store.yaml" | $KUBECTL apply --server-side --force-conflicts -f - >/dev/null
  $KUBECTL -n object-store rollout status deployment/seaweedfs --timeout=180s >/dev/null \
    || die "SeaweedFS did not become ready: $KUBECTL -n object-store logs deploy/seaweedfs"
  log "object store: SeaweedFS S3 at seaweedfs.object-store:8333, bucket valkey-backups"
}

# cert-manager, installed as users install it: its own Helm chart (from its Go module) with its
# CRDs. Ready when its webhook admits a cert-manager object (server-side dry run).
cert_manager_up() {
  local v=v$CERT_MANAGER_VERSION
  "$HELM" upgrade --install cert-manager "$CACHE/cert-manager-$v/chart" --namespace cert-manager \
    --create-namespace --kubeconfig "$LC_DIR/kubeconfig" --set crds.enabled=true \
    --set startupapicheck.enabled=false --set image.tag=$v --set webhook.image.tag=$v \
    --set cainjector.image.tag=$v --set acmesolver.image.tag=$v --wait --timeout 180s >/dev/null \
    || die "cert-manager did not install: $KUBECTL -n cert-manager get pods; logs in $LOGS"
  cert_manager_admits() {
    $KUBECTL apply --dry-run=server -f - <<EOF
apiVersion: cert-manager.io/v1
kind: Issuer
metadata: {name: readiness-check, namespace: cert-manager}
spec: {selfSigned: {}}
EOF
  }
  # cainjector copies the webhook's CA (Secret cert-manager-webhook-ca, made by the webhook
  # when it starts) into the webhook configurations. On real nodes a cainjector that started
  # before the Secret existed was seen to miss its creation and never inject (x509: unknown
  # authority for minutes; a new cainjector pod injected at once): one restart after 45 s.
  if ! (wait_for "cert-manager's webhook to admit objects" 45 cert_manager_admits) 2>/dev/null; then
    log "cert-manager's webhook CA not injected after 45 s: restarting cainjector"
    $KUBECTL -n cert-manager rollout restart deployment/cert-manager-cainjector >/dev/null
    wait_for "cert-manager's webhook to admit objects" 120 cert_manager_admits
  fi
  log "cert-manager $v running (controller, webhook, cainjector)"
}

# ---------------------------------------------------------------- builds
# The operator runs from its image (what `make image` builds: the static release build that
# make bench measures), rebuilt when the binary is newer than the last image.
build_rust() {
  log "building valkey-operator (release) and its image"
  local binary archive
  binary=$(bash "$REPO/e2e/release-build.sh")
  # (none yet on a fresh machine: ls fails, which must not end the script)
  archive=$(ls -t "$CARGO_TARGET_DIR"/image/valkey-operator-*.oci.tar 2>/dev/null | head -1 || true)
  if [ -z "$archive" ] || [ "$binary" -nt "$archive" ]; then
    (cd "$REPO" && bash e2e/image.sh >/dev/null)
  fi
}

kubelet_up() {
  registry_up
  real_nodes_up
  # kube-proxy once its node exists (it reads the node's addresses), then DNS behind it.
  service_routing_up
  dns_up
  network_policies_up
  storage_up
  expandable_storage_up
  object_store_up
  cert_manager_up
}

# ---------------------------------------------------------------- the project on top
project_up() {
  operator_up
  $KUBECTL wait --for condition=Established --timeout=60s -f "$REPO/crds/" >/dev/null
  # The persona ClusterRoles and their example bindings, as rendered from the chart into the
  # plain manifests (the release leaves them out: e2e/chart-values.yaml).
  $KUBECTL apply --server-side --force-conflicts -f "$REPO/manifests/rbac/platform-team.yaml" \
    -f "$REPO/manifests/rbac/product-team.yaml" >/dev/null
  log "persona RBAC installed"
  # LC_SAMPLES=1 (default): the menu and the sample clusters; menu: the menu only (images,
  # roles, configs, the samples' namespace: make test, whose suites need the room the sample
  # clusters would take on 2-CPU nodes); 0: nothing.
  local samples=${LC_SAMPLES:-1} files=()
  case $samples in
    1) files=("$REPO"/manifests/samples/*.yaml) ;;
    menu) files=("$REPO"/manifests/samples/0*.yaml "$REPO"/manifests/samples/10-namespace.yaml) ;;
    0) ;;
    *) die "LC_SAMPLES=$samples: use 1 (menu and sample clusters), menu (the menu only) or 0 (nothing)" ;;
  esac
  if [ ${#files[@]} -gt 0 ]; then
    # Samples are for the first start: objects that exist (perhaps edited by the user since,
    # e.g. `kubectl patch` of a cluster) are left as they are, never fought over.
    local out errors f args=()
    for f in "${files[@]}"; do args+=(-f "$f"); done
    out=$($KUBECTL create "${args[@]}" 2>&1) || true
    errors=$(grep -i 'error' <<<"$out" | grep -v 'AlreadyExists' || true)
    [ -z "$errors" ] || die "samples could not be created: $errors"
  fi
  if [ "$samples" = 1 ]; then
    log "samples created (existing ones left as they are); watch them with: kubectl get valkey -A"
    $KUBECTL -n my-app wait --for=jsonpath='{.status.state}'=Active valkeycluster/my-cluster --timeout=180s >/dev/null \
      && log "my-app/my-cluster is Active" || log "my-app/my-cluster is not Active yet: kubectl -n my-app describe valkeycluster my-cluster"
  elif [ "$samples" = menu ]; then
    log "sample menu created (images, roles, configs; no sample clusters)"
  fi
}

# The chart as a user gets a release of it: packaged (`helm package`, version = the operator's)
# and pushed to the registry on the machine (`helm push`, an OCI artifact), then installed from
# there. Prints the chart's oci:// reference and version.
publish_chart() {
  local version dir
  version=$(sed -n 's/^version = "\(.*\)"/\1/p' "$REPO/Cargo.toml" | head -1)
  dir=$(mktemp -d)
  "$HELM" package "$REPO/charts/valkey-operator" --version "$version" --app-version "$version" \
    --destination "$dir" >/dev/null || die "helm could not package charts/valkey-operator"
  "$HELM" push "$dir/valkey-operator-$version.tgz" "oci://$REGISTRY/charts" --plain-http \
    >/dev/null 2>&1 || die "helm could not push the chart to oci://$REGISTRY/charts"
  rm -rf "$dir"
  echo "oci://$REGISTRY/charts/valkey-operator $version"
}

# The operator is installed with its Helm chart (charts/valkey-operator: CRDs, RBAC, Deployment,
# Services, webhook configuration), from the registry on the machine (publish_chart), and runs
# as a pod (image valkey-operator:dev maps to the
# freshly built binary), so the chart, its RBAC, the service-account token and in-cluster
# config are exercised for real. The webhook certificate comes the chart's default way:
# cert-manager issues it and injects its CA into the webhook configuration and the CRDs.
# LC_WEBHOOK_CERT=ca-bundle takes the other supported way instead: a certificate signed by the
# cluster CA, given to the chart as webhook.caBundle.
operator_up() {
  local ns=valkey-operator-system
  $KUBECTL create namespace "$ns" --dry-run=client -o yaml | $KUBECTL apply -f - >/dev/null
  # Like a production cluster: the operator's namespace admits only `restricted` pods.
  $KUBECTL label namespace "$ns" --overwrite pod-security.kubernetes.io/enforce=restricted \
    pod-security.kubernetes.io/enforce-version=latest >/dev/null
  local whsvc=valkey-operator-webhook.$ns.svc cert_args=() ca_file
  if [ "${LC_WEBHOOK_CERT:-cert-manager}" = ca-bundle ]; then
    gen_cert webhook "/CN=$whsvc" \
      "DNS:valkey-operator-webhook,DNS:valkey-operator-webhook.$ns,DNS:$whsvc,DNS:$whsvc.cluster.local"
    # Replaces whatever cert-manager put there (the Secret is ours now, not its).
    $KUBECTL -n "$ns" delete certificate valkey-operator-webhook --ignore-not-found >/dev/null 2>&1 || true
    $KUBECTL -n "$ns" create secret tls valkey-operator-webhook-cert \
      --cert="$PKI/webhook.crt" --key="$PKI/webhook.key" --dry-run=client -o yaml | $KUBECTL apply -f - >/dev/null
    cert_args=(--set webhook.certManager.enabled=false --set-string "webhook.caBundle=$(base64 -w0 < "$PKI/ca.crt")")
    ca_file=$PKI/ca.crt
  else
    cert_args=(--set webhook.certManager.enabled=true --set-string webhook.caBundle=)
    ca_file=$LC_DIR/webhook-ca.crt
  fi
  local published chart chart_version
  published=$(publish_chart) || exit 1
  read -r chart chart_version <<<"$published"
  "$HELM" upgrade --install valkey-operator "$chart" --version "$chart_version" --plain-http \
    --namespace "$ns" --kubeconfig "$LC_DIR/kubeconfig" -f "$REPO/e2e/chart-values.yaml" \
    "${cert_args[@]}" >/dev/null \
    || die "helm could not install $chart $chart_version"
  log "chart $chart $chart_version installed (helm release valkey-operator in $ns; webhook certificate: ${LC_WEBHOOK_CERT:-cert-manager})"
  if [ "${LC_WEBHOOK_CERT:-cert-manager}" != ca-bundle ]; then
    # The Secret exists once cert-manager issued it; the pod cannot start before.
    $KUBECTL -n "$ns" wait --for=condition=Ready certificate/valkey-operator-webhook --timeout=120s >/dev/null \
      || die "cert-manager did not issue the webhook certificate: $KUBECTL -n $ns describe certificate valkey-operator-webhook"
    $KUBECTL -n "$ns" get secret valkey-operator-webhook-cert -o jsonpath='{.data.ca\.crt}' | base64 -d > "$ca_file"
  fi
  # A rebuilt binary is picked up by restarting the pod.
  $KUBECTL -n "$ns" rollout restart deployment/valkey-operator >/dev/null
  $KUBECTL -n "$ns" rollout status deployment/valkey-operator --timeout=120s >/dev/null \
    || die "the operator did not become ready: $KUBECTL -n $ns logs deploy/valkey-operator"
  log "operator running"
  # The API server reaches the pod IP through the Service's endpoints
  # (--enable-aggregator-routing): wait until the webhook answers there with that certificate.
  webhook_serving() {
    local ip
    ip=$($KUBECTL -n "$ns" get endpoints valkey-operator-webhook \
      -o jsonpath='{.subsets[0].addresses[0].ip}' 2>/dev/null) && [ -n "$ip" ] \
      && curl -sf --cacert "$ca_file" --resolve "$whsvc:9443:$ip" "https://$whsvc:9443/healthz"
  }
  wait_for "the admission webhook to serve" 60 webhook_serving
  # The API server trusts it: the CA is in the webhook configuration (injected by cert-manager's
  # cainjector, or the chart's caBundle) and a server-side dry run goes through the webhook.
  webhook_admits() {
    $KUBECTL apply --dry-run=server -f - <<EOF
apiVersion: valkey.gomomento.com/v1alpha1
kind: ValkeyImage
metadata: {name: webhook-readiness-check}
spec: {repository: valkey/valkey, tag: 9.1.2, version: 9.1.2}
EOF
  }
  wait_for "the API server to call the admission webhook" 60 webhook_admits
  log "admission and conversion webhooks serving"
}

# ---------------------------------------------------------------- commands
cleanup_stale() {
  # A run that was killed leaves pid files of dead processes behind (its nodes' pods, network
  # namespaces and veths are e2e/real-node.sh's to clean up).
  local f
  for f in "$PIDS"/*.pid; do
    [ -e "$f" ] || continue
    local name; name=$(basename "$f" .pid)
    if ! is_running "$name"; then rm -f "$f"; STALE=1; fi
  done
}

cmd_up() {
  require_root
  "$REPO/e2e/tools/install.sh"
  build_rust
  STALE=0
  cleanup_stale
  controlplane_up
  kubelet_up
  project_up
  echo
  echo "Local cluster is up. Use it with:"
  echo "  export KUBECONFIG=$LC_DIR/kubeconfig PATH=$K8S_BIN:\$PATH"
  echo "  kubectl get nodes"
}

cmd_down() {
  require_root
  real_nodes_down
  expandable_storage_down
  stop_daemon kube-scheduler
  network_policies_down
  service_routing_down
  stop_daemon kube-controller-manager
  stop_daemon kube-apiserver
  stop_daemon etcd
  network_down
  # Keep PKI and logs for inspection; etcd data goes so the next `up` starts clean.
  rm -rf "$LC_DIR/etcd" "$PIDS"
  log "down: nothing left running"
}

cmd_status() {
  local n
  for n in etcd kube-apiserver kube-controller-manager kube-scheduler kube-proxy registry \
      csi-expandable csi-provisioner csi-resizer $(for r in $REAL_NODES; do echo "containerd-$r kubelet-$r"; done); do
    if is_running "$n"; then echo "$n: running (pid $(cat "$PIDS/$n.pid"))"; else echo "$n: stopped"; fi
  done
}

case "${1:-}" in
  up) cmd_up ;;
  up-controlplane) "$REPO/e2e/tools/install.sh"; STALE=0; cleanup_stale; controlplane_up ;;
  kubelet-up) kubelet_up ;;
  real-nodes-up) registry_up; real_nodes_up ;;
  real-nodes-down) real_nodes_down ;;
  project-up) project_up ;;
  operator-up) operator_up ;;
  down) cmd_down ;;
  status) cmd_status ;;
  *) echo "usage: $0 up|up-controlplane|kubelet-up|project-up|operator-up|down|status" >&2; exit 2 ;;
esac
