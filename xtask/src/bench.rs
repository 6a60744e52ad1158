//! `cargo xtask bench`: stage release builds of the plugins, then run `cargo bench -p pincer-host`.
//!
//! The benchmarks compare a call through the plugin boundary with the same engine linked statically,
//! so the staged libraries must be optimized like the bench build.
//! Arguments after `--` go to `cargo bench` unchanged, and its exit code is ours.

use std::ffi::OsString;
use std::process::ExitCode;

use anyhow::Result;

use crate::build_plugins;
use crate::workspace::Workspace;

pub(crate) fn run(ws: &Workspace, cargo_args: &[OsString]) -> Result<ExitCode> {
    let staged = build_plugins::run(ws, build_plugins::Config { release: true })?;

    let mut args: Vec<OsString> = vec!["bench".into(), "-p".into(), "pincer-host".into()];
    args.extend(cargo_args.iter().cloned());
    staged.run_cargo(ws, &args)
}
