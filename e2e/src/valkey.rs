//! Helpers the operator suites share: waiting for a ValkeyCluster state, listing its member
//! pods, and a driver authenticated as the operator.

use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod, Secret};
use kube::ResourceExt;
use kube::api::{DeleteParams, ListParams};
use kube::{Api, Client};
use valkey_operator::api::constants::{LABEL_CLUSTER, LABEL_NODE, OPERATOR_ACL_USERNAME};
use valkey_operator::api::{ClusterState, ValkeyCluster, ValkeyClusterStatus};
use valkey_operator::driver::{Credentials, DriverConfig, FredDriver};

use crate::faults::PodRef;
use crate::harness::wait_for;

/// Waits until the ValkeyCluster reports `want` for its current generation.
pub async fn wait_state(
    client: &Client,
    ns: &str,
    name: &str,
    want: ClusterState,
    timeout: Duration,
) -> anyhow::Result<ValkeyCluster> {
    let what = format!("ValkeyCluster {ns}/{name} to be {want:?}");
    wait_cluster(client, ns, name, &what, timeout, |c| {
        let s = c.status.clone().unwrap_or_default();
        if s.state == Some(want) && s.observed_generation == c.metadata.generation {
            Ok(c)
        } else {
            bail!("state {:?}: {}", s.state, s.message.unwrap_or_default())
        }
    })
    .await
}

/// Reads ValkeyCluster `ns`/`name` every 500 ms until `check` accepts it (returns `Ok`), or
/// fails after `timeout` with `check`'s last refusal and what [`explain`] tells of the cluster.
pub async fn wait_cluster<T>(
    client: &Client,
    ns: &str,
    name: &str,
    what: &str,
    timeout: Duration,
    check: impl Fn(ValkeyCluster) -> anyhow::Result<T>,
) -> anyhow::Result<T> {
    let api: Api<ValkeyCluster> = Api::namespaced(client.clone(), ns);
    let result = wait_for(what, timeout, Duration::from_millis(500), || {
        let (api, check) = (api.clone(), &check);
        async move { check(api.get(name).await?).map(Some) }
    })
    .await;
    match result {
        Ok(v) => Ok(v),
        Err(e) => Err(e.context(explain(client, ns, name).await)),
    }
}

/// The member pods of a Valkey cluster.
pub async fn member_pods(client: &Client, ns: &str, cluster: &str) -> anyhow::Result<Vec<Pod>> {
    Ok(Api::<Pod>::namespaced(client.clone(), ns)
        .list(&ListParams::default().labels(&format!("{LABEL_CLUSTER}={cluster}")))
        .await?
        .items)
}

/// Addresses (`ip`, port 6379) of the member pods that run: a pod that failed or is being
/// deleted keeps its IP in status after its network is gone, and a command sent there waits
/// for its timeout instead of being refused.
pub fn serving_addrs(pods: &[Pod]) -> Vec<valkey_operator::driver::MemberAddr> {
    pods.iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter_map(|p| p.status.as_ref())
        .filter(|s| s.phase.as_deref() == Some("Running"))
        .filter_map(|s| s.pod_ip.clone())
        .map(|ip| valkey_operator::driver::MemberAddr::new(ip, 6379))
        .collect()
}

/// The operator's namespace on the local cluster.
pub const OPERATOR_NAMESPACE: &str = "valkey-operator-system";

/// A driver authenticated as the operator, with the password from the Secret it generated (in
/// its own namespace: `<namespace>.<cluster>.credentials`); for a TLS cluster over TLS as the
/// operator connects: trusting `ca.crt` of the operator's copy `<cluster>-member-tls`,
/// verifying members as `<cluster>.<namespace>.svc.cluster.local`.
pub async fn operator_driver(
    client: &Client,
    ns: &str,
    cluster: &str,
) -> anyhow::Result<FredDriver> {
    let secret = Api::<Secret>::namespaced(client.clone(), OPERATOR_NAMESPACE)
        .get(&valkey_operator::controller::names::credentials_secret(
            ns, cluster,
        ))
        .await?;
    let password = String::from_utf8(
        secret.data.context("operator Secret has no data")?["operator-password"]
            .0
            .clone(),
    )?;
    let mut config = DriverConfig::new(Credentials {
        username: OPERATOR_ACL_USERNAME.into(),
        password,
    });
    config.tls = tls_settings(client, ns, cluster).await?;
    Ok(FredDriver::new(config))
}

/// How the operator connects to a TLS cluster's members; `None` for a plaintext cluster.
pub async fn tls_settings(
    client: &Client,
    ns: &str,
    cluster: &str,
) -> anyhow::Result<Option<valkey_operator::driver::TlsSettings>> {
    use valkey_operator::controller::names;
    // A cluster that is gone (or never was) is taken as plaintext, as before TLS existed.
    let cluster_object = Api::<ValkeyCluster>::namespaced(client.clone(), ns)
        .get_opt(cluster)
        .await?;
    if cluster_object.is_none_or(|c| c.spec.tls.is_none()) {
        return Ok(None);
    }
    let copy = Api::<Secret>::namespaced(client.clone(), ns)
        .get(&names::tls_secret(cluster))
        .await?;
    let ca = copy
        .data
        .and_then(|d| d.get("ca.crt").cloned())
        .context("the TLS copy has no ca.crt")?;
    Ok(Some(valkey_operator::driver::TlsSettings {
        ca_pem: String::from_utf8(ca.0)?,
        server_name: Some(names::cluster_hostname(cluster, ns)),
        verify_as_of: None,
    }))
}

/// SIGKILLs the operator's process in every operator pod (the kubelet restarts it at once).
pub async fn kill_operator(client: &Client) -> anyhow::Result<()> {
    let pods = Api::<Pod>::namespaced(client.clone(), "valkey-operator-system")
        .list(&ListParams::default().labels("app.kubernetes.io/name=valkey-operator"))
        .await?;
    for p in pods
        .items
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
    {
        if let Ok(r) = crate::faults::PodRef::find("valkey-operator-system", &p.name_any()) {
            let _ = r.kill("operator");
        }
    }
    Ok(())
}

/// Deletes the operator's pods (as a rollout or a lost node does) and waits until a new one
/// is Ready and the old ones are gone.
pub async fn restart_operator(client: &Client) -> anyhow::Result<()> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), OPERATOR_NAMESPACE);
    let selector =
        kube::api::ListParams::default().labels("app.kubernetes.io/name=valkey-operator");
    let old: Vec<String> = pods
        .list(&selector)
        .await?
        .items
        .iter()
        .map(kube::ResourceExt::name_any)
        .collect();
    for name in &old {
        pods.delete(name, &Default::default()).await?;
    }
    crate::harness::wait_for(
        "a new operator pod Ready",
        Duration::from_secs(180),
        Duration::from_secs(1),
        || {
            let (pods, selector, old) = (pods.clone(), selector.clone(), old.clone());
            async move {
                let list = pods.list(&selector).await?.items;
                let ready = list
                    .iter()
                    .any(|p| !old.contains(&kube::ResourceExt::name_any(p)) && pod_ready(p));
                let gone = list
                    .iter()
                    .all(|p| !old.contains(&kube::ResourceExt::name_any(p)));
                Ok((ready && gone).then_some(()))
            }
        },
    )
    .await
}

/// A pod's `/metrics`, fetched over plain HTTP from the host (pods are reachable on the
/// bridge).
pub fn pod_metrics(pod: &Pod) -> anyhow::Result<String> {
    use std::io::{Read, Write};
    let ip = pod
        .status
        .as_ref()
        .and_then(|s| s.pod_ip.clone())
        .context("pod IP")?;
    let mut stream = std::net::TcpStream::connect_timeout(
        &format!("{ip}:8080").parse()?,
        Duration::from_secs(3),
    )?;
    stream.set_read_timeout(Some(Duration::from_secs(3)))?;
    stream.write_all(b"GET /metrics HTTP/1.0\r\nHost: operator\r\n\r\n")?;
    let mut body = String::new();
    stream.read_to_string(&mut body)?;
    Ok(body)
}

/// What a failed wait needs to be diagnosed after the fact (CI keeps no cluster): each member
/// pod's phase, its node's view of the cluster and its replication link, and the operator's
/// log lines about the cluster. Best effort: whatever cannot be read is said so.
pub async fn explain(client: &Client, ns: &str, cluster: &str) -> String {
    use std::fmt::Write as _;
    use valkey_operator::driver::{ClusterDriver, MemberAddr};
    let mut out = format!("--- {ns}/{cluster} as its members see it ---\n");
    let driver = match operator_driver(client, ns, cluster).await {
        Ok(d) => Some(d),
        Err(e) => {
            let _ = writeln!(out, "no operator credentials: {e:#}");
            None
        }
    };
    let pods = member_pods(client, ns, cluster).await.unwrap_or_default();
    for pod in &pods {
        let status = pod.status.clone().unwrap_or_default();
        let _ = writeln!(
            out,
            "pod {} phase {:?} ip {:?} deleting {}",
            pod.name_any(),
            status.phase,
            status.pod_ip,
            pod.metadata.deletion_timestamp.is_some()
        );
        let (Some(ip), Some(driver)) = (status.pod_ip, driver.as_ref()) else {
            continue;
        };
        let addr = MemberAddr::new(ip, 6379);
        match driver.replication_info(&addr).await {
            Ok(r) => {
                let _ = writeln!(
                    out,
                    "  role {:?} link {:?} offset {} replicas {:?}",
                    r.role, r.primary_link, r.repl_offset, r.connected_replicas
                );
            }
            Err(e) => {
                let _ = writeln!(out, "  INFO replication: {e}");
            }
        }
        match driver.cluster_nodes(&addr).await {
            Ok(nodes) => {
                for n in nodes {
                    let _ = writeln!(
                        out,
                        "  node {} {}:{} myself={} epoch={} primary={:?} of={:?} fail={} slots={:?} migrating={:?} importing={:?}",
                        n.id,
                        n.ip,
                        n.port,
                        n.flags.myself,
                        n.config_epoch,
                        n.flags.primary,
                        n.primary_id,
                        n.flags.fail || n.flags.pfail,
                        n.slots,
                        n.migrating,
                        n.importing
                    );
                }
            }
            Err(e) => {
                let _ = writeln!(out, "  CLUSTER NODES: {e}");
            }
        }
    }
    let _ = writeln!(out, "--- operator log lines about {ns} ---");
    let operators = Api::<Pod>::namespaced(client.clone(), OPERATOR_NAMESPACE);
    let listed = operators
        .list(&ListParams::default().labels("app.kubernetes.io/name=valkey-operator"))
        .await;
    for p in listed.map(|l| l.items).unwrap_or_default() {
        let params = kube::api::LogParams {
            tail_lines: Some(3000),
            ..Default::default()
        };
        match operators.logs(&p.name_any(), &params).await {
            Ok(text) => {
                let lines: Vec<&str> = text.lines().filter(|l| l.contains(ns)).collect();
                for l in &lines[lines.len().saturating_sub(80)..] {
                    let _ = writeln!(out, "{l}");
                }
            }
            Err(e) => {
                let _ = writeln!(out, "logs of {}: {e}", p.name_any());
            }
        }
    }
    out
}

/// The operator's pods (not being deleted).
pub async fn operator_pods(client: &Client) -> anyhow::Result<Vec<Pod>> {
    Ok(Api::<Pod>::namespaced(client.clone(), OPERATOR_NAMESPACE)
        .list(&ListParams::default().labels("app.kubernetes.io/name=valkey-operator"))
        .await?
        .items
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .collect())
}

/// The largest resident set of the operator's processes now, in KiB.
pub fn operator_rss_kib(pods: &[Pod]) -> anyhow::Result<u64> {
    let mut largest = 0;
    for p in pods {
        let pid = PodRef::find(OPERATOR_NAMESPACE, &p.name_any())?.pid("operator")?;
        let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
        let kib = status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
            .context("VmRSS")?;
        largest = largest.max(kib);
    }
    Ok(largest)
}

/// The pod's Ready condition is True (for a member: its container answers and the operator
/// has seen it hold its shard's data, the holds-data gate).
pub fn pod_ready(pod: &Pod) -> bool {
    pod.status
        .iter()
        .flat_map(|s| s.conditions.iter().flatten())
        .any(|c| c.type_ == "Ready" && c.status == "True")
}

/// ValkeyCluster `ns`/`name`'s status if it is Active (and has `members` members, when
/// given); otherwise an error naming its state and message.
pub async fn active_status(
    client: &Client,
    ns: &str,
    name: &str,
    members: Option<usize>,
) -> anyhow::Result<ValkeyClusterStatus> {
    let c = Api::<ValkeyCluster>::namespaced(client.clone(), ns)
        .get(name)
        .await?;
    let status = c.status.unwrap_or_default();
    anyhow::ensure!(
        status.state == Some(ClusterState::Active)
            && members.is_none_or(|members| status.nodes.len() == members),
        "{:?}: {}",
        status.state,
        status.message.unwrap_or_default()
    );
    Ok(status)
}

/// A full restart: force-deletes every member pod of cluster `name` at once (no grace
/// period), then waits until the cluster is Active again with `members` members, each on a
/// new pod that is Ready; how long that took. Ready needs the holds-data gate, which the
/// operator sets only once it has seen the new pod's Valkey hold its shard's data: a status
/// still Active from before the restart does not pass.
pub async fn restart_all_members(
    client: &Client,
    ns: &str,
    name: &str,
    members: usize,
) -> anyhow::Result<Duration> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let old: Vec<(String, Option<String>)> = member_pods(client, ns, name)
        .await?
        .into_iter()
        .map(|p| (p.metadata.name.unwrap_or_default(), p.metadata.uid))
        .collect();
    let restart = Instant::now();
    for (pod, _) in &old {
        pods.delete(pod, &DeleteParams::default().grace_period(0))
            .await?;
    }
    println!("{name}: {} member pods force-deleted", old.len());
    wait_for(
        "the cluster Active again on new, Ready member pods",
        Duration::from_secs(300),
        Duration::from_secs(1),
        || async {
            active_status(client, ns, name, Some(members)).await?;
            let new_and_ready = member_pods(client, ns, name)
                .await?
                .iter()
                .filter(|p| !old.iter().any(|(_, uid)| p.metadata.uid == *uid) && pod_ready(p))
                .count();
            anyhow::ensure!(
                new_and_ready == members,
                "{new_and_ready} of {members} new member pods Ready"
            );
            Ok(Some(restart.elapsed()))
        },
    )
    .await
}

/// Waits until no volume claim of the `members` (ValkeyNode names) is left: the claims of
/// retired members go with them.
pub async fn claims_gone(client: &Client, ns: &str, members: &[&str]) -> anyhow::Result<()> {
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), ns);
    wait_for(
        &format!("the volume claims of {members:?} deleted"),
        Duration::from_secs(180),
        Duration::from_secs(1),
        || {
            let claims = claims.clone();
            async move {
                let mut left = Vec::new();
                for m in members {
                    let found = claims
                        .list(&ListParams::default().labels(&format!("{LABEL_NODE}={m}")))
                        .await?;
                    left.extend(found.items.iter().map(|c| c.name_any()));
                }
                if left.is_empty() {
                    Ok(Some(()))
                } else {
                    bail!("claims left: {left:?}")
                }
            }
        },
    )
    .await
}
