//! Upstream MCP servers as `tools.mcp.SERVER.TOOL`, against the real
//! servers from npm (`@modelcontextprotocol/server-filesystem` and
//! `server-everything`, installed under `target/npm` by `scripts/test`).

#![cfg(feature = "mcp")]

use harness::config::McpServerSettings;
use harness::mcp::Upstreams;
use harness::{AutoApprove, ErrorCode, Harness};
use serde_json::json;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

/// The npm bin directory, or None (the test says SKIPPED, or fails when
/// `HARNESS_REQUIRE_MCP_SERVERS` is set, as `scripts/test` does).
fn npm_bin() -> Option<PathBuf> {
    let bin = PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../target/npm/node_modules/.bin"
    ));
    if bin.join("mcp-server-everything").exists() && bin.join("mcp-server-filesystem").exists() {
        return Some(bin);
    }
    assert!(
        std::env::var_os("HARNESS_REQUIRE_MCP_SERVERS").is_none(),
        "the MCP servers are not installed under target/npm (scripts/test installs them)"
    );
    eprintln!("SKIPPED: MCP servers not installed under target/npm; run scripts/test");
    None
}

fn server(command: PathBuf, args: &[&str]) -> McpServerSettings {
    let mut s = McpServerSettings::default();
    s.command = Some(command.display().to_string());
    s.args = args.iter().map(|a| a.to_string()).collect();
    s
}

async fn harness(servers: BTreeMap<String, McpServerSettings>) -> Harness {
    let up = Upstreams::connect(&servers).await.expect("servers start");
    Harness::builder()
        .mcp(up)
        .approvals(Arc::new(AutoApprove))
        .build()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_tools_resources_and_errors() {
    let Some(bin) = npm_bin() else { return };
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    std::fs::write(root.join("a.txt"), "hello from a file\n").unwrap();
    let mut servers = BTreeMap::new();
    servers.insert(
        "fs".to_owned(),
        server(bin.join("mcp-server-filesystem"), &[root.to_str().unwrap()]),
    );
    let mut everything = server(bin.join("mcp-server-everything"), &[]);
    everything.needs_approval = vec!["get-sum".into()];
    servers.insert("everything".to_owned(), everything);
    let h = harness(servers).await;
    let names = h.tool_names();
    assert!(
        names.contains(&"mcp.fs.read_text_file".to_owned()),
        "{names:?}"
    );
    assert!(
        names.contains(&"mcp.everything.get-sum".to_owned()),
        "{names:?}"
    );
    assert!(names.contains(&"readMcpResource".to_owned()));
    let script = format!(
        r#"const dir = await tools.mcp.fs.list_directory({{path: "{root}"}});
           const file = await tools.mcp.fs.read_text_file({{path: "{root}/a.txt"}});
           const sum = await tools.mcp.everything["get-sum"]({{a: 2, b: 3}});
           const weather = await tools.mcp.everything["get-structured-content"]({{location: "Chicago"}});
           let bad, missing, unknown;
           try {{ await tools.mcp.fs.read_text_file({{nope: 1}}); }} catch (e) {{ bad = e.code; }}
           try {{ await tools.mcp.fs.read_text_file({{path: "{root}/missing.txt"}}); }} catch (e) {{ missing = e.code + ": " + e.message; }}
           try {{ await tools.mcp.fs.nope({{}}); }} catch (e) {{ unknown = e.code; }}
           const listed = await tools.listMcpResources({{server: "everything"}});
           const first = listed.resources.find(r => r.uri.startsWith("demo://resource/static/document/"));
           const read = await tools.readMcpResource({{server: "everything", uri: first.uri}});
           return {{dir, file, sum, weather, bad, missing, unknown, server: first.server,
                    text: typeof read.contents[0].text, has: 'mcp' in tools,
                    caps: context.capabilities.tools.includes("mcp.fs.read_text_file")}};"#,
        root = root.display()
    );
    let r = h.run(&script).await;
    assert!(r.ok, "{:?}", r.error);
    let v = r.value.unwrap();
    assert_eq!(v["dir"]["content"], "[FILE] a.txt", "{v}");
    assert_eq!(v["file"]["content"], "hello from a file\n", "{v}");
    assert!(v["sum"].as_str().unwrap().contains('5'), "{v}");
    assert!(v["weather"]["temperature"].is_number(), "{v}");
    assert_eq!(v["bad"], "ToolValidationError");
    assert!(
        v["missing"]
            .as_str()
            .unwrap()
            .starts_with("ToolExecutionError: "),
        "{v}"
    );
    assert_eq!(v["unknown"], "ToolNotFoundError");
    assert_eq!(v["server"], "everything");
    assert_eq!(v["text"], "string");
    assert_eq!(
        (v["has"].clone(), v["caps"].clone()),
        (json!(true), json!(true))
    );
    // Reports name the tool `mcp.SERVER.TOOL`; get-sum needed approval.
    assert!(r
        .tool_calls
        .iter()
        .any(|c| c.tool == "mcp.everything.get-sum"));
    assert_eq!(r.approvals.len(), 1);
    assert_eq!(r.approvals[0].tool, "mcp.everything.get-sum");
    // The declarations nest them.
    let d = h.typescript();
    assert!(
        d.contains("readonly mcp: {") && d.contains("readonly everything: {"),
        "{d}"
    );
    assert!(d.contains("\"get-sum\"(args: {"), "{d}");
    assert!(d.contains("read_text_file(args: {"), "{d}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_killed_mid_call_fails_the_call_and_is_restarted() {
    let Some(bin) = npm_bin() else { return };
    // A shell stays the group's leader, and its command line carries a
    // marker the test can find.
    let marker = format!("harness-mcp-kill-{}", std::process::id());
    let everything = bin.join("mcp-server-everything");
    let mut servers = BTreeMap::new();
    servers.insert(
        "slow".to_owned(),
        server(
            "/bin/sh".into(),
            &[
                "-c",
                &format!("\"{}\" stdio; :", everything.display()),
                &marker,
            ],
        ),
    );
    let h = harness(servers).await;
    let killer = {
        let marker = marker.clone();
        std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(800));
            let out = std::process::Command::new("pgrep")
                .args(["-f", &marker])
                .output()
                .unwrap();
            let pid = String::from_utf8_lossy(&out.stdout)
                .split_whitespace()
                .next()
                .map(str::to_owned)
                .expect("the server is running");
            std::process::Command::new("kill")
                .args(["-9", "--", &format!("-{pid}")])
                .status()
                .unwrap();
        })
    };
    let r = h
        .run(
            r#"let first;
               try { await tools.mcp.slow["trigger-long-running-operation"]({duration: 10, steps: 10}); first = "finished"; }
               catch (e) { first = e.code + ": " + e.message; }
               const again = await tools.mcp.slow.echo({message: "back"});
               return {first, again};"#,
        )
        .await;
    killer.join().unwrap();
    assert!(r.ok, "{:?}", r.error);
    let v = r.value.unwrap();
    let first = v["first"].as_str().unwrap();
    assert!(
        first.starts_with("ToolExecutionError: ") && first.contains("`slow` exited"),
        "{first}"
    );
    assert_eq!(v["again"], "Echo: back");
    assert!(r.metrics.duration_ms < 8_000.0, "the dead call hung");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_call_ends_at_once_and_a_missing_server_is_a_clear_error() {
    let Some(bin) = npm_bin() else { return };
    let mut servers = BTreeMap::new();
    servers.insert(
        "e".to_owned(),
        server(bin.join("mcp-server-everything"), &[]),
    );
    let h = harness(servers).await;
    let r = h
        .run(
            r#"const slow = tools.mcp.e["trigger-long-running-operation"]({duration: 30, steps: 3});
               const quick = tools.mcp.e.echo({message: "quick"});
               return await Promise.race([slow, quick]);"#,
        )
        .await;
    // The lost call is cancelled (its request dropped: the server is sent
    // notifications/cancelled), not waited for.
    assert_eq!(r.value, Some(json!("Echo: quick")), "{:?}", r.error);
    assert!(r.metrics.duration_ms < 5_000.0);
    // A server that cannot start is an error naming it.
    let mut servers = BTreeMap::new();
    servers.insert(
        "gone".to_owned(),
        server("/nonexistent/mcp-server".into(), &[]),
    );
    let e = Upstreams::connect(&servers).await.unwrap_err();
    assert!(e.to_string().contains("`gone`"), "{e}");
    let _ = ErrorCode::ToolExecutionError;
}

#[tokio::test]
async fn without_servers_there_is_no_tools_mcp() {
    let h = Harness::builder()
        .mcp(Upstreams::connect(&BTreeMap::new()).await.unwrap())
        .build()
        .unwrap();
    let r = h.run("return [typeof tools.mcp, 'mcp' in tools]").await;
    assert_eq!(r.value, Some(json!(["undefined", false])));
    assert!(!h.tool_names().iter().any(|n| n.contains("Mcp")));
}

/// A free loopback port.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streamable_http_server_by_url() {
    let Some(bin) = npm_bin() else { return };
    let port = free_port();
    let mut server = std::process::Command::new(bin.join("mcp-server-everything"))
        .arg("streamableHttp")
        .env("PORT", port.to_string())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    for _ in 0..100 {
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let mut s = McpServerSettings::default();
    s.url = Some(format!("http://127.0.0.1:{port}/mcp"));
    let mut servers = BTreeMap::new();
    servers.insert("web".to_owned(), s);
    let h = harness(servers).await;
    let r = h
        .run(r#"return await tools.mcp.web.echo({message: "over http"})"#)
        .await;
    assert_eq!(r.value, Some(json!("Echo: over http")), "{:?}", r.error);
    // The server goes away: a clear, catchable error, not a hang.
    server.kill().unwrap();
    server.wait().unwrap();
    let r = h
        .run(r#"try { await tools.mcp.web.echo({message: "x"}); return "sent" } catch (e) { return e.code + ": " + e.message }"#)
        .await;
    let msg = r.value.unwrap();
    let msg = msg.as_str().unwrap();
    assert!(
        msg.starts_with("ToolExecutionError: ") && msg.contains("MCP server `web`"),
        "{msg}"
    );
    assert!(r.metrics.duration_ms < 20_000.0);
}
