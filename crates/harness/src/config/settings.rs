//! The settings structs: what each table of the configuration holds.

use crate::{EngineKind, Isolation, Limits, Mode, ScriptLanguage, TaskLimits};
pub use harness_tools::{McpAuth, McpServerSettings};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// How approvals are answered when the host installs no bridge of its own.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ApprovalDefault {
    /// Deny (the safe default).
    #[default]
    Deny,
    /// Approve everything.
    Approve,
    /// Ask a person (the CLI asks on its terminal; the library denies).
    Ask,
}

/// `[tools.NAME]`: one tool's own settings.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct ToolSettings {
    /// The tool gives up after this long (ToolExecutionError), however
    /// long the run may still go.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    /// Overrides the tool's own rule: every call needs approval (`true`)
    /// or none does (`false`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub needs_approval: Option<bool>,
    /// Output larger than this as JSON is a ToolExecutionError.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_output_bytes: Option<u64>,
    /// The tool's results arrive from outside ([`Tool::deferred`](crate::Tool::deferred)):
    /// a call suspends a run that may suspend, and fails in any other.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deferred: Option<bool>,
}

/// `[expose]`: what a run may reach.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
#[non_exhaustive]
pub struct Expose {
    /// Tool names; with `packs`, the allowlist. Neither: every tool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools: Option<Vec<String>>,
    /// Pack names.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub packs: Option<Vec<String>>,
    /// `tools.http` on, under the `[http]` policy.
    pub http: bool,
}

/// `[exec]`: how the built-in `exec` tool runs its children.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
#[non_exhaustive]
pub struct ExecSettings {
    /// Confine children (Linux Landlock): writes only under the root.
    pub confine: bool,
    /// Let confined children use TCP.
    pub allow_network: bool,
    /// The host's environment variables children get (`HOME` is always
    /// the root; a configured secret's variable never passes).
    pub env_allow: Vec<String>,
}

impl Default for ExecSettings {
    fn default() -> Self {
        ExecSettings {
            confine: true,
            allow_network: false,
            env_allow: ["PATH", "LANG", "TERM"].map(str::to_owned).to_vec(),
        }
    }
}

#[cfg(feature = "builtin-tools")]
impl ExecSettings {
    /// As the built-in tools take it.
    pub fn policy(&self) -> crate::builtin::ExecPolicy {
        crate::builtin::ExecPolicy::default()
            .with_confine(self.confine)
            .with_allow_network(self.allow_network)
            .with_env_allow(self.env_allow.iter().cloned())
    }
}

#[cfg(feature = "builtin-tools")]
impl Settings {
    /// `exec`'s policy, withholding the variables of the configured
    /// secrets (`[http.secrets.NAME] env`) even where `env_allow` names
    /// them.
    pub fn exec_policy(&self) -> crate::builtin::ExecPolicy {
        let secrets = self.http.secrets.values().map(|s| s.env.clone());
        self.exec.policy().with_env_withheld(secrets)
    }
}

/// `[mcp]`: upstream MCP servers.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
#[non_exhaustive]
pub struct McpSettings {
    /// `[mcp.servers.NAME]`, by name.
    pub servers: BTreeMap<String, McpServerSettings>,
}

/// `[http]`: the egress policy of `tools.http` (see [`crate::http`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
#[non_exhaustive]
pub struct HttpSettings {
    /// Host patterns: `api.example.com`, `*.example.com`, `*`.
    pub allow_hosts: Vec<String>,
    /// URL schemes allowed.
    pub schemes: Vec<String>,
    /// Methods allowed.
    pub methods: Vec<String>,
    /// Response body bytes kept.
    pub max_response_bytes: u64,
    /// The longest a request may take.
    pub timeout_ms: u64,
    /// Redirects followed, each checked again.
    pub max_redirects: u32,
    /// Loopback addresses reachable.
    pub allow_loopback: bool,
    /// Private addresses (RFC 1918, CGNAT, unique-local) reachable.
    pub allow_private: bool,
    /// `[http.secrets.NAME]`: secrets bound to hosts.
    pub secrets: BTreeMap<String, HttpSecret>,
}

impl Default for HttpSettings {
    fn default() -> Self {
        HttpSettings {
            allow_hosts: Vec::new(),
            schemes: vec!["http".into(), "https".into()],
            methods: ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]
                .map(String::from)
                .into(),
            max_response_bytes: 1024 * 1024,
            timeout_ms: 30_000,
            max_redirects: 5,
            allow_loopback: false,
            allow_private: false,
            secrets: BTreeMap::new(),
        }
    }
}

/// `[http.secrets.NAME]`: a secret read from the host's environment,
/// substituted for `{{secret:NAME}}` on requests to `hosts` only. The
/// file names the variable, never the value.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct HttpSecret {
    /// The environment variable holding the value.
    pub env: String,
    /// Host patterns the secret may be sent to.
    pub hosts: Vec<String>,
}

/// `[spawn]`: detached tasks (`tools.spawn`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
#[non_exhaustive]
pub struct SpawnSettings {
    /// `tools.spawn` on.
    pub enabled: bool,
    /// Tasks one run may start.
    pub max_per_run: u32,
    /// Tasks running at once.
    pub max_running: u32,
    /// Longest a task may run.
    pub timeout_ms: u64,
}

impl Default for SpawnSettings {
    fn default() -> Self {
        let t = TaskLimits::default();
        SpawnSettings {
            enabled: false,
            max_per_run: t.max_per_run,
            max_running: t.max_running,
            timeout_ms: t.timeout_ms,
        }
    }
}

/// `[workers]`: the worker processes of `isolation = "process"`, and the
/// engine threads of `isolation = "in_process"`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
#[non_exhaustive]
pub struct Workers {
    /// Worker processes (runs in flight) at most.
    pub max_workers: usize,
    /// Runs a worker serves before it is replaced (0: never).
    pub max_runs_per_worker: u32,
    /// Engine threads in this process (runs in flight) at most, for
    /// `isolation = "in_process"`; more runs queue.
    pub max_threads: usize,
    /// How long after each run an engine thread of `isolation =
    /// "in_process"` keeps itself warm by rehearsing a trivial run about
    /// every 0.8 ms (0: not at all). See `HarnessBuilder::keep_warm`.
    pub keep_warm_ms: u64,
    /// Whether that thread also stays awake between rehearsals (its CPU
    /// does not halt; most of a CPU per window). See
    /// `HarnessBuilder::keep_warm_awake`.
    pub keep_warm_awake: bool,
    /// Whether an engine thread of `isolation = "in_process"` anticipates
    /// runs that come at a steady pace (wakes shortly before the next is
    /// due and waits for it awake). See `HarnessBuilder::anticipate`.
    pub anticipate: bool,
}

impl Default for Workers {
    fn default() -> Self {
        Workers {
            max_workers: 16,
            max_runs_per_worker: 10_000,
            max_threads: harness_core::engine::DEFAULT_MAX_THREADS,
            keep_warm_ms: 0,
            keep_warm_awake: false,
            anticipate: true,
        }
    }
}

/// `[approvals]`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
#[non_exhaustive]
pub struct Approvals {
    /// Who answers when the host installs no bridge.
    pub default: ApprovalDefault,
}

/// The effective settings: what a [`Config`](super::Config) resolves to.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
#[non_exhaustive]
pub struct Settings {
    /// Whether tools run.
    pub mode: Mode,
    /// The engine's name.
    pub engine: String,
    /// Where scripts run; `None`: the engine's default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub isolation: Option<Isolation>,
    /// The scripts' language.
    pub language: ScriptLanguage,
    /// Run a HarnessInternalError once more when nothing it did had effects.
    pub retry_internal_errors: bool,
    /// The run's limits (`isolation` is the root key).
    pub limits: Limits,
    /// What a run may reach.
    pub expose: Expose,
    /// Detached tasks.
    pub spawn: SpawnSettings,
    /// Worker processes.
    pub workers: Workers,
    /// Approvals.
    pub approvals: Approvals,
    /// Per-tool settings.
    pub tools: BTreeMap<String, ToolSettings>,
    /// The egress policy of `tools.http`.
    pub http: HttpSettings,
    /// How `exec` runs its children.
    pub exec: ExecSettings,
    /// Upstream MCP servers.
    pub mcp: McpSettings,
    /// Sessions.
    pub sessions: crate::session::SessionLimits,
    /// Durable runs: continuation keys, the CLI's state directory.
    pub durable: crate::durable::DurableSettings,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            mode: Mode::Enabled,
            engine: EngineKind::default().name().to_owned(),
            isolation: None,
            language: ScriptLanguage::Auto,
            retry_internal_errors: true,
            limits: Limits::default(),
            expose: Expose::default(),
            spawn: SpawnSettings::default(),
            workers: Workers::default(),
            approvals: Approvals::default(),
            tools: BTreeMap::new(),
            http: HttpSettings::default(),
            exec: ExecSettings::default(),
            mcp: McpSettings::default(),
            sessions: crate::session::SessionLimits::default(),
            durable: crate::durable::DurableSettings::default(),
        }
    }
}
