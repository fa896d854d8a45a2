//! The prelude's config for one run, and the cache of its static part.

use super::*;
use harness_abi::run_config;

/// The prelude's config for one run: `{"run":"…","static":{…}}`.
///
/// The run's part is one JSON string of fixed length
/// ([`harness_abi::run_config`]): the 128-bit `Math.random` seed as hex
/// digits, then the script id, so that the prelude finds the static part
/// at a fixed offset and reads the run's part with no JSON parse (see
/// prelude.js, `install`). The static
/// part (tools, context, limits) is compared by the prelude as a string
/// and, where it is the last run's, not parsed or built again; here it is
/// serialised again only when its inputs changed ([`StaticConfig`]).
pub(super) fn prelude_config(
    request: &ExecutionRequest,
    facade: &ToolFacade,
    script_id: &str,
) -> String {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    // The seed: four 32-bit words, eight hex digits each.
    const _: () = assert!(run_config::SEED_HEX_LEN == 4 * 8);
    let mut out = String::with_capacity(1024);
    out.push_str(run_config::PREFIX);
    for word in random_seed() {
        for shift in (0..8).rev() {
            out.push(char::from(HEX[(word >> (shift * 4)) as usize & 0xf]));
        }
    }
    // An id of another length would still be read right, through the
    // prelude's JSON path; ids from `new_script_id` all have the layout's
    // length, in characters that JSON need not escape.
    debug_assert_eq!(script_id.len(), run_config::SCRIPT_ID_LEN);
    if script_id
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'_')
    {
        out.push_str(script_id);
    } else {
        let quoted = serde_json::to_string(script_id).unwrap_or_else(|_| "\"\"".to_owned());
        out.push_str(&quoted[1..quoted.len() - 1]);
    }
    out.push_str(run_config::STATIC_MARK);
    StaticConfig::append(request, facade, &mut out);
    out.push('}');
    out
}

/// The static part of the prelude's config, serialised again only when
/// what it is made of changed.
///
/// Kept per engine thread: the last inputs (visible and sited tools,
/// whether tasks may spawn, the mode, the context and the limits) and
/// their JSON. The JSON is a pure function of those inputs, compared in
/// full, so a run is never shown another request's tools or context; the
/// cache only saves serialising them again (about a tenth of a trivial
/// run's instructions). Inputs whose JSON is larger
/// than [`StaticConfig::KEPT_BYTES`] are not kept.
pub(super) struct StaticConfig {
    pub(super) tools: Vec<String>,
    pub(super) sited: Vec<String>,
    pub(super) spawn: bool,
    pub(super) mode: Mode,
    pub(super) context: crate::adapter::ScriptContext,
    pub(super) limits: Limits,
    pub(super) json: String,
}

thread_local! {
    pub(super) static LAST_STATIC: std::cell::RefCell<Option<StaticConfig>> = const { std::cell::RefCell::new(None) };
}

impl StaticConfig {
    pub(super) const KEPT_BYTES: usize = 16 * 1024;

    pub(super) fn spawn(request: &ExecutionRequest) -> bool {
        request.tasks.is_some() && request.mode == Mode::Enabled
    }

    pub(super) fn matches(&self, request: &ExecutionRequest, facade: &ToolFacade) -> bool {
        self.spawn == Self::spawn(request)
            && self.mode == request.mode
            && self.tools == facade.visible_tools()
            && self
                .sited
                .iter()
                .map(String::as_str)
                .eq(facade.sited_tools())
            && self.limits == request.limits
            && self.context == request.context
    }

    /// Appends the static part's JSON for `request` to `out`.
    pub(super) fn append(request: &ExecutionRequest, facade: &ToolFacade, out: &mut String) {
        let hit = LAST_STATIC.with(|last| {
            let Ok(last) = last.try_borrow() else {
                return false;
            };
            match last.as_ref() {
                Some(last) if last.matches(request, facade) => {
                    out.push_str(&last.json);
                    true
                }
                _ => false,
            }
        });
        if hit {
            return;
        }
        let json = static_json(request, facade);
        out.push_str(&json);
        if json.len() <= Self::KEPT_BYTES {
            let kept = StaticConfig {
                tools: facade.visible_tools().to_vec(),
                sited: facade
                    .sited_tools()
                    .into_iter()
                    .map(str::to_owned)
                    .collect(),
                spawn: Self::spawn(request),
                mode: request.mode,
                context: request.context.clone(),
                limits: request.limits.clone(),
                json,
            };
            LAST_STATIC.with(|last| {
                if let Ok(mut last) = last.try_borrow_mut() {
                    *last = Some(kept);
                }
            });
        }
    }
}

/// Serialises the static part of the prelude's config. Serialised from
/// borrowing structs: building a `json!` tree cost more than the rest of
/// the run's set-up.
pub(super) fn static_json(request: &ExecutionRequest, facade: &ToolFacade) -> String {
    let l = &request.limits;
    let c = &request.context;
    let mode = match request.mode {
        Mode::Enabled => "enabled",
        Mode::DryRun => "dry-run",
        Mode::Disabled => "disabled",
    };
    #[derive(serde::Serialize)]
    #[serde(rename_all = "camelCase")]
    struct Fixed<'a> {
        tools: &'a [String],
        /// The tools whose calls carry a call site.
        sited: Vec<&'a str>,
        spawn: bool,
        line_offset: u32,
        context: Context<'a>,
    }
    #[derive(serde::Serialize)]
    #[serde(rename_all = "camelCase")]
    struct Context<'a> {
        conversation_id: &'a Option<String>,
        session_id: &'a Option<String>,
        turn_id: &'a Option<String>,
        sandbox: Sandbox<'a>,
        identity: &'a Value,
        working_directory: &'a Option<String>,
        provider: &'a Option<String>,
        model: &'a Option<String>,
        extra: &'a Value,
        approvals_enabled: bool,
        mode: &'a str,
        limits: LimitsView,
    }
    #[derive(serde::Serialize)]
    #[serde(rename_all = "camelCase")]
    struct Sandbox<'a> {
        timeout_ms: u64,
        memory_mb: u64,
        max_concurrent_tool_calls: u32,
        mode: &'a str,
    }
    #[derive(serde::Serialize)]
    #[serde(rename_all = "camelCase")]
    struct LimitsView {
        timeout_ms: u64,
        memory_bytes: u64,
        stack_bytes: u64,
        max_source_bytes: u64,
        max_return_bytes: u64,
        max_tool_calls: u32,
        max_concurrent_tool_calls: u32,
        max_console_lines: u32,
        max_progress_events: u32,
    }
    let fixed = Fixed {
        tools: facade.visible_tools(),
        sited: facade.sited_tools(),
        spawn: StaticConfig::spawn(request),
        line_offset: WRAPPER_LINE_OFFSET,
        context: Context {
            conversation_id: &c.conversation_id,
            session_id: &c.session_id,
            turn_id: &c.turn_id,
            sandbox: Sandbox {
                timeout_ms: l.timeout_ms,
                memory_mb: l.memory_bytes / (1024 * 1024),
                max_concurrent_tool_calls: l.max_concurrent_tool_calls,
                mode,
            },
            identity: &c.identity,
            working_directory: &c.working_directory,
            provider: &c.provider,
            model: &c.model,
            extra: &c.extra,
            approvals_enabled: request.mode == Mode::Enabled,
            mode,
            limits: LimitsView {
                timeout_ms: l.timeout_ms,
                memory_bytes: l.memory_bytes,
                stack_bytes: l.stack_bytes,
                max_source_bytes: l.max_source_bytes,
                max_return_bytes: l.max_return_bytes,
                max_tool_calls: l.max_tool_calls,
                max_concurrent_tool_calls: l.max_concurrent_tool_calls,
                max_console_lines: l.max_console_lines,
                max_progress_events: l.max_progress_events,
            },
        },
    };
    serde_json::to_string(&fixed).unwrap_or_default()
}
