//! Owner references for the objects both build steps create: the reference is what deletes a
//! member's ConfigMap and Pod with its ValkeyNode, and a cluster's Services, PDB, Secrets and
//! ValkeyNodes with its ValkeyCluster, so nothing is ever built without one.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::{Resource, ResourceExt};

/// Why an object cannot be built.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    /// Every object read from the API server has a uid; one built by hand may not.
    #[error(
        "{kind} {namespace}/{name} has no metadata.uid, so the objects it owns cannot name it as their owner; only a {kind} read from the API server can be built (this is a bug in the caller)"
    )]
    NoUid {
        kind: String,
        namespace: String,
        name: String,
    },
}

/// A reconcile that cannot build its objects fails as `invalid` (and is retried).
impl From<BuildError> for super::Error {
    fn from(e: BuildError) -> Self {
        super::Error::Invalid(e.to_string())
    }
}

/// The controller owner reference naming `owner`; an error when it has no uid.
pub fn controller_owner<K: Resource<DynamicType = ()>>(
    owner: &K,
) -> Result<OwnerReference, BuildError> {
    owner
        .controller_owner_ref(&())
        .ok_or_else(|| BuildError::NoUid {
            kind: K::kind(&()).into_owned(),
            namespace: owner.namespace().unwrap_or_default(),
            name: owner.name_any(),
        })
}
