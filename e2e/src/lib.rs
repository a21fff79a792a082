//! End-to-end harness for valkey-operator, against the local cluster `make up` starts (real
//! nodes: the upstream kubelet with containerd, e2e/real-node.sh).
//!
//! * [`faults`]: fault hooks for tests (kill/pause a container, cut links, stop a node),
//!   through the nodes' container runtime ([`cri`]).
//! * [`floors`]: vk-bench's floors, measured on local valkey-server processes (no cluster).
//! * [`guides`]: docs/connect.md's client programs, built and run as an app in a pod runs.
//! * [`real_node`]: placing pods on the real node (upstream kubelet, containerd, images).
//! * [`report`]: docs/benchmarks.md, its plots and figures.json from vk-bench's figures.

pub mod backups;
pub mod certs;
pub mod cri;
pub mod dns;
pub mod faults;
pub mod floors;
pub mod guides;
pub mod harness;
pub mod outage;
pub mod real_node;
pub mod report;
pub mod safety;
pub mod valkey;
pub mod webhook;
pub mod workload;
