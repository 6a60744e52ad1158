//! `pincer sessions`: reads OpenClaw session files (list, show, tree, context), imports an
//! OpenAI chat transcript as a session and exports one.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use pincer_host::config::{LoadedConfig, PincerHome};
use pincer_host::session::{
    build_session_context, convert_to_llm, AgentId, ChatList, OnExisting, SessionKey, SessionStore,
};

use crate::common::{fail, read_session, resolve_session, store, warn_long_lines};

/// `pincer sessions`'s subcommands.
#[derive(clap::Subcommand, Debug)]
pub enum SessionsCommand {
    /// Lists an agent's sessions (`sessionKey`, `sessionId`, `sessionFile`).
    List {
        /// The agent.
        #[arg(long, value_name = "ID", default_value = "main")]
        agent: AgentId,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Shows a session: its header, entry count, active leaf and damaged lines.
    Show {
        /// A session file, session key or session id.
        session: String,
        /// The agent whose keys and ids are searched.
        #[arg(long, value_name = "ID", default_value = "main")]
        agent: AgentId,
    },
    /// Prints a session's tree: every entry under its parent, the active path marked `*`.
    Tree {
        /// A session file, session key or session id.
        session: String,
        /// The agent whose keys and ids are searched.
        #[arg(long, value_name = "ID", default_value = "main")]
        agent: AgentId,
        /// Print the entries as a JSON array in tree order (id, parentId, type, depth,
        /// active, leaf).
        #[arg(long)]
        json: bool,
    },
    /// Prints the context a leaf of a session sees: OpenClaw's `{messages, thinkingLevel,
    /// model}` (`--format openclaw`), or the array `convertToLlm` gives (`--format llm`).
    Context {
        /// A session file, session key or session id.
        session: String,
        /// The agent whose keys and ids are searched.
        #[arg(long, value_name = "ID", default_value = "main")]
        agent: AgentId,
        /// The leaf entry (default: the session's active leaf).
        #[arg(long, value_name = "ENTRY")]
        leaf: Option<String>,
        /// `openclaw` or `llm`.
        #[arg(long, value_name = "FORMAT", default_value = "openclaw")]
        format: ContextFormat,
        /// Print JSON (the only output form of this command; accepted for symmetry).
        #[arg(long)]
        json: bool,
    },
    /// Imports an OpenAI chat transcript (a JSON array of messages, or an object with
    /// `messages` or `traj`, as a τ-bench task) as a new session file, and prints its path.
    Import {
        /// The transcript.
        file: PathBuf,
        /// The format of the transcript (only `openai`).
        #[arg(long, value_name = "FORMAT", default_value = "openai")]
        format: ImportFormat,
        /// Where to write the session (default: `$PINCER_HOME/agents/main/sessions/<id>.jsonl`,
        /// recorded in the index).
        #[arg(long, value_name = "PATH")]
        out: Option<PathBuf>,
        /// The session key to record it under (default: `import:<file name>`); a key that
        /// names a session already is refused unless `--force`.
        #[arg(long, value_name = "KEY")]
        key: Option<String>,
        /// Point a key that names a session already at the imported one (the old file stays;
        /// what was replaced is printed).
        #[arg(long)]
        force: bool,
    },
    /// Prints a session's active path as an OpenAI chat transcript, or the file as it is.
    Export {
        /// A session file, session key or session id.
        session: String,
        /// The agent whose keys and ids are searched.
        #[arg(long, value_name = "ID", default_value = "main")]
        agent: AgentId,
        /// `openai` or `jsonl`.
        #[arg(long, value_name = "FORMAT", default_value = "openai")]
        format: ExportFormat,
    },
}

/// What `pincer sessions import` reads.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum ImportFormat {
    /// OpenAI chat messages.
    Openai,
}

/// What `pincer sessions export` writes.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExportFormat {
    /// OpenAI chat messages (a JSON array), the system prompt first.
    Openai,
    /// The session file itself, as JSON lines.
    Jsonl,
}

/// What `pincer sessions context` prints.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum ContextFormat {
    /// `{messages, thinkingLevel, model}`.
    Openclaw,
    /// The LLM projection.
    Llm,
}

/// Runs `pincer sessions`.
pub fn run(home: &PincerHome, command: SessionsCommand) -> ExitCode {
    match command {
        SessionsCommand::Context {
            session,
            agent,
            leaf,
            format,
            json,
        } => match resolve_session(home, &agent, &session) {
            Ok(path) => session_context(&path, leaf.as_deref(), format, json),
            Err(code) => code,
        },
        SessionsCommand::Import {
            file,
            format,
            out,
            key,
            force,
        } => session_import(home, &file, format, out, key, force),
        SessionsCommand::Export {
            session,
            agent,
            format,
        } => match resolve_session(home, &agent, &session) {
            Ok(path) => session_export(&path, format),
            Err(code) => code,
        },
        SessionsCommand::List { agent, json } => session_list(home, &agent, json),
        SessionsCommand::Show { session, agent } => match resolve_session(home, &agent, &session) {
            Ok(path) => session_show(&path),
            Err(code) => code,
        },
        SessionsCommand::Tree {
            session,
            agent,
            json,
        } => match resolve_session(home, &agent, &session) {
            Ok(path) => session_tree(&path, json),
            Err(code) => code,
        },
    }
}

fn session_list(home: &PincerHome, agent: &AgentId, json: bool) -> ExitCode {
    let sessions = match store(home).list(agent) {
        Ok(s) => s,
        Err(err) => return fail(err, 1),
    };
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&sessions).expect("serializes")
        );
    } else if sessions.is_empty() {
        println!(
            "no sessions for agent \"{agent}\" in {}",
            store(home).sessions_dir(agent).display()
        );
    } else {
        for s in &sessions {
            println!(
                "{:<28} {}  {}",
                s.session_key.as_deref().unwrap_or("-"),
                s.session_id,
                s.session_file.display()
            );
        }
    }
    ExitCode::SUCCESS
}

fn session_show(path: &Path) -> ExitCode {
    let tree = match read_session(path, false) {
        Ok(t) => t,
        Err(err) => return fail(err, 2),
    };
    warn_long_lines(path, &tree);
    let out = serde_json::json!({
        "sessionFile": path,
        "header": tree.header,
        "entries": tree.entries.len(),
        "opaqueRecords": tree.opaque.len(),
        "skippedLines": tree.skipped_lines,
        "longLinesSkipped": tree.long_lines,
        "leafId": tree.leaf,
        "contextMessages": build_session_context(&tree, None).messages.len(),
    });
    println!(
        "{}",
        serde_json::to_string_pretty(&out).expect("serializes")
    );
    ExitCode::SUCCESS
}

fn session_tree(path: &Path, json: bool) -> ExitCode {
    let tree = match read_session(path, json) {
        Ok(t) => t,
        Err(err) => return fail(err, 2),
    };
    warn_long_lines(path, &tree);
    let active: std::collections::HashSet<&str> = tree.path(None).iter().map(|e| e.id()).collect();
    // Children by the parent each entry resolves to (the last of equal ids), in file order.
    let mut children: Vec<Vec<usize>> = vec![Vec::new(); tree.entries.len()];
    let mut roots = Vec::new();
    for at in 0..tree.entries.len() {
        match tree.parent_position(at) {
            Some(parent) => children[parent].push(at),
            None => roots.push(at),
        }
    }
    // Depth first from the roots; entries only a cycle reaches start walks of their own. Each
    // entry is listed once. The text is indented only where the history branches, as
    // `git log --graph` draws it: an entry's first child continues its column, each later
    // child (a branch) starts one column further in.
    let mut seen = vec![false; tree.entries.len()];
    let mut rows = Vec::with_capacity(tree.entries.len());
    for start in roots.into_iter().chain(0..tree.entries.len()) {
        let mut stack = vec![(start, 0usize, 0usize)];
        while let Some((at, depth, indent)) = stack.pop() {
            if std::mem::replace(&mut seen[at], true) {
                continue;
            }
            rows.push((at, depth, indent));
            stack.extend(
                children[at]
                    .iter()
                    .enumerate()
                    .rev()
                    .map(|(nth, &kid)| (kid, depth + 1, indent + usize::from(nth > 0))),
            );
        }
    }
    if json {
        let out: Vec<serde_json::Value> = rows
            .iter()
            .map(|&(at, depth, _)| {
                let entry = &tree.entries[at];
                serde_json::json!({
                    "id": entry.id(),
                    "parentId": entry.parent_id(),
                    "type": entry.entry_type.as_str(),
                    "depth": depth,
                    "active": active.contains(entry.id()),
                    "leaf": tree.leaf.as_deref() == Some(entry.id()),
                })
            })
            .collect();
        println!(
            "{}",
            serde_json::to_string_pretty(&out).expect("serializes")
        );
        return ExitCode::SUCCESS;
    }
    for (at, _, indent) in rows {
        let entry = &tree.entries[at];
        let mark = if active.contains(entry.id()) {
            "*"
        } else {
            " "
        };
        println!(
            "{mark} {}{} {}",
            "  ".repeat(indent),
            entry.id(),
            entry.entry_type.as_str()
        );
    }
    ExitCode::SUCCESS
}

/// The key an import is recorded under by default: `import:<file stem>`, with every character
/// a key cannot hold made `-`.
fn default_import_key(file: &Path) -> String {
    let stem = file
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let stem: String = stem
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "._-+@=#!~".contains(c) {
                c
            } else {
                '-'
            }
        })
        .collect();
    format!("import:{stem}")
}

fn session_import(
    home: &PincerHome,
    file: &Path,
    format: ImportFormat,
    out: Option<PathBuf>,
    key: Option<String>,
    force: bool,
) -> ExitCode {
    // The one format there is: OpenAI chat.
    let ImportFormat::Openai = format;
    let transcript = match ChatList::read(file) {
        Ok(list) => list,
        Err(err) => return fail(err, 2),
    };
    let key = key.unwrap_or_else(|| default_import_key(file));
    let key = match SessionKey::parse(&key) {
        Ok(key) => key,
        Err(err) => return fail(err, 2),
    };
    let durability = match LoadedConfig::load(&home.config_path()) {
        Ok(config) => config.config.sessions.durability,
        Err(err) => return fail(err, 2),
    };
    // A key that names a session is not pointed at a new one without `--force`: refused
    // before anything is written.
    let existing = if force {
        OnExisting::Replace
    } else {
        OnExisting::Refuse
    };
    match store(home).find(&key) {
        Ok(Some(old)) if !force => {
            return fail(
                pincer_host::session::StoreError::KeyExists {
                    agent: key.agent().to_string(),
                    key: key.to_string(),
                    session_id: old.session_id,
                    file: old.session_file,
                },
                2,
            )
        }
        Ok(_) => {}
        Err(err) => return fail(err, 1),
    }
    let session_id = pincer_host::session::new_session_id();
    let path = out.unwrap_or_else(|| {
        store(home)
            .sessions_dir(key.agent())
            .join(format!("{session_id}.jsonl"))
    });
    if path.exists() {
        return fail(
            format!(
                "{} exists: an import writes a new session file; choose another --out",
                path.display()
            ),
            2,
        );
    }
    let cwd = std::env::current_dir()
        .map(|d| d.display().to_string())
        .unwrap_or_default();
    // Written in a folder of its own beside the target, then renamed into place: a failed
    // import leaves no partial session file behind.
    let Some(name) = path.file_name() else {
        return fail(format!("--out {} names no file", path.display()), 2);
    };
    let parent = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let staging = parent.join(format!(".import-{session_id}"));
    let staged = staging.join(name);
    let discard = || {
        let _ = pincer_host::operator::remove_file(&staged);
        let _ = pincer_host::operator::remove_dir(&staging);
    };
    let working = crate::progress::Working::start(
        format!(
            "importing {} ({} messages)",
            file.display(),
            transcript.messages().len()
        ),
        crate::progress::drawable(false),
    );
    let imported =
        pincer_host::session::import_openai(transcript.messages(), &staged, &cwd, durability);
    drop(working);
    match imported {
        Ok(writer) => drop(writer),
        Err(err) => {
            discard();
            // A message the mapping cannot take is bad input (exit 2); a write that failed is 1.
            let code = match err {
                pincer_host::session::ImportError::Message { .. } => 2,
                _ => 1,
            };
            return fail(err, code);
        }
    }
    if let Err(err) = pincer_host::operator::rename(&staged, &path) {
        discard();
        return fail(
            format!(
                "cannot move the imported session to {}: {err}",
                path.display()
            ),
            1,
        );
    }
    discard();
    let id = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or(session_id);
    match store(home).register(&key, &id, &path, existing) {
        Ok(created) => {
            if let Some(old) = created.replaced {
                eprintln!(
                    "replaced: key \"{key}\" named session {} ({}), which is kept",
                    old.session_id,
                    old.session_file.display()
                );
            }
            println!("{}", path.display());
            ExitCode::SUCCESS
        }
        Err(err) => {
            let _ = pincer_host::operator::remove_file(&path);
            fail(err, 1)
        }
    }
}

fn session_export(path: &Path, format: ExportFormat) -> ExitCode {
    match format {
        // Copied as it is, through a buffer: however long its lines, the file is never held.
        ExportFormat::Jsonl => match std::fs::File::open(path)
            .and_then(|mut file| std::io::copy(&mut file, &mut std::io::stdout().lock()))
        {
            Ok(_) => ExitCode::SUCCESS,
            Err(err) => fail(format!("cannot read {}: {err}", path.display()), 2),
        },
        ExportFormat::Openai => match read_session(path, false) {
            Ok(tree) => {
                let out = pincer_host::session::export_openai(&tree);
                println!(
                    "{}",
                    serde_json::to_string_pretty(&out).expect("serializes")
                );
                ExitCode::SUCCESS
            }
            Err(err) => fail(err, 2),
        },
    }
}

fn session_context(path: &Path, leaf: Option<&str>, format: ContextFormat, json: bool) -> ExitCode {
    let tree = match read_session(path, json) {
        Ok(tree) => tree,
        Err(err) => return fail(err, 2),
    };
    warn_long_lines(path, &tree);
    if let Some(leaf) = leaf {
        if tree.get(leaf).is_none() {
            return fail(
                format!(
                    "{} has no entry \"{leaf}\": give the id of one of its entries, or no --leaf for the active leaf",
                    path.display()
                ),
                2,
            );
        }
    }
    let context = build_session_context(&tree, leaf);
    let out = match format {
        ContextFormat::Openclaw => serde_json::to_value(&context).expect("serializes"),
        ContextFormat::Llm => serde_json::Value::Array(convert_to_llm(&context.messages)),
    };
    println!(
        "{}",
        serde_json::to_string_pretty(&out).expect("serializes")
    );
    ExitCode::SUCCESS
}
