//! Engines built into the host. Today: `legacy`, the default and the fallback of every
//! quarantined engine.

pub mod legacy;
