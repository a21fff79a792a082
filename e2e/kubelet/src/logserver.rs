//! The kubelet's HTTPS endpoint, as far as `kubectl logs` needs it: the apiserver proxies
//! `pods/log` to `https://<InternalIP>:<daemonEndpoints port>/containerLogs/...` and does
//! not verify the serving certificate unless told to (`--kubelet-certificate-authority`),
//! so a self-signed one is enough.

use std::net::SocketAddr;
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde::Deserialize;

use crate::state::StateDir;

#[derive(Debug, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct LogQuery {
    #[serde(default)]
    pub follow: Option<bool>,
    #[serde(default)]
    pub tail_lines: Option<i64>,
    #[serde(default)]
    pub previous: Option<bool>,
    #[serde(default)]
    pub limit_bytes: Option<usize>,
}

/// The last `n` lines of `data` (pure).
pub fn tail(data: &[u8], n: i64) -> &[u8] {
    if n < 0 {
        return data;
    }
    let n = n as usize;
    if n == 0 {
        return &data[data.len()..];
    }
    let body = data.strip_suffix(b"\n").unwrap_or(data);
    let mut seen = 0;
    for (i, b) in body.iter().enumerate().rev() {
        if *b == b'\n' {
            seen += 1;
            if seen == n {
                return &data[i + 1..];
            }
        }
    }
    data
}

fn text(code: StatusCode, msg: String) -> Response {
    (code, msg).into_response()
}

async fn container_logs(
    State(state): State<StateDir>,
    Path((ns, pod, container)): Path<(String, String, String)>,
    Query(q): Query<LogQuery>,
) -> Response {
    let Some(dir) = state.find_pod_dir(&ns, &pod) else {
        return text(
            StatusCode::NOT_FOUND,
            format!("pod {ns}/{pod} not found on this kubelet"),
        );
    };
    let previous = q.previous.unwrap_or(false);
    let file: PathBuf = dir.join(if previous {
        format!("{container}.log.previous")
    } else {
        format!("{container}.log")
    });
    let data = match tokio::fs::read(&file).await {
        Ok(d) => d,
        Err(_) if previous => {
            return text(
                StatusCode::BAD_REQUEST,
                format!("previous terminated container \"{container}\" in pod \"{pod}\" not found"),
            );
        }
        Err(_) => {
            return text(
                StatusCode::BAD_REQUEST,
                format!("container \"{container}\" in pod \"{pod}\" is waiting to start"),
            );
        }
    };
    let mut first = tail(&data, q.tail_lines.unwrap_or(-1)).to_vec();
    if let Some(l) = q.limit_bytes {
        first.truncate(l);
    }
    if !q.follow.unwrap_or(false) || previous {
        return Response::new(Body::from(first));
    }
    // Follow: stream what gets appended until the container instance is replaced (its log
    // file rotates), the pod goes away, or the container has exited and nothing more comes.
    let ino = std::fs::metadata(&file).map(|m| m.ino()).unwrap_or(0);
    let pid_file = dir.join(format!("{container}.pid"));
    let start = data.len() as u64;
    let stream =
        futures::stream::unfold((Some(first), start, 0u32), move |(pending, pos, idle)| {
            let file = file.clone();
            let pid_file = pid_file.clone();
            async move {
                if let Some(p) = pending {
                    return Some((Ok::<Bytes, std::io::Error>(Bytes::from(p)), (None, pos, 0)));
                }
                let mut idle = idle;
                loop {
                    tokio::time::sleep(Duration::from_millis(250)).await;
                    let md = std::fs::metadata(&file).ok()?;
                    if md.ino() != ino {
                        return None;
                    }
                    if md.len() > pos {
                        use tokio::io::{AsyncReadExt, AsyncSeekExt};
                        let mut f = tokio::fs::File::open(&file).await.ok()?;
                        f.seek(std::io::SeekFrom::Start(pos)).await.ok()?;
                        let mut buf = Vec::new();
                        f.read_to_end(&mut buf).await.ok()?;
                        let np = pos + buf.len() as u64;
                        return Some((Ok(Bytes::from(buf)), (None, np, 0)));
                    }
                    if !pid_file.exists() {
                        idle += 1;
                        if idle > 4 {
                            return None;
                        }
                    }
                }
            }
        });
    Response::new(Body::from_stream(stream))
}

/// Serves one node's endpoint on `198.18.0.1:<port>` (or `bind`).
pub async fn serve(state: StateDir, bind: SocketAddr, node: String) -> anyhow::Result<()> {
    let ck = rcgen::generate_simple_self_signed(vec![
        node.clone(),
        bind.ip().to_string(),
        "localhost".into(),
    ])?;
    let tls = axum_server::tls_rustls::RustlsConfig::from_pem(
        ck.cert.pem().into_bytes(),
        ck.signing_key.serialize_pem().into_bytes(),
    )
    .await?;
    let app = Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/containerLogs/{ns}/{pod}/{container}", get(container_logs))
        .with_state(state);
    tracing::info!(%node, %bind, "kubelet endpoint serving (logs, healthz)");
    axum_server::bind_rustls(bind, tls)
        .serve(app.into_make_service())
        .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tails_lines() {
        let d = b"a\nb\nc\n";
        assert_eq!(tail(d, 2), b"b\nc\n");
        assert_eq!(tail(d, 5), b"a\nb\nc\n");
        assert_eq!(tail(d, 0), b"");
        assert_eq!(tail(d, -1), d);
        assert_eq!(tail(b"a\nb", 1), b"b");
    }
}
