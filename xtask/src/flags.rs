//! The command line of `cargo xtask`, parsed by hand: a command, its few flags, and pass-through arguments after `--`.

use std::ffi::OsString;
use std::fmt;
use std::path::PathBuf;

use crate::bench_peer::{Peer, PeerConfig};

/// The help text, printed by `cargo xtask help` and after every usage error.
pub(crate) const USAGE: &str = "\
usage: cargo xtask <command> [options]

commands:
  build-plugins [--release]   build every plugin cdylib in one cargo call and stage it, with its
                              manifest (library + sha256 filled in), under <target>/plugins/<id>/;
                              test fixtures go to <target>/plugin-variants/<name>/
  test [-- <cargo test args>] build-plugins, then `cargo test --workspace` with
                              PINCER_STAGED_PLUGINS and PINCER_PLUGIN_VARIANTS set
  demo                        build-plugins and the `pincer` binary, then walk through doctor,
                              assemble, a quarantined panic and the rejected variants
  bench [-- <cargo bench args>]
                              build-plugins --release, then `cargo bench` of pincer-host (plugin
                              boundary, messages), pincer-tests (sessions) and pincer-plugin-api
                              (token estimate)
  bench --peer openclaw [--sizes N,N,...] [--runs N]
                              side by side with OpenClaw 2026.9.6: install Node 24 and openclaw
                              under <target>/peer/ (once), generate sessions of each size
                              (default 1000,10000,100000), open + build the leaf's context in both,
                              one fresh process per run (default 5 runs after a discarded cold
                              one); table printed and written to <target>/peer/report.md
  abi-check [--bless]         compare the layout of every frozen v1 ABI type with the committed
                              baseline plugin-api/abi/v1.layout.txt (also run by `cargo test`);
                              --bless rewrites the baseline (only before 1.0 is published)
  new-plugin <id> [--out-of-tree DIR]
                              start a new engine in plugins/<id>/: a cdylib crate with a working
                              minimal engine and its manifest, added to the workspace members;
                              with --out-of-tree, a standalone crate in DIR that builds outside
                              this workspace (pincer-plugin-api as a path dependency), packaged
                              with `pincer plugins pack DIR`
  help                        print this text
";

/// One parsed invocation.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Command {
    Help,
    BuildPlugins {
        release: bool,
    },
    Test {
        cargo_args: Vec<OsString>,
    },
    Demo,
    /// `cargo bench` of the workspace's benchmarks, or, with `peer`, the side-by-side run.
    Bench {
        cargo_args: Vec<OsString>,
        peer: Option<PeerConfig>,
    },
    NewPlugin {
        id: String,
        out_of_tree: Option<PathBuf>,
    },
    AbiCheck {
        bless: bool,
    },
}

/// A command line that does not match [`USAGE`].
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct UsageError(String);

impl fmt::Display for UsageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Parses the arguments that follow the binary name.
pub(crate) fn parse(args: impl IntoIterator<Item = OsString>) -> Result<Command, UsageError> {
    let mut args = args.into_iter();
    let Some(command) = args.next() else {
        return Err(UsageError("no command given".to_owned()));
    };
    let command = command
        .into_string()
        .map_err(|it| UsageError(format!("unknown command {it:?}")))?;

    // Split what belongs to us from what is passed through after `--`.
    let mut own = Vec::new();
    let mut pass_through = Vec::new();
    let mut after_separator = false;
    for arg in args {
        if after_separator {
            pass_through.push(arg);
        } else if arg == "--" {
            after_separator = true;
        } else {
            own.push(arg);
        }
    }
    let takes_pass_through = matches!(command.as_str(), "test" | "bench");
    if after_separator && !takes_pass_through {
        return Err(UsageError(format!(
            "`{command}` takes no arguments after `--`"
        )));
    }

    if command == "bench" {
        let peer = parse_peer_flags(&own)?;
        if peer.is_some() && after_separator {
            return Err(UsageError(
                "`bench --peer` takes no arguments after `--`".to_owned(),
            ));
        }
        return Ok(Command::Bench {
            cargo_args: pass_through,
            peer,
        });
    }

    if command == "new-plugin" {
        let utf8 = |id: &OsString| {
            id.to_str()
                .map(str::to_owned)
                .ok_or_else(|| UsageError(format!("plugin id {id:?} is not UTF-8")))
        };
        return match own.as_slice() {
            [id] => Ok(Command::NewPlugin {
                id: utf8(id)?,
                out_of_tree: None,
            }),
            [id, flag, dir] | [flag, dir, id] if flag == "--out-of-tree" => {
                Ok(Command::NewPlugin {
                    id: utf8(id)?,
                    out_of_tree: Some(PathBuf::from(dir)),
                })
            }
            _ => Err(UsageError(
                "`new-plugin` takes one plugin id, and optionally --out-of-tree DIR".to_owned(),
            )),
        };
    }

    let mut release = false;
    let mut bless = false;
    for arg in &own {
        match (command.as_str(), arg.to_str()) {
            ("build-plugins", Some("--release")) if !release => release = true,
            ("abi-check", Some("--bless")) if !bless => bless = true,
            _ => {
                return Err(UsageError(format!(
                    "unexpected argument {arg:?} for `{command}`"
                )))
            }
        }
    }

    match command.as_str() {
        "help" | "--help" | "-h" => Ok(Command::Help),
        "build-plugins" => Ok(Command::BuildPlugins { release }),
        "test" => Ok(Command::Test {
            cargo_args: pass_through,
        }),
        "demo" => Ok(Command::Demo),
        "abi-check" => Ok(Command::AbiCheck { bless }),
        _ => Err(UsageError(format!("unknown command `{command}`"))),
    }
}

/// The flags of `bench` before `--`: none, or `--peer NAME` with optional `--sizes` and `--runs`.
fn parse_peer_flags(own: &[OsString]) -> Result<Option<PeerConfig>, UsageError> {
    let mut peer: Option<Peer> = None;
    let mut sizes: Option<Vec<usize>> = None;
    let mut runs: Option<u32> = None;
    let mut args = own.iter();
    while let Some(arg) = args.next() {
        let flag = arg
            .to_str()
            .ok_or_else(|| UsageError(format!("unexpected argument {arg:?} for `bench`")))?;
        let mut value = || {
            args.next()
                .and_then(|it| it.to_str())
                .ok_or_else(|| UsageError(format!("`bench {flag}` needs a value")))
        };
        match flag {
            "--peer" if peer.is_none() => {
                let name = value()?;
                peer = Some(name.parse().map_err(UsageError)?);
            }
            "--sizes" if sizes.is_none() => {
                let list = value()?;
                let parsed = list
                    .split(',')
                    .map(|it| it.trim().replace('_', "").parse::<usize>())
                    .collect::<Result<Vec<_>, _>>();
                match parsed {
                    Ok(list) if !list.is_empty() && list.iter().all(|&n| n > 0) => {
                        sizes = Some(list);
                    }
                    _ => {
                        return Err(UsageError(format!(
                            "`--sizes` takes entry counts above 0 separated by commas (e.g. 1000,10000), not {list:?}"
                        )))
                    }
                }
            }
            "--runs" if runs.is_none() => {
                let text = value()?;
                match text.parse::<u32>() {
                    Ok(n) if n > 0 => runs = Some(n),
                    _ => {
                        return Err(UsageError(format!(
                            "`--runs` takes a whole number above 0, not {text:?}"
                        )))
                    }
                }
            }
            _ => {
                return Err(UsageError(format!(
                    "unexpected argument {arg:?} for `bench`"
                )))
            }
        }
    }
    match peer {
        Some(peer) => Ok(Some(PeerConfig {
            peer,
            sizes: sizes.unwrap_or_else(|| PeerConfig::DEFAULT_SIZES.to_vec()),
            runs: runs.unwrap_or(PeerConfig::DEFAULT_RUNS),
        })),
        None if sizes.is_some() || runs.is_some() => Err(UsageError(
            "`--sizes` and `--runs` go with `bench --peer openclaw`".to_owned(),
        )),
        None => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_strs(args: &[&str]) -> Result<Command, UsageError> {
        parse(args.iter().map(OsString::from))
    }

    #[test]
    fn parses_each_command() {
        assert_eq!(parse_strs(&["help"]), Ok(Command::Help));
        assert_eq!(
            parse_strs(&["build-plugins"]),
            Ok(Command::BuildPlugins { release: false })
        );
        assert_eq!(
            parse_strs(&["build-plugins", "--release"]),
            Ok(Command::BuildPlugins { release: true })
        );
        assert_eq!(parse_strs(&["demo"]), Ok(Command::Demo));
        assert_eq!(
            parse_strs(&["test", "--", "-p", "xtask", "--", "--nocapture"]),
            Ok(Command::Test {
                cargo_args: ["-p", "xtask", "--", "--nocapture"]
                    .map(OsString::from)
                    .to_vec()
            })
        );
        assert_eq!(
            parse_strs(&["new-plugin", "my-engine"]),
            Ok(Command::NewPlugin {
                id: "my-engine".to_owned(),
                out_of_tree: None,
            })
        );
        assert_eq!(
            parse_strs(&["new-plugin", "my-engine", "--out-of-tree", "/tmp/x"]),
            Ok(Command::NewPlugin {
                id: "my-engine".to_owned(),
                out_of_tree: Some(PathBuf::from("/tmp/x")),
            })
        );
        assert!(parse_strs(&["new-plugin"]).is_err());
        assert_eq!(
            parse_strs(&["abi-check", "--bless"]),
            Ok(Command::AbiCheck { bless: true })
        );
        assert_eq!(
            parse_strs(&["bench"]),
            Ok(Command::Bench {
                cargo_args: Vec::new(),
                peer: None
            })
        );
        assert_eq!(
            parse_strs(&["bench", "--", "--bench", "sessions"]),
            Ok(Command::Bench {
                cargo_args: ["--bench", "sessions"].map(OsString::from).to_vec(),
                peer: None
            })
        );
        assert_eq!(
            parse_strs(&["bench", "--peer", "openclaw"]),
            Ok(Command::Bench {
                cargo_args: Vec::new(),
                peer: Some(PeerConfig {
                    peer: Peer::OpenClaw,
                    sizes: PeerConfig::DEFAULT_SIZES.to_vec(),
                    runs: PeerConfig::DEFAULT_RUNS
                })
            })
        );
        assert_eq!(
            parse_strs(&[
                "bench",
                "--runs",
                "3",
                "--peer",
                "openclaw",
                "--sizes",
                "1000,10_000"
            ]),
            Ok(Command::Bench {
                cargo_args: Vec::new(),
                peer: Some(PeerConfig {
                    peer: Peer::OpenClaw,
                    sizes: vec![1000, 10_000],
                    runs: 3
                })
            })
        );
    }

    #[test]
    fn rejects_what_it_does_not_know() {
        assert!(parse_strs(&[]).is_err());
        assert!(parse_strs(&["frobnicate"]).is_err());
        assert!(parse_strs(&["demo", "--release"]).is_err());
        assert!(parse_strs(&["demo", "--", "x"]).is_err());
        assert!(parse_strs(&["build-plugins", "--release", "--release"]).is_err());
        assert!(parse_strs(&["test", "--nocapture"]).is_err());
        assert!(parse_strs(&["bench", "--peer"]).is_err());
        assert!(parse_strs(&["bench", "--peer", "pi"]).is_err());
        assert!(parse_strs(&["bench", "--runs", "3"]).is_err());
        assert!(parse_strs(&["bench", "--peer", "openclaw", "--runs", "0"]).is_err());
        assert!(parse_strs(&["bench", "--peer", "openclaw", "--sizes", "1000,"]).is_err());
        assert!(parse_strs(&["bench", "--peer", "openclaw", "--", "x"]).is_err());
        assert!(parse_strs(&["bench", "--peer", "openclaw", "--peer", "openclaw"]).is_err());
    }
}
