//! Pure desired-state computation: the config chain and its merge, valkey.conf rendering with
//! forced settings, and the ACL file. No I/O here; the controllers feed in what they read.
pub mod acl;
pub mod certificate_expiry;
pub mod chain;
pub mod conf;
pub mod live;
pub mod memory;
pub mod tls;

pub use chain::{
    Menu, MenuMap, MenuRef, ResolveError, ResolvedConfig, menu_refs, merge_bindings,
    refuse_major_downgrade, resolve_config, resolve_roles,
};
