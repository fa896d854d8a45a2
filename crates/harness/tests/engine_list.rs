//! The documented steps for adding an engine (docs/architecture.md) hold:
//! every engine feature of this crate has its adapter crate, workspace
//! member, forwarded feature in every crate that forwards engines, an
//! `EngineKind`, a `#[cfg]` arm in the one list, a row in the docs table and
//! a conformance test main. Fails when any of them drifts.

use std::collections::BTreeSet;
use std::path::Path;

fn read(rel: &str) -> String {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    std::fs::read_to_string(root.join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

/// `NAME = ["PREFIXNAME"...]` lines of a manifest's `[features]` table.
fn engine_features(manifest: &str, forward: impl Fn(&str) -> String) -> BTreeSet<String> {
    let features = manifest
        .split("[features]")
        .nth(1)
        .and_then(|t| t.split("\n[").next())
        .unwrap_or("");
    features
        .lines()
        .filter_map(|l| {
            let (name, value) = l.split_once('=')?;
            let name = name.trim();
            value.contains(&forward(name)).then(|| name.to_owned())
        })
        .collect()
}

#[test]
fn every_engine_feature_follows_the_documented_steps() {
    let ours = engine_features(&read("crates/harness/Cargo.toml"), |n| {
        format!("\"dep:harness-{n}\"")
    });
    assert_eq!(
        ours,
        ["boa", "quickjs", "v8", "wasi"].map(String::from).into(),
        "the engine features changed: update docs/architecture.md and this list"
    );
    let workspace = read("Cargo.toml");
    let engine_rs = read("crates/harness/src/engine.rs");
    let docs = read("docs/architecture.md");
    for name in &ours {
        assert!(
            workspace.contains(&format!("\"adapters/{name}\"")),
            "{name}: not a workspace member"
        );
        assert!(
            workspace.contains(&format!("harness-{name} = {{ path = \"adapters/{name}\"")),
            "{name}: not in [workspace.dependencies]"
        );
        assert!(
            engine_rs.contains(&format!(
                "#[cfg(feature = \"{name}\")]\n            EngineKind::"
            )) && engine_rs.contains(&format!("harness_{name}::descriptor()")),
            "{name}: no #[cfg] arm in EngineKind::descriptor"
        );
        assert!(
            docs.contains(&format!("| `{name}` | `harness-{name}` |")),
            "{name}: no row in the docs/architecture.md engine table"
        );
        let test_main = read(&format!("adapters/{name}/tests/conformance.rs"));
        assert!(
            test_main.contains(&format!("conformance_main!(harness_{name}::descriptor())")),
            "{name}: its tests/conformance.rs does not run the suite's trials"
        );
    }
    for kind in harness::EngineKind::ALL {
        assert!(
            ours.contains(kind.name()),
            "{kind}: an EngineKind without a feature"
        );
    }
    for crate_dir in ["crates/cli", "conformance", "benches", "crates/fuzzing"] {
        let forwarded = engine_features(&read(&format!("{crate_dir}/Cargo.toml")), |n| {
            format!("harness/{n}\"")
        });
        let forwarded_opt = engine_features(&read(&format!("{crate_dir}/Cargo.toml")), |n| {
            format!("harness?/{n}\"")
        });
        let all: BTreeSet<String> = forwarded.union(&forwarded_opt).cloned().collect();
        assert_eq!(
            all, ours,
            "{crate_dir} does not forward every engine feature"
        );
    }
}

/// Every engine built in can size its in-process pool, so that the
/// cross-run suite runs each pair on one engine thread (conformance's
/// `SuiteEngines::for_engine`), and the one-thread adapter is the engine.
#[test]
fn every_engine_builds_a_one_thread_in_process_adapter() {
    for d in harness::engines() {
        let one = d.in_process_with_threads(1).unwrap_or_else(|| {
            panic!(
                "{}: its descriptor cannot size its in-process pool (EngineDescriptor::with_in_process_threads)",
                d.name
            )
        });
        assert_eq!(one.info(), d.in_process().info(), "{}", d.name);
    }
}
