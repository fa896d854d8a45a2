//! Resource limits for one script run, with the defaults from DESIGN.md.

use serde::{Deserialize, Serialize};
use std::time::Duration;

const KIB: u64 = 1024;
const MIB: u64 = 1024 * KIB;

/// Where a script runs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Isolation {
    /// On an engine thread of the host process: fastest; stops rely on the
    /// engine's own interrupt and memory limit.
    #[default]
    InProcess,
    /// In a worker process the host kills (SIGKILL) on deadline or cancel,
    /// capped with rlimits: the backstop for engines that cannot stop
    /// themselves, and a crash boundary for every engine.
    Process,
}

impl Isolation {
    /// The name in configuration and reports: `in_process` or `process`.
    pub fn as_str(self) -> &'static str {
        match self {
            Isolation::InProcess => "in_process",
            Isolation::Process => "process",
        }
    }
}

impl std::fmt::Display for Isolation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for Isolation {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "in_process" | "in-process" => Ok(Isolation::InProcess),
            "process" => Ok(Isolation::Process),
            other => Err(format!(
                "unknown isolation {other:?}: expected in_process or process"
            )),
        }
    }
}

/// Which context a run gets, as to the built-ins (the intrinsics: `Array`,
/// `Object.prototype`, `Promise`, …). See docs/security.md, "Private
/// realms".
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Realm {
    /// The engine's kept hardened context, whose built-ins are deeply
    /// frozen and shared by the runs one after another: the fast path. A
    /// script that writes to a built-in gets a `TypeError`.
    #[default]
    Shared,
    /// A context of the run's own, hardened except that its built-ins are
    /// not frozen, and dropped when the run ends: the script may change a
    /// built-in (a polyfill, a patched prototype) and no other run sees
    /// it. Slower: the context is made for the run. Every engine makes
    /// one (WASI: the guest's `harness_private`; a guest built before it
    /// runs the script in the shared context).
    Private,
}

impl Realm {
    /// The name in configuration: `shared` or `private`.
    pub fn as_str(self) -> &'static str {
        match self {
            Realm::Shared => "shared",
            Realm::Private => "private",
        }
    }
}

impl std::fmt::Display for Realm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for Realm {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "shared" => Ok(Realm::Shared),
            "private" => Ok(Realm::Private),
            other => Err(format!(
                "unknown realm {other:?}: expected shared or private"
            )),
        }
    }
}

/// Every limit that applies to one script run. All are configurable; the
/// defaults are the contract in DESIGN.md. Build with
/// `Limits::default().with_timeout_ms(5_000)…` (or set fields on a value):
/// new limits are added without breaking callers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
#[serde(default)]
pub struct Limits {
    /// Wall-clock time for the whole run, tool calls included.
    pub timeout_ms: u64,
    /// Engine heap cap.
    pub memory_bytes: u64,
    /// Engine stack cap (JS recursion).
    pub stack_bytes: u64,
    /// Largest accepted script source.
    pub max_source_bytes: u64,
    /// Largest accepted return value, as JSON.
    pub max_return_bytes: u64,
    /// Tool calls per script.
    pub max_tool_calls: u32,
    /// Tool calls running at once; further calls queue.
    pub max_concurrent_tool_calls: u32,
    /// Tool calls waiting for a concurrency slot; one more is a ConcurrencyLimitError.
    pub max_queued_tool_calls: u32,
    /// Console lines kept per run.
    pub max_console_lines: u32,
    /// Console lines accepted per second.
    pub console_lines_per_second: u32,
    /// Longest console line kept; longer lines are cut with a marker.
    pub max_console_line_bytes: u64,
    /// Progress events kept per run.
    pub max_progress_events: u32,
    /// Minimum spacing of progress events.
    pub progress_interval_ms: u64,
    /// Longest string in a tool's output; longer strings are cut with a marker.
    pub max_tool_output_string_bytes: u64,
    /// How long an approval may take before ApprovalTimeoutError.
    pub approval_timeout_ms: u64,
    /// Grace given to cancelled tool calls before they count as detached.
    pub orphan_grace_ms: u64,
    /// Where the script runs; `None` takes the engine's default (QuickJS:
    /// in_process, Boa: process). Read by the `harness` facade when it
    /// picks the adapter; an adapter runs where it is.
    pub isolation: Option<Isolation>,
    /// Compute budget in fuel units (wasm instructions, roughly), for
    /// engines that count fuel (WASI-QuickJS); `None` is unlimited. Other
    /// engines ignore it: the deadline bounds their CPU time.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fuel: Option<u64>,
    /// Which context the run gets ([`Realm`]); `None` (the default) lets
    /// the `harness` facade choose per script: [`Realm::Private`] for a
    /// script that may change a built-in (found on its syntax tree),
    /// [`Realm::Shared`] otherwise. An adapter given `None` runs shared.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub realm: Option<Realm>,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            timeout_ms: 30_000,
            memory_bytes: 96 * MIB,
            stack_bytes: 512 * KIB,
            max_source_bytes: 20 * KIB,
            max_return_bytes: 128 * KIB,
            max_tool_calls: 32,
            max_concurrent_tool_calls: 4,
            max_queued_tool_calls: 64,
            max_console_lines: 200,
            console_lines_per_second: 20,
            max_console_line_bytes: 8 * KIB,
            max_progress_events: 50,
            progress_interval_ms: 500,
            max_tool_output_string_bytes: 256 * KIB,
            approval_timeout_ms: 60_000,
            orphan_grace_ms: 250,
            isolation: None,
            fuel: None,
            realm: None,
        }
    }
}

impl Limits {
    /// This limit set with `timeout_ms` replaced.
    pub fn with_timeout_ms(mut self, timeout_ms: u64) -> Self {
        self.timeout_ms = timeout_ms;
        self
    }

    /// This limit set with `memory_bytes` replaced.
    pub fn with_memory_bytes(mut self, memory_bytes: u64) -> Self {
        self.memory_bytes = memory_bytes;
        self
    }

    /// This limit set with `stack_bytes` replaced.
    pub fn with_stack_bytes(mut self, stack_bytes: u64) -> Self {
        self.stack_bytes = stack_bytes;
        self
    }

    /// This limit set with `max_source_bytes` replaced.
    pub fn with_max_source_bytes(mut self, max_source_bytes: u64) -> Self {
        self.max_source_bytes = max_source_bytes;
        self
    }

    /// This limit set with `max_return_bytes` replaced.
    pub fn with_max_return_bytes(mut self, max_return_bytes: u64) -> Self {
        self.max_return_bytes = max_return_bytes;
        self
    }

    /// This limit set with `max_tool_calls` replaced.
    pub fn with_max_tool_calls(mut self, max_tool_calls: u32) -> Self {
        self.max_tool_calls = max_tool_calls;
        self
    }

    /// This limit set with `max_concurrent_tool_calls` replaced.
    pub fn with_max_concurrent_tool_calls(mut self, max_concurrent_tool_calls: u32) -> Self {
        self.max_concurrent_tool_calls = max_concurrent_tool_calls;
        self
    }

    /// This limit set with `max_queued_tool_calls` replaced.
    pub fn with_max_queued_tool_calls(mut self, max_queued_tool_calls: u32) -> Self {
        self.max_queued_tool_calls = max_queued_tool_calls;
        self
    }

    /// This limit set with `max_console_lines` replaced.
    pub fn with_max_console_lines(mut self, max_console_lines: u32) -> Self {
        self.max_console_lines = max_console_lines;
        self
    }

    /// This limit set with `console_lines_per_second` replaced.
    pub fn with_console_lines_per_second(mut self, console_lines_per_second: u32) -> Self {
        self.console_lines_per_second = console_lines_per_second;
        self
    }

    /// This limit set with `max_console_line_bytes` replaced.
    pub fn with_max_console_line_bytes(mut self, max_console_line_bytes: u64) -> Self {
        self.max_console_line_bytes = max_console_line_bytes;
        self
    }

    /// This limit set with `max_progress_events` replaced.
    pub fn with_max_progress_events(mut self, max_progress_events: u32) -> Self {
        self.max_progress_events = max_progress_events;
        self
    }

    /// This limit set with `progress_interval_ms` replaced.
    pub fn with_progress_interval_ms(mut self, progress_interval_ms: u64) -> Self {
        self.progress_interval_ms = progress_interval_ms;
        self
    }

    /// This limit set with `max_tool_output_string_bytes` replaced.
    pub fn with_max_tool_output_string_bytes(mut self, max_tool_output_string_bytes: u64) -> Self {
        self.max_tool_output_string_bytes = max_tool_output_string_bytes;
        self
    }

    /// This limit set with `approval_timeout_ms` replaced.
    pub fn with_approval_timeout_ms(mut self, approval_timeout_ms: u64) -> Self {
        self.approval_timeout_ms = approval_timeout_ms;
        self
    }

    /// This limit set with `orphan_grace_ms` replaced.
    pub fn with_orphan_grace_ms(mut self, orphan_grace_ms: u64) -> Self {
        self.orphan_grace_ms = orphan_grace_ms;
        self
    }

    /// This limit set with `realm` replaced.
    pub fn with_realm(mut self, realm: Option<Realm>) -> Self {
        self.realm = realm;
        self
    }

    /// Whether the run gets a private realm ([`Realm::Private`]).
    pub fn private_realm(&self) -> bool {
        self.realm == Some(Realm::Private)
    }

    /// This limit set with `isolation` replaced.
    pub fn with_isolation(mut self, isolation: Option<Isolation>) -> Self {
        self.isolation = isolation;
        self
    }

    /// This limit set with `fuel` replaced.
    pub fn with_fuel(mut self, fuel: Option<u64>) -> Self {
        self.fuel = fuel;
        self
    }

    /// [`Limits::timeout_ms`] as a duration.
    pub fn timeout(&self) -> Duration {
        Duration::from_millis(self.timeout_ms)
    }
    /// [`Limits::approval_timeout_ms`] as a duration.
    pub fn approval_timeout(&self) -> Duration {
        Duration::from_millis(self.approval_timeout_ms)
    }
    /// [`Limits::orphan_grace_ms`] as a duration.
    pub fn orphan_grace(&self) -> Duration {
        Duration::from_millis(self.orphan_grace_ms)
    }
    /// [`Limits::progress_interval_ms`] as a duration.
    pub fn progress_interval(&self) -> Duration {
        Duration::from_millis(self.progress_interval_ms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_match_design() {
        let l = Limits::default();
        assert_eq!(l.timeout_ms, 30_000);
        assert_eq!(l.memory_bytes, 96 * 1024 * 1024);
        assert_eq!(l.stack_bytes, 512 * 1024);
        assert_eq!(l.max_source_bytes, 20 * 1024);
        assert_eq!(l.max_return_bytes, 128 * 1024);
        assert_eq!(l.max_tool_calls, 32);
        assert_eq!(l.max_concurrent_tool_calls, 4);
        assert_eq!((l.max_console_lines, l.console_lines_per_second), (200, 20));
        assert_eq!((l.max_progress_events, l.progress_interval_ms), (50, 500));
        assert_eq!(l.max_tool_output_string_bytes, 256 * 1024);
        assert_eq!(l.orphan_grace_ms, 250);
    }

    #[test]
    fn partial_config_keeps_defaults() {
        let l: Limits = serde_json::from_str(r#"{"timeout_ms": 200}"#).unwrap();
        assert_eq!(l.timeout_ms, 200);
        assert_eq!(l.max_tool_calls, 32);
    }
}
