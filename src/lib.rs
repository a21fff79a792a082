//! valkey-operator: module tree only (see docs/architecture.md).
pub mod api;
pub mod backup;
pub mod cache;
pub mod controller;
pub mod driver;
pub mod plan;
pub mod plugin;
pub mod resolve;
pub mod scope;
pub mod settings;
pub mod telemetry;
pub mod time;
pub mod topology;
pub mod webhook;
