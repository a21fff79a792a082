//! A mocked API server for the controllers' I/O steps: a kube `Client` over tower-test's mock
//! service, and an [`ApiServer`] the test drives, one request at a time. A test runs the step
//! under test in a task, then answers each request the step makes and checks it (method, path,
//! query, body), so the API calls of a step are pinned without a cluster. What happens against
//! a real API server is the e2e suites' job.

use std::sync::Arc;

use http::{Request, Response, StatusCode};
use kube::Client;
use kube::client::Body;
use kube::runtime::reflector::store::Writer;
use serde_json::{Value, json};
use tower_test::mock::{Handle, SendResponse};

use crate::api::constants::API_VERSION;
use crate::api::{ValkeyCluster, ValkeyNodeSpec};
use crate::controller::{Context, MenuStores};
use crate::settings::Settings;
use crate::telemetry::Metrics;

/// The API server side of the mock.
pub struct ApiServer {
    handle: Handle<Request<Body>, Response<Body>>,
}

/// One request the code under test made, to be answered.
pub struct Call {
    pub method: String,
    /// Path and query, as sent (`/api/v1/namespaces/team/services/c?fieldManager=...`).
    pub uri: String,
    /// The body as JSON (`Null` when empty).
    pub body: Value,
    send: SendResponse<Response<Body>>,
}

/// A `Context` whose client talks to the returned [`ApiServer`] (operator namespace
/// `valkey-operator-system`, default settings, empty menu stores).
pub fn context() -> (Arc<Context>, ApiServer) {
    let (service, handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let client = Client::new(service, "default");
    let menu = MenuStores {
        configs: Writer::default().as_reader(),
        images: Writer::default().as_reader(),
        roles: Writer::default().as_reader(),
    };
    let ctx = Context::new(
        client,
        "valkey-operator-system".into(),
        menu,
        Settings::default(),
        Arc::new(Metrics::default()),
        None,
    );
    (Arc::new(ctx), ApiServer { handle })
}

impl ApiServer {
    /// The next request; panics when none comes within 5 s (the step made fewer calls than the
    /// test expects).
    pub async fn next(&mut self) -> Call {
        let waited = tokio::time::timeout(
            std::time::Duration::from_secs(5),
            self.handle.next_request(),
        )
        .await;
        let (request, send) = waited
            .expect("no request to the API server within 5 s")
            .expect("the client was dropped before making the request the test expects");
        let method = request.method().to_string();
        let uri = request.uri().to_string();
        let bytes = request.into_body().collect_bytes().await.unwrap();
        let body = if bytes.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&bytes).unwrap()
        };
        Call {
            method,
            uri,
            body,
            send,
        }
    }

    /// Whether the code under test made no (further) request: call once it has finished.
    pub fn idle(&mut self) -> bool {
        !matches!(self.handle.poll_request(), std::task::Poll::Ready(Some(_)))
    }
}

impl Call {
    /// Answers with `status` and `body`.
    pub fn respond(self, status: StatusCode, body: Value) {
        let response = Response::builder()
            .status(status)
            .header("content-type", "application/json")
            .body(Body::from(serde_json::to_vec(&body).unwrap()))
            .unwrap();
        self.send.send_response(response);
    }

    /// Answers `200 OK` with the request's own body (what an apply or a create returns, near
    /// enough for the code under test).
    pub fn echo(self) {
        let body = self.body.clone();
        self.respond(StatusCode::OK, body);
    }

    /// Answers `404 Not Found` as the API server does.
    pub fn not_found(self) {
        let status = json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
            "message": "not found", "reason": "NotFound", "code": 404});
        self.respond(StatusCode::NOT_FOUND, status);
    }

    /// `METHOD path` without the query.
    pub fn route(&self) -> String {
        let path = self.uri.split('?').next().unwrap_or_default();
        format!("{} {path}", self.method)
    }

    /// The query's value of `key`, decoded.
    pub fn query(&self, key: &str) -> Option<String> {
        let query = self.uri.split_once('?')?.1;
        form_urlencoded::parse(query.as_bytes())
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.into_owned())
    }
}

/// The ValkeyCluster `team/shop` (uid `uid-shop`, generation 2, 3 shards of 2) with `status`
/// (`Value::Null`: none).
pub fn cluster(status: Value) -> ValkeyCluster {
    serde_json::from_value(json!({
        "apiVersion": API_VERSION, "kind": "ValkeyCluster",
        "metadata": {"name": "shop", "namespace": "team", "uid": "uid-shop", "generation": 2},
        "spec": {"configRef": "standard", "shards": 3, "replicasPerShard": 1},
        "status": status,
    }))
    .unwrap()
}

/// The operator's passwords for a cluster (each names its user).
pub fn credentials() -> crate::resolve::acl::OperatorCredentials {
    crate::resolve::acl::OperatorCredentials {
        operator_password: "operator-pw".into(),
        replication_password: "replication-pw".into(),
        backup_password: "backup-pw".into(),
        restore_password: "restore-pw".into(),
        metrics_password: "metrics-pw".into(),
    }
}

/// A member spec of `shop` on Valkey 9.0.0, shard 0.
pub fn member_spec() -> ValkeyNodeSpec {
    serde_json::from_value(
        json!({"clusterName": "shop", "shard": 0, "configRef": "standard",
        "imageRef": "valkey", "image": "valkey/valkey:9.0.0", "version": "9.0.0",
        "resources": {}}),
    )
    .unwrap()
}

/// The ValkeyNode `team/<name>` (generation 1, [`member_spec`]) with `status`, as the API
/// server returns it.
pub fn member(name: &str, status: Value) -> Value {
    json!({
        "apiVersion": API_VERSION, "kind": "ValkeyNode",
        "metadata": {"name": name, "namespace": "team", "generation": 1},
        "spec": member_spec(),
        "status": status,
    })
}
