//! What `tools/list` answers, pinned: the tools' names, descriptions
//! and input schemas are what clients and models see. The file was written
//! from the hand-written schemas the server had before its typed router;
//! `UPDATE_GOLDEN=1` rewrites it.
#![cfg(feature = "mcp-server")]

use harness_services::mcp_server::CodeMode;
use serde_json::json;

#[test]
fn tools_list_is_pinned() {
    let mut tools = harness::ToolRegistry::new();
    tools
        .register(harness::FnTool::new(
            "add",
            "Adds two numbers.",
            json!({"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
                   "required": ["a", "b"]}),
            |args, _ctx| async move { Ok(args) },
        ))
        .unwrap();
    let harness = harness::Harness::builder().tools(tools).build().unwrap();
    let listed = |max| {
        let server = CodeMode::new(harness.clone()).with_max_description_bytes(max);
        serde_json::to_value(server.tools()).unwrap()
    };
    let got = json!({
        "full": listed(harness_services::mcp_server::DEFAULT_MAX_DESCRIPTION_BYTES),
        "summarised": listed(10),
    });
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/golden/mcp_tools.json");
    let text = serde_json::to_string_pretty(&got).unwrap() + "\n";
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::write(path, &text).unwrap();
    }
    let want = std::fs::read_to_string(path).expect("run with UPDATE_GOLDEN=1 to write it");
    assert_eq!(
        text, want,
        "tools/list changed; UPDATE_GOLDEN=1 rewrites {path}"
    );
}
