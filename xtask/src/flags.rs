//! The command line of `cargo xtask`, parsed by hand: a command, its few flags, and pass-through arguments after `--`.

use std::ffi::OsString;
use std::fmt;
use std::path::PathBuf;

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
                              build-plugins --release, then `cargo bench -p pincer-host`
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
    Bench {
        cargo_args: Vec<OsString>,
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
        "bench" => Ok(Command::Bench {
            cargo_args: pass_through,
        }),
        _ => Err(UsageError(format!("unknown command `{command}`"))),
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
                cargo_args: Vec::new()
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
    }
}
