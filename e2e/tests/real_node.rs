//! Images under the upstream kubelet (issue 27): the local cluster's real node runs containerd
//! and runc, and pulls the images `make up` pushed to the registry on the machine under their
//! public names (valkey/valkey:9.1.2, valkey-operator:dev). What a process-based node cannot
//! show is shown here:
//!
//! * the chart's pod spec for the operator starts from the image `make image` built, in the
//!   operator's `restricted` namespace; the same spec with a command the image does not have
//!   ends in `StartError` (the bug that made every real install fail);
//! * a Valkey pod from its image, with the restricted securityContext the operator gives its
//!   members, serves `kubectl exec`, `kubectl logs` and `kubectl port-forward`; its root file
//!   system is read-only and its emptyDir belongs to the fsGroup;
//! * a memory limit is enforced by the kernel: the container is `OOMKilled`;
//! * a claim on the default StorageClass (local-path-provisioner) binds, is mounted, and its
//!   data survives the pod's deletion and re-creation on the same node.
#![cfg(feature = "e2e")]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context, bail, ensure};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Namespace, PersistentVolumeClaim, Pod};
use kube::api::{DeleteParams, LogParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::json;

use valkey_e2e::harness::{TestNamespace, client, kubectl, kubectl_outcome, wait_for};
use valkey_e2e::real_node;

const OPERATOR_NS: &str = "valkey-operator-system";

/// The operator Deployment's pod, as the chart rendered it, as a bare pod on the real node.
/// Its own labels keep it out of the webhook Service and the tests' operator lookups; it
/// starts as a standby replica (the lease stays with the running operator).
async fn chart_operator_pod(client: &Client, name: &str) -> anyhow::Result<Pod> {
    let deployment = Api::<Deployment>::namespaced(client.clone(), OPERATOR_NS)
        .get("valkey-operator")
        .await?;
    let template = deployment
        .spec
        .context("deployment spec")?
        .template
        .spec
        .context("pod template spec")?;
    let mut pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {"app": "real-node-image-check"}},
    }))?;
    pod.spec = Some(template);
    real_node::place(pod.spec.as_mut().context("spec")?);
    Ok(pod)
}

async fn wait_ready(pods: &Api<Pod>, name: &str, timeout: Duration) -> anyhow::Result<Pod> {
    wait_for(
        &format!("pod {name} Ready on {}", real_node::NODE),
        timeout,
        Duration::from_millis(500),
        || async {
            let p = pods.get(name).await?;
            let ready = p
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
            if ready {
                return Ok(Some(p));
            }
            bail!("{:?}", p.status.and_then(|s| s.container_statuses))
        },
    )
    .await
}

async fn wait_terminated(
    pods: &Api<Pod>,
    name: &str,
    container: &str,
    reason: &str,
    timeout: Duration,
) -> anyhow::Result<String> {
    wait_for(
        &format!("pod {name}'s container {container} terminated with {reason}"),
        timeout,
        Duration::from_millis(500),
        || async {
            let p = pods.get(name).await?;
            match real_node::termination(&p, container) {
                Some((r, message)) if r == reason => Ok(Some(message)),
                other => bail!("terminated: {other:?}"),
            }
        },
    )
    .await
}

#[tokio::test]
async fn the_charts_operator_pod_starts_from_the_image_and_a_missing_command_is_a_start_error()
-> anyhow::Result<()> {
    let client = client().await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), OPERATOR_NS);
    let name = format!("image-check-{}", valkey_e2e::harness::random_suffix(4));
    let bad = format!("{name}-bad");
    let result = async {
        let pod = chart_operator_pod(&client, &name).await?;
        let container = &pod.spec.as_ref().context("spec")?.containers[0];
        let command = container.command.clone().unwrap_or_default();
        ensure!(
            command.first().map(String::as_str) == Some("valkey-operator"),
            "the chart's command is {command:?}"
        );
        pods.create(&PostParams::default(), &pod).await?;
        let ready = wait_ready(&pods, &name, Duration::from_secs(120)).await?;
        let image_id = ready
            .status
            .and_then(|s| s.container_statuses)
            .and_then(|c| c.into_iter().next())
            .map(|c| c.image_id)
            .unwrap_or_default();
        println!("the chart's command {command:?} runs from the image ({image_id})");

        // The bug a process-based node could not see: a command the image does not have.
        let mut broken = chart_operator_pod(&client, &bad).await?;
        let container = &mut broken.spec.as_mut().context("spec")?.containers[0];
        container.command = Some(vec![
            "valkey-operator-not-in-the-image".into(),
            "run".into(),
        ]);
        let container = container.name.clone();
        pods.create(&PostParams::default(), &broken).await?;
        let timeout = Duration::from_secs(120);
        let message = wait_terminated(&pods, &bad, &container, "StartError", timeout).await?;
        ensure!(
            message.contains("executable file not found in $PATH"),
            "StartError, but for another reason: {message}"
        );
        println!("a command missing from the image: StartError ({message})");
        Ok(())
    }
    .await;
    for n in [&name, &bad] {
        let _ = pods.delete(n, &DeleteParams::default()).await;
    }
    result
}

/// A namespace that admits only `restricted` pods, as a production cluster's.
async fn restricted_namespace(client: &Client, prefix: &str) -> anyhow::Result<TestNamespace> {
    let ns = TestNamespace::create(client, prefix).await?;
    let labels = json!({"metadata": {"labels": {
        "pod-security.kubernetes.io/enforce": "restricted",
        "pod-security.kubernetes.io/enforce-version": "latest"}}});
    Api::<Namespace>::all(client.clone())
        .patch(&ns.name, &PatchParams::default(), &Patch::Merge(&labels))
        .await?;
    Ok(ns)
}

/// A Valkey pod from its image with the securityContext the operator gives members (non-root
/// user valkey, read-only root, no privilege escalation, no capabilities), and a busybox
/// sidecar from the test image to look at the file system with.
fn valkey_pod(name: &str, memory: &str) -> anyhow::Result<Pod> {
    let container_security = json!({"allowPrivilegeEscalation": false, "readOnlyRootFilesystem": true,
        "capabilities": {"drop": ["ALL"]}});
    let mut pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {
            "securityContext": {"runAsNonRoot": true, "runAsUser": 999, "runAsGroup": 999,
                "fsGroup": 999, "seccompProfile": {"type": "RuntimeDefault"}},
            "volumes": [{"name": "data", "emptyDir": {}}],
            "containers": [
                {"name": "valkey", "image": "valkey/valkey:9.1.2",
                 "command": ["valkey-server", "--save", "", "--appendonly", "no", "--dir", "/data"],
                 "resources": {"limits": {"memory": memory, "cpu": "200m"}},
                 "volumeMounts": [{"name": "data", "mountPath": "/data"}],
                 "readinessProbe": {"exec": {"command": ["valkey-cli", "ping"]}, "periodSeconds": 1},
                 "securityContext": container_security},
                {"name": "shell", "image": "registry.local/sleep:1",
                 "command": ["sleep", "3600"],
                 "resources": {"limits": {"memory": "16Mi", "cpu": "50m"}},
                 "volumeMounts": [{"name": "data", "mountPath": "/data"}],
                 "securityContext": container_security}
            ]
        }
    }))?;
    real_node::place(pod.spec.as_mut().context("spec")?);
    Ok(pod)
}

/// [`valkey_pod`] `v` with a memory limit, Ready in a new restricted namespace.
async fn ready_valkey_pod(prefix: &str, memory: &str) -> anyhow::Result<(TestNamespace, Api<Pod>)> {
    let client = client().await?;
    let ns = restricted_namespace(&client, prefix).await?;
    let pods: Api<Pod> = Api::namespaced(client, &ns.name);
    pods.create(&PostParams::default(), &valkey_pod("v", memory)?)
        .await?;
    wait_ready(&pods, "v", Duration::from_secs(120)).await?;
    Ok((ns, pods))
}

fn exec(ns: &str, pod: &str, container: &str, argv: &[&str]) -> anyhow::Result<(bool, String)> {
    let mut args = vec!["-n", ns, "exec", pod, "-c", container, "--"];
    args.extend_from_slice(argv);
    let out = kubectl_outcome(&args)?;
    Ok((out.ok, format!("{}{}", out.stdout, out.stderr)))
}

/// `kubectl port-forward` to the pod's 6379 on a free local port, as a user runs it; returns
/// the child (killed by the caller) and the port.
fn port_forward(ns: &str, pod: &str) -> anyhow::Result<(std::process::Child, u16)> {
    let mut child = kubectl()
        .args(["-n", ns, "port-forward", &format!("pod/{pod}"), ":6379"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .context("kubectl port-forward")?;
    let mut stdout = BufReader::new(child.stdout.take().context("stdout")?);
    let mut line = String::new();
    stdout.read_line(&mut line)?;
    // kubectl says "Handling connection for ..." per connection: a closed pipe would kill it.
    std::thread::spawn(move || std::io::copy(&mut stdout, &mut std::io::sink()));
    // "Forwarding from 127.0.0.1:40123 -> 6379"
    let port = line
        .split_whitespace()
        .nth(2)
        .and_then(|addr| addr.rsplit(':').next())
        .and_then(|p| p.parse().ok())
        .with_context(|| format!("kubectl port-forward said: {line:?}"))?;
    Ok((child, port))
}

fn ping(port: u16) -> anyhow::Result<String> {
    let mut conn = TcpStream::connect(("127.0.0.1", port))?;
    conn.set_read_timeout(Some(Duration::from_secs(10)))?;
    conn.write_all(b"PING\r\n")?;
    let mut reply = [0u8; 7];
    conn.read_exact(&mut reply)?;
    Ok(String::from_utf8_lossy(&reply).into_owned())
}

#[tokio::test]
async fn a_valkey_pod_from_its_image_serves_exec_logs_and_port_forward() -> anyhow::Result<()> {
    let (ns, pods) = ready_valkey_pod("real-node", "128Mi").await?;

    let (ok, info) = exec(&ns.name, "v", "valkey", &["valkey-cli", "info", "server"])?;
    ensure!(
        ok && info.contains("valkey_version:9.1.2"),
        "kubectl exec: {info}"
    );
    let logs = pods
        .logs(
            "v",
            &LogParams {
                container: Some("valkey".into()),
                ..Default::default()
            },
        )
        .await?;
    ensure!(
        logs.contains("Ready to accept connections"),
        "kubectl logs: {logs}"
    );
    let ns_name = ns.name.clone();
    let pong = tokio::task::spawn_blocking(move || {
        let (mut child, port) = port_forward(&ns_name, "v")?;
        let reply = ping(port);
        let _ = child.kill();
        let _ = child.wait();
        reply
    })
    .await??;
    ensure!(pong == "+PONG\r\n", "through port-forward: {pong:?}");
    println!("kubectl exec, logs and port-forward reach valkey-server 9.1.2 in its image");

    // The root file system is read-only; the emptyDir is writable and the fsGroup's.
    let (ok, out) = exec(&ns.name, "v", "shell", &["touch", "/probe"])?;
    ensure!(
        !ok && out.contains("Read-only file system"),
        "writing to the root: {out}"
    );
    let (ok, out) = exec(
        &ns.name,
        "v",
        "shell",
        &[
            "sh",
            "-c",
            "touch /data/probe && stat -c '%u %g' /data/probe && id -u",
        ],
    )?;
    ensure!(
        ok && out.split_whitespace().collect::<Vec<_>>() == ["999", "999", "999"],
        "a file written to the emptyDir (owner, group, writer): {out}"
    );
    Ok(())
}

#[tokio::test]
async fn a_memory_limit_is_enforced_by_the_kernel() -> anyhow::Result<()> {
    let (ns, pods) = ready_valkey_pod("real-oom", "48Mi").await?;
    // No maxmemory: valkey-server grows until the cgroup's limit, 10 MB per script.
    let fill = "for i=1,1000 do redis.call('set', KEYS[1]..i, string.rep('x', 10000)) end";
    for round in 0..20 {
        let key = format!("fill{round}:");
        let (ok, _) = exec(
            &ns.name,
            "v",
            "valkey",
            &["valkey-cli", "eval", fill, "1", &key],
        )?;
        if !ok {
            break;
        }
    }
    let message =
        wait_terminated(&pods, "v", "valkey", "OOMKilled", Duration::from_secs(60)).await?;
    let restarts = pods
        .get("v")
        .await?
        .status
        .and_then(|s| s.container_statuses)
        .and_then(|c| c.into_iter().find(|c| c.name == "valkey"))
        .map_or(0, |c| c.restart_count);
    println!("over its 48Mi limit valkey-server was OOMKilled ({message:?}), restarts: {restarts}");
    Ok(())
}

/// A pod on the real node that mounts the claim `data` at /data, as the operator's members run.
fn volume_pod(name: &str) -> anyhow::Result<Pod> {
    let mut pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {
            "securityContext": {"runAsNonRoot": true, "runAsUser": 999, "runAsGroup": 999,
                "fsGroup": 999, "seccompProfile": {"type": "RuntimeDefault"}},
            "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}],
            "containers": [{"name": "shell", "image": "registry.local/sleep:1",
                "command": ["sleep", "3600"],
                "volumeMounts": [{"name": "data", "mountPath": "/data"}],
                "securityContext": {"allowPrivilegeEscalation": false,
                    "readOnlyRootFilesystem": true, "capabilities": {"drop": ["ALL"]}}}]
        }
    }))?;
    real_node::place(pod.spec.as_mut().context("spec")?);
    Ok(pod)
}

#[tokio::test]
async fn a_claim_on_the_default_storage_class_binds_and_keeps_its_data_across_pods()
-> anyhow::Result<()> {
    let client = client().await?;
    let ns = restricted_namespace(&client, "real-pvc").await?;
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), &ns.name);
    // No storageClassName: the cluster's default class provisions it.
    let claim: PersistentVolumeClaim = serde_json::from_value(json!({
        "metadata": {"name": "data"},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "64Mi"}}}
    }))?;
    claims.create(&PostParams::default(), &claim).await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns.name);
    pods.create(&PostParams::default(), &volume_pod("writer")?)
        .await?;
    wait_ready(&pods, "writer", Duration::from_secs(180)).await?;
    let bound = claims.get("data").await?;
    let phase = bound.status.and_then(|s| s.phase).unwrap_or_default();
    let spec = bound.spec.context("claim spec")?;
    ensure!(phase == "Bound", "the claim is {phase}");
    println!(
        "claim bound to {:?} of class {:?}",
        spec.volume_name, spec.storage_class_name
    );
    let (ok, out) = exec(
        &ns.name,
        "writer",
        "shell",
        &["sh", "-c", "echo kept > /data/probe && cat /data/probe"],
    )?;
    ensure!(ok && out.trim() == "kept", "writing to the volume: {out}");

    // The pod goes; a new one on the same node mounts the same volume and finds the file.
    pods.delete("writer", &DeleteParams::default()).await?;
    wait_for(
        "the writer pod gone",
        Duration::from_secs(120),
        Duration::from_millis(500),
        || async {
            match pods.get_opt("writer").await? {
                None => Ok(Some(())),
                Some(_) => bail!("still there"),
            }
        },
    )
    .await?;
    pods.create(&PostParams::default(), &volume_pod("reader")?)
        .await?;
    wait_ready(&pods, "reader", Duration::from_secs(120)).await?;
    let (ok, out) = exec(&ns.name, "reader", "shell", &["cat", "/data/probe"])?;
    ensure!(
        ok && out.trim() == "kept",
        "the volume after the pod's re-creation: {out}"
    );
    println!("the volume's data survived its pod's deletion and re-creation");
    Ok(())
}
