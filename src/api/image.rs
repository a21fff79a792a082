//! ValkeyImage: an allowlist entry for a permitted Valkey container image.

use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

use super::validation::{DNS1123_SUBDOMAIN, IMAGE_DIGEST, IMAGE_REPOSITORY, IMAGE_TAG};

/// The finalizer on a ValkeyImage some ValkeyConfig names in `spec.imageRef` (Momento v0.9
/// deletion protection): a delete waits until no config names it.
pub const IMAGE_IN_USE_FINALIZER: &str = "valkey.gomomento.com/image-in-use";

/// An allowlisted Valkey container image (platform team). ValkeyConfigs reference it by name
/// in `spec.imageRef`; if no ValkeyImage of that name exists, clusters using the config cannot
/// run. Repointing a name at a different image rolls every cluster that uses it.
#[derive(CustomResource, Clone, Debug, PartialEq, Eq, Serialize, Deserialize, KubeSchema)]
#[kube(
    group = "valkey.gomomento.com",
    version = "v1alpha1",
    kind = "ValkeyImage",
    doc = "An allowlist entry for a permitted Valkey container image (cluster-scoped, platform team). ValkeyConfigs reference it by name in spec.imageRef.",
    plural = "valkeyimages",
    shortname = "vkimg",
    category = "valkey",
    status = "ValkeyImageStatus",
    cel,
    printcolumn(
        name = "IMAGE",
        type_ = "string",
        json_path = ".spec.repository",
        description = "Image repository"
    ),
    printcolumn(
        name = "TAG",
        type_ = "string",
        json_path = ".spec.tag",
        description = "Image tag"
    ),
    printcolumn(
        name = "VERSION",
        type_ = "string",
        json_path = ".spec.version",
        description = "Valkey version the image provides"
    ),
    printcolumn(
        name = "AGE",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct ValkeyImageSpec {
    /// Image repository, optionally with registry host and port, without tag or digest; for
    /// example `valkey/valkey` or `registry.example.com:5000/mirror/valkey`.
    #[schemars(length(max = 255))]
    #[x_kube(validation = IMAGE_REPOSITORY.rule("repository"))]
    pub repository: String,

    /// Image tag, for example `9.0.0`.
    #[schemars(length(max = 128))]
    #[x_kube(validation = IMAGE_TAG.rule("tag"))]
    pub tag: String,

    /// Optional image digest (`sha256:<64 hex>`). When set, pods pull `repository@digest` and
    /// the tag is informational, so the allowlist entry cannot be changed by re-tagging.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 71))]
    #[x_kube(validation = IMAGE_DIGEST.rule("digest"))]
    pub digest: Option<String>,

    /// Valkey version the image provides, for example `9.0.0` (a free string, as in Momento's
    /// API; `MAJOR.MINOR[.PATCH]` is what the operator reads to choose features such as atomic
    /// slot migration from 9.0 and to check downgrades; anything else is taken as unknown).
    #[schemars(length(min = 1, max = 128))]
    pub version: String,

    /// Secrets the kubelet pulls the image with, for a private registry: the names of
    /// `kubernetes.io/dockerconfigjson` Secrets that must exist in every namespace whose
    /// clusters use the image (the namespaces' provisioning creates them). A change rolls the
    /// members, as a repointed image does.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 8))]
    #[x_kube(validation = super::validation::unique_by_rule("imagePullSecrets", "name"))]
    pub image_pull_secrets: Vec<PullSecret>,
}

/// A Secret holding registry credentials, by name.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct PullSecret {
    /// Name of the Secret, in the namespace of each cluster using the image.
    #[schemars(length(max = 253))]
    #[x_kube(validation = DNS1123_SUBDOMAIN.rule("name"))]
    pub name: String,
}

/// Observed state of a ValkeyImage (the operator writes `observedGeneration` once its caches hold that generation).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ValkeyImageStatus {
    /// Generation of the spec last observed by the operator.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

impl ValkeyImageSpec {
    /// The image reference pods run: `repository@digest` when a digest is pinned, otherwise
    /// `repository:tag`.
    pub fn image_reference(&self) -> String {
        match &self.digest {
            Some(digest) => format!("{}@{}", self.repository, digest),
            None => format!("{}:{}", self.repository, self.tag),
        }
    }

    /// The names of the Secrets pods pull the image with.
    pub fn pull_secret_names(&self) -> Vec<String> {
        self.image_pull_secrets
            .iter()
            .map(|s| s.name.clone())
            .collect()
    }
}
