//! `cargo xtask test`: stage the plugins (dev build), build the `pincer` binary the black-box
//! tests run, then run `cargo test --workspace` against them.
//!
//! The tests that load real libraries find them through two variables:
//! `PINCER_STAGED_PLUGINS` (the normal plugins) and `PINCER_PLUGIN_VARIANTS` (the test-only variants).
//! Arguments after `--` go to `cargo test` unchanged, and its exit code is ours.

use std::ffi::OsString;
use std::process::ExitCode;

use anyhow::Result;

use crate::build_plugins;
use crate::workspace::Workspace;

pub(crate) fn run(ws: &Workspace, cargo_args: &[OsString]) -> Result<ExitCode> {
    let staged = build_plugins::run(ws, build_plugins::Config { release: false })?;

    // `cargo test` does not rebuild a binary that only other packages' tests run.
    ws.build_pincer()?;

    let mut args: Vec<OsString> = vec!["test".into(), "--workspace".into()];
    args.extend(cargo_args.iter().cloned());
    staged.run_cargo(ws, &args)
}
