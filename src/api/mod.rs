//! CRD types per kind and version.
