//! The core's typed values, shared by every layer: ids, owners, method names, plugin status,
//! host requirements. Depends on nothing else in the crate.

/// The id of the built-in default engine, the fallback of every quarantined engine.
pub const LEGACY_ENGINE_ID: &str = "legacy";
