//! What the server offers beside its tools: resources (the tools'
//! declarations, one tool's schema and declaration, the script contract)
//! and prompts (`code-mode`, `fix-script`), with completion of tool names
//! in their arguments.

use super::*;
use rmcp::model::{
    CompletionInfo, GetPromptResult, Prompt, PromptArgument, PromptMessage, ReadResourceResult,
    Reference, Resource, ResourceContents, ResourceTemplate, Role,
};

/// The TypeScript declarations of every tool a script may call.
pub(super) const DECLARATIONS_URI: &str = "harness://tools.d.ts";
/// The script contract in short: globals, limits, error codes.
pub(super) const GUIDE_URI: &str = "harness://guide";
/// One tool's schema and declaration.
const TOOL_TEMPLATE: &str = "harness://tools/{name}";
const TOOL_PREFIX: &str = "harness://tools/";

pub(super) fn resources() -> Vec<Resource> {
    vec![
        Resource::new(DECLARATIONS_URI, "tools.d.ts")
            .with_description("The TypeScript declarations of the tools a script may call.")
            .with_mime_type("application/typescript"),
        Resource::new(GUIDE_URI, "guide")
            .with_description(
                "How to write a script for this server: globals, limits, error codes.",
            )
            .with_mime_type("text/markdown"),
    ]
}

pub(super) fn resource_templates() -> Vec<ResourceTemplate> {
    vec![
        ResourceTemplate::new(TOOL_TEMPLATE, "tool").with_description(
            "One tool's JSON Schema and TypeScript declaration (name as in `tools.NAME`).",
        ),
    ]
}

pub(super) fn read(harness: &Harness, uri: &str) -> Result<ReadResourceResult, ErrorData> {
    let text = |text: String, mime: &str| {
        let mut contents = ResourceContents::text(text, uri);
        if let ResourceContents::TextResourceContents { mime_type, .. } = &mut contents {
            *mime_type = Some(mime.to_owned());
        }
        Ok(ReadResourceResult::new(vec![contents]))
    };
    if uri == DECLARATIONS_URI {
        return text(harness.typescript(), "application/typescript");
    }
    if uri == GUIDE_URI {
        return text(guide(harness), "text/markdown");
    }
    let unknown = || ErrorData::resource_not_found(format!("no resource {uri}"), None);
    let name = uri.strip_prefix(TOOL_PREFIX).ok_or_else(unknown)?;
    if !harness.tool_names().iter().any(|n| n == name) {
        return Err(unknown());
    }
    let registry = harness.registry();
    let tool = registry.get(name).ok_or_else(unknown)?;
    let body = json!({
        "name": name,
        "description": tool.description(),
        "inputSchema": tool.schema(),
        "outputSchema": tool.output_schema(),
        "declaration": harness::declarations::declarations(registry, &[name.to_owned()]),
    });
    text(body.to_string(), "application/json")
}

/// The script contract, with this harness's limits.
fn guide(harness: &Harness) -> String {
    let l = harness.limits();
    let codes: Vec<&str> = harness::ErrorCode::ALL.iter().map(|c| c.as_str()).collect();
    format!(
        "# Writing a script for this server\n\n\
         {SCRIPT_CONTRACT} `context` holds what the host passed; `console` lines come \
         back in the report and, while the run runs, as log messages.\n\n\
         There is no network and no filesystem except through tools, no `eval` or \
         `Function`, and the built-ins are frozen. Nothing a run leaves behind is seen \
         by the next.\n\n\
         ## Limits\n\n\
         - {timeout} ms per run\n\
         - {calls} tool calls, {concurrent} at once\n\
         - {mem} MiB of memory\n\
         - {source} bytes of source, {ret} bytes of return value\n\
         - {lines} console lines\n\n\
         ## Error codes\n\n\
         A failed run's report has `error.code`, one of: {codes}. The declarations \
         are in `{DECLARATIONS_URI}`.\n",
        timeout = l.timeout_ms,
        calls = l.max_tool_calls,
        concurrent = l.max_concurrent_tool_calls,
        mem = l.memory_bytes / (1024 * 1024),
        source = l.max_source_bytes,
        ret = l.max_return_bytes,
        lines = l.max_console_lines,
        codes = codes.join(", "),
    )
}

pub(super) fn prompts() -> Vec<Prompt> {
    let arg = |name: &str, description: &str, required: bool| {
        PromptArgument::new(name)
            .with_description(description)
            .with_required(required)
    };
    vec![
        Prompt::new(
            "code-mode",
            Some("Instructions for writing one script that does a task with this server's tools."),
            Some(vec![
                arg("task", "What the script should do.", true),
                arg(
                    "tools",
                    "Only these tools (names as in `tools.NAME`, comma-separated).",
                    false,
                ),
            ]),
        ),
        Prompt::new(
            "fix-script",
            Some("Asks for a corrected script, given one that failed and its error."),
            Some(vec![
                arg("code", "The script that failed.", true),
                arg("error", "Its error (code and message).", true),
            ]),
        ),
    ]
}

pub(super) fn prompt(
    harness: &Harness,
    request: &GetPromptRequestParams,
) -> Result<GetPromptResult, ErrorData> {
    let args = request.arguments.clone().unwrap_or_default();
    let arg = |name: &str| args.get(name).and_then(Value::as_str).map(str::to_owned);
    let required = |name: &str| {
        arg(name).ok_or_else(|| {
            ErrorData::invalid_params(format!("prompt `{}` needs `{name}`", request.name), None)
        })
    };
    let known = harness.tool_names();
    let declarations = |names: Option<Vec<String>>| match names {
        None => Ok(harness.typescript()),
        Some(names) => match names.iter().find(|n| !known.contains(n)) {
            Some(missing) => Err(ErrorData::invalid_params(
                format!("no tool `{missing}`; search_tools lists them"),
                None,
            )),
            None => Ok(harness::declarations::declarations(
                harness.registry(),
                &names,
            )),
        },
    };
    let text = match request.name.as_ref() {
        "code-mode" => {
            let task = required("task")?;
            // No names (an empty `tools`) means every tool, as no `tools`.
            let narrowed = arg("tools")
                .map(|t| {
                    t.split(',')
                        .map(|n| n.trim().to_owned())
                        .filter(|n| !n.is_empty())
                        .collect::<Vec<_>>()
                })
                .filter(|names| !names.is_empty());
            format!(
                "{}\n\nThe tools, as TypeScript:\n\n```ts\n{}```\n\nWrite one script for \
                 `run_script` that does this task, and return its result:\n\n{task}\n",
                guide(harness),
                declarations(narrowed)?
            )
        }
        "fix-script" => {
            let code = required("code")?;
            let error = required("error")?;
            format!(
                "This script, run with `run_script`, failed:\n\n```ts\n{code}\n```\n\n\
                 The error:\n\n{error}\n\nThe tools, as TypeScript:\n\n```ts\n{}```\n\n\
                 Write the corrected script (the whole of it, in one ```ts block) and say \
                 in one line what was wrong.\n",
                declarations(None)?
            )
        }
        other => {
            return Err(ErrorData::invalid_params(
                format!("no prompt `{other}`: code-mode, fix-script"),
                None,
            ))
        }
    };
    Ok(GetPromptResult::new(vec![PromptMessage::new_text(
        Role::User,
        text,
    )]))
}

/// Tool names for `code-mode`'s `tools` (the last of its comma-separated
/// names) and for the tool template's `name`.
pub(super) fn complete(
    harness: &Harness,
    request: &CompleteRequestParams,
) -> Result<CompleteResult, ErrorData> {
    let names_in = match &request.r#ref {
        Reference::Prompt(p) => p.name == "code-mode" && request.argument.name == "tools",
        Reference::Resource(r) => r.uri == TOOL_TEMPLATE && request.argument.name == "name",
        _ => false,
    };
    let mut values = Vec::new();
    if names_in {
        let typed = &request.argument.value;
        let (done, last) = match typed.rfind(',') {
            Some(i) => (&typed[..=i], typed[i + 1..].trim_start()),
            None => ("", typed.as_str()),
        };
        values = harness
            .tool_names()
            .into_iter()
            .filter(|n| n.starts_with(last))
            .map(|n| format!("{done}{n}"))
            .collect();
    }
    let total = values.len();
    values.truncate(CompletionInfo::MAX_VALUES);
    let mut info = CompletionInfo::new(values).map_err(|e| ErrorData::internal_error(e, None))?;
    info.total = Some(total as u32);
    info.has_more = Some(total > CompletionInfo::MAX_VALUES);
    Ok(CompleteResult::new(info))
}
