//! Built-in tools, confined to one root directory: `read_file`,
//! `write_file`, `list_dir` (pack `fs`) and `exec` (pack `shell`, always
//! requires approval).
//!
//! Confinement is done by `cap-std`: every path is resolved inside an open
//! directory handle, so `..`, absolute paths and symlinks that lead out of
//! the root are refused by construction rather than by string checks.
//!
//! # Examples
//! ```
//! # tokio::runtime::Runtime::new().unwrap().block_on(async {
//! let root = tempfile::tempdir().unwrap();
//! let tools = harness::builtin::registry(root.path()).unwrap();
//! let h = harness::Harness::builder().tools(tools).build().unwrap();
//! let r = h.run(r#"await tools.write_file({path: "a/b.txt", content: "hi"});
//!                  return (await tools.read_file({path: "a/b.txt"})).content"#).await;
//! assert_eq!(r.value, Some(serde_json::json!("hi")));
//! let r = h.run(r#"return await tools.read_file({path: "../etc/passwd"})"#).await;
//! assert_eq!(r.error.unwrap().code, harness::ErrorCode::ToolExecutionError);
//! # });
//! ```

use crate::rooted::{blocking, io_error, read_regular, relative, write_atomic};
use cap_std::fs::Dir;
use harness_core::tool::{FnTool, ToolError, ToolRegistry};
use serde_json::{json, Value};
use std::io;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::AsyncReadExt;

#[cfg(target_os = "linux")]
use crate::confine::Jail;

/// Elsewhere than Linux: the child's own process group, nothing more.
#[cfg(not(target_os = "linux"))]
struct Jail;

#[cfg(not(target_os = "linux"))]
impl Jail {
    fn new(_: &Path, _: bool, _: bool) -> Jail {
        Jail
    }
    fn landlock_abi(&self) -> Result<i32, &str> {
        Err("no confinement on this OS")
    }
    fn holds_the_group(&self) -> bool {
        false
    }
    fn apply(self, cmd: &mut tokio::process::Command) {
        #[cfg(unix)]
        cmd.process_group(0);
        #[cfg(not(unix))]
        let _ = cmd;
    }
}

/// Largest file `read_file` returns.
pub const MAX_READ_BYTES: u64 = 1024 * 1024;
/// Output kept from each of `exec`'s stdout and stderr.
pub const MAX_EXEC_OUTPUT_BYTES: usize = 256 * 1024;
/// `exec`'s timeout when the script gives none.
pub const DEFAULT_EXEC_TIMEOUT_MS: u64 = 10_000;

/// How `exec` runs its children.
///
/// ```
/// let p = harness::builtin::ExecPolicy::default();
/// assert!(p.confine && !p.allow_network);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ExecPolicy {
    /// Confine children where the OS allows (Linux Landlock): writes only
    /// under the root, and no TCP unless `allow_network`. Where it cannot,
    /// children run unconfined and each result says `confined: false`.
    pub confine: bool,
    /// Let confined children connect and bind TCP sockets.
    pub allow_network: bool,
    /// The host's environment variables a child gets (when the host has
    /// them); `HOME` is always the root, and nothing else of the host's
    /// environment reaches it.
    pub env_allow: Vec<String>,
    /// Variables never passed on, even when allowed: the configured
    /// secrets' (`[http.secrets.NAME] env`).
    pub env_withheld: Vec<String>,
}

/// [`ExecPolicy::env_allow`] by default.
pub const DEFAULT_EXEC_ENV: &[&str] = &["PATH", "LANG", "TERM"];

impl Default for ExecPolicy {
    fn default() -> Self {
        ExecPolicy {
            confine: true,
            allow_network: false,
            env_allow: DEFAULT_EXEC_ENV.iter().map(|s| (*s).to_owned()).collect(),
            env_withheld: Vec::new(),
        }
    }
}

impl ExecPolicy {
    /// Whether to confine children.
    pub fn with_confine(mut self, confine: bool) -> Self {
        self.confine = confine;
        self
    }
    /// Whether confined children may use the network.
    pub fn with_allow_network(mut self, allow: bool) -> Self {
        self.allow_network = allow;
        self
    }
    /// The host's variables children get ([`ExecPolicy::env_allow`]).
    pub fn with_env_allow(mut self, names: impl IntoIterator<Item = impl Into<String>>) -> Self {
        self.env_allow = names.into_iter().map(Into::into).collect();
        self
    }
    /// Variables never passed on ([`ExecPolicy::env_withheld`]).
    pub fn with_env_withheld(mut self, names: impl IntoIterator<Item = impl Into<String>>) -> Self {
        self.env_withheld = names.into_iter().map(Into::into).collect();
        self
    }

    /// The environment a child starts with: the allowed variables the
    /// host has, and `HOME` set to `root`.
    fn environment(&self, root: &Path) -> Vec<(String, std::ffi::OsString)> {
        let mut env: Vec<(String, std::ffi::OsString)> = self
            .env_allow
            .iter()
            .filter(|n| n.as_str() != "HOME" && !self.env_withheld.contains(n))
            .filter_map(|n| Some((n.clone(), std::env::var_os(n)?)))
            .collect();
        env.push(("HOME".to_owned(), root.as_os_str().to_owned()));
        env
    }
}

/// Opens `root` and returns a registry with the four built-in tools and the
/// packs `fs` and `shell`, and the coding pack's tools ([`crate::coding`]:
/// packs `core-codex`, `anthropic-standard`, `file-ops`); `exec` under the
/// default [`ExecPolicy`] (confined, no network).
pub fn registry(root: &Path) -> io::Result<ToolRegistry> {
    registry_with(root, ExecPolicy::default())
}

/// [`registry`] with `exec` under `exec_policy`.
pub fn registry_with(root: &Path, exec_policy: ExecPolicy) -> io::Result<ToolRegistry> {
    let dir = Arc::new(Dir::open_ambient_dir(root, cap_std::ambient_authority())?);
    let root_path = root.canonicalize()?;
    let mut r = ToolRegistry::new();
    let reg = |r: &mut ToolRegistry, t: FnTool| {
        r.register(t)
            .map(|_| ())
            .map_err(|e| io::Error::other(e.to_string()))
    };
    reg(&mut r, read_file(dir.clone()))?;
    reg(&mut r, write_file(dir.clone()))?;
    reg(&mut r, list_dir(dir.clone()))?;
    reg(&mut r, exec(root_path.clone(), exec_policy))?;
    r.define_pack("fs", ["read_file", "write_file", "list_dir"])
        .and_then(|r| r.define_pack("shell", ["exec"]))
        .map_err(|e| io::Error::other(e.to_string()))?;
    crate::coding::register(&mut r, dir)?;
    Ok(r)
}

fn path_schema() -> Value {
    json!({"type": "string", "minLength": 1, "maxLength": 4096})
}

fn arg_str(args: &Value, key: &str) -> String {
    args.get(key)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned()
}

/// The body of a file tool: the open root, the path as given, the path
/// checked by [`relative`], and all arguments.
type FsOp = fn(&Dir, &str, &Path, &Value) -> Result<Value, ToolError>;

/// A file tool taking `{path, …}`: checks the path, then runs `op` on the
/// blocking pool (file I/O must not stall the async runtime).
fn fs_tool(name: &str, description: &str, extra: Value, dir: Arc<Dir>, op: FsOp) -> FnTool {
    let mut properties = json!({"path": path_schema()});
    let mut required = vec!["path".to_owned()];
    if let (Some(props), Value::Object(more)) = (properties.as_object_mut(), extra) {
        for (k, v) in more {
            required.push(k.clone());
            props.insert(k, v);
        }
    }
    let schema = json!({"type": "object", "properties": properties,
                        "required": required, "additionalProperties": false});
    FnTool::new(name, description, schema, move |args, _ctx| {
        let dir = dir.clone();
        async move {
            blocking(move || {
                let p = arg_str(&args, "path");
                let rel = relative(&p)?;
                op(&dir, &p, &rel, &args)
            })
            .await
        }
    })
}

fn read_file(dir: Arc<Dir>) -> FnTool {
    fs_tool(
        "read_file",
        "Reads a UTF-8 text file (at most 1 MiB) under the root. Returns {path, content}.",
        json!({}),
        dir,
        |dir, p, rel, _| {
            let meta = dir.metadata(rel).map_err(|e| io_error(e, p))?;
            if meta.is_dir() {
                return Err(ToolError::new(format!("{p} is a directory; use list_dir")));
            }
            if meta.len() > MAX_READ_BYTES {
                return Err(ToolError::new(format!(
                    "{p} is {} bytes; read_file reads at most {MAX_READ_BYTES} bytes",
                    meta.len()
                )));
            }
            let bytes = read_regular(dir, rel, p, MAX_READ_BYTES)?;
            let content = String::from_utf8(bytes)
                .map_err(|_| ToolError::new(format!("{p} is not UTF-8 text")))?;
            Ok(json!({"path": p, "content": content}))
        },
    )
    .with_output_schema(json!({"type": "object",
        "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
        "required": ["path", "content"], "additionalProperties": false}))
}

fn write_file(dir: Arc<Dir>) -> FnTool {
    fs_tool(
        "write_file",
        "Writes a UTF-8 text file under the root, creating parent directories. \
         The write is atomic: readers see the old or the new file, never half of it. \
         Returns {path, bytes}.",
        json!({"content": {"type": "string"}}),
        dir,
        |dir, p, rel, args| {
            let content = arg_str(args, "content");
            write_atomic(dir, p, rel, content.as_bytes())?;
            Ok(json!({"path": p, "bytes": content.len()}))
        },
    )
    .with_output_schema(json!({"type": "object",
        "properties": {"path": {"type": "string"}, "bytes": {"type": "integer"}},
        "required": ["path", "bytes"], "additionalProperties": false}))
}

fn list_dir(dir: Arc<Dir>) -> FnTool {
    fs_tool(
        "list_dir",
        "Lists a directory under the root (\".\" for the root itself). \
         Returns {path, entries: [{name, type: file|dir|symlink|other, size}]} sorted by name.",
        json!({}),
        dir,
        |dir, p, rel, _| {
            let mut entries = Vec::new();
            for entry in dir.read_dir(rel).map_err(|e| io_error(e, p))? {
                let entry = entry.map_err(|e| io_error(e, p))?;
                let ft = entry.file_type().map_err(|e| io_error(e, p))?;
                let kind = if ft.is_symlink() {
                    "symlink"
                } else if ft.is_dir() {
                    "dir"
                } else if ft.is_file() {
                    "file"
                } else {
                    "other"
                };
                let size = if ft.is_file() {
                    entry.metadata().map(|m| m.len()).unwrap_or(0)
                } else {
                    0
                };
                entries.push(json!({
                    "name": entry.file_name().to_string_lossy(),
                    "type": kind,
                    "size": size,
                }));
                if entries.len() >= 10_000 {
                    break;
                }
            }
            entries.sort_by(|a, b| a["name"].as_str().cmp(&b["name"].as_str()));
            Ok(json!({"path": p, "entries": entries}))
        },
    )
    .with_output_schema(json!({"type": "object",
        "properties": {"path": {"type": "string"}, "entries": {"type": "array", "items": {"type": "object",
            "properties": {"name": {"type": "string"}, "type": {"enum": ["file", "dir", "symlink", "other"]},
                           "size": {"type": "integer"}},
            "required": ["name", "type", "size"], "additionalProperties": false}}},
        "required": ["path", "entries"], "additionalProperties": false}))
}

fn exec(root: PathBuf, policy: ExecPolicy) -> FnTool {
    FnTool::new(
        "exec",
        "Runs a command (argv list, no shell) in the root directory, or in `cwd` under it, \
         in a session of its own with no terminal and stdin empty. Its environment is PATH, \
         LANG and TERM from the host (as configured), HOME set to the root, and `env`. Always \
         needs approval. Where the OS allows, the child may write only under the root and has \
         no network (`confined: true`). Everything it starts is killed when it exits, times \
         out or is cancelled. Returns {exitCode, stdout, stderr, aggregatedOutput, \
         stdoutTruncated, stderrTruncated, timedOut, durationMs, confined, landlockAbi, \
         groupHeld}; each stream keeps at most 256 KiB, then `...<truncated>`.",
        json!({"type": "object",
               "properties": {
                   "command": {"type": "array", "items": {"type": "string"}, "minItems": 1, "maxItems": 256,
                               "description": "The program and its arguments; no shell."},
                   "cwd": {"type": "string", "minLength": 1, "maxLength": 4096,
                           "description": "Directory to run in, relative to the root (default: the root)."},
                   "env": {"type": "object", "additionalProperties": {"type": "string"},
                           "description": "Variables added to the child's environment."},
                   "timeoutMs": {"type": "integer", "minimum": 1, "maximum": 600000,
                                 "description": "Kill the process group after this long (default 10000)."}
               },
               "required": ["command"], "additionalProperties": false}),
        move |args, ctx| {
            let root = root.clone();
            let policy = policy.clone();
            async move {
                let argv: Vec<String> = args["command"]
                    .as_array()
                    .map(|a| a.iter().filter_map(|v| v.as_str().map(str::to_owned)).collect())
                    .unwrap_or_default();
                let timeout = Duration::from_millis(
                    args.get("timeoutMs")
                        .and_then(Value::as_u64)
                        .unwrap_or(DEFAULT_EXEC_TIMEOUT_MS),
                );
                let cwd = match args.get("cwd").and_then(Value::as_str) {
                    None => root.clone(),
                    Some(c) => {
                        let full = root
                            .join(relative(c)?)
                            .canonicalize()
                            .map_err(|e| io_error(e, c))?;
                        if !full.starts_with(&root) || !full.is_dir() {
                            return Err(ToolError::new(format!(
                                "cwd {c} is not a directory inside the root"
                            )));
                        }
                        full
                    }
                };
                let env: Vec<(String, String)> = args
                    .get("env")
                    .and_then(Value::as_object)
                    .map(|m| {
                        m.iter()
                            .filter_map(|(k, v)| v.as_str().map(|v| (k.clone(), v.to_owned())))
                            .collect()
                    })
                    .unwrap_or_default();
                let until = (Instant::now() + timeout).min(ctx.deadline);
                let jail = Jail::new(&root, policy.confine, policy.allow_network);
                let mut full_env = policy.environment(&root);
                full_env.extend(env.into_iter().map(|(k, v)| (k, v.into())));
                run_command(&cwd, &argv, &full_env, jail, until, &ctx.cancel).await
            }
        },
    )
    .requiring_approval(|_| true)
    .with_output_schema(json!({"type": "object",
        "properties": {"exitCode": {"type": ["integer", "null"]}, "stdout": {"type": "string"},
                       "stderr": {"type": "string"}, "aggregatedOutput": {"type": "string"},
                       "stdoutTruncated": {"type": "boolean"}, "stderrTruncated": {"type": "boolean"},
                       "timedOut": {"type": "boolean"}, "durationMs": {"type": "number"},
                       "confined": {"type": "boolean",
                                    "description": "Whether the child was confined (Linux Landlock: writes only under the root, no TCP unless the host allows it). False where the OS cannot, or the host turned confinement off."},
                       "landlockAbi": {"type": ["integer", "null"],
                                       "description": "The Landlock ABI the child was confined at (5 and up: no device ioctls outside the root; 6 and up: no signals or abstract sockets outside the jail), null when not confined."},
                       "groupHeld": {"type": "boolean",
                                     "description": "Whether no descendant could leave the child's process group (seccomp), so that killing the group at the end of the call killed all of them."}},
        "required": ["exitCode", "stdout", "stderr", "aggregatedOutput", "stdoutTruncated",
                     "stderrTruncated", "timedOut", "durationMs", "confined"],
        "additionalProperties": false}))
}

/// What one stream of the child produced, kept up to the cap.
#[derive(Default)]
struct Captured {
    kept: Vec<u8>,
    truncated: bool,
}

/// Marks a stream cut at [`MAX_EXEC_OUTPUT_BYTES`].
const TRUNCATED: &str = "...<truncated>";

impl Captured {
    /// Keeps what fits (the marker included, the whole string stays within
    /// the cap) and returns it.
    fn push<'a>(&mut self, chunk: &'a [u8]) -> &'a [u8] {
        let cap = MAX_EXEC_OUTPUT_BYTES - TRUNCATED.len();
        let room = cap.saturating_sub(self.kept.len());
        if chunk.len() > room {
            self.truncated = true;
        }
        let take = &chunk[..chunk.len().min(room)];
        self.kept.extend_from_slice(take);
        take
    }

    fn text(&self) -> String {
        let mut s = String::from_utf8_lossy(&self.kept).into_owned();
        if self.truncated {
            s.push_str(TRUNCATED);
        }
        s
    }
}

/// Kills the child's whole process group (it was started as its leader;
/// `pgid` is its pid, taken at spawn: tokio forgets it once reaped).
// One FFI call with no memory involved; std has no killpg.
#[allow(unsafe_code)]
fn kill_group(pgid: Option<u32>) {
    #[cfg(unix)]
    if let Some(pid) = pgid {
        // SAFETY: killpg only sends a signal; the group is the child's own.
        unsafe {
            libc::killpg(pid as libc::pid_t, libc::SIGKILL);
        }
    }
    #[cfg(not(unix))]
    let _ = pgid;
}

async fn run_command(
    cwd: &Path,
    argv: &[String],
    env: &[(String, std::ffi::OsString)],
    jail: Jail,
    mut until: Instant,
    cancel: &harness_core::CancellationToken,
) -> Result<Value, ToolError> {
    let started = Instant::now();
    let (program, rest) = argv
        .split_first()
        .ok_or_else(|| ToolError::new("command must not be empty"))?;
    let mut cmd = tokio::process::Command::new(program);
    cmd.args(rest)
        .current_dir(cwd)
        .env_clear()
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let landlock_abi = match jail.landlock_abi() {
        Ok(abi) => Some(abi),
        Err(why) => {
            tracing::debug!(%why, "exec runs without Landlock");
            None
        }
    };
    let confined = landlock_abi.is_some();
    let held = jail.holds_the_group();
    jail.apply(&mut cmd);
    let mut child = cmd.spawn().map_err(|e| {
        let how = if confined { " (confined)" } else { "" };
        ToolError::new(format!("could not start {program}{how}: {e}"))
    })?;
    let pgid = child.id();
    let mut out = child.stdout.take().expect("piped");
    let mut err = child.stderr.take().expect("piped");
    let (mut so, mut se, mut agg) = (Captured::default(), Captured::default(), Vec::new());
    let (mut so_open, mut se_open) = (true, true);
    let (mut bo, mut be) = ([0u8; 8192], [0u8; 8192]);
    let mut timed_out = false;
    let mut status = None;
    // Read both streams as they come (aggregatedOutput keeps their order)
    // until the child exits and both are closed, or time runs out.
    while so_open || se_open || status.is_none() {
        tokio::select! {
            n = out.read(&mut bo), if so_open => match n {
                Ok(0) | Err(_) => so_open = false,
                Ok(n) => agg.extend_from_slice(so.push(&bo[..n])),
            },
            n = err.read(&mut be), if se_open => match n {
                Ok(0) | Err(_) => se_open = false,
                Ok(n) => agg.extend_from_slice(se.push(&be[..n])),
            },
            s = child.wait(), if status.is_none() => {
                status = Some(s.map_err(|e| ToolError::new(format!("waiting for {program}: {e}")))?);
                // What the child left running in its group would hold the
                // pipes open: it goes now, and the rest is drained briefly.
                kill_group(pgid);
                until = until.min(Instant::now() + Duration::from_millis(250));
            }
            _ = tokio::time::sleep_until(until.into()), if status.is_none() || so_open || se_open => {
                if status.is_some() {
                    break;
                }
                timed_out = true;
                break;
            }
            _ = cancel.cancelled() => {
                kill_group(pgid);
                let _ = child.wait().await;
                return Err(ToolError::cancelled());
            }
        }
    }
    if timed_out {
        kill_group(pgid);
        let _ = child.kill().await;
        status = child.wait().await.ok();
    }
    let mut both = Captured::default();
    both.push(&agg);
    both.truncated |= so.truncated || se.truncated;
    let aggregated = both.text();
    Ok(json!({
        "exitCode": status.and_then(|s| s.code()),
        "stdout": so.text(),
        "stderr": se.text(),
        "aggregatedOutput": aggregated,
        "stdoutTruncated": so.truncated,
        "stderrTruncated": se.truncated,
        "timedOut": timed_out,
        "durationMs": started.elapsed().as_secs_f64() * 1000.0,
        "confined": confined,
        "landlockAbi": landlock_abi,
        "groupHeld": held,
    }))
}
