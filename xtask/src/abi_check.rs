//! `cargo xtask abi-check [--bless]`: run the test that compares the layout of every frozen v1
//! ABI type (crate `pincer-plugin-abi`) with the committed baseline (`plugin-api/abi/v1.layout.txt`). The same test runs in
//! `cargo test`, so CI catches a layout change either way; this command is the short path, and
//! `--bless` (only before 1.0 is published) rewrites the baseline.

use std::process::{Command, ExitCode};

use anyhow::{Context, Result};

pub(crate) fn run(bless: bool) -> Result<ExitCode> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut command = Command::new(cargo);
    command.args([
        "test",
        "-p",
        "pincer-plugin-abi",
        "--lib",
        "abi_layouts_match_the_committed_baseline",
    ]);
    if bless {
        command.env("PINCER_ABI_BLESS", "1");
    }
    let status = command.status().context("cannot run cargo")?;
    if status.success() && bless {
        println!("abi-check: baseline rewritten: plugin-api/abi/v1.layout.txt (review the diff)");
    }
    Ok(if status.success() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
