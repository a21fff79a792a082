//! Local Kubernetes harness for valkey-operator.
//!
//! * [`kubelet`]: our own kubelet (`vk-kubelet` binary) that runs pods as local processes in
//!   network namespaces, so a real kube-apiserver/scheduler/controller-manager can be used on
//!   a machine without Docker.
//! * [`faults`]: fault hooks for tests (kill/pause a container, cut links, stop a node),
//!   working from the kubelet's state files.
//! * [`state`]: the on-disk layout both of them share.

pub mod certs;
pub mod dns;
pub mod faults;
pub mod harness;
pub mod kubelet;
pub mod safety;
pub mod state;
pub mod valkey;
pub mod workload;
