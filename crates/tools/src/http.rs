//! `tools.http`: outbound HTTP for scripts, behind an egress policy.
//!
//! Off unless the host sets a policy (`harness::HarnessBuilder::http`,
//! `[expose] http = true` with an `[http]` table, or `--allow-host` on the
//! CLI). A script then calls
//! `tools.http({url, method?, headers?, body?, timeoutMs?})` and gets
//! `{status, headers, body, truncated, url, redirects}`.
//!
//! What the policy decides, in this order, before anything is sent:
//! 1. the scheme (`http`, `https` by default) and the method;
//! 2. the host, against the allowed patterns (`api.example.com`,
//!    `*.example.com`, `*`);
//! 3. every `{{secret:NAME}}` placeholder in the URL or a header: the
//!    secret must exist and be bound to this host;
//! 4. every address the host name resolves to: cloud-metadata addresses
//!    (`169.254.169.254` and friends) always refused, and link-local,
//!    multicast, unspecified and reserved ones too; loopback and private
//!    (RFC 1918, CGNAT, unique-local) addresses unless the policy allows
//!    them. The connection is then made to the checked addresses only
//!    (the client's resolver is pinned to them), so a second DNS answer
//!    cannot point the request elsewhere.
//!
//! Redirects are followed by hand, each hop checked again from step 1.
//! Proxies from the environment are not used (they would connect
//! somewhere the policy did not check).
//!
//! A refusal is a ToolExecutionError the script can catch, whose message
//! starts with `egress policy refused` and names the rule (`scheme`,
//! `method`, `host`, `secret`, `metadata`, `loopback`, `private`,
//! `link-local`, `multicast`, `unspecified`, `reserved`, `redirects`).
//!
//! Secrets never reach the script: the host binds a value to hosts, the
//! script writes the placeholder, the harness substitutes it on the way
//! out, and every value is replaced by its placeholder again in what comes
//! back (headers, body, final URL, error messages).
//!
//! # Examples
//! ```
//! use harness::http::HttpPolicy;
//! # tokio::runtime::Runtime::new().unwrap().block_on(async {
//! let h = harness::Harness::builder()
//!     .http(HttpPolicy::new().allow_host("*"))
//!     .build()
//!     .unwrap();
//! let r = h.run(r#"
//!     try { await tools.http({url: "http://169.254.169.254/latest/meta-data/"}); }
//!     catch (e) { return e.message; }"#).await;
//! let message = r.value.unwrap();
//! assert!(message.as_str().unwrap().contains("(rule metadata)"));
//! # });
//! ```

use harness_core::{ToolContext, ToolError};
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use reqwest::{Method, Url};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::{Duration, Instant};

/// Response bytes kept by default (1 MiB).
pub const DEFAULT_MAX_RESPONSE_BYTES: u64 = 1024 * 1024;
/// A request's time limit by default.
pub const DEFAULT_TIMEOUT_MS: u64 = 30_000;
/// Redirects followed by default.
pub const DEFAULT_MAX_REDIRECTS: u32 = 5;

/// Addresses of cloud instance-metadata services: refused whatever the
/// policy allows (AWS, GCP, Azure, Oracle, DigitalOcean: 169.254.169.254;
/// AWS ECS: 169.254.170.2; AWS DNS: 169.254.169.253; Azure wire server:
/// 168.63.129.16; Alibaba: 100.100.100.200; AWS IPv6: fd00:ec2::254).
const METADATA_V4: &[Ipv4Addr] = &[
    Ipv4Addr::new(169, 254, 169, 254),
    Ipv4Addr::new(169, 254, 170, 2),
    Ipv4Addr::new(169, 254, 169, 253),
    Ipv4Addr::new(168, 63, 129, 16),
    Ipv4Addr::new(100, 100, 100, 200),
];
const METADATA_V6: &[Ipv6Addr] = &[
    Ipv6Addr::new(0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254),
    Ipv6Addr::new(0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x23),
];
/// Host names of metadata services, refused before any lookup.
const METADATA_NAMES: &[&str] = &[
    "metadata.google.internal",
    "metadata.goog",
    "metadata",
    "instance-data",
    "instance-data.ec2.internal",
];

/// A host pattern: `example.com`, `*.example.com` (any subdomain, not the
/// name itself), `*` (any host), or an IP address.
#[derive(Debug, Clone, PartialEq, Eq)]
struct HostPattern(String);

impl HostPattern {
    fn new(p: &str) -> Self {
        HostPattern(normalize_host(p))
    }
    fn matches(&self, host: &str) -> bool {
        let p = self.0.as_str();
        if p == "*" {
            return true;
        }
        match p.strip_prefix("*.") {
            Some(suffix) => host.len() > suffix.len() + 1 && host.ends_with(&format!(".{suffix}")),
            None => p == host,
        }
    }
}

fn normalize_host(h: &str) -> String {
    h.trim()
        .trim_start_matches('[')
        .trim_end_matches(']')
        .trim_end_matches('.')
        .to_ascii_lowercase()
}

/// A secret's value: never printed by `Debug`.
#[derive(Clone)]
struct SecretValue(String);

impl fmt::Debug for SecretValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

#[derive(Debug, Clone)]
struct BoundSecret {
    value: SecretValue,
    hosts: Vec<HostPattern>,
}

/// What `tools.http` may reach. Nothing until hosts are allowed.
///
/// ```
/// use harness::http::HttpPolicy;
/// let p = HttpPolicy::new()
///     .allow_host("api.github.com")
///     .allow_host("*.example.com")
///     .secret("GITHUB_TOKEN", "ghp_example", ["api.github.com"]);
/// assert!(p.allows_host("api.github.com"));
/// assert!(p.allows_host("a.example.com"));
/// assert!(!p.allows_host("example.com"));
/// ```
#[derive(Debug, Clone)]
pub struct HttpPolicy {
    hosts: Vec<HostPattern>,
    schemes: BTreeSet<String>,
    methods: BTreeSet<String>,
    max_response_bytes: u64,
    timeout_ms: u64,
    max_redirects: u32,
    allow_loopback: bool,
    allow_private: bool,
    secrets: BTreeMap<String, BoundSecret>,
}

impl Default for HttpPolicy {
    fn default() -> Self {
        HttpPolicy {
            hosts: Vec::new(),
            schemes: ["http", "https"].map(String::from).into(),
            methods: ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]
                .map(String::from)
                .into(),
            max_response_bytes: DEFAULT_MAX_RESPONSE_BYTES,
            timeout_ms: DEFAULT_TIMEOUT_MS,
            max_redirects: DEFAULT_MAX_REDIRECTS,
            allow_loopback: false,
            allow_private: false,
            secrets: BTreeMap::new(),
        }
    }
}

impl HttpPolicy {
    /// No host allowed; schemes http and https; the common methods; 1 MiB
    /// responses; 30 s; 5 redirects; no loopback or private addresses.
    pub fn new() -> Self {
        Self::default()
    }

    /// Allows a host pattern: `example.com`, `*.example.com`, `*`, an IP.
    pub fn allow_host(mut self, pattern: &str) -> Self {
        self.hosts.push(HostPattern::new(pattern));
        self
    }

    /// The schemes allowed (replaces the default `http`, `https`).
    pub fn schemes<I: IntoIterator<Item = S>, S: AsRef<str>>(mut self, schemes: I) -> Self {
        self.schemes = schemes
            .into_iter()
            .map(|s| s.as_ref().to_ascii_lowercase())
            .collect();
        self
    }

    /// The methods allowed (replaces the default GET, HEAD, POST, PUT,
    /// PATCH, DELETE, OPTIONS).
    pub fn methods<I: IntoIterator<Item = S>, S: AsRef<str>>(mut self, methods: I) -> Self {
        self.methods = methods
            .into_iter()
            .map(|s| s.as_ref().to_ascii_uppercase())
            .collect();
        self
    }

    /// Response body bytes kept; the rest is dropped and `truncated` set.
    pub fn max_response_bytes(mut self, n: u64) -> Self {
        self.max_response_bytes = n;
        self
    }

    /// The longest a request may take (a script's `timeoutMs` may only
    /// shorten it).
    pub fn timeout_ms(mut self, ms: u64) -> Self {
        self.timeout_ms = ms;
        self
    }

    /// Redirects followed (each checked against the policy).
    pub fn max_redirects(mut self, n: u32) -> Self {
        self.max_redirects = n;
        self
    }

    /// Lets requests reach loopback addresses (127.0.0.0/8, ::1).
    pub fn allow_loopback(mut self, allow: bool) -> Self {
        self.allow_loopback = allow;
        self
    }

    /// Lets requests reach private addresses (RFC 1918, 100.64.0.0/10,
    /// fc00::/7). Metadata and link-local addresses stay refused.
    pub fn allow_private(mut self, allow: bool) -> Self {
        self.allow_private = allow;
        self
    }

    /// Binds secret `name` to `hosts` (patterns as in
    /// [`HttpPolicy::allow_host`]): a script's `{{secret:NAME}}` becomes
    /// `value` on requests to those hosts only.
    pub fn secret<I, S>(mut self, name: &str, value: impl Into<String>, hosts: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        self.secrets.insert(
            name.to_owned(),
            BoundSecret {
                value: SecretValue(value.into()),
                hosts: hosts
                    .into_iter()
                    .map(|h| HostPattern::new(h.as_ref()))
                    .collect(),
            },
        );
        self
    }

    /// Whether `host` matches an allowed pattern (addresses are checked
    /// separately, when the request is made).
    pub fn allows_host(&self, host: &str) -> bool {
        let host = normalize_host(host);
        self.hosts.iter().any(|p| p.matches(&host))
    }

    /// Replaces every secret value in `text` by its placeholder.
    pub fn scrub(&self, text: &str) -> String {
        let mut out = text.to_owned();
        for (name, s) in &self.secrets {
            if !s.value.0.is_empty() && out.contains(&s.value.0) {
                out = out.replace(&s.value.0, &placeholder(name));
            }
        }
        out
    }

    fn longest_secret(&self) -> usize {
        self.secrets
            .values()
            .map(|s| s.value.0.len())
            .max()
            .unwrap_or(0)
    }
}

fn placeholder(name: &str) -> String {
    format!("{{{{secret:{name}}}}}")
}

/// The secret names used in `text` (`{{secret:NAME}}`), in order.
fn placeholders(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(i) = rest.find("{{secret:") {
        let after = &rest[i + 9..];
        match after.find("}}") {
            Some(end) => {
                out.push(&after[..end]);
                rest = &after[end + 2..];
            }
            None => break,
        }
    }
    out
}

fn refused(rule: &str, why: impl fmt::Display) -> ToolError {
    ToolError::new(format!(
        "egress policy refused the request (rule {rule}): {why}"
    ))
}

/// The IPv4 address an IPv6 address carries, judged in its place: mapped
/// (`::ffff:a.b.c.d`), compatible (`::a.b.c.d`, but `::` and `::1`), NAT64
/// (`64:ff9b::/96`, `64:ff9b:1::/48`), 6to4 (`2002:AABB:CCDD::/48`),
/// Teredo's client (`2001:0::/32`, the last 32 bits inverted) and ISATAP
/// (`…:5efe:a.b.c.d`).
fn embedded_ipv4(v6: Ipv6Addr) -> Option<Ipv4Addr> {
    let s = v6.segments();
    let o = v6.octets();
    let last = Ipv4Addr::new(o[12], o[13], o[14], o[15]);
    if let Some(v4) = v6.to_ipv4_mapped() {
        return Some(v4);
    }
    match s {
        [0, 0, 0, 0, 0, 0, ..] if !(v6.is_unspecified() || v6.is_loopback()) => Some(last),
        [0x64, 0xff9b, 0, 0, 0, 0, ..] | [0x64, 0xff9b, 1, ..] => Some(last),
        [0x2002, ..] => Some(Ipv4Addr::new(o[2], o[3], o[4], o[5])),
        [0x2001, 0, ..] => Some(Ipv4Addr::from(!u32::from(last))),
        [_, _, _, _, 0 | 0x200, 0x5efe, ..] => Some(last),
        _ => None,
    }
}

/// Why an address may not be reached, if it may not.
fn address_rule(ip: IpAddr, policy: &HttpPolicy) -> Option<(&'static str, &'static str)> {
    let ip = match ip {
        IpAddr::V6(v6) => embedded_ipv4(v6).map_or(IpAddr::V6(v6), IpAddr::V4),
        v4 => v4,
    };
    match ip {
        IpAddr::V4(a) => {
            let o = a.octets();
            if METADATA_V4.contains(&a) {
                Some(("metadata", "a cloud metadata address"))
            } else if a.is_unspecified() || o[0] == 0 {
                Some(("unspecified", "an unspecified address"))
            } else if a.is_loopback() {
                (!policy.allow_loopback).then_some(("loopback", "a loopback address"))
            } else if a.is_link_local() {
                Some(("link-local", "a link-local address"))
            } else if a.is_multicast() {
                Some(("multicast", "a multicast address"))
            } else if a.is_broadcast() || o[0] >= 240 {
                Some(("reserved", "a reserved address"))
            } else if a.is_private()
                || (o[0] == 100 && (64..128).contains(&o[1]))
                || (o[0] == 192 && o[1] == 0 && o[2] == 0)
                || (o[0] == 198 && (o[1] == 18 || o[1] == 19))
            {
                (!policy.allow_private).then_some(("private", "a private address"))
            } else {
                None
            }
        }
        IpAddr::V6(a) => {
            let s = a.segments();
            if METADATA_V6.contains(&a) {
                Some(("metadata", "a cloud metadata address"))
            } else if a.is_unspecified() {
                Some(("unspecified", "an unspecified address"))
            } else if a.is_loopback() {
                (!policy.allow_loopback).then_some(("loopback", "a loopback address"))
            } else if (s[0] & 0xffc0) == 0xfe80 {
                Some(("link-local", "a link-local address"))
            } else if a.is_multicast() {
                Some(("multicast", "a multicast address"))
            } else if (s[0] & 0xfe00) == 0xfc00 || (s[0] & 0xffc0) == 0xfec0 {
                (!policy.allow_private).then_some(("private", "a private address"))
            } else {
                None
            }
        }
    }
}

/// Makes one HTTP request through the host's egress policy (allowed hosts,
/// schemes and methods; no private or metadata addresses; redirects
/// re-checked). Write `{{secret:NAME}}` in the URL or a header to use a
/// secret the host bound to that host; its value is never visible. (The
/// arguments of `tools.http`.)
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
#[non_exhaustive]
pub struct HttpArgs {
    /// Absolute URL (`https://…`).
    #[schemars(length(min = 1, max = 8192))]
    pub url: String,
    /// HTTP method (default GET).
    #[serde(default)]
    pub method: Option<String>,
    /// Request headers.
    #[serde(default)]
    pub headers: Option<BTreeMap<String, String>>,
    /// Request body: a string is sent as is; any other JSON value is sent
    /// as JSON (with `content-type: application/json` unless a header sets
    /// one).
    #[serde(default)]
    pub body: Option<Value>,
    /// Time limit in milliseconds (at most the policy's).
    #[serde(default)]
    #[schemars(range(min = 1))]
    pub timeout_ms: Option<u64>,
}

/// What `tools.http` returns.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct HttpResponse {
    /// Status code of the last response.
    pub status: u16,
    /// Response headers, lower-case names; repeated headers joined by ", ".
    pub headers: BTreeMap<String, String>,
    /// The body as text (invalid UTF-8 replaced by U+FFFD).
    pub body: String,
    /// Whether the body was cut at the policy's `max_response_bytes`.
    pub truncated: bool,
    /// The URL that answered, after redirects (secrets as placeholders).
    pub url: String,
    /// Redirects followed.
    pub redirects: u32,
}

/// The `http` tool for `policy`. The harness registers it under the
/// reserved name `http` when the host sets a policy
/// (`HarnessBuilder::http`); register it yourself only in a registry of
/// your own.
pub fn tool(policy: HttpPolicy) -> harness_core::FnTool {
    let policy = std::sync::Arc::new(policy);
    crate::typed::typed_tool("http", move |args: HttpArgs, ctx: ToolContext| {
        let policy = policy.clone();
        async move {
            let limit = Duration::from_millis(
                args.timeout_ms
                    .unwrap_or(policy.timeout_ms)
                    .min(policy.timeout_ms),
            );
            let deadline = ctx.deadline.min(Instant::now() + limit);
            let work = request(&policy, args, deadline);
            let out = tokio::select! {
                r = work => r,
                _ = ctx.cancel.cancelled() => return Err(ToolError::cancelled()),
                _ = tokio::time::sleep_until(deadline.into()) => Err(ToolError::new(format!(
                    "the request timed out after {} ms", limit.as_millis()))),
            };
            // A message may quote what the server said: no secret in it.
            out.map_err(|mut e| {
                e.message = policy.scrub(&e.message);
                e
            })
        }
    })
}

/// One hop's request as the script wrote it (placeholders, not values).
struct Hop {
    url: Url,
    method: Method,
    headers: BTreeMap<String, String>,
    body: Option<Vec<u8>>,
}

async fn request(
    policy: &HttpPolicy,
    args: HttpArgs,
    deadline: Instant,
) -> Result<HttpResponse, ToolError> {
    let url = Url::parse(&args.url)
        .map_err(|e| ToolError::new(format!("`{}` is not an absolute URL: {e}", args.url)))?;
    let method_name = args.method.as_deref().unwrap_or("GET").to_ascii_uppercase();
    let method = Method::from_bytes(method_name.as_bytes())
        .map_err(|_| ToolError::new(format!("`{method_name}` is not an HTTP method")))?;
    let mut headers: BTreeMap<String, String> = args
        .headers
        .unwrap_or_default()
        .into_iter()
        .map(|(k, v)| (k.to_ascii_lowercase(), v))
        .collect();
    let body = match args.body {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s.into_bytes()),
        Some(v) => {
            headers
                .entry("content-type".into())
                .or_insert_with(|| "application/json".into());
            Some(serde_json::to_vec(&v).unwrap_or_default())
        }
    };
    let mut hop = Hop {
        url,
        method,
        headers,
        body,
    };
    let mut redirects = 0;
    loop {
        let resp = send(policy, &hop, deadline).await?;
        let status = resp.status();
        let location = resp
            .headers()
            .get(reqwest::header::LOCATION)
            .and_then(|l| l.to_str().ok())
            .map(str::to_owned);
        let Some(location) = location.filter(|_| status.is_redirection()) else {
            return read_response(policy, resp, &hop.url, redirects).await;
        };
        if redirects >= policy.max_redirects {
            return Err(refused(
                "redirects",
                format!("more than {} redirects", policy.max_redirects),
            ));
        }
        redirects += 1;
        // The server may echo a secret in Location: back to its placeholder,
        // so the next hop substitutes it only if that host is bound too.
        let next = hop
            .url
            .join(&policy.scrub(&location))
            .map_err(|e| ToolError::new(format!("bad redirect location `{location}`: {e}")))?;
        if next.host_str() != hop.url.host_str()
            || next.port_or_known_default() != hop.url.port_or_known_default()
        {
            for h in ["authorization", "cookie", "proxy-authorization"] {
                hop.headers.remove(h);
            }
        }
        if status == reqwest::StatusCode::SEE_OTHER
            || (matches!(status.as_u16(), 301 | 302) && hop.method == Method::POST)
        {
            hop.method = Method::GET;
            hop.body = None;
            hop.headers.remove("content-type");
            hop.headers.remove("content-length");
        }
        hop.url = next;
    }
}

/// Checks one hop against the policy, then sends it to the checked
/// addresses.
async fn send(
    policy: &HttpPolicy,
    hop: &Hop,
    deadline: Instant,
) -> Result<reqwest::Response, ToolError> {
    let url = &hop.url;
    if !policy.schemes.contains(url.scheme()) {
        return Err(refused(
            "scheme",
            format!("scheme `{}` is not allowed", url.scheme()),
        ));
    }
    if !policy.methods.contains(hop.method.as_str()) {
        return Err(refused(
            "method",
            format!("method {} is not allowed", hop.method),
        ));
    }
    let host = url
        .host_str()
        .map(normalize_host)
        .ok_or_else(|| ToolError::new(format!("`{url}` has no host")))?;
    // Metadata first, so that it is the rule named whatever else applies.
    let literal_metadata = host
        .parse::<IpAddr>()
        .ok()
        .and_then(|ip| address_rule(ip, policy))
        .is_some_and(|(rule, _)| rule == "metadata");
    if METADATA_NAMES.contains(&host.as_str()) || literal_metadata {
        return Err(refused(
            "metadata",
            format!("{host} is a cloud metadata address"),
        ));
    }
    if !policy.hosts.iter().any(|p| p.matches(&host)) {
        return Err(refused(
            "host",
            format!("host {host} is not in the allowed hosts"),
        ));
    }
    // Secrets: each placeholder must name a secret bound to this host.
    let url_text = url.as_str();
    let texts = std::iter::once(url_text).chain(hop.headers.values().map(String::as_str));
    for text in texts {
        for name in placeholders(&percent_decode(text)) {
            let Some(secret) = policy.secrets.get(name) else {
                return Err(refused("secret", format!("no secret named {name}")));
            };
            if !secret.hosts.iter().any(|p| p.matches(&host)) {
                return Err(refused(
                    "secret",
                    format!("secret {name} is not bound to host {host}"),
                ));
            }
        }
    }
    let port = url
        .port_or_known_default()
        .ok_or_else(|| ToolError::new(format!("`{url}` has no port")))?;
    let addrs = resolve(url, &host, port, deadline).await?;
    for a in &addrs {
        if let Some((rule, what)) = address_rule(a.ip(), policy) {
            let why = match url.domain() {
                Some(_) => format!("{host} resolves to {}, {what}", a.ip()),
                None => format!("{host} is {what}"),
            };
            return Err(refused(rule, why));
        }
    }
    let mut builder = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .no_proxy()
        .timeout(deadline.saturating_duration_since(Instant::now()));
    if url.domain().is_some() {
        builder = builder.resolve_to_addrs(&host, &addrs);
    }
    let client = builder
        .build()
        .map_err(|e| ToolError::new(format!("cannot build the HTTP client: {e}")))?;
    let real_url = substitute_url(policy, url)?;
    let mut headers = HeaderMap::new();
    for (k, v) in &hop.headers {
        let name = HeaderName::from_bytes(k.as_bytes())
            .map_err(|_| ToolError::new(format!("`{k}` is not a valid header name")))?;
        let has_secret = !placeholders(v).is_empty();
        let mut value = HeaderValue::from_str(&substitute(policy, v))
            .map_err(|_| ToolError::new(format!("the value of header `{k}` is not valid")))?;
        value.set_sensitive(has_secret);
        headers.append(name, value);
    }
    let mut req = client
        .request(hop.method.clone(), real_url)
        .headers(headers);
    if let Some(b) = &hop.body {
        req = req.body(b.clone());
    }
    req.send().await.map_err(|e| {
        // reqwest's message would quote the URL, secrets substituted.
        let e = e.without_url();
        ToolError::new(format!("request to {host} failed: {}", error_chain(&e)))
    })
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cur = c.source();
    }
    s
}

/// The URL's placeholders may arrive percent-encoded (`%7B%7Bsecret:…`).
fn percent_decode(s: &str) -> String {
    s.replace("%7B", "{")
        .replace("%7b", "{")
        .replace("%7D", "}")
        .replace("%7d", "}")
}

fn substitute(policy: &HttpPolicy, text: &str) -> String {
    let mut out = text.to_owned();
    for (name, s) in &policy.secrets {
        out = out.replace(&placeholder(name), &s.value.0);
    }
    out
}

fn substitute_url(policy: &HttpPolicy, url: &Url) -> Result<Url, ToolError> {
    let text = percent_decode(url.as_str());
    if placeholders(&text).is_empty() {
        return Ok(url.clone());
    }
    Url::parse(&substitute(policy, &text))
        .map_err(|_| ToolError::new("the URL is not valid once its secrets are substituted"))
}

async fn resolve(
    url: &Url,
    host: &str,
    port: u16,
    deadline: Instant,
) -> Result<Vec<SocketAddr>, ToolError> {
    match url.host() {
        Some(url::Host::Ipv4(a)) => return Ok(vec![SocketAddr::new(a.into(), port)]),
        Some(url::Host::Ipv6(a)) => return Ok(vec![SocketAddr::new(a.into(), port)]),
        _ => {}
    }
    let lookup = tokio::net::lookup_host((host.to_owned(), port));
    let addrs: Vec<SocketAddr> = tokio::time::timeout_at(deadline.into(), lookup)
        .await
        .map_err(|_| ToolError::new(format!("resolving {host} timed out")))?
        .map_err(|e| ToolError::new(format!("cannot resolve {host}: {e}")))?
        .collect();
    if addrs.is_empty() {
        return Err(ToolError::new(format!("{host} has no address")));
    }
    Ok(addrs)
}

async fn read_response(
    policy: &HttpPolicy,
    mut resp: reqwest::Response,
    url: &Url,
    redirects: u32,
) -> Result<HttpResponse, ToolError> {
    let status = resp.status().as_u16();
    let mut headers: BTreeMap<String, String> = BTreeMap::new();
    for (k, v) in resp.headers() {
        let v = policy.scrub(&String::from_utf8_lossy(v.as_bytes()));
        headers
            .entry(k.as_str().to_owned())
            .and_modify(|e| {
                e.push_str(", ");
                e.push_str(&v);
            })
            .or_insert(v);
    }
    // Read a secret's length past the cap, so a value that starts before
    // the cut is whole when it is scrubbed.
    let cap = policy.max_response_bytes as usize;
    let keep = cap.saturating_add(policy.longest_secret());
    let mut body = Vec::new();
    let mut truncated = false;
    while let Some(chunk) = resp.chunk().await.map_err(|e| {
        ToolError::new(format!(
            "reading the response failed: {}",
            error_chain(&e.without_url())
        ))
    })? {
        let room = keep - body.len();
        if chunk.len() > room {
            body.extend_from_slice(&chunk[..room]);
            truncated = true;
            break;
        }
        body.extend_from_slice(&chunk);
    }
    let mut text = String::from_utf8_lossy(&body).into_owned();
    text = policy.scrub(&text);
    if text.len() > cap {
        let mut end = cap;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
        truncated = true;
    }
    Ok(HttpResponse {
        status,
        headers,
        body: text,
        truncated,
        url: policy.scrub(&percent_decode(url.as_str())),
        redirects,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy() -> HttpPolicy {
        HttpPolicy::new()
    }

    #[test]
    fn host_patterns() {
        let p = HostPattern::new("*.Example.com.");
        assert!(p.matches("a.example.com"));
        assert!(p.matches("a.b.example.com"));
        assert!(!p.matches("example.com"));
        assert!(!p.matches("badexample.com"));
        assert!(HostPattern::new("[::1]").matches("::1"));
        assert!(HostPattern::new("*").matches("anything"));
    }

    #[test]
    fn address_rules() {
        let p = policy();
        let rule = |s: &str| address_rule(s.parse().unwrap(), &p).map(|r| r.0);
        assert_eq!(rule("169.254.169.254"), Some("metadata"));
        assert_eq!(rule("::ffff:169.254.169.254"), Some("metadata"));
        assert_eq!(rule("64:ff9b::a9fe:a9fe"), Some("metadata"));
        assert_eq!(rule("fd00:ec2::254"), Some("metadata"));
        assert_eq!(rule("100.100.100.200"), Some("metadata"));
        assert_eq!(rule("127.0.0.1"), Some("loopback"));
        assert_eq!(rule("::1"), Some("loopback"));
        assert_eq!(rule("10.1.2.3"), Some("private"));
        assert_eq!(rule("172.16.0.1"), Some("private"));
        assert_eq!(rule("192.168.1.1"), Some("private"));
        assert_eq!(rule("100.64.0.1"), Some("private"));
        assert_eq!(rule("fd12::1"), Some("private"));
        assert_eq!(rule("169.254.1.1"), Some("link-local"));
        assert_eq!(rule("fe80::1"), Some("link-local"));
        assert_eq!(rule("224.0.0.1"), Some("multicast"));
        assert_eq!(rule("ff02::1"), Some("multicast"));
        assert_eq!(rule("0.0.0.0"), Some("unspecified"));
        assert_eq!(rule("::"), Some("unspecified"));
        assert_eq!(rule("255.255.255.255"), Some("reserved"));
        assert_eq!(rule("93.184.216.34"), None);
        assert_eq!(rule("2606:4700::1111"), None);
        // Every IPv6 form that carries an IPv4 address is judged by it.
        assert_eq!(rule("::127.0.0.1"), Some("loopback"));
        assert_eq!(rule("::169.254.169.254"), Some("metadata"));
        assert_eq!(rule("::10.0.0.1"), Some("private"));
        assert_eq!(rule("64:ff9b:1::7f00:1"), Some("loopback"));
        assert_eq!(rule("2002:7f00:1::1"), Some("loopback"));
        assert_eq!(rule("2002:a9fe:a9fe::"), Some("metadata"));
        assert_eq!(
            rule("2001:0:4136:e378:8000:63bf:80ff:fffe"),
            Some("loopback")
        );
        assert_eq!(rule("fe80::5efe:a9fe:a9fe"), Some("metadata"));
        assert_eq!(rule("2001:db8::200:5efe:a00:1"), Some("private"));
        assert_eq!(rule("::5db8:d822"), None);
        let open = policy().allow_loopback(true).allow_private(true);
        let rule = |s: &str| address_rule(s.parse().unwrap(), &open).map(|r| r.0);
        assert_eq!(rule("127.0.0.1"), None);
        assert_eq!(rule("10.0.0.1"), None);
        assert_eq!(rule("169.254.169.254"), Some("metadata"));
        assert_eq!(rule("169.254.1.1"), Some("link-local"));
    }

    #[test]
    fn placeholders_and_scrubbing() {
        assert_eq!(
            placeholders("a {{secret:A}} b {{secret:B_2}} {{secret:"),
            vec!["A", "B_2"]
        );
        let p = policy().secret("T", "s3cr3t", ["x"]);
        assert_eq!(p.scrub("token s3cr3t!"), "token {{secret:T}}!");
        assert_eq!(substitute(&p, "Bearer {{secret:T}}"), "Bearer s3cr3t");
        assert!(!format!("{p:?}").contains("s3cr3t"));
    }
}
