//! Valkey's own metrics (issue 32) on the local cluster: a ValkeyConfig with `metrics` gives
//! every member the exporter sidecar (`oliver006/redis_exporter:v1.45.0`, e2e/images/build.sh),
//! and a real Prometheus (Debian's 2.42, `registry.local/prometheus:2.42`) in a namespace of
//! its own scrapes all of them through the cluster's NetworkPolicy, which admits the config's
//! `scrapers` (the Prometheus pods of that namespace) to port 9121 and no one else: neither a
//! pod of another namespace nor an unlabelled pod of the monitoring namespace connects. Every
//! data-plane panel of the chart's dashboard (charts/valkey-operator/files/dashboard.json)
//! has data for the cluster, and the exporter's ACL user reads `INFO` but not `CONFIG` or keys.
//!
//! Debian builds Prometheus without Kubernetes service discovery (its NEWS: "Kubernetes support
//! has been completely removed"; `kubernetes_sd_configs` does not parse), so the scrape config
//! lists the members as the chart's PodMonitor discovers them: each member's container port
//! named `metrics` (a native sidecar's port: pod discovery includes init containers since
//! Prometheus 2.11), labelled `namespace`, `pod`, `name` (the cluster) and `shard`. The
//! operator's own `/metrics` is scraped too (honoring its labels, as the chart's
//! ServiceMonitor does), for panels that join the members' series with the operator's.
#![cfg(feature = "e2e")]

use std::time::Duration;

use anyhow::{Context as _, bail, ensure};
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret};
use kube::api::PostParams;
use kube::{Api, Client, ResourceExt};
use serde_json::{Value as Json, json};

use valkey_e2e::harness::{
    Outcome, TestNamespace, client, delete_cluster_scoped, kubectl_outcome, wait_for,
};
use valkey_e2e::valkey::{member_pods, operator_pods, pod_ready};
use valkey_e2e::workload::{Menu, active_cluster_on, apply, missing_confirmed, write_confirmed};
use valkey_operator::api::ValkeyConfig;
use valkey_operator::api::constants::{LABEL_SHARD, METRICS_ACL_USERNAME};

/// The ValkeyCluster of the tenant namespace.
const CLUSTER: &str = "scraped";
/// 3 shards of a primary and a replica: 6 members, 6 exporters.
const SHAPE: (i32, i32) = (3, 1);
/// The exporter sidecar's container and port name, and its port.
const EXPORTER: &str = "metrics";
const EXPORTER_PORT: u16 = 9121;
/// The key of the exporter's password (user `_valkey-metrics`) in the cluster's
/// `<cluster>-acl` Secret.
const METRICS_PASSWORD_KEY: &str = "metrics-password";
/// The exporter's series are `redis_*` (its default namespace; the sidecar sets none).
const EXPORTER_SERIES: &str = "redis_";
const PROMETHEUS_IMAGE: &str = "registry.local/prometheus:2.42";
/// The label the config's scrapers select the Prometheus pods by.
const PROMETHEUS_LABEL: (&str, &str) = ("app.kubernetes.io/name", "prometheus");
const PROMETHEUS: &str = "prometheus";
/// A pod `shell` (busybox wget and nc, valkey-cli) in each namespace the test probes from.
const SHELL: &str = "shell";
const SHELL_IMAGE: &str = "registry.local/sleep:1";
const DASHBOARD: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../charts/valkey-operator/files/dashboard.json"
);

/// The namespaces and menu objects of one run.
struct Scene<'a> {
    /// Prometheus, and a shell pod without its label.
    monitoring: &'a str,
    /// The ValkeyCluster, and a shell pod (a client of the cluster).
    tenant: &'a str,
    /// A shell pod no scraper names.
    stranger: &'a str,
    /// The menu's config (the base).
    base: &'a str,
    /// The config with `metrics`, on `base`.
    config: &'a str,
}

/// A scrape target as the PodMonitor's relabelings make it.
struct Target {
    ip: String,
    port: i32,
    pod: String,
    shard: String,
}

/// A dashboard panel: its title and its queries.
struct Panel {
    title: String,
    exprs: Vec<String>,
}

#[tokio::test]
async fn a_real_prometheus_scrapes_every_member_through_the_network_policy_and_every_valkey_panel_has_data()
-> anyhow::Result<()> {
    let client = client().await?;
    let panels = data_plane_panels()?;
    let monitoring = TestNamespace::create(&client, "e2e-monitoring").await?;
    let tenant = TestNamespace::create(&client, "e2e-metrics").await?;
    // Members with their exporter sidecar must be admitted where product teams enforce the
    // restricted Pod Security Standard.
    valkey_e2e::harness::kubectl_run(&[
        "label",
        "namespace",
        &tenant.name,
        "pod-security.kubernetes.io/enforce=restricted",
        "pod-security.kubernetes.io/enforce-version=latest",
    ])?;
    let stranger = TestNamespace::create(&client, "e2e-stranger").await?;
    let menu = Menu::publish(&client, "e2e-metrics", "9.1.2").await?;
    let config = format!("{}-scraped", menu.config);
    let scene = Scene {
        monitoring: &monitoring.name,
        tenant: &tenant.name,
        stranger: &stranger.name,
        base: &menu.config,
        config: &config,
    };
    let outcome = scrape_and_check(&client, &scene, &panels).await;
    // The child config before its base; the namespaces go when their guards drop.
    let _ = delete_cluster_scoped::<ValkeyConfig>(&client, &config).await;
    let removed = menu.remove(&client).await;
    outcome?;
    removed
}

async fn scrape_and_check(client: &Client, s: &Scene<'_>, panels: &[Panel]) -> anyhow::Result<()> {
    apply(
        client,
        "config",
        scraped_config(s.config, s.base, s.monitoring),
    )
    .await?;
    // The shells start while the cluster forms.
    for ns in [s.monitoring, s.tenant, s.stranger] {
        create_shell(client, ns).await?;
    }
    active_cluster_on(client, s.tenant, CLUSTER, s.config, SHAPE).await?;
    let targets = member_targets(client, s.tenant).await?;
    let members = usize::try_from(SHAPE.0 * (1 + SHAPE.1))?;
    ensure!(
        targets.len() == members,
        "{} member pods with an exporter, want {members}",
        targets.len()
    );
    let prometheus = start_prometheus(client, s.monitoring, s.tenant, &targets).await?;
    for ns in [s.monitoring, s.tenant, s.stranger] {
        running_ip(client, ns, SHELL).await?;
    }
    every_member_is_up(s.monitoring, &prometheus, members).await?;
    // Traffic while Prometheus watches: writes (replicated: offsets move), hits and misses.
    write_confirmed(client, s.tenant, CLUSTER, "m", 2000).await?;
    ensure!(missing_confirmed(client, s.tenant, CLUSTER, "m", 2000).await? == 0);
    ensure!(missing_confirmed(client, s.tenant, CLUSTER, "absent", 200).await? == 200);
    every_panel_has_data(s.monitoring, &prometheus, s.tenant, panels).await?;
    only_prometheus_reaches_the_exporters(s, &targets).await?;
    the_exporters_user_reads_info_but_not_config_or_keys(client, s.tenant, &targets[0].ip).await
}

/// A config on `base` whose members run the exporter (its default image and resources),
/// scraped by the Prometheus pods of namespace `monitoring`.
fn scraped_config(name: &str, base: &str, monitoring: &str) -> Json {
    let (key, value) = PROMETHEUS_LABEL;
    json!({"apiVersion": "valkey.gomomento.com/v1alpha1", "kind": "ValkeyConfig",
           "metadata": {"name": name},
           "spec": {"baseRef": base, "metrics": {"scrapers": [{
               "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": monitoring}},
               "podSelector": {"matchLabels": {key: value}}}]}}})
}

/// The restricted Pod Security Standard's pod and container settings.
fn restricted(pod: &mut Json) {
    pod["spec"]["securityContext"] =
        json!({"runAsNonRoot": true, "seccompProfile": {"type": "RuntimeDefault"}});
    for c in pod["spec"]["containers"]
        .as_array_mut()
        .into_iter()
        .flatten()
    {
        c["securityContext"] =
            json!({"allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]}});
    }
}

/// Creates the pod `shell` of `ns` (it sleeps; the test execs in it).
async fn create_shell(client: &Client, ns: &str) -> anyhow::Result<()> {
    let mut pod = json!({"metadata": {"name": SHELL},
        "spec": {"terminationGracePeriodSeconds": 0, "containers": [{"name": SHELL,
            "image": SHELL_IMAGE, "command": ["sleep", "3600"]}]}});
    restricted(&mut pod);
    Api::<Pod>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &serde_json::from_value(pod)?)
        .await?;
    Ok(())
}

/// The IP of pod `name` of `ns` once it is Ready.
async fn running_ip(client: &Client, ns: &str, name: &str) -> anyhow::Result<String> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    wait_for(
        &format!("pod {ns}/{name} to be Ready"),
        Duration::from_secs(120),
        Duration::from_millis(500),
        || async {
            let pod = pods.get(name).await?;
            let ip = pod.status.as_ref().and_then(|s| s.pod_ip.clone());
            match ip {
                Some(ip) if pod_ready(&pod) => Ok(Some(ip)),
                _ => bail!("{:?}", pod.status.and_then(|s| s.container_statuses)),
            }
        },
    )
    .await
}

/// Every member's exporter as the PodMonitor finds it: the port named `metrics` of the
/// member's native sidecar (an init container named `metrics` that restarts Always).
async fn member_targets(client: &Client, ns: &str) -> anyhow::Result<Vec<Target>> {
    let mut targets = Vec::new();
    for pod in member_pods(client, ns, CLUSTER).await? {
        let name = pod.name_any();
        let spec = pod.spec.as_ref().context("pod spec")?;
        let sidecar = spec
            .init_containers
            .iter()
            .flatten()
            .find(|c| c.name == EXPORTER)
            .with_context(|| format!("member {name} has no init container {EXPORTER}"))?;
        ensure!(
            sidecar.restart_policy.as_deref() == Some("Always"),
            "member {name}'s {EXPORTER} is not a native sidecar: restartPolicy {:?}",
            sidecar.restart_policy
        );
        let port = sidecar
            .ports
            .iter()
            .flatten()
            .find(|p| p.name.as_deref() == Some(EXPORTER))
            .with_context(|| format!("member {name}'s sidecar has no port named {EXPORTER}"))?;
        ensure!(port.container_port == i32::from(EXPORTER_PORT));
        let ip = pod.status.as_ref().and_then(|s| s.pod_ip.clone());
        targets.push(Target {
            ip: ip.with_context(|| format!("member {name} has no IP"))?,
            port: port.container_port,
            shard: pod.labels().get(LABEL_SHARD).cloned().unwrap_or_default(),
            pod: name,
        });
    }
    Ok(targets)
}

/// prometheus.yml: every 5 s, job `valkey` (the members' exporters, labelled as the chart's
/// PodMonitor labels them) and job `valkey-operator` (its admin port, labels honored).
fn prometheus_config(tenant: &str, targets: &[Target], operators: &[String]) -> Json {
    let members: Vec<Json> = targets
        .iter()
        .map(|t| {
            json!({"targets": [format!("{}:{}", t.ip, t.port)],
                   "labels": {"namespace": tenant, "pod": t.pod, "name": CLUSTER, "shard": t.shard}})
        })
        .collect();
    json!({"global": {"scrape_interval": "5s", "scrape_timeout": "5s"},
           "scrape_configs": [
               {"job_name": "valkey", "static_configs": members},
               {"job_name": "valkey-operator", "honor_labels": true,
                "static_configs": [{"targets": operators}]}]})
}

/// Prometheus in `monitoring` (restricted, storage in an emptyDir), scraping `targets`; its
/// pod IP once it is Ready.
async fn start_prometheus(
    client: &Client,
    monitoring: &str,
    tenant: &str,
    targets: &[Target],
) -> anyhow::Result<String> {
    let operators: Vec<String> = operator_pods(client)
        .await?
        .iter()
        .filter_map(|p| p.status.as_ref()?.pod_ip.clone())
        .map(|ip| format!("{ip}:8080"))
        .collect();
    let config = serde_yaml_ng::to_string(&prometheus_config(tenant, targets, &operators))?;
    let map: ConfigMap = serde_json::from_value(json!({"metadata": {"name": PROMETHEUS},
        "data": {"prometheus.yml": config}}))?;
    Api::<ConfigMap>::namespaced(client.clone(), monitoring)
        .create(&PostParams::default(), &map)
        .await?;
    let (key, value) = PROMETHEUS_LABEL;
    let mut pod = json!({"metadata": {"name": PROMETHEUS, "labels": {key: value}},
        "spec": {"terminationGracePeriodSeconds": 0,
            "containers": [{"name": PROMETHEUS, "image": PROMETHEUS_IMAGE,
                "args": ["--config.file=/etc/prometheus/prometheus.yml",
                         "--storage.tsdb.path=/prometheus", "--web.listen-address=:9090"],
                "ports": [{"name": "web", "containerPort": 9090}],
                "readinessProbe": {"httpGet": {"path": "/-/ready", "port": 9090}, "periodSeconds": 1},
                "volumeMounts": [{"name": "config", "mountPath": "/etc/prometheus"},
                                 {"name": "data", "mountPath": "/prometheus"}]}],
            "volumes": [{"name": "config", "configMap": {"name": PROMETHEUS}},
                        {"name": "data", "emptyDir": {}}]}});
    restricted(&mut pod);
    Api::<Pod>::namespaced(client.clone(), monitoring)
        .create(&PostParams::default(), &serde_json::from_value(pod)?)
        .await?;
    running_ip(client, monitoring, PROMETHEUS).await
}

/// Runs `argv` in the shell pod of `ns`.
fn exec(ns: &str, argv: &[&str]) -> anyhow::Result<Outcome> {
    let mut args = vec!["-n", ns, "exec", SHELL, "--"];
    args.extend_from_slice(argv);
    kubectl_outcome(&args)
}

/// Percent-encodes everything but RFC 3986's unreserved characters.
fn url_encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                char::from(b).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// GET `path` of Prometheus's HTTP API from the shell pod of `ns` (busybox wget): the answer's
/// `data`.
fn prometheus_api(ns: &str, prometheus: &str, path: &str) -> anyhow::Result<Json> {
    let url = format!("http://{prometheus}:9090{path}");
    let out = exec(ns, &["wget", "-q", "-O", "-", &url])?;
    ensure!(out.ok, "wget {url}: {}{}", out.stdout, out.stderr);
    let answer: Json = serde_json::from_str(&out.stdout)
        .with_context(|| format!("{url} answered {}", out.stdout))?;
    ensure!(answer["status"] == "success", "{url}: {answer}");
    Ok(answer["data"].clone())
}

/// Instant queries in one exec (a wget each): their results, in order.
fn query_all(ns: &str, prometheus: &str, promqls: &[String]) -> anyhow::Result<Vec<Json>> {
    // Percent-encoded, a URL holds no quote; each answer is one line of JSON.
    let script: String = promqls
        .iter()
        .map(|q| {
            format!(
                "wget -q -O - 'http://{prometheus}:9090/api/v1/query?query={}' || printf failed; echo\n",
                url_encode(q)
            )
        })
        .collect();
    let out = exec(ns, &["sh", "-c", &script])?;
    let lines: Vec<&str> = out.stdout.lines().filter(|l| !l.is_empty()).collect();
    ensure!(
        lines.len() == promqls.len(),
        "{} queries, {} answers: {}{}",
        promqls.len(),
        lines.len(),
        out.stdout,
        out.stderr
    );
    promqls
        .iter()
        .zip(lines)
        .map(|(q, line)| {
            let answer: Json = serde_json::from_str(line)
                .with_context(|| format!("{q}: Prometheus answered {line} {}", out.stderr))?;
            ensure!(answer["status"] == "success", "{q}: {answer}");
            Ok(answer["data"].clone())
        })
        .collect()
}

/// How many series (or values) a query's result holds.
fn series(data: &Json) -> usize {
    match data["resultType"].as_str() {
        Some("vector" | "matrix") => data["result"].as_array().map_or(0, Vec::len),
        Some("scalar" | "string") => 1,
        _ => 0,
    }
}

/// Waits until Prometheus scrapes every member's exporter (`up == 1`), and every exporter
/// reaches its Valkey as `_valkey-metrics` (`redis_up`) and runs no command the user may not
/// (no `redis_exporter_last_scrape_error`); on timeout the error carries each target's health
/// and last scrape error.
async fn every_member_is_up(ns: &str, prometheus: &str, members: usize) -> anyhow::Result<()> {
    let queries = [
        r#"count(up{job="valkey"} == 1)"#,
        r#"count(redis_up{job="valkey"} == 1)"#,
        r#"count(redis_exporter_last_scrape_error{job="valkey"} == 0)"#,
        r#"redis_exporter_last_scrape_error{job="valkey"} > 0"#,
    ]
    .map(str::to_string);
    let up = wait_for(
        &format!("Prometheus to scrape all {members} exporters, each reading its Valkey"),
        Duration::from_secs(120),
        Duration::from_secs(2),
        || async {
            let results = query_all(ns, prometheus, &queries)?;
            let counts: Vec<&str> = results[..3]
                .iter()
                .map(|d| d["result"][0]["value"][1].as_str().unwrap_or("0"))
                .collect();
            if counts.iter().all(|c| *c == members.to_string()) {
                Ok(Some(()))
            } else {
                bail!(
                    "of {members}: {} up, {} redis_up, {} without a scrape error; errors: {}",
                    counts[0],
                    counts[1],
                    counts[2],
                    results[3]["result"]
                )
            }
        },
    )
    .await;
    if let Err(e) = up {
        let targets = prometheus_api(ns, prometheus, "/api/v1/targets?state=active")
            .map(|d| {
                d["activeTargets"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|t| format!("{} {} {}", t["scrapeUrl"], t["health"], t["lastError"]))
                    .collect::<Vec<_>>()
                    .join("\n")
            })
            .unwrap_or_else(|e| format!("{e:#}"));
        return Err(e.context(format!("Prometheus's targets:\n{targets}")));
    }
    Ok(())
}

/// The dashboard's panels on the exporter's series (rows' nested panels included); at least
/// one.
fn data_plane_panels() -> anyhow::Result<Vec<Panel>> {
    fn collect(panels: &Json, into: &mut Vec<Panel>) {
        for p in panels.as_array().into_iter().flatten() {
            let exprs: Vec<String> = p["targets"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|t| t["expr"].as_str().map(str::to_string))
                .collect();
            if exprs.iter().any(|e| e.contains(EXPORTER_SERIES)) {
                let title = p["title"].as_str().unwrap_or_default().to_string();
                into.push(Panel { title, exprs });
            }
            collect(&p["panels"], into);
        }
    }
    let text =
        std::fs::read_to_string(DASHBOARD).with_context(|| format!("reading {DASHBOARD}"))?;
    let dashboard: Json = serde_json::from_str(&text)?;
    let mut panels = Vec::new();
    collect(&dashboard["panels"], &mut panels);
    ensure!(
        !panels.is_empty(),
        "{DASHBOARD} has no panel on the exporter's series ({EXPORTER_SERIES}*)"
    );
    Ok(panels)
}

/// A panel's query as Grafana sends it with namespace `ns` and the cluster selected.
fn substitute(expr: &str, ns: &str) -> String {
    [
        ("${__rate_interval}", "1m"),
        ("$__rate_interval", "1m"),
        ("${__interval}", "1m"),
        ("$__interval", "1m"),
        ("${__range}", "1m"),
        ("$__range_s", "60"),
        ("$__range", "1m"),
        ("${namespace}", ns),
        ("$namespace", ns),
        ("${cluster}", CLUSTER),
        ("$cluster", CLUSTER),
    ]
    .iter()
    .fold(expr.to_string(), |e, (from, to)| e.replace(from, to))
}

/// Waits until every panel has data (some query of it returns a series): rates need two
/// scrapes in their window. Prints each panel's series.
async fn every_panel_has_data(
    monitoring: &str,
    prometheus: &str,
    tenant: &str,
    panels: &[Panel],
) -> anyhow::Result<()> {
    let counts = wait_for(
        "every data-plane panel of the dashboard to have data",
        Duration::from_secs(90),
        Duration::from_secs(3),
        || async {
            let queries: Vec<String> = panels
                .iter()
                .flat_map(|p| p.exprs.iter().map(|e| substitute(e, tenant)))
                .collect();
            let mut results = query_all(monitoring, prometheus, &queries)?.into_iter();
            let mut counts = Vec::new();
            let mut empty = Vec::new();
            for panel in panels {
                let n: usize = results
                    .by_ref()
                    .take(panel.exprs.len())
                    .map(|r| series(&r))
                    .sum();
                if n == 0 {
                    empty.push(format!("{:?}: {:?}", panel.title, panel.exprs));
                }
                counts.push((panel.title.clone(), n));
            }
            if empty.is_empty() {
                Ok(Some(counts))
            } else {
                bail!("panels without data:\n{}", empty.join("\n"))
            }
        },
    )
    .await?;
    for (title, n) in counts {
        println!("panel {title:?}: {n} series");
    }
    Ok(())
}

/// Neither a pod of a namespace no scraper names nor a pod of the monitoring namespace
/// without Prometheus's label connects to any member's exporter port (Prometheus itself
/// scrapes them all: `every_member_is_up`).
async fn only_prometheus_reaches_the_exporters(
    s: &Scene<'_>,
    targets: &[Target],
) -> anyhow::Result<()> {
    // In parallel, one line per member: "<ip> open", or what busybox nc said.
    let script: String = targets
        .iter()
        .map(|t| {
            format!(
                "(echo \"{ip} $(nc -w 3 {ip} {port} -e true 2>&1 && echo open)\") &\n",
                ip = t.ip,
                port = t.port
            )
        })
        .chain(["wait\n".to_string()])
        .collect();
    for (ns, who) in [
        (s.stranger, "a pod of a namespace no scraper names"),
        (
            s.monitoring,
            "a pod of the monitoring namespace without the Prometheus label",
        ),
    ] {
        let out = exec(ns, &["sh", "-c", &script])?;
        let lines: Vec<&str> = out.stdout.lines().filter(|l| !l.is_empty()).collect();
        ensure!(
            lines.len() == targets.len(),
            "{who}: {}{}",
            out.stdout,
            out.stderr
        );
        let open: Vec<&&str> = lines.iter().filter(|l| l.ends_with(" open")).collect();
        ensure!(open.is_empty(), "{who} ({ns}) reached exporters: {open:?}");
        println!("{who}: refused by every member ({})", lines.join("; "));
    }
    Ok(())
}

/// As `_valkey-metrics` (its password from the cluster's Secret), from a client pod of the
/// tenant: `INFO` answers, `CONFIG GET` and a key read are refused (NOPERM).
async fn the_exporters_user_reads_info_but_not_config_or_keys(
    client: &Client,
    tenant: &str,
    member_ip: &str,
) -> anyhow::Result<()> {
    let secret = Api::<Secret>::namespaced(client.clone(), tenant)
        .get(&format!("{CLUSTER}-acl"))
        .await?;
    let password = secret
        .data
        .unwrap_or_default()
        .remove(METRICS_PASSWORD_KEY)
        .with_context(|| format!("Secret {CLUSTER}-acl has no {METRICS_PASSWORD_KEY}"))?;
    let password = String::from_utf8(password.0)?;
    let cli = |args: &[&str]| -> anyhow::Result<String> {
        let mut argv = vec![
            "valkey-cli",
            "-h",
            member_ip,
            "--user",
            METRICS_ACL_USERNAME,
            "--pass",
            &password,
            "--no-auth-warning",
        ];
        argv.extend_from_slice(args);
        let out = exec(tenant, &argv)?;
        Ok(format!("{}{}", out.stdout, out.stderr))
    };
    let info = cli(&["INFO", "memory"])?;
    ensure!(info.contains("used_memory:"), "INFO memory: {info}");
    let config = cli(&["CONFIG", "GET", "maxmemory"])?;
    ensure!(config.contains("NOPERM"), "CONFIG GET maxmemory: {config}");
    let key = cli(&["GET", "m:1"])?;
    ensure!(key.contains("NOPERM"), "GET m:1: {key}");
    Ok(())
}
