//! The cases, one module per part of the contract.

pub mod context;
pub mod contract;
pub mod cross_run;
pub mod limits;
pub mod security;
pub mod semantics;
pub mod session;
pub mod tools;

/// `case!(name, doc, group, needs, [steps…])`
macro_rules! case {
    ($name:literal, $doc:literal, $group:ident, $needs:ident, [$($step:expr),+ $(,)?]) => {
        $crate::Case {
            name: $name,
            doc: $doc,
            group: $crate::Group::$group,
            needs: $crate::Needs::$needs,
            steps: &[$($step),+],
        }
    };
}
pub(crate) use case;
