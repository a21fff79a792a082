//! What a platform team operating clusters relies on, on a live cluster: `spec.podAnnotations`
//! edits reach running pods within 10 s (added, changed and removed keys; annotations others
//! put on the pods are left alone), status says how to connect and what is in progress
//! (`Progressing` with its reason, `Ready` with the state), a per-cluster state metric names
//! the cluster, the metrics page passes `promtool check metrics`, and `valkey.gomomento.com/paused: "true"` stops every change until removed.
#![cfg(feature = "e2e")]

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail, ensure};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{ListParams, ObjectList, Patch, PatchParams};
use kube::{Api, Client, ResourceExt};
use serde_json::json;

use valkey_e2e::harness::{TestNamespace, client, wait_for};
use valkey_e2e::valkey::{OPERATOR_NAMESPACE, member_pods, pod_metrics, wait_state};
use valkey_e2e::workload::active_cluster;
use valkey_operator::api::{ClusterState, ValkeyCluster, ValkeyNode};

const NAME: &str = "ops";

async fn patch_cluster(client: &Client, ns: &str, patch: serde_json::Value) -> anyhow::Result<()> {
    Api::<ValkeyCluster>::namespaced(client.clone(), ns)
        .patch(NAME, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    Ok(())
}

/// Waits until every member pod's annotations satisfy `ok`; returns how long that took.
async fn pods_annotated(
    client: &Client,
    ns: &str,
    what: &str,
    ok: impl Fn(&BTreeMap<String, String>) -> bool,
) -> anyhow::Result<Duration> {
    let started = Instant::now();
    let ok = &ok;
    wait_for(
        what,
        Duration::from_secs(10),
        Duration::from_millis(200),
        || async move {
            let pods = member_pods(client, ns, NAME).await?;
            ensure!(!pods.is_empty(), "no member pods");
            match pods.iter().find(|p| !ok(p.annotations())) {
                Some(p) => bail!("{}: {:?}", p.name_any(), p.annotations()),
                None => Ok(Some(())),
            }
        },
    )
    .await?;
    Ok(started.elapsed())
}

fn condition(c: &ValkeyCluster, type_: &str) -> Option<(String, String)> {
    c.status
        .as_ref()?
        .conditions
        .iter()
        .find(|x| x.type_ == type_)
        .map(|x| (x.status.clone(), x.reason.clone()))
}

#[tokio::test]
async fn annotations_status_metrics_and_pause_work_on_a_live_cluster() -> anyhow::Result<()> {
    let client = client().await?;
    let ns = TestNamespace::create(&client, "e2e-ops").await?;
    let menu = active_cluster(&client, &ns.name, NAME, "9.0.0", (1, 1)).await?;
    let api: Api<ValkeyCluster> = Api::namespaced(client.clone(), &ns.name);

    status_says_where_to_connect_and_what_is_going_on(&api, &ns.name).await?;
    pod_annotations_reach_every_pod_in_place(&client, &ns.name).await?;
    let operator_pods = per_cluster_metrics_name_the_cluster(&client, &ns.name).await?;
    metrics_page_passes_promtool_and_matches_the_list(&operator_pods).await?;
    paused_holds_a_scale_out_until_resumed(&client, &api, &ns.name).await?;

    api.delete(NAME, &Default::default()).await?;
    menu.remove(&client).await?;
    Ok(())
}

/// The status says where to connect, its conditions, and what `kubectl get` shows.
async fn status_says_where_to_connect_and_what_is_going_on(
    api: &Api<ValkeyCluster>,
    ns: &str,
) -> anyhow::Result<()> {
    // Status: where to connect, what is going on.
    let c = api.get(NAME).await?;
    let status = c.status.clone().context("status")?;
    assert_eq!(
        status.endpoint.as_deref(),
        Some(format!("{NAME}.{}.svc:6379", ns).as_str())
    );
    assert_eq!(
        condition(&c, "Ready"),
        Some(("True".into(), "Active".into()))
    );
    assert_eq!(
        condition(&c, "Progressing"),
        Some(("False".into(), "Settled".into()))
    );
    assert_eq!(
        condition(&c, "Degraded"),
        Some(("False".into(), "Healthy".into()))
    );
    // What `kubectl get` shows in READY and VERSION, and the figures behind them.
    assert_eq!(status.ready.as_deref(), Some("2/2"));
    assert_eq!(status.version.as_deref(), Some("9.0.0"));
    assert_eq!(status.tls, Some(false));
    assert_eq!(
        status.progress,
        Some(valkey_operator::api::ClusterProgress {
            desired_members: 2,
            ready_members: 2,
            outdated_members: 0,
            slots_to_move: 0,
        })
    );
    Ok(())
}

/// `spec.podAnnotations` edits reach every pod in place within 10 s; others' annotations stay.
async fn pod_annotations_reach_every_pod_in_place(client: &Client, ns: &str) -> anyhow::Result<()> {
    // podAnnotations: added, changed, removed, within 10 s; someone else's stays.
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let uids = |ps: Vec<Pod>| -> BTreeSet<String> { ps.iter().filter_map(|p| p.uid()).collect() };
    let uids_before = uids(member_pods(client, ns, NAME).await?);
    for p in member_pods(client, ns, NAME).await? {
        pods.patch(
            &p.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&json!({"metadata": {"annotations": {"theirs": "x"}}})),
        )
        .await?;
    }
    patch_cluster(
        client,
        ns,
        json!({"spec": {"podAnnotations": {"team": "shop", "cost-center": "42"}}}),
    )
    .await?;
    let added = pods_annotated(client, ns, "annotations added", |a| {
        a.get("team").map(String::as_str) == Some("shop")
            && a.get("cost-center").map(String::as_str) == Some("42")
    })
    .await?;
    patch_cluster(
        client,
        ns,
        json!({"spec": {"podAnnotations": {"team": "web", "cost-center": null}}}),
    )
    .await?;
    let changed = pods_annotated(client, ns, "annotation changed and removed", |a| {
        a.get("team").map(String::as_str) == Some("web")
            && !a.contains_key("cost-center")
            && a.get("theirs").map(String::as_str) == Some("x")
    })
    .await?;
    println!(
        "podAnnotations reached every pod: added in {added:?}, changed/removed in {changed:?}"
    );
    assert_eq!(
        uids(member_pods(client, ns, NAME).await?),
        uids_before,
        "pods patched in place, not replaced"
    );
    Ok(())
}

/// Waits for this cluster's state and figures in the operator's metrics; returns its pods.
async fn per_cluster_metrics_name_the_cluster(
    client: &Client,
    ns: &str,
) -> anyhow::Result<ObjectList<Pod>> {
    // The per-cluster metrics name this cluster, its state and its figures.
    let operator_pods = Api::<Pod>::namespaced(client.clone(), OPERATOR_NAMESPACE)
        .list(&ListParams::default().labels("app.kubernetes.io/name=valkey-operator"))
        .await?;
    let labels = format!("namespace=\"{}\",name=\"{NAME}\"", ns);
    let lines = [
        format!("valkey_operator_cluster_info{{{labels},state=\"Active\"}} 1"),
        format!("valkey_operator_cluster_members{{{labels}}} 2"),
        format!("valkey_operator_cluster_members_ready{{{labels}}} 2"),
        format!("valkey_operator_cluster_slots_to_move{{{labels}}} 0"),
        format!("valkey_operator_cluster_members_outdated{{{labels}}} 0"),
    ];
    wait_for(
        "the per-cluster metrics",
        Duration::from_secs(30),
        Duration::from_secs(1),
        || {
            let (pods, lines) = (&operator_pods.items, &lines);
            async move {
                let all: Vec<String> = pods.iter().filter_map(|p| pod_metrics(p).ok()).collect();
                let missing: Vec<&String> = lines
                    .iter()
                    .filter(|want| !all.iter().any(|m| m.lines().any(|l| &l == want)))
                    .collect();
                if missing.is_empty() {
                    Ok(Some(()))
                } else {
                    bail!("no lines {missing:?}")
                }
            }
        },
    )
    .await?;
    Ok(operator_pods)
}

/// The metrics page passes `promtool check metrics` and declares exactly e2e/metrics.txt.
async fn metrics_page_passes_promtool_and_matches_the_list(
    operator_pods: &ObjectList<Pod>,
) -> anyhow::Result<()> {
    // The whole metrics page passes promtool's checks (exposition format and naming).
    let page = operator_pods
        .items
        .iter()
        .find_map(|p| pod_metrics(p).ok())
        .context("no operator /metrics")?;
    let body = page
        .split_once("\r\n\r\n")
        .map_or(page.as_str(), |(_, b)| b)
        .to_string();
    let promtool = valkey_e2e::harness::promtool()?;
    let piped = body.clone();
    let checked = tokio::task::spawn_blocking(move || -> anyhow::Result<std::process::Output> {
        use std::io::Write as _;
        let mut child = std::process::Command::new(promtool)
            .args(["check", "metrics"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()?;
        child
            .stdin
            .take()
            .context("stdin")?
            .write_all(piped.as_bytes())?;
        Ok(child.wait_with_output()?)
    })
    .await??;
    ensure!(
        checked.status.success(),
        "promtool check metrics: {}{}",
        String::from_utf8_lossy(&checked.stdout),
        String::from_utf8_lossy(&checked.stderr)
    );
    // Every metric the chart's dashboard and alerts may use (e2e/metrics.txt) is declared,
    // with its type, and the operator declares no other. A family without samples is not on
    // the page: error counters of a run without errors, and the TLS clusters' certificate
    // expiry while no TLS cluster exists (this test's cluster is plaintext).
    let listed: BTreeSet<String> = include_str!("../metrics.txt")
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| l.trim().to_string())
        .collect();
    let declared: BTreeSet<String> = body
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .map(str::to_string)
        .collect();
    let listed_only: Vec<&String> = listed
        .difference(&declared)
        .filter(|m| {
            !m.ends_with("_errors_total counter")
                && !m.starts_with("valkey_operator_cluster_certificate_not_after_seconds ")
        })
        .collect();
    let declared_only: Vec<&String> = declared.difference(&listed).collect();
    ensure!(
        listed_only.is_empty() && declared_only.is_empty(),
        "e2e/metrics.txt and the /metrics page differ: listed only {listed_only:?}, declared only {declared_only:?}"
    );
    Ok(())
}

/// Paused, a scale-out waits (status says why, no member created); resumed, it happens.
async fn paused_holds_a_scale_out_until_resumed(
    client: &Client,
    api: &Api<ValkeyCluster>,
    ns: &str,
) -> anyhow::Result<()> {
    // Paused: a scale-out waits, status says why; unpaused, it happens.
    patch_cluster(
        client,
        ns,
        json!({"metadata": {"annotations": {"valkey.gomomento.com/paused": "true"}}}),
    )
    .await?;
    patch_cluster(client, ns, json!({"spec": {"shards": 2}})).await?;
    wait_for(
        "the paused status",
        Duration::from_secs(30),
        Duration::from_millis(500),
        || {
            let api = api.clone();
            async move {
                let c = api.get(NAME).await?;
                let message = c
                    .status
                    .clone()
                    .unwrap_or_default()
                    .message
                    .unwrap_or_default();
                if message.contains("paused")
                    && condition(&c, "Progressing").is_some_and(|p| p.1 == "Paused")
                {
                    Ok(Some(()))
                } else {
                    bail!("{message}")
                }
            }
        },
    )
    .await?;
    tokio::time::sleep(Duration::from_secs(10)).await;
    let nodes = Api::<ValkeyNode>::namespaced(client.clone(), ns)
        .list(&ListParams::default())
        .await?;
    assert_eq!(nodes.items.len(), 2, "no member created while paused");
    patch_cluster(
        client,
        ns,
        json!({"metadata": {"annotations": {"valkey.gomomento.com/paused": null}}}),
    )
    .await?;
    let c = wait_state(
        client,
        ns,
        NAME,
        ClusterState::Active,
        Duration::from_secs(240),
    )
    .await?;
    assert_eq!(
        c.status.unwrap_or_default().nodes.len(),
        4,
        "scaled once resumed"
    );
    Ok(())
}
