//! Version 1 of the ABI: every type that crosses the boundary between host and plugin.
//!
//! **API Boundary.** These types are frozen for the whole 1.x series. Nothing here may change
//! layout; additions go through the `extension` members (see the crate docs, "Evolution").

pub mod engine;
pub mod message;
pub mod module;
pub mod runtime_settings;

pub use engine::*;
pub use message::*;
pub use module::*;
pub use runtime_settings::*;
