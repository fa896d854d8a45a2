//! Configuration in layers: built-in defaults < the global file < the
//! file's `[providers.NAME]` table < per-turn overrides (CLI flags, or
//! [`Overrides`] in the library). Every effective value knows the layer it
//! came from ([`Config::entries`], `harness config show`).
//!
//! The file is TOML:
//!
//! ```toml
//! mode = "enabled"          # enabled | dry-run | disabled
//! engine = "quickjs"
//! isolation = "in_process"  # or "process"
//!
//! [limits]                  # the snake_case names of harness::Limits
//! timeout_ms = 30000
//!
//! [ceilings]                # root only: the most a provider or an override may set
//! timeout_ms = 60000
//!
//! [expose]                  # what a run may reach
//! tools = ["read_file", "exec"]
//!
//! [tools.exec]              # one tool's own settings
//! timeout_ms = 120000
//! needs_approval = true
//!
//! [providers.fast.limits]   # a provider table holds any section but ceilings
//! timeout_ms = 5000
//! ```
//!
//! Unknown keys are errors that name the key, the table and the file and
//! suggest the closest known key. A value over its ceiling is an error
//! that names the key, the value, the ceiling and the layer that set it:
//! never silently clamped.

use crate::{
    Allowlist, ApprovalBridge, AutoApprove, AutoDeny, EngineKind, HarnessBuilder, Isolation,
    Limits, Mode, ScriptLanguage, TaskLimits, Tool, ToolContext, ToolError, ToolRegistry,
};
use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Why a configuration could not be loaded or applied.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read {path}: {message}")]
    Read {
        /// The file.
        path: String,
        /// The OS's words.
        message: String,
    },
    /// The file is not valid TOML.
    #[error("{path} is not valid TOML: {message}")]
    Syntax {
        /// The file.
        path: String,
        /// The parser's words, with the line.
        message: String,
    },
    /// A key no section has.
    #[error("unknown key `{key}` in {table} of {source_name}{}", suggestion.as_ref().map(|s| format!("; did you mean `{s}`?")).unwrap_or_default())]
    UnknownKey {
        /// The key as written.
        key: String,
        /// Where: `[limits]`, `[providers.fast.limits]`, or `the root table`.
        table: String,
        /// The file, or `overrides`.
        source_name: String,
        /// The closest known key, if one is close.
        suggestion: Option<String>,
    },
    /// A value of the wrong type or out of its domain.
    #[error("{key} in {source_name}: {message}")]
    Invalid {
        /// The key's path (`limits.timeout_ms`).
        key: String,
        /// The file, or the layer.
        source_name: String,
        /// What is wrong.
        message: String,
    },
    /// A value over its ceiling.
    #[error("{key} = {asked} (set by {layer}) is over its ceiling of {ceiling} (set in [ceilings] of the global file)")]
    OverCeiling {
        /// The key's path (`limits.timeout_ms`).
        key: String,
        /// The value asked for.
        asked: u64,
        /// The ceiling.
        ceiling: u64,
        /// The layer that asked (`provider:fast`, `override`, …).
        layer: String,
    },
    /// `--provider NAME` names no `[providers.NAME]` table.
    #[error("no provider `{name}` in the configuration (known: {known})")]
    UnknownProvider {
        /// The name asked for.
        name: String,
        /// The providers the file defines.
        known: String,
    },
}

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

/// `[mcp.servers.NAME]`: an upstream MCP server whose tools scripts call
/// as `tools.mcp.NAME.TOOL` (see [`crate::mcp`]).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct McpServerSettings {
    /// The program to start (stdio transport).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    /// Its arguments.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<String>,
    /// Variables added to its environment.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    /// The server's URL (streamable HTTP), instead of `command`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// The upstream tools scripts may call (default: all).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools: Option<Vec<String>>,
    /// Upstream tools whose calls need approval; `"*"`: every one.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub needs_approval: Vec<String>,
    /// How long one call may take (default: the run's deadline).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
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

/// The effective settings: what a [`Config`] resolves to.
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
        }
    }
}

/// One effective value and the layer it came from.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[non_exhaustive]
pub struct Entry {
    /// The key's path: `limits.timeout_ms`, `tools.exec.timeout_ms`.
    pub key: String,
    /// Its value.
    pub value: Value,
    /// `default`, `global`, `provider:NAME` or `override`.
    pub layer: String,
}

/// Per-turn overrides: the last layer, checked against the ceilings.
///
/// # Examples
/// ```
/// use harness::config::{Config, Overrides};
/// let cfg = Config::from_toml_str("[ceilings]\ntimeout_ms = 60000\n", "harness.toml").unwrap();
/// let ok = cfg.with_overrides(&Overrides::new().set("limits.timeout_ms", 2000).unwrap()).unwrap();
/// assert_eq!(ok.settings().limits.timeout_ms, 2000);
/// let err = cfg.with_overrides(&Overrides::new().set("limits.timeout_ms", 100_000).unwrap()).unwrap_err();
/// assert!(err.to_string().contains("60000"));
/// ```
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Overrides {
    values: Map<String, Value>,
}

impl Overrides {
    /// No overrides.
    pub fn new() -> Self {
        Overrides::default()
    }

    /// Sets `key` (a path: `limits.timeout_ms`, `mode`, `tools.exec.timeout_ms`).
    pub fn set(mut self, key: &str, value: impl Into<Value>) -> Result<Self, ConfigError> {
        let parts: Vec<&str> = key.split('.').collect();
        let mut table = Map::new();
        insert_path(&mut table, &parts, value.into());
        validate_layer(&table, "the overrides", "overrides")?;
        merge_into(&mut self.values, table);
        Ok(self)
    }

    /// Whether nothing is overridden.
    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }
}

/// A loaded configuration: its layers, the provider chosen, the ceilings.
/// Resolve it with [`Config::settings`]; build a harness with
/// [`Config::builder`].
#[derive(Debug, Clone, Default)]
pub struct Config {
    source_name: String,
    global: Map<String, Value>,
    providers: BTreeMap<String, Map<String, Value>>,
    provider: Option<String>,
    overrides: Map<String, Value>,
    ceilings: BTreeMap<String, u64>,
    settings: Settings,
    entries: Vec<Entry>,
}

impl Config {
    /// Built-in defaults only.
    pub fn defaults() -> Self {
        let mut c = Config {
            source_name: "(defaults)".into(),
            ..Config::default()
        };
        // The defaults always resolve; if they did not, the settings stay
        // `Settings::default()` and `entries` empty.
        let _ = c.resolve();
        c
    }

    /// Loads a TOML file.
    pub fn load(path: impl AsRef<Path>) -> Result<Self, ConfigError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|e| ConfigError::Read {
            path: path.display().to_string(),
            message: e.to_string(),
        })?;
        Self::from_toml_str(&text, &path.display().to_string())
    }

    /// Parses TOML text; `source_name` names it in errors.
    pub fn from_toml_str(text: &str, source_name: &str) -> Result<Self, ConfigError> {
        let table: toml::Table = toml::from_str(text).map_err(|e| ConfigError::Syntax {
            path: source_name.to_owned(),
            message: e.to_string(),
        })?;
        let mut root = match serde_json::to_value(table) {
            Ok(Value::Object(m)) => m,
            _ => Map::new(),
        };
        let ceilings = root.remove("ceilings");
        let providers = root.remove("providers");
        validate_layer(&root, "the root table", source_name)?;
        let mut cfg = Config {
            source_name: source_name.to_owned(),
            global: root,
            ..Config::default()
        };
        if let Some(c) = ceilings {
            cfg.ceilings = parse_ceilings(&c, source_name)?;
        }
        if let Some(p) = providers {
            let Value::Object(p) = p else {
                return Err(invalid(
                    "providers",
                    source_name,
                    "must be a table of tables",
                ));
            };
            for (name, table) in p {
                let Value::Object(table) = table else {
                    return Err(invalid(
                        &format!("providers.{name}"),
                        source_name,
                        "must be a table",
                    ));
                };
                for root_only in ["ceilings", "providers"] {
                    if table.contains_key(root_only) {
                        return Err(invalid(
                            &format!("providers.{name}.{root_only}"),
                            source_name,
                            "is allowed at the root only: a provider may not raise a ceiling",
                        ));
                    }
                }
                validate_layer(&table, &format!("[providers.{name}]"), source_name)?;
                cfg.providers.insert(name, table);
            }
        }
        cfg.resolve()?;
        Ok(cfg)
    }

    /// The same configuration with `[providers.NAME]` applied over the
    /// global table.
    pub fn with_provider(&self, name: &str) -> Result<Self, ConfigError> {
        if !self.providers.contains_key(name) {
            let known: Vec<&str> = self.providers.keys().map(String::as_str).collect();
            return Err(ConfigError::UnknownProvider {
                name: name.to_owned(),
                known: if known.is_empty() {
                    "none".into()
                } else {
                    known.join(", ")
                },
            });
        }
        let mut c = self.clone();
        c.provider = Some(name.to_owned());
        c.resolve()?;
        Ok(c)
    }

    /// The same configuration with per-turn overrides on top, checked
    /// against the ceilings.
    pub fn with_overrides(&self, overrides: &Overrides) -> Result<Self, ConfigError> {
        let mut c = self.clone();
        merge_into(&mut c.overrides, overrides.values.clone());
        c.resolve()?;
        Ok(c)
    }

    /// The provider applied, if any.
    pub fn provider(&self) -> Option<&str> {
        self.provider.as_deref()
    }

    /// The providers the file defines.
    pub fn providers(&self) -> impl Iterator<Item = &str> {
        self.providers.keys().map(String::as_str)
    }

    /// The ceilings (`[ceilings]`), by limit name.
    pub fn ceilings(&self) -> &BTreeMap<String, u64> {
        &self.ceilings
    }

    /// The effective settings.
    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// Every effective value with the layer it came from, by key.
    pub fn entries(&self) -> &[Entry] {
        &self.entries
    }

    /// The layers in order, lowest first, with their names.
    fn layers(&self) -> Vec<(String, &Map<String, Value>)> {
        let mut v = vec![("global".to_owned(), &self.global)];
        if let Some(p) = &self.provider {
            if let Some(t) = self.providers.get(p) {
                v.push((format!("provider:{p}"), t));
            }
        }
        v.push(("override".to_owned(), &self.overrides));
        v
    }

    /// Merges the layers, checks the ceilings, and types the result.
    fn resolve(&mut self) -> Result<(), ConfigError> {
        let defaults = serde_json::to_value(Settings::default()).unwrap_or_default();
        let mut flat: BTreeMap<String, (Value, String)> = BTreeMap::new();
        flatten("", &defaults, &mut |k, v| {
            // `isolation` is a root key; Limits carries its own copy.
            if k != "limits.isolation" {
                flat.insert(k, (v, "default".to_owned()));
            }
        });
        for (layer, table) in self.layers() {
            flatten("", &Value::Object(table.clone()), &mut |k, v| {
                flat.insert(k, (v, layer.clone()));
            });
        }
        for (key, (value, layer)) in &flat {
            let Some(limit) = key.strip_prefix("limits.") else {
                continue;
            };
            let (Some(ceiling), Some(asked)) = (self.ceilings.get(limit), value.as_u64()) else {
                continue;
            };
            if asked > *ceiling {
                return Err(ConfigError::OverCeiling {
                    key: key.clone(),
                    asked,
                    ceiling: *ceiling,
                    layer: layer.clone(),
                });
            }
        }
        let mut merged = Map::new();
        for (key, (value, _)) in &flat {
            let parts: Vec<&str> = key.split('.').collect();
            insert_path(&mut merged, &parts, value.clone());
        }
        let settings: Settings =
            serde_json::from_value(Value::Object(merged)).map_err(|e| ConfigError::Invalid {
                key: "(a value)".into(),
                source_name: self.source_name.clone(),
                message: e.to_string(),
            })?;
        // An upstream MCP server's environment often holds tokens: shown
        // by name only (the settings keep the values).
        self.entries = flat
            .into_iter()
            .map(|(key, (value, layer))| {
                let secret = key.starts_with("mcp.servers.") && key.contains(".env.");
                let value = if secret {
                    Value::from("<redacted>")
                } else {
                    value
                };
                Entry { key, value, layer }
            })
            .collect();
        self.settings = settings;
        Ok(())
    }

    /// A harness builder set up from the effective settings: engine,
    /// isolation, mode, language, limits, allowlist, spawn, worker pool,
    /// default approvals, retries, and the per-tool settings (applied to
    /// the registry given to [`HarnessBuilder::tools`] when it is built).
    pub fn builder(&self) -> Result<HarnessBuilder, ConfigError> {
        let s = &self.settings;
        let engine: EngineKind = s.engine.parse().map_err(|e: crate::UnknownEngine| {
            invalid("engine", &self.source_name, &e.to_string())
        })?;
        let mut b = crate::Harness::builder()
            .engine(engine)
            .mode(s.mode)
            .language(s.language)
            .limits(s.limits.clone().with_isolation(s.isolation))
            .retry_internal_errors(s.retry_internal_errors);
        let names: Vec<String> = s
            .expose
            .tools
            .iter()
            .flatten()
            .chain(s.expose.packs.iter().flatten())
            .cloned()
            .collect();
        if s.expose.tools.is_some() || s.expose.packs.is_some() {
            b = b.allow(Allowlist::only(names));
        }
        if s.spawn.enabled {
            b = b.enable_spawn(
                TaskLimits::default()
                    .with_max_per_run(s.spawn.max_per_run)
                    .with_max_running(s.spawn.max_running)
                    .with_timeout_ms(s.spawn.timeout_ms),
            );
        }
        if s.expose.http {
            #[cfg(feature = "http")]
            {
                b = b.http(self.http_policy()?);
            }
            #[cfg(not(feature = "http"))]
            return Err(invalid(
                "expose.http",
                &self.source_name,
                "this build of harness has no `http` feature",
            ));
        }
        match s.approvals.default {
            ApprovalDefault::Approve => b = b.approvals(Arc::new(AutoApprove)),
            ApprovalDefault::Deny | ApprovalDefault::Ask => {
                let bridge: Arc<dyn ApprovalBridge> = Arc::new(AutoDeny::with_reason(
                    "denied by the configuration (approvals.default)",
                ));
                b = b.approvals(bridge);
            }
        }
        b = b.workers(s.workers.max_workers, s.workers.max_runs_per_worker);
        if s.workers.max_threads != harness_core::engine::DEFAULT_MAX_THREADS {
            b = b.threads(s.workers.max_threads);
        }
        if s.workers.keep_warm_ms > 0 {
            b = b.keep_warm(std::time::Duration::from_millis(s.workers.keep_warm_ms));
        }
        if s.workers.keep_warm_awake {
            b = b.keep_warm_awake(true);
        }
        if !s.workers.anticipate {
            b = b.anticipate(false);
        }
        b = b.tool_settings(s.tools.clone());
        Ok(b)
    }
}

#[cfg(feature = "http")]
impl Config {
    /// The `[http]` table as an egress policy; each secret's value read
    /// from the environment variable it names (missing: an error).
    pub fn http_policy(&self) -> Result<crate::http::HttpPolicy, ConfigError> {
        let h = &self.settings.http;
        let mut p = crate::http::HttpPolicy::new()
            .schemes(&h.schemes)
            .methods(&h.methods)
            .max_response_bytes(h.max_response_bytes)
            .timeout_ms(h.timeout_ms)
            .max_redirects(h.max_redirects)
            .allow_loopback(h.allow_loopback)
            .allow_private(h.allow_private);
        for host in &h.allow_hosts {
            p = p.allow_host(host);
        }
        for (name, secret) in &h.secrets {
            let value = std::env::var(&secret.env).map_err(|_| {
                invalid(
                    &format!("http.secrets.{name}.env"),
                    &self.source_name,
                    &format!("environment variable {} is not set", secret.env),
                )
            })?;
            p = p.secret(name, value, &secret.hosts);
        }
        Ok(p)
    }
}

fn invalid(key: &str, source: &str, message: &str) -> ConfigError {
    ConfigError::Invalid {
        key: key.to_owned(),
        source_name: source.to_owned(),
        message: message.to_owned(),
    }
}

/// The limit names, from `Limits` itself (so a new limit is a key at once).
fn limit_keys() -> Vec<String> {
    let mut keys: Vec<String> = match serde_json::to_value(Limits::default()) {
        Ok(Value::Object(m)) => m.keys().cloned().collect(),
        _ => Vec::new(),
    };
    keys.retain(|k| k != "isolation");
    for optional in ["fuel", "realm"] {
        if !keys.iter().any(|k| k == optional) {
            keys.push(optional.into());
        }
    }
    keys
}

const ROOT_KEYS: &[&str] = &[
    "mode",
    "engine",
    "isolation",
    "language",
    "retry_internal_errors",
    "limits",
    "expose",
    "spawn",
    "workers",
    "approvals",
    "tools",
    "http",
    "exec",
    "mcp",
];
const MCP_SERVER_KEYS: &[&str] = &[
    "command",
    "args",
    "env",
    "url",
    "tools",
    "needs_approval",
    "timeout_ms",
];
const EXEC_KEYS: &[&str] = &["confine", "allow_network", "env_allow"];
const EXPOSE_KEYS: &[&str] = &["tools", "packs", "http"];
const HTTP_KEYS: &[&str] = &[
    "allow_hosts",
    "schemes",
    "methods",
    "max_response_bytes",
    "timeout_ms",
    "max_redirects",
    "allow_loopback",
    "allow_private",
    "secrets",
];
const SECRET_KEYS: &[&str] = &["env", "hosts"];
const SPAWN_KEYS: &[&str] = &["enabled", "max_per_run", "max_running", "timeout_ms"];
const WORKER_KEYS: &[&str] = &[
    "max_workers",
    "max_runs_per_worker",
    "max_threads",
    "keep_warm_ms",
    "keep_warm_awake",
    "anticipate",
];
const APPROVAL_KEYS: &[&str] = &["default"];
const TOOL_KEYS: &[&str] = &["timeout_ms", "needs_approval", "max_output_bytes"];

fn unknown(key: &str, table: &str, source: &str, known: &[String]) -> ConfigError {
    let suggestion = harness_core::tool::closest_name(key, known).map(str::to_owned);
    ConfigError::UnknownKey {
        key: key.to_owned(),
        table: table.to_owned(),
        source_name: source.to_owned(),
        suggestion,
    }
}

fn check_keys(
    table: &Map<String, Value>,
    known: &[String],
    name: &str,
    source: &str,
) -> Result<(), ConfigError> {
    match table.keys().find(|k| !known.contains(k)) {
        Some(k) => Err(unknown(k, name, source, known)),
        None => Ok(()),
    }
}

fn sub_table<'a>(
    table: &'a Map<String, Value>,
    key: &str,
    name: &str,
    source: &str,
) -> Result<Option<&'a Map<String, Value>>, ConfigError> {
    match table.get(key) {
        None => Ok(None),
        Some(Value::Object(m)) => Ok(Some(m)),
        Some(_) => Err(invalid(key, source, &format!("{name} must be a table"))),
    }
}

/// Checks every key of one layer (the root table, a provider table, or
/// overrides) against the schema.
fn validate_layer(table: &Map<String, Value>, name: &str, source: &str) -> Result<(), ConfigError> {
    let strs = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let prefix = name
        .strip_prefix('[')
        .and_then(|n| n.strip_suffix(']'))
        .map(|n| format!("{n}."))
        .unwrap_or_default();
    let mut root_known = strs(ROOT_KEYS);
    if name == "the root table" {
        root_known.extend(["ceilings".to_owned(), "providers".to_owned()]);
    }
    check_keys(table, &root_known, name, source)?;
    let sections: [(&str, Vec<String>); 8] = [
        ("limits", limit_keys()),
        ("mcp", vec!["servers".to_owned()]),
        ("exec", strs(EXEC_KEYS)),
        ("http", strs(HTTP_KEYS)),
        ("expose", strs(EXPOSE_KEYS)),
        ("spawn", strs(SPAWN_KEYS)),
        ("workers", strs(WORKER_KEYS)),
        ("approvals", strs(APPROVAL_KEYS)),
    ];
    for (key, known) in sections {
        let section = format!("[{prefix}{key}]");
        if let Some(t) = sub_table(table, key, &section, source)? {
            check_keys(t, &known, &section, source)?;
        }
    }
    if let Some(http) = sub_table(table, "http", &format!("[{prefix}http]"), source)? {
        let name = format!("[{prefix}http.secrets]");
        if let Some(secrets) = sub_table(http, "secrets", &name, source)? {
            for (secret, t) in secrets {
                let section = format!("[{prefix}http.secrets.{secret}]");
                let Value::Object(t) = t else {
                    return Err(invalid(&section, source, "must be a table"));
                };
                check_keys(t, &strs(SECRET_KEYS), &section, source)?;
            }
        }
    }
    if let Some(mcp) = sub_table(table, "mcp", &format!("[{prefix}mcp]"), source)? {
        let name = format!("[{prefix}mcp.servers]");
        if let Some(servers) = sub_table(mcp, "servers", &name, source)? {
            for (server, t) in servers {
                let section = format!("[{prefix}mcp.servers.{server}]");
                let Value::Object(t) = t else {
                    return Err(invalid(&section, source, "must be a table"));
                };
                check_keys(t, &strs(MCP_SERVER_KEYS), &section, source)?;
                let ident = server
                    .chars()
                    .next()
                    .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
                    && server
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || c == '_');
                if !ident {
                    return Err(invalid(
                        &section,
                        source,
                        "a server name must be an identifier (letters, digits, _): scripts call tools.mcp.NAME",
                    ));
                }
                if t.contains_key("command") == t.contains_key("url") {
                    return Err(invalid(&section, source, "give either `command` or `url`"));
                }
            }
        }
    }
    if let Some(tools) = sub_table(table, "tools", &format!("[{prefix}tools]"), source)? {
        for (tool, t) in tools {
            let section = format!("[{prefix}tools.{tool}]");
            let Value::Object(t) = t else {
                return Err(invalid(&section, source, "must be a table"));
            };
            check_keys(t, &strs(TOOL_KEYS), &section, source)?;
        }
    }
    // Types: the layer alone must deserialise (missing keys default).
    let mut probe = serde_json::to_value(Settings::default()).unwrap_or_default();
    if let Value::Object(p) = &mut probe {
        merge_into(p, table.clone());
    }
    serde_json::from_value::<Settings>(probe).map_err(|e| invalid(name, source, &e.to_string()))?;
    Ok(())
}

fn parse_ceilings(v: &Value, source: &str) -> Result<BTreeMap<String, u64>, ConfigError> {
    let Value::Object(m) = v else {
        return Err(invalid("ceilings", source, "must be a table"));
    };
    let known = limit_keys();
    check_keys(m, &known, "[ceilings]", source)?;
    m.iter()
        .map(|(k, v)| match v.as_u64() {
            Some(n) => Ok((k.clone(), n)),
            None => Err(invalid(
                &format!("ceilings.{k}"),
                source,
                "must be a non-negative integer",
            )),
        })
        .collect()
}

/// Calls `f(path, value)` for every leaf; objects are walked, arrays and
/// scalars are leaves.
fn flatten(prefix: &str, v: &Value, f: &mut impl FnMut(String, Value)) {
    match v {
        Value::Object(m) if !m.is_empty() || prefix.is_empty() => {
            for (k, v) in m {
                let p = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                flatten(&p, v, f);
            }
        }
        Value::Object(_) => {}
        other => f(prefix.to_owned(), other.clone()),
    }
}

fn insert_path(m: &mut Map<String, Value>, parts: &[&str], v: Value) {
    match parts {
        [] => {}
        [last] => {
            m.insert((*last).to_owned(), v);
        }
        [first, rest @ ..] => {
            let e = m
                .entry((*first).to_owned())
                .or_insert_with(|| Value::Object(Map::new()));
            if !e.is_object() {
                *e = Value::Object(Map::new());
            }
            if let Value::Object(inner) = e {
                insert_path(inner, rest, v);
            }
        }
    }
}

fn merge_into(base: &mut Map<String, Value>, over: Map<String, Value>) {
    for (k, v) in over {
        match (base.get_mut(&k), v) {
            (Some(Value::Object(b)), Value::Object(o)) => merge_into(b, o),
            (_, v) => {
                base.insert(k, v);
            }
        }
    }
}

impl fmt::Display for Entry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} = {}  # {}", self.key, self.value, self.layer)
    }
}

/// A tool with its `[tools.NAME]` settings applied: its own timeout, an
/// approval rule, an output cap.
pub(crate) struct Configured {
    pub(crate) inner: Arc<dyn Tool>,
    pub(crate) settings: ToolSettings,
}

#[async_trait]
impl Tool for Configured {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn description(&self) -> &str {
        self.inner.description()
    }
    fn schema(&self) -> &Value {
        self.inner.schema()
    }
    fn output_schema(&self) -> Option<&Value> {
        self.inner.output_schema()
    }
    fn requires_approval(&self, args: &Value) -> bool {
        self.settings
            .needs_approval
            .unwrap_or_else(|| self.inner.requires_approval(args))
    }
    fn may_require_approval(&self) -> bool {
        self.settings
            .needs_approval
            .unwrap_or_else(|| self.inner.may_require_approval())
    }
    async fn execute(&self, args: Value, mut ctx: ToolContext) -> Result<Value, ToolError> {
        let name = self.inner.name().to_owned();
        let out = match self.settings.timeout_ms {
            Some(ms) => {
                let limit = Duration::from_millis(ms);
                ctx.deadline = ctx.deadline.min(Instant::now() + limit);
                match tokio::time::timeout(limit, self.inner.execute(args, ctx)).await {
                    Ok(r) => r,
                    Err(_) => Err(ToolError::new(format!(
                        "{name} timed out after {ms} ms (tools.{name}.timeout_ms)"
                    ))),
                }
            }
            None => self.inner.execute(args, ctx).await,
        }?;
        if let Some(max) = self.settings.max_output_bytes {
            let len = serde_json::to_string(&out).map(|s| s.len()).unwrap_or(0) as u64;
            if len > max {
                return Err(ToolError::new(format!(
                    "{name} returned {len} bytes of JSON; tools.{name}.max_output_bytes is {max}"
                )));
            }
        }
        Ok(out)
    }
}

/// `registry` with each tool named in `settings` wrapped in its settings.
pub(crate) fn apply_tool_settings(
    registry: &ToolRegistry,
    settings: &BTreeMap<String, ToolSettings>,
) -> Result<ToolRegistry, crate::RegistryError> {
    let mut out = ToolRegistry::new();
    for name in registry.names() {
        let Some(tool) = registry.get(name) else {
            continue;
        };
        let tool = match settings.get(name) {
            Some(s) => Arc::new(Configured {
                inner: tool.clone(),
                settings: s.clone(),
            }) as Arc<dyn Tool>,
            None => tool.clone(),
        };
        if harness_core::tool::HARNESS_TOOL_NAMES.contains(&name) {
            out.register_harness_tool(tool)?;
        } else {
            out.register_arc(tool)?;
        }
    }
    for pack in registry.pack_names() {
        if let Some(members) = registry.pack(pack) {
            out.define_pack(pack, members.iter().cloned())?;
        }
    }
    Ok(out)
}

/// Where `harness config show` says a file came from.
pub fn describe_source(path: Option<&PathBuf>) -> String {
    path.map(|p| p.display().to_string())
        .unwrap_or_else(|| "(no file: built-in defaults)".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    const ISSUE_FILE: &str = "[limits]\ntimeout_ms = 30000\n\n[ceilings]\ntimeout_ms = 60000\n\n[providers.fast.limits]\ntimeout_ms = 5000\n";

    fn entry<'a>(c: &'a Config, key: &str) -> &'a Entry {
        c.entries().iter().find(|e| e.key == key).expect(key)
    }

    #[test]
    fn layers_stack_and_say_where_each_value_came_from() {
        let c = Config::from_toml_str(ISSUE_FILE, "f.toml").unwrap();
        assert_eq!(entry(&c, "limits.timeout_ms").layer, "global");
        assert_eq!(entry(&c, "limits.memory_bytes").layer, "default");
        let fast = c.with_provider("fast").unwrap();
        assert_eq!(fast.settings().limits.timeout_ms, 5000);
        assert_eq!(entry(&fast, "limits.timeout_ms").layer, "provider:fast");
        let turn = fast
            .with_overrides(&Overrides::new().set("limits.timeout_ms", 2000).unwrap())
            .unwrap();
        assert_eq!(turn.settings().limits.timeout_ms, 2000);
        assert_eq!(entry(&turn, "limits.timeout_ms").layer, "override");
        assert!(c.entries().iter().all(|e| e.key != "limits.isolation"));
    }

    #[test]
    fn ceilings_refuse_and_never_clamp() {
        let c = Config::from_toml_str(ISSUE_FILE, "f.toml").unwrap();
        let e = c
            .with_overrides(&Overrides::new().set("limits.timeout_ms", 100_000).unwrap())
            .unwrap_err();
        assert_eq!(
            e,
            ConfigError::OverCeiling {
                key: "limits.timeout_ms".into(),
                asked: 100_000,
                ceiling: 60_000,
                layer: "override".into()
            }
        );
        let e = Config::from_toml_str(
            "[ceilings]\ntimeout_ms = 10\n[providers.p.limits]\ntimeout_ms = 5\n",
            "f.toml",
        )
        .unwrap_err();
        // The default (30000) is over the ceiling too: said, not clamped.
        assert!(
            matches!(e, ConfigError::OverCeiling { ref layer, .. } if layer == "default"),
            "{e}"
        );
        let e = Config::from_toml_str("[providers.p.ceilings]\ntimeout_ms = 1\n", "f.toml")
            .unwrap_err();
        assert!(e.to_string().contains("root only"), "{e}");
    }

    #[test]
    fn unknown_keys_name_the_table_and_suggest() {
        let e = Config::from_toml_str("[limits]\ntimout_ms = 1\n", "f.toml").unwrap_err();
        assert_eq!(
            e.to_string(),
            "unknown key `timout_ms` in [limits] of f.toml; did you mean `timeout_ms`?"
        );
        let e =
            Config::from_toml_str("[providers.x.spawn]\nenabeld = true\n", "f.toml").unwrap_err();
        assert!(
            e.to_string().contains("[providers.x.spawn]") && e.to_string().contains("`enabled`"),
            "{e}"
        );
        let e = Config::from_toml_str("modes = 'enabled'\n", "f.toml").unwrap_err();
        assert!(e.to_string().contains("`mode`"), "{e}");
        let e = Config::from_toml_str("[tools.exec]\ntimeout = 1\n", "f.toml").unwrap_err();
        assert!(e.to_string().contains("[tools.exec]"), "{e}");
        let e = Config::from_toml_str("[limits]\ntimeout_ms = 'soon'\n", "f.toml").unwrap_err();
        assert!(matches!(e, ConfigError::Invalid { .. }), "{e}");
        assert!(Overrides::new().set("limits.nope", 1).is_err());
        assert!(Config::from_toml_str("[limits\n", "f.toml").is_err());
    }

    #[test]
    fn mcp_servers_are_checked_and_their_env_is_not_shown() {
        let c = Config::from_toml_str(
            "[mcp.servers.gh]\ncommand = \"gh-mcp\"\nenv = { TOKEN = \"t0ken\" }\n",
            "f.toml",
        )
        .unwrap();
        assert_eq!(c.settings().mcp.servers["gh"].env["TOKEN"], "t0ken");
        let shown = c
            .entries()
            .iter()
            .find(|e| e.key == "mcp.servers.gh.env.TOKEN")
            .unwrap();
        assert_eq!(shown.value, "<redacted>");
        for (bad, why) in [
            (
                "[mcp.servers.gh]\ncommand = \"x\"\nurl = \"http://a\"\n",
                "either",
            ),
            ("[mcp.servers.gh]\nargs = []\n", "either"),
            ("[mcp.servers.\"my-gh\"]\ncommand = \"x\"\n", "identifier"),
            (
                "[mcp.servers.gh]\ncommand = \"x\"\ncomand = \"y\"\n",
                "`command`",
            ),
        ] {
            let e = Config::from_toml_str(bad, "f.toml")
                .unwrap_err()
                .to_string();
            assert!(e.contains(why), "{bad}: {e}");
        }
    }

    #[test]
    fn the_example_file_loads_with_every_provider() {
        let c = Config::load(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../harness.example.toml"
        ))
        .unwrap();
        for p in c.providers().map(str::to_owned).collect::<Vec<_>>() {
            let with = c.with_provider(&p).unwrap();
            with.builder().unwrap();
        }
        assert_eq!(c.settings().tools["exec"].timeout_ms, Some(120_000));
        assert_eq!(
            c.with_provider("fast")
                .unwrap()
                .settings()
                .limits
                .timeout_ms,
            5000
        );
    }
}
