//! valkey-operator: module tree only (see docs/architecture.md).
pub mod api;
pub mod driver;
