//! `harness mcp`: code mode as an MCP server (stdio or HTTP).

use super::*;
use harness_services::mcp_server::CodeMode;

pub(super) async fn mcp(args: McpArgs) -> ExitCode {
    if let Some(McpCommand::Login(login)) = args.action {
        return mcp_login(login).await;
    }
    if let Some(addr) = args.metrics {
        if let Err(e) = harness_services::telemetry::serve_prometheus(addr) {
            return usage_error(format!("cannot serve metrics on {addr}: {e}"));
        }
    }
    let harness = match configured_harness(&args.engine, None, None).await {
        Ok(h) => h,
        Err(code) => return code,
    };
    let server = CodeMode::new(harness)
        .with_max_description_bytes(args.max_description_bytes)
        .with_ask_client(args.engine.approve.is_none());
    let Some(addr) = args.http else {
        return match server.serve_stdio().await {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("harness mcp: {e}");
                ExitCode::from(1)
            }
        };
    };
    let listener = match tokio::net::TcpListener::bind(addr).await {
        Ok(l) => l,
        Err(e) => {
            eprintln!("harness mcp: cannot listen on {addr}: {e}");
            return ExitCode::from(2);
        }
    };
    eprintln!(
        "harness mcp: serving streamable HTTP on http://{}/mcp",
        listener
            .local_addr()
            .map(|a| a.to_string())
            .unwrap_or_default()
    );
    let stop = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    match server.serve_http(listener, stop).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("harness mcp: {e}");
            ExitCode::from(1)
        }
    }
}

/// `harness mcp login NAME`: exit 0 once the tokens are stored and work,
/// 1 when the authorization failed, 2 for a name or server it is not for.
async fn mcp_login(args: McpLoginArgs) -> ExitCode {
    let config = match load_config(&args.config, Overrides::new()) {
        Ok(c) => c,
        Err(code) => return code,
    };
    let Some(settings) = config.settings().mcp.servers.get(&args.name) else {
        return usage_error(format!(
            "no MCP server `{}` in the configuration ([mcp.servers.{}])",
            args.name, args.name
        ));
    };
    let shown = |url: &str| {
        eprintln!(
            "harness mcp login: open this URL in a browser to authorise `{}`:\n{url}",
            args.name
        );
    };
    match harness::mcp::oauth::login(&args.name, settings, shown).await {
        Ok(done) => {
            let scopes = if done.scopes.is_empty() {
                String::new()
            } else {
                format!(", scopes {}", done.scopes.join(" "))
            };
            eprintln!(
                "harness mcp login: `{}` authorised ({} tools{scopes}); tokens in {}",
                args.name,
                done.tools,
                done.token_file.display()
            );
            ExitCode::SUCCESS
        }
        Err(e @ harness::mcp::McpError::Unsupported { .. }) => usage_error(e.to_string()),
        Err(e) => {
            eprintln!("harness mcp login: {e}");
            ExitCode::from(1)
        }
    }
}
