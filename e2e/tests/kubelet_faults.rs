//! Fault hooks (`valkey_e2e::faults`) against the running local cluster (`make up`): pause
//! and resume a container, cut a pod from the apiserver, stop and restart a whole node.
//! In its own test binary so the node stop cannot disturb the node-stability test; the
//! other tests here pin their pods to node-a, the stop test uses node-c.
//! Needs root; fails loudly when the cluster is not up.
//! Built with `--features valkey-e2e/e2e` (`make e2e`); plain `cargo test` has no cluster.
#![cfg(feature = "e2e")]

use std::net::{Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

use futures::FutureExt;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use kube::Client;
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::json;
use valkey_e2e::faults::{self, APISERVER_IP, PodRef};
use valkey_e2e::harness::{self, wait_until};

async fn client() -> Client {
    harness::client().await.unwrap_or_else(|e| panic!("{e:#}"))
}

/// Creates a namespace with one Valkey pod (port 7300, optionally pinned to a node), runs
/// `body` with the pod ready, deletes the namespace.
async fn with_valkey_pod<F, Fut>(prefix: &str, node: Option<&str>, body: F)
where
    F: FnOnce(Client, String, Pod) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let c = client().await;
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    let ns = format!("kt-{prefix}-{:x}", nanos ^ std::process::id());
    let nss: Api<Namespace> = Api::all(c.clone());
    nss.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": ns}})).unwrap(),
    )
    .await
    .unwrap();
    let res = std::panic::AssertUnwindSafe(async {
        let sa: Api<k8s_openapi::api::core::v1::ServiceAccount> = Api::namespaced(c.clone(), &ns);
        wait_until(Duration::from_secs(30), "default service account", || {
            let sa = sa.clone();
            async move { sa.get_opt("default").await.ok().flatten() }
        })
        .await;
        let mut spec = json!({
            "containers": [{"name": "valkey", "image": "valkey/valkey:9.1.2",
                "command": ["valkey-server", "--port", "7300", "--protected-mode", "no", "--save", ""],
                "readinessProbe": {"tcpSocket": {"port": 7300}, "periodSeconds": 1}}],
            "terminationGracePeriodSeconds": 3,
        });
        if let Some(n) = node {
            spec["nodeSelector"] = json!({"kubernetes.io/hostname": n});
        }
        let pods: Api<Pod> = Api::namespaced(c.clone(), &ns);
        pods.create(&PostParams::default(), &serde_json::from_value(json!({"metadata": {"name": "v"}, "spec": spec})).unwrap())
            .await
            .unwrap();
        let pod = wait_until(Duration::from_secs(60), "pod ready", || {
            let pods = pods.clone();
            async move {
                let p = pods.get("v").await.ok()?;
                let ready = p.status.as_ref()?.conditions.as_ref()?.iter().any(|c| c.type_ == "Ready" && c.status == "True");
                ready.then_some(p)
            }
        })
        .await;
        body(c.clone(), ns.clone(), pod).await
    })
    .catch_unwind()
    .await;
    let _ = nss.delete(&ns, &DeleteParams::default()).await;
    if let Err(p) = res {
        std::panic::resume_unwind(p);
    }
}

fn addr(pod: &Pod) -> SocketAddr {
    let ip: Ipv4Addr = pod
        .status
        .as_ref()
        .unwrap()
        .pod_ip
        .as_ref()
        .unwrap()
        .parse()
        .unwrap();
    SocketAddr::new(ip.into(), 7300)
}

/// PING from the host with a short timeout.
fn ping(a: SocketAddr) -> Result<String, String> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect_timeout(&a, Duration::from_secs(2))
        .map_err(|e| e.to_string())?;
    s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    s.write_all(b"PING\r\n").map_err(|e| e.to_string())?;
    let mut b = [0u8; 32];
    let n = s.read(&mut b).map_err(|e| e.to_string())?;
    Ok(String::from_utf8_lossy(&b[..n]).into_owned())
}

#[tokio::test]
async fn pause_and_resume_a_container() {
    with_valkey_pod("pause", Some("node-a"), |_c, ns, pod| async move {
        let p = PodRef::find(&ns, "v").unwrap();
        assert_eq!(ping(addr(&pod)).unwrap(), "+PONG\r\n");
        p.pause("valkey").unwrap();
        wait_until(Duration::from_secs(5), "container paused", || {
            let paused = p.is_paused("valkey").unwrap_or(false);
            async move { paused.then_some(()) }
        })
        .await;
        assert!(ping(addr(&pod)).is_err(), "a paused server answered");
        p.resume("valkey").unwrap();
        assert_eq!(ping(addr(&pod)).unwrap(), "+PONG\r\n");
    })
    .await;
}

#[tokio::test]
async fn cut_a_pod_from_the_apiserver_and_heal_it() {
    with_valkey_pod("apicut", Some("node-a"), |c, ns, _pod| async move {
        let p = PodRef::find(&ns, "v").unwrap();
        let api = SocketAddr::new(APISERVER_IP.into(), 6443);
        let t = Duration::from_secs(2);
        // An empty request: connecting is what counts (the apiserver waits for a TLS hello).
        let reach = |p: &PodRef| match p.tcp_request(api, b"", Duration::from_secs(1)) {
            Ok(_) => true,
            Err(e) => format!("{e:#}").contains("read from"), // connected, nothing to read
        };
        assert!(reach(&p), "pod reaches the apiserver before the cut");
        faults::cut_apiserver(&p).unwrap();
        assert!(
            p.tcp_request(api, b"", t).is_err() && !reach(&p),
            "pod still reaches the apiserver"
        );
        // The kubelet probes from its node's address, which on this one machine is the
        // apiserver's too (198.18.0.1): the cut fails its probes, as a pod cut from its node.
        let expected = "False";
        let pods: Api<Pod> = Api::namespaced(c.clone(), &ns);
        let ready_status = || {
            let pods = pods.clone();
            async move {
                let pod = pods.get("v").await.ok()?;
                let conditions = pod.status?.conditions?;
                Some(conditions.into_iter().find(|c| c.type_ == "Ready")?.status)
            }
        };
        tokio::time::sleep(Duration::from_secs(4)).await;
        wait_until(
            Duration::from_secs(10),
            &format!("Ready={expected} while cut from the apiserver"),
            || {
                let status = ready_status();
                async move { (status.await? == expected).then_some(()) }
            },
        )
        .await;
        faults::heal_apiserver(&p).unwrap();
        wait_until(
            Duration::from_secs(10),
            "pod reaches the apiserver after healing",
            || {
                let ok = reach(&p);
                async move { ok.then_some(()) }
            },
        )
        .await;
        wait_until(Duration::from_secs(20), "Ready again after healing", || {
            let status = ready_status();
            async move { (status.await? == "True").then_some(()) }
        })
        .await;
    })
    .await;
}

#[tokio::test]
async fn stop_a_node_then_start_it_again() {
    let node = "node-c";
    with_valkey_pod("nodestop", Some(node), |c, ns, pod| async move {
        let p = PodRef::find(&ns, "v").unwrap();
        let nodes: Api<Node> = Api::all(c.clone());
        let leases: Api<Lease> = Api::namespaced(c.clone(), "kube-node-lease");
        let renew = |l: Lease| l.spec.and_then(|s| s.renew_time).map(|t| t.0);
        faults::stop_node(node).unwrap();
        let stopped_at = Instant::now();
        let res = std::panic::AssertUnwindSafe(async {
            wait_until(Duration::from_secs(5), "container paused", || {
                let paused = p.is_paused("valkey").unwrap_or(false);
                async move { paused.then_some(()) }
            })
            .await;
            assert!(ping(addr(&pod)).is_err(), "a stopped node's pod answered");
            let before = renew(leases.get(node).await.unwrap());
            // The node lifecycle controller notices the missing heartbeats.
            wait_until(Duration::from_secs(120), "node Ready=Unknown", || {
                let nodes = nodes.clone();
                async move {
                    (faults::node_ready(&nodes.get(node).await.ok()?) == "Unknown").then_some(())
                }
            })
            .await;
            assert_eq!(
                renew(leases.get(node).await.unwrap()),
                before,
                "lease renewed while stopped"
            );
            eprintln!("{node} NotReady after {:?}", stopped_at.elapsed());
        })
        .catch_unwind()
        .await;
        faults::start_node(node).unwrap();
        if let Err(e) = res {
            std::panic::resume_unwind(e);
        }
        wait_until(
            Duration::from_secs(60),
            "node Ready again without taints",
            || {
                let nodes = nodes.clone();
                async move {
                    let n = nodes.get(node).await.ok()?;
                    let untainted = n
                        .spec
                        .as_ref()
                        .and_then(|s| s.taints.as_ref())
                        .is_none_or(|t| t.is_empty());
                    (faults::node_ready(&n) == "True" && untainted).then_some(())
                }
            },
        )
        .await;
        assert_eq!(ping(addr(&pod)).unwrap(), "+PONG\r\n", "pod answers again");
    })
    .await;
}
