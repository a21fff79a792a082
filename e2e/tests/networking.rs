//! What a real cluster's network gives and ours must too (kube-proxy and CoreDNS of
//! e2e/cluster.sh): from a pod and from the host, a ValkeyCluster's Service ClusterIP answers
//! PING, a member's pod DNS name resolves to its IP, and a Deployment behind a Service is
//! reachable by name. And the cluster's NetworkPolicy holds (kube-network-policies enforces it):
//! a pod of another namespace gets no connection to 6379, and no pod but the members reaches
//! the cluster bus, so a rogue `CLUSTER MEET` from another namespace never joins.
#![cfg(feature = "e2e")]

use std::net::Ipv4Addr;
use std::process::Command;
use std::time::Duration;

use anyhow::{Context as _, bail, ensure};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Pod, Service};
use kube::api::{LogParams, PostParams};
use kube::{Api, Client, ResourceExt};
use serde_json::json;

use valkey_e2e::dns::resolve_ipv4;
use valkey_e2e::harness::{TestNamespace, client, wait_for};
use valkey_e2e::valkey::{member_pods, operator_driver};
use valkey_e2e::workload::{PASSWORD, active_cluster};
use valkey_operator::driver::{ClusterDriver, MemberAddr};

const NAME: &str = "net";

/// `redis-cli -h <host> -p 6379 <args>` from the host: its output, whatever it says; Err when
/// it cannot run.
fn redis_cli_from_host(host: &str, args: &[&str]) -> anyhow::Result<String> {
    let out = Command::new("redis-cli")
        .args(["-h", host, "-p", "6379"])
        .args(args)
        .output()
        .context("running redis-cli")?;
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// `redis-cli ... ping` from the host; Ok(reply) whatever it says, Err when it cannot run.
fn ping_from_host(host: &str, auth: bool) -> anyhow::Result<String> {
    let auth_args = ["--user", "app", "--pass", PASSWORD, "--no-auth-warning"];
    let args: &[&str] = if auth { &auth_args } else { &[] };
    Ok(redis_cli_from_host(host, &[args, &["ping"]].concat())?
        .trim()
        .to_string())
}

/// Waits until `ping_from_host` to `ip` answers PONG.
async fn wait_pong_from_host(
    what: &str,
    ip: Ipv4Addr,
    auth: bool,
    timeout: Duration,
) -> anyhow::Result<()> {
    wait_for(what, timeout, Duration::from_millis(500), || async {
        match ping_from_host(&ip.to_string(), auth)?.as_str() {
            "PONG" => Ok(Some(())),
            other => bail!("{ip} said {other:?}"),
        }
    })
    .await
}

async fn cluster_ip(client: &Client, ns: &str, name: &str) -> anyhow::Result<Ipv4Addr> {
    let svc = Api::<Service>::namespaced(client.clone(), ns)
        .get(name)
        .await?;
    let ip = svc
        .spec
        .and_then(|s| s.cluster_ip)
        .with_context(|| format!("Service {name} has no clusterIP"))?;
    Ok(ip.parse()?)
}

/// A Deployment `echo` (a redis-server) behind a Service `echo`.
async fn echo_service(client: &Client, ns: &str) -> anyhow::Result<()> {
    let labels = json!({"app": "echo"});
    let deployment: Deployment = serde_json::from_value(json!({
        "metadata": {"name": "echo"},
        "spec": {"replicas": 1, "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": {"containers": [{
                "name": "redis", "image": "redis:7.0-tls",
                "args": ["--port", "6379", "--protected-mode", "no", "--save", "", "--appendonly", "no"],
                "ports": [{"containerPort": 6379}],
                "readinessProbe": {"tcpSocket": {"port": 6379}, "periodSeconds": 1}}]}}}
    }))?;
    Api::<Deployment>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &deployment)
        .await?;
    let service: Service = serde_json::from_value(json!({
        "metadata": {"name": "echo"},
        "spec": {"selector": labels, "ports": [{"port": 6379, "targetPort": 6379}]}
    }))?;
    Api::<Service>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &service)
        .await?;
    Ok(())
}

/// Runs `script` in a pod of `ns` (restartPolicy Never) and returns its output once it
/// succeeded.
async fn run_in_pod(client: &Client, ns: &str, script: &str) -> anyhow::Result<String> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "probe"},
        "spec": {"restartPolicy": "Never", "containers": [{
            "name": "probe", "image": "registry.local/sleep:1", "command": ["sh", "-c", script]}]}
    }))?;
    pods.create(&PostParams::default(), &pod).await?;
    let phase = wait_for(
        "the probe pod to finish",
        Duration::from_secs(90),
        Duration::from_millis(500),
        || async {
            let p = pods.get("probe").await?;
            let phase = p.status.and_then(|s| s.phase).unwrap_or_default();
            Ok(matches!(phase.as_str(), "Succeeded" | "Failed").then_some(phase))
        },
    )
    .await?;
    let logs = pods.logs("probe", &LogParams::default()).await?;
    ensure!(phase == "Succeeded", "the probe pod {phase}:\n{logs}");
    Ok(logs)
}

fn line<'a>(logs: &'a str, label: &str) -> &'a str {
    logs.lines()
        .find_map(|l| l.strip_prefix(&format!("{label} ")))
        .unwrap_or("")
        .trim()
}

#[tokio::test]
async fn services_route_and_names_resolve_from_pods_and_the_host() -> anyhow::Result<()> {
    let client = client().await?;
    let ns = TestNamespace::create(&client, "net").await?;
    let ns = ns.name.as_str();
    let menu = active_cluster(&client, ns, NAME, "9.1.2", (1, 1)).await?;
    echo_service(&client, ns).await?;

    let members = member_pods(&client, ns, NAME).await?;
    let member = members.first().context("no member pods")?;
    let member_ip: Ipv4Addr = member
        .status
        .as_ref()
        .and_then(|s| s.pod_ip.as_deref())
        .context("member without an IP")?
        .parse()?;
    let member_name = format!("{}.{NAME}-nodes.{ns}.svc.cluster.local", member.name_any());
    let service_ip = cluster_ip(&client, ns, NAME).await?;

    // From the host, through the cluster DNS and kube-proxy.
    assert_eq!(resolve_ipv4(&member_name).await?, vec![member_ip]);
    assert_eq!(
        resolve_ipv4(&format!("{NAME}.{ns}.svc.cluster.local")).await?,
        vec![service_ip]
    );
    // A real kubelet reports members Ready a moment after the cluster is Active; the
    // Service's endpoints follow them.
    wait_pong_from_host(
        "the cluster's Service ClusterIP to answer from the host",
        service_ip,
        true,
        Duration::from_secs(30),
    )
    .await?;
    let echo_ip = cluster_ip(&client, ns, "echo").await?;
    assert_eq!(
        resolve_ipv4(&format!("echo.{ns}.svc.cluster.local")).await?,
        vec![echo_ip]
    );
    wait_pong_from_host(
        "the echo Deployment to answer through its Service from the host",
        echo_ip,
        false,
        Duration::from_secs(60),
    )
    .await?;

    // From a pod: its resolv.conf points at the cluster DNS with the namespace's search path,
    // so short names work as they do on a real cluster.
    let script = format!(
        "echo \"member $(getent hosts {member_name} | awk '{{print $1}}')\"\n\
         echo \"cluster $(redis-cli -h {NAME} --user app --pass {PASSWORD} --no-auth-warning ping)\"\n\
         echo \"echo $(redis-cli -h echo ping)\"\n\
         echo \"echo-fqdn $(redis-cli -h echo.{ns}.svc.cluster.local ping)\"\n\
         echo \"resolv $(grep -c '^nameserver 198.19.0.10$' /etc/resolv.conf)\"\n\
         {}",
        connect_lines(member_ip)
    );
    let logs = run_in_pod(&client, ns, &script).await?;
    assert_eq!(line(&logs, "member"), member_ip.to_string(), "{logs}");
    assert_eq!(line(&logs, "cluster"), "PONG", "{logs}");
    assert_eq!(line(&logs, "echo"), "PONG", "{logs}");
    assert_eq!(line(&logs, "echo-fqdn"), "PONG", "{logs}");
    assert_eq!(line(&logs, "resolv"), "1", "{logs}");
    // clientsFrom sameNamespace (the default): a pod of the namespace reaches the client port,
    // not the bus, which is members-only (a dropped SYN: the connect times out).
    assert_eq!(line(&logs, "client"), "open", "{logs}");
    assert!(line(&logs, "bus").contains("timed out"), "{logs}");

    rogue_meet_from_another_namespace(&client, ns, member_ip).await?;
    menu.remove(&client).await
}

/// Shell lines printing `client open` / `bus open` when a TCP connection to `ip`'s client and
/// bus ports opens within 3 seconds, else what busybox nc said ("timed out", "refused").
fn connect_lines(ip: Ipv4Addr) -> String {
    [("client", 6379), ("bus", 16379)]
        .map(|(label, port)| {
            format!("echo \"{label} $(nc -w 3 {ip} {port} -e true 2>&1 && echo open)\"\n")
        })
        .concat()
}

/// From a namespace `clientsFrom` does not admit: no connection to the member's client or bus
/// port, and a Valkey of the tenant's own that is told to `CLUSTER MEET` the member tries (its
/// handshake entry shows) but never reaches it: the member's view never lists it.
async fn rogue_meet_from_another_namespace(
    client: &Client,
    ns: &str,
    member_ip: Ipv4Addr,
) -> anyhow::Result<()> {
    let other = TestNamespace::create(client, "net-rogue").await?;
    let rogue_ip = rogue_valkey(client, &other.name).await?;
    let logs = run_in_pod(client, &other.name, &connect_lines(member_ip)).await?;
    assert!(line(&logs, "client").contains("timed out"), "{logs}");
    assert!(line(&logs, "bus").contains("timed out"), "{logs}");

    let rogue = |args: &[&str]| redis_cli_from_host(&rogue_ip.to_string(), args);
    let meet = rogue(&["cluster", "meet", &member_ip.to_string(), "6379"])?;
    ensure!(
        meet.trim() == "OK",
        "the rogue's CLUSTER MEET answered {meet:?}"
    );
    let rogue_view = rogue(&["cluster", "nodes"])?;
    ensure!(
        rogue_view.contains(&format!("{member_ip}:6379")) && rogue_view.contains("handshake"),
        "the rogue did not start a handshake with the member:\n{rogue_view}"
    );
    // A handshake that reaches the member completes within a second or two; past the
    // rogue's handshake timeout (its node timeout, 15 s by default) the attempt is over.
    let driver = operator_driver(client, ns, NAME).await?;
    let member = MemberAddr::new(member_ip.to_string(), 6379);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(16);
    while tokio::time::Instant::now() < deadline {
        let nodes = driver.cluster_nodes(&member).await?;
        let rogue_seen = nodes.iter().any(|n| n.ip == rogue_ip.to_string());
        ensure!(
            !rogue_seen,
            "the member met the rogue from {}: {nodes:?}",
            other.name
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    Ok(())
}

/// A cluster-enabled Valkey in `ns`, outside any ValkeyCluster; its pod IP once Running.
async fn rogue_valkey(client: &Client, ns: &str) -> anyhow::Result<Ipv4Addr> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "rogue"},
        "spec": {"containers": [{"name": "valkey", "image": "valkey/valkey:9.1.2",
            "command": ["valkey-server", "--cluster-enabled", "yes", "--protected-mode", "no",
                "--save", "", "--appendonly", "no"]}]}
    }))?;
    pods.create(&PostParams::default(), &pod).await?;
    wait_for(
        "the rogue Valkey to run",
        Duration::from_secs(90),
        Duration::from_millis(500),
        || async {
            let status = pods.get("rogue").await?.status.unwrap_or_default();
            if status.phase.as_deref() != Some("Running") {
                return Ok(None);
            }
            Ok(status.pod_ip.map(|ip| ip.parse()).transpose()?)
        },
    )
    .await
}
