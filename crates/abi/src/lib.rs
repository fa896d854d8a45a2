//! What crosses the WASI boundary, and what every QuickJS build shares.
//!
//! The host crates (`harness-core`, `harness-quickjs`, `harness-wasi`) and
//! the WASI guest (`adapters/wasi/guest`, QuickJS for `wasm32-wasip1`) all
//! use these definitions, so a renamed fault kind or a changed file name
//! fails to compile instead of failing at run time. No dependencies (serde
//! only behind the `serde` feature), so the guest can use it as it is.

/// The hardening prelude every engine evaluates in a fresh context before
/// a script: freezes the intrinsics, removes `eval` and the function
/// constructors, and builds `tools`, `console`, `context` and the promise
/// bookkeeping on the engine's one native function `host(op, a, b)`. It
/// is `src/prelude.js` as the build wrote it, with [`run_config`]'s layout.
pub const PRELUDE: &str = include_str!(concat!(env!("OUT_DIR"), "/prelude.js"));

pub mod run_config;

/// File name the prelude is compiled under; never shown to users.
pub const PRELUDE_FILE: &str = "harness:prelude";

/// The file name user code is compiled under; the only file a stack may name.
pub const SCRIPT_FILE: &str = "script.js";

/// What kind of failure an engine primitive hit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum FaultKind {
    /// The interrupt handler stopped the engine (deadline or cancel).
    Interrupted,
    /// The run used up its fuel budget (`Limits::fuel`).
    OutOfFuel,
    /// The engine's heap is at its limit.
    OutOfMemory,
    /// The script (or the parser) ran out of stack.
    StackOverflow,
    /// The source did not compile.
    Syntax,
    /// A JS exception escaped (should not happen past the prelude).
    Thrown,
    /// The engine itself failed.
    Internal,
}

impl FaultKind {
    /// Every kind.
    pub const ALL: [FaultKind; 7] = [
        FaultKind::Interrupted,
        FaultKind::OutOfFuel,
        FaultKind::OutOfMemory,
        FaultKind::StackOverflow,
        FaultKind::Syntax,
        FaultKind::Thrown,
        FaultKind::Internal,
    ];

    /// The kind's name as it crosses a boundary (the variant's name).
    pub fn name(self) -> &'static str {
        match self {
            FaultKind::Interrupted => "Interrupted",
            FaultKind::OutOfFuel => "OutOfFuel",
            FaultKind::OutOfMemory => "OutOfMemory",
            FaultKind::StackOverflow => "StackOverflow",
            FaultKind::Syntax => "Syntax",
            FaultKind::Thrown => "Thrown",
            FaultKind::Internal => "Internal",
        }
    }

    /// The kind named `name`, if there is one.
    pub fn from_name(name: &str) -> Option<FaultKind> {
        Self::ALL.into_iter().find(|k| k.name() == name)
    }
}

/// Maps QuickJS's own error messages to fault kinds: the same for the
/// native engine and the WASI guest, which run the same QuickJS.
pub fn classify_quickjs(name: &str, message: &str) -> FaultKind {
    match (name, message) {
        ("InternalError", "interrupted") => FaultKind::Interrupted,
        (_, "out of memory") => FaultKind::OutOfMemory,
        ("RangeError", m) if m.starts_with("Maximum call stack size exceeded") => {
            FaultKind::StackOverflow
        }
        ("InternalError", m) if m.starts_with("stack overflow") => FaultKind::StackOverflow,
        _ => FaultKind::Thrown,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for k in FaultKind::ALL {
            assert_eq!(FaultKind::from_name(k.name()), Some(k));
        }
        assert_eq!(FaultKind::from_name("Nope"), None);
    }

    #[test]
    fn a_config_splits_at_its_static_mark_only_in_the_fixed_layout() {
        use run_config::*;
        let run = "0".repeat(SEED_HEX_LEN) + "scr_0123456789abcdef";
        let head = format!("{PREFIX}{run}{STATIC_MARK}");
        let config = format!("{head}{{\"tools\":[]}}}}");
        assert_eq!(
            split_static(&config),
            Some((head.as_str(), "{\"tools\":[]}"))
        );
        for other in [
            format!("{PREFIX}{run}x{STATIC_MARK}{{}}}}"),
            "{\"run\":{},\"static\":{}}".to_string(),
            head.clone(),
            String::new(),
        ] {
            assert_eq!(split_static(&other), None, "{other}");
        }
    }

    #[test]
    fn quickjs_messages_are_classified() {
        assert_eq!(
            classify_quickjs("InternalError", "interrupted"),
            FaultKind::Interrupted
        );
        assert_eq!(
            classify_quickjs("InternalError", "out of memory"),
            FaultKind::OutOfMemory
        );
        assert_eq!(
            classify_quickjs("RangeError", "Maximum call stack size exceeded"),
            FaultKind::StackOverflow
        );
        assert_eq!(
            classify_quickjs("TypeError", "x is not a function"),
            FaultKind::Thrown
        );
    }
}
