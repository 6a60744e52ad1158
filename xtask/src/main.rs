//! xtask: the developer tasks of the pincer workspace, written in Rust instead of shell.
//!
//! This binary is not published; the `xtask` alias in `.cargo/config.toml` wires it in,
//! so `cargo xtask <command>` builds and runs it from anywhere in the tree.
//! `cargo xtask help` lists the commands.
//!
//! Each task lives in its own module with a `run` function:
//! `build_plugins` builds the plugin `cdylib`s and stages them with their manifests,
//! `test`, `demo` and `bench` build on it (`bench_peer` measures OpenClaw beside pincer), `abi_check` guards the frozen ABI, `new_plugin` starts an engine from a template,
//! and `tidy` is a plain `#[test]` that `cargo test --workspace` runs.

mod abi_check;
mod bench;
mod bench_peer;
mod build_plugins;
mod demo;
mod demo_gateway;
mod flags;
mod new_plugin;
mod ordered_json;
mod test;
#[cfg(test)]
mod tidy;
mod workspace;

use std::process::ExitCode;

use crate::flags::Command;
use crate::workspace::Workspace;

fn main() -> ExitCode {
    let command = match flags::parse(std::env::args_os().skip(1)) {
        Ok(it) => it,
        Err(err) => {
            eprintln!("xtask: {err}");
            eprint!("{}", flags::USAGE);
            return ExitCode::from(2);
        }
    };
    match run(command) {
        Ok(code) => code,
        Err(err) => {
            eprintln!("xtask: {err:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(command: Command) -> anyhow::Result<ExitCode> {
    if let Command::Help = command {
        print!("{}", flags::USAGE);
        return Ok(ExitCode::SUCCESS);
    }
    let root = workspace::project_root();
    std::env::set_current_dir(&root)
        .map_err(|err| anyhow::format_err!("cannot enter {}: {err}", root.display()))?;
    let ws = Workspace::load(&root)?;
    match command {
        Command::Help => unreachable!("handled above"),
        Command::BuildPlugins { release } => {
            build_plugins::run(&ws, build_plugins::Config { release })?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Test { cargo_args } => test::run(&ws, &cargo_args),
        Command::Demo => demo::run(&ws),
        Command::Bench {
            cargo_args,
            peer: None,
        } => bench::run(&ws, &cargo_args),
        Command::Bench {
            peer: Some(peer), ..
        } => bench_peer::run(&ws, &peer),
        Command::NewPlugin { id, out_of_tree } => match out_of_tree {
            Some(dir) => new_plugin::run_out_of_tree(&ws, &id, &dir),
            None => new_plugin::run(&ws, &id),
        },
        Command::AbiCheck { bless } => abi_check::run(bless),
    }
}
