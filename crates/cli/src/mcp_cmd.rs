//! `harness mcp`: code mode as an MCP server (stdio or HTTP).

use super::*;

pub(super) async fn mcp(args: McpArgs) -> ExitCode {
    if let Some(addr) = args.metrics {
        if let Err(e) = harness_services::telemetry::serve_prometheus(addr) {
            return usage_error(format!("cannot serve metrics on {addr}: {e}"));
        }
    }
    let harness = match configured_harness(&args.engine, None, None).await {
        Ok(h) => h,
        Err(code) => return code,
    };
    let ask_client = args.engine.approve.is_none();
    let server = mcp_server::CodeMode::new(harness, args.max_description_bytes, ask_client);
    match args.http {
        Some(addr) => mcp_server::serve_http(server, addr).await,
        None => mcp_server::serve_stdio(server).await,
    }
}
