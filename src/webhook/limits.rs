//! What one webhook server spends on requests, whoever sends them: one concurrency limit for
//! every path, a body cap near the API server's own, and a deadline on reading the body.
//!
//! The API server is the only legitimate client, and what it sends is small and quick: a review
//! of one stored object (etcd stores at most 1.5 MiB; the API server accepts request bodies of
//! at most 3 MiB), answered from memory in microseconds. Anything else that reaches the port (a
//! pod, when the chart's NetworkPolicy is off or admits it) must not be able to take the
//! operator's memory or keep the API server's reviews waiting for long:
//!
//! - a body whose `Content-Length` is over [`MAX_BODY_BYTES`] is refused with 413 before any of
//!   it is read; a body without one (chunked) is read chunk by chunk and refused as soon as it
//!   passes the cap, so at most [`MAX_BODY_BYTES`] of it is ever held;
//! - at most [`MAX_CONCURRENT_REVIEWS`] requests, over all paths together, are read and
//!   answered at once; the body is read only once a request holds its turn, so the memory in
//!   bodies is bounded by `MAX_CONCURRENT_REVIEWS * MAX_BODY_BYTES`. A request that waits more
//!   than [`PERMIT_WAIT`] for its turn gets 503 (the API server's own timeout is 5 s; queueing
//!   longer helps nobody);
//! - a body that does not arrive within [`BODY_TIMEOUT`] gets 408, so a slow sender holds its
//!   turn for at most that long;
//! - on the connection (see `serve`): HTTP/1.1 only (the ALPN the certificate offers), request
//!   headers within [`HEADER_READ_TIMEOUT`], the first request within
//!   [`FIRST_REQUEST_TIMEOUT`] of the TLS handshake (itself bounded to 10 s by axum-server), and
//!   a read buffer of [`READ_BUFFER_BYTES`] per connection while a request waits its turn.

use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use tokio::sync::Semaphore;

/// Largest request body accepted: 3.5 MiB. The API server refuses request bodies over 3 MiB
/// and etcd objects over 1.5 MiB, so an UPDATE review (object and oldObject, each a stored
/// object) and its metadata fits, and so does a CREATE of the largest body the API server
/// accepts.
pub const MAX_BODY_BYTES: usize = 3 * 1024 * 1024 + 512 * 1024;

/// Requests read and answered at once, all paths together (admission, `/convert`, `/healthz`).
pub const MAX_CONCURRENT_REVIEWS: usize = 16;

/// How long a request waits for its turn before it gets 503.
pub const PERMIT_WAIT: Duration = Duration::from_secs(2);

/// How long the body of a request may take to arrive once it holds its turn.
pub const BODY_TIMEOUT: Duration = Duration::from_secs(3);

/// How long a client may take to send a request's headers.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(5);

/// How long a new connection may take, after its TLS handshake, to send its first request.
pub const FIRST_REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// hyper's read buffer per connection (its default is about 400 KiB); request headers must fit.
pub const READ_BUFFER_BYTES: usize = 64 * 1024;

/// The limits shared by every route of one router.
#[derive(Debug)]
pub struct Limits {
    permits: Arc<Semaphore>,
    /// Requests at once.
    pub concurrency: usize,
    pub permit_wait: Duration,
    pub body_timeout: Duration,
    pub max_body_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits::new(
            MAX_CONCURRENT_REVIEWS,
            PERMIT_WAIT,
            BODY_TIMEOUT,
            MAX_BODY_BYTES,
        )
    }
}

impl Limits {
    pub fn new(
        concurrency: usize,
        permit_wait: Duration,
        body_timeout: Duration,
        max_body_bytes: usize,
    ) -> Self {
        Limits {
            permits: Arc::new(Semaphore::new(concurrency)),
            concurrency,
            permit_wait,
            body_timeout,
            max_body_bytes,
        }
    }

    /// Requests being read or answered now.
    pub fn in_flight(&self) -> usize {
        self.concurrency - self.permits.available_permits()
    }
}

/// A plain-text refusal.
fn refuse(status: StatusCode, reason: String) -> Response {
    (status, reason).into_response()
}

fn too_large(limits: &Limits) -> Response {
    refuse(
        StatusCode::PAYLOAD_TOO_LARGE,
        format!(
            "request body is larger than {} bytes, more than any AdmissionReview or ConversionReview the API server sends (it accepts request bodies of at most 3 MiB)",
            limits.max_body_bytes
        ),
    )
}

/// Why a body could not be read.
enum BodyError {
    TooLarge,
    Read(axum::Error),
}

/// Reads `body` chunk by chunk, stopping as soon as it passes `max` bytes.
async fn read_capped(body: Body, max: usize, expected: Option<usize>) -> Result<Bytes, BodyError> {
    let mut stream = body.into_data_stream();
    let mut bytes = Vec::with_capacity(expected.unwrap_or(0).min(max));
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(BodyError::Read)?;
        if bytes.len() + chunk.len() > max {
            return Err(BodyError::TooLarge);
        }
        bytes.extend_from_slice(&chunk);
    }
    Ok(Bytes::from(bytes))
}

/// The middleware in front of every route: refuses an announced oversized body at once, waits
/// for a turn (503 after `permit_wait`), reads the body under the cap and the deadline (413,
/// 408), then hands the request, its body in memory, to the route.
pub async fn admit(State(limits): State<Arc<Limits>>, request: Request, next: Next) -> Response {
    let announced = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if announced.is_some_and(|n| n > limits.max_body_bytes as u64) {
        return too_large(&limits);
    }
    let permit = tokio::time::timeout(limits.permit_wait, limits.permits.clone().acquire_owned());
    let Ok(Ok(_permit)) = permit.await else {
        let mut busy = refuse(
            StatusCode::SERVICE_UNAVAILABLE,
            format!(
                "webhook busy: {} requests are being answered and this one waited {:?} for its turn; retry",
                limits.concurrency, limits.permit_wait
            ),
        );
        busy.headers_mut()
            .insert(header::RETRY_AFTER, header::HeaderValue::from_static("1"));
        return busy;
    };
    let (parts, body) = request.into_parts();
    let expected = announced.map(|n| n as usize);
    let read = tokio::time::timeout(
        limits.body_timeout,
        read_capped(body, limits.max_body_bytes, expected),
    );
    let bytes = match read.await {
        Ok(Ok(bytes)) => bytes,
        Ok(Err(BodyError::TooLarge)) => return too_large(&limits),
        Ok(Err(BodyError::Read(e))) => {
            return refuse(
                StatusCode::BAD_REQUEST,
                format!("request body could not be read: {e}"),
            );
        }
        Err(_) => {
            return refuse(
                StatusCode::REQUEST_TIMEOUT,
                format!(
                    "request body did not arrive within {:?}",
                    limits.body_timeout
                ),
            );
        }
    };
    next.run(Request::from_parts(parts, Body::from(bytes)))
        .await
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use axum::Router;
    use axum::http::Request;
    use futures::channel::mpsc;
    use http_body_util::BodyExt;
    use tower::ServiceExt;

    use super::*;
    use crate::webhook::admission::node::NodePolicy;
    use crate::webhook::admission::{FixedMenu, fixtures};
    use crate::webhook::{WebhookState, router_with_limits};

    fn app(limits: Limits) -> (Router, Arc<Limits>) {
        let limits = Arc::new(limits);
        let state = Arc::new(WebhookState {
            node_policy: NodePolicy::new("op"),
            menu: Arc::new(FixedMenu(Ok(Default::default()))),
            metrics: Arc::new(crate::telemetry::Metrics::new()),
            version_floor: Default::default(),
            watch_namespaces: Default::default(),
        });
        (router_with_limits(state, limits.clone()), limits)
    }

    async fn send(app: &Router, path: &str, body: Body) -> (StatusCode, String) {
        let request = Request::post(path)
            .header("content-type", "application/json")
            .body(body)
            .unwrap();
        let response = app.clone().oneshot(request).await.unwrap();
        let status = response.status();
        let body = response.into_body().collect().await.unwrap().to_bytes();
        (status, String::from_utf8_lossy(&body).into_owned())
    }

    async fn healthz(app: &Router) -> StatusCode {
        let request = Request::get("/healthz").body(Body::empty()).unwrap();
        app.clone().oneshot(request).await.unwrap().status()
    }

    /// A body of `chunks` chunks of 1 MiB without Content-Length (chunked), counting the
    /// chunks the server pulled.
    fn counted_stream(chunks: usize, pulled: Arc<AtomicUsize>) -> Body {
        Body::from_stream(futures::stream::iter(0..chunks).map(move |_| {
            pulled.fetch_add(1, Ordering::SeqCst);
            Ok::<_, std::io::Error>(vec![b' '; 1024 * 1024])
        }))
    }

    /// A body whose bytes arrive when the test sends them; dropping the sender ends it.
    fn held_body() -> (mpsc::UnboundedSender<Result<Vec<u8>, std::io::Error>>, Body) {
        let (tx, rx) = mpsc::unbounded();
        (tx, Body::from_stream(rx))
    }

    #[tokio::test]
    async fn an_oversized_body_is_refused_with_413_without_being_read_whole() {
        let (app, _) = app(Limits::default());
        // Announced: refused before a byte is read.
        let pulled = Arc::new(AtomicUsize::new(0));
        let request = Request::post("/validate/valkeycluster")
            .header("content-length", (8 * 1024 * 1024).to_string())
            .body(counted_stream(8, pulled.clone()))
            .unwrap();
        let response = app.clone().oneshot(request).await.unwrap();
        assert_eq!(response.status(), StatusCode::PAYLOAD_TOO_LARGE);
        assert_eq!(pulled.load(Ordering::SeqCst), 0, "nothing read");
        // Chunked, 8 MiB: refused once it passes the cap, the rest never pulled.
        for path in ["/validate/valkeynode", "/convert"] {
            let pulled = Arc::new(AtomicUsize::new(0));
            let (status, text) = send(&app, path, counted_stream(8, pulled.clone())).await;
            assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE, "{path}");
            assert!(text.contains("larger than 3670016 bytes"), "{text}");
            assert_eq!(
                pulled.load(Ordering::SeqCst),
                4,
                "{path}: 3.5 MiB cap, 4th MiB passes it"
            );
        }
        // The largest body the API server sends is read (and is not a review: 400).
        let (status, _) = send(
            &app,
            "/validate/valkeycluster",
            Body::from(vec![b' '; 3 * 1024 * 1024]),
        )
        .await;
        assert_eq!(status, StatusCode::BAD_REQUEST);
    }

    /// Two requests on two paths hold the only two turns (their bodies are still arriving); a
    /// third, on a third path, waits and gets 503; once one finishes, the next is answered.
    #[tokio::test]
    async fn one_concurrency_limit_is_shared_by_every_path() {
        let limits = Limits::new(
            2,
            Duration::from_millis(200),
            Duration::from_secs(60),
            1 << 20,
        );
        let (app, limits) = app(limits);
        let (hold_node, body) = held_body();
        let node = tokio::spawn({
            let app = app.clone();
            async move { send(&app, "/validate/valkeynode", body).await }
        });
        let (hold_convert, body) = held_body();
        let convert = tokio::spawn({
            let app = app.clone();
            async move { send(&app, "/convert", body).await }
        });
        for _ in 0..100 {
            if limits.in_flight() == 2 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(limits.in_flight(), 2, "both held requests hold a turn");
        let role = fixtures::raw("valkeyrole-create.json").to_string();
        let (status, text) = send(&app, "/validate/valkeyrole", Body::from(role.clone())).await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{text}");
        assert!(text.contains("webhook busy"), "{text}");
        assert_eq!(
            healthz(&app).await,
            StatusCode::SERVICE_UNAVAILABLE,
            "healthz shares the limit"
        );

        hold_node
            .unbounded_send(Ok(fixtures::raw("valkeynode-delete.json")
                .to_string()
                .into_bytes()))
            .unwrap();
        drop(hold_node);
        assert_eq!(node.await.unwrap().0, StatusCode::OK);
        let (status, text) = send(&app, "/validate/valkeyrole", Body::from(role)).await;
        assert_eq!(status, StatusCode::OK, "{text}");
        drop(hold_convert);
        assert_eq!(
            convert.await.unwrap().0,
            StatusCode::BAD_REQUEST,
            "empty body"
        );
        assert_eq!(limits.in_flight(), 0);
    }

    /// A sender that never finishes its body loses its turn after the body deadline.
    #[tokio::test]
    async fn a_body_that_does_not_arrive_in_time_gets_408_and_frees_its_turn() {
        let limits = Limits::new(
            1,
            Duration::from_secs(5),
            Duration::from_millis(100),
            1 << 20,
        );
        let (app, limits) = app(limits);
        let (_hold, body) = held_body();
        let (status, text) = send(&app, "/validate/valkeycluster", body).await;
        assert_eq!(status, StatusCode::REQUEST_TIMEOUT, "{text}");
        assert_eq!(limits.in_flight(), 0);
        assert_eq!(healthz(&app).await, StatusCode::OK);
    }
}
