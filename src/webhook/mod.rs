//! The webhook server: HTTPS (axum + rustls, ring provider) on every replica, next to the
//! controllers. Validating admission for ValkeyNode, ValkeyCluster, ValkeyConfig, ValkeyRole and
//! ValkeyImage under
//! `/validate/<kind>`; see `webhooks/validating.yaml` for how the API server calls it and
//! `docs/webhooks.md` for the rules.
//!
//! - [`tls`]: the serving certificate, read from files and reloaded when they change.
//! - [`admission`]: one pure `validate` per kind.
//! - [`admit`](mod@admit): the one admission path every kind's route takes ([`admit::Validate`]).
//! - [`memory`]: Valkey memory units and Kubernetes quantities.
//! - [`limits`]: one concurrency limit for every path, the body cap, the read deadlines.
//! - [`router`]: the HTTP surface; a body that is not an AdmissionReview of the expected kind
//!   gets a 4xx, never a crash.

pub mod admission;
pub mod admit;
pub mod check;
pub mod conversion;
pub mod limits;
mod state;
pub mod tls;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use kube::core::conversion::{ConversionRequest, ConversionResponse, ConversionReview};
use tracing::{info, warn};

use crate::api::metering::ValkeyMeteringRecord;
use crate::api::{ValkeyCluster, ValkeyConfig, ValkeyImage, ValkeyNode, ValkeyRole};
use admit::{Validate, admit};
use state::bad_request;

pub use admit::METERING_PATH;
pub use limits::{Limits, MAX_BODY_BYTES, MAX_CONCURRENT_REVIEWS};
pub use state::WebhookState;

/// Default location of the serving certificate (where controller-runtime based operators and
/// cert-manager examples mount it).
pub const DEFAULT_CERT_DIR: &str = "/tmp/k8s-webhook-server/serving-certs";

/// What the webhook server needs.
#[derive(Clone, Debug)]
pub struct WebhookSettings {
    pub addr: SocketAddr,
    pub cert: PathBuf,
    pub key: PathBuf,
    /// The operator's username, the only one allowed to write ValkeyNodes.
    pub operator_username: String,
    /// How often the certificate files are checked for changes.
    pub reload_interval: Duration,
}

/// The HTTP surface, with the default [`Limits`].
pub fn router(state: Arc<WebhookState>) -> Router {
    router_with_limits(state, Arc::new(Limits::default()))
}

/// The HTTP surface. `limits` is one [`Limits`] for every route: the middleware is cloned per
/// route, the semaphore inside it is shared, so the concurrency limit is global (a
/// `tower::limit::ConcurrencyLimitLayer` applied with `Router::layer` would make one semaphore
/// per route).
pub fn router_with_limits(state: Arc<WebhookState>, limits: Arc<Limits>) -> Router {
    Router::new()
        .route(ValkeyNode::PATH, post(admit::<ValkeyNode>))
        .route(ValkeyCluster::PATH, post(admit::<ValkeyCluster>))
        .route(ValkeyConfig::PATH, post(admit::<ValkeyConfig>))
        .route(ValkeyRole::PATH, post(admit::<ValkeyRole>))
        .route(ValkeyImage::PATH, post(admit::<ValkeyImage>))
        .route(
            ValkeyMeteringRecord::PATH,
            post(admit::<ValkeyMeteringRecord>),
        )
        .route(crate::api::crd::CONVERSION_PATH, post(convert))
        .route("/healthz", get(|| async { "ok" }))
        .layer(DefaultBodyLimit::max(limits.max_body_bytes))
        .layer(axum::middleware::from_fn_with_state(limits, limits::admit))
        .with_state(state)
}

/// `/convert`: a ConversionReview in, every object converted (or the first failure) out.
#[tracing::instrument(name = "webhook", skip_all, fields(path = "/convert"))]
async fn convert(State(state): State<Arc<WebhookState>>, body: Bytes) -> Response {
    let started = Instant::now();
    let review: ConversionReview = match serde_json::from_slice(&body) {
        Ok(r) => r,
        Err(e) => {
            return bad_request(
                StatusCode::BAD_REQUEST,
                format!("body is not an apiextensions.k8s.io/v1 ConversionReview: {e}"),
            );
        }
    };
    let Ok(request) = ConversionRequest::from_review(review) else {
        return bad_request(
            StatusCode::BAD_REQUEST,
            "ConversionReview has no request".to_string(),
        );
    };
    let desired = request.desired_api_version.clone();
    let converted: Result<Vec<_>, conversion::ConversionError> = request
        .objects
        .iter()
        .map(|o| conversion::convert(o, &desired))
        .collect();
    let response = ConversionResponse::for_request(request);
    let response = match converted {
        Ok(objects) => response.success(objects),
        Err(e) => {
            info!(desired = %desired, "conversion refused: {e}");
            response.failure(kube::core::Status::failure(&e.to_string(), "Invalid"))
        }
    };
    state.metrics.webhook_latency("convert", started.elapsed());
    axum::Json(response.into_review()).into_response()
}

/// Serves until the process ends. Without certificate files it logs a warning and waits for
/// them (a Secret volume may appear later) instead of failing the operator.
pub async fn serve(settings: WebhookSettings, state: Arc<WebhookState>) -> anyhow::Result<()> {
    let files = tls::CertFiles {
        cert: settings.cert.clone(),
        key: settings.key.clone(),
    };
    if !files.present() {
        warn!(
            cert = %files.cert.display(),
            key = %files.key.display(),
            "webhook serving certificate not found: the admission webhook is NOT served (ValkeyNode protection and cross-object checks are off) until both files exist; mount the valkey-operator-webhook-cert Secret or set --webhook-cert/--webhook-key"
        );
        while !files.present() {
            tokio::time::sleep(settings.reload_interval).await;
        }
    }
    let tls = loop {
        match tls::ReloadingTls::load(files.clone()) {
            Ok(tls) => break tls,
            Err(e) => {
                warn!(error = %e, "webhook serving certificate not usable; retrying");
                tokio::time::sleep(settings.reload_interval).await;
            }
        }
    };
    let config = tls.config.clone();
    let _reloader = tls.spawn_reloader(settings.reload_interval);
    info!(addr = %settings.addr, operator = %settings.operator_username, "webhook server listening (HTTPS)");
    let mut server = axum_server::bind_rustls(settings.addr, config)
        .http1_only()
        .first_request_timeout(limits::FIRST_REQUEST_TIMEOUT);
    server
        .http_builder()
        .http1()
        .header_read_timeout(limits::HEADER_READ_TIMEOUT)
        .max_buf_size(limits::READ_BUFFER_BYTES);
    server.serve(router(state).into_make_service()).await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use admission::FixedMenu;
    use admission::node::NodePolicy;
    use axum::body::Body;
    use axum::http::Request;
    use http_body_util::BodyExt;
    use tower::ServiceExt;

    fn app() -> Router {
        router(Arc::new(WebhookState {
            node_policy: NodePolicy::new(
                "system:serviceaccount:valkey-operator-system:valkey-operator",
            ),
            menu: Arc::new(FixedMenu(Ok(Default::default()))),
            metrics: Arc::new(crate::telemetry::Metrics::new()),
            version_floor: Default::default(),
            watch_namespaces: Default::default(),
        }))
    }

    async fn post(path: &str, body: Vec<u8>) -> (StatusCode, Vec<u8>) {
        let req = Request::post(path)
            .header("content-type", "application/json")
            .body(Body::from(body))
            .unwrap();
        let resp = app().oneshot(req).await.unwrap();
        let status = resp.status();
        (
            status,
            resp.into_body()
                .collect()
                .await
                .unwrap()
                .to_bytes()
                .to_vec(),
        )
    }

    fn fixture(name: &str) -> Vec<u8> {
        std::fs::read(admission::fixtures::path(name)).unwrap()
    }

    #[tokio::test]
    async fn a_review_gets_a_review_back_with_the_same_uid() {
        let (status, body) = post("/validate/valkeynode", fixture("valkeynode-delete.json")).await;
        assert_eq!(status, StatusCode::OK);
        let review: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(review["apiVersion"], "admission.k8s.io/v1");
        assert_eq!(review["kind"], "AdmissionReview");
        assert_eq!(
            review["response"]["uid"],
            "7c9d3c11-6f55-4b8e-9a43-2b1c4f0e8a01"
        );
        assert_eq!(review["response"]["allowed"], false);
        assert_eq!(review["response"]["status"]["code"], 403);
    }

    #[tokio::test]
    async fn warnings_reach_the_response() {
        // The fixed menu is empty: the config "standard" is missing.
        let (status, body) = post(
            "/validate/valkeycluster",
            fixture("valkeycluster-create.json"),
        )
        .await;
        assert_eq!(status, StatusCode::OK);
        let review: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(review["response"]["allowed"], true);
        assert!(
            review["response"]["warnings"][0]
                .as_str()
                .unwrap()
                .contains("does not exist")
        );
    }

    #[tokio::test]
    async fn malformed_bodies_get_a_4xx() {
        let full = fixture("valkeycluster-create.json");
        let wrong_kind = fixture("valkeynode-create.json");
        let mut no_request: serde_json::Value = serde_json::from_slice(&full).unwrap();
        no_request.as_object_mut().unwrap().remove("request");
        let mut wrong_type: serde_json::Value = serde_json::from_slice(&full).unwrap();
        wrong_type["request"]["object"]["spec"]["shards"] = "three".into();
        let cases: Vec<(&str, Vec<u8>)> = vec![
            ("empty", vec![]),
            ("garbage", b"\x00\xff not json".to_vec()),
            ("truncated", full[..full.len() / 2].to_vec()),
            ("json array", b"[1,2,3]".to_vec()),
            ("no request", serde_json::to_vec(&no_request).unwrap()),
            (
                "wrongly typed field",
                serde_json::to_vec(&wrong_type).unwrap(),
            ),
            ("another kind's object", wrong_kind),
            (
                "deeply nested",
                format!("{}{}", "[".repeat(100_000), "]".repeat(100_000)).into_bytes(),
            ),
        ];
        for (what, body) in cases {
            let (status, _) = post("/validate/valkeycluster", body).await;
            assert_eq!(status, StatusCode::BAD_REQUEST, "{what}");
        }
        let (status, _) = post("/validate/valkeycluster", vec![b' '; MAX_BODY_BYTES + 1]).await;
        assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE, "oversized");
        let (status, _) = post("/validate/nothing", full).await;
        assert_eq!(status, StatusCode::NOT_FOUND);
    }

    #[tokio::test]
    async fn a_conversion_review_converts_every_object_in_order_and_keeps_the_uid() {
        let (status, body) = post("/convert", fixture("conversionreview-valkeycluster.json")).await;
        assert_eq!(status, StatusCode::OK);
        let review: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(review["kind"], "ConversionReview");
        let response = &review["response"];
        assert_eq!(response["uid"], "0f1e2d3c-4b5a-6978-8a9b-0c1d2e3f4a5b");
        assert_eq!(response["result"]["status"], "Success");
        let objects = response["convertedObjects"].as_array().unwrap();
        assert_eq!(objects.len(), 2);
        assert_eq!(objects[0]["apiVersion"], "valkey.gomomento.com/v1beta1");
        assert_eq!(
            objects[0]["spec"]["topology"],
            serde_json::json!({"shards": 3, "replicasPerShard": 1})
        );
        assert_eq!(objects[0]["status"]["state"], "Active");
        assert_eq!(
            objects[0]["metadata"]["uid"],
            "5d1c8d2e-0b7a-4f0e-9c39-5a2b3c4d5e6f"
        );
        assert_eq!(objects[1]["spec"]["settings"]["maxmemory"], "1500mb");
    }

    #[tokio::test]
    async fn an_object_that_cannot_be_converted_fails_the_review_with_a_reason() {
        let mut review: serde_json::Value =
            serde_json::from_slice(&fixture("conversionreview-valkeycluster.json")).unwrap();
        review["request"]["desiredAPIVersion"] = "valkey.gomomento.com/v2".into();
        let (status, body) = post("/convert", serde_json::to_vec(&review).unwrap()).await;
        assert_eq!(status, StatusCode::OK);
        let review: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(review["response"]["result"]["status"], "Failure");
        assert!(
            review["response"]["result"]["message"]
                .as_str()
                .unwrap()
                .contains("v2"),
            "{review}"
        );
    }

    #[tokio::test]
    async fn malformed_conversion_bodies_get_a_4xx() {
        let full = fixture("conversionreview-valkeycluster.json");
        let mut no_request: serde_json::Value = serde_json::from_slice(&full).unwrap();
        no_request.as_object_mut().unwrap().remove("request");
        for (what, body) in [
            ("empty", vec![]),
            ("garbage", b"\x00 not json".to_vec()),
            ("truncated", full[..full.len() / 2].to_vec()),
            ("an admission review", fixture("valkeynode-create.json")),
            ("no request", serde_json::to_vec(&no_request).unwrap()),
        ] {
            let (status, _) = post("/convert", body).await;
            assert_eq!(status, StatusCode::BAD_REQUEST, "{what}");
        }
        let (status, _) = post("/convert", vec![b' '; MAX_BODY_BYTES + 1]).await;
        assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE, "oversized");
    }

    /// Without certificate files the server does not serve and does not fail; once the files
    /// appear it serves them.
    #[tokio::test]
    async fn missing_certificate_files_mean_no_server_until_they_appear() {
        let dir = std::env::temp_dir().join(format!("vko-webhook-serve-{}", rand::random::<u64>()));
        std::fs::create_dir_all(&dir).unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
        let settings = WebhookSettings {
            addr,
            cert: dir.join("tls.crt"),
            key: dir.join("tls.key"),
            operator_username: "op".into(),
            reload_interval: Duration::from_millis(50),
        };
        let state = Arc::new(WebhookState {
            node_policy: NodePolicy::new("op"),
            menu: Arc::new(FixedMenu(Ok(Default::default()))),
            metrics: Arc::new(crate::telemetry::Metrics::new()),
            version_floor: Default::default(),
            watch_namespaces: Default::default(),
        });
        let server = tokio::spawn(serve(settings.clone(), state));
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(!server.is_finished(), "no certificate is not a crash");
        assert!(
            tokio::net::TcpStream::connect(addr).await.is_err(),
            "nothing listens without a certificate"
        );

        let ca = tls::tests::TestCa::new();
        let (cert, key, der) = ca.leaf("late");
        std::fs::write(&settings.key, key).unwrap();
        std::fs::write(&settings.cert, cert).unwrap();
        let mut served = None;
        for _ in 0..100 {
            if tokio::net::TcpStream::connect(addr).await.is_ok() {
                served = Some(tls::tests::served_certificate(addr, &ca).await);
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert_eq!(served, Some(der));
        server.abort();
        let _ = std::fs::remove_dir_all(&dir);
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig { cases: 256, .. Default::default() })]
        /// Random bytes, and random cuts and flips of a real review, never crash the router and
        /// never get a 5xx.
        #[test]
        fn random_bodies_never_crash_and_get_a_4xx_or_a_review(
            bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..4096),
            cut in 0usize..4096,
            flip in 0usize..4096,
            path in proptest::sample::select(vec!["/validate/valkeynode", "/validate/valkeycluster", "/validate/valkeyconfig", "/validate/valkeyrole", "/validate/valkeyimage", "/convert"]),
        ) {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_time()
                .build()
                .unwrap();
            rt.block_on(async {
                let (status, _) = post(path, bytes).await;
                proptest::prop_assert!(status.is_client_error(), "random bytes: {status}");
                let mut real = fixture(if path == "/convert" {
                    "conversionreview-valkeycluster.json"
                } else {
                    "valkeyconfig-create.json"
                });
                let at = flip % real.len();
                real[at] = real[at].wrapping_add(1);
                real.truncate(cut.max(1) % real.len().max(1));
                let (status, _) = post(path, real).await;
                proptest::prop_assert!(status.is_client_error() || status == StatusCode::OK, "mangled review: {status}");
                Ok(())
            })?;
        }
    }
}
