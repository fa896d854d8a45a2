//! OAuth for upstream MCP servers over streamable HTTP (`auth = "oauth"`).
//!
//! A person authorises once with [`login`] (the CLI's `harness mcp login
//! NAME`): it runs the MCP authorization flow (the server's 401 challenge,
//! its protected-resource and authorization-server metadata, a
//! pre-registered client, a client metadata document or dynamic
//! registration, PKCE, a loopback redirect) and keeps the tokens in the
//! server's token file, mode 0600 ([`token_path`]). Every later connection
//! reads that file, sends the access token, refreshes it when it expires
//! (under a lock beside the file, so two processes never spend one refresh
//! token twice) and, when it cannot, fails with [`McpError::Unauthorized`]
//! naming `harness mcp login NAME`. The file is bound to the server's URL:
//! tokens stored for one URL are never sent to another.
//!
//! Tokens never reach a script, a report or a log; rmcp's `AuthClient` puts
//! them in the `Authorization` header, and this module's errors name the
//! file, never its contents.

use super::{client_config, McpError, START_TIMEOUT};
use crate::{McpAuth, McpServerSettings};
use rmcp::service::ServiceExt;
use rmcp::transport::auth::{
    AuthClient, AuthError, AuthorizationManager, AuthorizationRequest, AuthorizationSession,
    CredentialRefreshGuard, CredentialStore, OAuthClientConfig, StoredCredentials,
    WWWAuthenticateParams,
};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::StreamableHttpClientTransport;
use serde::{Deserialize, Serialize};
use serde_json::json;
use std::io::Write as _;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// How long [`login`] waits for the browser to come back to the redirect.
pub const LOGIN_TIMEOUT: Duration = Duration::from_secs(600);

/// The token file's format version.
const FORMAT: u32 = 1;

/// The transport of a server with `auth = "oauth"`.
pub(super) type AuthorizedTransport =
    StreamableHttpClientTransport<AuthClient<reqwest_mcp::Client>>;

/// What [`login`] did.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Login {
    /// Where the tokens now are.
    pub token_file: PathBuf,
    /// The scopes the authorization server granted (empty when it did not
    /// say).
    pub scopes: Vec<String>,
    /// How many tools the server lists with the new token.
    pub tools: usize,
}

/// The token file of server `name`: its `token_file`, or
/// `$XDG_STATE_HOME/harness/mcp/NAME.json`, or
/// `$HOME/.local/state/harness/mcp/NAME.json`.
pub fn token_path(name: &str, settings: &McpServerSettings) -> Result<PathBuf, McpError> {
    if let Some(p) = &settings.token_file {
        return Ok(p.clone());
    }
    let state = std::env::var_os("XDG_STATE_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME")
                .filter(|v| !v.is_empty())
                .map(|h| PathBuf::from(h).join(".local/state"))
        })
        .ok_or_else(|| McpError::Unsupported {
            server: name.into(),
            message: "no place for its tokens: set `token_file`, XDG_STATE_HOME or HOME".into(),
        })?;
    Ok(state.join("harness/mcp").join(format!("{name}.json")))
}

/// The token file's contents.
#[derive(Debug, Serialize, Deserialize)]
struct Saved {
    format: u32,
    /// The server these tokens are for.
    url: String,
    /// A dynamically registered client's secret (a pre-registered one's
    /// comes from `client_secret_env` each time).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    client_secret: Option<String>,
    /// The redirect the client was registered with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    redirect_uri: Option<String>,
    /// Scopes a call was refused for: the next login asks for them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    step_up: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    credentials: Option<StoredCredentials>,
}

impl Saved {
    fn empty(url: &str) -> Self {
        Saved {
            format: FORMAT,
            url: url.into(),
            client_secret: None,
            redirect_uri: None,
            step_up: Vec::new(),
            credentials: None,
        }
    }
}

/// One server's token file, as rmcp's credential store.
#[derive(Debug, Clone)]
struct TokenFile {
    path: PathBuf,
    url: String,
}

impl TokenFile {
    fn new(name: &str, settings: &McpServerSettings, url: &str) -> Result<Self, McpError> {
        Ok(TokenFile {
            path: token_path(name, settings)?,
            url: url.into(),
        })
    }

    /// What the file holds for this URL (nothing when it is missing or
    /// holds another server's tokens). A file others may read is refused.
    fn read(&self) -> Result<Saved, String> {
        let shown = self.path.display();
        let file = match std::fs::File::open(&self.path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Ok(Saved::empty(&self.url))
            }
            Err(e) => return Err(format!("cannot read the token file {shown}: {e}")),
        };
        let meta = file
            .metadata()
            .map_err(|e| format!("cannot read the token file {shown}: {e}"))?;
        if !meta.is_file() {
            return Err(format!("the token file {shown} is not a regular file"));
        }
        if meta.permissions().mode() & 0o077 != 0 {
            return Err(format!(
                "the token file {shown} may be read by others (mode {:o}); `chmod 600` it",
                meta.permissions().mode() & 0o777
            ));
        }
        let mut text = Vec::new();
        std::io::Read::read_to_end(&mut std::io::Read::take(file, 1 << 20), &mut text)
            .map_err(|e| format!("cannot read the token file {shown}: {e}"))?;
        let saved: Saved = serde_json::from_slice(&text)
            .map_err(|e| format!("the token file {shown} is not valid: {e}"))?;
        if saved.format != FORMAT || saved.url != self.url {
            return Ok(Saved::empty(&self.url));
        }
        Ok(saved)
    }

    /// Replaces the file, atomically, mode 0600 in a directory of mode 0700.
    fn write(&self, saved: &Saved) -> Result<(), String> {
        let shown = self.path.display();
        let fail = |e: std::io::Error| format!("cannot write the token file {shown}: {e}");
        private_parent(&self.path).map_err(fail)?;
        let tmp = sibling(&self.path, &format!("{}.tmp", std::process::id()));
        let _ = std::fs::remove_file(&tmp);
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)
            .map_err(fail)?;
        let text = serde_json::to_vec_pretty(saved).map_err(|e| e.to_string())?;
        let written = f
            .write_all(&text)
            .and_then(|()| f.sync_all())
            .and_then(|()| std::fs::rename(&tmp, &self.path));
        if let Err(e) = written {
            let _ = std::fs::remove_file(&tmp);
            return Err(fail(e));
        }
        Ok(())
    }

    fn update(&self, change: impl FnOnce(&mut Saved)) -> Result<(), String> {
        let mut saved = self.read()?;
        change(&mut saved);
        self.write(&saved)
    }
}

/// Makes `path`'s directory where it is missing, mode 0700.
fn private_parent(path: &Path) -> std::io::Result<()> {
    match path.parent().filter(|d| !d.as_os_str().is_empty()) {
        Some(dir) => std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir),
        None => Ok(()),
    }
}

/// `path` with `.suffix` added to its file name.
fn sibling(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(".");
    name.push(suffix);
    path.with_file_name(name)
}

#[async_trait::async_trait]
impl CredentialStore for TokenFile {
    async fn load(&self) -> Result<Option<StoredCredentials>, AuthError> {
        Ok(self
            .read()
            .map_err(AuthError::CredentialStoreError)?
            .credentials)
    }

    async fn save(&self, credentials: StoredCredentials) -> Result<(), AuthError> {
        self.update(|s| s.credentials = Some(credentials))
            .map_err(AuthError::CredentialStoreError)
    }

    async fn clear(&self) -> Result<(), AuthError> {
        self.update(|s| s.credentials = None)
            .map_err(AuthError::CredentialStoreError)
    }

    async fn acquire_refresh_guard(&self) -> Result<Option<CredentialRefreshGuard>, AuthError> {
        let lock = sibling(&self.path, "lock");
        let file = tokio::task::spawn_blocking(move || {
            private_parent(&lock)?;
            let f = std::fs::OpenOptions::new()
                .create(true)
                .truncate(false)
                .write(true)
                .mode(0o600)
                .open(&lock)?;
            // Held until the guard drops the file, which closes it.
            f.lock()?;
            Ok::<_, std::io::Error>(f)
        })
        .await
        .map_err(|e| AuthError::CredentialStoreError(e.to_string()))?
        .map_err(|e| AuthError::CredentialStoreError(format!("cannot lock the token file: {e}")))?;
        Ok(Some(CredentialRefreshGuard::new(file)))
    }
}

fn unauthorized(name: &str, why: impl std::fmt::Display) -> McpError {
    McpError::Unauthorized {
        server: name.into(),
        message: format!("{why}; run `harness mcp login {name}`"),
    }
}

/// The client secret of a server's client: from `client_secret_env`, else
/// the one dynamic registration gave.
fn client_secret(
    name: &str,
    settings: &McpServerSettings,
    saved: Option<&Saved>,
) -> Result<Option<String>, McpError> {
    if let Some(var) = &settings.client_secret_env {
        return match std::env::var(var) {
            Ok(v) if !v.is_empty() => Ok(Some(v)),
            _ => Err(McpError::Unsupported {
                server: name.into(),
                message: format!("`client_secret_env` names {var}, which is not set"),
            }),
        };
    }
    Ok(saved.and_then(|s| s.client_secret.clone()))
}

/// The transport to a server with `auth = "oauth"`, carrying its stored
/// tokens (refreshed when they expire).
pub(super) async fn transport(
    name: &str,
    settings: &McpServerSettings,
    url: &str,
) -> Result<AuthorizedTransport, McpError> {
    let file = TokenFile::new(name, settings, url)?;
    let saved = file.read().map_err(|m| unauthorized(name, m))?;
    let Some(stored) = saved
        .credentials
        .as_ref()
        .filter(|c| c.token_response.is_some())
    else {
        return Err(unauthorized(name, "it has not been authorised yet"));
    };
    let client_id = stored.client_id.clone();
    let mut manager = AuthorizationManager::new(url)
        .await
        .map_err(|e| unauthorized(name, e))?;
    manager.set_credential_store(file.clone());
    match manager.initialize_from_store().await {
        Ok(true) => {}
        Ok(false) => {
            return Err(unauthorized(
                name,
                "its authorization server changed since it was authorised",
            ))
        }
        Err(e) => {
            return Err(McpError::Start {
                server: name.into(),
                message: format!("cannot read its authorization server's metadata: {e}"),
            })
        }
    }
    if let Some(secret) = client_secret(name, settings, Some(&saved))? {
        let redirect = saved.redirect_uri.clone().unwrap_or_default();
        manager
            .configure_client(
                OAuthClientConfig::new(client_id, redirect).with_client_secret(secret),
            )
            .map_err(|e| unauthorized(name, e))?;
    }
    let client = AuthClient::new(reqwest_mcp::Client::default(), manager);
    Ok(StreamableHttpClientTransport::with_client(
        client,
        StreamableHttpClientTransportConfig::with_uri(url),
    ))
}

/// What a refused request says, for the call's error. A refusal for want
/// of scope is remembered, so that the next login asks for that scope.
pub(super) fn refusal(
    name: &str,
    settings: &McpServerSettings,
    url: &str,
    challenge: &str,
) -> String {
    let base = reqwest_mcp::Url::parse(url).ok();
    let params = base
        .as_ref()
        .map(|b| WWWAuthenticateParams::parse(challenge, b))
        .unwrap_or_default();
    if params.is_insufficient_scope() {
        let wanted: Vec<String> = params
            .scope
            .as_deref()
            .unwrap_or_default()
            .split_whitespace()
            .map(str::to_owned)
            .collect();
        if !wanted.is_empty() {
            if let Ok(file) = TokenFile::new(name, settings, url) {
                if let Err(e) = file.update(|s| s.step_up = wanted.clone()) {
                    tracing::warn!(server = %name, "cannot note the scope a call needs: {e}");
                }
            }
            return format!(
                "MCP server `{name}` refused the call: it needs the scope `{}`; run `harness mcp login {name}` to grant it",
                wanted.join(" ")
            );
        }
        return format!(
            "MCP server `{name}` refused the call for want of scope; run `harness mcp login {name}`"
        );
    }
    format!(
        "MCP server `{name}` no longer accepts the stored authorization; run `harness mcp login {name}`"
    )
}

/// Runs the authorization flow for server `name` and stores its tokens.
///
/// `show` gets the URL a person opens in a browser; the authorization
/// server sends the browser back to a loopback redirect this function
/// listens on (`127.0.0.1`, `redirect_port` or any free port), for at most
/// [`LOGIN_TIMEOUT`]. A scope a call was refused for (see the module docs)
/// is asked for too. The new token is tried at once: the result says how
/// many tools the server lists with it.
pub async fn login(
    name: &str,
    settings: &McpServerSettings,
    show: impl FnOnce(&str),
) -> Result<Login, McpError> {
    let (Some(url), Some(McpAuth::Oauth)) = (settings.url.as_deref(), settings.auth) else {
        return Err(McpError::Unsupported {
            server: name.into(),
            message: "only a server with `url` and `auth = \"oauth\"` is logged in to".into(),
        });
    };
    let _ = rustls::crypto::ring::default_provider().install_default();
    let fail = |what: &str, e: &dyn std::fmt::Display| McpError::Start {
        server: name.into(),
        message: format!("{what}: {e}"),
    };
    let file = TokenFile::new(name, settings, url)?;
    let saved = file.read().map_err(|m| fail("login", &m))?;
    let listener =
        tokio::net::TcpListener::bind(("127.0.0.1", settings.redirect_port.unwrap_or(0)))
            .await
            .map_err(|e| fail("cannot listen for the redirect", &e))?;
    let port = listener
        .local_addr()
        .map_err(|e| fail("cannot listen for the redirect", &e))?
        .port();
    let redirect = format!("http://127.0.0.1:{port}/callback");

    let challenge = probe(url).await;
    let mut manager = AuthorizationManager::new(url)
        .await
        .map_err(|e| fail("login", &e))?;
    manager.set_credential_store(file.clone());
    let metadata = manager
        .resolve_metadata_from_challenge(challenge.as_deref())
        .await
        .map_err(|e| fail("cannot find its authorization server", &e))?
        .metadata;
    let cimd = metadata
        .additional_fields
        .get("client_id_metadata_document_supported")
        .and_then(|v| v.as_bool())
        .unwrap_or(false);
    manager.set_metadata(metadata);

    let mut scopes = settings.scopes.clone();
    if !saved.step_up.is_empty() {
        let granted = saved
            .credentials
            .as_ref()
            .map(|c| c.granted_scopes.clone())
            .unwrap_or_default();
        for s in granted.into_iter().chain(saved.step_up.iter().cloned()) {
            if !scopes.contains(&s) {
                scopes.push(s);
            }
        }
    }
    let mut request = AuthorizationRequest::new(&redirect).with_client_name("harness");
    if !scopes.is_empty() {
        request = request.with_scopes(scopes.clone());
    }
    if let Some(c) = &challenge {
        request = request.with_challenge(c.clone());
    }
    let mut registered_secret = None;
    if let Some(id) = &settings.client_id {
        request = request.with_preregistered_client(id);
        if let Some(secret) = client_secret(name, settings, None)? {
            request = request.with_client_secret(secret);
        }
    } else if let Some(doc) = settings.client_metadata_url.as_deref().filter(|_| cimd) {
        request = request.with_client_metadata_url(doc);
    } else {
        // Registered here rather than inside rmcp's session, which keeps a
        // confidential client's secret to itself: a later process needs it
        // to refresh the token.
        let refs: Vec<&str> = scopes.iter().map(String::as_str).collect();
        let config = manager
            .register_client("harness", &redirect, &refs)
            .await
            .map_err(|e| fail("cannot register with its authorization server", &e))?;
        registered_secret = config.client_secret.clone();
        request = request.with_preregistered_client(config.client_id);
        if let Some(secret) = config.client_secret {
            request = request.with_client_secret(secret);
        }
    }
    let session = AuthorizationSession::new(manager, request)
        .await
        .map_err(|(_, e)| fail("cannot start the authorization", &e))?;
    show(session.get_authorization_url());
    let back = tokio::time::timeout(LOGIN_TIMEOUT, redirected(&listener, port))
        .await
        .map_err(|_| {
            fail(
                "login",
                &format!("no browser came back within {} s", LOGIN_TIMEOUT.as_secs()),
            )
        })?
        .map_err(|e| fail("the authorization failed", &e))?;
    session
        .handle_callback_url(&back)
        .await
        .map_err(|e| fail("the authorization failed", &e))?;
    file.update(|s| {
        s.client_secret = registered_secret;
        s.redirect_uri = Some(redirect.clone());
        s.step_up.clear();
    })
    .map_err(|m| fail("login", &m))?;
    let granted = file
        .read()
        .ok()
        .and_then(|s| s.credentials)
        .map(|c| c.granted_scopes)
        .unwrap_or_default();

    let transport = transport(name, settings, url).await?;
    let client = tokio::time::timeout(START_TIMEOUT, client_config().serve(transport))
        .await
        .map_err(|_| fail("the new token", &"initialize timed out"))?
        .map_err(|e| fail("the new token does not work", &e))?;
    let tools = tokio::time::timeout(START_TIMEOUT, client.peer().list_all_tools())
        .await
        .map_err(|_| fail("the new token", &"tools/list timed out"))?
        .map_err(|e| fail("the new token does not work", &e))?;
    let _ = client.cancel().await;
    Ok(Login {
        token_file: file.path,
        scopes: granted,
        tools: tools.len(),
    })
}

/// The server's `WWW-Authenticate` challenge, from an unauthenticated
/// initialize and tools/list (none when it answers both, or not at all).
async fn probe(url: &str) -> Option<String> {
    let attempt = async {
        // The initialize by hand first: most servers refuse it, and rmcp's
        // client would log that expected refusal as an error.
        let init = json!({
            "jsonrpc": "2.0", "id": 0, "method": "initialize",
            "params": client_config(),
        });
        let refused = reqwest_mcp::Client::new()
            .post(url)
            .header("accept", "application/json, text/event-stream")
            .header("content-type", "application/json")
            .body(init.to_string())
            .send()
            .await
            .ok()?;
        let header = |name: &str| refused.headers().get(name).cloned();
        if matches!(refused.status().as_u16(), 401 | 403) {
            return header("www-authenticate").and_then(|h| h.to_str().ok().map(str::to_owned));
        }
        // It answered: end the session this opened before going on.
        if let Some(session) = header("mcp-session-id") {
            let _ = reqwest_mcp::Client::new()
                .delete(url)
                .header("mcp-session-id", session)
                .send()
                .await;
        }
        let client = client_config()
            .serve(StreamableHttpClientTransport::from_uri(url))
            .await;
        match client {
            Err(e) => e.auth_challenge().map(str::to_owned),
            Ok(client) => {
                let challenge = match client.peer().list_tools(None).await {
                    Err(e) => e.auth_challenge().map(str::to_owned),
                    Ok(_) => None,
                };
                let _ = client.cancel().await;
                challenge
            }
        }
    };
    tokio::time::timeout(START_TIMEOUT, attempt)
        .await
        .ok()
        .flatten()
}

/// Waits for the browser's request to `/callback` and answers it; the full
/// redirect URL. Other requests (a favicon) get a 404.
async fn redirected(listener: &tokio::net::TcpListener, port: u16) -> Result<String, String> {
    loop {
        let Ok((mut conn, _)) = listener.accept().await else {
            continue;
        };
        let mut buf = Vec::new();
        let read = tokio::time::timeout(Duration::from_secs(10), async {
            let mut chunk = [0u8; 2048];
            while !buf.windows(4).any(|w| w == b"\r\n\r\n") && buf.len() < 16 * 1024 {
                match conn.read(&mut chunk).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => buf.extend_from_slice(&chunk[..n]),
                }
            }
        })
        .await;
        let line = String::from_utf8_lossy(&buf);
        let target = line
            .lines()
            .next()
            .and_then(|l| l.strip_prefix("GET "))
            .and_then(|l| l.split(' ').next())
            .filter(|_| read.is_ok())
            .unwrap_or("");
        if target != "/callback" && !target.starts_with("/callback?") {
            let _ = conn
                .write_all(
                    b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
                )
                .await;
            continue;
        }
        let url = format!("http://127.0.0.1:{port}{target}");
        let error = reqwest_mcp::Url::parse(&url).ok().and_then(|u| {
            let pairs: Vec<(String, String)> = u.query_pairs().into_owned().collect();
            let get = |k: &str| pairs.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
            get("error").map(|e| match get("error_description") {
                Some(d) => format!("{e}: {d}"),
                None => e,
            })
        });
        let body = match &error {
            None => "harness: authorised. You can close this tab.\n".to_owned(),
            Some(e) => format!("harness: the authorization failed ({e}).\n"),
        };
        let _ = conn
            .write_all(
                format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: text/plain; charset=utf-8\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                )
                .as_bytes(),
            )
            .await;
        return match error {
            None => Ok(url),
            Some(e) => Err(format!("the authorization server said {e}")),
        };
    }
}

#[cfg(test)]
mod tests;
