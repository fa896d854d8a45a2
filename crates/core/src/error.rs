//! The stable error taxonomy: every failure a script or the harness can hit
//! is a [`ScriptError`] with one [`ErrorCode`], the [`Phase`] it happened in and
//! a stack that names only `script.js:L:C`.

use serde::{Deserialize, Serialize};
use std::fmt;

/// Stable error codes. Their string form (the variant name) is a public
/// contract: scripts see it as `err.name`, users match on it in reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[non_exhaustive]
pub enum ErrorCode {
    /// The script does not parse.
    ScriptSyntaxError,
    /// The script names a banned global (`eval`, `require`, …).
    BannedIdentifierError,
    /// The source is over `max_source_bytes`.
    ScriptTooLargeError,
    /// The script threw.
    ScriptRuntimeError,
    /// The run passed its deadline (or ran out of fuel).
    ScriptTimeoutError,
    /// The run passed its memory limit.
    ScriptMemoryError,
    /// The script (or its parse) ran out of stack.
    StackOverflowError,
    /// The run, or the call, was cancelled.
    ScriptCancelledError,
    /// No such tool, or not exposed to this run.
    ToolNotFoundError,
    /// The arguments do not match the tool's schema.
    ToolValidationError,
    /// Over `max_tool_calls`.
    ToolBudgetExceededError,
    /// Too many calls waiting for a concurrency slot.
    ConcurrencyLimitError,
    /// The call needed approval and was denied.
    ApprovalDeniedError,
    /// The call needed approval and nobody answered in time.
    ApprovalTimeoutError,
    /// The tool itself failed.
    ToolExecutionError,
    /// The script finished with tool calls still pending.
    DetachedPromiseError,
    /// The return value is not JSON-serialisable.
    SerializationError,
    /// The return value is over `max_return_bytes` as JSON.
    ReturnValueTooLargeError,
    /// The harness failed; not the script's fault.
    HarnessInternalError,
    /// The run named a session that is closed, expired or unknown
    /// (never a silent fresh start).
    SessionClosedError,
    /// A continuation that cannot resume: tampered with, sealed with an
    /// unknown key, made by another guest build, for other tools or
    /// limits, expired, or used already. Nothing ran.
    ContinuationInvalidError,
    /// The run asked for something its engine does not offer (a
    /// suspension on an engine other than `wasi`). Nothing ran.
    UnsupportedError,
}

impl ErrorCode {
    /// Every code, in catalogue order.
    pub const ALL: [ErrorCode; 22] = [
        ErrorCode::ScriptSyntaxError,
        ErrorCode::BannedIdentifierError,
        ErrorCode::ScriptTooLargeError,
        ErrorCode::ScriptRuntimeError,
        ErrorCode::ScriptTimeoutError,
        ErrorCode::ScriptMemoryError,
        ErrorCode::StackOverflowError,
        ErrorCode::ScriptCancelledError,
        ErrorCode::ToolNotFoundError,
        ErrorCode::ToolValidationError,
        ErrorCode::ToolBudgetExceededError,
        ErrorCode::ConcurrencyLimitError,
        ErrorCode::ApprovalDeniedError,
        ErrorCode::ApprovalTimeoutError,
        ErrorCode::ToolExecutionError,
        ErrorCode::DetachedPromiseError,
        ErrorCode::SerializationError,
        ErrorCode::ReturnValueTooLargeError,
        ErrorCode::HarnessInternalError,
        ErrorCode::SessionClosedError,
        ErrorCode::ContinuationInvalidError,
        ErrorCode::UnsupportedError,
    ];

    /// The stable string form, e.g. `"ScriptTimeoutError"`.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::ScriptSyntaxError => "ScriptSyntaxError",
            ErrorCode::BannedIdentifierError => "BannedIdentifierError",
            ErrorCode::ScriptTooLargeError => "ScriptTooLargeError",
            ErrorCode::ScriptRuntimeError => "ScriptRuntimeError",
            ErrorCode::ScriptTimeoutError => "ScriptTimeoutError",
            ErrorCode::ScriptMemoryError => "ScriptMemoryError",
            ErrorCode::StackOverflowError => "StackOverflowError",
            ErrorCode::ScriptCancelledError => "ScriptCancelledError",
            ErrorCode::ToolNotFoundError => "ToolNotFoundError",
            ErrorCode::ToolValidationError => "ToolValidationError",
            ErrorCode::ToolBudgetExceededError => "ToolBudgetExceededError",
            ErrorCode::ConcurrencyLimitError => "ConcurrencyLimitError",
            ErrorCode::ApprovalDeniedError => "ApprovalDeniedError",
            ErrorCode::ApprovalTimeoutError => "ApprovalTimeoutError",
            ErrorCode::ToolExecutionError => "ToolExecutionError",
            ErrorCode::DetachedPromiseError => "DetachedPromiseError",
            ErrorCode::SerializationError => "SerializationError",
            ErrorCode::ReturnValueTooLargeError => "ReturnValueTooLargeError",
            ErrorCode::HarnessInternalError => "HarnessInternalError",
            ErrorCode::SessionClosedError => "SessionClosedError",
            ErrorCode::ContinuationInvalidError => "ContinuationInvalidError",
            ErrorCode::UnsupportedError => "UnsupportedError",
        }
    }

    /// Parses the stable string form.
    pub fn parse(s: &str) -> Option<ErrorCode> {
        ErrorCode::ALL.iter().copied().find(|c| c.as_str() == s)
    }

    /// Whether a model that wrote the script can reasonably fix and retry.
    pub fn retryable_by_model(self) -> bool {
        !matches!(
            self,
            ErrorCode::HarnessInternalError
                | ErrorCode::ScriptCancelledError
                | ErrorCode::ApprovalDeniedError
        )
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Phase {
    /// The code as it appears in reports (`ScriptTimeoutError`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Parsing => "parsing",
            Phase::Executing => "executing",
            Phase::Finalizing => "finalizing",
        }
    }
}

/// Where in a script's life an error happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum Phase {
    /// Reading, size checks and compilation: nothing of the script ran.
    Parsing,
    /// The script (or a tool it called) was running.
    Executing,
    /// The script finished; its result or its pending work was being collected.
    Finalizing,
}

/// A 1-based line and column in the user's script.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Location {
    /// Line in the user's source, from 1.
    pub line: u32,
    /// Column, from 1.
    pub column: u32,
}

impl Location {
    /// Line `line` and column `column`, both from 1.
    pub fn new(line: u32, column: u32) -> Self {
        Location { line, column }
    }
}

/// One structured failure, as it appears in a report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, thiserror::Error)]
#[error("{code}: {message}")]
#[non_exhaustive]
pub struct ScriptError {
    /// The stable code.
    pub code: ErrorCode,
    /// What went wrong, for people and models.
    pub message: String,
    /// When it happened.
    pub phase: Phase,
    /// The JS error name (`TypeError`, …) for script errors; the code otherwise.
    pub name: String,
    /// Stack frames naming only `script.js:L:C`; absent when there are none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stack: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// The tool involved, for tool errors.
    pub tool: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// The call involved, for tool errors.
    pub call_id: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// Where in the user's source, when known.
    pub location: Option<Location>,
    /// What the tool's process wrote to stderr (at most 2 KiB), for a
    /// ToolExecutionError from a tool that ran one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stderr: Option<String>,
    /// Where the run stood when it failed; set on every error in a report.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<ErrorMetadata>,
}

/// Where a run stood when it failed.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct ErrorMetadata {
    /// Milliseconds from the run's start to its end.
    pub elapsed_ms: f64,
    /// Tool calls that had finished (ok or failed) when the run ended.
    pub completed_tools: u32,
    /// Tool calls still running when the run ended (then cancelled or abandoned).
    pub pending_tools: u32,
    /// The run timed out and the completed calls' results are kept in the
    /// report's `tool_calls`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub partial_results: bool,
}

impl ScriptError {
    /// A new error whose `name` is its code.
    pub fn new(code: ErrorCode, phase: Phase, message: impl Into<String>) -> Self {
        ScriptError {
            code,
            message: message.into(),
            phase,
            name: code.as_str().to_owned(),
            stack: None,
            tool: None,
            call_id: None,
            location: None,
            stderr: None,
            metadata: None,
        }
    }

    /// With the JavaScript error's name.
    pub fn with_name(mut self, name: impl Into<String>) -> Self {
        self.name = name.into();
        self
    }

    /// With a (sanitised) stack.
    pub fn with_stack(mut self, stack: Option<String>) -> Self {
        self.stack = stack.filter(|s| !s.is_empty());
        self
    }

    /// With the tool call involved.
    pub fn with_tool(mut self, tool: impl Into<String>, call_id: Option<u64>) -> Self {
        self.tool = Some(tool.into());
        self.call_id = call_id;
        self
    }

    /// With a location in the user's source.
    pub fn with_location(mut self, location: Option<Location>) -> Self {
        self.location = location;
        self
    }

    /// A HarnessInternalError.
    pub fn internal(message: impl Into<String>) -> Self {
        ScriptError::new(ErrorCode::HarnessInternalError, Phase::Executing, message)
    }
}

/// The file name user code is compiled under; the only file a stack may name.
pub const SCRIPT_FILE: &str = harness_abi::SCRIPT_FILE;

/// Rewrites an engine stack so that it names only `script.js:L:C`.
///
/// Frames that do not point into the user's script (the prelude, native
/// functions, host paths) are dropped; line numbers are shifted back by
/// `line_offset`, the lines the wrapper added before the user's first line.
/// Frames are normalised to `    at NAME (script.js:L:C)` or `    at script.js:L:C`.
pub fn sanitize_stack(raw: &str, line_offset: u32) -> Option<String> {
    let mut out = String::new();
    for line in raw.lines() {
        let Some(pos) = line.find(SCRIPT_FILE) else {
            continue;
        };
        let rest = &line[pos + SCRIPT_FILE.len()..];
        let Some((l, c)) = parse_line_col(rest) else {
            continue;
        };
        let l = l.saturating_sub(line_offset).max(1);
        let name = frame_name(&line[..pos]);
        if !out.is_empty() {
            out.push('\n');
        }
        match name {
            Some(n) => out.push_str(&format!("    at {n} ({SCRIPT_FILE}:{l}:{c})")),
            None => out.push_str(&format!("    at {SCRIPT_FILE}:{l}:{c}")),
        }
    }
    (!out.is_empty()).then_some(out)
}

/// The first `script.js:L:C` location in an engine stack, shifted by `line_offset`.
pub fn first_location(raw: &str, line_offset: u32) -> Option<Location> {
    first_line_col(raw).map(|(l, c)| Location {
        line: l.saturating_sub(line_offset).max(1),
        column: c,
    })
}

/// Where a call was made: the first `script.js:L:C` in an engine stack,
/// shifted by `line_offset`; `None` where that frame is the wrapper's own
/// line (unlike [`first_location`], which clamps to line 1) or no frame
/// names the script.
pub(crate) fn call_site(raw: &str, line_offset: u32) -> Option<Location> {
    let (l, c) = first_line_col(raw)?;
    (l > line_offset).then_some(Location {
        line: l - line_offset,
        column: c,
    })
}

/// The line and column of the first `script.js:L:C` in an engine stack,
/// unshifted.
fn first_line_col(raw: &str) -> Option<(u32, u32)> {
    raw.match_indices(SCRIPT_FILE)
        .find_map(|(pos, _)| parse_line_col(&raw[pos + SCRIPT_FILE.len()..]))
}

/// Keeps a location inside `source`: errors found at the end of input are
/// reported by engines on the wrapper's closing line, past the user's last
/// line; they move to the end of the last line.
pub fn clamp_location(loc: Location, source: &str) -> Location {
    let lines = source.split('\n').count().max(1) as u32;
    if loc.line <= lines {
        return loc;
    }
    let last = source.rsplit('\n').next().unwrap_or("");
    Location {
        line: lines,
        column: last.chars().count() as u32 + 1,
    }
}

/// Parses `:L:C` or `:L` at the start of `s`.
fn parse_line_col(s: &str) -> Option<(u32, u32)> {
    let s = s.strip_prefix(':')?;
    let end = s.find(|ch: char| !ch.is_ascii_digit()).unwrap_or(s.len());
    let line: u32 = s[..end].parse().ok()?;
    let rest = &s[end..];
    let col = rest
        .strip_prefix(':')
        .and_then(|r| {
            let e = r.find(|ch: char| !ch.is_ascii_digit()).unwrap_or(r.len());
            r[..e].parse().ok()
        })
        .unwrap_or(1);
    Some((line, col))
}

/// Extracts a function name from the text before the file name in a frame
/// such as `    at foo (` or `foo@`; only identifier-like names survive.
fn frame_name(prefix: &str) -> Option<String> {
    let p = prefix.trim();
    let p = if p == "at" {
        ""
    } else {
        p.strip_prefix("at ").unwrap_or(p)
    };
    let p = p.trim_end_matches(['(', '@', ' ']).trim();
    if p.is_empty() || p.len() > 128 {
        return None;
    }
    let ok = p
        .chars()
        .all(|c| c.is_alphanumeric() || matches!(c, '_' | '$' | '.' | '<' | '>' | ' ' | '[' | ']'));
    (ok && !p.contains('/')).then(|| p.to_owned())
}

/// The text of a panic payload (what `catch_unwind` returns), for
/// reporting a panic caught in an engine or a parser as an error.
pub fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "(no message)".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_round_trip_through_strings_and_serde() {
        for code in ErrorCode::ALL {
            assert_eq!(ErrorCode::parse(code.as_str()), Some(code));
            let json = serde_json::to_string(&code).unwrap();
            assert_eq!(json, format!("\"{}\"", code.as_str()));
        }
        assert_eq!(ErrorCode::parse("NoSuchError"), None);
    }

    #[test]
    fn stack_keeps_only_script_frames_and_shifts_lines() {
        let raw = "    at <anonymous> (harness:prelude:10:3)\n    at inner (script.js:4:9)\n    at /home/user/secret.rs:1:1\n    at script.js:2:1\n    at native";
        assert_eq!(
            sanitize_stack(raw, 1).unwrap(),
            "    at inner (script.js:3:9)\n    at script.js:1:1"
        );
        assert_eq!(sanitize_stack("    at /etc/passwd:1:1", 1), None);
    }

    #[test]
    fn locations_past_the_end_are_clamped() {
        let l = Location { line: 3, column: 1 };
        assert_eq!(
            clamp_location(l, "a\nreturn 1 +"),
            Location {
                line: 2,
                column: 11
            }
        );
        let l = Location { line: 1, column: 4 };
        assert_eq!(clamp_location(l, "abc"), l);
    }

    #[test]
    fn first_location_is_shifted() {
        assert_eq!(
            first_location("    at script.js:3:7\n", 1),
            Some(Location { line: 2, column: 7 })
        );
    }

    #[test]
    fn a_call_site_is_the_first_frame_in_the_script() {
        // QuickJS's format: prelude frames first, then the script's.
        let stack = "    at callTool (<prelude>:670:31)\n    at echo (<prelude>:700:20)\n    \
                     at <anonymous> (script.js:4:18)\n    at run (script.js:9:3)\n";
        assert_eq!(
            call_site(stack, 1),
            Some(Location {
                line: 3,
                column: 18
            })
        );
        // V8's format, and a frame name that only looks like a location.
        assert_eq!(
            call_site("Error\n    at f (script.js:x)\n    at script.js:2:5", 1),
            Some(Location { line: 1, column: 5 })
        );
        // The wrapper's own line, or no frame in the script: no site.
        assert_eq!(call_site("    at script.js:1:9\n", 1), None);
        assert_eq!(call_site("undefined", 1), None);
        assert_eq!(call_site("", 1), None);
    }

    #[test]
    fn display_names_code_and_message() {
        let e = ScriptError::new(ErrorCode::ScriptTimeoutError, Phase::Executing, "too slow");
        assert_eq!(e.to_string(), "ScriptTimeoutError: too slow");
    }
}
