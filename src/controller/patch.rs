//! Typed bodies of the status writes both controllers make: nothing is patched from untyped
//! JSON, so a misspelt field does not compile.

use kube::Resource;
use serde::Serialize;

/// `{"status": ...}`: a merge (or strategic merge) patch of an object's status subresource.
/// With a status type whose unset fields are skipped, only the fields set are written.
#[derive(Debug, Serialize)]
pub struct StatusPatch<S> {
    pub status: S,
}

/// `{"apiVersion", "kind", "status"}`: a server-side apply of an object's whole status, owned
/// by the applying field manager.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StatusApply<S> {
    api_version: String,
    kind: String,
    status: S,
}

impl<S> StatusApply<S> {
    /// The status of an object of kind `K`.
    pub fn new<K: Resource<DynamicType = ()>>(status: S) -> Self {
        StatusApply {
            api_version: K::api_version(&()).into_owned(),
            kind: K::kind(&()).into_owned(),
            status,
        }
    }
}
