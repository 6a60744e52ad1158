//! Reports over a runtime: `doctor` (what `pincer doctor` prints), `health`
//! (what `pincer health` and the gateway's `health` answer) and
//! `exercise` (every method of one engine, what `pincer check-engine` prints) and
//! [`plugins`] (`pincer plugins list|inspect`, from manifests alone).

pub(crate) mod doctor;
pub(crate) mod exercise;
pub(crate) mod health;
pub mod plugins;
pub(crate) mod sessions;

pub use doctor::{doctor, DoctorReport};
pub use exercise::{exercise_engine, MethodOutcome};
pub use health::HealthReport;
