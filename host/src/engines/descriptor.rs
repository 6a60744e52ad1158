//! An engine as the host knows it once it is made: its `info` copied into host memory
//! ([`EngineDescriptor`], with its [`EngineTool`]s) and where it came from ([`EngineOrigin`]).
//! A leaf: backends build a descriptor, the instance and the guard read it.

use pincer_plugin_abi::latest::{OptionalMethods, TurnMaintenanceMode};
use serde::Serialize;

use super::methods::OPTIONAL_METHODS;
use crate::plugins::library::LoadedLibrary;
use crate::types::{HostRequirement, HostRequirements, Method};

/// `foreground` or `background`, as `info` is shown.
fn maintenance_mode_name<S: serde::Serializer>(
    mode: &TurnMaintenanceMode,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    serializer.serialize_str(match mode {
        TurnMaintenanceMode::Foreground => "foreground",
        TurnMaintenanceMode::Background => "background",
    })
}

/// A tool an engine offers, host-owned.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct EngineTool {
    /// Its name.
    pub name: String,
    /// Its description.
    pub description: String,
    /// The JSON Schema of its arguments.
    pub parameters: serde_json::Value,
}

/// An engine's `info`, copied into host memory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct EngineDescriptor {
    /// Engine id.
    pub id: String,
    /// Display name.
    pub name: String,
    /// Version.
    pub version: String,
    /// Whether it owns compaction.
    pub owns_compaction: bool,
    /// How `maintain` after a turn is scheduled (serialized `foreground` or `background`).
    #[serde(serialize_with = "maintenance_mode_name")]
    pub turn_maintenance_mode: TurnMaintenanceMode,
    /// Requirements by operation (`agent-run`, …).
    pub host_requirements: HostRequirements,
    /// Accepted host params; `None` accepts all.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub accepted_host_params: Option<Vec<String>>,
    /// Offered tools, sorted by name.
    pub tools: Vec<EngineTool>,
    /// Optional methods implemented, in the ABI's order (serialized as contract names).
    pub optional_methods: Vec<Method>,
    #[serde(skip)]
    methods: OptionalMethods,
}

impl EngineDescriptor {
    /// The host-owned copy of an engine's `info` (already checked, see [`super::checked`]).
    pub fn from_abi(info: &pincer_plugin_abi::latest::EngineInfo) -> Self {
        let host_requirements = info
            .host_requirements
            .iter()
            .map(|req| {
                (
                    req.operation,
                    HostRequirement {
                        required_capabilities: req
                            .required_capabilities
                            .iter()
                            .map(|c| c.to_string())
                            .collect(),
                        unsupported_message: req
                            .unsupported_message
                            .as_ref()
                            .map(|m| m.to_string())
                            .into_option(),
                    },
                )
            })
            .collect();
        let mut tools: Vec<EngineTool> = info
            .tools
            .iter()
            .map(|t| EngineTool {
                name: t.name.to_string(),
                description: t.description.to_string(),
                parameters: serde_json::from_str(&t.parameters_schema_json)
                    .unwrap_or(serde_json::Value::Null),
            })
            .collect();
        // Deterministic order: whatever reaches a prompt is sorted.
        tools.sort_by(|a, b| a.name.cmp(&b.name));
        EngineDescriptor {
            id: info.id.to_string(),
            name: info.name.to_string(),
            version: info.version.to_string(),
            owns_compaction: info.owns_compaction,
            turn_maintenance_mode: info.turn_maintenance_mode,
            host_requirements,
            accepted_host_params: info
                .accepted_host_params
                .as_ref()
                .map(|v| v.iter().map(|p| p.to_string()).collect())
                .into_option(),
            tools,
            optional_methods: OPTIONAL_METHODS
                .into_iter()
                .filter(|(bit, _)| info.optional_methods.has(*bit))
                .map(|(_, method)| method)
                .collect(),
            methods: info.optional_methods,
        }
    }

    /// Whether the engine implements an optional method (an [`OptionalMethods`] constant).
    pub fn has(&self, method: u32) -> bool {
        self.methods.has(method)
    }
}

/// Where an engine instance came from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase", tag = "kind")]
pub enum EngineOrigin {
    /// Linked into the host (`legacy`).
    Builtin,
    /// Loaded from a plugin library.
    Plugin {
        /// The plugin id.
        plugin_id: String,
        /// The private copy it was loaded from.
        library: String,
    },
}

impl EngineOrigin {
    /// The origin of an engine made from `library`.
    pub fn of_library(library: &LoadedLibrary) -> Self {
        EngineOrigin::Plugin {
            plugin_id: library.manifest().id.clone(),
            library: library.copy_path().display().to_string(),
        }
    }
}
