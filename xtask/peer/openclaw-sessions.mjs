// OpenClaw's side of `cargo xtask bench --peer openclaw`: one measured run per process.
//
// Usage (xtask copies this file next to the installed package and runs it with Node 24):
//   node --expose-gc openclaw-sessions.mjs FILE SCRATCH
// Opens the JSONL session FILE the way OpenClaw reads a legacy transcript
// (readFileSync utf8 + parseSessionEntries + SessionManager.fromOwnedEntries) and builds the
// context on the leaf (sm.buildSessionContext()), timed; then estimateTokens over the context's
// messages, repeated for at least 100 ms after one warm-up pass; and prints one JSON object on
// stdout. SCRATCH is the private folder that replaces the system temp folder for OpenClaw's
// state locks (HOME, OPENCLAW_* and TMPDIR are set by xtask). Only public entry points are used.

import { readFileSync } from "node:fs";
import { AsyncLocalStorage } from "node:async_hooks";
import { performance } from "node:perf_hooks";

const [file, scratch] = process.argv.slice(2);
if (!file || !scratch) {
  console.error("usage: node --expose-gc openclaw-sessions.mjs FILE SCRATCH");
  process.exit(2);
}
if (typeof globalThis.gc !== "function") {
  console.error("openclaw-sessions.mjs: run node with --expose-gc");
  process.exit(2);
}

// OpenClaw puts its state-lock directory straight into /tmp unless an AsyncLocalStorage store
// says otherwise; seed its process-wide singleton with a store that defaults to SCRATCH.
class DefaultingStorage extends AsyncLocalStorage {
  getStore() {
    return super.getStore() ?? { directory: scratch, keepAlive: true };
  }
}
globalThis[Symbol.for("openclaw.stateDatabaseCoordinator")] = {
  heldCoordinators: new Map(),
  sourceReadScopes: new AsyncLocalStorage(),
  canonicalWriteScopes: new AsyncLocalStorage(),
  coordinatorRuntimeDirectories: new DefaultingStorage(),
  gatewaySchemaScopes: new AsyncLocalStorage(),
};

const kib = (bytes) => Math.round(bytes / 1024);

const importStart = performance.now();
const { SessionManager, parseSessionEntries } = await import("openclaw/plugin-sdk/agent-sessions");
const { estimateTokens } = await import("openclaw/plugin-sdk/agent-core");
const importMs = performance.now() - importStart;
gc();
const rssAfterImport = process.memoryUsage().rss;

const t0 = performance.now();
const text = readFileSync(file, "utf8");
const t1 = performance.now();
const entries = parseSessionEntries(text);
const t2 = performance.now();
const sm = SessionManager.fromOwnedEntries(entries);
const t3 = performance.now();
const context = sm.buildSessionContext();
const t4 = performance.now();
const messages = context.messages;

let tokens = 0;
for (const m of messages) tokens += estimateTokens(m);
let passes = 0;
let sink = 0;
const estimateStart = performance.now();
while (passes < 3 || performance.now() - estimateStart < 100) {
  for (const m of messages) sink += estimateTokens(m);
  passes += 1;
}
const estimateMs = performance.now() - estimateStart;

let lines = 0;
for (let i = text.indexOf("\n"); i !== -1; i = text.indexOf("\n", i + 1)) lines += 1;
if (text.length > 0 && !text.endsWith("\n")) lines += 1;

gc();
const retained = process.memoryUsage();
const report = {
  node: process.version,
  import_ms: importMs,
  read_ms: t1 - t0,
  parse_ms: t2 - t1,
  manager_ms: t3 - t2,
  context_ms: t4 - t3,
  total_ms: t4 - t0,
  lines,
  records: entries.length,
  manager_entries: sm.getEntries().length,
  context_messages: messages.length,
  tokens,
  estimate_ns_per_message: messages.length ? (estimateMs * 1e6) / (passes * messages.length) : 0,
  estimate_passes: passes,
  rss_after_import_kib: kib(rssAfterImport),
  rss_retained_kib: kib(retained.rss),
  heap_used_kib: kib(retained.heapUsed),
  max_rss_kib: process.resourceUsage().maxRSS,
  sink: sink > 0,
};
// Keep everything alive until the figures above are taken.
if (text.length + entries.length + messages.length < 0) console.error(sm);
process.stdout.write(JSON.stringify(report) + "\n");
