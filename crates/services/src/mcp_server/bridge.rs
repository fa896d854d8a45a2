//! What a run sends to the MCP client while it runs: approval requests
//! (elicitation), progress notifications and console lines as log
//! messages.

// MCP logging: see the note in mod.rs.
#![allow(deprecated)]

use super::*;
use rmcp::model::{LoggingLevel, LoggingMessageNotificationParam, ProgressToken};
use std::sync::Mutex;

/// Asks the MCP client to approve a call (form elicitation with one
/// boolean); a decline, a cancel or no answer denies.
pub(super) struct AskClient(pub(super) rmcp::service::Peer<RoleServer>);

#[async_trait::async_trait]
impl harness::ApprovalBridge for AskClient {
    async fn request(&self, req: &harness::ApprovalRequest) -> harness::ApprovalDecision {
        let mut message = format!(
            "Allow the script to call `{}` with arguments {}?",
            req.tool, req.args
        );
        match (req.line, req.column) {
            (Some(l), Some(c)) => message.push_str(&format!(" (line {l}, column {c})")),
            (Some(l), None) => message.push_str(&format!(" (line {l})")),
            _ => {}
        }
        if let Some(snippet) = &req.snippet {
            message.push_str("\n\n");
            message.push_str(snippet);
        }
        let schema = serde_json::from_value(json!({"type": "object",
            "properties": {"approve": {"type": "boolean", "title": "Allow this call", "default": false}},
            "required": ["approve"]}));
        let Ok(schema) = schema else {
            return harness::ApprovalDecision::Denied {
                reason: Some("cannot build the approval form".into()),
            };
        };
        let params = rmcp::model::ElicitRequestParams::FormElicitationParams {
            meta: None,
            message,
            requested_schema: schema,
        };
        match self.0.create_elicitation(params).await {
            Ok(r)
                if r.action == rmcp::model::ElicitationAction::Accept
                    && r.content
                        .as_ref()
                        .and_then(|c| c.get("approve"))
                        .and_then(Value::as_bool)
                        == Some(true) =>
            {
                harness::ApprovalDecision::Approved
            }
            Ok(_) => harness::ApprovalDecision::Denied {
                reason: Some("denied by the MCP client".into()),
            },
            Err(e) => harness::ApprovalDecision::Denied {
                reason: Some(format!("the MCP client could not be asked: {e}")),
            },
        }
    }
}

/// The MCP level of a console line: `debug` → debug, `log`/`info` →
/// info, `warn` → warning, `error` → error.
fn log_level(level: ConsoleLevel) -> LoggingLevel {
    match level {
        ConsoleLevel::Debug => LoggingLevel::Debug,
        ConsoleLevel::Log | ConsoleLevel::Info => LoggingLevel::Info,
        ConsoleLevel::Warn => LoggingLevel::Warning,
        ConsoleLevel::Error => LoggingLevel::Error,
        _ => LoggingLevel::Info,
    }
}

/// Whether a message at `level` goes out to a client that asked for
/// `threshold` and above.
fn passes(level: LoggingLevel, threshold: LoggingLevel) -> bool {
    fn severity(l: LoggingLevel) -> u8 {
        match l {
            LoggingLevel::Debug => 0,
            LoggingLevel::Info => 1,
            LoggingLevel::Notice => 2,
            LoggingLevel::Warning => 3,
            LoggingLevel::Error => 4,
            LoggingLevel::Critical => 5,
            LoggingLevel::Alert => 6,
            #[allow(unreachable_patterns)]
            _ => 7,
        }
    }
    severity(level) >= severity(threshold)
}

/// One thing to tell the client.
enum Event {
    Progress(String),
    Log(LoggingLevel, String),
    /// The run is over: what comes later (a detached task's line) is not
    /// this call's to send.
    End,
}

/// Observes one run and hands what the client should hear to the task
/// [`Forward::start`] spawned, in order.
pub(super) struct Forward {
    tx: tokio::sync::mpsc::UnboundedSender<Event>,
    /// The run's script id, the log messages' logger.
    script_id: Mutex<Option<String>>,
    /// The client's `logging/setLevel`, read when a line is written.
    threshold: Arc<Mutex<LoggingLevel>>,
}

impl Forward {
    /// The observer and the task that sends: progress only when the
    /// client gave a progress token, log messages at its level and above.
    pub(super) fn start(
        peer: rmcp::service::Peer<RoleServer>,
        progress: Option<ProgressToken>,
        threshold: Arc<Mutex<LoggingLevel>>,
    ) -> (Arc<Forward>, tokio::task::JoinHandle<()>) {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Event>();
        let forward = Arc::new(Forward {
            tx,
            script_id: Mutex::new(None),
            threshold,
        });
        let logger = forward.clone();
        let task = tokio::spawn(async move {
            let mut n = 0.0;
            while let Some(event) = rx.recv().await {
                let sent = match event {
                    Event::End => break,
                    Event::Progress(message) => {
                        let Some(token) = &progress else { continue };
                        n += 1.0;
                        let mut p = ProgressNotificationParam::new(token.clone(), n);
                        p.message = Some(message);
                        peer.notify_progress(p).await
                    }
                    Event::Log(level, text) => {
                        let mut m =
                            LoggingMessageNotificationParam::new(level, Value::String(text));
                        m.logger = logger.script_id.lock().ok().and_then(|id| id.clone());
                        #[allow(deprecated)] // SEP-2577; the issue asks for MCP logging.
                        peer.notify_logging_message(m).await
                    }
                };
                if sent.is_err() {
                    break;
                }
            }
        });
        (forward, task)
    }
}

impl Forward {
    /// Ends the sending task once what came before is sent.
    pub(super) fn finish(&self) {
        let _ = self.tx.send(Event::End);
    }
}

impl RunObserver for Forward {
    fn started(&self, script_id: &str) {
        if let Ok(mut id) = self.script_id.lock() {
            *id = Some(script_id.to_owned());
        }
    }
    fn progress(&self, message: &str, _data: Option<&Value>) {
        let _ = self.tx.send(Event::Progress(message.to_owned()));
    }
    fn console(&self, level: ConsoleLevel, text: &str) {
        let level = log_level(level);
        let threshold = self.threshold.lock().map_or(LoggingLevel::Info, |t| *t);
        if passes(level, threshold) {
            let _ = self.tx.send(Event::Log(level, text.to_owned()));
        }
    }
}
