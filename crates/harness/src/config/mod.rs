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

mod keys;
mod settings;
#[cfg(test)]
mod tests;
mod tools;

use crate::{
    Allowlist, ApprovalBridge, AutoApprove, AutoDeny, EngineKind, HarnessBuilder, TaskLimits,
};
use keys::{invalid, parse_ceilings, validate_layer};
use serde::Serialize;
use serde_json::{Map, Value};
pub use settings::*;
use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
pub(crate) use tools::apply_tool_settings;

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

    /// What [`HarnessBuilder::suspend`] takes, from `[durable]`: the keys
    /// `keys_env` names (or, none named, the key file in the state
    /// directory, made on first use), a ledger of used continuations in
    /// `STATE_DIR/used`, and `max_suspended_ms`.
    pub fn durable_runs(
        &self,
    ) -> Result<crate::durable::DurableRuns, crate::durable::DurableError> {
        use crate::durable::{DirLedger, DurableRuns};
        let d = &self.settings.durable;
        let mut runs = DurableRuns::new(d.keys()?).with_max_suspended_ms(d.max_suspended_ms);
        if let Some(dir) = d.state_dir() {
            runs = runs.with_ledger(std::sync::Arc::new(DirLedger::new(dir.join("used"))));
        }
        Ok(runs)
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
        b = b.sessions(s.sessions.clone());
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

pub(super) fn merge_into(base: &mut Map<String, Value>, over: Map<String, Value>) {
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

/// Where `harness config show` says a file came from.
pub fn describe_source(path: Option<&PathBuf>) -> String {
    path.map(|p| p.display().to_string())
        .unwrap_or_else(|| "(no file: built-in defaults)".into())
}
