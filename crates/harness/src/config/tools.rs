//! `[tools.NAME]`: a tool wrapped in its own settings.

use super::ToolSettings;
use crate::{Tool, ToolContext, ToolError, ToolRegistry};
use async_trait::async_trait;
use serde_json::Value;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A tool with its `[tools.NAME]` settings applied: its own timeout, an
/// approval rule, an output cap.
pub(crate) struct Configured {
    pub(crate) inner: Arc<dyn Tool>,
    pub(crate) settings: ToolSettings,
}

#[async_trait]
impl Tool for Configured {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn description(&self) -> &str {
        self.inner.description()
    }
    fn schema(&self) -> &Value {
        self.inner.schema()
    }
    fn output_schema(&self) -> Option<&Value> {
        self.inner.output_schema()
    }
    fn requires_approval(&self, args: &Value) -> bool {
        self.settings
            .needs_approval
            .unwrap_or_else(|| self.inner.requires_approval(args))
    }
    fn may_require_approval(&self) -> bool {
        self.settings
            .needs_approval
            .unwrap_or_else(|| self.inner.may_require_approval())
    }
    fn deferred(&self) -> bool {
        self.settings
            .deferred
            .unwrap_or_else(|| self.inner.deferred())
    }
    async fn execute(&self, args: Value, mut ctx: ToolContext) -> Result<Value, ToolError> {
        let name = self.inner.name().to_owned();
        let out = match self.settings.timeout_ms {
            Some(ms) => {
                let limit = Duration::from_millis(ms);
                ctx.deadline = ctx.deadline.min(Instant::now() + limit);
                match tokio::time::timeout(limit, self.inner.execute(args, ctx)).await {
                    Ok(r) => r,
                    Err(_) => Err(ToolError::new(format!(
                        "{name} timed out after {ms} ms (tools.{name}.timeout_ms)"
                    ))),
                }
            }
            None => self.inner.execute(args, ctx).await,
        }?;
        if let Some(max) = self.settings.max_output_bytes {
            let len = serde_json::to_string(&out).map(|s| s.len()).unwrap_or(0) as u64;
            if len > max {
                return Err(ToolError::new(format!(
                    "{name} returned {len} bytes of JSON; tools.{name}.max_output_bytes is {max}"
                )));
            }
        }
        Ok(out)
    }
}

/// `registry` with each tool named in `settings` wrapped in its settings.
pub(crate) fn apply_tool_settings(
    registry: &ToolRegistry,
    settings: &BTreeMap<String, ToolSettings>,
) -> Result<ToolRegistry, crate::RegistryError> {
    let mut out = ToolRegistry::new();
    for name in registry.names() {
        let Some(tool) = registry.get(name) else {
            continue;
        };
        let tool = match settings.get(name) {
            Some(s) => Arc::new(Configured {
                inner: tool.clone(),
                settings: s.clone(),
            }) as Arc<dyn Tool>,
            None => tool.clone(),
        };
        if harness_core::tool::HARNESS_TOOL_NAMES.contains(&name) {
            out.register_harness_tool(tool)?;
        } else {
            out.register_arc(tool)?;
        }
    }
    for pack in registry.pack_names() {
        if let Some(members) = registry.pack(pack) {
            out.define_pack(pack, members.iter().cloned())?;
        }
    }
    Ok(out)
}
