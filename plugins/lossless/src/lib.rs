//! `lossless` — a context engine that never loses a message. Every message is kept in SQLite;
//! older spans are summarised into a DAG of summaries that the model can search (`lcm_grep`),
//! inspect (`lcm_describe`) and expand back to the originals (`lcm_expand`). Built only
//! against the public `pincer-plugin-api`, as a third party would.
//!
//! - [`store`]: the database (WAL, migrations, deduplication by entry id or identity);
//! - [`compaction`]: leaf and condensed passes that always converge, with a stop reason;
//! - [`assembly`]: summaries then raw messages, newest first into the budget, cut only between
//!   tool-call groups ([`groups`]);
//! - [`summarize`]: the host's model or the deterministic offline summariser;
//! - [`tools`]: `lcm_grep`, `lcm_describe`, `lcm_expand`, `lcm_stats`;
//! - [`payloads`]: large tool results moved to files; [`session_file`]: bootstrap's reader.
//!
//! # Lifecycle
//!
//! `afterTurn` (or `ingestBatch`/`ingest`) stores the turn's messages in one committed
//! transaction — acknowledged means durable — and records *compaction debt* when the context
//! passed `compactThreshold` of the budget. `maintain` (run by the host in the background)
//! indexes new messages for search, moves large payloads to files, and pays the debt when the
//! prompt cache is cold or the context passed `urgentThreshold`; `assemble` pays it first only
//! when the cache is cold or the context would not fit. A compaction aims at `compactTarget`
//! of the budget, so it happens once every several turns, and in between the assembled prompt
//! keeps its prefix (lossless-claw#282). Heavy work on one conversation is serialised.
//!
//! # Config
//!
//! `plugins.entries.lossless.config`, every key optional (the manifest's `configSchema` lists
//! the same keys):
//!
//! | key | type | default | meaning |
//! |---|---|---|---|
//! | `databasePath` | string | `<stateDir>/lossless.db` | the SQLite file; in memory when the host gives no state directory |
//! | `tokenBudget` | integer ≥ 1 | none | the engine's own budget; the smaller of it and the host's applies |
//! | `freshTailMessages` | integer ≥ 0 | 8 | newest messages a leaf pass never takes |
//! | `freshTailMaxTokens` | integer | ¼ budget | cap on the tokens `freshTailMessages` protects (the newest user message and what follows are protected anyway) |
//! | `leafChunkTokens` | integer ≥ 1 | ⅕ budget | tokens one leaf pass summarises |
//! | `condenseFanIn` | integer ≥ 2 | 4 | roots of one depth folded into a deeper node once this many are side by side |
//! | `compactThreshold` | number (0, 1] | 0.75 | share of the budget at which `afterTurn` records debt |
//! | `compactTarget` | number (0, 1] | 0.5 | share of the budget a compaction aims at (below `compactThreshold`) |
//! | `urgentThreshold` | number (0, 1] | 0.9 | share past which debt is paid even with a warm prompt cache |
//! | `cacheTtlMs` | integer | 300000 | a prompt cache untouched this long counts as cold |
//! | `summarizer` | `auto`, `model`, `offline` | `auto` | the host's model when it has one (`auto`), always (`model`, offline on failure), or never |
//! | `expandPageSize` | integer ≥ 1 | 20 | messages per `lcm_expand` page |
//! | `grepLimit` | integer ≥ 1 | 20 | default and maximum `lcm_grep` results |
//! | `bootstrapMaxMessages` | integer | 5000 | at most this many messages imported by one `bootstrap` |
//! | `largePayloadChars` | integer | 32768 | tool results longer than this move to files (0: never) |
//! | `grantTtlMs` | integer | 3600000 | lifetime of a subagent's read grant (a shorter spawn TTL wins) |
//! | `grantMaxResults` | integer | 50 | cap on results per tool call of a subagent reading its parent |

#![warn(missing_docs)]

pub mod assembly;
pub mod compaction;
pub mod config;
pub mod groups;
pub mod payloads;
pub mod session_file;
pub mod store;
pub mod summarize;
pub mod tools;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use pincer_plugin_api::prelude::*;
use pincer_plugin_api::{HostParams, ToolCallParams};
use rusqlite::params;
use serde_json::json;

use compaction::{Outcome, Policy, Run, StopReason};
pub use config::Config;
use store::{db_error, now_ms, Incoming, Store};
use tools::Access;

/// The lossless engine.
pub struct Lossless {
    config: Config,
    host: Host,
    store: Arc<Store>,
    /// One lock per conversation: heavy work on a conversation runs one at a time.
    work: Mutex<HashMap<i64, Arc<Mutex<()>>>>,
    /// Prefix-stability counters per conversation, written by `afterTurn`, `maintain`,
    /// `lcm_stats` and `dispose`.
    assembly_stats: Mutex<HashMap<i64, AssemblyStats>>,
}

/// What prefix stability counts for one conversation.
#[derive(Debug, Default)]
struct AssemblyStats {
    /// The last assembly's item identities.
    last: Option<Vec<String>>,
    /// The summaries' epoch it saw.
    last_epoch: i64,
    assemblies: i64,
    stable: i64,
    after_compaction: i64,
    dirty: bool,
}

impl std::fmt::Debug for Lossless {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lossless")
            .field("store", &self.store)
            .finish_non_exhaustive()
    }
}

/// The conversation key of a call: the session key, else the session id.
fn key<'a>(host: &HostParams<'a>, session_id: &'a str) -> &'a str {
    host.session_key()
        .filter(|k| !k.is_empty())
        .unwrap_or(session_id)
}

impl Lossless {
    /// An engine over the database at `path` (in memory for `None`).
    ///
    /// # Errors
    /// An invalid config or a database that cannot be opened.
    pub fn open(config: Config, host: Host, path: Option<PathBuf>) -> Result<Self, EngineError> {
        config.validate()?;
        let store = Store::open(path.as_deref())?;
        Ok(Lossless {
            config,
            host,
            store: Arc::new(store),
            work: Mutex::new(HashMap::new()),
            assembly_stats: Mutex::new(HashMap::new()),
        })
    }

    /// The store.
    pub fn store(&self) -> &Store {
        &self.store
    }

    fn work_lock(&self, conversation: i64) -> Arc<Mutex<()>> {
        let mut locks = self
            .work
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        Arc::clone(locks.entry(conversation).or_default())
    }

    fn policy(&self, budget: u64) -> Policy {
        Policy {
            fresh_tail_messages: self.config.fresh_tail_messages,
            fresh_tail_max_tokens: self.config.fresh_tail_max_tokens.unwrap_or(budget / 4),
            leaf_chunk_tokens: self.config.leaf_chunk_tokens.unwrap_or(budget / 5).max(1),
            condense_fan_in: self.config.condense_fan_in,
            mode: self.config.summarizer,
        }
    }

    /// The budget compaction plans with: the last assembly's, else `fallback`.
    fn planning_budget(
        &self,
        conversation: i64,
        fallback: Option<u64>,
    ) -> Result<Option<u64>, EngineError> {
        let last: Option<i64> = self.store.value(
            "SELECT last_budget FROM conversations WHERE id = ?1",
            conversation,
        )?;
        Ok(last
            .map(|b| b as u64)
            .or(self.config.effective_budget(fallback)))
    }

    /// Compacts `conversation` down to `compactTarget` of `budget`, serialised per
    /// conversation.
    ///
    /// # Errors
    /// Database errors.
    pub fn compact_to_target(
        &self,
        conversation: i64,
        budget: u64,
        instructions: Option<&str>,
    ) -> Result<Outcome, EngineError> {
        let target = (budget as f64 * self.config.compact_target) as u64;
        self.compact_to(conversation, budget, target, instructions)
    }

    /// Compacts `conversation` down to `target` tokens (planning chunks with `budget`),
    /// serialised per conversation.
    ///
    /// # Errors
    /// Database errors.
    pub fn compact_to(
        &self,
        conversation: i64,
        budget: u64,
        target: u64,
        instructions: Option<&str>,
    ) -> Result<Outcome, EngineError> {
        let lock = self.work_lock(conversation);
        let _guard = lock
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let run = Run {
            store: &self.store,
            host: Some(&self.host),
            conversation,
            policy: self.policy(budget),
            instructions,
        };
        let outcome = run.until(target)?;
        self.set_debt(conversation, 0)?;
        tracing::info!(
            passes = outcome.passes.len(),
            stop_reason = outcome.stop_reason.as_str(),
            tokens_before = outcome.tokens_before,
            tokens_after = outcome.tokens_after,
            "lossless compaction"
        );
        Ok(outcome)
    }

    fn set_debt(&self, conversation: i64, debt: u64) -> Result<(), EngineError> {
        self.store.with(|conn| {
            conn.execute(
                "UPDATE conversations SET debt = ?1 WHERE id = ?2",
                params![debt as i64, conversation],
            )
            .map_err(db_error("debt"))
            .map(drop)
        })
    }

    fn debt(&self, conversation: i64) -> Result<u64, EngineError> {
        self.store
            .value::<i64>("SELECT debt FROM conversations WHERE id = ?1", conversation)
            .map(|d| d as u64)
    }

    /// Whether the host's prompt cache is cold: no record of a call, or none within the TTL.
    fn cache_cold(&self, host: &HostParams<'_>) -> bool {
        let Some(cache) = host.prompt_cache() else {
            return true;
        };
        if cache.broke == Some(true) {
            return true;
        }
        if let Some(expires) = cache.expires_at {
            return expires <= now_ms();
        }
        match cache.last_cache_touch_at {
            Some(touch) => now_ms().saturating_sub(touch) > self.config.cache_ttl_ms as i64,
            None => true,
        }
    }

    /// Stores a snapshot: what follows the newest message already stored (the anchor), or all
    /// of it when none is; deduplicated either way.
    fn ingest_snapshot(
        &self,
        conversation: i64,
        messages: &[Message],
        entry_id: impl Fn(usize) -> Option<String>,
    ) -> Result<store::Ingested, EngineError> {
        let mut start = 0;
        for i in (0..messages.len()).rev() {
            if let Some(entry) = entry_id(i) {
                if self.store.seq_of_entry(conversation, &entry)?.is_some() {
                    start = i + 1;
                    break;
                }
            }
        }
        let ids: Vec<Option<String>> = (start..messages.len()).map(&entry_id).collect();
        let incoming: Vec<Incoming<'_>> = messages[start..]
            .iter()
            .zip(&ids)
            .map(|(message, entry)| Incoming {
                message,
                entry_id: entry.as_deref(),
            })
            .collect();
        self.store.ingest(conversation, &incoming)
    }

    /// Stores the host's snapshot for the session of `host` / `session_id`: its conversation
    /// and what was written.
    fn take_snapshot(
        &self,
        host: &HostParams<'_>,
        session_id: &str,
        messages: &[Message],
        entry_ids: &pincer_plugin_api::EntryIds<'_>,
    ) -> Result<(i64, store::Ingested), EngineError> {
        let conversation = self.store.conversation(key(host, session_id))?;
        let done = self.ingest_snapshot(conversation, messages, |i| {
            entry_ids.get(i).map(str::to_owned)
        })?;
        Ok((conversation, done))
    }

    /// Records debt when the context passed `compactThreshold` of the planning budget.
    fn record_debt(&self, conversation: i64, host_budget: Option<u64>) -> Result<(), EngineError> {
        let Some(budget) = self.planning_budget(conversation, host_budget)? else {
            return Ok(());
        };
        let tokens = compaction::context_tokens(&self.store, conversation)?;
        if tokens as f64 >= budget as f64 * self.config.compact_threshold {
            self.set_debt(conversation, tokens)?;
        }
        Ok(())
    }

    /// Updates the prefix-stability counters with this assembly's signature.
    fn record_assembly(&self, conversation: i64, signature: &[String]) -> Result<(), EngineError> {
        let epoch: i64 = self.store.value(
            "SELECT epoch FROM conversations WHERE id = ?1",
            conversation,
        )?;
        let mut all = self
            .assembly_stats
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let stats = match all.entry(conversation) {
            std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::hash_map::Entry::Vacant(e) => {
                e.insert(self.load_assembly_stats(conversation)?)
            }
        };
        match &stats.last {
            None => {}
            Some(_) if stats.last_epoch != epoch => stats.after_compaction += 1,
            Some(previous) => stats.stable += i64::from(signature.starts_with(previous)),
        }
        stats.assemblies += 1;
        stats.last = Some(signature.to_vec());
        stats.last_epoch = epoch;
        stats.dirty = true;
        Ok(())
    }

    fn load_assembly_stats(&self, conversation: i64) -> Result<AssemblyStats, EngineError> {
        self.store.with(|conn| {
            conn.query_row(
                "SELECT last_assembly, last_assembly_epoch, assemblies, stable_assemblies, compaction_assemblies \
                 FROM conversations WHERE id = ?1",
                [conversation],
                |r| {
                    let last: Option<String> = r.get(0)?;
                    Ok(AssemblyStats {
                        last: last.and_then(|l| serde_json::from_str(&l).ok()),
                        last_epoch: r.get(1)?,
                        assemblies: r.get(2)?,
                        stable: r.get(3)?,
                        after_compaction: r.get(4)?,
                        dirty: false,
                    })
                },
            )
            .map_err(db_error("assembly stats"))
        })
    }

    /// Writes the prefix-stability counters kept in memory since the last write (assembly
    /// itself writes nothing: it stays off the disk on the turn's critical path).
    fn flush_assembly_stats(&self) -> Result<(), EngineError> {
        let mut all = self
            .assembly_stats
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        for (conversation, stats) in all.iter_mut().filter(|(_, s)| s.dirty) {
            self.store.with(|conn| {
                conn.execute(
                    "UPDATE conversations SET last_assembly = ?1, last_assembly_epoch = ?2, assemblies = ?3, \
                     stable_assemblies = ?4, compaction_assemblies = ?5 WHERE id = ?6",
                    params![
                        serde_json::to_string(&stats.last).unwrap_or_default(),
                        stats.last_epoch,
                        stats.assemblies,
                        stats.stable,
                        stats.after_compaction,
                        conversation
                    ],
                )
                .map_err(db_error("assembly stats"))
                .map(drop)
            })?;
            stats.dirty = false;
        }
        Ok(())
    }

    /// The doctor view of the store for `key`.
    ///
    /// # Errors
    /// Database errors.
    pub fn stats(&self, key: &str) -> Result<serde_json::Value, EngineError> {
        self.flush_assembly_stats()?;
        self.store.index_pending()?;
        let conversation = self.store.find_conversation(key)?;
        let db_bytes = self
            .store
            .path()
            .map(|p| {
                ["", "-wal"]
                    .iter()
                    .filter_map(|s| std::fs::metadata(format!("{}{s}", p.display())).ok())
                    .map(|m| m.len())
                    .sum::<u64>()
            })
            .unwrap_or(0);
        let mut out = json!({
            "database": self.store.path().map(|p| p.display().to_string()),
            "databaseBytes": db_bytes,
            "schemaVersion": store::SCHEMA_VERSION,
            "conversation": key,
        });
        let Some(conversation) = conversation else {
            out["messages"] = json!(0);
            return Ok(out);
        };
        let stats = self.store.with(|conn| {
            let one = |sql: &str| -> Result<i64, EngineError> {
                conn.query_row(sql, [conversation], |r| r.get(0)).map_err(db_error("stats"))
            };
            let mut by_depth = serde_json::Map::new();
            let mut stmt = conn
                .prepare("SELECT depth, COUNT(*), SUM(parent_id IS NULL) FROM summaries WHERE conversation_id = ?1 GROUP BY depth")
                .map_err(db_error("stats"))?;
            let rows = stmt
                .query_map([conversation], |r| Ok((r.get::<_, i64>(0)?, r.get::<_, i64>(1)?, r.get::<_, i64>(2)?)))
                .map_err(db_error("stats"))?;
            for row in rows {
                let (depth, count, roots) = row.map_err(db_error("stats"))?;
                by_depth.insert(depth.to_string(), json!({"nodes": count, "roots": roots}));
            }
            let (assemblies, stable, compaction, debt): (i64, i64, i64, i64) = conn
                .query_row(
                    "SELECT assemblies, stable_assemblies, compaction_assemblies, debt FROM conversations WHERE id = ?1",
                    [conversation],
                    |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
                )
                .map_err(db_error("stats"))?;
            let compared = assemblies - 1 - compaction;
            Ok(json!({
                "messages": one("SELECT COUNT(*) FROM messages WHERE conversation_id = ?1")?,
                "messageTokens": one("SELECT COALESCE(SUM(tokens), 0) FROM messages WHERE conversation_id = ?1")?,
                "externalizedPayloads": one("SELECT COUNT(*) FROM messages WHERE conversation_id = ?1 AND payload_path IS NOT NULL")?,
                "summaries": one("SELECT COUNT(*) FROM summaries WHERE conversation_id = ?1")?,
                "summariesByDepth": by_depth,
                "frontierSeq": store::frontier(conn, conversation)?,
                "debtTokens": debt,
                "activeGrants": one("SELECT COUNT(*) FROM grants WHERE parent_conversation_id = ?1")?,
                "prefixStability": {
                    "assemblies": assemblies,
                    "afterCompaction": compaction,
                    "stable": stable,
                    "share": if compared > 0 { stable as f64 / compared as f64 } else { 1.0 },
                },
            }))
        })?;
        if let (Some(o), Some(s)) = (out.as_object_mut(), stats.as_object()) {
            o.extend(s.clone());
        }
        out["contextTokens"] = json!(compaction::context_tokens(&self.store, conversation)?);
        Ok(out)
    }
}

impl Engine for Lossless {
    const ID: &'static str = "lossless";

    fn create(ctx: FactoryContext<'_>, host: Host) -> Result<Self, EngineError> {
        let config: Config = ctx.config()?;
        let path = match &config.database_path {
            Some(path) => Some(PathBuf::from(path)),
            None => ctx.state_dir().map(|d| d.join("lossless.db")),
        };
        if path.is_none() {
            tracing::warn!("lossless: the host gives no state directory and no databasePath is set; the store lives in memory for this process");
        }
        Lossless::open(config, host, path)
    }

    fn info(&self) -> Result<EngineInfo, EngineError> {
        let mut info = EngineInfo::new("Lossless", env!("CARGO_PKG_VERSION"))
            .owns_compaction(true)
            .turn_maintenance_mode(TurnMaintenanceMode::Background)
            .accepted_host_params(&["sessionKey", "prompt", "runtimeContext", "abortSignal"]);
        for (name, description, schema) in tools::specs() {
            info = info.tool(name, description, schema);
        }
        Ok(info)
    }

    fn ingest(&self, params: &IngestParams<'_>) -> Result<IngestResult, EngineError> {
        let conversation = self
            .store
            .conversation(key(&params.host, params.session_id))?;
        let done = self.store.ingest(
            conversation,
            &[Incoming {
                message: params.message,
                entry_id: params.entry_id,
            }],
        )?;
        Ok(IngestResult {
            ingested: done.added > 0,
        })
    }

    fn assemble(&self, params: &AssembleParams<'_>) -> Result<AssembleResult, EngineError> {
        params.host.check_abort()?;
        let conversation = self
            .store
            .conversation(key(&params.host, params.session_id))?;
        let budget = self.config.effective_budget(params.token_budget);
        if let Some(budget) = budget {
            // Written only when it changes: assembly stays off the disk on the critical path.
            self.store.with(|conn| {
                conn.execute(
                    "UPDATE conversations SET last_budget = ?1 WHERE id = ?2 AND last_budget IS NOT ?1",
                    params![budget as i64, conversation],
                )
                .map_err(db_error("budget"))
                .map(drop)
            })?;
            // Debt is paid here only when it costs no cache hit, or the context would not fit.
            let debt = self.debt(conversation)?;
            if debt > 0
                && (self.cache_cold(&params.host)
                    || compaction::context_tokens(&self.store, conversation)? > budget)
            {
                self.compact_to_target(conversation, budget, None)?;
            }
        }
        let assembled = assembly::assemble(
            &self.store,
            conversation,
            params.messages,
            &params.entry_ids,
            budget,
        )?;
        self.record_assembly(conversation, &assembled.signature)?;
        tracing::debug!(
            tokens = assembled.tokens,
            items = assembled.signature.len(),
            over_budget = assembled.over_budget,
            dropped_raw = assembled.dropped_raw,
            "lossless assembled"
        );
        Ok(assembled.result)
    }

    fn compact(&self, params: &CompactParams<'_>) -> Result<CompactResult, EngineError> {
        params.host.check_abort()?;
        // What the host has that the store lacks is taken in first: nothing is summarised
        // that is not stored.
        let (conversation, _) = self.take_snapshot(
            &params.host,
            params.session_id,
            params.messages,
            &params.entry_ids,
        )?;
        let Some(budget) = self.planning_budget(conversation, params.token_budget)? else {
            return Ok(CompactResult::nothing_to_do(
                "no_candidate: no token budget known to compact towards",
            ));
        };
        // An overflow the host measured: the history must shrink by at least the excess.
        let excess = match (params.current_token_count, params.token_budget) {
            (Some(current), Some(window)) if current > window => Some(current - window),
            _ => None,
        };
        let normal = (budget as f64 * self.config.compact_target) as u64;
        let target = match excess {
            Some(excess) => normal.min(
                compaction::context_tokens(&self.store, conversation)?
                    .saturating_sub(excess + excess / 4 + 1),
            ),
            None => normal,
        };
        let outcome = self.compact_to(conversation, budget, target, params.custom_instructions)?;
        let details = serde_json::to_value(&outcome).unwrap_or_default();
        if outcome.passes.is_empty() {
            let why = match outcome.stop_reason {
                StopReason::BudgetMet => "budget_met: the context already fits",
                StopReason::NoCandidate => "no_candidate: nothing outside the fresh tail to summarise and nothing to condense",
                StopReason::NoProgress => "no_progress: no summary came out smaller than its input",
            };
            if excess.is_some() {
                // The overflow is inside the current turn, which only the host can split: its
                // runtime compaction does that in the session (the store keeps every message).
                tracing::info!(
                    stop_reason = outcome.stop_reason.as_str(),
                    "lossless: overflow inside the current turn; delegating to the runtime compaction"
                );
                return Ok(match self.host.delegate_compaction_to_runtime(params) {
                    Ok(result) => {
                        if result.is_compacted() {
                            // The host's context changed: the next prompt starts anew.
                            self.store.bump_epoch(conversation)?;
                        }
                        result
                    }
                    Err(err) => CompactResult::nothing_to_do(format!(
                        "{why}; the runtime compaction was not available either: {}",
                        err.message()
                    )),
                });
            }
            return Ok(CompactResult::nothing_to_do(why));
        }
        let summary = self
            .store
            .roots(conversation)?
            .last()
            .map(|s| s.text.clone())
            .unwrap_or_default();
        Ok(CompactResult::compacted(
            Compaction::new(outcome.tokens_before)
                .tokens_after(outcome.tokens_after)
                .summary(summary)
                .details(details),
        ))
    }
}

impl IngestBatch for Lossless {
    fn ingest_batch(
        &self,
        params: &IngestBatchParams<'_>,
    ) -> Result<IngestBatchResult, EngineError> {
        let (_, done) = self.take_snapshot(
            &params.host,
            params.session_id,
            params.messages,
            &params.entry_ids,
        )?;
        Ok(IngestBatchResult {
            ingested_count: done.added as u64,
        })
    }
}

impl AfterTurn for Lossless {
    fn after_turn(&self, params: &AfterTurnParams<'_>) -> Result<(), EngineError> {
        let (conversation, _) = self.take_snapshot(
            &params.host,
            params.session_id,
            params.messages,
            &params.entry_ids,
        )?;
        self.flush_assembly_stats()?;
        self.record_debt(conversation, params.token_budget)
    }
}

impl Bootstrap for Lossless {
    fn bootstrap(&self, params: &BootstrapParams<'_>) -> Result<BootstrapResult, EngineError> {
        let conversation = self
            .store
            .conversation(key(&params.host, params.session_id))?;
        let path = std::path::Path::new(params.session_file);
        if !path.is_file() {
            return Ok(BootstrapResult {
                bootstrapped: false,
                imported_messages: None,
                reason: Some(format!("no session file at {}", path.display())),
            });
        }
        let chain = session_file::active_messages(path)?;
        // The newest message already stored is the anchor; what follows it is imported, at
        // most bootstrapMaxMessages (the newest of them).
        let mut start = 0;
        for (i, (entry, _)) in chain.iter().enumerate().rev() {
            if self.store.seq_of_entry(conversation, entry)?.is_some() {
                start = i + 1;
                break;
            }
        }
        let start = start.max(
            chain
                .len()
                .saturating_sub(self.config.bootstrap_max_messages),
        );
        let incoming: Vec<Incoming<'_>> = chain[start..]
            .iter()
            .map(|(entry, message)| Incoming {
                message,
                entry_id: Some(entry),
            })
            .collect();
        let done = self.store.ingest(conversation, &incoming)?;
        Ok(BootstrapResult {
            bootstrapped: true,
            imported_messages: Some(done.added as u64),
            reason: (start > 0).then(|| {
                format!("reconciled after {start} messages already stored or over the cap")
            }),
        })
    }
}

impl Maintain for Lossless {
    fn maintain(&self, params: &MaintainParams<'_>) -> Result<MaintainResult, EngineError> {
        self.flush_assembly_stats()?;
        let indexed = self.store.index_pending()?;
        let (rewritten, freed) =
            payloads::externalize(&self.store, self.config.large_payload_chars)?;
        let conversation = self
            .store
            .conversation(key(&params.host, params.session_id))?;
        let mut summaries = 0;
        let debt = self.debt(conversation)?;
        if debt > 0 {
            if let Some(budget) = self.planning_budget(conversation, None)? {
                let urgent = debt as f64 >= budget as f64 * self.config.urgent_threshold;
                if urgent
                    || self.cache_cold(&params.host)
                    || params.reason == MaintainReason::Bootstrap
                {
                    summaries = self
                        .compact_to_target(conversation, budget, None)?
                        .passes
                        .len();
                }
            }
        }
        let changed = indexed > 0 || rewritten > 0 || summaries > 0;
        Ok(MaintainResult {
            changed,
            bytes_freed: freed,
            rewritten_entries: rewritten,
            reason: Some(format!(
                "indexed {indexed} messages, moved {rewritten} payloads to files ({freed} bytes out of the messages table), wrote {summaries} summaries"
            )),
        })
    }
}

impl Tools for Lossless {
    fn call_tool(&self, params: &ToolCallParams<'_>) -> Result<ToolCallResult, EngineError> {
        let key = key(&params.host, params.session_id);
        let access = Access::of(&self.store, key, self.config.grep_limit)?;
        let answer = match params.tool_name {
            "lcm_grep" => tools::grep(&self.store, &access, params.arguments_json, self.config.grep_limit),
            "lcm_describe" => tools::describe(&self.store, &access, params.arguments_json),
            "lcm_expand" => tools::expand(&self.store, &access, params.arguments_json, self.config.expand_page_size),
            "lcm_stats" => self.stats(key),
            other => Err(EngineError::failed(format!(
                "lossless has no tool {other:?}; its tools are lcm_grep, lcm_describe, lcm_expand and lcm_stats"
            ))),
        };
        Ok(match answer {
            Ok(value) => ToolCallResult::ok(value.to_string()),
            Err(err) => ToolCallResult::error(err.message().to_owned()),
        })
    }
}

impl SubagentSpawn for Lossless {
    fn prepare_subagent_spawn(
        &self,
        params: &SubagentSpawnParams<'_>,
    ) -> Result<Option<SpawnRollback>, EngineError> {
        if params.child_session_key == params.parent_session_key {
            return Err(EngineError::failed(
                "lossless: a session cannot be granted its own store",
            ));
        }
        // A grant covers the parent's own conversation only: a child holding a grant passes
        // nothing of it on (no recursive grants).
        let Some(parent) = self.store.find_conversation(params.parent_session_key)? else {
            return Ok(None);
        };
        let max_seq: i64 = self.store.value(
            "SELECT COALESCE(MAX(seq), -1) FROM messages WHERE conversation_id = ?1",
            parent,
        )?;
        let ttl = params.ttl_ms.map_or(self.config.grant_ttl_ms, |t| {
            t.min(self.config.grant_ttl_ms)
        });
        let child = params.child_session_key.to_owned();
        self.store.with(|conn| {
            conn.execute(
                "INSERT OR REPLACE INTO grants (child_key, parent_conversation_id, max_seq, max_results, expires_at, created_at) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                params![child, parent, max_seq, self.config.grant_max_results as i64, now_ms() + ttl as i64, now_ms()],
            )
            .map_err(db_error("grant"))
        })?;
        let store = Arc::clone(&self.store);
        Ok(Some(SpawnRollback::new(move || revoke(&store, &child))))
    }
}

impl SubagentEnded for Lossless {
    fn on_subagent_ended(&self, params: &SubagentEndedParams<'_>) -> Result<(), EngineError> {
        revoke(&self.store, params.child_session_key)
    }
}

fn revoke(store: &Store, child: &str) -> Result<(), EngineError> {
    store.with(|conn| {
        conn.execute("DELETE FROM grants WHERE child_key = ?1", [child])
            .map_err(db_error("revoke grant"))
            .map(drop)
    })
}

impl Dispose for Lossless {
    fn dispose(&self) -> Result<(), EngineError> {
        self.flush_assembly_stats()?;
        // Leave the WAL folded into the database for whoever opens it next.
        self.store.with(|conn| {
            conn.execute_batch("PRAGMA wal_checkpoint(TRUNCATE);")
                .map_err(db_error("checkpoint"))
        })
    }
}

pincer_plugin_api::export_engine!(Lossless);
