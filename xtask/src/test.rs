//! `cargo xtask test`: stage the plugins (dev build), build the `pincer` binary the black-box
//! tests run, then run `cargo test --workspace` against them, and then
//! `cargo test -p pincer-plugin-api --features pincer-plugin-api/tiktoken`: the optional feature is
//! off in the workspace run, and its code and tests are compiled only with it.
//!
//! The tests that load real libraries find them through two variables:
//! `PINCER_STAGED_PLUGINS` (the normal plugins) and `PINCER_PLUGIN_VARIANTS` (the test-only variants).
//! Arguments after `--` go to both `cargo test` runs unchanged; the first run that fails gives
//! our exit code, and the second one is skipped.

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
    let code = staged.run_cargo(ws, &args)?;
    if code != ExitCode::SUCCESS {
        return Ok(code);
    }

    // The feature is named with its package so that extra `-p` arguments do not reject it.
    let mut args: Vec<OsString> = ["test", "-p", "pincer-plugin-api", "--features"]
        .map(OsString::from)
        .into();
    args.push(format!("pincer-plugin-api/{OPTIONAL_FEATURE}").into());
    args.extend(cargo_args.iter().cloned());
    staged.run_cargo(ws, &args)
}

/// The optional feature of `pincer-plugin-api` that the second run turns on.
const OPTIONAL_FEATURE: &str = "tiktoken";
