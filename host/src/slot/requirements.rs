//! Host requirements (docs/CONTRACT.md §5): what an engine needs from the host that runs it, checked
//! before an operation starts and failing closed with the contract's exact message.
//!
//! Hosts are described by [`HostDescriptor`]s: the embedded runner (every capability), CLI
//! backends (by default `bootstrap`, `after-turn`, `maintain` — no `assemble-before-prompt`),
//! and agent harnesses declared in `pincer.json` with their own capability lists. The same
//! check runs on a manifest's `hostRequirements`, so `pincer doctor` can tell without loading
//! which configured hosts an engine cannot run on.

use serde::Serialize;

use crate::config::Config;
use crate::types::{serialize_host_operation, HostOperation, HostRequirements, LEGACY_ENGINE_ID};

/// Every capability the embedded runner offers.
pub const EMBEDDED_CAPABILITIES: [&str; 7] = [
    "bootstrap",
    "assemble-before-prompt",
    "reference-context",
    "after-turn",
    "maintain",
    "compact",
    "runtime-llm-complete",
];

/// A CLI backend's capabilities when its config does not list them.
pub const DEFAULT_CLI_CAPABILITIES: [&str; 3] = ["bootstrap", "after-turn", "maintain"];

/// An execution host.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HostDescriptor {
    /// `pincer-embedded`, `cli:<id>`, `agent-harness:<id>`.
    pub id: String,
    /// For messages: `pincer embedded runner`, `CLI backend "<id>"`, `agent harness "<id>"`.
    pub label: String,
    /// What it offers.
    pub capabilities: Vec<String>,
}

impl HostDescriptor {
    /// The embedded runner.
    pub fn embedded() -> Self {
        HostDescriptor {
            id: "pincer-embedded".to_owned(),
            label: "pincer embedded runner".to_owned(),
            capabilities: EMBEDDED_CAPABILITIES
                .iter()
                .map(|c| (*c).to_owned())
                .collect(),
        }
    }

    /// A CLI backend, with its configured capabilities or the default three.
    pub fn cli_backend(backend_id: &str, capabilities: Option<&[String]>) -> Self {
        HostDescriptor {
            id: format!("cli:{backend_id}"),
            label: format!("CLI backend \"{backend_id}\""),
            capabilities: capabilities.map(<[String]>::to_vec).unwrap_or_else(|| {
                DEFAULT_CLI_CAPABILITIES
                    .iter()
                    .map(|c| (*c).to_owned())
                    .collect()
            }),
        }
    }

    /// An agent harness with its declared capabilities.
    pub fn harness(harness_id: &str, capabilities: &[String]) -> Self {
        HostDescriptor {
            id: format!("agent-harness:{harness_id}"),
            label: format!("agent harness \"{harness_id}\""),
            capabilities: capabilities.to_vec(),
        }
    }

    /// Every host this configuration runs engines on: the embedded runner, then the CLI
    /// backends and harnesses of `hosts` in config, sorted by id.
    pub fn configured(config: &Config) -> Vec<HostDescriptor> {
        let mut hosts = vec![HostDescriptor::embedded()];
        for (id, backend) in &config.hosts.cli_backends {
            hosts.push(HostDescriptor::cli_backend(
                id,
                backend.capabilities.as_deref(),
            ));
        }
        for (id, harness) in &config.hosts.harnesses {
            hosts.push(HostDescriptor::harness(id, &harness.capabilities));
        }
        hosts
    }

    /// Finds a configured host by id (`pincer-embedded`, `cli:<id>`, `agent-harness:<id>`,
    /// or just the backend or harness id).
    pub fn find(config: &Config, id: &str) -> Option<HostDescriptor> {
        HostDescriptor::configured(config).into_iter().find(|h| {
            h.id == id
                || h.id.strip_prefix("cli:") == Some(id)
                || h.id.strip_prefix("agent-harness:") == Some(id)
        })
    }
}

/// An operation an engine cannot run on a host.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, thiserror::Error)]
#[serde(rename_all = "camelCase")]
#[error("{message}")]
pub struct HostSupportError {
    /// The engine.
    pub engine_id: String,
    /// The operation.
    #[serde(serialize_with = "serialize_host_operation")]
    pub operation: HostOperation,
    /// The host's id.
    pub host_id: String,
    /// Capabilities the host lacks.
    pub missing: Vec<String>,
    /// The contract's message.
    pub message: String,
}

impl HostSupportError {
    /// A stable snake_case code for machines.
    pub fn code(&self) -> &'static str {
        "host_unsupported"
    }
}

/// Checks one operation (§5.1–5.2). No requirement, or an empty one, is satisfied.
///
/// # Errors
/// [`HostSupportError`] with the message of §5.2.
pub fn check_host_support(
    engine_id: &str,
    requirements: &HostRequirements,
    operation: HostOperation,
    host: &HostDescriptor,
) -> Result<(), HostSupportError> {
    if engine_id == LEGACY_ENGINE_ID {
        return Ok(());
    }
    let Some(requirement) = requirements.get(&operation) else {
        return Ok(());
    };
    let required = &requirement.required_capabilities;
    let missing: Vec<String> = required
        .iter()
        .filter(|c| !host.capabilities.contains(c))
        .cloned()
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    let capabilities = if host.capabilities.is_empty() {
        "(none)".to_owned()
    } else {
        host.capabilities.join(", ")
    };
    let message = format!(
        "Context engine \"{engine_id}\" cannot run operation \"{}\" on {}. Missing host capabilities: {}. Required capabilities: {}. Host capabilities: {capabilities}.{}",
        operation.as_str(),
        host.label,
        missing.join(", "),
        required.join(", "),
        requirement
            .unsupported_message
            .as_deref()
            .map(|m| format!(" {m}"))
            .unwrap_or_default()
    );
    Err(HostSupportError {
        engine_id: engine_id.to_owned(),
        operation,
        host_id: host.id.clone(),
        missing,
        message,
    })
}

/// Every (operation, host) pair an engine with `requirements` cannot run on, over `hosts`.
pub fn incompatibilities(
    engine_id: &str,
    requirements: &HostRequirements,
    hosts: &[HostDescriptor],
) -> Vec<HostSupportError> {
    let mut out = Vec::new();
    for operation in requirements.keys() {
        for host in hosts {
            if let Err(err) = check_host_support(engine_id, requirements, *operation, host) {
                out.push(err);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::HostRequirement;

    const AGENT_RUN: HostOperation = HostOperation::AgentRun;

    fn reqs(op: HostOperation, caps: &[&str], message: Option<&str>) -> HostRequirements {
        [(
            op,
            HostRequirement {
                required_capabilities: caps.iter().map(|c| (*c).to_owned()).collect(),
                unsupported_message: message.map(str::to_owned),
            },
        )]
        .into_iter()
        .collect()
    }

    #[test]
    fn no_requirements_means_allowed() {
        let host = HostDescriptor::cli_backend("claude-cli", None);
        assert!(check_host_support("x", &HostRequirements::default(), AGENT_RUN, &host).is_ok());
        assert!(check_host_support("x", &reqs(AGENT_RUN, &[], None), AGENT_RUN, &host).is_ok());
    }

    #[test]
    fn assemble_before_prompt_on_a_cli_backend_fails_with_the_contract_message() {
        let host = HostDescriptor::cli_backend("claude-cli", None);
        let err = check_host_support(
            "lossless-claw",
            &reqs(
                AGENT_RUN,
                &["bootstrap", "assemble-before-prompt"],
                Some("Use the embedded runner."),
            ),
            AGENT_RUN,
            &host,
        )
        .unwrap_err();
        assert_eq!(
            err.message,
            "Context engine \"lossless-claw\" cannot run operation \"agent-run\" on CLI backend \"claude-cli\". \
             Missing host capabilities: assemble-before-prompt. Required capabilities: bootstrap, assemble-before-prompt. \
             Host capabilities: bootstrap, after-turn, maintain. Use the embedded runner."
        );
        assert!(check_host_support(
            "lossless-claw",
            &reqs(AGENT_RUN, &["assemble-before-prompt"], None),
            AGENT_RUN,
            &HostDescriptor::embedded()
        )
        .is_ok());
    }

    #[test]
    fn a_harness_without_capabilities_says_none() {
        let host = HostDescriptor::harness("bare", &[]);
        let err = check_host_support("e", &reqs(AGENT_RUN, &["compact"], None), AGENT_RUN, &host)
            .unwrap_err();
        assert!(
            err.message.ends_with("Host capabilities: (none)."),
            "{}",
            err.message
        );
    }
}
