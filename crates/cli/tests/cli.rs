//! The `harness` binary: flags, output shapes and exit statuses.

use serde_json::Value;
use std::io::Write;
use std::process::{Command, Output, Stdio};

mod common;
use common::{assert_exit, json};

fn harness(args: &[&str], stdin: &str, cwd: &std::path::Path) -> Output {
    common::harness(args, stdin, Some(cwd), &[])
}

#[test]
fn run_json_prints_the_report() {
    let dir = tempfile::tempdir().unwrap();
    let o = harness(&["run", "--json", "-"], "return 1+1", dir.path());
    assert_exit(&o, 0);
    let r = json(&o);
    assert_eq!(r["ok"], true);
    assert_eq!(r["value"], 2);
    for key in ["error", "console", "tool_calls", "progress", "metrics"] {
        assert!(r.get(key).is_some(), "missing {key}: {r}");
    }
    for key in ["engine", "duration_ms", "tool_calls", "memory_used_bytes"] {
        assert!(
            r["metrics"].get(key).is_some(),
            "missing metrics.{key}: {r}"
        );
    }
    assert_eq!(r["metrics"]["engine"], "quickjs");
}

#[test]
fn failures_exit_1_with_the_error_shape() {
    let dir = tempfile::tempdir().unwrap();
    let o = harness(
        &["run", "--json", "--timeout-ms", "200", "-"],
        "while (true) {}",
        dir.path(),
    );
    assert_exit(&o, 1);
    let e = &json(&o)["error"];
    assert_eq!(e["code"], "ScriptTimeoutError");
    assert_eq!(e["phase"], "executing");
    assert!(e["message"].is_string() && e["name"].is_string());

    let o = harness(
        &["run", "--json", "--max-tool-calls", "1", "-"],
        "await tools.list_dir({path: '.'}); await tools.list_dir({path: '.'})",
        dir.path(),
    );
    let r = json(&o);
    assert_eq!(r["error"]["code"], "ToolBudgetExceededError");
    assert_eq!(r["error"]["tool"], "list_dir");
    assert_eq!(r["error"]["call_id"], 2);
    assert_eq!(r["tool_calls"][0]["status"], "ok");
    assert!(r["tool_calls"][0]["duration_ms"].is_number());

    let o = harness(
        &["run", "--json", "--memory-mb", "16", "-"],
        "const a = []; while (true) a.push('x'.repeat(1e4) + a.length)",
        dir.path(),
    );
    assert_eq!(json(&o)["error"]["code"], "ScriptMemoryError");
}

#[test]
fn usage_errors_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    for args in [
        vec!["run", "--bogus", "-"],
        vec!["run"],
        vec!["run", "missing-file.js"],
        vec!["run", "--engine", "nonesuch", "-"],
        vec!["run", "--approve", "maybe", "-"],
        vec!["run", "--timeout-ms", "abc", "-"],
        vec!["run", "--root", "/definitely/not/here", "-"],
        vec!["frobnicate"],
    ] {
        let o = harness(&args, "return 1", dir.path());
        assert_eq!(
            o.status.code(),
            Some(2),
            "{args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        assert!(!o.stderr.is_empty(), "{args:?} printed no reason");
    }
}

#[test]
fn files_are_confined_to_the_root() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    std::fs::create_dir(&root).unwrap();
    std::fs::write(dir.path().join("secret.txt"), "secret").unwrap();
    std::os::unix::fs::symlink(dir.path().join("secret.txt"), root.join("link")).unwrap();
    let script = r#"
        await tools.write_file({path: "sub/out.txt", content: "hello"});
        const read = (await tools.read_file({path: "sub/out.txt"})).content;
        const refused = [];
        for (const path of ["../secret.txt", "link", "/etc/passwd", "sub/../../secret.txt"]) {
          try { await tools.read_file({path}); refused.push("READ " + path); }
          catch (e) { refused.push(e.name); }
        }
        try { await tools.write_file({path: "../escape.txt", content: "x"}) } catch (e) { refused.push(e.name) }
        const listed = (await tools.list_dir({path: "."})).entries.map(e => e.name);
        return {read, refused, listed};
    "#;
    let o = harness(
        &["run", "--json", "--root", root.to_str().unwrap(), "-"],
        script,
        dir.path(),
    );
    let r = json(&o);
    assert_eq!(r["ok"], true, "{r}");
    assert_eq!(r["value"]["read"], "hello");
    assert_eq!(
        r["value"]["refused"],
        serde_json::json!(vec!["ToolExecutionError"; 5])
    );
    assert_eq!(r["value"]["listed"], serde_json::json!(["link", "sub"]));
    assert!(!dir.path().join("escape.txt").exists());
    assert_eq!(
        std::fs::read_to_string(root.join("sub/out.txt")).unwrap(),
        "hello"
    );
}

#[test]
fn exec_needs_approval() {
    let dir = tempfile::tempdir().unwrap();
    let script = "try { return (await tools.exec({command: ['echo', 'hi']})).stdout } catch (e) { return e.name }";
    let o = harness(&["run", "--json", "-"], script, dir.path());
    assert_eq!(
        json(&o)["value"],
        "ApprovalDeniedError",
        "no terminal: denied"
    );
    let o = harness(
        &["run", "--json", "--approve", "no", "-"],
        script,
        dir.path(),
    );
    assert_eq!(json(&o)["value"], "ApprovalDeniedError");
    let o = harness(
        &["run", "--json", "--approve", "yes", "-"],
        script,
        dir.path(),
    );
    let r = json(&o);
    assert_eq!(r["value"], "hi\n");
    assert_eq!(r["approvals"][0]["outcome"], "approved");
}

#[test]
fn check_reports_line_and_column_and_runs_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let o = harness(&["check", "-"], "let a = 1;\nlet b = ;\n", dir.path());
    assert_exit(&o, 1);
    assert!(String::from_utf8_lossy(&o.stdout).contains("script.js:2:9"));
    let o = harness(
        &["check", "--json", "-"],
        "await tools.write_file({path: 'x', content: 'y'})",
        dir.path(),
    );
    assert_exit(&o, 0);
    assert_eq!(json(&o)["ok"], true);
    assert!(!dir.path().join("x").exists());
}

#[test]
fn readable_summary_without_json() {
    let dir = tempfile::tempdir().unwrap();
    let o = harness(
        &["run", "-"],
        "console.log('hello'); return {a: 1}",
        dir.path(),
    );
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("[log] hello") && out.contains("\"a\": 1") && out.contains("quickjs"),
        "{out}"
    );
    let o = harness(&["run", "-"], "null.x", dir.path());
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("ScriptRuntimeError (executing)"), "{out}");
}

const RESPONSE: &str = "Let me check.\n<thinking>\nlist, then count\n</thinking>\n<tool-calls>\nconst r = await tools.list_dir({path: '.'});\nconsole.log('entries', r.entries.length);\nreturn r.entries.length\n</tool-calls>\nAnd in TypeScript:\n```ts tool-calls\nconst n: number = 40;\nreturn n + 2\n```\nDone.";

#[test]
fn respond_prints_items_in_order_with_both_outputs() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a.txt"), "x").unwrap();
    let o = harness(&["respond", "--events", "-"], RESPONSE, dir.path());
    assert_exit(&o, 0);
    let items = json(&o);
    let types: Vec<&str> = items
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["type"].as_str().unwrap())
        .collect();
    assert_eq!(
        types,
        [
            "text",
            "thinking",
            "text",
            "script_tool_call",
            "script_tool_call_output",
            "text",
            "script_tool_call",
            "script_tool_call_output",
            "text"
        ]
    );
    assert_eq!(items[4]["output"], 1);
    assert_eq!(items[6]["language"], "typescript");
    assert_eq!(items[7]["output"], 42);
    assert_eq!(items[8]["text"], "Done.");
    // One JSON event per line on stderr.
    let events: Vec<Value> = String::from_utf8_lossy(&o.stderr)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let kinds: Vec<&str> = events
        .iter()
        .map(|e| e["event"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        [
            "script_started",
            "tool_call_started",
            "tool_call_finished",
            "script_finished",
            "script_started",
            "script_finished"
        ]
    );
}

#[test]
fn respond_reads_wire_json_and_writes_each_format() {
    let dir = tempfile::tempdir().unwrap();
    let chat = serde_json::json!({"choices": [{"message": {"role": "assistant",
        "content": "<tool-calls>\nreturn 6 * 7\n</tool-calls>"}}]})
    .to_string();
    for (format, check) in [
        ("openai-responses", "/1/type"),
        ("chat", "/1/role"),
        ("anthropic", "/1/content/0/type"),
    ] {
        let o = harness(&["respond", "--format", format, "-"], &chat, dir.path());
        assert_eq!(o.status.code(), Some(0), "{format}");
        let v = json(&o);
        let want = match format {
            "openai-responses" => "function_call_output",
            "chat" => "tool",
            _ => "tool_result",
        };
        assert_eq!(
            v.pointer(check).and_then(Value::as_str),
            Some(want),
            "{format}: {v}"
        );
    }
    // Dry-run runs nothing and names unknown tools; a malformed block is an error.
    let o = harness(
        &["respond", "--mode", "dry-run", "-"],
        "<tool-calls>\nawait tools.nope({})\n</tool-calls>",
        dir.path(),
    );
    assert_exit(&o, 1);
    assert_eq!(json(&o)[1]["metadata"]["unknown_tools"][0], "nope");
    let o = harness(&["respond", "-"], "<tool-calls>\nreturn 1", dir.path());
    assert_exit(&o, 1);
    assert!(json(&o)["error"].as_str().unwrap().contains("never closed"));
}

/// The script contract's CLI side: `--context`, TypeScript files and blocks,
/// `--enable-spawn` with the run waiting for its detached tasks.
#[test]
fn context_flag_gives_scripts_the_documented_values() {
    let dir = tempfile::tempdir().unwrap();
    let ctx = r#"{"model": "gpt-x", "conversationId": "conv_1", "turnId": "t2"}"#;
    let o = harness(
        &["run", "--json", "--context", ctx, "-"],
        "return context.model",
        dir.path(),
    );
    assert_eq!(json(&o)["value"], "gpt-x");
    let o = harness(
        &["run", "--json", "--context", ctx, "-"],
        "return { model: context.model, timeout: context.sandbox.timeoutMs, tools: context.capabilities.tools, conv: context.conversationId, turn: context.turnId, session: context.sessionId }",
        dir.path(),
    );
    let v = &json(&o)["value"];
    assert_eq!(v["model"], "gpt-x");
    assert_eq!(v["timeout"], 30000);
    assert_eq!(v["conv"], "conv_1");
    assert_eq!(v["turn"], "t2");
    assert_eq!(v["session"], Value::Null);
    assert!(
        v["tools"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t == "read_file"),
        "{v}"
    );
    let o = harness(
        &["run", "--json", "--context", ctx, "-"],
        "context.telemetry.emitProgress(\"Starting analysis...\"); return 1",
        dir.path(),
    );
    let r = json(&o);
    assert_eq!(r["value"], 1);
    assert_eq!(r["progress"][0]["message"], "Starting analysis...");
    assert_eq!(r["progress"][0]["kind"], "info");
    // From a file, and refused when malformed or unknown.
    std::fs::write(dir.path().join("ctx.json"), r#"{"sessionId": "s9"}"#).unwrap();
    let o = harness(
        &["run", "--json", "--context", "@ctx.json", "-"],
        "return context.sessionId",
        dir.path(),
    );
    assert_eq!(json(&o)["value"], "s9");
    let o = harness(
        &["run", "--context", "{\"modle\": 1}", "-"],
        "return 1",
        dir.path(),
    );
    assert_exit(&o, 2);
    assert!(String::from_utf8_lossy(&o.stderr).contains("--context"));
}

#[test]
fn typescript_runs_from_files_and_response_blocks() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("x.ts"),
        "interface P { x: number }\nconst p: P = {x: 2};\nreturn p.x as number",
    )
    .unwrap();
    let o = harness(&["run", "--json", "x.ts"], "", dir.path());
    assert_eq!(json(&o)["value"], 2);
    let o = harness(
        &["run", "--json", "--language", "js", "x.ts"],
        "",
        dir.path(),
    );
    assert_eq!(json(&o)["error"]["code"], "ScriptSyntaxError");
    let response = "First:\n<tool-calls>\nconst xs: number[] = [1, 2, 3]\nreturn xs.length\n</tool-calls>\nThen:\n```ts tool-calls\ninterface A { a: number }\nconst a: A = {a: 5}\nreturn a.a\n```\n";
    let o = harness(&["respond", "-"], response, dir.path());
    assert_exit(&o, 0);
    let items = json(&o);
    let outputs: Vec<&Value> = items
        .as_array()
        .unwrap()
        .iter()
        .filter(|i| i["type"] == "script_tool_call_output")
        .map(|i| &i["output"])
        .collect();
    assert_eq!(outputs, [&Value::from(3), &Value::from(5)]);
}

#[test]
fn spawned_tasks_outlive_the_script_and_are_reported() {
    let dir = tempfile::tempdir().unwrap();
    let script = r#"const t = tools.spawn.exec({command: ["sleep", "1"]}); return t.id"#;
    let o = harness(
        &["run", "--json", "-"],
        "return typeof tools.spawn",
        dir.path(),
    );
    assert_eq!(json(&o)["value"], "undefined");
    let started = std::time::Instant::now();
    let o = harness(
        &["run", "--json", "--enable-spawn", "--approve", "yes", "-"],
        script,
        dir.path(),
    );
    let r = json(&o);
    assert_eq!(r["ok"], true, "{r}");
    assert_eq!(r["value"], "task_1");
    assert!(r["metrics"]["duration_ms"].as_f64().unwrap() < 500.0, "{r}");
    // The CLI waited for the task before printing.
    assert!(started.elapsed() >= std::time::Duration::from_millis(900));
    let t = &r["detached_tasks"][0];
    assert_eq!(t["status"], "ok", "{r}");
    assert_eq!(t["tool"], "exec");
    assert_eq!(t["result"]["exitCode"], 0);
    assert_eq!(t["script_id"], r["script_id"]);
    // Bounded by --detached-timeout-ms: then cancelled.
    let o = harness(
        &[
            "run",
            "--json",
            "--enable-spawn",
            "--approve",
            "yes",
            "--detached-timeout-ms",
            "100",
            "-",
        ],
        r#"tools.spawn.exec({command: ["sleep", "30"]}); return 1"#,
        dir.path(),
    );
    assert_eq!(json(&o)["detached_tasks"][0]["status"], "cancelled");
    // respond emits an event when a task ends.
    let o = harness(
        &[
            "respond",
            "--events",
            "--enable-spawn",
            "--approve",
            "yes",
            "-",
        ],
        &format!("<tool-calls>\n{script}\n</tool-calls>"),
        dir.path(),
    );
    let events = String::from_utf8_lossy(&o.stderr);
    assert!(
        events
            .lines()
            .any(|l| l.contains("\"event\":\"detached_task_finished\"")
                && l.contains("\"status\":\"ok\"")),
        "{events}"
    );
}

/// The configuration file, as the issue that asked for it states it.
#[test]
fn config_layers_ceilings_and_checks_from_the_command_line() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("F.toml"),
        "[limits]\ntimeout_ms = 30000\n\n[ceilings]\ntimeout_ms = 60000\n\n[providers.fast.limits]\ntimeout_ms = 5000\n",
    )
    .unwrap();
    let o = harness(
        &[
            "config",
            "show",
            "--config",
            "F.toml",
            "--provider",
            "fast",
            "--json",
        ],
        "",
        dir.path(),
    );
    let shown = json(&o);
    assert_eq!(shown["values"]["limits.timeout_ms"]["value"], 5000);
    assert_eq!(
        shown["values"]["limits.timeout_ms"]["layer"],
        "provider:fast"
    );
    assert_eq!(shown["values"]["limits.memory_bytes"]["layer"], "default");
    // The provider's limit applies to a run (stopped at 5 s; a shorter
    // override below shows the flag wins over the provider).
    let o = harness(
        &[
            "run",
            "--json",
            "--config",
            "F.toml",
            "--provider",
            "fast",
            "-",
        ],
        "return context.sandbox.timeoutMs",
        dir.path(),
    );
    assert_eq!(json(&o)["value"], 5000);
    let o = harness(
        &[
            "run",
            "--config",
            "F.toml",
            "--provider",
            "fast",
            "--timeout-ms",
            "100000",
            "-",
        ],
        "while (true) {}",
        dir.path(),
    );
    assert_exit(&o, 2);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("60000") && err.contains("limits.timeout_ms"),
        "{err}"
    );
    let started = std::time::Instant::now();
    let o = harness(
        &[
            "run",
            "--json",
            "--config",
            "F.toml",
            "--provider",
            "fast",
            "--timeout-ms",
            "300",
            "-",
        ],
        "while (true) {}",
        dir.path(),
    );
    assert_eq!(json(&o)["error"]["code"], "ScriptTimeoutError");
    assert!(started.elapsed() < std::time::Duration::from_secs(4));
    // HARNESS_CONFIG names the file too.
    let o = Command::new(env!("CARGO_BIN_EXE_harness"))
        .args(["config", "show", "--json", "--provider", "fast"])
        .env("HARNESS_CONFIG", dir.path().join("F.toml"))
        .output()
        .unwrap();
    assert_eq!(json(&o)["values"]["limits.timeout_ms"]["value"], 5000);
    // check: a misspelt key is refused with a suggestion.
    std::fs::write(dir.path().join("bad.toml"), "[limits]\ntimout_ms = 1\n").unwrap();
    let o = harness(&["config", "check", "bad.toml"], "", dir.path());
    assert_ne!(o.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&o.stderr).contains("did you mean `timeout_ms`?"));
    let o = harness(&["config", "check", "F.toml"], "", dir.path());
    assert_exit(&o, 0);
    let example = concat!(env!("CARGO_MANIFEST_DIR"), "/../../harness.example.toml");
    let o = harness(&["config", "check", example], "", dir.path());
    assert_exit(&o, 0);
}

/// The audit log holds whole lines only, even when the process is killed
/// in the middle of a run.
#[test]
fn the_audit_log_survives_a_kill_with_whole_lines() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("audit.jsonl");
    let log_arg = log.to_str().unwrap();
    let o = harness(
        &[
            "run",
            "--audit-log",
            log_arg,
            "--context",
            r#"{"provider": "acme"}"#,
            "-",
        ],
        "await tools.list_dir({path: '.'}); return 1",
        dir.path(),
    );
    assert_exit(&o, 0);
    let response = "<tool-calls>\nreturn 1\n</tool-calls>\n<tool-calls>\nnull.x\n</tool-calls>";
    let o = harness(
        &[
            "respond",
            "--continue-on-error",
            "--audit-log",
            log_arg,
            "-",
        ],
        response,
        dir.path(),
    );
    assert_exit(&o, 1);
    // A run killed mid-way writes nothing.
    let mut child = Command::new(env!("CARGO_BIN_EXE_harness"))
        .args(["run", "--audit-log", log_arg, "--timeout-ms", "60000", "-"])
        .current_dir(dir.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"while (true) {}")
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(500));
    child.kill().unwrap();
    child.wait().unwrap();
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(text.ends_with('\n'));
    let lines: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 3, "{text}");
    assert_eq!(lines[0]["provider"], "acme");
    assert_eq!(lines[0]["outcome"], "ok");
    assert_eq!(lines[0]["tool_calls"][0]["tool"], "list_dir");
    assert_eq!(lines[0]["sha256"].as_str().unwrap().len(), 64);
    assert!(lines[0]["script_id"].as_str().unwrap().starts_with("scr_"));
    assert_eq!(lines[2]["outcome"], "ScriptRuntimeError");
}

/// `harness warm` fills the disk cache next to the guest, so that a later
/// one-shot process reads every snapshot back instead of compiling it, and
/// its runs in a private realm start from the private snapshot: their fuel
/// is about a trivial run's, where hardening the realm inside the run (what
/// a one-shot process did while its background compile never finished)
/// costs over ten times as much.
#[cfg(feature = "wasi")]
#[test]
fn warm_fills_the_cache_one_shot_runs_read_back() {
    let dir = tempfile::tempdir().unwrap();
    let first = harness(&["warm"], "", dir.path());
    assert_exit(&first, 0);
    let o = harness(&["warm", "--json"], "", dir.path());
    assert_exit(&o, 0);
    let made = json(&o);
    let made = made.as_array().expect("an array");
    let names: Vec<String> = made
        .iter()
        .map(|w| format!("{}/{}", w["snapshot"], w["isolation"]).replace('"', ""))
        .collect();
    assert_eq!(
        names,
        [
            "harness/in-process",
            "private/in-process",
            "harness/process",
            "private/process",
            "sandbox/in-process"
        ]
    );
    for w in made {
        assert_eq!(w["ready"], true, "{w}");
        assert_eq!(w["from_cache"], true, "a second process compiled it: {w}");
        let file = dir.path().join(w["cache_file"].as_str().expect("a file"));
        assert!(file.is_file(), "{w}");
    }

    let run = |script: &str| {
        let o = harness(
            &["run", "--engine", "wasi", "--json", "-"],
            script,
            dir.path(),
        );
        let r = json(&o);
        assert_eq!(r["ok"], true, "{r}");
        r
    };
    let trivial = run("return [1, 2].at(-1)");
    let private = run(
        "Array.prototype.last = function () { return this[this.length - 1] }; return [1, 2].last()",
    );
    assert_eq!(private["value"], 2, "{private}");
    let fuel = |r: &Value| r["metrics"]["fuel_consumed"].as_u64().expect("fuel");
    assert!(
        fuel(&private) < 3 * fuel(&trivial),
        "a one-shot private run hardened its realm: {} fuel against {}",
        fuel(&private),
        fuel(&trivial)
    );
}

/// Without a guest, `harness warm` is a usage error that names the script
/// that builds one.
#[cfg(feature = "wasi")]
#[test]
fn warm_without_a_guest_says_how_to_build_one() {
    let dir = tempfile::tempdir().unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_harness"))
        .arg("warm")
        .env("HARNESS_QUICKJS_WASM", dir.path().join("none.wasm"))
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert_exit(&o, 2);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("does not exist") && err.contains("scripts/build-quickjs-wasm"),
        "{err}"
    );
    assert!(o.stdout.is_empty());
}
