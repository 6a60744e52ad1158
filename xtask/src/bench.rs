//! `cargo xtask bench`: stage release builds of the plugins, then run the benchmarks of
//! `pincer-host` (plugin boundary, message model), `pincer-tests` (sessions: open + context,
//! durable appends), `pincer-plugin-api` (token estimate) and `lossless` (its store, assembly
//! and passes) in one `cargo bench`.
//!
//! The boundary benchmarks compare a call through the plugin boundary with the same engine
//! linked statically, so the staged libraries must be optimized like the bench build.
//! Arguments after `--` go to `cargo bench` unchanged, and its exit code is ours.
//! `bench --peer openclaw` is the side-by-side run of [`crate::bench_peer`].

use std::ffi::OsString;
use std::process::ExitCode;

use anyhow::Result;

use crate::build_plugins;
use crate::workspace::Workspace;

/// The packages whose benchmarks `cargo xtask bench` runs.
const BENCH_PACKAGES: [&str; 4] = [
    "pincer-host",
    "pincer-tests",
    "pincer-plugin-api",
    "lossless",
];

pub(crate) fn run(ws: &Workspace, cargo_args: &[OsString]) -> Result<ExitCode> {
    let staged = build_plugins::run(ws, build_plugins::Config { release: true })?;

    let mut args: Vec<OsString> = vec!["bench".into()];
    for package in BENCH_PACKAGES {
        args.push("-p".into());
        args.push(package.into());
    }
    args.extend(cargo_args.iter().cloned());
    staged.run_cargo(ws, &args)
}
