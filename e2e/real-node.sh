# Real nodes of the local cluster (sourced by e2e/cluster.sh): the upstream kubelet with its own
# containerd (Debian's, with runc) and the CNI reference plugins, pulling OCI images from the
# registry on the machine (e2e/images/build.sh pushes them under their public names).
#
# Each real node has its own containerd (root, state, socket), kubelet root dir, ports, cgroup
# root and pod address range on the shared bridge, all under $LC_DIR/real/<node>. What this
# machine needs for it (cgroup v1, no CAP_SYS_RESOURCE, nothing to pull from the internet) is
# set in the configs below, each with its reason.

REGISTRY=127.0.0.1:5000
# The nodes: node-a, node-b, node-c in zones and the tainted real-a, each an upstream kubelet.
REAL_NODES=${LC_REAL_NODES:-node-a node-b node-c real-a}
# Taint of real-a (no zone label): only pods that ask for it (tests of images, probes, cgroups,
# volumes) run there. The zoned nodes (node-<x> in zone-<x>) take any pod.
REAL_NODE_TAINT=valkey-operator.local/real-node
CRICTL=$CACHE/crictl-v$CRICTL_VERSION/bin/crictl

crictl_() { # node-dir args...
  "$CRICTL" --runtime-endpoint "unix://$1/containerd.sock" --timeout 10s "${@:2}"
}

registry_up() {
  mkdir -p "$LC_DIR/registry" "$CACHE/registry"
  # Storage in the cache: images survive `down` and a fresh clone, so a warm `up` pushes nothing.
  cat > "$LC_DIR/registry/config.yml" <<CFG
version: 0.1
log: {level: warn}
storage:
  filesystem: {rootdirectory: $CACHE/registry}
  delete: {enabled: true}
http: {addr: $REGISTRY}
CFG
  start_daemon registry docker-registry serve "$LC_DIR/registry/config.yml"
  wait_for "the image registry on $REGISTRY" 30 curl -sf "http://$REGISTRY/v2/"
  bash "$REPO/e2e/images/build.sh" "$REGISTRY"
}

# Pod addresses of node i: 198.18.(128+32i).1 - 198.18.(159+32i).254; on-link /15 like every
# pod, Services through the host.
real_node_cni() { # node index dir
  local first=$((128 + 32 * $2))
  mkdir -p "$3/cni" "$3/cni-state"
  cat > "$3/cni/10-vkbr0.conflist" <<CFG
{
  "cniVersion": "0.4.0",
  "name": "vkbr0",
  "plugins": [
    {"type": "bridge", "bridge": "$BRIDGE", "isGateway": false, "ipMasq": false, "hairpinMode": true,
     "ipam": {"type": "host-local", "dataDir": "$3/cni-state",
              "ranges": [[{"subnet": "198.18.0.0/15", "rangeStart": "198.18.$first.1",
                           "rangeEnd": "198.18.$((first + 31)).254", "gateway": "$GATEWAY"}]],
              "routes": [{"dst": "$SERVICE_CIDR", "gw": "$GATEWAY"}]}},
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
CFG
}

real_node_containerd() { # node dir
  local dir=$2
  mkdir -p "$dir/containerd"
  cat > "$dir/containerd/config.toml" <<CFG
version = 2
root = "$dir/containerd/root"
state = "$dir/containerd/state"
[grpc]
  address = "$dir/containerd.sock"
[ttrpc]
  address = "$dir/containerd.sock.ttrpc"
[plugins."io.containerd.internal.v1.opt"]
  path = "$dir/containerd/opt"
[plugins."io.containerd.grpc.v1.cri"]
  # Built locally (e2e/images/pause.c): nothing can be pulled from the internet.
  sandbox_image = "registry.local/pause:3.10"
  # The machine lacks CAP_SYS_RESOURCE: without this every sandbox fails with "can't get final
  # child's PID from pipe: EOF" (runc cannot lower oom_score_adj).
  restrict_oom_score_adj = true
  enable_selinux = false
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$dir/cni"
  # Every public registry the charts and samples name is served by the one on the machine.
  [plugins."io.containerd.grpc.v1.cri".registry.mirrors."docker.io"]
    endpoint = ["http://$REGISTRY"]
  [plugins."io.containerd.grpc.v1.cri".registry.mirrors."quay.io"]
    endpoint = ["http://$REGISTRY"]
  [plugins."io.containerd.grpc.v1.cri".registry.mirrors."registry.local"]
    endpoint = ["http://$REGISTRY"]
  # The registry docs/quickstart.md names for the operator image (its test runs it as written).
  [plugins."io.containerd.grpc.v1.cri".registry.mirrors."registry.example.com"]
    endpoint = ["http://$REGISTRY"]
CFG
}

real_node_kubelet() { # node index dir
  local node=$1 i=$2 dir=$3
  mkdir -p "$dir/kubelet" "$dir/pod-logs"
  gen_cert "kubelet-$node" "/O=system:nodes/CN=system:node:$node"
  write_kubeconfig "$dir/kubelet.kubeconfig" "kubelet-$node"
  cat > "$dir/kubelet-config.yaml" <<CFG
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
# cgroup v1 here, and no systemd managing cgroups.
cgroupDriver: cgroupfs
failCgroupV1: false
failSwapOn: false
# One machine, several nodes: each its own cgroup root, ports and log directory.
cgroupRoot: /vk-$node
address: $GATEWAY
port: $((10260 + i))
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: $((10270 + i))
podLogsDir: $dir/pod-logs
containerRuntimeEndpoint: unix://$dir/containerd.sock
clusterDNS: [$DNS_SERVICE_IP]
clusterDomain: $CLUSTER_DOMAIN
resolvConf: /etc/resolv.conf
# Only the API server talks to the kubelet, with the client certificate signed by the cluster CA.
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: false}
  x509: {clientCAFile: $PKI/ca.crt}
authorization: {mode: AlwaysAllow}
# A shared disk and memory of a test machine: evict on real exhaustion only.
evictionHard: {memory.available: "200Mi", nodefs.available: "2%", imagefs.available: "2%"}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
serializeImagePulls: false
makeIPTablesUtilChains: false
CFG
  case $node in
    node-*) ;;
    *) printf 'registerWithTaints:\n- {key: %s, value: "true", effect: NoSchedule}\n' "$REAL_NODE_TAINT" \
         >> "$dir/kubelet-config.yaml" ;;
  esac
}

# node-<x> is in zone-<x>; real-* nodes have no zone. node-agent=kubelet: the nodes that run
# images (every node now; local-path-provisioner selects on it).
real_node_labels() { # node
  local labels=valkey-operator.local/node-agent=kubelet
  case $1 in node-*) labels="$labels,topology.kubernetes.io/zone=zone-${1#node-}" ;; esac
  echo "$labels"
}

# The node's cgroup root in every v1 hierarchy (the kubelet checks they exist; cpuset needs its
# cpus and mems before a task can join).
real_node_cgroups() { # node
  local h
  for h in /sys/fs/cgroup/*/; do
    [ -f "$h/cgroup.procs" ] || continue
    mkdir -p "$h/vk-$1"
    if [ -f "$h/cpuset.cpus" ]; then
      cat "$h/cpuset.cpus" > "$h/vk-$1/cpuset.cpus"
      cat "$h/cpuset.mems" > "$h/vk-$1/cpuset.mems"
    fi
  done
}

real_nodes_up() {
  local node i=0 dir
  for node in $REAL_NODES; do
    dir=$LC_DIR/real/$node
    # Left by a run that was killed: start from nothing.
    if [ -d "$dir" ] && ! is_running "containerd-$node"; then real_node_down "$node"; fi
    real_node_cni "$node" "$i" "$dir"
    real_node_containerd "$node" "$dir"
    real_node_kubelet "$node" "$i" "$dir"
    real_node_cgroups "$node"
    start_daemon "containerd-$node" containerd --config "$dir/containerd/config.toml"
    wait_for "containerd of $node" 30 test -S "$dir/containerd.sock"
    start_daemon "kubelet-$node" "$K8S_BIN/kubelet" --config "$dir/kubelet-config.yaml" \
      --kubeconfig "$dir/kubelet.kubeconfig" --root-dir "$dir/kubelet" --cert-dir "$dir/kubelet/pki" \
      --hostname-override "$node" --node-ip "$GATEWAY" \
      --node-labels "$(real_node_labels "$node")" --v=1
    i=$((i + 1))
  done
  for node in $REAL_NODES; do
    wait_for "real node $node Ready" 120 node_is_ready "$node"
  done
}

node_is_ready() { # node
  [ "$($KUBECTL get node "$1" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}')" = True ]
}

# Containers first (so nothing holds mounts), then the daemons, then what they left: mounts
# under the node's directory, cgroups under its root, the node's files.
real_node_down() { # node
  local node=$1 dir=$LC_DIR/real/$1
  stop_daemon "kubelet-$node" 30
  if [ -S "$dir/containerd.sock" ] && is_running "containerd-$node"; then
    # Stopping a pod sandbox kills its containers and releases its address (CNI DEL).
    local id
    for id in $(crictl_ "$dir" pods -q 2>/dev/null); do
      crictl_ "$dir" stopp "$id" >/dev/null 2>&1 || true
      crictl_ "$dir" rmp "$id" >/dev/null 2>&1 || true
    done
  fi
  stop_daemon "containerd-$node" 30
  # Shims outlive containerd by design; this node's are those started on its socket. Whatever
  # still runs in the node's cgroups (a container of a killed containerd) goes too.
  pkill -KILL -f "containerd-shim-runc-v2 .*-address $dir/containerd.sock" 2>/dev/null || true
  # Every depth: burstable and best-effort containers sit four levels below the node's root
  # (kubepods/<class>/pod<uid>/<container>); a container outlives its killed shim.
  local procs _
  for _ in $(seq 50); do
    procs=$(find /sys/fs/cgroup/pids/vk-"$node" -name cgroup.procs -exec cat {} + 2>/dev/null || true)
    [ -n "$procs" ] || break
    kill -KILL $procs 2>/dev/null || true
    sleep 0.1
  done
  local m
  for m in $(awk -v d="$dir/" 'index($2, d) == 1 {print $2}' /proc/self/mounts | sort -r); do
    umount -l "$m" 2>/dev/null || true
  done
  # Network namespaces the CNI made (containerd names them cni-<uuid>; nothing else on the
  # machine does) that nothing runs in any more; their veths go with them.
  local ns
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep '^cni-' || true); do
    [ -z "$(ip netns pids "$ns" 2>/dev/null)" ] && ip netns delete "$ns" 2>/dev/null || true
  done
  local cg
  for cg in /sys/fs/cgroup/*/vk-"$node"; do
    [ -d "$cg" ] && { find "$cg" -depth -type d -exec rmdir {} + 2>/dev/null || true; }
  done
  rm -rf "$dir"
}

# Every node that has a directory, whatever LC_REAL_NODES says now.
real_nodes_down() {
  local dir
  for dir in "$LC_DIR"/real/*/; do
    [ -d "$dir" ] && real_node_down "$(basename "$dir")"
  done
  stop_daemon registry
}
