//! The method table: every engine method the host knows, declared once.
//!
//! Two views of the same table live here:
//!
//! - `for_each_engine_method!`, the rows the layers generate their per-method code from: the
//!   method's name, its ABI params and result types, its owned request type (see
//!   [`super::request`]), and its guard row (whether it is optional and the canned result when
//!   `legacy` lacks it, the contract check of its result, whether `legacy`'s same method is
//!   its fallback). The [`EngineBackend`](super::backend::EngineBackend) declarations, the
//!   in-process backend's forwards, [`EngineInstance`](super::instance::EngineInstance)'s
//!   forwards and the guard's impls and named calls (`slot::guarded`) are expanded from it.
//! - [`METHODS`], the typed facts of each method as data: optional or required, how it is
//!   bounded and guarded ([`GuardPolicy`]: deadline window, fail mode, quarantine, whether an
//!   overrun counts), its parameters ([`ParamSpec`]), whether the gateway answers it, the API
//!   minor it appeared in and whether the host calls it yet; [`HOST_PARAMS`] and
//!   [`HOST_SERVICES`], the same for the host parameters and the services engines call back.
//!   The guard reads its policy here, the descriptor its optional-method list
//!   ([`OPTIONAL_METHODS`]), the gateway which engine methods it answers.
//!
//! Adding an engine method means a row in each view, plus (besides the ABI and the author API)
//! its [`Method`] variant, its owned request type and the request `check-engine` makes of a
//! conversation ([`super::request`]), its wire forms (`isolation::wire`), the string check of
//! a new result type that holds strings ([`super::checked`]), and its place in
//! [`EXERCISE_ORDER`]: those are still written by hand. The isolation wire variants, the
//! worker's dispatch, the gateway's rows ([`GATEWAY_METHODS`]) and `check-engine`'s calls are
//! driven by the table. So are the methods whose calls are not one shape (`prepareSubagentSpawn`
//! returns a rollback handle, `dispose` runs once), beside the generated ones.

use pincer_plugin_abi::latest::OptionalMethods;

use crate::types::Method;

/// Calls `$callback!` with every engine method whose call has the common shape, one row each:
///
/// ```text
/// name(Params) -> Result {
///     variant: Method, request: Request,
///     optional: yes | no (its bit: `METHODS`),
///     canned: [the result when legacy lacks it] (empty: none, or a custom fallback),
///     check: [contract check of the result] (empty: none),
///     fallback: legacy | custom,
///     strings: none | own (none: the result holds no string, its `CheckedStrings` is
///         generated; own: written in `checked`),
/// }
/// ```
///
/// Tokens of a row are resolved where the callback expands: the guard names its own checks,
/// and every expanding file has `abi` as `pincer_plugin_abi::latest` in scope.
macro_rules! for_each_engine_method {
    ($callback:ident) => {
        $callback! {
            // Params are named in `pincer_plugin_abi::latest`; results are paths
            // (`abi::` is that module).
            ingest(IngestParams) -> abi::IngestResult {
                variant: Ingest, request: IngestRequest,
                optional: no, canned: [], check: [], fallback: legacy,
                strings: none,
            }
            assemble(AssembleParams) -> abi::AssembleResult {
                variant: Assemble, request: AssembleRequest,
                optional: no, canned: [], check: [check_assemble], fallback: legacy,
                strings: own,
            }
            compact(CompactParams) -> abi::CompactResult {
                variant: Compact, request: CompactRequest,
                optional: no, canned: [], check: [check_compact], fallback: legacy,
                strings: own,
            }
            bootstrap(BootstrapParams) -> abi::BootstrapResult {
                variant: Bootstrap, request: BootstrapRequest,
                optional: yes, canned: [abi::BootstrapResult {
                    bootstrapped: false,
                    imported_messages: ROption::RNone,
                    reason: ROption::RSome(DOWNGRADED_REASON.into()),
                }],
                check: [check_bootstrap], fallback: legacy,
                strings: own,
            }
            ingest_batch(IngestBatchParams) -> abi::IngestBatchResult {
                variant: IngestBatch, request: IngestBatchRequest,
                optional: yes, canned: [abi::IngestBatchResult { ingested_count: 0 }],
                check: [], fallback: legacy,
                strings: none,
            }
            after_turn(AfterTurnParams) -> () {
                variant: AfterTurn, request: AfterTurnRequest,
                optional: yes, canned: [()], check: [], fallback: legacy,
                strings: own,
            }
            maintain(MaintainParams) -> abi::MaintainResult {
                variant: Maintain, request: MaintainRequest,
                optional: yes, canned: [abi::MaintainResult {
                    changed: false,
                    bytes_freed: 0,
                    rewritten_entries: 0,
                    reason: ROption::RSome(DOWNGRADED_REASON.into()),
                }],
                check: [check_maintain], fallback: legacy,
                strings: own,
            }
            call_tool(ToolCallParams) -> abi::ToolCallResult {
                variant: CallTool, request: ToolCallRequest,
                optional: yes, canned: [], check: [check_tool_result], fallback: custom,
                strings: own,
            }
            on_subagent_ended(SubagentEndedParams) -> () {
                variant: OnSubagentEnded, request: SubagentEndedRequest,
                optional: yes, canned: [], check: [], fallback: custom,
                strings: own,
            }
        }
    };
}
pub(crate) use for_each_engine_method;

/// An API version `1.minor`: when a method, parameter or service appeared.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct ApiMinor(pub u32);

/// What a failure of the configured engine leads to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailMode {
    /// `legacy`'s same method (or the canned result) answers instead.
    Open,
    /// The original error returns to the caller.
    Closed,
}

/// Which deadline window bounds a call (see `slot::guarded::Timeouts`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimeoutKey {
    /// The method's own `callTimeoutsMs` entry, else `callTimeoutsMs.default`.
    PerCall,
    /// The compaction safety timeout, always.
    Compaction,
    /// Its own `callTimeoutsMs` entry when named, else the compaction safety timeout.
    PerCallElseCompaction,
}

/// How the guard treats a method's failures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GuardPolicy {
    /// Its deadline window.
    pub timeout: TimeoutKey,
    /// Fail open or closed.
    pub fail: FailMode,
    /// Whether a failure or an overrun quarantines the engine.
    pub quarantines: bool,
    /// Whether running past its deadline counts as a failure (`compact`'s overrun is an abort).
    pub overrun_counts: bool,
}

impl GuardPolicy {
    const OPEN: GuardPolicy = GuardPolicy {
        timeout: TimeoutKey::PerCall,
        fail: FailMode::Open,
        quarantines: true,
        overrun_counts: true,
    };
    const CLOSED: GuardPolicy = GuardPolicy {
        fail: FailMode::Closed,
        ..GuardPolicy::OPEN
    };
}

/// A parameter of a method (or a host parameter): its contract name, the API minor it appeared
/// in, and whether the host passes it (a parameter can be in the ABI before the host fills it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ParamSpec {
    /// Its contract name.
    pub name: &'static str,
    /// The API minor it appeared in.
    pub since: ApiMinor,
    /// Whether the host passes it (else it is always empty).
    pub offered: bool,
}

const fn param(name: &'static str) -> ParamSpec {
    ParamSpec {
        name,
        since: ApiMinor(0),
        offered: true,
    }
}

const fn unoffered(name: &'static str) -> ParamSpec {
    ParamSpec {
        offered: false,
        ..param(name)
    }
}

const BOOTSTRAP_PARAMS: &[ParamSpec] = &[param("sessionId"), param("sessionFile"), param("host")];

const INGEST_PARAMS: &[ParamSpec] = &[
    param("sessionId"),
    param("message"),
    param("entryId"),
    param("isHeartbeat"),
    param("host"),
];

const INGEST_BATCH_PARAMS: &[ParamSpec] = &[
    param("sessionId"),
    param("messages"),
    param("entryIds"),
    param("isHeartbeat"),
    param("host"),
];

const AFTER_TURN_PARAMS: &[ParamSpec] = &[
    param("sessionId"),
    param("sessionFile"),
    param("messages"),
    param("entryIds"),
    param("prePromptMessageCount"),
    param("autoCompactionSummary"),
    param("isHeartbeat"),
    param("tokenBudget"),
    param("host"),
];

const ASSEMBLE_PARAMS: &[ParamSpec] = &[
    param("sessionId"),
    param("messages"),
    param("entryIds"),
    param("tokenBudget"),
    unoffered("availableTools"),
    unoffered("citationsMode"),
    unoffered("model"),
    param("host"),
];

const COMPACT_PARAMS: &[ParamSpec] = &[
    param("sessionId"),
    param("sessionFile"),
    param("agentId"),
    param("messages"),
    param("entryIds"),
    param("tokenBudget"),
    param("force"),
    param("forceReason"),
    param("currentTokenCount"),
    param("compactionTarget"),
    param("customInstructions"),
    param("host"),
];

const MAINTAIN_PARAMS: &[ParamSpec] = &[
    param("sessionId"),
    param("sessionFile"),
    param("reason"),
    param("host"),
];

const PREPARE_SUBAGENT_SPAWN_PARAMS: &[ParamSpec] = &[
    param("parentSessionKey"),
    param("childSessionKey"),
    param("contextMode"),
    param("parentSessionId"),
    param("parentSessionFile"),
    param("childSessionId"),
    param("childSessionFile"),
    param("ttlMs"),
];

const ON_SUBAGENT_ENDED_PARAMS: &[ParamSpec] = &[param("childSessionKey"), param("reason")];

const CALL_TOOL_PARAMS: &[ParamSpec] = &[
    param("sessionId"),
    param("toolName"),
    param("argumentsJson"),
    param("host"),
];

const COMMIT_TURN_PARAMS: &[ParamSpec] = &[
    unoffered("sessionId"),
    unoffered("advancementKey"),
    unoffered("logicalTurnId"),
    unoffered("admission"),
    unoffered("terminal"),
    unoffered("messages"),
    unoffered("entryIds"),
    unoffered("isHeartbeat"),
    unoffered("host"),
];

/// The host parameters every call with `host` carries (`HostParams`; the engine's
/// `acceptedHostParams` projects them).
// Recorded for the API's next minors, which gate what they add by it; read by tests today.
#[cfg_attr(not(test), allow(dead_code))]
pub const HOST_PARAMS: &[ParamSpec] = &[
    param("sessionKey"),
    param("prompt"),
    param("runtimeSettings"),
    param("sessionTarget"),
    param("runtimeContext"),
    param("abortSignal"),
    param("promptCache"),
];

/// One row of [`METHODS`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MethodSpec {
    /// The method (its contract and JSON name: [`Method::as_str`]).
    pub method: Method,
    /// Its [`OptionalMethods`] bit; `None`: every engine has it.
    pub optional: Option<u32>,
    /// How the guard bounds it and treats its failures.
    pub guard: GuardPolicy,
    /// The API minor it appeared in.
    pub since: ApiMinor,
    /// Whether the host calls it (a method can be in the ABI before the host uses it).
    pub offered: bool,
    /// Its parameters, in the ABI's order (`host`: [`HOST_PARAMS`]).
    pub params: &'static [ParamSpec],
    /// Whether the gateway answers it as a call of its own, by its contract name
    /// (`gateway::protocol`).
    pub gateway: bool,
    /// Its place among the engine methods in the gateway's listing (`docs/GATEWAY.md`'s order,
    /// which the unknown-method answer repeats); unused when `gateway` is false.
    pub gateway_place: u8,
    /// How `check-engine` exercises it (`report::exercise`).
    pub exercise: Exercise,
}

/// How `check-engine` calls a method.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exercise {
    /// Through the guard, like the host calls it.
    Guarded,
    /// Directly (outside the guard's routing): a rollback handle, when `prepareSubagentSpawn`
    /// gave one, and `dispose`.
    Direct,
    /// Not called: it needs what a conversation does not give (a tool call, the runtime's
    /// factory), or the host does not call it yet.
    No,
}

const fn row(
    method: Method,
    optional: Option<u32>,
    guard: GuardPolicy,
    params: &'static [ParamSpec],
) -> MethodSpec {
    MethodSpec {
        method,
        optional,
        guard,
        since: ApiMinor(0),
        offered: true,
        params,
        gateway: false,
        gateway_place: 0,
        exercise: Exercise::Guarded,
    }
}

/// `row`, which `check-engine` calls as `exercise` says.
const fn exercised(exercise: Exercise, spec: MethodSpec) -> MethodSpec {
    MethodSpec { exercise, ..spec }
}

/// `row`, answered by the gateway too, listed at `place` among its engine methods.
const fn at_gateway(place: u8, spec: MethodSpec) -> MethodSpec {
    MethodSpec {
        gateway: true,
        gateway_place: place,
        ..spec
    }
}

/// Every operation the host runs against an engine, in [`Method::ALL`]'s order.
pub const METHODS: [MethodSpec; Method::ALL.len()] = [
    exercised(
        Exercise::No,
        row(Method::Factory, None, GuardPolicy::CLOSED, &[]),
    ),
    exercised(
        Exercise::No,
        row(Method::Info, None, GuardPolicy::CLOSED, &[]),
    ),
    row(
        Method::Bootstrap,
        Some(OptionalMethods::BOOTSTRAP),
        GuardPolicy {
            timeout: TimeoutKey::PerCallElseCompaction,
            ..GuardPolicy::OPEN
        },
        BOOTSTRAP_PARAMS,
    ),
    at_gateway(
        0,
        row(Method::Ingest, None, GuardPolicy::OPEN, INGEST_PARAMS),
    ),
    at_gateway(
        1,
        row(
            Method::IngestBatch,
            Some(OptionalMethods::INGEST_BATCH),
            GuardPolicy::OPEN,
            INGEST_BATCH_PARAMS,
        ),
    ),
    at_gateway(
        4,
        row(
            Method::AfterTurn,
            Some(OptionalMethods::AFTER_TURN),
            GuardPolicy::OPEN,
            AFTER_TURN_PARAMS,
        ),
    ),
    at_gateway(
        2,
        row(Method::Assemble, None, GuardPolicy::OPEN, ASSEMBLE_PARAMS),
    ),
    at_gateway(
        3,
        row(
            Method::Compact,
            None,
            GuardPolicy {
                timeout: TimeoutKey::Compaction,
                overrun_counts: false,
                ..GuardPolicy::CLOSED
            },
            COMPACT_PARAMS,
        ),
    ),
    at_gateway(
        5,
        row(
            Method::Maintain,
            Some(OptionalMethods::MAINTAIN),
            GuardPolicy {
                timeout: TimeoutKey::PerCallElseCompaction,
                ..GuardPolicy::OPEN
            },
            MAINTAIN_PARAMS,
        ),
    ),
    at_gateway(
        6,
        row(
            Method::PrepareSubagentSpawn,
            Some(OptionalMethods::PREPARE_SUBAGENT_SPAWN),
            GuardPolicy::CLOSED,
            PREPARE_SUBAGENT_SPAWN_PARAMS,
        ),
    ),
    at_gateway(
        7,
        row(
            Method::OnSubagentEnded,
            Some(OptionalMethods::ON_SUBAGENT_ENDED),
            GuardPolicy::OPEN,
            ON_SUBAGENT_ENDED_PARAMS,
        ),
    ),
    exercised(
        Exercise::Direct,
        row(Method::Rollback, None, GuardPolicy::CLOSED, &[]),
    ),
    exercised(
        Exercise::No,
        at_gateway(
            8,
            row(
                Method::CallTool,
                Some(OptionalMethods::CALL_TOOL),
                GuardPolicy::OPEN,
                CALL_TOOL_PARAMS,
            ),
        ),
    ),
    MethodSpec {
        offered: false,
        ..exercised(
            Exercise::No,
            row(
                Method::CommitTurn,
                Some(OptionalMethods::COMMIT_TURN),
                GuardPolicy::OPEN,
                COMMIT_TURN_PARAMS,
            ),
        )
    },
    exercised(
        Exercise::Direct,
        row(
            Method::Dispose,
            Some(OptionalMethods::DISPOSE),
            GuardPolicy::CLOSED,
            &[],
        ),
    ),
];

/// The methods `check-engine` calls ([`Exercise::Guarded`] and [`Exercise::Direct`] rows), in
/// the lifecycle order it calls them.
pub const EXERCISE_ORDER: [Method; 11] = [
    Method::Bootstrap,
    Method::Ingest,
    Method::IngestBatch,
    Method::Assemble,
    Method::AfterTurn,
    Method::Maintain,
    Method::Compact,
    Method::PrepareSubagentSpawn,
    Method::Rollback,
    Method::OnSubagentEnded,
    Method::Dispose,
];

/// The row of `method`.
pub const fn spec(method: Method) -> &'static MethodSpec {
    &METHODS[method as usize]
}

/// How many optional methods the table has.
const OPTIONAL_COUNT: usize = {
    let mut count = 0;
    let mut i = 0;
    while i < METHODS.len() {
        if METHODS[i].optional.is_some() {
            count += 1;
        }
        i += 1;
    }
    count
};

/// The ABI's optional-method bits and the methods they stand for, in the ABI's order
/// ([`OptionalMethods::ALL`]: ascending bits), taken from [`METHODS`].
pub const OPTIONAL_METHODS: [(u32, Method); OPTIONAL_COUNT] = {
    let mut out = [(0, Method::Factory); OPTIONAL_COUNT];
    let mut filled = 0;
    let mut bit = 0;
    while bit < u32::BITS {
        let mut i = 0;
        while i < METHODS.len() {
            if let Some(b) = METHODS[i].optional {
                if b == 1 << bit {
                    out[filled] = (b, METHODS[i].method);
                    filled += 1;
                }
            }
            i += 1;
        }
        bit += 1;
    }
    out
};

/// How many methods the gateway answers as calls of their own.
pub const GATEWAY_COUNT: usize = {
    let mut count = 0;
    let mut i = 0;
    while i < METHODS.len() {
        if METHODS[i].gateway {
            count += 1;
        }
        i += 1;
    }
    count
};

/// The methods the gateway answers, in its listing's order ([`MethodSpec::gateway_place`]).
pub const GATEWAY_METHODS: [Method; GATEWAY_COUNT] = {
    let mut out = [Method::Factory; GATEWAY_COUNT];
    let mut i = 0;
    while i < METHODS.len() {
        if METHODS[i].gateway {
            out[METHODS[i].gateway_place as usize] = METHODS[i].method;
        }
        i += 1;
    }
    out
};

/// A service the host offers engines (the `HostServices` of the ABI).
// Recorded for the API's next minors, which gate what they add by it; read by tests today.
#[cfg_attr(not(test), allow(dead_code))]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HostServiceSpec {
    /// Its name in the contract.
    pub name: &'static str,
    /// The API minor it appeared in.
    pub since: ApiMinor,
}

/// Every host service, in the ABI's order (`HostServicesAbi`).
#[cfg_attr(not(test), allow(dead_code))]
pub const HOST_SERVICES: [HostServiceSpec; 6] = [
    HostServiceSpec {
        name: "log",
        since: ApiMinor(0),
    },
    HostServiceSpec {
        name: "maxLogLevel",
        since: ApiMinor(0),
    },
    HostServiceSpec {
        name: "llmComplete",
        since: ApiMinor(0),
    },
    HostServiceSpec {
        name: "delegateCompactionToRuntime",
        since: ApiMinor(0),
    },
    HostServiceSpec {
        name: "estimateTokens",
        since: ApiMinor(0),
    },
    HostServiceSpec {
        name: "extension",
        since: ApiMinor(0),
    },
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_has_one_row_per_method_in_order() {
        for (row, method) in METHODS.iter().zip(Method::ALL) {
            assert_eq!(row.method, method);
        }
    }

    #[test]
    fn optional_method_bits_name_the_abis_methods_in_its_order() {
        let ours: Vec<(u32, &str)> = OPTIONAL_METHODS
            .iter()
            .map(|(bit, method)| (*bit, method.as_str()))
            .collect();
        assert_eq!(ours, OptionalMethods::ALL.to_vec());
    }

    #[test]
    fn a_method_the_host_does_not_call_gets_no_parameter_from_it() {
        for row in METHODS.iter().filter(|row| !row.offered) {
            assert!(row.params.iter().all(|p| !p.offered), "{}", row.method);
        }
    }

    #[test]
    fn check_engine_orders_every_method_it_exercises() {
        let mut ordered = EXERCISE_ORDER.to_vec();
        ordered.sort();
        let exercised: Vec<Method> = METHODS
            .iter()
            .filter(|row| row.exercise != Exercise::No)
            .map(|row| row.method)
            .collect();
        assert_eq!(ordered, exercised);
    }

    #[test]
    fn every_host_parameter_legacy_accepts_is_recorded_once() {
        let names: Vec<&str> = HOST_PARAMS.iter().map(|p| p.name).collect();
        for accepted in crate::engines::legacy::ALL_HOST_PARAMS {
            assert!(
                names.contains(&accepted),
                "{accepted} is not in HOST_PARAMS"
            );
        }
        let mut sorted = names.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(
            sorted.len(),
            names.len(),
            "a host parameter is recorded twice"
        );
        let mut services: Vec<&str> = HOST_SERVICES.iter().map(|s| s.name).collect();
        services.sort_unstable();
        services.dedup();
        assert_eq!(
            services.len(),
            HOST_SERVICES.len(),
            "a host service is recorded twice"
        );
    }

    #[test]
    fn gateway_places_are_distinct() {
        let mut places: Vec<u8> = METHODS
            .iter()
            .filter(|row| row.gateway)
            .map(|row| row.gateway_place)
            .collect();
        places.sort_unstable();
        assert_eq!(places, (0..GATEWAY_COUNT as u8).collect::<Vec<_>>());
    }

    #[test]
    fn every_optional_bit_of_the_abi_is_a_row() {
        for (bit, name) in OptionalMethods::ALL {
            let method = Method::from_name(name).expect("a method of the table");
            assert_eq!(spec(method).optional, Some(bit), "{name}");
        }
    }
}
