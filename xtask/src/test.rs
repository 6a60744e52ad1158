//! `cargo xtask test`: stage the plugins (dev build), build the `pincer` binary the black-box
//! tests run, then run `cargo test --workspace` against them, and then
//! `cargo test -p pincer-plugin-api --features pincer-plugin-api/tiktoken`: the optional feature is
//! off in the workspace run, and its code and tests are compiled only with it.
//!
//! The tests that load real libraries find them through two variables:
//! `PINCER_STAGED_PLUGINS` (the normal plugins) and `PINCER_PLUGIN_VARIANTS` (the test-only variants).
//! Then the engine suites a third time with every plugin isolated (`PINCER_ISOLATION=process`,
//! the process-isolation tier), unless arguments were given.
//! Arguments after `--` go to both `cargo test` runs unchanged; the first run that fails gives
//! our exit code, and the later ones are skipped.

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
    let code = staged.run_cargo(ws, &args)?;
    if code != ExitCode::SUCCESS || !cargo_args.is_empty() {
        return Ok(code);
    }

    // The engine suites again with every plugin isolated: an engine cannot tell the
    // difference, so they pass unchanged (a test whose outcome differs says so).
    let mut args: Vec<OsString> = ["test", "-p", "pincer-tests"].map(OsString::from).into();
    for suite in ISOLATED_SUITES {
        args.push("--test".into());
        args.push((*suite).into());
    }
    staged.run_cargo_with(ws, &args, &[("PINCER_ISOLATION", "process")])
}

/// The test files run a second time with `PINCER_ISOLATION=process`: every test that drives
/// `sliding-window` or `faulty` through the slot, the harness, the CLI, reload and the
/// gateway, and the checks of what engines return (`checks`). (`session_workers` and `trust`
/// are about threads and crashes of the host process itself; `isolation.rs` holds their
/// isolated counterparts.)
const ISOLATED_SUITES: &[&str] = &[
    "semantics",
    "faults",
    "harness",
    "cli",
    "tau_bench",
    "reload",
    "gateway",
    "model",
    "compaction",
    "loading",
    "doctor_truths",
    "checks",
];

/// The optional feature of `pincer-plugin-api` that the second run turns on.
const OPTIONAL_FEATURE: &str = "tiktoken";
