//! How a run ended, shaped into its error and value: faults, parse
//! errors, timeouts, the script's return value.

use super::*;

/// The prelude's description of a failed run (the JSON of its `fail`
/// notice), read in one place for the event loop
/// (`LoopControl::described_error`) and the process worker, which
/// classifies ahead the pairs the host will ask about. A field that is
/// missing or not of its type reads as empty.
pub(crate) struct Failure(pub(super) Value);

impl Failure {
    /// Not JSON reads as a description with every field empty.
    pub(crate) fn parse(description: &str) -> Failure {
        Failure(serde_json::from_str(description).unwrap_or(Value::Null))
    }

    pub(super) fn text(&self, key: &str) -> &str {
        self.0.get(key).and_then(Value::as_str).unwrap_or("")
    }

    pub(super) fn flag(&self, key: &str) -> bool {
        self.0.get(key).and_then(Value::as_bool) == Some(true)
    }

    /// The thrown error's name and message.
    pub(super) fn error(&self) -> (&str, &str) {
        (self.text("name"), self.text("message"))
    }

    /// For a return value that could not be serialised, the error that
    /// stopped it (its name and message).
    pub(super) fn serialization_error(&self) -> Option<(&str, &str)> {
        self.flag("serialization")
            .then(|| (self.text("error_name"), self.text("error_message")))
    }

    /// Every name and message pair `LoopControl::described_error` may ask
    /// the engine to classify; none where the description is not JSON.
    pub(crate) fn classified_pairs(&self) -> Vec<(String, String)> {
        if self.0.is_null() {
            return Vec::new();
        }
        let pair = |(n, m): (&str, &str)| (n.to_owned(), m.to_owned());
        std::iter::once(self.error())
            .chain(self.serialization_error())
            .map(pair)
            .collect()
    }
}

/// Whether a fault from [`Engine::start`] only says that the script did
/// not compile (a syntax error, or nesting deeper than the parser's stack;
/// script code runs inside the prelude's async wrapper, so a stack
/// overflow escaping `start` happened while parsing): nothing of the
/// script ran, and the engine may serve the next run. The one rule for
/// the in-process pool and for worker processes
/// ([`crate::process`]), which must agree on when an engine is tainted.
pub(crate) fn is_parse_failure(f: &EngineFault) -> bool {
    matches!(f.kind, FaultKind::Syntax | FaultKind::StackOverflow)
}

/// The error for a script that did not compile: nesting too deep for the
/// parser is StackOverflowError, running out of memory ScriptMemoryError,
/// anything else a [`syntax_error`]; all in phase `parsing`.
pub fn parse_error(f: &EngineFault, source: &str) -> ScriptError {
    match f.kind {
        FaultKind::StackOverflow => ScriptError::new(
            ErrorCode::StackOverflowError,
            Phase::Parsing,
            "the script is nested too deeply to parse",
        ),
        FaultKind::OutOfMemory => ScriptError::new(
            ErrorCode::ScriptMemoryError,
            Phase::Parsing,
            "out of memory while parsing the script",
        ),
        _ => syntax_error(f, source),
    }
}

/// A ScriptSyntaxError from an engine's compile fault: the location comes
/// from the engine's stack, shifted past the wrapper and kept inside the
/// user's source.
pub fn syntax_error(f: &EngineFault, source: &str) -> ScriptError {
    let raw = f
        .stack
        .as_deref()
        .and_then(|s| first_location(s, WRAPPER_LINE_OFFSET));
    let loc = raw.map(|l| clamp_location(l, source));
    // Past the user's last line the engine is complaining about the
    // wrapper's closing `})`: the script itself ended too early.
    let detail = if raw != loc {
        format!(
            "unexpected end of script: something is not closed or finished ({})",
            f.message
        )
    } else {
        f.message.clone()
    };
    let message = match loc {
        Some(l) => format!("{detail} (script.js:{}:{})", l.line, l.column),
        None => detail,
    };
    ScriptError::new(ErrorCode::ScriptSyntaxError, Phase::Parsing, message)
        .with_name("SyntaxError")
        .with_location(loc)
}

pub(super) fn timeout_error(limits: &Limits) -> ScriptError {
    ScriptError::new(
        ErrorCode::ScriptTimeoutError,
        Phase::Executing,
        format!("script exceeded its time limit of {} ms", limits.timeout_ms),
    )
}

pub(super) fn cancelled_error() -> ScriptError {
    ScriptError::new(
        ErrorCode::ScriptCancelledError,
        Phase::Executing,
        "the run was cancelled",
    )
}

/// What the report adds to an uncaught write to a frozen object, for the
/// model that reads it: which objects the harness freezes, and the fix.
/// The script's own `e.message` is unchanged.
pub(super) const FROZEN_HINT: &str =
    " (a frozen object: tool results, `context`, `globalThis` and the \
     shared realm's built-ins are frozen; change a copy, e.g. `{ ...obj }` or `[...arr]`)";

/// Whether an uncaught error is a write to a frozen (non-extensible,
/// read-only or non-configurable) object, as each engine words it:
/// QuickJS `object is not extensible`, `'a' is read-only`, `could not
/// delete property`; Boa `cannot set non-writable property: a`, `cannot
/// redefine property: a`, `Cannot delete property`, `can't set prototype
/// of this object`; V8 `Cannot add property a, object is not extensible`,
/// `Cannot assign to read only property 'a' of object`.
pub(super) fn frozen_write(name: &str, message: &str) -> bool {
    const WORDINGS: &[&str] = &[
        "object is not extensible",
        "is read-only",
        "read only property",
        "could not delete property",
        "cannot delete property",
        "cannot set non-writable property",
        "cannot redefine property",
        "can't set prototype of this object",
    ];
    if name != "TypeError" || message.len() > 500 {
        return false;
    }
    let message = message.to_ascii_lowercase();
    WORDINGS.iter().any(|w| message.contains(w))
}

/// The report's message for an uncaught error: `Uncaught TypeError: …`,
/// with [`FROZEN_HINT`] after a write to a frozen object.
pub(super) fn uncaught(name: &str, message: &str) -> String {
    let hint = if frozen_write(name, message) {
        FROZEN_HINT
    } else {
        ""
    };
    format!("Uncaught {name}: {message}{hint}")
}

pub(super) fn fault_error(f: &EngineFault, limits: &Limits) -> ScriptError {
    let stack = f
        .stack
        .as_deref()
        .and_then(|s| sanitize_stack(s, WRAPPER_LINE_OFFSET));
    match f.kind {
        FaultKind::OutOfMemory => ScriptError::new(
            ErrorCode::ScriptMemoryError,
            Phase::Executing,
            format!(
                "script exceeded its memory limit of {} bytes",
                limits.memory_bytes
            ),
        ),
        FaultKind::StackOverflow => ScriptError::new(
            ErrorCode::StackOverflowError,
            Phase::Executing,
            format!(
                "maximum call stack size exceeded (stack limit {} bytes)",
                limits.stack_bytes
            ),
        )
        .with_stack(stack),
        FaultKind::Interrupted => {
            ScriptError::internal("the engine was interrupted for no known reason")
        }
        FaultKind::OutOfFuel => ScriptError::new(
            ErrorCode::ScriptTimeoutError,
            Phase::Executing,
            match limits.fuel {
                Some(n) => format!("script ran out of fuel (its compute budget of {n} units)"),
                None => "script ran out of fuel".to_owned(),
            },
        ),
        FaultKind::Syntax => ScriptError::new(
            ErrorCode::ScriptSyntaxError,
            Phase::Parsing,
            f.message.clone(),
        )
        .with_name("SyntaxError"),
        FaultKind::Thrown => ScriptError::new(
            ErrorCode::ScriptRuntimeError,
            Phase::Executing,
            uncaught(&f.name, &f.message),
        )
        .with_name(f.name.clone())
        .with_stack(stack),
        FaultKind::Internal => ScriptError::internal(format!("engine failure: {}", f.message)),
    }
}

pub(super) fn parse_return(json: &str, limits: &Limits) -> (Option<Value>, Option<ScriptError>) {
    if json.len() as u64 > limits.max_return_bytes {
        return (
            None,
            Some(ScriptError::new(
                ErrorCode::ReturnValueTooLargeError,
                Phase::Finalizing,
                format!(
                    "the return value is {} bytes as JSON; the limit is {} bytes",
                    json.len(),
                    limits.max_return_bytes
                ),
            )),
        );
    }
    match serde_json::from_str::<Value>(json) {
        Ok(v) => (Some(v), None),
        Err(e) => (
            None,
            Some(ScriptError::new(
                ErrorCode::SerializationError,
                Phase::Finalizing,
                format!("the return value could not be read back as JSON: {e}"),
            )),
        ),
    }
}
