//! Integration tests of the local cluster's nodes against the running cluster (`make up`):
//! what the suites rely on a node for (zones, volumes, probes, restarts, logs, images, pod
//! networking and its faults), on the upstream kubelet of every node. They read `$LC_DIR/kubeconfig` (default `<repo>/.localcluster/kubeconfig`) and fail loudly
//! when the cluster is not up. Each test works in its own namespace and deletes it.
//! Needs root (fault hooks and in-namespace checks use setns/nsenter).
//! Built with `--features valkey-e2e/e2e` (`make e2e`); plain `cargo test` has no cluster.
#![cfg(feature = "e2e")]

use std::future::Future;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use futures::FutureExt;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Node, Pod};
use kube::Client;
use kube::api::{Api, DeleteParams, LogParams, Patch, PatchParams, PostParams};
use serde_json::json;
use valkey_e2e::faults::{self, PodRef};
use valkey_e2e::harness::{self, lc_dir, wait_until};

const VALKEY_IMAGE: &str = "valkey/valkey:9.1.2";
/// busybox with a shell (the Valkey image, like a minimal production image, has none).
const SHELL_IMAGE: &str = "registry.local/sleep:1";
/// The image registry on the machine that the real nodes pull from (e2e/real-node.sh).
const REGISTRY: &str = "127.0.0.1:5000";

async fn client() -> Client {
    harness::client().await.unwrap_or_else(|e| panic!("{e:#}"))
}

/// Runs `body` in a fresh namespace and deletes the namespace afterwards, pass or fail.
async fn with_namespace<F, Fut>(prefix: &str, body: F)
where
    F: FnOnce(Client, String) -> Fut,
    Fut: Future<Output = ()>,
{
    let c = client().await;
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    let ns = format!("kt-{prefix}-{:x}", nanos ^ std::process::id());
    let api: Api<Namespace> = Api::all(c.clone());
    let obj: Namespace = serde_json::from_value(json!({"metadata": {"name": ns}})).unwrap();
    api.create(&PostParams::default(), &obj)
        .await
        .expect("create namespace");
    // The service account token controller must create `default` before pods are admitted.
    wait_until(Duration::from_secs(30), "default service account", || {
        let sa: Api<k8s_openapi::api::core::v1::ServiceAccount> = Api::namespaced(c.clone(), &ns);
        async move { sa.get_opt("default").await.ok().flatten().map(|_| ()) }
    })
    .await;
    let res = std::panic::AssertUnwindSafe(body(c.clone(), ns.clone()))
        .catch_unwind()
        .await;
    let _ = api.delete(&ns, &DeleteParams::default()).await;
    if let Err(p) = res {
        std::panic::resume_unwind(p);
    }
}

/// Waits until a deleted pod's network namespace is gone. A real kubelet tears the sandbox
/// down (CNI DEL, namespace removed) after the Pod object is gone, not before: allow it a
/// moment, as a leftover is one that stays.
async fn netns_released(netns: &str) {
    wait_until(
        Duration::from_secs(30),
        &format!("netns {netns} removed (left behind?)"),
        || {
            let gone = !std::path::Path::new("/run/netns").join(netns).exists();
            async move { gone.then_some(()) }
        },
    )
    .await;
}

async fn create_pod(c: &Client, ns: &str, pod: serde_json::Value) -> Pod {
    let pod: Pod = serde_json::from_value(pod).expect("pod json");
    Api::<Pod>::namespaced(c.clone(), ns)
        .create(&PostParams::default(), &pod)
        .await
        .expect("create pod")
}

fn is_ready(p: &Pod) -> bool {
    p.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

async fn wait_ready(c: &Client, ns: &str, name: &str) -> Pod {
    let api: Api<Pod> = Api::namespaced(c.clone(), ns);
    wait_until(
        Duration::from_secs(60),
        &format!("pod {ns}/{name} Running and Ready"),
        || {
            let api = api.clone();
            let name = name.to_string();
            async move {
                let p = api.get_opt(&name).await.ok().flatten()?;
                let running = p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running");
                (running && is_ready(&p)).then_some(p)
            }
        },
    )
    .await
}

fn pod_ip(p: &Pod) -> Ipv4Addr {
    p.status
        .as_ref()
        .and_then(|s| s.pod_ip.as_ref())
        .expect("podIP")
        .parse()
        .expect("podIP parses")
}

/// A Valkey pod listening on `port` (config from the flags; protected mode off so other
/// pods may connect), with a tcp readiness probe.
fn valkey_pod(name: &str, port: u16, node: Option<&str>) -> serde_json::Value {
    let mut spec = json!({
        "containers": [{
            "name": "valkey",
            "image": VALKEY_IMAGE,
            "command": ["valkey-server", "--port", port.to_string(), "--protected-mode", "no", "--save", ""],
            "readinessProbe": {"tcpSocket": {"port": port}, "periodSeconds": 1},
        }],
        "terminationGracePeriodSeconds": 5,
    });
    if let Some(n) = node {
        spec["nodeSelector"] = json!({"kubernetes.io/hostname": n});
    }
    json!({"metadata": {"name": name}, "spec": spec})
}

/// Sends PING over a raw TCP connection from the host; returns the reply.
fn ping(addr: SocketAddr) -> std::io::Result<String> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2))?;
    s.set_read_timeout(Some(Duration::from_secs(2)))?;
    s.write_all(b"PING\r\n")?;
    let mut buf = [0u8; 64];
    let n = s.read(&mut buf)?;
    Ok(String::from_utf8_lossy(&buf[..n]).into_owned())
}

fn node_is_clean(n: &Node) -> Result<(), String> {
    let name = n.metadata.name.clone().unwrap_or_default();
    let ready = n
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == "Ready"))
        .map(|c| c.status.clone());
    if ready.as_deref() != Some("True") {
        return Err(format!("{name}: Ready={ready:?}"));
    }
    if let Some(t) = n
        .spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .filter(|t| !t.is_empty())
    {
        return Err(format!("{name}: taints {t:?}"));
    }
    Ok(())
}

#[tokio::test]
async fn three_ready_nodes_with_zone_labels_and_no_taints() {
    let c = client().await;
    let nodes: Api<Node> = Api::all(c.clone());
    for (name, zone) in [
        ("node-a", "zone-a"),
        ("node-b", "zone-b"),
        ("node-c", "zone-c"),
    ] {
        let n = nodes
            .get(name)
            .await
            .unwrap_or_else(|e| panic!("node {name}: {e} (is its kubelet running?)"));
        let labels = n.metadata.labels.clone().unwrap_or_default();
        assert_eq!(
            labels
                .get("topology.kubernetes.io/zone")
                .map(String::as_str),
            Some(zone),
            "{name} zone label"
        );
        assert_eq!(
            labels.get("kubernetes.io/hostname").map(String::as_str),
            Some(name)
        );
        node_is_clean(&n).unwrap();
        let st = n.status.clone().unwrap();
        assert_eq!(st.node_info.unwrap().kubelet_version, "v1.34.4");
        assert!(st.allocatable.unwrap().contains_key("pods"));
        let lease = Api::<Lease>::namespaced(c.clone(), "kube-node-lease")
            .get(name)
            .await
            .expect("node lease");
        assert_eq!(lease.spec.unwrap().holder_identity.as_deref(), Some(name));
    }
}

/// The issue asks for five minutes of stability; VK_E2E_NODE_STABILITY_SECS shortens it.
#[tokio::test]
async fn nodes_stay_ready_and_untainted() {
    let secs: u64 = std::env::var("VK_E2E_NODE_STABILITY_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(300);
    let c = client().await;
    let nodes: Api<Node> = Api::all(c.clone());
    let leases: Api<Lease> = Api::namespaced(c.clone(), "kube-node-lease");
    let start = Instant::now();
    loop {
        for name in ["node-a", "node-b", "node-c"] {
            let n = nodes.get(name).await.expect("node");
            node_is_clean(&n).unwrap_or_else(|e| panic!("after {:?}: {e}", start.elapsed()));
            let renew = leases
                .get(name)
                .await
                .expect("lease")
                .spec
                .unwrap()
                .renew_time
                .expect("renewTime")
                .0;
            let age = k8s_openapi::jiff::Timestamp::now().duration_since(renew);
            assert!(age.as_secs() < 30, "{name}: lease last renewed {age:?} ago");
        }
        if start.elapsed() >= Duration::from_secs(secs) {
            break;
        }
        tokio::time::sleep(Duration::from_secs(10)).await;
    }
}

#[tokio::test]
async fn valkey_pod_with_configmap_is_ready_reachable_and_sees_config_edits() {
    with_namespace("valkey", |c, ns| async move {
        let conf = "port 7777\nprotected-mode no\nsave \"\"\n";
        let cms: Api<ConfigMap> = Api::namespaced(c.clone(), &ns);
        let cm: ConfigMap = serde_json::from_value(json!({
            "metadata": {"name": "valkey-conf"}, "data": {"valkey.conf": conf}}))
        .unwrap();
        cms.create(&PostParams::default(), &cm).await.unwrap();
        create_pod(
            &c,
            &ns,
            json!({
                "metadata": {"name": "valkey"},
                "spec": {
                    "containers": [{
                        "name": "valkey", "image": VALKEY_IMAGE,
                        "command": ["valkey-server", "/etc/valkey/valkey.conf"],
                        "readinessProbe": {"tcpSocket": {"port": 7777}, "periodSeconds": 1},
                        "volumeMounts": [{"name": "conf", "mountPath": "/etc/valkey"}],
                    }],
                    "volumes": [{"name": "conf", "configMap": {"name": "valkey-conf"}}],
                }
            }),
        )
        .await;
        let pod = wait_ready(&c, &ns, "valkey").await;
        let ip = pod_ip(&pod);
        assert!(
            ip.octets()[0] == 198 && (ip.octets()[1] & 0xfe) == 18,
            "pod IP {ip} outside 198.18.0.0/15"
        );
        let reply = ping(SocketAddr::new(ip.into(), 7777)).expect("valkey reachable at podIP:7777");
        assert_eq!(reply, "+PONG\r\n");

        let p = PodRef::find(&ns, "valkey").unwrap();
        assert_eq!(
            p.read_file("valkey", "/etc/valkey/valkey.conf").unwrap(),
            conf
        );
        let edited = format!("{conf}maxmemory 10mb\n");
        cms.patch(
            "valkey-conf",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"valkey.conf": edited}})),
        )
        .await
        .unwrap();
        let t0 = Instant::now();
        // A real kubelet refreshes ConfigMap volumes on its pod sync (about a minute, jittered).
        wait_until(
            Duration::from_secs(150),
            "edited valkey.conf visible in the pod",
            || {
                let got = p.read_file("valkey", "/etc/valkey/valkey.conf").ok();
                let edited = edited.clone();
                async move { (got.as_deref() == Some(edited.as_str())).then_some(()) }
            },
        )
        .await;
        eprintln!("configmap edit visible in the pod after {:?}", t0.elapsed());
    })
    .await;
}

#[tokio::test]
async fn unknown_image_shows_image_pull_backoff() {
    with_namespace("noimage", |c, ns| async move {
        create_pod(
            &c,
            &ns,
            json!({
                "metadata": {"name": "ghost"},
                "spec": {"containers": [{"name": "c", "image": "example.invalid/does-not-exist:1"}]}
            }),
        )
        .await;
        let api: Api<Pod> = Api::namespaced(c.clone(), &ns);
        let reason = wait_until(Duration::from_secs(60), "ImagePullBackOff", || {
            let api = api.clone();
            async move {
                let p = api.get("ghost").await.ok()?;
                let st = p.status?;
                let w = st.container_statuses?.first()?.state.clone()?.waiting?;
                (w.reason.as_deref() == Some("ImagePullBackOff")
                    && st.phase.as_deref() == Some("Pending"))
                .then_some(w.message.unwrap_or_default())
            }
        })
        .await;
        assert!(
            reason.contains("example.invalid/does-not-exist:1"),
            "message names the image: {reason}"
        );
    })
    .await;
}

#[tokio::test]
async fn pod_with_unmatched_node_selector_stays_pending_with_scheduler_reason() {
    with_namespace("unsched", |c, ns| async move {
        create_pod(
            &c,
            &ns,
            json!({
                "metadata": {"name": "nowhere"},
                "spec": {
                    "nodeSelector": {"topology.kubernetes.io/zone": "zone-nowhere"},
                    "containers": [{"name": "c", "image": VALKEY_IMAGE}],
                }
            }),
        )
        .await;
        let api: Api<Pod> = Api::namespaced(c.clone(), &ns);
        let msg = wait_until(
            Duration::from_secs(60),
            "PodScheduled=False/Unschedulable",
            || {
                let api = api.clone();
                async move {
                    let p = api.get("nowhere").await.ok()?;
                    let cond = p
                        .status?
                        .conditions?
                        .into_iter()
                        .find(|c| c.type_ == "PodScheduled")?;
                    (cond.status == "False" && cond.reason.as_deref() == Some("Unschedulable"))
                        .then(|| cond.message.unwrap_or_default())
                }
            },
        )
        .await;
        assert!(
            msg.contains("node affinity/selector"),
            "scheduler message: {msg}"
        );
        tokio::time::sleep(Duration::from_secs(5)).await;
        let p = api.get("nowhere").await.unwrap();
        assert_eq!(p.status.unwrap().phase.as_deref(), Some("Pending"));
        assert!(p.spec.unwrap().node_name.is_none());
    })
    .await;
}

#[tokio::test]
async fn cut_link_between_pods_on_different_nodes_and_heal_it() {
    with_namespace("link", |c, ns| async move {
        create_pod(&c, &ns, valkey_pod("a", 7000, Some("node-a"))).await;
        create_pod(&c, &ns, valkey_pod("b", 7000, Some("node-b"))).await;
        let pa = wait_ready(&c, &ns, "a").await;
        let pb = wait_ready(&c, &ns, "b").await;
        assert_ne!(
            pa.spec.as_ref().unwrap().node_name,
            pb.spec.as_ref().unwrap().node_name
        );
        let (a, b) = (
            PodRef::find(&ns, "a").unwrap(),
            PodRef::find(&ns, "b").unwrap(),
        );
        let to_b = SocketAddr::new(pod_ip(&pb).into(), 7000);
        let to_a = SocketAddr::new(pod_ip(&pa).into(), 7000);
        let t = Duration::from_secs(2);
        assert_eq!(a.tcp_request(to_b, b"PING\r\n", t).unwrap(), b"+PONG\r\n");
        assert_eq!(b.tcp_request(to_a, b"PING\r\n", t).unwrap(), b"+PONG\r\n");

        faults::cut_link(&a, &b).unwrap();
        assert!(
            a.tcp_request(to_b, b"PING\r\n", t).is_err(),
            "a reached b through a cut link"
        );
        assert!(
            b.tcp_request(to_a, b"PING\r\n", t).is_err(),
            "b reached a through a cut link"
        );
        // Only that link is cut: the host (and so the kubelet's probes) still reach both.
        assert_eq!(ping(to_a).unwrap(), "+PONG\r\n");

        faults::heal_link(&a, &b).unwrap();
        assert_eq!(a.tcp_request(to_b, b"PING\r\n", t).unwrap(), b"+PONG\r\n");
        assert_eq!(b.tcp_request(to_a, b"PING\r\n", t).unwrap(), b"+PONG\r\n");
    })
    .await;
}

#[tokio::test]
async fn kubectl_logs_returns_container_output() {
    with_namespace("logs", |c, ns| async move {
        create_pod(&c, &ns, json!({
            "metadata": {"name": "talker"},
            "spec": {"containers": [{
                "name": "c", "image": SHELL_IMAGE,
                "command": ["sh", "-c", "echo line-one; echo \"hello from $(POD_NAME)\"; exec sleep 100000"],
                "env": [{"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
            }]}
        }))
        .await;
        wait_ready(&c, &ns, "talker").await;
        let api: Api<Pod> = Api::namespaced(c.clone(), &ns);
        let logs = wait_until(Duration::from_secs(20), "log lines", || {
            let api = api.clone();
            async move {
                let l = api.logs("talker", &LogParams::default()).await.ok()?;
                l.contains("hello from talker").then_some(l)
            }
        })
        .await;
        assert_eq!(logs, "line-one\nhello from talker\n");
        let tail = api.logs("talker", &LogParams { tail_lines: Some(1), ..Default::default() }).await.unwrap();
        assert_eq!(tail, "hello from talker\n");
        // And through the real kubectl, when it is there.
        let kubectl = dirs_kubectl();
        if let Some(k) = kubectl {
            let out = std::process::Command::new(k)
                .args(["--kubeconfig", &lc_dir().join("kubeconfig").to_string_lossy(), "-n", &ns, "logs", "talker"])
                .output()
                .unwrap();
            assert!(out.status.success(), "kubectl logs: {}", String::from_utf8_lossy(&out.stderr));
            assert_eq!(String::from_utf8_lossy(&out.stdout), "line-one\nhello from talker\n");
        }
    })
    .await;
}

fn dirs_kubectl() -> Option<std::path::PathBuf> {
    let home = std::env::var_os("HOME")?;
    let cache = std::env::var_os("XDG_CACHE_HOME")
        .map(Into::into)
        .unwrap_or_else(|| std::path::Path::new(&home).join(".cache"));
    let p = cache.join("valkey-operator/k8s-v1.34.4/bin/kubectl");
    p.exists().then_some(p)
}

#[tokio::test]
async fn killed_container_is_restarted_and_deleted_pod_is_cleaned_up() {
    with_namespace("restart", |c, ns| async move {
        create_pod(&c, &ns, valkey_pod("v", 7001, None)).await;
        wait_ready(&c, &ns, "v").await;
        let p = PodRef::find(&ns, "v").unwrap();
        let pid = p.pid("valkey").unwrap();
        let netns = p.netns().unwrap();
        p.kill("valkey").unwrap();
        let api: Api<Pod> = Api::namespaced(c.clone(), &ns);
        let pod = wait_until(
            Duration::from_secs(60),
            "restartCount 1 and Ready again",
            || {
                let api = api.clone();
                async move {
                    let pod = api.get("v").await.ok()?;
                    let cs = pod
                        .status
                        .as_ref()?
                        .container_statuses
                        .as_ref()?
                        .first()?
                        .clone();
                    (cs.restart_count == 1 && is_ready(&pod)).then_some(pod)
                }
            },
        )
        .await;
        let cs = pod.status.unwrap().container_statuses.unwrap().remove(0);
        assert_eq!(
            cs.last_state.unwrap().terminated.unwrap().exit_code,
            137,
            "SIGKILL shows as 137"
        );
        assert_ne!(p.pid("valkey").unwrap(), pid, "a new process runs");
        // `kubectl logs --previous` shows the killed instance's output.
        let prev = api
            .logs(
                "v",
                &LogParams {
                    previous: true,
                    ..Default::default()
                },
            )
            .await
            .unwrap();
        assert!(
            prev.contains("Ready to accept connections"),
            "previous log: {prev}"
        );

        // Graceful deletion removes the Pod object and the pod's namespace.
        api.delete("v", &DeleteParams::default()).await.unwrap();
        wait_until(Duration::from_secs(30), "pod object gone", || {
            let api = api.clone();
            async move {
                api.get_opt("v")
                    .await
                    .ok()
                    .and_then(|p| p.is_none().then_some(()))
            }
        })
        .await;
        netns_released(&netns).await;
    })
    .await;
}

#[tokio::test]
async fn env_secrets_downward_api_init_containers_and_exec_probes() {
    with_namespace("env", |c, ns| async move {
        let secrets: Api<k8s_openapi::api::core::v1::Secret> = Api::namespaced(c.clone(), &ns);
        let s = serde_json::from_value(json!({"metadata": {"name": "s"}, "stringData": {"password": "hunter2"}})).unwrap();
        secrets.create(&PostParams::default(), &s).await.unwrap();
        create_pod(&c, &ns, json!({
            "metadata": {"name": "full", "labels": {"app": "full"}},
            "spec": {
                "initContainers": [{"name": "init", "image": SHELL_IMAGE,
                    "command": ["sh", "-c", "echo init-ran > /work/marker"],
                    "volumeMounts": [{"name": "work", "mountPath": "/work"}]}],
                "containers": [{
                    "name": "c", "image": SHELL_IMAGE,
                    "command": ["sh", "-c", "echo \"pw=$PW ip=$IP node=$NODE\"; exec sleep 100000"],
                    "env": [
                        {"name": "PW", "valueFrom": {"secretKeyRef": {"name": "s", "key": "password"}}},
                        {"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                        {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
                    ],
                    "readinessProbe": {"exec": {"command": ["test", "-f", "/work/marker"]}, "periodSeconds": 1},
                    "volumeMounts": [
                        {"name": "work", "mountPath": "/work"},
                        {"name": "info", "mountPath": "/etc/podinfo"},
                        {"name": "sec", "mountPath": "/etc/sec"},
                    ],
                }],
                "volumes": [
                    {"name": "work", "emptyDir": {}},
                    {"name": "info", "downwardAPI": {"items": [{"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}}]}},
                    {"name": "sec", "secret": {"secretName": "s", "defaultMode": 0o400}},
                ],
            }
        }))
        .await;
        let pod = wait_ready(&c, &ns, "full").await;
        let st = pod.status.clone().unwrap();
        let init = &st.init_container_statuses.unwrap()[0];
        assert_eq!(init.state.as_ref().unwrap().terminated.as_ref().unwrap().exit_code, 0);
        let p = PodRef::find(&ns, "full").unwrap();
        assert_eq!(p.read_file("c", "/work/marker").unwrap(), "init-ran\n");
        assert_eq!(p.read_file("c", "/etc/podinfo/labels").unwrap(), "app=\"full\"");
        assert_eq!(p.read_file("c", "/etc/sec/password").unwrap(), "hunter2");
        let token = p.read_file("c", "/var/run/secrets/kubernetes.io/serviceaccount/token").unwrap();
        assert!(token.starts_with("ey"), "service account token mounted");
        // Through the API: a real kubelet's log files carry CRI timestamps and stream tags.
        let log = Api::<Pod>::namespaced(c.clone(), &ns)
            .logs("full", &LogParams::default())
            .await
            .unwrap();
        let node = pod.spec.clone().unwrap().node_name.unwrap();
        assert_eq!(log, format!("pw=hunter2 ip={} node={node}\n", pod_ip(&pod)));
    })
    .await;
}

async fn ready_pod_ips(c: &Client, ns: &str) -> Vec<String> {
    let pods = Api::<Pod>::namespaced(c.clone(), ns)
        .list(&Default::default())
        .await
        .unwrap();
    let mut ips: Vec<String> = pods
        .items
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none() && is_ready(p))
        .filter_map(|p| p.status.as_ref()?.pod_ip.clone())
        .collect();
    ips.sort();
    ips
}

async fn endpoint_ips(c: &Client, ns: &str, svc: &str) -> Vec<String> {
    let api: Api<k8s_openapi::api::discovery::v1::EndpointSlice> = Api::namespaced(c.clone(), ns);
    let lp = kube::api::ListParams::default().labels(&format!("kubernetes.io/service-name={svc}"));
    let mut ips: Vec<String> = api
        .list(&lp)
        .await
        .unwrap()
        .items
        .into_iter()
        .flat_map(|s| s.endpoints)
        .filter(|e| e.conditions.as_ref().and_then(|c| c.ready) == Some(true))
        .flat_map(|e| e.addresses)
        .collect();
    ips.sort();
    ips
}

#[tokio::test]
async fn deployment_endpointslices_replacement_and_namespace_deletion() {
    let c = client().await;
    let mut netns_of_pods = Vec::new();
    let mut namespace = String::new();
    with_namespace("deploy", |c, ns| {
        let netns_of_pods = &mut netns_of_pods;
        let namespace = &mut namespace;
        async move {
            *namespace = ns.clone();
            let deploy: k8s_openapi::api::apps::v1::Deployment = serde_json::from_value(json!({
                "metadata": {"name": "web"},
                "spec": {
                    "replicas": 3,
                    "selector": {"matchLabels": {"app": "web"}},
                    "template": {
                        "metadata": {"labels": {"app": "web"}},
                        "spec": valkey_pod("x", 6379, None)["spec"].clone(),
                    },
                },
            }))
            .unwrap();
            Api::namespaced(c.clone(), &ns)
                .create(&PostParams::default(), &deploy)
                .await
                .unwrap();
            let svc: k8s_openapi::api::core::v1::Service = serde_json::from_value(json!({
                "metadata": {"name": "web"},
                "spec": {"selector": {"app": "web"}, "ports": [{"port": 6379, "targetPort": 6379}]},
            }))
            .unwrap();
            Api::namespaced(c.clone(), &ns)
                .create(&PostParams::default(), &svc)
                .await
                .unwrap();

            let ips = wait_until(
                Duration::from_secs(90),
                "3 ready pods listed in the EndpointSlices",
                || {
                    let (c, ns) = (c.clone(), ns.clone());
                    async move {
                        let pods = ready_pod_ips(&c, &ns).await;
                        (pods.len() == 3 && endpoint_ips(&c, &ns, "web").await == pods)
                            .then_some(pods)
                    }
                },
            )
            .await;

            // Delete one pod: the ReplicaSet replaces it and the slices follow.
            let pods: Api<Pod> = Api::namespaced(c.clone(), &ns);
            let victim = pods
                .list(&Default::default())
                .await
                .unwrap()
                .items
                .remove(0);
            let victim_name = victim.metadata.name.clone().unwrap();
            let victim_ip = victim.status.unwrap().pod_ip.unwrap();
            pods.delete(&victim_name, &DeleteParams::default())
                .await
                .unwrap();
            let new_ips = wait_until(
                Duration::from_secs(90),
                "replacement pod ready and in the slices",
                || {
                    let (c, ns, victim_ip) = (c.clone(), ns.clone(), victim_ip.clone());
                    async move {
                        let pods = ready_pod_ips(&c, &ns).await;
                        (pods.len() == 3
                            && !pods.contains(&victim_ip)
                            && endpoint_ips(&c, &ns, "web").await == pods)
                            .then_some(pods)
                    }
                },
            )
            .await;
            assert_ne!(ips, new_ips);
            // The running pods' namespaces (the victim may still be terminating, its
            // sandbox already stopped on a real node).
            for p in pods.list(&Default::default()).await.unwrap().items {
                if p.metadata.deletion_timestamp.is_some() {
                    continue;
                }
                let name = p.metadata.name.unwrap();
                netns_of_pods.push(PodRef::find(&ns, &name).unwrap().netns().unwrap());
            }
        }
    })
    .await;
    // with_namespace deleted the namespace: everything in it goes, and the pods' netns too.
    let nss: Api<Namespace> = Api::all(c.clone());
    wait_until(Duration::from_secs(120), "namespace deleted", || {
        let (nss, name) = (nss.clone(), namespace.clone());
        async move {
            nss.get_opt(&name)
                .await
                .ok()
                .and_then(|n| n.is_none().then_some(()))
        }
    })
    .await;
    for n in netns_of_pods {
        netns_released(&n).await;
    }
}

#[tokio::test]
async fn run_to_completion_pods_succeed_or_fail_and_crash_loops_back_off() {
    with_namespace("phases", |c, ns| async move {
        let once = |name: &str, script: &str, policy: &str| {
            json!({"metadata": {"name": name}, "spec": {
                "restartPolicy": policy,
                "containers": [{"name": "c", "image": SHELL_IMAGE, "command": ["sh", "-c", script]}]}})
        };
        create_pod(&c, &ns, once("ok", "echo done", "Never")).await;
        create_pod(&c, &ns, once("bad", "exit 2", "Never")).await;
        create_pod(&c, &ns, once("loop", "exit 1", "Always")).await;
        let api: Api<Pod> = Api::namespaced(c.clone(), &ns);
        for (name, phase, code) in [("ok", "Succeeded", 0), ("bad", "Failed", 2)] {
            let st = wait_until(Duration::from_secs(60), &format!("{name} {phase}"), || {
                let api = api.clone();
                async move {
                    let st = api.get(name).await.ok()?.status?;
                    (st.phase.as_deref() == Some(phase)).then_some(st)
                }
            })
            .await;
            let t = st.container_statuses.unwrap()[0].state.clone().unwrap().terminated.unwrap();
            assert_eq!(t.exit_code, code, "{name} exit code");
            // A finished pod's sandbox is gone: the node keeps no ready sandbox for it.
            wait_until(Duration::from_secs(30), "finished pod's sandbox released", || {
                let gone = match PodRef::find(&ns, name) {
                    Err(_) => true,
                    Ok(p) => p
                        .netns()
                        .is_ok_and(|n| !std::path::Path::new("/run/netns").join(n).exists()),
                };
                async move { gone.then_some(()) }
            })
            .await;
        }
        wait_until(Duration::from_secs(60), "CrashLoopBackOff with restarts", || {
            let api = api.clone();
            async move {
                let cs = api.get("loop").await.ok()?.status?.container_statuses?.remove(0);
                let waiting = cs.state?.waiting?.reason;
                (waiting.as_deref() == Some("CrashLoopBackOff") && cs.restart_count >= 1).then_some(())
            }
        })
        .await;
    })
    .await;
}

/// skopeo on the machine's registry (plain HTTP, local only).
fn skopeo(args: &[&str]) {
    let out = std::process::Command::new("skopeo")
        .args(args)
        .output()
        .expect("run skopeo (make up installs it)");
    assert!(
        out.status.success(),
        "skopeo {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Makes `image` (`registry.local/<name>:<tag>`) pullable as a copy of the Valkey image, by
/// pushing it to the registry the nodes pull from. Returns how to take it away again.
fn publish_image(image: &str) -> Box<dyn FnOnce()> {
    let path = image
        .strip_prefix("registry.local/")
        .expect("registry.local image");
    let dest = format!("docker://{REGISTRY}/{path}");
    skopeo(&[
        "copy",
        "--quiet",
        "--src-tls-verify=false",
        "--dest-tls-verify=false",
        &format!("docker://{REGISTRY}/{VALKEY_IMAGE}"),
        &dest,
    ]);
    Box::new(move || skopeo(&["delete", "--tls-verify=false", &dest]))
}

/// An image that does not exist yet leaves its pod in ImagePullBackOff; once it is published
/// (pushed to the registry, as a user's CI pushes a tag late) the kubelet's next pull starts it.
#[tokio::test]
async fn image_published_later_starts_the_waiting_pod() {
    with_namespace("lateimage", |c, ns| async move {
        let image = format!("registry.local/late-{ns}:1");
        create_pod(
            &c,
            &ns,
            json!({"metadata": {"name": "late"}, "spec": {"containers": [{
            "name": "c", "image": image, "command": ["valkey-server"],
            "args": ["--port", "7400", "--protected-mode", "no", "--save", ""],
            "readinessProbe": {"tcpSocket": {"port": 7400}, "periodSeconds": 1}}]}}),
        )
        .await;
        let api: Api<Pod> = Api::namespaced(c.clone(), &ns);
        wait_until(Duration::from_secs(60), "ImagePullBackOff", || {
            let api = api.clone();
            async move {
                let pod = api.get("late").await.ok()?;
                let cs = pod.status?.container_statuses?.remove(0);
                (cs.state?.waiting?.reason.as_deref() == Some("ImagePullBackOff")).then_some(())
            }
        })
        .await;
        let unpublish = publish_image(&image);
        let res = std::panic::AssertUnwindSafe(async {
            let t0 = Instant::now();
            // The kubelet retries a failed pull with a back-off (10 s, doubling).
            let pod = wait_ready(&c, &ns, "late").await;
            eprintln!(
                "pod started {:?} after the image was published",
                t0.elapsed()
            );
            assert_eq!(
                ping(SocketAddr::new(pod_ip(&pod).into(), 7400)).unwrap(),
                "+PONG\r\n"
            );
        })
        .catch_unwind()
        .await;
        unpublish();
        if let Err(p) = res {
            std::panic::resume_unwind(p);
        }
    })
    .await;
}
