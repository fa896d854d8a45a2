//! Settings the tools read, shared with the configuration file's layers.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// `[mcp.servers.NAME]`: an upstream MCP server whose tools scripts call
/// as `tools.mcp.NAME.TOOL` (see the `mcp` module).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct McpServerSettings {
    /// The program to start (stdio transport).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    /// Its arguments.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<String>,
    /// Variables added to its environment.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    /// The server's URL (streamable HTTP), instead of `command`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// The upstream tools scripts may call (default: all).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools: Option<Vec<String>>,
    /// Upstream tools whose calls need approval; `"*"`: every one.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub needs_approval: Vec<String>,
    /// How long one call may take (default: the run's deadline).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    /// `"oauth"`: the server wants the MCP authorization flow (streamable
    /// HTTP only). A person authorises once with `harness mcp login NAME`;
    /// runs use, and refresh, the tokens it stored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth: Option<McpAuth>,
    /// A client id registered with the authorization server beforehand
    /// (otherwise the client registers itself, where the server allows).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_id: Option<String>,
    /// The environment variable that holds that client's secret.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_secret_env: Option<String>,
    /// The HTTPS URL of this client's metadata document, used as its client
    /// id where the authorization server supports that.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_metadata_url: Option<String>,
    /// Scopes to ask for (default: what the server's challenge, or else its
    /// metadata, names).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub scopes: Vec<String>,
    /// Where the tokens are kept (default:
    /// `$XDG_STATE_HOME/harness/mcp/NAME.json`, else
    /// `~/.local/state/harness/mcp/NAME.json`); mode 0600.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_file: Option<std::path::PathBuf>,
    /// The port of the loopback redirect `harness mcp login` listens on
    /// (default: any free one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub redirect_port: Option<u16>,
}

/// How a client proves itself to an upstream MCP server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum McpAuth {
    /// The MCP authorization flow: OAuth 2.1 with PKCE, the server's
    /// protected-resource and authorization-server metadata, dynamic or
    /// pre-registered clients, refreshed tokens.
    Oauth,
}
