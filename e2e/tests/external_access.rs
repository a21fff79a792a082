//! Clients outside the Kubernetes cluster (issue 33): the platform team allows NodePort on a
//! ValkeyConfig, a product team asks for it on a 3 x 1 ValkeyCluster. Each member gets a
//! NodePort Service and announces `<its node's address>:<node port>` to clients.
//!
//! A cluster-mode client (valkey-py, `e2e/clients/outside_writer.py`) runs in a network namespace of its own
//! whose only route is to the node's address: no pod address is reachable from it. Seeded with
//! one member's external address only, it writes one key at a time through a scale-out 3 -> 4
//! and a rolling replacement of every member; every acknowledged write must read back, and
//! every address `CLUSTER SLOTS` gave it must be the node's, never a pod's. A type the menu does
//! not allow is refused at admission.
#![cfg(feature = "e2e")]

use std::io::BufRead;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context as _, ensure};
use k8s_openapi::api::core::v1::{Pod, Service};
use kube::api::{Patch, PatchParams};
use kube::{Api, Client};
use serde_json::json;

use valkey_e2e::harness::{TestNamespace, client, kubectl_input, wait_for};
use valkey_e2e::safety::settled;
use valkey_e2e::workload::{Menu, PASSWORD, apply, cluster, config, missing_of};
use valkey_operator::api::ValkeyCluster;
use valkey_operator::controller::names;

const NAME: &str = "outside";
const PREFIX: &str = "ext";
/// Writes acknowledged after each step before the next.
const PROGRESS: usize = 20;

/// A network namespace with a veth to the host and one route: to the node's address. It is
/// held by a process of its own (`unshare --net`), never named under /run/netns: `ip netns
/// add` would turn /run/netns into a mount of its own, hiding the pods' namespaces mounted
/// there before from the CNI, which could then never remove them.
struct OutsideNetwork {
    holder: Child,
    host_side: String,
}

/// `ip <args>` run by `command` (here, or inside a namespace), failing with its stderr.
fn ip_by(mut command: Command, args: &[&str]) -> anyhow::Result<()> {
    let out = command.arg("ip").args(args).output()?;
    ensure!(
        out.status.success(),
        "ip {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(())
}

/// `ip <args>` on the host.
fn ip(args: &[&str]) -> anyhow::Result<()> {
    ip_by(Command::new("env"), args)
}

impl OutsideNetwork {
    fn create(node_address: &str) -> anyhow::Result<OutsideNetwork> {
        let tag = std::process::id() % 200 + 20;
        let holder = Command::new("unshare")
            .args(["--net", "sleep", "infinity"])
            .spawn()?;
        let net = OutsideNetwork {
            holder,
            host_side: format!("vkx{tag}h"),
        };
        let pid = net.pid();
        // Until the holder is in its own namespace, a veth sent to it would stay here.
        let ours = std::fs::read_link("/proc/self/ns/net")?;
        for _ in 0..100 {
            if std::fs::read_link(format!("/proc/{pid}/ns/net")).is_ok_and(|ns| ns != ours) {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let inside = format!("vkx{tag}i");
        let (host_ip, inside_ip) = (format!("10.250.{tag}.1"), format!("10.250.{tag}.2"));
        let _ = ip(&["link", "del", &net.host_side]);
        ip(&[
            "link",
            "add",
            &net.host_side,
            "type",
            "veth",
            "peer",
            "name",
            &inside,
            "netns",
            &pid,
        ])?;
        ip(&[
            "addr",
            "add",
            &format!("{host_ip}/30"),
            "dev",
            &net.host_side,
        ])?;
        ip(&["link", "set", &net.host_side, "up"])?;
        let inside_ip_cmd = |args: &[&str]| ip_by(net.enter(), args);
        inside_ip_cmd(&["addr", "add", &format!("{inside_ip}/30"), "dev", &inside])?;
        inside_ip_cmd(&["link", "set", &inside, "up"])?;
        inside_ip_cmd(&["link", "set", "lo", "up"])?;
        inside_ip_cmd(&[
            "route",
            "add",
            &format!("{node_address}/32"),
            "via",
            &host_ip,
        ])?;
        Ok(net)
    }

    fn pid(&self) -> String {
        self.holder.id().to_string()
    }

    /// A command to run inside the namespace.
    fn enter(&self) -> Command {
        let mut command = Command::new("nsenter");
        command.args(["-t", &self.pid(), "-n", "--"]);
        command
    }
}

impl Drop for OutsideNetwork {
    fn drop(&mut self) {
        // The namespace, and the veth pair with it, goes with its last process.
        let _ = self.holder.kill();
        let _ = self.holder.wait();
        let _ = ip(&["link", "del", &self.host_side]);
    }
}

/// The outside writer's output lines so far, and its process (killed when dropped).
struct OutsideWriter {
    child: Child,
    lines: Arc<Mutex<Vec<String>>>,
}

impl OutsideWriter {
    fn start(net: &OutsideNetwork, host: &str, port: i32) -> anyhow::Result<OutsideWriter> {
        // valkey-py from the client guides' venv (docs/connect.md, e2e/clients/prepare.sh).
        valkey_e2e::guides::prepare()?;
        let python = valkey_e2e::guides::built_dir().join("python/venv/bin/python");
        let program =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("clients/outside_writer.py");
        let mut child = net
            .enter()
            .arg(python)
            .arg(program)
            .args([host, &port.to_string(), "app", PASSWORD, PREFIX])
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()?;
        let stdout = child.stdout.take().context("stdout")?;
        let lines = Arc::new(Mutex::new(Vec::new()));
        let sink = lines.clone();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stdout)
                .lines()
                .map_while(Result::ok)
            {
                sink.lock().unwrap().push(line);
            }
        });
        Ok(OutsideWriter { child, lines })
    }

    fn acknowledged(&self) -> Vec<u64> {
        let lines = self.lines.lock().unwrap();
        lines
            .iter()
            .filter_map(|l| l.strip_prefix("ack ")?.parse().ok())
            .collect()
    }

    fn prefixed(&self, prefix: &str) -> Vec<String> {
        let lines = self.lines.lock().unwrap();
        lines
            .iter()
            .filter_map(|l| Some(l.strip_prefix(prefix)?.to_string()))
            .collect()
    }

    /// Waits for `more` acknowledgements after those so far; fails with the writer's last
    /// lines.
    async fn progresses(&self, more: usize, after: &str) -> anyhow::Result<()> {
        let target = self.acknowledged().len() + more;
        let waited = wait_for(
            &format!("{more} more writes from outside after {after}"),
            Duration::from_secs(90),
            Duration::from_millis(200),
            || async move {
                let done = self.acknowledged().len();
                Ok((done >= target).then_some(()))
            },
        )
        .await;
        waited.map_err(|e| {
            let lines = self.lines.lock().unwrap();
            let last = &lines[lines.len().saturating_sub(12)..];
            e.context(format!("the outside writer's last lines: {last:#?}"))
        })
    }
}

impl Drop for OutsideWriter {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        // Its whole output, for whoever looks into a failure.
        let text = self.lines.lock().map(|l| l.join("\n")).unwrap_or_default();
        let _ = std::fs::write(std::env::temp_dir().join("vk-outside-writer.log"), text);
    }
}

/// A member's external Service and the address of the node its pod runs on.
async fn external_address(
    client: &Client,
    ns: &str,
    member: &str,
) -> anyhow::Result<(String, i32)> {
    let service = Api::<Service>::namespaced(client.clone(), ns)
        .get(&names::external_service(member))
        .await?;
    let spec = service.spec.context("spec")?;
    ensure!(spec.type_.as_deref() == Some("NodePort"), "{spec:?}");
    let port = spec
        .ports
        .unwrap_or_default()
        .first()
        .and_then(|p| p.node_port);
    let pod = Api::<Pod>::namespaced(client.clone(), ns)
        .get(member)
        .await?;
    let host = pod.status.and_then(|s| s.host_ip).context("hostIP")?;
    Ok((host, port.context("nodePort")?))
}

/// The ValkeyConfig of `menu`, allowing NodePort, with `memory` for Valkey.
fn allowing_node_port(menu: &Menu, memory: &str) -> serde_json::Value {
    let mut spec = config(&menu.config, &menu.image);
    spec["spec"]["externalAccess"] = json!({"allowedTypes": ["NodePort"]});
    spec["spec"]["resources"]["memory"] = json!(memory);
    spec
}

#[tokio::test]
async fn an_outside_client_writes_through_node_ports_and_never_sees_a_pod_address()
-> anyhow::Result<()> {
    let client = client().await?;
    let ns = TestNamespace::create(&client, "e2e-external").await?;
    let ns = ns.name.as_str();
    let menu = Menu::publish(&client, "e2e-ext", "9.0.0").await?;
    apply(&client, "config", allowing_node_port(&menu, "256Mi")).await?;

    // A type the menu does not allow: refused, saying what to do.
    let mut spec = cluster(ns, NAME, &menu.config, 3, 1);
    spec["spec"]["externalAccess"] = json!({"type": "LoadBalancer"});
    let refused = kubectl_input(&["apply", "-f", "-"], &spec.to_string())?;
    ensure!(
        !refused.ok
            && refused
                .stderr
                .contains("LoadBalancer is not allowed by ValkeyConfig"),
        "a LoadBalancer cluster on a NodePort-only config: {}",
        refused.stderr
    );

    spec["spec"]["externalAccess"] = json!({"type": "NodePort"});
    apply(&client, ns, spec.clone()).await?;
    settled(&client, ns, NAME, 3, &[]).await?;
    let status = Api::<ValkeyCluster>::namespaced(client.clone(), ns)
        .get(NAME)
        .await?
        .status
        .unwrap_or_default();
    let seed = &status.nodes.first().context("a member")?.name;
    let (node_address, seed_port) = external_address(&client, ns, seed).await?;
    let net = OutsideNetwork::create(&node_address)?;
    let writer = OutsideWriter::start(&net, &node_address, seed_port)?;
    writer.progresses(PROGRESS, "starting").await?;

    spec["spec"]["shards"] = json!(4);
    apply(&client, ns, spec.clone()).await?;
    settled(&client, ns, NAME, 4, &[]).await?;
    writer.progresses(PROGRESS, "the scale-out 3 -> 4").await?;

    let before: Vec<String> = Api::<ValkeyCluster>::namespaced(client.clone(), ns)
        .get(NAME)
        .await?
        .status
        .unwrap_or_default()
        .nodes
        .iter()
        .map(|n| n.name.clone())
        .collect();
    apply(&client, "config", allowing_node_port(&menu, "300Mi")).await?;
    let gone: Vec<&str> = before.iter().map(String::as_str).collect();
    settled(&client, ns, NAME, 4, &gone).await?;
    writer
        .progresses(PROGRESS, "the rolling replacement")
        .await?;

    let acknowledged = writer.acknowledged();
    let mut addresses = writer.prefixed("addr ");
    addresses.sort();
    addresses.dedup();
    let failures = writer.prefixed("fail ");
    drop(writer);
    println!(
        "outside writer: {} acknowledged, {} failed attempts (first: {:?}); addresses seen: {addresses:?}",
        acknowledged.len(),
        failures.len(),
        failures.first()
    );
    ensure!(!addresses.is_empty(), "CLUSTER SLOTS was never answered");
    let foreign: Vec<&String> = addresses
        .iter()
        .filter(|a| a.split(':').next() != Some(node_address.as_str()))
        .collect();
    ensure!(
        foreign.is_empty(),
        "the outside client was given addresses other than the node's ({node_address}): {foreign:?}"
    );
    let missing = missing_of(&client, ns, NAME, PREFIX, &acknowledged).await?;
    ensure!(
        missing == 0,
        "{missing} of {} acknowledged writes lost",
        acknowledged.len()
    );
    // Scale-in removes the fourth shard's Services with their members (owned by them).
    Api::<ValkeyCluster>::namespaced(client.clone(), ns)
        .patch(
            NAME,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"shards": 3}})),
        )
        .await?;
    settled(&client, ns, NAME, 3, &[]).await?;
    let services = Api::<Service>::namespaced(client.clone(), ns)
        .list(&Default::default())
        .await?;
    let external = services
        .items
        .iter()
        .filter(|s| s.spec.as_ref().and_then(|s| s.type_.as_deref()) == Some("NodePort"))
        .count();
    ensure!(external == 6, "one NodePort Service per member: {external}");
    drop(net);
    menu.remove(&client).await?;
    Ok(())
}
