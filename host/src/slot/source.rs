//! Where long-running work takes its engine from: [`EngineSource`].
//!
//! A harness (or the gateway) does not hold one engine for its whole life: it asks its source
//! for the engine at the start of each turn, command or subagent operation, and keeps that
//! engine until the operation ends. A fixed source ([`FixedEngine`]) always answers the same
//! engine; a reloading runtime answers its newest generation, so a reload takes effect at the
//! next turn while a turn in flight finishes on the engine it started with.

use std::sync::Arc;

use crate::slot::guarded::GuardedEngine;

/// Gives the engine for the next piece of work.
pub trait EngineSource: Send + Sync {
    /// The engine to run the next turn, command or subagent operation on.
    fn current(&self) -> Arc<GuardedEngine>;
}

/// One engine, always.
#[derive(Clone)]
pub struct FixedEngine(pub Arc<GuardedEngine>);

impl EngineSource for FixedEngine {
    fn current(&self) -> Arc<GuardedEngine> {
        Arc::clone(&self.0)
    }
}
