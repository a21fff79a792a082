//! Probes (startup, readiness, liveness) with exec, tcpSocket and httpGet handlers, run the
//! way the kubelet's prober does: initialDelaySeconds, periodSeconds, timeoutSeconds,
//! successThreshold, failureThreshold.

use std::net::{Ipv4Addr, SocketAddr};
use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, Probe};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpSocket;
use tokio::process::Command;

use crate::network::PROBE_SOURCE;

#[derive(Clone, Debug, PartialEq)]
pub enum Outcome {
    Success,
    Failure(String),
}

/// Probe timing with Kubernetes defaults.
#[derive(Clone, Debug, PartialEq)]
pub struct Timing {
    pub initial_delay: Duration,
    pub period: Duration,
    pub timeout: Duration,
    pub success_threshold: u32,
    pub failure_threshold: u32,
}

impl Timing {
    pub fn of(p: &Probe) -> Self {
        let secs = |v: Option<i32>, d: i32| Duration::from_secs(v.unwrap_or(d).max(0) as u64);
        Self {
            initial_delay: secs(p.initial_delay_seconds, 0),
            period: secs(p.period_seconds, 10).max(Duration::from_secs(1)),
            timeout: secs(p.timeout_seconds, 1).max(Duration::from_secs(1)),
            success_threshold: p.success_threshold.unwrap_or(1).max(1) as u32,
            failure_threshold: p.failure_threshold.unwrap_or(3).max(1) as u32,
        }
    }
}

/// Resolves a port that may be a name of one of the container's ports.
pub fn resolve_port(c: &Container, port: &IntOrString) -> Option<u16> {
    match port {
        IntOrString::Int(i) => u16::try_from(*i).ok(),
        IntOrString::String(s) => s.parse::<u16>().ok().or_else(|| {
            c.ports
                .iter()
                .flatten()
                .find(|p| p.name.as_deref() == Some(s.as_str()))
                .and_then(|p| u16::try_from(p.container_port).ok())
        }),
    }
}

/// Where and how to run a probe for one container instance.
#[derive(Clone, Debug)]
pub struct Target {
    pub pod_ip: Ipv4Addr,
    pub pid: i32,
    pub env: Vec<(String, String)>,
}

async fn connect(addr: SocketAddr) -> std::io::Result<tokio::net::TcpStream> {
    let sock = TcpSocket::new_v4()?;
    // Probe from the kubelet's own address, not the apiserver's (see PROBE_SOURCE); fall
    // back to any source if that address is not configured.
    if sock.bind(SocketAddr::new(PROBE_SOURCE.into(), 0)).is_err() {
        let s2 = TcpSocket::new_v4()?;
        return s2.connect(addr).await;
    }
    sock.connect(addr).await
}

/// Runs one probe attempt.
pub async fn run_once(c: &Container, p: &Probe, t: &Target, timeout: Duration) -> Outcome {
    let fut = async {
        if let Some(e) = &p.exec {
            let cmd = e.command.clone().unwrap_or_default();
            if cmd.is_empty() {
                return Outcome::Failure("exec probe without command".into());
            }
            // Inside the container's network and mount namespaces, with its environment.
            let out = Command::new("nsenter")
                .arg("-t")
                .arg(t.pid.to_string())
                .args(["-n", "-m", "--"])
                .args(&cmd)
                .env_clear()
                .envs(t.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
                .kill_on_drop(true)
                .output()
                .await;
            match out {
                Ok(o) if o.status.success() => Outcome::Success,
                Ok(o) => Outcome::Failure(format!(
                    "command {:?} exited with {}: {}",
                    cmd,
                    o.status.code().unwrap_or(-1),
                    String::from_utf8_lossy(&o.stdout).trim()
                )),
                Err(e) => Outcome::Failure(format!("exec: {e}")),
            }
        } else if let Some(ts) = &p.tcp_socket {
            let Some(port) = resolve_port(c, &ts.port) else {
                return Outcome::Failure(format!("unknown port {:?}", ts.port));
            };
            match connect(SocketAddr::new(t.pod_ip.into(), port)).await {
                Ok(_) => Outcome::Success,
                Err(e) => Outcome::Failure(format!("dial tcp {}:{port}: {e}", t.pod_ip)),
            }
        } else if let Some(h) = &p.http_get {
            let Some(port) = h.port.clone().pipe(|p| resolve_port(c, &p)) else {
                return Outcome::Failure(format!("unknown port {:?}", h.port));
            };
            if h.scheme.as_deref() == Some("HTTPS") {
                // No TLS client here: a listening port counts as success for HTTPS probes.
                return match connect(SocketAddr::new(t.pod_ip.into(), port)).await {
                    Ok(_) => Outcome::Success,
                    Err(e) => Outcome::Failure(format!("dial tcp {}:{port}: {e}", t.pod_ip)),
                };
            }
            http_get(
                t.pod_ip,
                port,
                h.path.as_deref().unwrap_or("/"),
                h.http_headers.as_deref().unwrap_or_default(),
            )
            .await
        } else if p.grpc.is_some() {
            Outcome::Failure("grpc probes are not supported by vk-kubelet".into())
        } else {
            Outcome::Failure("probe has no handler".into())
        }
    };
    match tokio::time::timeout(timeout, fut).await {
        Ok(o) => o,
        Err(_) => Outcome::Failure(format!("probe timed out after {timeout:?}")),
    }
}

trait Pipe: Sized {
    fn pipe<R>(self, f: impl FnOnce(Self) -> R) -> R {
        f(self)
    }
}
impl<T> Pipe for T {}

async fn http_get(
    ip: Ipv4Addr,
    port: u16,
    path: &str,
    headers: &[k8s_openapi::api::core::v1::HTTPHeader],
) -> Outcome {
    let mut s = match connect(SocketAddr::new(ip.into(), port)).await {
        Ok(s) => s,
        Err(e) => return Outcome::Failure(format!("dial tcp {ip}:{port}: {e}")),
    };
    let mut req = format!(
        "GET {path} HTTP/1.1\r\nHost: {ip}:{port}\r\nUser-Agent: kube-probe/1.34\r\nAccept: */*\r\nConnection: close\r\n"
    );
    for h in headers {
        req.push_str(&format!("{}: {}\r\n", h.name, h.value));
    }
    req.push_str("\r\n");
    if let Err(e) = s.write_all(req.as_bytes()).await {
        return Outcome::Failure(format!("write: {e}"));
    }
    let mut buf = vec![0u8; 1024];
    let mut n = 0;
    while n < 12 {
        match s.read(&mut buf[n..]).await {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) => return Outcome::Failure(format!("read: {e}")),
        }
    }
    let head = String::from_utf8_lossy(&buf[..n]);
    match parse_status(&head) {
        Some(code) if (200..400).contains(&code) => Outcome::Success,
        Some(code) => Outcome::Failure(format!("HTTP probe failed with statuscode: {code}")),
        None => Outcome::Failure("malformed HTTP response".into()),
    }
}

/// Status code of an HTTP/1.x status line.
pub fn parse_status(head: &str) -> Option<u16> {
    let line = head.lines().next()?;
    let mut parts = line.split_whitespace();
    let proto = parts.next()?;
    if !proto.starts_with("HTTP/") {
        return None;
    }
    parts.next()?.parse().ok()
}

/// Threshold bookkeeping: turns attempt outcomes into a probe result.
#[derive(Debug, Default)]
pub struct Counter {
    successes: u32,
    failures: u32,
}

impl Counter {
    /// Returns Some(true)/Some(false) when the success/failure threshold is reached.
    pub fn record(&mut self, ok: bool, t: &Timing) -> Option<bool> {
        if ok {
            self.failures = 0;
            self.successes += 1;
            (self.successes >= t.success_threshold).then_some(true)
        } else {
            self.successes = 0;
            self.failures += 1;
            (self.failures >= t.failure_threshold).then_some(false)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ContainerPort;

    #[test]
    fn timing_defaults() {
        let t = Timing::of(&Probe::default());
        assert_eq!(t.period, Duration::from_secs(10));
        assert_eq!(t.timeout, Duration::from_secs(1));
        assert_eq!(t.failure_threshold, 3);
        assert_eq!(t.success_threshold, 1);
    }

    #[test]
    fn named_ports() {
        let c = Container {
            ports: Some(vec![ContainerPort {
                name: Some("valkey".into()),
                container_port: 6379,
                ..Default::default()
            }]),
            ..Default::default()
        };
        assert_eq!(
            resolve_port(&c, &IntOrString::String("valkey".into())),
            Some(6379)
        );
        assert_eq!(resolve_port(&c, &IntOrString::Int(7000)), Some(7000));
        assert_eq!(resolve_port(&c, &IntOrString::String("nope".into())), None);
    }

    #[test]
    fn thresholds() {
        let t = Timing {
            initial_delay: Duration::ZERO,
            period: Duration::from_secs(1),
            timeout: Duration::from_secs(1),
            success_threshold: 2,
            failure_threshold: 2,
        };
        let mut c = Counter::default();
        assert_eq!(c.record(true, &t), None);
        assert_eq!(c.record(true, &t), Some(true));
        assert_eq!(c.record(false, &t), None);
        assert_eq!(c.record(true, &t), None);
        assert_eq!(c.record(false, &t), None);
        assert_eq!(c.record(false, &t), Some(false));
    }

    #[test]
    fn http_status_line() {
        assert_eq!(parse_status("HTTP/1.1 204 No Content\r\n"), Some(204));
        assert_eq!(parse_status("garbage"), None);
    }
}
