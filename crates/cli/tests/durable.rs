//! Durable runs from the command line: `run --suspend-to` puts a run away
//! (exit 3), `harness resume` goes on in a new process, exactly once.

mod common;
use common::{assert_exit, harness, json};
use serde_json::json;
use std::path::Path;

const EXEC: &str =
    r#"const r = await tools.exec({command: ["echo", "hi"]}); return r.stdout.trim()"#;

/// `harness ARGS` in `dir`, its state directory (key, used ids) there too.
fn h(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> std::process::Output {
    let state = dir.join("state");
    let mut env: Vec<(&str, &str)> = env.to_vec();
    let state = state.to_str().unwrap().to_owned();
    env.push(("XDG_STATE_HOME", &state));
    harness(args, "", Some(dir), &env)
}

fn suspend(dir: &Path, script: &str, file: &str, extra: &[&str]) -> serde_json::Value {
    std::fs::write(dir.join("s.js"), script).unwrap();
    let mut args = vec!["run", "--engine", "wasi", "--suspend-to", file, "--json"];
    args.extend_from_slice(extra);
    args.push("s.js");
    let o = h(dir, &args, &[]);
    assert_exit(&o, 3);
    json(&o)
}

#[test]
fn an_exec_approval_suspends_and_resumes_once_in_a_new_process() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let report = suspend(d, EXEC, "c.bin", &[]);
    assert_eq!(report["ok"], json!(false));
    assert_eq!(report["error"], json!(null));
    let s = &report["suspension"];
    assert_eq!(s["pending"][0]["tool"], json!("exec"));
    assert_eq!(s["pending"][0]["kind"], json!("approval"));
    assert_eq!(s["pending"][0]["args"], json!({"command": ["echo", "hi"]}));
    assert!(s["id"].as_str().unwrap().starts_with("cnt_"));
    let sealed = std::fs::read(d.join("c.bin")).unwrap();
    assert!(sealed.len() <= 32 * 1024, "{} bytes", sealed.len());
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(d.join("c.bin"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
    }
    let key = d.join("state/harness/continuation.key");
    assert!(key.exists(), "the CLI made a key for this user");

    let o = h(d, &["resume", "c.bin", "--approve", "yes", "--json"], &[]);
    assert_exit(&o, 0);
    let done = json(&o);
    assert_eq!(done["value"], json!("hi"), "{done}");
    assert_eq!(done["script_id"], report["script_id"]);
    assert_eq!(done["approvals"][0]["outcome"], json!("approved"));

    let again = h(d, &["resume", "c.bin", "--approve", "yes", "--json"], &[]);
    assert_exit(&again, 1);
    let e = &json(&again)["error"];
    assert_eq!(e["code"], json!("ContinuationInvalidError"));
    assert!(
        e["message"].as_str().unwrap().contains("resumed already"),
        "{e}"
    );
}

#[test]
fn a_denied_approval_is_an_error_the_script_catches() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let script = format!("try {{ {EXEC} }} catch (e) {{ return e.name }}");
    suspend(d, &script, "c.bin", &[]);
    let o = h(d, &["resume", "c.bin", "--approve", "no", "--json"], &[]);
    assert_exit(&o, 0);
    assert_eq!(json(&o)["value"], json!("ApprovalDeniedError"));
}

#[test]
fn a_changed_byte_an_unknown_key_or_a_missing_answer_runs_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    suspend(d, EXEC, "c.bin", &[]);
    let sealed = std::fs::read(d.join("c.bin")).unwrap();
    for at in [10, sealed.len() / 2, sealed.len() - 1] {
        let mut t = sealed.clone();
        t[at] ^= 0x20;
        std::fs::write(d.join("t.bin"), &t).unwrap();
        let o = h(d, &["resume", "t.bin", "--approve", "yes", "--json"], &[]);
        assert_exit(&o, 1);
        let r = json(&o);
        assert_eq!(
            r["error"]["code"],
            json!("ContinuationInvalidError"),
            "byte {at}"
        );
        assert_eq!(r["tool_calls"], json!([]));
    }
    // No answer for the approval: a usage error, and the continuation is
    // still good.
    let o = h(d, &["resume", "c.bin"], &[]);
    assert_exit(&o, 2);
    assert!(String::from_utf8_lossy(&o.stderr).contains("--approve"));
    // Another user's key does not open it.
    let other = tempfile::tempdir().unwrap();
    std::fs::copy(d.join("c.bin"), other.path().join("c.bin")).unwrap();
    let o = h(
        other.path(),
        &["resume", "c.bin", "--approve", "yes", "--json"],
        &[],
    );
    assert_exit(&o, 1);
    let e = &json(&o)["error"];
    assert!(
        e["message"].as_str().unwrap().contains("sealed with key"),
        "{e}"
    );
    // The right one still does.
    let o = h(d, &["resume", "c.bin", "--approve", "yes", "--json"], &[]);
    assert_exit(&o, 0);
}

#[test]
fn keys_from_the_environment_rotate_and_continuations_expire() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let old = "11".repeat(32);
    let new = "22".repeat(32);
    std::fs::write(d.join("old.toml"), "[durable]\nkeys_env = [\"K_OLD\"]\n").unwrap();
    std::fs::write(
        d.join("rotated.toml"),
        "[durable]\nkeys_env = [\"K_NEW\", \"K_OLD\"]\n",
    )
    .unwrap();
    let env = [("K_OLD", old.as_str()), ("K_NEW", new.as_str())];
    std::fs::write(d.join("s.js"), EXEC).unwrap();
    let args = [
        "run",
        "--engine",
        "wasi",
        "--config",
        "old.toml",
        "--suspend-to",
        "c.bin",
        "s.js",
    ];
    assert_exit(&h(d, &args, &env), 3);
    assert!(
        !d.join("state/harness/continuation.key").exists(),
        "no key file with keys_env"
    );
    let resume = [
        "resume",
        "c.bin",
        "--config",
        "rotated.toml",
        "--approve",
        "yes",
        "--json",
    ];
    let o = h(d, &resume, &env);
    assert_exit(&o, 0);
    assert_eq!(json(&o)["value"], json!("hi"));

    std::fs::write(
        d.join("short.toml"),
        "[durable]\nkeys_env = [\"K_NEW\"]\nmax_suspended_ms = 1\n",
    )
    .unwrap();
    let args = [
        "run",
        "--engine",
        "wasi",
        "--config",
        "short.toml",
        "--suspend-to",
        "x.bin",
        "s.js",
    ];
    assert_exit(&h(d, &args, &env), 3);
    std::thread::sleep(std::time::Duration::from_millis(20));
    let o = h(
        d,
        &[
            "resume",
            "x.bin",
            "--config",
            "short.toml",
            "--approve",
            "yes",
            "--json",
        ],
        &env,
    );
    assert_exit(&o, 1);
    let e = &json(&o)["error"];
    assert!(e["message"].as_str().unwrap().contains("expired"), "{e}");
    let o = h(
        d,
        &[
            "run",
            "--engine",
            "wasi",
            "--config",
            "short.toml",
            "--suspend-to",
            "y.bin",
            "s.js",
        ],
        &[],
    );
    assert_exit(&o, 2);
    assert!(String::from_utf8_lossy(&o.stderr).contains("K_NEW"));
}

#[test]
fn a_deferred_tool_waits_for_its_answer_and_other_engines_refuse() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(
        d.join("deferred.toml"),
        "[tools.list_dir]\ndeferred = true\n",
    )
    .unwrap();
    let script = "const a = await tools.list_dir({path: '.'}); \
                  let b; try { await tools.list_dir({path: 'x'}) } catch (e) { b = e.message } \
                  return [a, b]";
    let r = suspend(d, script, "c.bin", &["--config", "deferred.toml"]);
    assert_eq!(r["suspension"]["pending"][0]["kind"], json!("deferred"));
    let o = h(
        d,
        &[
            "resume",
            "c.bin",
            "--config",
            "deferred.toml",
            "--answer",
            "1=[\"from outside\"]",
            "--json",
        ],
        &[],
    );
    assert_exit(&o, 3);
    let again = json(&o);
    assert_eq!(again["suspension"]["pending"][0]["call_id"], json!(2));
    let o = h(
        d,
        &[
            "resume",
            "c.bin",
            "--config",
            "deferred.toml",
            "--fail",
            "2=nobody knows",
            "--json",
        ],
        &[],
    );
    assert_exit(&o, 0);
    assert_eq!(
        json(&o)["value"],
        json!([["from outside"], "list_dir failed: nobody knows"])
    );

    std::fs::write(d.join("s.js"), EXEC).unwrap();
    for engine in ["quickjs", "boa"] {
        let o = h(
            d,
            &[
                "run",
                "--engine",
                engine,
                "--suspend-to",
                "q.bin",
                "--json",
                "s.js",
            ],
            &[],
        );
        assert_exit(&o, 1);
        let e = &json(&o)["error"];
        assert_eq!(e["code"], json!("UnsupportedError"), "{engine}");
        assert!(e["message"].as_str().unwrap().contains("wasi"));
        assert!(!d.join("q.bin").exists());
    }
}
