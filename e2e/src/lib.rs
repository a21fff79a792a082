//! End-to-end harness for valkey-operator, against the local cluster `make up` starts (whose
//! kubelet is the `vk-kubelet` crate, e2e/kubelet).
//!
//! * [`faults`]: fault hooks for tests (kill/pause a container, cut links, stop a node),
//!   working from the kubelet's state files ([`vk_kubelet::state`]).
//! * [`floors`]: vk-bench's floors, measured on local valkey-server processes (no cluster).
//! * [`real_node`]: placing pods on the real node (upstream kubelet, containerd, images).
//! * [`report`]: docs/benchmarks.md, its plots and figures.json from vk-bench's figures.

pub mod certs;
pub mod cri;
pub mod dns;
pub mod faults;
pub mod floors;
pub mod harness;
pub mod real_node;
pub mod report;
pub mod safety;
pub mod valkey;
pub mod webhook;
pub mod workload;
