//! The audit log: one JSON line per run, for "persist script results for
//! an audit trail". Each line is built whole and appended with one write
//! to a file opened in append mode, so a crash (or a kill) leaves the
//! file with whole lines only: the run's line is there, or it is not.

use crate::ExecutionReport;
use serde_json::{json, Value};
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// An append-only JSON-lines file of finished runs.
#[derive(Debug)]
pub struct AuditLog {
    path: PathBuf,
    file: Mutex<File>,
}

impl AuditLog {
    /// Opens (creating it if needed) `path` for appending.
    pub fn open(path: impl AsRef<Path>) -> std::io::Result<Self> {
        let path = path.as_ref().to_path_buf();
        let file = OpenOptions::new().create(true).append(true).open(&path)?;
        Ok(AuditLog {
            path,
            file: Mutex::new(file),
        })
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The line for one run: script id, SHA-256 of the source, provider,
    /// engine, outcome, durations, tool calls with outcomes, approval
    /// requests and answers. No source, no tool arguments or results.
    pub fn line(source: &str, provider: Option<&str>, report: &ExecutionReport) -> Value {
        let at_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0);
        json!({
            "at_unix_ms": at_ms,
            "script_id": report.script_id,
            "sha256": harness_respond::prepare::sha256_hex(source),
            "provider": provider,
            "engine": report.metrics.engine,
            "outcome": report.code().map_or("ok", |c| c.as_str()),
            "retried": report.retried,
            "duration_ms": report.metrics.duration_ms,
            "tool_calls": report.tool_calls.iter().map(|c| json!({
                "id": c.id,
                "tool": c.tool,
                "status": c.status,
                "duration_ms": c.duration_ms,
                "error": c.error.as_ref().map(|e| e.code),
            })).collect::<Vec<_>>(),
            "approvals": report.approvals.iter().map(|a| json!({
                "request_id": a.request_id,
                "call_id": a.call_id,
                "task_id": a.task_id,
                "tool": a.tool,
                "outcome": a.outcome,
                "reason": a.reason,
                "duration_ms": a.duration_ms,
            })).collect::<Vec<_>>(),
            "detached_tasks": report.detached_tasks.iter().map(|t| json!({
                "id": t.id, "tool": t.tool, "status": t.status,
            })).collect::<Vec<_>>(),
        })
    }

    /// Appends one run's line. Errors are logged, never fatal to the run.
    pub fn record(&self, source: &str, provider: Option<&str>, report: &ExecutionReport) {
        let mut line = Self::line(source, provider, report).to_string();
        line.push('\n');
        let written = match self.file.lock() {
            // One write of the whole line: never half a line.
            Ok(mut f) => f.write_all(line.as_bytes()),
            Err(_) => Err(std::io::Error::other("audit log lock poisoned")),
        };
        if let Err(e) = written {
            tracing::error!(path = %self.path.display(), error = %e, "cannot append to the audit log");
        }
    }
}
