#!/usr/bin/env bash
# Tests of charts/valkey-operator that need no cluster (make up installs it on the local
# cluster for real, and every e2e suite runs against that install):
#   1. helm lint, with the default values (cert-manager) and with the local cluster's;
#   2. with cert-manager: the serving Certificate names the webhook Service, the chart's own CA
#      chain (or the given issuerRef) issues it, and cert-manager.io/inject-ca-from is on the
#      webhook configuration and on both converting CRDs; CRDs are kept on uninstall;
#   3. without cert-manager and without webhook.caBundle, rendering fails saying what to set;
#      with it, the caBundle is in the webhook configuration and both conversion webhooks;
#   4. the release namespace reaches every namespaced object and every webhook service;
#   5. the chart's CRDs are crds/ (annotations, labels, namespace aside);
#   6. certs/generate.sh makes a verifying chain for the webhook Service, keeping its CA;
#   7. the Grafana dashboard is valid, uses only the operator's metrics (METRICS below, the alert
#      rules too) and the members' exporter's (EXPORTER_METRICS, filtered by the namespace and
#      cluster variables), its queries parse, and its ConfigMap renders only when enabled;
#   8. the persona ClusterRoles render by default with the chart's labels and are those of the
#      plain manifests, which also carry the example bindings the e2e suites use;
#   9. the checked-in plain manifests are what `make manifests` renders (no drift);
#  10. the operator's NetworkPolicy (webhook and admin ports only; its from lists; off switch)
#      and the ValkeyNode DELETE rule in a failurePolicy: Ignore entry of its own;
#  11. chart parity: serviceAccount create/name/annotations, image by digest, extraEnv,
#      extraVolumes, extraVolumeMounts, global, the recommended app.kubernetes.io labels; the
#      `helm test` pod (templates/tests/webhook.yaml);
#  12. the PodMonitor of the members' exporters (monitoring.podMonitor): off by default; on, it
#      selects member pods on port `metrics` and labels every series namespace, pod, name, shard.
# Prints one line per check and a closing "N passed, N failed" line.
set -uo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
source "$REPO/e2e/versions.env"
CACHE=${VALKEY_OPERATOR_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/valkey-operator}
HELM="$CACHE/helm-v$HELM_VERSION/bin/helm"
CHART=$REPO/charts/valkey-operator
passed=0; failed=0
# The operator's metrics (name and type; docs/operations.md), kept in e2e/metrics.txt: all the
# dashboard and the alert rules may use, and the dashboard shows each.
METRICS=$(grep -v '^#' "$REPO/e2e/metrics.txt")
# The metrics of the members' exporter sidecar (ValkeyConfig spec.metrics; redis_exporter 1.45.0,
# checked against Valkey 9): all the dashboard's Valkey row and the Valkey alerts may use.
EXPORTER_METRICS="redis_up redis_memory_used_bytes redis_memory_max_bytes redis_commands_processed_total
redis_keyspace_hits_total redis_keyspace_misses_total redis_evicted_keys_total redis_connected_clients
redis_rejected_connections_total redis_master_repl_offset redis_connected_slave_offset_bytes
redis_master_link_up redis_connected_slaves redis_instance_info redis_cluster_slots_assigned
redis_cluster_state redis_db_keys redis_expired_keys_total"
check() { # name command...
  local name=$1; shift
  if "$@"; then echo "ok   - $name"; passed=$((passed + 1)); else echo "FAIL - $name"; failed=$((failed + 1)); fi
}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
render() { "$HELM" template vo "$CHART" --namespace ops --kube-version "$K8S_VERSION" "$@"; }
count() { grep -c -- "$1" "$2" || true; }

lint() { "$HELM" lint --strict "$CHART" "$@" >"$tmp/lint.out" 2>&1 || { cat "$tmp/lint.out" >&2; return 1; }; }
check "helm lint (defaults: cert-manager)" lint
check "helm lint (local cluster values)" lint -f "$REPO/e2e/chart-values.yaml" --set webhook.caBundle=Zm9v

render > "$tmp/cm.yaml"
check "cert-manager: serving Certificate for the webhook Service" \
  grep -q "    - valkey-operator-webhook.ops.svc" "$tmp/cm.yaml"
check "cert-manager: own CA chain (self-signed Issuer, CA Certificate, CA Issuer)" \
  test "$(count '^kind: Issuer$' "$tmp/cm.yaml")" = 2 -a "$(count 'isCA: true' "$tmp/cm.yaml")" = 1
check "cert-manager: inject-ca-from on the webhook configuration and both converting CRDs" \
  test "$(count 'cert-manager.io/inject-ca-from: ops/valkey-operator-webhook' "$tmp/cm.yaml")" = 3
check "CRDs are kept on uninstall (8 of 8)" \
  test "$(count 'helm.sh/resource-policy: keep' "$tmp/cm.yaml")" = 8
render --set 'webhook.certManager.issuerRef.name=corp-ca' --set 'webhook.certManager.issuerRef.kind=ClusterIssuer' > "$tmp/issuer.yaml"
check "cert-manager: a given issuerRef replaces the chart's CA" \
  bash -c "grep -q 'name: corp-ca' '$tmp/issuer.yaml' && ! grep -q 'kind: Issuer$' '$tmp/issuer.yaml'"

no_ca_refused() {
  local out
  if out=$("$HELM" template vo "$CHART" --kube-version "$K8S_VERSION" --set webhook.certManager.enabled=false 2>&1); then return 1; fi
  grep -q 'webhook.caBundle is required' <<<"$out"
}
check "no cert-manager and no caBundle: refused with what to set" no_ca_refused
render --set webhook.certManager.enabled=false --set webhook.caBundle=Q0FDQQ== > "$tmp/plain.yaml"
check "caBundle in 7 webhooks and 2 conversion webhooks, no cert-manager objects" \
  bash -c "test \$(grep -c 'caBundle: Q0FDQQ==' '$tmp/plain.yaml') = 9 && ! grep -qE '^apiVersion: cert-manager.io|inject-ca-from:' '$tmp/plain.yaml'"
check "release namespace on every namespaced object and webhook service" \
  bash -c "! grep -n 'valkey-operator-system' '$tmp/plain.yaml' && test \$(grep -c 'namespace: ops' '$tmp/plain.yaml') -ge 14"

same_crds() { # the chart's CRDs are crds/ plus annotations and labels, nothing else
  python3 - "$tmp/crds.yaml" "$REPO/crds" <<'PY'
import glob, sys, yaml
rendered = {d["metadata"]["name"]: d for d in yaml.safe_load_all(open(sys.argv[1])) if d}
ok = True
for f in glob.glob(sys.argv[2] + "/*.yaml"):
    src = yaml.safe_load(open(f))
    out = rendered.pop(src["metadata"]["name"], None)
    for d in (src, out or {}):
        d.get("metadata", {}).pop("annotations", None)
        d.get("metadata", {}).pop("labels", None)
    if out is None or out.get("spec", {}).get("conversion", {}).get("webhook"):
        # The conversion service namespace is the release's.
        out and out["spec"]["conversion"]["webhook"]["clientConfig"]["service"].update(namespace="valkey-operator-system")
    if out != src:
        print("differs:", f, file=sys.stderr); ok = False
sys.exit(0 if ok and not rendered else 1)
PY
}
"$HELM" template vo "$CHART" --namespace ops --kube-version "$K8S_VERSION" --show-only templates/crds.yaml > "$tmp/crds.yaml"
check "the chart's CRDs are crds/ (annotations, labels and namespace aside)" same_crds

served_versions() { # values... -> "kind:version=served" lines of the converting CRDs
  "$HELM" template vo "$CHART" --kube-version "$K8S_VERSION" --show-only templates/crds.yaml "$@" \
    | python3 -c '
import sys, yaml
for d in yaml.safe_load_all(sys.stdin):
    if d and d["spec"].get("conversion", {}).get("strategy") == "Webhook":
        for v in d["spec"]["versions"]:
            print("%s:%s=%s" % (d["spec"]["names"]["kind"], v["name"], v["served"]))'
}
only_alpha_served() {
  test "$(served_versions | sort | tr '\n' ' ')" = "ValkeyCluster:v1alpha1=True ValkeyCluster:v1beta1=False ValkeyConfig:v1alpha1=True ValkeyConfig:v1beta1=False "
}
beta_served_on_request() {
  test "$(served_versions --set crds.serveV1beta1=true | grep -c '=True')" = 4
}
check "v1beta1 declared but not served by default (kubectl's preferred version stays v1alpha1)" only_alpha_served
check "crds.serveV1beta1=true serves v1beta1 of both converting CRDs" beta_served_on_request

certs_without_cert_manager() { # certs/generate.sh: a chain that verifies, the Service's names, a stable CA
  local ca1 ca2
  ca1=$("$REPO/certs/generate.sh" --namespace ops --dir "$tmp/certs" 2>/dev/null) || return 1
  openssl verify -CAfile "$tmp/certs/ca.crt" "$tmp/certs/tls.crt" >/dev/null || return 1
  openssl x509 -in "$tmp/certs/tls.crt" -noout -ext subjectAltName | grep -q 'DNS:valkey-operator-webhook.ops.svc,' || return 1
  [ "$(base64 -d <<<"$ca1" | openssl x509 -noout -fingerprint)" = "$(openssl x509 -in "$tmp/certs/ca.crt" -noout -fingerprint)" ] || return 1
  ca2=$("$REPO/certs/generate.sh" --namespace ops --dir "$tmp/certs" --days 30 2>/dev/null) || return 1
  [ "$ca1" = "$ca2" ]   # rotation keeps the CA, so caBundle stays valid
}
check "certs/generate.sh: serving certificate for the Service, signed by a CA that survives rotation" certs_without_cert_manager

schema_refuses() { # values -> rendering fails, naming the value
  local out
  if out=$(render "$@" 2>&1); then return 1; fi
  grep -q "values don't meet the specifications of the schema" <<<"$out"
}
check "values.schema.json: a misspelt key and an unquoted maxConcurrentRollouts are refused" \
  bash -c "$(declare -f render schema_refuses); HELM='$HELM' CHART='$CHART' K8S_VERSION='$K8S_VERSION'; \
    schema_refuses --set replicaCont=2 && schema_refuses --set settings.maxConcurrentRollouts=0"

render --set replicaCount=1 > "$tmp/default.yaml"
render --set replicaCount=2 --set monitoring.serviceMonitor.enabled=true --set monitoring.prometheusRule.enabled=true > "$tmp/monitoring.yaml"
check "monitoring off by default (no ServiceMonitor, PodMonitor, PrometheusRule); with one replica no PodDisruptionBudget" \
  bash -c "! grep -qE '^kind: (ServiceMonitor|PodMonitor|PrometheusRule|PodDisruptionBudget)$' '$tmp/default.yaml'"
operator_objects() {
  python3 - "$tmp/monitoring.yaml" "$CHART/files/rules.yaml" <<'PY'
import sys, yaml
docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
kind = lambda k: [d for d in docs if d["kind"] == k]
(sm,), (rule,), (pdb,) = kind("ServiceMonitor"), kind("PrometheusRule"), kind("PodDisruptionBudget")
(deploy,) = [d for d in kind("Deployment") if d["metadata"]["name"] == "valkey-operator"]
(svc,) = [d for d in kind("Service") if d["metadata"]["name"] == "valkey-operator-metrics"]
assert sm["spec"]["endpoints"][0]["port"] == "admin" and "admin" in [p["name"] for p in svc["spec"]["ports"]]
assert sm["spec"]["endpoints"][0]["honorLabels"] is True, "the clusters' namespace label must survive the scrape"
assert all(svc["metadata"]["labels"].get(k) == v for k, v in sm["spec"]["selector"]["matchLabels"].items())
assert rule["spec"]["groups"] == yaml.safe_load(open(sys.argv[2])), "PrometheusRule is files/rules.yaml"
alerts = [r["alert"] for g in rule["spec"]["groups"] for r in g["rules"]]
assert alerts == ["ValkeyOperatorNoLeader", "ValkeyClusterDegraded", "ValkeyClusterRolloutStalled",
                  "ValkeyOperatorReconcileErrors", "ValkeyOperatorWebhookSlow", "ValkeyClusterCertificateExpiringSoon",
                  "ValkeyMemoryNearMaxmemory", "ValkeyReplicaLinkDown", "ValkeyEvicting", "ValkeyRejectingConnections"], alerts
for r in rule["spec"]["groups"][1]["rules"]: # the members' alerts: each has a runbook in docs/troubleshooting.md
    assert r["annotations"]["runbook_url"] == "docs/troubleshooting.md#" + r["alert"].lower(), r["alert"]
assert not kind("PodMonitor"), "rendered while monitoring.podMonitor.enabled is false"
assert pdb["spec"]["minAvailable"] == 1
keys = [c["topologyKey"] for c in deploy["spec"]["template"]["spec"]["topologySpreadConstraints"]]
assert keys == ["kubernetes.io/hostname", "topology.kubernetes.io/zone"], keys
PY
}
check "monitoring on: ServiceMonitor on the metrics port, PrometheusRule = files/rules.yaml (10 alerts); 2 replicas: PDB and spread" operator_objects

render --set monitoring.podMonitor.enabled=true --set monitoring.podMonitor.labels.release=kps > "$tmp/podmonitor.yaml"
render --set monitoring.podMonitor.enabled=true --set monitoring.podMonitor.namespaceSelector.any=false \
  --set 'monitoring.podMonitor.namespaceSelector.matchNames={team-a}' > "$tmp/podmonitor-names.yaml"
pod_monitor() { # the members' exporters: member pods, port metrics, namespace/pod/name/shard labels
  python3 - "$tmp/podmonitor.yaml" "$tmp/podmonitor-names.yaml" <<'PY'
import sys, yaml
def pod_monitor(f):
    (pm,) = [d for d in yaml.safe_load_all(open(f)) if d and d["kind"] == "PodMonitor"]
    assert pm["apiVersion"] == "monitoring.coreos.com/v1" and pm["metadata"]["namespace"] == "ops", pm["metadata"]
    return pm
pm = pod_monitor(sys.argv[1])
assert pm["metadata"]["labels"]["release"] == "kps" and pm["metadata"]["labels"]["app.kubernetes.io/instance"] == "vo"
spec = pm["spec"]
assert spec["selector"] == {"matchLabels": {"app.kubernetes.io/managed-by": "valkey-operator",
                                            "app.kubernetes.io/component": "member"}}, spec["selector"]
assert spec["namespaceSelector"] == {"any": True}, spec["namespaceSelector"]
(ep,) = spec["podMetricsEndpoints"]
assert ep["port"] == "metrics" and ep["path"] == "/metrics" and ep["interval"] == "30s", ep
assert "honorLabels" not in ep, "a label of the exporter's must not replace the cluster's name"
relabel = {r["targetLabel"]: r["sourceLabels"] for r in ep["relabelings"] if r.get("action", "replace") == "replace"}
assert relabel == {"namespace": ["__meta_kubernetes_namespace"], "pod": ["__meta_kubernetes_pod_name"],
                   "name": ["__meta_kubernetes_pod_label_valkey_gomomento_com_cluster"],
                   "shard": ["__meta_kubernetes_pod_label_valkey_gomomento_com_shard"]}, relabel
assert pod_monitor(sys.argv[2])["spec"]["namespaceSelector"] == {"any": False, "matchNames": ["team-a"]}
PY
}
check "podMonitor on: PodMonitor of member pods on port metrics, relabelled to namespace, pod, name (cluster), shard; namespaceSelector passed through" pod_monitor

network_policy() { # default render: webhook port from anywhere, admin port kept; from/metricsFrom; off
  cat > "$tmp/np-values.yaml" <<'YAML'
webhook:
  networkPolicy:
    from: [{ipBlock: {cidr: 10.0.0.10/32}}]
    metricsFrom: [{namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: monitoring}}}]
YAML
  render -f "$tmp/np-values.yaml" > "$tmp/np-from.yaml" || return 1
  render --set webhook.networkPolicy.enabled=false > "$tmp/np-off.yaml" || return 1
  python3 - "$tmp/default.yaml" "$tmp/np-from.yaml" "$tmp/np-off.yaml" <<'PY2'
import sys, yaml
load = lambda f: [d for d in yaml.safe_load_all(open(f)) if d]
def policy(docs):
    (np,) = [d for d in docs if d["kind"] == "NetworkPolicy"]
    (deploy,) = [d for d in docs if d["kind"] == "Deployment"]
    pod_labels = deploy["spec"]["template"]["metadata"]["labels"]
    assert np["metadata"]["namespace"] == "ops"
    assert all(pod_labels.get(k) == v for k, v in np["spec"]["podSelector"]["matchLabels"].items()), "selects the operator's pods"
    assert np["spec"]["policyTypes"] == ["Ingress"], np["spec"]["policyTypes"]
    webhook, admin = np["spec"]["ingress"]
    assert webhook["ports"] == [{"protocol": "TCP", "port": 9443}], webhook
    assert admin["ports"] == [{"protocol": "TCP", "port": 8080}], admin
    return webhook, admin
webhook, admin = policy(load(sys.argv[1]))
assert "from" not in webhook and "from" not in admin, "by default: any address, these two ports only"
webhook, admin = policy(load(sys.argv[2]))
assert webhook["from"] == [{"ipBlock": {"cidr": "10.0.0.10/32"}},
                           {"podSelector": {"matchLabels": {"app.kubernetes.io/name": "valkey-operator-test"}}}], webhook
assert admin["from"] == [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}], admin
assert not [d for d in load(sys.argv[3]) if d["kind"] == "NetworkPolicy"], "webhook.networkPolicy.enabled=false still renders it"
PY2
}
check "NetworkPolicy by default: ingress only to the webhook port (from webhook.networkPolicy.from, default any) and the admin port (metricsFrom)" network_policy
node_delete_fails_open() { # namespace deletion never waits for the operator
  python3 - "$tmp/default.yaml" <<'PY2'
import sys, yaml
(vwc,) = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d and d["kind"] == "ValidatingWebhookConfiguration"]
nodes = [w for w in vwc["webhooks"] if any("valkeynodes" in r["resources"] for r in w["rules"])]
assert len(nodes) == 2, [w["name"] for w in nodes]
for w in nodes:
    ops = {o for r in w["rules"] for o in r["operations"]}
    if "DELETE" in ops:
        assert ops == {"DELETE"} and w["failurePolicy"] == "Ignore", w
    else:
        assert w["failurePolicy"] == "Fail" and ops == {"CREATE", "UPDATE"}, w
    (cond,) = w["matchConditions"]
    for user in ("generic-garbage-collector", "namespace-controller", "system:kube-controller-manager"):
        assert user in cond["expression"] and cond["expression"].startswith("!("), cond
fail_closed = [w["name"] for w in vwc["webhooks"] if w["failurePolicy"] == "Fail"
               and any("DELETE" in r["operations"] for r in w["rules"])]
assert not fail_closed, "DELETE fail-closed: %s" % fail_closed
PY2
}
check "ValkeyNode DELETE: own webhook entry, failurePolicy Ignore; no DELETE fail-closed; GC and namespace controller skipped" node_delete_fails_open
DASHBOARD=$CHART/files/dashboard.json
dashboard_valid() { # JSON, Grafana's shape, every query on the datasource variable, no overlapping panels
  python3 - "$DASHBOARD" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
assert d["uid"] == "valkey-operator" and d["title"] and d["schemaVersion"] >= 39, "uid, title, schemaVersion"
variables = {v["name"]: v for v in d["templating"]["list"]}
assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
for name in ("namespace", "cluster"):
    assert variables[name]["type"] == "query" and variables[name]["definition"].startswith("label_values(valkey_operator_cluster_info"), name
ds = {"type": "prometheus", "uid": "${datasource}"}
assert all(variables[n]["datasource"] == ds for n in ("namespace", "cluster"))
panels = d["panels"]
assert len({p["id"] for p in panels}) == len(panels), "panel ids are unique"
cells = set()
for p in panels:
    g = p["gridPos"]
    assert g["x"] >= 0 and g["w"] > 0 and g["x"] + g["w"] <= 24, p["title"]
    mine = {(x, y) for x in range(g["x"], g["x"] + g["w"]) for y in range(g["y"], g["y"] + g["h"])}
    assert not mine & cells, "overlaps: " + p["title"]
    cells |= mine
    if p["type"] != "row":
        assert p["title"] and p["datasource"] == ds and p["targets"], p["title"]
        assert all(t["datasource"] == ds and t["expr"] for t in p["targets"]), p["title"]
PY
}
check "files/dashboard.json: valid JSON, schemaVersion 39+, datasource/namespace/cluster variables, every query on \$datasource, no overlap" dashboard_valid
known_metrics() {
  python3 - "$DASHBOARD" "$CHART/files/rules.yaml" "$METRICS" <<'PY'
import re, sys
allowed, listed = set(), set()
for line in sys.argv[3].split("\n"):
    if line.strip():
        name, kind = line.split()
        listed.add(name); allowed.add(name)
        if kind == "histogram":
            allowed |= {name + s for s in ("_bucket", "_sum", "_count")}
names = lambda f: set(re.findall(r"valkey_operator_[a-z0-9_]*[a-z0-9]", open(f).read()))
dashboard, rules = names(sys.argv[1]), names(sys.argv[2])
unknown = (dashboard | rules) - allowed
assert not unknown, "not an operator metric: %s" % sorted(unknown)
shown = {n for n in listed if any(m == n or m.startswith(n + "_") and m[len(n) + 1:] in ("bucket", "sum", "count") for m in dashboard)}
assert shown == listed, "not on the dashboard: %s" % sorted(listed - shown)
PY
}
check "the dashboard and the alert rules use only the operator's metrics (METRICS), the dashboard every one" known_metrics
exporter_metrics() { # the Valkey row and the members' alerts: only the exporter's metrics, filtered like the rest
  python3 - "$DASHBOARD" "$CHART/files/rules.yaml" "$EXPORTER_METRICS" <<'PY'
import json, re, sys, yaml
allowed = set(sys.argv[3].split())
FILTER = 'namespace=~"$namespace", name=~"$cluster"'
panels = [p for p in json.load(open(sys.argv[1]))["panels"] if any("redis_" in t["expr"] for t in p.get("targets", []))]
assert len(panels) >= 8, "the Valkey row: %d panels" % len(panels)
used = set()
for p in panels:
    assert "Valkey" in p["title"], p["title"]
    for t in p["targets"]:
        expr = t["expr"]
        assert re.match(r"[a-z_]+( by \([a-z_, ]+\))? \(", expr), "%s: starts with an aggregation: %s" % (p["title"], expr)
        names = re.findall(r"\bredis_[a-z0-9_]*[a-z0-9]", expr)
        selectors = re.findall(r"\bredis_[a-z0-9_]*[a-z0-9]\{([^}]*)\}", expr)
        assert names and len(selectors) == len(names), "%s: a redis_ metric without a selector: %s" % (p["title"], expr)
        assert all(s.startswith(FILTER) for s in selectors), "%s: not filtered by $namespace and $cluster: %s" % (p["title"], expr)
        used |= set(names)
rules = [r for g in yaml.safe_load(open(sys.argv[2])) for r in g["rules"]]
for r in rules:
    used |= set(re.findall(r"\bredis_[a-z0-9_]*[a-z0-9]", r["expr"]))
assert not used - allowed, "not an exporter metric: %s" % sorted(used - allowed)
PY
}
check "the dashboard's Valkey panels and the Valkey alerts use only the exporter's metrics (EXPORTER_METRICS), each filtered by \$namespace and \$cluster" exporter_metrics
dashboard_queries_parse() { # each panel query as a recording rule, Grafana's variables replaced
  python3 - "$DASHBOARD" > "$tmp/dashboard-rules.yaml" <<'PY' || return 1
import json, sys, yaml
d = json.load(open(sys.argv[1]))
subst = {"$__rate_interval": "5m", "$__range": "1h", "$namespace": ".*", "$cluster": ".*"}
rules = []
for p in d["panels"]:
    for t in p.get("targets", []):
        expr = t["expr"]
        for k, v in subst.items():
            expr = expr.replace(k, v)
        assert "$" not in expr, t["expr"]
        rules.append({"record": "dashboard:query_%d" % len(rules), "expr": expr})
print(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}, sort_keys=False))
PY
  "$PROMTOOL" check rules "$tmp/dashboard-rules.yaml" >&2
}
PROMTOOL="$CACHE/promtool-v$PROMTOOL_VERSION/bin/promtool"
check "promtool: every dashboard query parses" dashboard_queries_parse
render --set monitoring.grafanaDashboard.enabled=true --set monitoring.grafanaDashboard.namespace=grafana \
  --set monitoring.grafanaDashboard.annotations.grafana_folder=Valkey > "$tmp/dashboard.yaml"
render --set monitoring.grafanaDashboard.enabled=true --set monitoring.grafanaDashboard.label=dashboards \
  --set-string monitoring.grafanaDashboard.labelValue=valkey > "$tmp/dashboard-label.yaml"
dashboard_configmap() {
  python3 - "$tmp/default.yaml" "$tmp/monitoring.yaml" "$tmp/dashboard.yaml" "$tmp/dashboard-label.yaml" "$DASHBOARD" <<'PY'
import json, sys, yaml
def dashboards(f):
    return [d for d in yaml.safe_load_all(open(f)) if d and d["kind"] == "ConfigMap" and d["metadata"]["name"] == "valkey-operator-dashboard"]
assert not dashboards(sys.argv[1]) and not dashboards(sys.argv[2]), "rendered while monitoring.grafanaDashboard.enabled is false"
(cm,) = dashboards(sys.argv[3])
meta = cm["metadata"]
assert meta["labels"]["grafana_dashboard"] == "1" and meta["labels"]["app.kubernetes.io/instance"] == "vo", meta["labels"]
assert meta["namespace"] == "grafana" and meta["annotations"] == {"grafana_folder": "Valkey"}, meta
assert list(cm["data"]) == ["valkey-operator.json"] and json.loads(cm["data"]["valkey-operator.json"]) == json.load(open(sys.argv[5]))
(cm,) = dashboards(sys.argv[4])
assert cm["metadata"]["labels"]["dashboards"] == "valkey" and "grafana_dashboard" not in cm["metadata"]["labels"]
assert cm["metadata"]["namespace"] == "ops" and "annotations" not in cm["metadata"]
PY
}
check "dashboard ConfigMap only when enabled: sidecar label (configurable), namespace, annotations, data = files/dashboard.json" dashboard_configmap

render --set personaRoles.create=false > "$tmp/no-personas.yaml"
personas() { # default render, render without them, the plain manifests
  python3 - "$tmp/default.yaml" "$tmp/no-personas.yaml" "$REPO/manifests/rbac/platform-team.yaml" "$REPO/manifests/rbac/product-team.yaml" <<'PY'
import sys, yaml
load = lambda *fs: [d for f in fs for d in yaml.safe_load_all(open(f)) if d]
names = ["valkey-menu-reader", "valkey-platform-team", "valkey-product-team", "valkey-viewer"]
def personas(docs):
    return {d["metadata"]["name"]: d for d in docs if d["kind"] == "ClusterRole" and not d["metadata"]["name"].startswith("valkey-operator")}
def essence(role): # name, rules, labels other than the release's
    labels = {k: v for k, v in role["metadata"]["labels"].items() if k not in ("app.kubernetes.io/instance", "app.kubernetes.io/version", "helm.sh/chart")}
    return role["metadata"]["name"], role["rules"], labels
default, plain = load(sys.argv[1]), load(sys.argv[3], sys.argv[4])
chart = personas(default)
assert sorted(chart) == names, sorted(chart)
assert all(r["metadata"]["labels"]["app.kubernetes.io/instance"] == "vo" and "helm.sh/chart" in r["metadata"]["labels"] for r in chart.values())
assert not personas(load(sys.argv[2])), "personaRoles.create=false still renders them"
assert [essence(chart[n]) for n in names] == [essence(personas(plain)[n]) for n in names], "the plain manifests' persona roles differ"
# Example bindings: off in the chart, in the plain manifests (tests/api_e2e.rs binds as these groups).
bindings = lambda docs: {(d["kind"], d["metadata"]["name"], d["metadata"].get("namespace")): (d["roleRef"]["name"], [s["name"] for s in d["subjects"]])
                         for d in docs if d["kind"] in ("RoleBinding", "ClusterRoleBinding") and not d["metadata"]["name"].startswith("valkey-operator")}
assert not bindings(default) and not [d for d in default if d["kind"] == "Namespace"], "example bindings rendered by default"
assert bindings(plain) == {("ClusterRoleBinding", "valkey-platform-team", None): ("valkey-platform-team", ["platform-team"]),
                           ("ClusterRoleBinding", "valkey-menu-reader", None): ("valkey-menu-reader", ["team-a"]),
                           ("RoleBinding", "valkey-product-team", "team-a"): ("valkey-product-team", ["team-a"])}, bindings(plain)
PY
}
check "persona ClusterRoles by default (none with personaRoles.create=false), as in manifests/rbac/ with its example bindings" personas
check "promtool check rules: the chart's alerting rules" \
  bash -c "printf 'groups:\n' > '$tmp/rules.yaml' && sed 's/^/  /' '$CHART/files/rules.yaml' >> '$tmp/rules.yaml' && '$PROMTOOL' check rules '$tmp/rules.yaml' >&2"

# Chart parity with the charts users already run: a ServiceAccount of their naming (or their
# own) with workload-identity annotations, the image by digest, extra env/volumes/mounts,
# `global` accepted, the recommended labels.
render --set serviceAccount.name=vo-sa --set-string 'serviceAccount.annotations.eks\.amazonaws\.com/role-arn=arn:aws:iam::1:role/vo' \
  --set image.digest=sha256:$(printf 'a%.0s' $(seq 64)) --set global.imageRegistry=r.example \
  --set 'extraEnv[0].name=HTTPS_PROXY' --set 'extraEnv[0].value=http://proxy:3128' \
  --set 'extraVolumes[0].name=ca' --set 'extraVolumes[0].configMap.name=s3-ca' \
  --set 'extraVolumeMounts[0].name=ca' --set 'extraVolumeMounts[0].mountPath=/etc/s3-ca' > "$tmp/parity.yaml"
render --set serviceAccount.create=false --set serviceAccount.name=theirs > "$tmp/own-sa.yaml"
parity() {
  python3 - "$tmp/parity.yaml" "$tmp/own-sa.yaml" "$tmp/default.yaml" <<'PY'
import sys, yaml
load = lambda f: [d for d in yaml.safe_load_all(open(f)) if d]
docs, own, default = load(sys.argv[1]), load(sys.argv[2]), load(sys.argv[3])
(sa,) = [d for d in docs if d["kind"] == "ServiceAccount"]
assert sa["metadata"]["name"] == "vo-sa" and sa["metadata"]["annotations"] == {"eks.amazonaws.com/role-arn": "arn:aws:iam::1:role/vo"}, sa
subjects = [s["name"] for d in docs if d["kind"] in ("ClusterRoleBinding", "RoleBinding") and d["metadata"]["name"] == "valkey-operator" for s in d["subjects"]]
assert subjects == ["vo-sa", "vo-sa"], subjects
(dep,) = [d for d in docs if d["kind"] == "Deployment"]
pod = dep["spec"]["template"]["spec"]
(c,) = pod["containers"]
env = {e["name"]: e.get("value") for e in c["env"]}
assert pod["serviceAccountName"] == "vo-sa" and env["OPERATOR_USERNAME"] == "system:serviceaccount:ops:vo-sa", env
assert c["image"] == "ghcr.io/valkey-operator/valkey-operator@sha256:" + "a" * 64, c["image"]
assert env["HTTPS_PROXY"] == "http://proxy:3128"
assert {"name": "ca", "configMap": {"name": "s3-ca"}} in pod["volumes"] and {"name": "ca", "mountPath": "/etc/s3-ca"} in c["volumeMounts"]
assert not [d for d in own if d["kind"] == "ServiceAccount"], "serviceAccount.create=false still renders one"
(dep,) = [d for d in own if d["kind"] == "Deployment"]
assert dep["spec"]["template"]["spec"]["serviceAccountName"] == "theirs"
for d in default:
    labels = d["metadata"].get("labels", {})
    if labels.get("app.kubernetes.io/instance") == "vo":
        assert labels.get("app.kubernetes.io/managed-by") == "Helm" and labels.get("app.kubernetes.io/part-of") == "valkey-operator", (d["kind"], labels)
PY
}
check "chart parity: serviceAccount (name, annotations, create=false), image by digest, extraEnv/Volumes/Mounts, global, recommended labels" parity
render --set webhook.certManager.enabled=false --set webhook.caBundle=$(printf 'PEM' | base64) > "$tmp/test-no-cm.yaml"
helm_test_pod() {
  python3 - "$tmp/default.yaml" "$tmp/test-no-cm.yaml" <<'PY'
import sys, yaml
load = lambda f: [d for d in yaml.safe_load_all(open(f)) if d]
for path, ca in ((sys.argv[1], "secret"), (sys.argv[2], "configMap")):
    docs = load(path)
    (pod,) = [d for d in docs if d["kind"] == "Pod"]
    meta, spec = pod["metadata"], pod["spec"]
    assert meta["annotations"]["helm.sh/hook"] == "test", meta
    assert meta["labels"]["app.kubernetes.io/name"] == "valkey-operator-test", "not selected by the operator's Services, PDB, NetworkPolicy"
    (c,) = spec["containers"]
    assert c["command"] == ["valkey-operator", "check-webhook", "--url", "https://valkey-operator-webhook.ops.svc:443/healthz", "--ca-file", "/ca/ca.crt"], c["command"]
    assert spec["automountServiceAccountToken"] is False and spec["securityContext"]["runAsNonRoot"] and c["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    (vol,) = spec["volumes"]
    assert ca in vol, vol
    if ca == "configMap":
        (cm,) = [d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"] == vol["configMap"]["name"]]
        assert cm["data"]["ca.crt"] == "PEM" and cm["metadata"]["annotations"]["helm.sh/hook"] == "test"
    else:
        assert vol["secret"]["secretName"] == "valkey-operator-webhook-cert", vol
PY
}
check "helm test pod: checks the webhook through its Service against the caBundle (cert-manager's ca.crt, or webhook.caBundle), restricted, not the operator's labels" helm_test_pod
check "a malformed image digest is refused by the values schema" bash -c "! '$HELM' template vo '$CHART' --set image.digest=latest >/dev/null 2>&1"
tenant_bindings() { # file -> "<kind> <namespace>" of each binding of valkey-operator-tenants
  python3 -c 'import sys, yaml
for d in yaml.safe_load_all(open(sys.argv[1])):
    if d and d["kind"].endswith("Binding") and d["roleRef"]["name"] == "valkey-operator-tenants":
        print(d["kind"], d["metadata"].get("namespace", ""))' "$1" | sort
}
watch_namespaces() { # scoped: tenant role bound per listed namespace and the release's; default: cluster-wide
  render -f "$REPO/e2e/chart-values.yaml" --set webhook.caBundle=Zm9v \
    --set 'watchNamespaces={team-a,team-b}' > "$tmp/scoped.yaml" || return 1
  render -f "$REPO/e2e/chart-values.yaml" --set webhook.caBundle=Zm9v > "$tmp/all.yaml" || return 1
  [ "$(tenant_bindings "$tmp/scoped.yaml" | tr '\n' ,)" = "RoleBinding ops,RoleBinding team-a,RoleBinding team-b," ] || return 1
  [ "$(tenant_bindings "$tmp/all.yaml" | tr '\n' ,)" = "ClusterRoleBinding ," ] || return 1
  grep -q '^  watchNamespaces: team-a,team-b$' "$tmp/scoped.yaml" || return 1
  ! grep -q '^  watchNamespaces:' "$tmp/all.yaml" || return 1
  ! render --set 'watchNamespaces={Team_A}' >/dev/null 2>&1
}
check "watchNamespaces: tenant role bound in the listed namespaces and the release's only (cluster-wide without it), the settings key set, a bad name refused" watch_namespaces

"$REPO/e2e/render-manifests.sh" "$tmp/rendered" >/dev/null
drift() {
  local f ok=0
  for f in manifests/rbac/operator.yaml manifests/rbac/platform-team.yaml manifests/rbac/product-team.yaml \
      manifests/install/operator.yaml webhooks/validating.yaml; do
    diff -u "$REPO/$f" "$tmp/rendered/$f" >&2 || { echo "$f differs from the chart; run make manifests" >&2; ok=1; }
  done
  return $ok
}
check "plain manifests match the chart (make manifests)" drift

echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
