//! Metrics (through the `metrics` facade) and tracing for operators. The
//! names are a contract: dashboards are built on them.
//!
//! | name | kind | labels |
//! |---|---|---|
//! | `script_execution_duration_ms` | histogram | `engine`, `outcome` (`ok` or the error code) |
//! | `script_runs_total` | counter | `engine`, `outcome` |
//! | `tool_call_duration_ms` | histogram | `tool`, `outcome` |
//! | `tool_calls_total` | counter | `tool`, `outcome` |
//! | `orphaned_promise_count` | counter | |
//! | `approval_request_count` | counter | `tool` |
//! | `approval_denial_count` | counter | `tool`, `outcome` (`denied`, `timed_out`, `cancelled`) |
//! | `detached_tasks_running` | gauge | |
//! | `worker_restarts_total` | counter | `engine` |
//! | `keep_warm_rehearsals_total` | counter | `engine` |
//!
//! Nothing is recorded unless the host installs a recorder (a Prometheus
//! exporter: `harness::telemetry`).

use crate::error::ErrorCode;
use crate::report::{CallStatus, ExecutionReport};

/// `ok`, or the error code.
pub(crate) fn outcome(code: Option<ErrorCode>) -> &'static str {
    code.map_or("ok", ErrorCode::as_str)
}

/// A report's outcome label: `suspended`, `ok`, or the error code.
pub(crate) fn report_outcome(report: &ExecutionReport) -> &'static str {
    if report.suspension.is_some() {
        return "suspended";
    }
    outcome(report.code())
}

/// What a resumed run's report holds that the suspended run's report
/// counted already: its run time, and the calls that had ended.
#[derive(Debug, Default)]
pub(crate) struct Counted {
    pub(crate) ms: f64,
    pub(crate) calls: Vec<u64>,
}

/// One finished run (or part of one, up to a suspension): its duration,
/// outcome and tool calls, less what `before` counted.
pub(crate) fn record_run(report: &ExecutionReport, orphans: usize, before: &Counted) {
    let engine = report.metrics.engine.clone();
    let out = report_outcome(report);
    metrics::histogram!("script_execution_duration_ms", "engine" => engine.clone(), "outcome" => out)
        .record((report.metrics.duration_ms - before.ms).max(0.0));
    metrics::counter!("script_runs_total", "engine" => engine, "outcome" => out).increment(1);
    // One pair of handles per tool and outcome: a run of many calls to one
    // tool builds its labels once.
    let mut handles: Vec<(&str, &'static str, ToolCallMetrics)> = Vec::new();
    for c in &report.tool_calls {
        // A call waiting on an answer is counted once it ends.
        if c.status == CallStatus::Pending || before.calls.contains(&c.id) {
            continue;
        }
        let out = match c.status {
            CallStatus::Ok => "ok",
            CallStatus::Cancelled => "cancelled",
            CallStatus::Detached => "detached",
            _ => outcome(c.error.as_ref().map(|e| e.code)),
        };
        let at = match handles.iter().position(|h| h.0 == c.tool && h.1 == out) {
            Some(at) => at,
            None => {
                handles.push((&c.tool, out, ToolCallMetrics::new(&c.tool, out)));
                handles.len() - 1
            }
        };
        handles[at].2.record(c.duration_ms);
    }
    if orphans > 0 {
        metrics::counter!("orphaned_promise_count").increment(orphans as u64);
    }
}

/// The metrics of a tool's calls with one outcome.
struct ToolCallMetrics {
    duration: metrics::Histogram,
    total: metrics::Counter,
}

impl ToolCallMetrics {
    fn new(tool: &str, outcome: &'static str) -> Self {
        ToolCallMetrics {
            duration: metrics::histogram!("tool_call_duration_ms", "tool" => tool.to_owned(), "outcome" => outcome),
            total: metrics::counter!("tool_calls_total", "tool" => tool.to_owned(), "outcome" => outcome),
        }
    }

    fn record(&self, duration_ms: f64) {
        self.duration.record(duration_ms);
        self.total.increment(1);
    }
}

/// One finished tool call (of a run, or a detached task).
pub(crate) fn record_tool_call(tool: &str, outcome: &'static str, duration_ms: f64) {
    ToolCallMetrics::new(tool, outcome).record(duration_ms);
}
