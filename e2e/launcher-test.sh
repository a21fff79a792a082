#!/usr/bin/env bash
# Tests of the local-cluster launcher itself (run by `make test` after the e2e suites, on the
# cluster they used):
#   1. a second `up` builds nothing and restarts no control-plane process; 10 ups in a row
#      succeed, and one after a user edited a sample keeps the edit;
#   2. `up` after a run that was killed (processes gone, namespaces and links left) recovers;
#   3. `down` leaves no process, network namespace, link, bridge or kube-proxy rule behind, and
#      gives the host back its ip_forward setting;
#   4. `up` after `down` works, with the webhook certificate the other supported way
#      (webhook.caBundle from the cluster CA instead of cert-manager);
#   5. the chart's `helm test` passes with either certificate.
# Prints one line per check and a closing "N passed, N failed" line.
set -uo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
LC_DIR=${LC_DIR:-$REPO/.localcluster}
source "$REPO/e2e/versions.env"
CACHE=${VALKEY_OPERATOR_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/valkey-operator}
KUBECTL="$CACHE/k8s-v$K8S_VERSION/bin/kubectl --kubeconfig $LC_DIR/kubeconfig"
export LC_SAMPLES=0   # the samples are not what these checks are about; keep them fast
passed=0; failed=0
# What the host had before the cluster set ip_forward (cluster.sh keeps it for `down`).
IP_FORWARD_BEFORE=$(cat "$LC_DIR/ip_forward.orig" 2>/dev/null || cat /proc/sys/net/ipv4/ip_forward)
check() { # name command...
  local name=$1; shift
  if "$@"; then echo "ok   - $name"; passed=$((passed + 1)); else echo "FAIL - $name"; failed=$((failed + 1)); fi
}
pids_of() { for f in "$LC_DIR"/pids/*.pid; do [ -e "$f" ] && cat "$f"; done | sort | tr '\n' ' '; }
nodes_ready() { [ "$($KUBECTL get nodes --no-headers 2>/dev/null | grep -c ' Ready ')" -ge 3 ]; }
leftovers() {
  pgrep -af "$CACHE/(k8s|etcd|coredns|cert-manager|csi-[a-z]+)-v"; pgrep -af "$CACHE/csi-expandable"
  pgrep -af "valkey-server /etc/valkey"
  pgrep -af "containerd(-shim-runc-v2)? .*$LC_DIR/real/"; pgrep -ax docker-registry
  ip netns list | grep -E '^(vkp|cni)-'; ip -o link show | grep -E ': (vkh|vkbr0|veth)'
  iptables -t nat -S | grep KUBE- | head -3; iptables -t mangle -S | grep VK-NETPOL | head -3
  awk -v d="$LC_DIR/real/" 'index($2, d) == 1 {print "mount", $2}' /proc/self/mounts | head -3
  ls -d /sys/fs/cgroup/*/vk-* 2>/dev/null | head -3
}
nothing_left() {
  # Processes killed by `down` may take a moment to be gone.
  for _ in $(seq 20); do nothing_left_now && return 0; sleep 0.5; done
  echo "left behind:"; leftovers
  return 1
}
# Real nodes too: no containerd or shim of a node, no registry, no CNI namespace or veth, no
# mount under a node's directory, no node cgroup.
nothing_left_now() {
  local nat mangle netns links mounts
  nat=$(iptables -t nat -S 2>/dev/null); mangle=$(iptables -t mangle -S 2>/dev/null)
  netns=$(ip netns list 2>/dev/null)
  links=$(ip -o link show 2>/dev/null); mounts=$(cat /proc/self/mounts)
  ! pgrep -f "$CACHE/(k8s|etcd|coredns|cert-manager|csi-[a-z]+)-v" >/dev/null \
    && ! pgrep -f "$CACHE/csi-expandable" >/dev/null \
    && ! pgrep -f "containerd(-shim-runc-v2)? .*$LC_DIR/real/" >/dev/null \
    && ! pgrep -x docker-registry >/dev/null \
    && [[ $nat != *KUBE-* ]] \
    && [[ $mangle != *VK-NETPOL* ]] \
    && ! pgrep -f "valkey-server /etc/valkey" >/dev/null \
    && ! grep -qE '^(vkp|cni)-' <<<"$netns" \
    && ! grep -qE ': (vkh|vkbr0|veth)' <<<"$links" \
    && [[ $mounts != *" $LC_DIR/real/"* ]] \
    && ! compgen -G '/sys/fs/cgroup/*/vk-*' >/dev/null
}

# The chart's `helm test` (templates/tests/webhook.yaml) on the release `up` installed; a
# failure prints the test pod's log (a failed test pod is kept; a passed one is deleted, so
# `helm test --logs` would fail on it).
HELM="$CACHE/helm-v$HELM_VERSION/bin/helm"
helm_test() {
  "$HELM" test valkey-operator -n valkey-operator-system --kubeconfig "$LC_DIR/kubeconfig" \
    --timeout 3m >"$LC_DIR/logs/helm-test.log" 2>&1 && return 0
  cat "$LC_DIR/logs/helm-test.log"
  $KUBECTL -n valkey-operator-system logs valkey-operator-test-webhook; return 1
}

# 1. A second `up` builds nothing and keeps the control plane running.
before=$(pids_of)
start=$SECONDS
out=$(bash "$REPO/e2e/cluster.sh" up 2>&1); rc=$?
echo "second up: ${rc} in $((SECONDS - start))s"
[ "$rc" = 0 ] || { echo "second up said:"; tail -20 <<<"$out"; }
check "second up succeeds" test "$rc" = 0
check "second up builds nothing" bash -c "! grep -qE 'building Kubernetes|building etcd|Compiling' <<<\"\$1\"" _ "$out"
check "second up restarts no control-plane process" test "$before" = "$(pids_of)"
check "helm test: the webhook answers through its Service (cert-manager's CA)" helm_test

# 1b. `up` again and again on a running cluster (it once failed about 1 in 4 with "Address
#     already assigned"), the last one after a user edited a sample it created.
ups_ok=0
for i in $(seq 9); do
  out=$(bash "$REPO/e2e/cluster.sh" up 2>&1) && ups_ok=$((ups_ok + 1)) || { echo "up $((i + 1)) said:"; tail -5 <<<"$out"; }
done
check "10 consecutive ups on a running cluster succeed" test "$ups_ok" = 9
edited_up() {
  $KUBECTL get valkeyrole metrics-readonly >/dev/null 2>&1 \
    || LC_SAMPLES=1 bash "$REPO/e2e/cluster.sh" up >/dev/null 2>&1 || true
  $KUBECTL patch valkeyrole metrics-readonly --type merge \
    -p '{"spec":{"commands":[{"name":"ping","access":"allow"},{"name":"info","access":"allow"},{"name":"dbsize","access":"allow"}]}}' >/dev/null || return 1
  local out; out=$(LC_SAMPLES=1 bash "$REPO/e2e/cluster.sh" up 2>&1) || { tail -5 <<<"$out"; return 1; }
  # The user's edit survives.
  [[ $($KUBECTL get valkeyrole metrics-readonly -o jsonpath='{.spec.commands[*].name}') == *dbsize* ]]
}
check "up after a user edited a sample succeeds and keeps the edit" edited_up

# 2. A killed run: every process SIGKILLed, network namespaces and links left behind.
killed=()
for f in "$LC_DIR"/pids/*.pid; do pid=$(cat "$f"); killed+=("$pid"); kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null; done
# "Processes gone": wait until the kernel has finished tearing them down.
for _ in $(seq 100); do
  gone=1
  for pid in "${killed[@]}"; do
    state=$(ps -o stat= -p "$pid" 2>/dev/null) && [ "${state#Z}" = "$state" ] && gone=0
  done
  [ "$gone" = 1 ] && break
  sleep 0.1
done
left=$(ip netns list | grep -cE '^(vkp|cni)-' || true)
echo "after kill: $left pod network namespaces left behind"
start=$SECONDS
bash "$REPO/e2e/cluster.sh" up >"$LC_DIR/logs/launcher-test-up-after-kill.log" 2>&1; rc=$?
[ "$rc" = 0 ] || tail -20 "$LC_DIR/logs/launcher-test-up-after-kill.log"
echo "up after a killed run: ${rc} in $((SECONDS - start))s"
check "up after a killed run succeeds" test "$rc" = 0
check "up after a killed run has 3 Ready nodes" nodes_ready

# 3. down leaves nothing.
bash "$REPO/e2e/cluster.sh" down >/dev/null 2>&1
check "down leaves no process, namespace, link, bridge or kube-proxy rule" nothing_left
check "down gives the host back its ip_forward setting" test "$(cat /proc/sys/net/ipv4/ip_forward)" = "$IP_FORWARD_BEFORE"

# 4. up after down, the operator's webhook on a caBundle certificate (cluster.sh waits until the
#    API server calls the webhook with it).
start=$SECONDS
LC_WEBHOOK_CERT=ca-bundle bash "$REPO/e2e/cluster.sh" up >"$LC_DIR/logs/launcher-test-up-after-down.log" 2>&1; rc=$?
[ "$rc" = 0 ] || tail -20 "$LC_DIR/logs/launcher-test-up-after-down.log"
echo "up after down: ${rc} in $((SECONDS - start))s"
check "up after down succeeds" test "$rc" = 0
check "up after down has 3 Ready nodes" nodes_ready
check "up after down serves the webhook on the caBundle certificate" \
  grep -q 'webhook certificate: ca-bundle' "$LC_DIR/logs/launcher-test-up-after-down.log"
check "helm test: the webhook answers through its Service (webhook.caBundle)" helm_test

echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
