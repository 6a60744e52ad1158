//! The ABI layer: `#[repr(C)]`, `StableAbi` types, frozen per major version.
//!
//! `v1` is the only version so far; `latest` always names the newest, and hosts keep one
//! adapter per older version (the Zed extension-host pattern) once there is more than one.
//! Engine authors rarely need this module: the authoring layer at the crate root covers it.

pub mod v1;

#[doc(hidden)]
pub mod layout_report;

pub use v1 as latest;

/// FFI-safe standard types used in the ABI, re-exported so no other crate names `abi_stable`.
pub use abi_stable::std_types::{RArc, RBox, ROption, RResult, RSlice, RStr, RString, RVec};
