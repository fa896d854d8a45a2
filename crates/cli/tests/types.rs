//! TypeScript declarations of the tools, checked by the real TypeScript
//! compiler (`tsc` from npm, installed under target/npm by scripts/test):
//! a script that uses the tools right passes, one wrong argument name fails.

mod common;
use common::assert_exit;
use std::path::PathBuf;
use std::process::{Command, Output};

/// The compiler under target/npm, or None after a visible skip; where
/// scripts/test set HARNESS_REQUIRE_TSC a missing compiler fails instead.
fn tsc() -> Option<PathBuf> {
    let p =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/npm/node_modules/.bin/tsc");
    if p.exists() {
        return Some(p);
    }
    assert!(
        std::env::var_os("HARNESS_REQUIRE_TSC").is_none(),
        "tsc is required but not installed under target/npm"
    );
    println!("SKIPPED: tsc is not installed under target/npm (scripts/test installs it)");
    None
}

fn harness(args: &[&str], dir: &std::path::Path, tsc: &std::path::Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_harness"))
        .args(args)
        .current_dir(dir)
        .env("HARNESS_TSC", tsc)
        .output()
        .unwrap()
}

const GOOD: &str = r#"const r = await tools.read_file({path: "a.txt"});
const l = await tools.list_dir({path: "."});
const w = await tools.write_file({path: "b.txt", content: r.content.toUpperCase()});
const x = await tools.exec({command: ["true"], timeoutMs: 1000});
if (tools.spawn) tools.spawn.exec("read_file", {path: "a.txt"});
context.telemetry.emitProgress("done", "warn", {bytes: w.bytes});
console.log(context.model ?? "none", context.sandbox.timeoutMs, x.exitCode);
return l.entries.filter((e) => e.type === "file").length;"#;

#[test]
fn declarations_pass_a_right_script_and_fail_a_wrong_one() {
    let Some(tsc) = tsc() else { return };
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("good.ts"), GOOD).unwrap();
    std::fs::write(
        dir.path().join("bad.ts"),
        GOOD.replace(
            "{path: \"a.txt\"});\nconst l",
            "{pth: \"a.txt\"});\nconst l",
        ),
    )
    .unwrap();
    let o = harness(&["check", "--types", "good.ts"], dir.path(), &tsc);
    assert_exit(&o, 0);
    let o = harness(&["check", "--types", "--json", "bad.ts"], dir.path(), &tsc);
    assert_exit(&o, 1);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["error"]["location"]["line"], 1, "{v}");
    assert!(
        v["error"]["message"].as_str().unwrap().contains("'pth'"),
        "{v}"
    );
    // A pack narrows the declarations: exec is not in `fs`.
    let o = harness(
        &["check", "--types", "--pack", "fs", "good.ts"],
        dir.path(),
        &tsc,
    );
    assert_exit(&o, 1);
    // The declarations alone, and the list with schemas.
    let o = harness(
        &["tools", "--typescript", "--only", "read_file"],
        dir.path(),
        &tsc,
    );
    let dts = String::from_utf8_lossy(&o.stdout);
    assert!(
        dts.contains("read_file(args: {") && !dts.contains("write_file("),
        "{dts}"
    );
    let o = harness(&["tools", "--json", "--pack", "shell"], dir.path(), &tsc);
    let list: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(list[0]["name"], "exec");
    assert_eq!(
        list[0]["packs"],
        serde_json::json!(["anthropic-standard", "core-codex", "shell"])
    );
    assert!(list[0]["output_schema"]["properties"]["exitCode"].is_object());
    let o = harness(
        &["tools", "--pack", "fs", "--search", "read a file", "--json"],
        dir.path(),
        &tsc,
    );
    let ranked: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(ranked[0]["name"], "read_file", "{ranked}");
}

const CODEX: &str = r#"const found = await tools.grepFiles({pattern: "fn main", include: "*.rs", limit: 5});
const head = await tools.readFile({filePath: found.files[0], offset: 1, limit: 20, mode: "slice"});
const near = await tools.fileSearch({pattern: "main", limit: 3, exclude: ["target/**"]});
const tree = await tools.listDir({dirPath: ".", depth: 2});
const patched = await tools.applyPatch({patch: "*** Begin Patch\n*** Add File: x.txt\n+x\n*** End Patch"});
const run = await tools.exec({command: ["git", "diff", "--stat"], timeoutMs: 5000});
return [head.totalLines, near.matches[0]?.score ?? 0, tree.entries.length, patched.files.length, run.exitCode];"#;

#[test]
fn the_core_codex_declarations_type_a_script_using_every_tool() {
    let Some(tsc) = tsc() else { return };
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("good.ts"), CODEX).unwrap();
    std::fs::write(
        dir.path().join("bad.ts"),
        CODEX.replace("filePath: found", "path: found"),
    )
    .unwrap();
    let o = harness(
        &["check", "--types", "--pack", "core-codex", "good.ts"],
        dir.path(),
        &tsc,
    );
    assert_exit(&o, 0);
    let o = harness(
        &[
            "check",
            "--types",
            "--pack",
            "core-codex",
            "--json",
            "bad.ts",
        ],
        dir.path(),
        &tsc,
    );
    assert_exit(&o, 1);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["error"]["location"]["line"], 2, "{v}");
}

/// Upstream MCP servers' tools are typed under `tools.mcp.SERVER`: `harness
/// tools --typescript` prints them and `check --types` (tsc --strict)
/// accepts a right call and refuses a wrong argument.
#[test]
fn upstream_mcp_tools_are_declared_and_checked() {
    let Some(tsc) = tsc() else { return };
    let bin = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/npm/node_modules/.bin");
    if !bin.join("mcp-server-everything").exists() {
        assert!(
            std::env::var_os("HARNESS_REQUIRE_MCP_SERVERS").is_none(),
            "the MCP servers are not installed under target/npm"
        );
        println!("SKIPPED: the MCP servers are not installed under target/npm");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("harness.toml"),
        format!(
            "[mcp.servers.everything]\ncommand = \"{}\"\n",
            bin.join("mcp-server-everything").display()
        ),
    )
    .unwrap();
    let o = harness(
        &["tools", "--config", "harness.toml", "--typescript"],
        dir.path(),
        &tsc,
    );
    let d = String::from_utf8_lossy(&o.stdout);
    assert!(
        d.contains("readonly mcp: {") && d.contains("\"get-sum\"(args: {"),
        "{d}"
    );
    let good = r#"const s = await tools.mcp.everything["get-sum"]({a: 1, b: 2});
const w = await tools.mcp.everything["get-structured-content"]({location: "Chicago"});
const e = await tools.mcp.everything.echo({message: "hi"});
return [s, w.temperature + w.humidity, e];"#;
    std::fs::write(dir.path().join("good.ts"), good).unwrap();
    std::fs::write(
        dir.path().join("bad.ts"),
        good.replace("{a: 1, b: 2}", "{a: 1, c: 2}"),
    )
    .unwrap();
    let check = |f: &str| {
        harness(
            &["check", "--types", "--config", "harness.toml", f],
            dir.path(),
            &tsc,
        )
    };
    let o = check("good.ts");
    assert_exit(&o, 0);
    let o = check("bad.ts");
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(1), "{out}");
    assert!(out.contains("TS2345") && out.contains(":1:"), "{out}");
}
