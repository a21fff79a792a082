//! What every route's handler shares: the [`WebhookState`] and the plain-text 4xx. Below
//! `webhook/mod.rs` (the router, `/convert`) and [`super::admit`] (the `/validate/<kind>`
//! routes), so the admission path never imports the module that routes to it.

use std::sync::Arc;

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

use super::admission::MenuSource;
use super::admission::node::NodePolicy;

/// Shared state of the handlers.
pub struct WebhookState {
    pub node_policy: NodePolicy,
    pub menu: Arc<dyn MenuSource>,
    /// Request durations go to `valkey_operator_webhook_request_duration_seconds`.
    pub metrics: Arc<crate::telemetry::Metrics>,
    /// The operator setting `versionFloor` (ValkeyImage versions below Momento v0.9's floor).
    pub version_floor: crate::settings::VersionFloor,
    /// The operator setting `watchNamespaces`: a ValkeyCluster is created only where it is
    /// reconciled.
    pub watch_namespaces: crate::scope::WatchScope,
}

/// A 4xx with a plain-text reason.
pub(super) fn bad_request(status: StatusCode, reason: String) -> Response {
    (status, reason).into_response()
}
