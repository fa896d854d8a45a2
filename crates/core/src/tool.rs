//! Host tools: the [`Tool`] trait, a registry that validates arguments with
//! JSON Schema, and named tool packs for allowlists.

use async_trait::async_trait;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Instant;
use tokio_util::sync::CancellationToken;

/// What a tool gets besides its arguments.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ToolContext {
    /// The call's id, as in the report.
    pub call_id: u64,
    /// Cancelled when the script no longer needs the result (timeout,
    /// cancellation, `Promise.race` lost, script ended). Long-running tools
    /// should watch it and return promptly.
    pub cancel: CancellationToken,
    /// When the whole script run must end.
    pub deadline: Instant,
    /// The run's approvals, for a tool that must ask before it goes on
    /// ([`ToolContext::ask`]); `None` outside a run.
    pub approver: Option<Approver>,
}

/// What the approver answers: go ahead, or why not.
pub type Approval = Result<(), String>;

/// Asks the run's approvals (its bridge, timeout and record) whether a
/// step of a tool may go ahead: `ask(what, details)` shows the person the
/// tool name `what` with `details` as its arguments.
#[derive(Clone)]
pub struct Approver(Arc<AskFn>);

/// What an [`Approver`] runs.
type AskFn = dyn Fn(String, Value) -> Pin<Box<dyn Future<Output = Approval> + Send>> + Send + Sync;

impl Approver {
    /// An approver that runs `ask`.
    pub fn new<F, Fut>(ask: F) -> Self
    where
        F: Fn(String, Value) -> Fut + Send + Sync + 'static,
        Fut: std::future::Future<Output = Approval> + Send + 'static,
    {
        Approver(Arc::new(move |what, details| Box::pin(ask(what, details))))
    }
}

impl std::fmt::Debug for Approver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Approver")
    }
}

impl ToolContext {
    /// The context of call `call_id`, which must end by `deadline`, with
    /// its own cancellation token: what the facade gives a tool, for
    /// calling a [`Tool`] directly (a tool's own tests).
    ///
    /// ```
    /// use harness_core::{FnTool, Tool, ToolContext};
    /// use serde_json::json;
    /// use std::time::{Duration, Instant};
    ///
    /// # tokio::runtime::Runtime::new().unwrap().block_on(async {
    /// let double = FnTool::new("double", "Doubles n", json!({"type": "object"}),
    ///     |args, ctx| async move {
    ///         assert_eq!(ctx.call_id, 7);
    ///         Ok(json!(args["n"].as_i64().unwrap_or(0) * 2))
    ///     });
    /// let ctx = ToolContext::new(7, Instant::now() + Duration::from_secs(5));
    /// assert_eq!(double.execute(json!({"n": 21}), ctx).await, Ok(json!(42)));
    /// # });
    /// ```
    pub fn new(call_id: u64, deadline: Instant) -> Self {
        ToolContext {
            call_id,
            cancel: CancellationToken::new(),
            deadline,
            approver: None,
        }
    }

    /// With `approver` as the run's approvals.
    pub fn with_approver(mut self, approver: Approver) -> Self {
        self.approver = Some(approver);
        self
    }

    /// Asks the run's approvals whether the step `what` (shown as a tool
    /// name, with `details` as its arguments) may go ahead; the answer is
    /// recorded in the report as any approval is. Outside a run there is no
    /// one to ask: `Err`.
    pub async fn ask(&self, what: &str, details: Value) -> Approval {
        match &self.approver {
            Some(a) => (a.0)(what.to_owned(), details).await,
            None => Err("no approvals to ask outside a run".into()),
        }
    }

    /// With `cancel` as the call's cancellation token.
    pub fn with_cancel(mut self, cancel: CancellationToken) -> Self {
        self.cancel = cancel;
        self
    }
}

/// A tool failure, as the tool reports it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
#[non_exhaustive]
pub struct ToolError {
    /// What went wrong, shown to the script.
    pub message: String,
    /// Set when the tool stopped because its cancellation token fired.
    pub cancelled: bool,
    /// What the process the tool ran wrote to stderr, if it ran one; the
    /// script sees it as `err.stderr` (cut to 2 KiB).
    pub stderr: Option<String>,
}

impl ToolError {
    /// A failure with `message` (ToolExecutionError).
    pub fn new(message: impl Into<String>) -> Self {
        ToolError {
            message: message.into(),
            cancelled: false,
            stderr: None,
        }
    }

    /// With the stderr of the process the tool ran.
    pub fn with_stderr(mut self, stderr: impl Into<String>) -> Self {
        self.stderr = Some(stderr.into());
        self
    }
    /// The tool stopped because its call was cancelled.
    pub fn cancelled() -> Self {
        ToolError {
            message: "cancelled".into(),
            cancelled: true,
            stderr: None,
        }
    }
}

/// A host function a script can call as `tools.NAME(args)`.
#[async_trait]
pub trait Tool: Send + Sync {
    /// The name scripts call it by (`tools.NAME`).
    fn name(&self) -> &str;
    /// One line on what it does, for the model.
    fn description(&self) -> &str;
    /// JSON Schema of the arguments object.
    fn schema(&self) -> &Value;
    /// JSON Schema of the result, where the tool declares one (TypeScript
    /// declarations then type the result; otherwise it is `unknown`).
    fn output_schema(&self) -> Option<&Value> {
        None
    }
    /// Whether this particular call needs a human (or policy) to approve it.
    fn requires_approval(&self, _args: &Value) -> bool {
        false
    }
    /// Whether any call of this tool may need approval: `false` promises
    /// that [`requires_approval`](Tool::requires_approval) is false for
    /// every argument. The harness then does not record where in the
    /// script each call is made (an approval request's `line`, `column`
    /// and `snippet` are its only use), which saves the engine a stack
    /// capture per call. The default, `true`, is always correct.
    fn may_require_approval(&self) -> bool {
        true
    }
    /// Whether the tool's results arrive later from outside (a person, a
    /// webhook, another agent): a call suspends a run that may suspend
    /// and waits for its answer at [`resume`](crate::durable); in any other
    /// run it fails with ToolExecutionError. `execute` is never called.
    fn deferred(&self) -> bool {
        false
    }
    /// Runs one call with arguments already validated against the schema; should watch `ctx.cancel`.
    async fn execute(&self, args: Value, ctx: ToolContext) -> Result<Value, ToolError>;
}

/// A tool whose results arrive from outside ([`Tool::deferred`]): a name,
/// a description and an argument schema.
///
/// ```
/// use harness_core::tool::{DeferredTool, Tool};
/// let t = DeferredTool::new("ask_human", "Asks the user a question", serde_json::json!({"type": "object"}));
/// assert!(t.deferred());
/// ```
#[derive(Debug, Clone)]
pub struct DeferredTool {
    name: String,
    description: String,
    schema: Value,
}

impl DeferredTool {
    /// A deferred tool named `name`.
    pub fn new(name: impl Into<String>, description: impl Into<String>, schema: Value) -> Self {
        DeferredTool {
            name: name.into(),
            description: description.into(),
            schema,
        }
    }
}

#[async_trait]
impl Tool for DeferredTool {
    fn name(&self) -> &str {
        &self.name
    }
    fn description(&self) -> &str {
        &self.description
    }
    fn schema(&self) -> &Value {
        &self.schema
    }
    fn may_require_approval(&self) -> bool {
        false
    }
    fn deferred(&self) -> bool {
        true
    }
    async fn execute(&self, _args: Value, _ctx: ToolContext) -> Result<Value, ToolError> {
        Err(ToolError::new(format!(
            "{} is deferred: its result arrives from outside, and this run cannot suspend",
            self.name
        )))
    }
}

type BoxFuture = Pin<Box<dyn Future<Output = Result<Value, ToolError>> + Send>>;
type Handler = dyn Fn(Value, ToolContext) -> BoxFuture + Send + Sync;
type ApprovalRule = dyn Fn(&Value) -> bool + Send + Sync;

/// A tool made from a closure; the quickest way to define one.
///
/// # Examples
/// ```
/// use harness_core::tool::{FnTool, Tool};
/// use serde_json::json;
///
/// let echo = FnTool::new("echo", "Returns its arguments", json!({"type": "object"}),
///     |args, _ctx| async move { Ok(args) });
/// assert_eq!(echo.name(), "echo");
/// ```
pub struct FnTool {
    name: String,
    description: String,
    schema: Value,
    output_schema: Option<Value>,
    handler: Box<Handler>,
    approval: Option<Box<ApprovalRule>>,
}

impl FnTool {
    /// A tool named `name` whose calls run `f(args, ctx)`.
    pub fn new<F, Fut>(
        name: impl Into<String>,
        description: impl Into<String>,
        schema: Value,
        f: F,
    ) -> Self
    where
        F: Fn(Value, ToolContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Value, ToolError>> + Send + 'static,
    {
        FnTool {
            name: name.into(),
            description: description.into(),
            schema,
            output_schema: None,
            handler: Box::new(move |a, c| Box::pin(f(a, c))),
            approval: None,
        }
    }

    /// Declares the JSON Schema of the tool's result.
    pub fn with_output_schema(mut self, schema: Value) -> Self {
        self.output_schema = Some(schema);
        self
    }

    /// Requires approval for the calls where `rule(args)` is true.
    pub fn requiring_approval(
        mut self,
        rule: impl Fn(&Value) -> bool + Send + Sync + 'static,
    ) -> Self {
        self.approval = Some(Box::new(rule));
        self
    }
}

impl fmt::Debug for FnTool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FnTool").field("name", &self.name).finish()
    }
}

#[async_trait]
impl Tool for FnTool {
    fn name(&self) -> &str {
        &self.name
    }
    fn description(&self) -> &str {
        &self.description
    }
    fn schema(&self) -> &Value {
        &self.schema
    }
    fn output_schema(&self) -> Option<&Value> {
        self.output_schema.as_ref()
    }
    fn requires_approval(&self, args: &Value) -> bool {
        self.approval.as_ref().is_some_and(|r| r(args))
    }
    fn may_require_approval(&self) -> bool {
        self.approval.is_some()
    }
    async fn execute(&self, args: Value, ctx: ToolContext) -> Result<Value, ToolError> {
        (self.handler)(args, ctx).await
    }
}

/// The candidate closest to `name`, if one is close enough to be a likely
/// typo (Damerau-Levenshtein distance at most a third of `name`'s length,
/// at least 1 and at most 3): the "did you mean" of unknown tool names
/// and unknown configuration keys.
///
/// # Examples
/// ```
/// let names = ["read_file".to_owned(), "exec".to_owned()];
/// assert_eq!(harness_core::tool::closest_name("read_fil", &names), Some("read_file"));
/// assert_eq!(harness_core::tool::closest_name("search", &names), None);
/// ```
pub fn closest_name<'a>(name: &str, candidates: &'a [String]) -> Option<&'a str> {
    let limit = (name.chars().count() / 3).clamp(1, 3);
    candidates
        .iter()
        .map(|c| (strsim::damerau_levenshtein(name, c), c))
        .filter(|(d, _)| *d <= limit)
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| c.as_str())
}

/// Names no tool may have: `tools.spawn` (detached tasks), `tools.http`
/// and `tools.mcp` belong to the harness.
pub const HARNESS_TOOL_NAMES: &[&str] = &["spawn", "http", "mcp"];

/// Why a tool could not be registered.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RegistryError {
    #[error("tool name {0:?} is not a valid JavaScript identifier")]
    /// The name is not an identifier of at most 64 characters.
    InvalidName(String),
    #[error(
        "tool name {0:?} is reserved (tools.spawn, tools.http and tools.mcp are the harness's own)"
    )]
    /// The name is one the harness uses itself under `tools.`.
    Reserved(String),
    #[error("tool {0:?} is already registered")]
    /// A tool of that name is registered already.
    Duplicate(String),
    #[error("tool {name:?} has an invalid JSON Schema: {message}")]
    /// The tool's argument schema is not a valid JSON Schema.
    InvalidSchema {
        /// The tool.
        name: String,
        /// What the schema compiler said.
        message: String,
    },
    #[error("tool pack {pack:?} names unknown tool {tool:?}")]
    /// A pack names a tool that is not registered.
    UnknownPackMember {
        /// The pack.
        pack: String,
        /// The tool it names.
        tool: String,
    },
}

pub(crate) struct Registered {
    pub(crate) tool: Arc<dyn Tool>,
    pub(crate) validator: jsonschema::Validator,
}

impl Registered {
    /// Checks `args` against the schema: up to 8 problems, each with its
    /// JSON pointer, joined by "; ".
    pub(crate) fn check(&self, args: &Value) -> Result<(), String> {
        let problems: Vec<String> = self
            .validator
            .iter_errors(args)
            .take(8)
            .map(|e| {
                let path = e.instance_path().to_string();
                if path.is_empty() {
                    e.to_string()
                } else {
                    format!("{path}: {e}")
                }
            })
            .collect();
        if problems.is_empty() {
            Ok(())
        } else {
            Err(problems.join("; "))
        }
    }
}

/// Every tool the host offers, with compiled argument validators and named packs.
#[derive(Default)]
pub struct ToolRegistry {
    tools: BTreeMap<String, Registered>,
    packs: BTreeMap<String, BTreeSet<String>>,
}

impl fmt::Debug for ToolRegistry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ToolRegistry")
            .field("tools", &self.tools.keys().collect::<Vec<_>>())
            .field("packs", &self.packs)
            .finish()
    }
}

/// Names that would clash with how JS treats the `tools` object.
const CLASHING_NAMES: &[&str] = &["then", "constructor", "__proto__", "toJSON", "prototype"];

fn valid_identifier(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_' || c == '$')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '$')
        && name.len() <= 64
        && !CLASHING_NAMES.contains(&name)
}

/// `mcp.SERVER.TOOL`: an upstream MCP server's tool.
fn valid_mcp_name(name: &str) -> bool {
    let Some((server, tool)) = name
        .strip_prefix("mcp.")
        .and_then(|rest| rest.split_once('.'))
    else {
        return false;
    };
    valid_identifier(server)
        && !tool.is_empty()
        && tool.chars().count() <= 128
        && !tool.chars().any(char::is_control)
}

impl ToolRegistry {
    /// No tools.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a tool, compiling its schema once.
    pub fn register(&mut self, tool: impl Tool + 'static) -> Result<&mut Self, RegistryError> {
        self.register_arc(Arc::new(tool))
    }

    /// Registers a shared tool.
    pub fn register_arc(&mut self, tool: Arc<dyn Tool>) -> Result<&mut Self, RegistryError> {
        if HARNESS_TOOL_NAMES.contains(&tool.name()) || tool.name().starts_with("mcp.") {
            return Err(RegistryError::Reserved(tool.name().to_owned()));
        }
        self.insert(tool)
    }

    /// Registers one of the harness's own tools under a reserved name:
    /// `http` (how the facade turns on `tools.http` once the host has set
    /// an egress policy) or `mcp.SERVER.TOOL` (an upstream MCP server's
    /// tool, called as `tools.mcp.SERVER.TOOL`; `SERVER` is an identifier,
    /// `TOOL` the upstream's name as it is, up to 128 characters). Hosts
    /// register their tools with [`ToolRegistry::register`]; this call
    /// exists so that a reserved name only ever holds the harness's own.
    pub fn register_harness_tool(
        &mut self,
        tool: Arc<dyn Tool>,
    ) -> Result<&mut Self, RegistryError> {
        if tool.name() != "http" && !valid_mcp_name(tool.name()) {
            return Err(RegistryError::InvalidName(tool.name().to_owned()));
        }
        self.insert(tool)
    }

    fn insert(&mut self, tool: Arc<dyn Tool>) -> Result<&mut Self, RegistryError> {
        let name = tool.name().to_owned();
        if !valid_identifier(&name) && !valid_mcp_name(&name) {
            return Err(RegistryError::InvalidName(name));
        }
        if self.tools.contains_key(&name) {
            return Err(RegistryError::Duplicate(name));
        }
        let validator =
            jsonschema::validator_for(tool.schema()).map_err(|e| RegistryError::InvalidSchema {
                name: name.clone(),
                message: e.to_string(),
            })?;
        self.tools.insert(name, Registered { tool, validator });
        Ok(self)
    }

    /// Names a group of registered tools, so an allowlist can name the group.
    pub fn define_pack<I, S>(&mut self, pack: &str, members: I) -> Result<&mut Self, RegistryError>
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let members: BTreeSet<String> = members.into_iter().map(Into::into).collect();
        if let Some(missing) = members.iter().find(|m| !self.tools.contains_key(*m)) {
            return Err(RegistryError::UnknownPackMember {
                pack: pack.to_owned(),
                tool: missing.clone(),
            });
        }
        self.packs.insert(pack.to_owned(), members);
        Ok(self)
    }

    /// Every tool's name, in order.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.tools.keys().map(String::as_str)
    }

    /// The tool named `name`.
    pub fn get(&self, name: &str) -> Option<&Arc<dyn Tool>> {
        self.tools.get(name).map(|r| &r.tool)
    }

    pub(crate) fn entry(&self, name: &str) -> Option<&Registered> {
        self.tools.get(name)
    }

    /// Every pack's name, in order.
    pub fn pack_names(&self) -> impl Iterator<Item = &str> {
        self.packs.keys().map(String::as_str)
    }

    /// The tools of the pack named `name`.
    pub fn pack(&self, name: &str) -> Option<&BTreeSet<String>> {
        self.packs.get(name)
    }

    /// Validates arguments against the tool's schema; errors list every
    /// violation with its JSON pointer.
    pub fn validate(&self, name: &str, args: &Value) -> Result<(), String> {
        match self.tools.get(name) {
            Some(r) => r.check(args),
            None => Err(format!("unknown tool {name:?}")),
        }
    }
}

/// Which registered tools a script may see. Entries name tools or packs.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Allowlist {
    /// Every registered tool.
    #[default]
    All,
    /// Only these tools and packs.
    Only(BTreeSet<String>),
}

impl Allowlist {
    /// Only these tools and packs.
    pub fn only<I, S>(names: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Allowlist::Only(names.into_iter().map(Into::into).collect())
    }

    /// The tool names this allowlist grants out of `registry`, sorted.
    pub fn resolve(&self, registry: &ToolRegistry) -> Vec<String> {
        match self {
            Allowlist::All => registry.names().map(str::to_owned).collect(),
            Allowlist::Only(entries) => {
                let mut out = BTreeSet::new();
                for e in entries {
                    if let Some(pack) = registry.pack(e) {
                        out.extend(pack.iter().cloned());
                    } else if registry.get(e).is_some() {
                        out.insert(e.clone());
                    }
                }
                out.into_iter().collect()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn echo(name: &str) -> FnTool {
        FnTool::new(
            name,
            "echo",
            json!({"type":"object","properties":{"n":{"type":"integer"}},"required":["n"],"additionalProperties":false}),
            |a, _| async move { Ok(a) },
        )
    }

    #[test]
    fn register_validates_names_and_schemas() {
        let mut r = ToolRegistry::new();
        r.register(echo("echo")).unwrap();
        assert_eq!(
            r.register(echo("echo")).unwrap_err(),
            RegistryError::Duplicate("echo".into())
        );
        assert!(matches!(
            r.register(echo("bad-name")),
            Err(RegistryError::InvalidName(_))
        ));
        assert!(matches!(
            r.register(echo("then")),
            Err(RegistryError::InvalidName(_))
        ));
        let bad = FnTool::new("bad", "", json!({"type": 12}), |a, _| async move { Ok(a) });
        assert!(matches!(
            r.register(bad),
            Err(RegistryError::InvalidSchema { .. })
        ));
    }

    #[test]
    fn validation_reports_every_problem_with_its_path() {
        let mut r = ToolRegistry::new();
        r.register(echo("echo")).unwrap();
        assert!(r.validate("echo", &json!({"n": 1})).is_ok());
        let err = r
            .validate("echo", &json!({"n": "x", "extra": 1}))
            .unwrap_err();
        assert!(err.contains("/n"), "{err}");
        assert!(err.contains("extra"), "{err}");
    }

    #[test]
    fn allowlist_resolves_packs() {
        let mut r = ToolRegistry::new();
        r.register(echo("a"))
            .unwrap()
            .register(echo("b"))
            .unwrap()
            .register(echo("c"))
            .unwrap();
        r.define_pack("ab", ["a", "b"]).unwrap();
        assert!(r.define_pack("x", ["zzz"]).is_err());
        assert_eq!(Allowlist::only(["ab"]).resolve(&r), vec!["a", "b"]);
        assert_eq!(Allowlist::only(["c", "nope"]).resolve(&r), vec!["c"]);
        assert_eq!(Allowlist::All.resolve(&r).len(), 3);
    }
}
