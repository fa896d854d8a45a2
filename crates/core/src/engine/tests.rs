use super::*;

#[test]
fn fault_kinds_cross_boundaries_by_their_names() {
    for k in FaultKind::ALL {
        assert_eq!(
            serde_json::to_string(&k).unwrap(),
            format!("\"{}\"", k.name())
        );
    }
}

#[test]
fn the_host_op_table_matches_the_prelude() {
    // The shared helpers reach the host through `hostCall` (or
    // `hostCallWellFormed`), a run's own functions through `call`: the
    // same ops.
    let prelude = PRELUDE
        .replace("hostCallWellFormed(", "call(")
        .replace("hostCall(", "call(");
    let prelude = prelude.as_str();
    for name in HostOp::NAMES {
        assert!(
            prelude.contains(&format!("call('{name}'")),
            "the prelude never uses host op {name:?}"
        );
        assert!(
            !matches!(HostOp::decode(name, "", ""), HostOp::Other(_)),
            "{name:?} is not decoded"
        );
    }
    // And the prelude uses no op the table leaves out.
    let used: std::collections::BTreeSet<&str> = prelude
        .match_indices("call('")
        .map(|(i, _)| {
            let rest = &prelude[i + 6..];
            &rest[..rest.find('\'').unwrap_or(0)]
        })
        .collect();
    let known: std::collections::BTreeSet<&str> = HostOp::NAMES.into_iter().collect();
    assert_eq!(used, known);
    // Notices are the ops the table answers with nothing.
    let docs = include_str!("../engine.rs");
    for name in HostOp::NAMES {
        let row = docs
            .lines()
            .find(|l| l.starts_with(&format!("//! | `{name}` |")))
            .unwrap_or_default();
        let blank_answer = row.trim_end().ends_with("| |");
        assert_eq!(
            blank_answer,
            HostOp::NOTICES.contains(&name),
            "{name}: the docs table's answer and HostOp::NOTICES disagree"
        );
    }
    for name in HostOp::NAMES {
        assert!(
            docs.contains(&format!("//! | `{name}` |")),
            "{name} is not in the docs table"
        );
    }
}
