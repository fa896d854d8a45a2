//! Writes prelude.js into OUT_DIR with the config layout of
//! `src/run_config.rs` in place of its four placeholders.

#[allow(dead_code)]
#[path = "src/run_config.rs"]
mod run_config;

fn main() {
    println!("cargo:rerun-if-changed=src/prelude.js");
    println!("cargo:rerun-if-changed=src/run_config.rs");
    let source = std::fs::read_to_string("src/prelude.js").expect("src/prelude.js");
    let js_string = |s: &str| {
        assert!(!s.contains(['\'', '\\', '\n']), "{s:?} needs escaping");
        format!("'{s}'")
    };
    let values = [
        ("RUN_PREFIX", js_string(run_config::PREFIX)),
        ("SEED_HEX_LEN", run_config::SEED_HEX_LEN.to_string()),
        ("SCRIPT_ID_LEN", run_config::SCRIPT_ID_LEN.to_string()),
        ("STATIC_MARK", js_string(run_config::STATIC_MARK)),
    ];
    let mut out = source;
    for (name, value) in values {
        let placeholder = format!("= {name};");
        assert_eq!(
            out.matches(&placeholder).count(),
            1,
            "prelude.js must have `{placeholder}` once"
        );
        out = out.replace(&placeholder, &format!("= {value};"));
    }
    let dir = std::env::var("OUT_DIR").expect("OUT_DIR");
    std::fs::write(format!("{dir}/prelude.js"), out).expect("write the prelude");
}
