//! The one list of cases an engine may leave unsupported, with the reason.
//!
//! A case is reported unsupported only where this list says so. A case the
//! engine's capabilities rule out (it would hang or take the host down)
//! and that is not listed fails; a listed case that passes fails too, as a
//! surprise, so that a fix is noticed and the entry removed.

use harness_core::{EngineInfo, Isolation};

/// One case an engine, in one isolation, may leave unsupported.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Unsupported {
    /// The case, as in [`crate::Case::name`].
    pub case: &'static str,
    /// The engine's name (`--engine`).
    pub engine: &'static str,
    /// Where the engine runs.
    pub isolation: Isolation,
    /// Why, in one line.
    pub reason: &'static str,
}

const BOA_CANNOT_STOP: &str =
    "Boa can neither interrupt nor kill a running script in this process; run it with isolation=process";
const BOA_NO_MEMORY_LIMIT: &str =
    "Boa does not enforce a memory limit in this process; run it with isolation=process";
const BOA_NO_STACK_GUARD: &str =
    "on Boa native stack exhaustion would end the host process; run it with isolation=process";

const fn boa_in_process(case: &'static str, reason: &'static str) -> Unsupported {
    Unsupported {
        case,
        engine: "boa",
        isolation: Isolation::InProcess,
        reason,
    }
}

/// Every case an engine may leave unsupported. Behind the process boundary
/// every engine runs every case.
pub const UNSUPPORTED: &[Unsupported] = &[
    boa_in_process("limits::timeout_accuracy", BOA_CANNOT_STOP),
    boa_in_process("session::timeout_ends_it", BOA_CANNOT_STOP),
    boa_in_process("session::memory_ends_it", BOA_NO_MEMORY_LIMIT),
    boa_in_process("limits::cancellation", BOA_CANNOT_STOP),
    boa_in_process("limits::memory", BOA_NO_MEMORY_LIMIT),
    boa_in_process("limits::memory_used_reported", BOA_NO_MEMORY_LIMIT),
    boa_in_process("security::getter_loop_on_return", BOA_CANNOT_STOP),
    boa_in_process("security::tojson_loop", BOA_CANNOT_STOP),
    boa_in_process("security::to_primitive_loop", BOA_CANNOT_STOP),
    boa_in_process("security::proxy_huge_own_keys", BOA_NO_MEMORY_LIMIT),
    boa_in_process("security::proxy_deep_chain", BOA_NO_STACK_GUARD),
    boa_in_process("security::infinite_loop", BOA_CANNOT_STOP),
    boa_in_process("security::native_loop_deadline", BOA_CANNOT_STOP),
    boa_in_process("security::catch_all_loop", BOA_CANNOT_STOP),
    boa_in_process("security::regex_backtracking", BOA_CANNOT_STOP),
    boa_in_process("security::native_call_loop", BOA_CANNOT_STOP),
    boa_in_process("security::string_bomb", BOA_NO_MEMORY_LIMIT),
    boa_in_process("security::array_buffer_bomb", BOA_NO_MEMORY_LIMIT),
    boa_in_process("security::catching_oom_does_not_help", BOA_NO_MEMORY_LIMIT),
    boa_in_process("security::microtask_flood", BOA_CANNOT_STOP),
    boa_in_process("security::tool_args_bomb", BOA_NO_MEMORY_LIMIT),
    boa_in_process("security::weakref_after_deadline", BOA_CANNOT_STOP),
    boa_in_process("tools::partial_results_on_timeout", BOA_CANNOT_STOP),
    boa_in_process("contract::timeout_metadata", BOA_CANNOT_STOP),
    boa_in_process("cross_run::timeout_then_run", BOA_CANNOT_STOP),
    boa_in_process("cross_run::memory_then_run", BOA_NO_MEMORY_LIMIT),
    boa_in_process("cross_run::caught_out_of_memory", BOA_NO_MEMORY_LIMIT),
];

/// The entry for `case` on the engine `info` describes, if there is one.
pub fn listed(case: &str, info: &EngineInfo) -> Option<&'static Unsupported> {
    UNSUPPORTED
        .iter()
        .find(|u| u.case == case && u.engine == info.name && u.isolation == info.isolation)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_entry_names_a_case() {
        let cases = crate::all_cases();
        for u in UNSUPPORTED {
            assert!(
                cases.iter().any(|c| c.name == u.case),
                "{} is not a case",
                u.case
            );
        }
    }
}
