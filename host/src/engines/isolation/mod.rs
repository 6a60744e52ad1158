//! The process-isolation tier: what an isolated engine's worker process does to itself and how the host runs it.

pub mod confine;
