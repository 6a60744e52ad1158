//! Rules of the repository that no compiler checks, enforced by a plain `#[test]` so `cargo test --workspace` runs them.
//!
//! - Every plugin folder (a folder under `plugins/` with a `Cargo.toml`) has a `pincer.plugin.json`
//!   with an `id`, and builds a `cdylib`.
//! - Only `plugin-api/abi/Cargo.toml` names `abi_stable` as a dependency: the ABI stays in the ABI crate.
//! - Every `.rs` file of the crates and tests starts with a `//!` doc.
//! - No `.rs` file has trailing whitespace.
//! - The host's top-level modules depend one way (see [`HOST_LAYERS`]): a `crate::<module>`
//!   path in `host/src/<module>/…` may name only modules of lower layers (or its own).
//! - `ARCHITECTURE.md`'s code map names every source folder and file of [`CODE_MAP_ROOTS`]
//!   (the rules are [`CODE_MAP_RULES`]), as rust-analyzer's tidy checks its docs.
//!
//! Each problem is printed as `path:line: rule`; the test lists them all, then fails.

use std::fmt;
use std::fs;
use std::path::{Path, PathBuf};

use crate::workspace::{project_root, PLUGIN_MANIFEST};

/// The folders whose `.rs` files must start with a `//!` doc.
const DOCUMENTED_ROOTS: &[&str] = &[
    "plugin-api/src",
    "host/src",
    "plugins",
    "xtask/src",
    "tests",
];

/// The layering of `host/src`, lowest first. A module may name (`crate::<module>`, in a `use`
/// or inline) only itself and the modules listed before it:
///
/// | layer | module    | holds                                                          | may use                       |
/// |-------|-----------|----------------------------------------------------------------|-------------------------------|
/// | 0     | `disk`    | the I/O seam of every durable write, failure injection         | —                             |
/// | 1     | `types`   | the `legacy` id, plugin-id validation, method names            | disk                          |
/// | 2     | `config`  | `$PINCER_HOME`, `pincer.json`                                  | disk, types                   |
/// | 3     | `plugins` | manifest, discovery, verify, cache, verified library           | disk … config                 |
/// | 4     | `engines` | engine instance and backend seam, requests, bounded calls, services, `legacy` | disk … plugins |
/// | 5     | `slot`    | registry, runtime, resolution, quarantine, guard, projection, requirements | disk … engines   |
/// | 5½    | `admin`   | the operator's plugin commands: install, enable, disable, select, remove | disk … slot      |
/// | 6     | `session` | transcripts, running an engine over one                        | disk … slot                  |
/// | 7     | `compaction` | the built-in compaction: cut, summaries, `compaction` entries, the runtime's compactor | disk … session |
/// | 8     | `report`  | `doctor`, `health`, `check-engine` reports                     | disk … compaction            |
///
/// The binary (`host/src/bin/`) uses the library through `pincer_host::` and sits above all.
/// A new top-level module must be added here (which says where it belongs) before it is used.
const HOST_LAYERS: &[&str] = &[
    "disk",
    "types",
    "config",
    "plugins",
    "engines",
    "slot",
    "admin",
    "session",
    "model",
    "compaction",
    "harness",
    "report",
    "gateway",
    "fuzzing",
];

/// The source trees whose every folder and `.rs` file `ARCHITECTURE.md`'s code map must name.
/// A `*` stands for every folder at that place.
const CODE_MAP_ROOTS: &[&str] = &[
    "host/src",
    "host/benches",
    "plugin-api/src",
    "plugin-api/benches",
    "xtask/src",
    "tests/src",
    "tests/tests",
    "tests/benches",
    "plugins/*/src",
    "plugins/*/benches",
    "plugins/testing/*/src",
];

/// What naming a path in the code map means (the check's message repeats it).
const CODE_MAP_RULES: &str = "\
the code map is `ARCHITECTURE.md` from `## Code map` to the next `## ` heading; a path is named \
when some `backticked` text there is the path or its end, whole names only: `tree.rs`, \
`session/tree.rs` and `host/src/session/tree.rs` name host/src/session/tree.rs, and a folder is \
named with or without its trailing `/` (`isolation/`) or by a path inside it \
(`window/tests.rs` names the folder window/). `{a,b}.rs` names a.rs and b.rs. \
`lib.rs`, `main.rs` and `mod.rs` need no entry: their folder or crate stands for them, and a \
root of the list needs none either";

/// The only manifest allowed to depend on `abi_stable`.
const ABI_STABLE_OWNER: &str = "plugin-api/abi/Cargo.toml";

#[test]
fn tidy() {
    let root = project_root();
    let mut problems = Vec::new();
    check_plugin_folders(&root, &mut problems);
    check_abi_stable_is_confined(&root, &mut problems);
    check_module_docs(&root, &mut problems);
    check_trailing_whitespace(&root, &mut problems);
    check_host_layering(&root, &mut problems);
    check_code_map(&root, &mut problems);
    if !problems.is_empty() {
        let list: Vec<String> = problems.iter().map(ToString::to_string).collect();
        panic!(
            "tidy found {} problem(s):\n{}\n",
            problems.len(),
            list.join("\n")
        );
    }
}

struct Problem {
    /// Relative to the repository root, with `/` separators.
    path: String,
    line: usize,
    rule: String,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}: {}", self.path, self.line, self.rule)
    }
}

fn problem(root: &Path, path: &Path, line: usize, rule: impl Into<String>) -> Problem {
    Problem {
        path: relative(root, path),
        line,
        rule: rule.into(),
    }
}

fn check_plugin_folders(root: &Path, problems: &mut Vec<Problem>) {
    for cargo_toml in files_named(&root.join("plugins"), |name| name == "Cargo.toml") {
        let dir = cargo_toml.parent().expect("a file has a folder");
        let manifest = dir.join(PLUGIN_MANIFEST);
        match fs::read_to_string(&manifest) {
            Err(_) => problems.push(problem(
                root,
                &cargo_toml,
                1,
                format!("plugin folder has no {PLUGIN_MANIFEST}"),
            )),
            Ok(text) => match serde_json::from_str::<serde_json::Value>(&text) {
                Err(err) => problems.push(problem(
                    root,
                    &manifest,
                    err.line(),
                    format!("not valid JSON: {err}"),
                )),
                Ok(json) => {
                    if json["id"].as_str().is_none_or(str::is_empty) {
                        problems.push(problem(
                            root,
                            &manifest,
                            1,
                            "plugin manifest has no string `id`",
                        ));
                    }
                }
            },
        }
        match fs::read_to_string(&cargo_toml) {
            Err(err) => problems.push(problem(root, &cargo_toml, 1, format!("cannot read: {err}"))),
            Ok(text) => {
                if !declares_cdylib(&text) {
                    problems.push(problem(
                        root,
                        &cargo_toml,
                        1,
                        "plugin crate has no `cdylib` in `crate-type`",
                    ));
                }
            }
        }
    }
}

/// Whether a `crate-type = [...]` list in the manifest names `cdylib`.
fn declares_cdylib(cargo_toml: &str) -> bool {
    cargo_toml.match_indices("crate-type").any(|(start, _)| {
        let rest = &cargo_toml[start..];
        let list = &rest[..rest.find(']').unwrap_or(rest.len())];
        list.contains("\"cdylib\"") || list.contains("'cdylib'")
    })
}

fn check_abi_stable_is_confined(root: &Path, problems: &mut Vec<Problem>) {
    for cargo_toml in files_named(root, |name| name == "Cargo.toml") {
        if relative(root, &cargo_toml) == ABI_STABLE_OWNER {
            continue;
        }
        let Ok(text) = fs::read_to_string(&cargo_toml) else {
            continue;
        };
        for line in abi_stable_dependency_lines(&text) {
            problems.push(problem(
                root,
                &cargo_toml,
                line,
                format!("only {ABI_STABLE_OWNER} may depend on abi_stable; use pincer-plugin-abi"),
            ));
        }
    }
}

/// The 1-based lines of a `Cargo.toml` that declare a dependency on `abi_stable`, under any key or rename.
fn abi_stable_dependency_lines(cargo_toml: &str) -> Vec<usize> {
    let is_abi_stable = |name: &str| {
        let name = name.trim().trim_matches(|c| c == '"' || c == '\'');
        name == "abi_stable" || name == "abi-stable"
    };
    let mut lines = Vec::new();
    let mut in_dependencies = false;
    for (index, line) in cargo_toml.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("").trim();
        if let Some(header) = line.strip_prefix('[') {
            let header = header.trim_end_matches(']');
            in_dependencies = header.contains("dependencies");
            // `[dependencies.abi_stable]`
            if in_dependencies && header.split('.').any(is_abi_stable) {
                lines.push(index + 1);
            }
            continue;
        }
        if !in_dependencies {
            continue;
        }
        let Some((key, value)) = line.split_once('=') else {
            continue;
        };
        // `abi_stable = ...`, `abi_stable.workspace = true`, or `alias = { package = "abi_stable" }`
        let renamed = value.split(',').any(|part| {
            let part = part.trim().trim_start_matches('{').trim();
            part.split_once('=')
                .is_some_and(|(k, v)| k.trim() == "package" && is_abi_stable(v))
        });
        if key.split('.').next().is_some_and(is_abi_stable)
            || renamed
            || (key.trim() == "package" && is_abi_stable(value))
        {
            lines.push(index + 1);
        }
    }
    lines
}

fn check_module_docs(root: &Path, problems: &mut Vec<Problem>) {
    for dir in DOCUMENTED_ROOTS {
        for file in files_named(&root.join(dir), |name| name.ends_with(".rs")) {
            let Ok(text) = fs::read_to_string(&file) else {
                problems.push(problem(root, &file, 1, "not valid UTF-8"));
                continue;
            };
            if !starts_with_module_doc(&text) {
                problems.push(problem(
                    root,
                    &file,
                    1,
                    "file does not start with a `//!` doc comment",
                ));
            }
        }
    }
}

fn starts_with_module_doc(text: &str) -> bool {
    text.lines()
        .find(|line| !line.trim().is_empty())
        .is_some_and(|line| line.starts_with("//!"))
}

fn check_host_layering(root: &Path, problems: &mut Vec<Problem>) {
    let src = root.join("host/src");
    for file in files_named(&src, |name| name.ends_with(".rs")) {
        let relative_to_src = relative(&src, &file);
        let Some(module) = host_module_of(&relative_to_src) else {
            continue;
        };
        let Ok(text) = fs::read_to_string(&file) else {
            continue;
        };
        let Some(layer) = HOST_LAYERS.iter().position(|m| *m == module) else {
            problems.push(problem(
                root,
                &file,
                1,
                format!("host module `{module}` is not in tidy's HOST_LAYERS table; add it where it belongs"),
            ));
            continue;
        };
        for (line, used) in crate_paths(&text) {
            if used == module {
                continue;
            }
            match HOST_LAYERS.iter().position(|m| *m == used) {
                Some(used_layer) if used_layer < layer => {}
                Some(_) => problems.push(problem(
                    root,
                    &file,
                    line,
                    format!(
                        "host module `{module}` uses `crate::{used}`, a module of a higher layer; \
                         dependencies run {} (see HOST_LAYERS in xtask/src/tidy.rs)",
                        HOST_LAYERS.join(" <- ")
                    ),
                )),
                None => problems.push(problem(
                    root,
                    &file,
                    line,
                    format!("`crate::{used}` is not a host module in tidy's HOST_LAYERS table"),
                )),
            }
        }
    }
}

/// The top-level module a file of `host/src` belongs to (`slot/guarded.rs` → `slot`,
/// `types.rs` → `types`); `None` for the crate root and the binary.
fn host_module_of(relative_to_src: &str) -> Option<String> {
    let first = relative_to_src.split('/').next()?;
    if first == "lib.rs" || first == "bin" {
        return None;
    }
    Some(first.trim_end_matches(".rs").to_owned())
}

/// Every top-level module named by a `crate::` path outside comments, with its 1-based line:
/// `crate::a::b` gives `a`; `crate::{a::x, b}` gives `a` and `b`.
fn crate_paths(text: &str) -> Vec<(usize, String)> {
    // Comments removed, lines kept (so that positions map back to lines).
    let code: String = text
        .lines()
        .map(|line| line.find("//").map_or(line, |at| &line[..at]))
        .collect::<Vec<_>>()
        .join("\n");
    let line_of = |at: usize| code[..at].matches('\n').count() + 1;
    let ident = |rest: &str| -> String {
        rest.chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect()
    };
    let mut found = Vec::new();
    let push_item = |found: &mut Vec<(usize, String)>, at: usize, item: &str| {
        let name = ident(item.trim_start());
        if !name.is_empty() {
            found.push((line_of(at + item.len() - item.trim_start().len()), name));
        }
    };
    for (at, _) in code.match_indices("crate::") {
        if code[..at].ends_with(|c: char| c.is_ascii_alphanumeric() || c == '_' || c == ':') {
            continue; // `pincer_host::crate::…` never happens; `$crate::` does not either here
        }
        let rest = &code[at + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            // Top-level items of the brace group, up to its matching `}`.
            let mut depth = 0usize;
            let mut item_start = 0;
            for (i, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => {
                        push_item(
                            &mut found,
                            at + "crate::{".len() + item_start,
                            &group[item_start..i],
                        );
                        break;
                    }
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        push_item(
                            &mut found,
                            at + "crate::{".len() + item_start,
                            &group[item_start..i],
                        );
                        item_start = i + 1;
                    }
                    _ => {}
                }
            }
        } else {
            let name = ident(rest);
            if !name.is_empty() {
                found.push((line_of(at), name));
            }
        }
    }
    found
}

/// Every folder and `.rs` file under [`CODE_MAP_ROOTS`] is named in the code map.
fn check_code_map(root: &Path, problems: &mut Vec<Problem>) {
    let doc = root.join("ARCHITECTURE.md");
    let Ok(text) = fs::read_to_string(&doc) else {
        problems.push(problem(root, &doc, 1, "ARCHITECTURE.md is missing"));
        return;
    };
    let Some(names) = code_map_names(&text) else {
        problems.push(problem(
            root,
            &doc,
            1,
            "ARCHITECTURE.md has no `## Code map` section",
        ));
        return;
    };
    let mut missing = Vec::new();
    for base in expand_roots(root) {
        for path in source_paths(&base) {
            let rel = relative(root, &path);
            let inner = relative(&base, &path);
            let named =
                is_named(&rel, &inner, &names) || (path.is_dir() && names_inside(&rel, &names));
            if !named {
                missing.push(if path.is_dir() {
                    format!("{rel}/")
                } else {
                    rel
                });
            }
        }
    }
    if !missing.is_empty() {
        problems.push(problem(
            root,
            &doc,
            1,
            format!(
                "the code map does not name {} source path(s): {}\n  ({CODE_MAP_RULES}.)",
                missing.len(),
                missing.join(", ")
            ),
        ));
    }
}

/// The roots of [`CODE_MAP_ROOTS`] that exist, a `*` expanded to every folder there.
fn expand_roots(root: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    for pattern in CODE_MAP_ROOTS {
        let mut bases = vec![root.to_path_buf()];
        for part in pattern.split('/') {
            bases = bases
                .into_iter()
                .flat_map(|base| {
                    if part == "*" {
                        let mut dirs: Vec<PathBuf> = fs::read_dir(&base)
                            .into_iter()
                            .flatten()
                            .flatten()
                            .map(|e| e.path())
                            .filter(|p| p.is_dir())
                            .collect();
                        dirs.sort();
                        dirs
                    } else {
                        vec![base.join(part)]
                    }
                })
                .filter(|p| p.is_dir())
                .collect();
        }
        found.extend(bases);
    }
    found.sort();
    found.dedup();
    found
}

/// Every folder and `.rs` file below `base` (not `base` itself), but `lib.rs`, `main.rs` and
/// `mod.rs`.
fn source_paths(base: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut pending = vec![base.to_path_buf()];
    while let Some(dir) = pending.pop() {
        for entry in fs::read_dir(&dir).into_iter().flatten().flatten() {
            let path = entry.path();
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.starts_with('.') || name == "target" {
                continue;
            }
            if path.is_dir() {
                pending.push(path.clone());
                found.push(path);
            } else if name.ends_with(".rs")
                && !matches!(name.as_str(), "lib.rs" | "main.rs" | "mod.rs")
            {
                found.push(path);
            }
        }
    }
    found.sort();
    found
}

/// The backticked names of the code map section, braces expanded and trailing `/` removed;
/// `None` without the section.
fn code_map_names(markdown: &str) -> Option<Vec<String>> {
    let start = markdown.find("\n## Code map")?;
    let section = &markdown[start + 1..];
    let end = section[3..].find("\n## ").map_or(section.len(), |i| i + 3);
    let section = &section[..end];
    let mut names = Vec::new();
    for (index, quoted) in section.split('`').enumerate() {
        if index % 2 == 1 {
            for name in expand_braces(quoted.trim()) {
                names.push(name.trim_end_matches('/').to_owned());
            }
        }
    }
    Some(names)
}

/// `a/{b,c}.rs` → `a/b.rs`, `a/c.rs` (one group); anything else as it is.
fn expand_braces(text: &str) -> Vec<String> {
    let (Some(open), Some(close)) = (text.find('{'), text.find('}')) else {
        return vec![text.to_owned()];
    };
    if close < open {
        return vec![text.to_owned()];
    }
    text[open + 1..close]
        .split(',')
        .map(|part| format!("{}{}{}", &text[..open], part.trim(), &text[close + 1..]))
        .collect()
}

/// Whether a name of the code map is `rel` (relative to the repository) or its end on whole
/// names (`inner` is the path below its root, for the short form).
fn is_named(rel: &str, inner: &str, names: &[String]) -> bool {
    names.iter().any(|name| {
        !name.is_empty()
            && [rel, inner]
                .iter()
                .any(|path| *path == name || path.ends_with(&format!("/{name}")))
    })
}

/// Whether a name of the code map is a path inside the folder `rel`, starting with one of
/// its whole-name endings (`window/tests.rs` names the folder `…/src/window`).
fn names_inside(rel: &str, names: &[String]) -> bool {
    let parts: Vec<&str> = rel.split('/').collect();
    (0..parts.len()).any(|start| {
        let folder = format!("{}/", parts[start..].join("/"));
        names.iter().any(|name| name.starts_with(&folder))
    })
}

fn check_trailing_whitespace(root: &Path, problems: &mut Vec<Problem>) {
    for file in files_named(root, |name| name.ends_with(".rs")) {
        let Ok(text) = fs::read_to_string(&file) else {
            continue;
        };
        for (index, line) in text.lines().enumerate() {
            if line.ends_with([' ', '\t']) {
                problems.push(problem(root, &file, index + 1, "trailing whitespace"));
            }
        }
    }
}

/// Every file below `dir` whose name passes `wanted`, sorted, skipping `target/` and hidden folders.
fn files_named(dir: &Path, wanted: impl Fn(&str) -> bool) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(dir) = pending.pop() {
        let Ok(entries) = fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            let name = entry.file_name();
            let name = name.to_string_lossy();
            let Ok(file_type) = entry.file_type() else {
                continue;
            };
            if file_type.is_dir() {
                if name != "target" && !name.starts_with('.') {
                    pending.push(path);
                }
            } else if file_type.is_file() && wanted(&name) {
                found.push(path);
            }
        }
    }
    found.sort();
    found
}

fn relative(root: &Path, path: &Path) -> String {
    let relative = path.strip_prefix(root).unwrap_or(path);
    relative
        .components()
        .map(|it| it.as_os_str().to_string_lossy())
        .collect::<Vec<_>>()
        .join("/")
}

#[test]
fn finds_cdylib_in_crate_type() {
    assert!(declares_cdylib(
        "[lib]\nname = \"x\"\ncrate-type = [\"cdylib\", \"rlib\"]\n"
    ));
    assert!(declares_cdylib(
        "[lib]\ncrate-type = [\n    \"rlib\",\n    \"cdylib\",\n]\n"
    ));
    assert!(!declares_cdylib(
        "[lib]\ncrate-type = [\"rlib\"]\n[features]\nx = [\"cdylib\"]\n"
    ));
    assert!(!declares_cdylib("[package]\nname = \"x\"\n"));
}

#[test]
fn finds_abi_stable_under_every_spelling() {
    let manifest = r#"
[package]
name = "x"
description = "does not use abi_stable"

[dependencies]
serde = "1"
abi_stable = { version = "0.11" }
abi-stable.workspace = true
stable = { package = "abi_stable", version = "0.11" }
# abi_stable = "0.11"

[target.'cfg(unix)'.dependencies.abi_stable]
version = "0.11"
"#;
    assert_eq!(abi_stable_dependency_lines(manifest), [8, 9, 10, 13]);
}

#[test]
fn module_doc_must_come_first() {
    assert!(starts_with_module_doc("//! Doc.\nfn f() {}\n"));
    assert!(starts_with_module_doc("\n//! Doc after a blank line.\n"));
    assert!(!starts_with_module_doc("// A plain comment.\n//! Doc.\n"));
    assert!(!starts_with_module_doc("#![allow(dead_code)]\n//! Doc.\n"));
    assert!(!starts_with_module_doc(""));
}

#[test]
fn finds_crate_paths_in_uses_groups_and_inline() {
    let text = "//! Doc naming crate::report.\nuse crate::config::Config;\nuse crate::{\n    engines::x,\n    plugins::{a, b},\n};\nfn f() { crate::slot::g(); } // crate::session\n";
    let found = crate_paths(text);
    assert_eq!(
        found,
        vec![
            (2, "config".to_owned()),
            (4, "engines".to_owned()),
            (5, "plugins".to_owned()),
            (7, "slot".to_owned()),
        ]
    );
}

#[test]
fn host_module_of_a_file() {
    assert_eq!(host_module_of("slot/guarded.rs").as_deref(), Some("slot"));
    assert_eq!(host_module_of("types.rs").as_deref(), Some("types"));
    assert_eq!(host_module_of("lib.rs"), None);
    assert_eq!(host_module_of("bin/pincer.rs"), None);
}

#[test]
fn the_code_map_names_paths_by_their_end() {
    let doc = "# A\n\n## Code map\n\n`session/tree.rs`, `isolation/` and `xtask/src/{flags,workspace}.rs`\n\n## Next\n`late.rs`\n";
    let names = code_map_names(doc).unwrap();
    assert!(is_named(
        "host/src/session/tree.rs",
        "session/tree.rs",
        &names
    ));
    assert!(is_named(
        "host/src/engines/isolation",
        "engines/isolation",
        &names
    ));
    assert!(is_named("xtask/src/flags.rs", "flags.rs", &names));
    assert!(is_named("xtask/src/workspace.rs", "workspace.rs", &names));
    assert!(!is_named(
        "host/src/session/subtree.rs",
        "session/subtree.rs",
        &names
    ));
    assert!(
        names_inside("host/src/session", &names),
        "by a file inside it"
    );
    assert!(!names_inside("host/src/engines", &names));
    assert!(
        !is_named("host/src/late.rs", "late.rs", &names),
        "outside the section"
    );
    assert!(code_map_names("# no map\n").is_none());
}
