//! The one admission path: every `/validate/<kind>` route parses the AdmissionReview, runs the
//! kind's rules and answers, recording the same metrics and logs, in [`admit`]. What differs
//! per kind is only what its rules read (the menu, the ValkeyClusters, a policy): each kind's
//! [`Validate`] impl gathers that from the shared state and calls the kind's pure `validate`
//! in [`admission`].

use std::future::Future;
use std::sync::Arc;
use std::time::Instant;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use kube::core::admission::{AdmissionRequest, AdmissionResponse, AdmissionReview, Operation};
use serde::de::DeserializeOwned;
use tracing::info;

use super::admission::{self, dependants::MenuKind};
use super::state::{WebhookState, bad_request};
use crate::api::metering::ValkeyMeteringRecord;
use crate::api::{ValkeyCluster, ValkeyConfig, ValkeyImage, ValkeyNode, ValkeyRole};

/// The metering records' route (the chart registers it for records and their status).
pub const METERING_PATH: &str = "/validate/valkeymeteringrecord";

/// A kind the webhook validates.
pub trait Validate: kube::Resource + DeserializeOwned + Send + Sync + 'static {
    /// The route the API server calls for it (`webhooks/validating.yaml`).
    const PATH: &'static str;
    /// The kind as the metrics (`webhook` label) and the logs name it.
    const KIND: &'static str;
    /// The answer to one request: allowed, allowed with warnings, or denied.
    fn validate(
        request: &AdmissionRequest<Self>,
        state: &WebhookState,
    ) -> impl Future<Output = AdmissionResponse> + Send;
}

/// `K::PATH`: an AdmissionReview of `K` in, its response out; a body that is not one gets a
/// 400 (and, not being a review, counts in no metric).
#[tracing::instrument(name = "webhook", skip_all, fields(path = K::PATH))]
pub async fn admit<K: Validate>(State(state): State<Arc<WebhookState>>, body: Bytes) -> Response {
    let started = Instant::now();
    match parse_review::<K>(&body) {
        Ok(request) => {
            let response = K::validate(&request, &state).await;
            respond(&state.metrics, K::KIND, started, response)
        }
        Err(r) => r,
    }
}

/// Parses a review of kind `K`, or explains in a 400 why the body is not one.
#[allow(clippy::result_large_err)]
fn parse_review<K>(body: &[u8]) -> Result<AdmissionRequest<K>, Response>
where
    K: kube::Resource + DeserializeOwned,
{
    let review: AdmissionReview<K> = serde_json::from_slice(body).map_err(|e| {
        bad_request(
            StatusCode::BAD_REQUEST,
            format!("body is not an admission.k8s.io/v1 AdmissionReview of the expected kind: {e}"),
        )
    })?;
    review.try_into().map_err(|_| {
        bad_request(
            StatusCode::BAD_REQUEST,
            "AdmissionReview has no request".to_string(),
        )
    })
}

fn respond(
    metrics: &crate::telemetry::Metrics,
    kind: &'static str,
    started: Instant,
    response: AdmissionResponse,
) -> Response {
    metrics.webhook_latency(kind, started.elapsed());
    metrics.admission(kind, response.allowed);
    let allowed = response.allowed;
    let warnings = response.warnings.as_ref().map_or(0, Vec::len);
    tracing::debug!(
        kind,
        allowed,
        warnings,
        elapsed_us = started.elapsed().as_micros() as u64,
        "admission review"
    );
    if !allowed {
        info!(kind, message = %response.result.message, "admission denied");
    }
    axum::Json(response.into_review()).into_response()
}

impl Validate for ValkeyNode {
    const PATH: &'static str = "/validate/valkeynode";
    const KIND: &'static str = "ValkeyNode";
    async fn validate(request: &AdmissionRequest<Self>, state: &WebhookState) -> AdmissionResponse {
        admission::node::validate(request, &state.node_policy)
    }
}

impl Validate for ValkeyMeteringRecord {
    const PATH: &'static str = METERING_PATH;
    const KIND: &'static str = "ValkeyMeteringRecord";
    async fn validate(request: &AdmissionRequest<Self>, state: &WebhookState) -> AdmissionResponse {
        admission::metering::validate(request, &state.node_policy.operator)
    }
}

/// Advisory checks: the menu may come from a cache a few milliseconds behind.
impl Validate for ValkeyCluster {
    const PATH: &'static str = "/validate/valkeycluster";
    const KIND: &'static str = "ValkeyCluster";
    async fn validate(request: &AdmissionRequest<Self>, state: &WebhookState) -> AdmissionResponse {
        if let Some(refused) = admission::cluster::outside_scope(request, &state.watch_namespaces) {
            return refused;
        }
        let menu = state.menu.snapshot().await;
        let response = admission::cluster::validate(request, &menu);
        let Some((namespace, name)) = restore_named(request) else {
            return response;
        };
        let source = state.menu.restore_source(&namespace, &name).await;
        admission::cluster::restore_response(request, response, &source)
    }
}

/// The backup a created cluster's `spec.restoreFrom` names.
fn restore_named(req: &AdmissionRequest<ValkeyCluster>) -> Option<(String, String)> {
    if req.operation != Operation::Create {
        return None;
    }
    let cluster = req.object.as_ref()?;
    let from = cluster.spec.restore_from.as_ref()?;
    let mut cluster = cluster.clone();
    // A created object may have no namespace yet in the review's object: the request's.
    if cluster.metadata.namespace.is_none() {
        cluster.metadata.namespace = req.namespace.clone();
    }
    Some(crate::backup::restore::source_of(&cluster, from))
}

/// Cycle checks deny: the menu as the API server has it now.
impl Validate for ValkeyConfig {
    const PATH: &'static str = "/validate/valkeyconfig";
    const KIND: &'static str = "ValkeyConfig";
    async fn validate(request: &AdmissionRequest<Self>, state: &WebhookState) -> AdmissionResponse {
        let (menu, clusters) = tokio::join!(state.menu.fresh_snapshot(), state.menu.clusters());
        admission::config::validate(request, &menu, &clusters)
    }
}

/// Only a deletion reads the menu and the clusters (to warn about the clusters using the role).
impl Validate for ValkeyRole {
    const PATH: &'static str = "/validate/valkeyrole";
    const KIND: &'static str = "ValkeyRole";
    async fn validate(request: &AdmissionRequest<Self>, state: &WebhookState) -> AdmissionResponse {
        if request.operation != Operation::Delete {
            return admission::role::validate(request);
        }
        let (menu, clusters) = tokio::join!(state.menu.snapshot(), state.menu.clusters());
        admission::dependants::review_deletion(request, &menu, &clusters, MenuKind::Role)
    }
}

impl Validate for ValkeyImage {
    const PATH: &'static str = "/validate/valkeyimage";
    const KIND: &'static str = "ValkeyImage";
    async fn validate(request: &AdmissionRequest<Self>, state: &WebhookState) -> AdmissionResponse {
        let (menu, clusters) = tokio::join!(state.menu.snapshot(), state.menu.clusters());
        admission::image::validate(request, &menu, &clusters, state.version_floor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use admission::FixedMenu;
    use admission::node::NodePolicy;

    fn state() -> Arc<WebhookState> {
        Arc::new(WebhookState {
            node_policy: NodePolicy::new(
                "system:serviceaccount:valkey-operator-system:valkey-operator",
            ),
            menu: Arc::new(FixedMenu(Ok(Default::default()))),
            metrics: Arc::new(crate::telemetry::Metrics::new()),
            version_floor: Default::default(),
            watch_namespaces: Default::default(),
        })
    }

    /// `admit::<K>` on a fixture: the status and the review it answers with.
    async fn admit_fixture<K: Validate>(
        state: &Arc<WebhookState>,
        fixture: &str,
    ) -> (StatusCode, serde_json::Value) {
        let body = std::fs::read(admission::fixtures::path(fixture)).unwrap();
        let response = admit::<K>(State(state.clone()), Bytes::from(body)).await;
        let status = response.status();
        let body = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .unwrap();
        (status, serde_json::from_slice(&body).unwrap())
    }

    /// Whether the metrics' text exposition has this line (`name{labels} value`).
    fn counted(state: &WebhookState, series: &str) -> bool {
        state.metrics.encode().lines().any(|line| line == series)
    }

    /// One review of `kind` answered `allowed` was counted.
    fn assert_one_admission(state: &WebhookState, kind: &str, allowed: bool) {
        let series = format!(
            r#"valkey_operator_webhook_admissions_total{{webhook="{kind}",allowed="{allowed}"}} 1"#
        );
        assert!(counted(state, &series), "{}", state.metrics.encode());
    }

    #[tokio::test]
    async fn a_denied_request_is_a_403_review_and_counted_as_denied() {
        let state = state();
        let (status, review) = admit_fixture::<ValkeyNode>(&state, "valkeynode-delete.json").await;
        assert_eq!(
            status,
            StatusCode::OK,
            "a denial is a review, not an HTTP error"
        );
        let response = &review["response"];
        assert_eq!(response["uid"], "7c9d3c11-6f55-4b8e-9a43-2b1c4f0e8a01");
        assert_eq!(response["allowed"], false);
        assert_eq!(response["status"]["code"], 403);
        assert_eq!(response["status"]["reason"], "Forbidden");
        assert!(response.get("warnings").is_none(), "{review}");
        assert_one_admission(&state, "ValkeyNode", false);
        assert!(counted(
            &state,
            r#"valkey_operator_webhook_request_duration_seconds_count{path="ValkeyNode"} 1"#
        ));
    }

    #[tokio::test]
    async fn an_allowed_request_keeps_its_warnings_and_is_counted_as_allowed() {
        // The fixed menu is empty: the config "standard" is missing, a warning.
        let state = state();
        let (status, review) =
            admit_fixture::<ValkeyCluster>(&state, "valkeycluster-create.json").await;
        assert_eq!(status, StatusCode::OK);
        let response = &review["response"];
        assert_eq!(response["allowed"], true);
        let warnings = response["warnings"].as_array().unwrap();
        assert!(
            warnings
                .iter()
                .any(|w| w.as_str().is_some_and(|w| w.contains("does not exist"))),
            "{review}"
        );
        assert_one_admission(&state, "ValkeyCluster", true);
    }

    #[tokio::test]
    async fn a_body_that_is_not_a_review_is_a_400_and_counted_nowhere() {
        let state = state();
        let response = admit::<ValkeyRole>(State(state.clone()), Bytes::from_static(b"{}")).await;
        assert_eq!(response.status(), StatusCode::BAD_REQUEST);
        assert!(!state.metrics.encode().contains(r#"webhook="ValkeyRole""#));
    }
}
