//! API group `valkey.gomomento.com`, version `v1alpha1`: the eight custom resources, their
//! shared parts, validation rules and the generated CRDs.

// Several `printcolumn(...)` entries legitimately repeat `type_ = "string"`; clippy reads the
// derive's arguments as duplicated attributes.
#![allow(clippy::duplicated_attributes)]

pub mod acl;
pub mod autoscaling;
pub mod backup;
pub mod cluster;
pub mod config;
pub mod constants;
pub mod crd;
pub mod external;
pub mod image;
pub mod metering;
pub mod metrics;
pub mod node;
pub mod placement;
pub mod resources;
pub mod role;
pub mod storage;
pub mod v1beta1;
pub mod validation;

pub use acl::{AclBinding, AclPermission, ChannelPermission, KeyAccess, KeyPermission};
pub use autoscaling::{Autoscaling, AutoscalingStatus, Thresholds, UtilizationStatus};
pub use cluster::{
    ClusterNodeStatus, ClusterProgress, ClusterState, TlsSpec, ValkeyCluster, ValkeyClusterSpec,
    ValkeyClusterStatus,
};
pub use config::{ValkeyConfig, ValkeyConfigSpec, ValkeyConfigStatus};
pub use image::{ValkeyImage, ValkeyImageSpec, ValkeyImageStatus};
pub use metering::{ValkeyMeteringRecord, ValkeyMeteringRecordSpec, ValkeyMeteringRecordStatus};
pub use node::{Lifecycle, NodePlacement, NodeRole, ValkeyNode, ValkeyNodeSpec, ValkeyNodeStatus};
pub use placement::{Placement, ZoneSpread};
pub use resources::Resources;
pub use role::{
    CategoryRule, CommandRule, RuleAccess, ValkeyRole, ValkeyRoleSpec, ValkeyRoleStatus,
};
pub use storage::{Storage, VolumeRetention};
