//! `harness mcp` against a real MCP client: the Python `mcp` SDK (PyPI,
//! in a virtualenv under target/ that scripts/test creates), on stdio and
//! on streamable HTTP, with the real filesystem server from npm as the
//! upstream. The client's checks are in `tests/mcp/client.py`.

use std::path::PathBuf;
use std::process::Command;

fn workspace() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The virtualenv's python and the npm filesystem server, or a visible skip
/// (a failure where scripts/test set HARNESS_REQUIRE_MCP_CLIENT).
fn parts() -> Option<(PathBuf, PathBuf)> {
    let python = workspace().join("target/venv/bin/python");
    let fs = workspace().join("target/npm/node_modules/.bin/mcp-server-filesystem");
    let ok = python.exists()
        && fs.exists()
        && Command::new(&python)
            .args(["-c", "import mcp"])
            .status()
            .is_ok_and(|s| s.success());
    if ok {
        return Some((python, fs));
    }
    assert!(
        std::env::var_os("HARNESS_REQUIRE_MCP_CLIENT").is_none(),
        "the Python MCP client (target/venv) or the npm servers are missing; scripts/test installs them"
    );
    println!("SKIPPED: the Python MCP client or the npm MCP servers are not installed (scripts/test installs them)");
    None
}

fn client_run(transport: &[&str], extra_args: &str) {
    let Some((python, fs)) = parts() else { return };
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    std::fs::create_dir(&root).unwrap();
    let root = root.canonicalize().unwrap();
    std::fs::write(root.join("notes.txt"), "remember the milk\n").unwrap();
    let config = dir.path().join("harness.toml");
    std::fs::write(
        &config,
        format!(
            "[mcp.servers.fs]\ncommand = \"{}\"\nargs = [\"{}\"]\n",
            fs.display(),
            root.display()
        ),
    )
    .unwrap();
    let audit = dir.path().join("audit.jsonl");
    let out = Command::new(&python)
        .arg(workspace().join("crates/cli/tests/mcp/client.py"))
        .arg(env!("CARGO_BIN_EXE_harness"))
        .arg(&config)
        .arg(&root)
        .args(transport)
        .env(
            "HARNESS_MCP_EXTRA_ARGS",
            format!("--audit-log {} {extra_args}", audit.display()),
        )
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stdout.trim_end().ends_with("ok"),
        "the MCP client failed:\n{stdout}\n{stderr}"
    );
    // The run the client gave up on was cancelled by the server, at once.
    let log = std::fs::read_to_string(&audit).unwrap();
    let cancelled: Vec<serde_json::Value> = log
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .filter(|v: &serde_json::Value| v["outcome"] == "ScriptCancelledError")
        .collect();
    assert_eq!(cancelled.len(), 1, "{log}");
}

#[test]
fn a_python_client_over_stdio() {
    client_run(&[], "");
}

#[test]
fn a_python_client_over_streamable_http() {
    // Behind the process boundary: what the client hears while a run runs
    // (log messages, approvals) crosses it too.
    client_run(&["--http"], "--isolation process");
}

/// `harness mcp` follows its upstream's tools: an upstream (the Python
/// SDK's server, `tests/mcp/changing_upstream.py`) that gains a tool and
/// says so, then dies and comes back with another, is listed again; the
/// client (`tests/mcp/catalogue.py`) hears `tools/list_changed` and the
/// update of the resource it subscribed to, and calls the new tools.
#[test]
fn the_catalogue_follows_an_upstream_whose_tools_change() {
    let Some((python, _)) = parts() else { return };
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("harness.toml");
    std::fs::write(
        &config,
        format!(
            "[mcp.servers.up]\ncommand = \"{}\"\nargs = [\"{}\", \"{}\"]\n",
            python.display(),
            workspace()
                .join("crates/cli/tests/mcp/changing_upstream.py")
                .display(),
            dir.path().join("starts").display()
        ),
    )
    .unwrap();
    python_says_ok(&python, "catalogue.py", &[config.as_os_str()]);
}

/// A client whose stream drops while its run runs gets the answer by
/// resuming the stream (`Last-Event-ID`), while the run still runs and
/// after it ended (`tests/mcp/resume.py`, raw HTTP).
#[test]
fn a_dropped_stream_is_resumed_with_its_answer() {
    let Some((python, _)) = parts() else { return };
    python_says_ok(&python, "resume.py", &[]);
}

/// Sessions over MCP on every engine the server runs by default
/// (QuickJS in process, Boa and WASI as their defaults say): state kept
/// within a session, none across sessions, connections or into unscoped
/// runs (`tests/mcp/sessions.py`).
#[test]
fn sessions_over_mcp_keep_state_for_their_own_client_only() {
    let Some((python, _)) = parts() else { return };
    for engine in ["quickjs", "boa", "wasi"] {
        python_says_ok(&python, "sessions.py", &[std::ffi::OsStr::new(engine)]);
    }
}

/// Runs `tests/mcp/SCRIPT HARNESS ARGS…`, which prints "ok" when its
/// checks pass.
fn python_says_ok(python: &std::path::Path, script: &str, args: &[&std::ffi::OsStr]) {
    let out = Command::new(python)
        .arg(workspace().join("crates/cli/tests/mcp").join(script))
        .arg(env!("CARGO_BIN_EXE_harness"))
        .args(args)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.trim_end().ends_with("ok"),
        "{script} failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The official conformance suite: its server scenarios against
/// `harness mcp --http`, its client scenarios against our upstream client
/// (`tests/mcp/conformance-client.sh`), judged by
/// `tests/mcp/conformance-baseline.yml`
/// (which says why each scenario left out does not apply). Node 22 and the
/// suite are installed under target/npm by `scripts/test`.
#[test]
fn the_official_conformance_suite_passes_every_scenario_that_applies() {
    let bin = workspace().join("target/npm/node_modules/.bin");
    if !bin.join("conformance").exists() || !bin.join("node").exists() {
        assert!(
            std::env::var_os("HARNESS_REQUIRE_MCP_SERVERS").is_none(),
            "the MCP conformance suite is not installed under target/npm (scripts/test installs it)"
        );
        eprintln!("SKIPPED: the MCP conformance suite is not installed under target/npm");
        return;
    }
    let root = tempfile::tempdir().unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut server = Command::new(env!("CARGO_BIN_EXE_harness"))
        .args([
            "mcp",
            "--approve",
            "no",
            "--http",
            &format!("127.0.0.1:{port}"),
        ])
        .arg("--root")
        .arg(root.path())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let up = (0..100).any(|_| {
        std::thread::sleep(std::time::Duration::from_millis(100));
        std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
    });
    let results = tempfile::tempdir().unwrap();
    // The suite with Node 22 first on PATH, judged by the baseline.
    let suite = |args: &[&str]| {
        let path = format!(
            "{}:{}",
            bin.display(),
            std::env::var("PATH").unwrap_or_default()
        );
        let out = Command::new(bin.join("conformance"))
            .args(args)
            .arg("--expected-failures")
            .arg(workspace().join("crates/cli/tests/mcp/conformance-baseline.yml"))
            .arg("-o")
            .arg(results.path())
            .env("PATH", path)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "conformance {args:?} failed:\n{stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        stdout
    };
    let url = format!("http://127.0.0.1:{port}/mcp");
    let server_run = up.then(|| {
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            suite(&["server", "--suite", "all", "--url", &url])
        }))
    });
    let _ = server.kill();
    let _ = server.wait();
    let stdout = match server_run.expect("harness mcp --http did not listen") {
        Ok(stdout) => stdout,
        Err(panic) => std::panic::resume_unwind(panic),
    };
    assert!(stdout.contains("server-initialize"), "{stdout}");
    let client = format!(
        "{} {}",
        workspace()
            .join("crates/cli/tests/mcp/conformance-client.sh")
            .display(),
        env!("CARGO_BIN_EXE_harness")
    );
    let stdout = suite(&["client", "--suite", "all", "--command", &client]);
    for scenario in ["tools_call", "auth/metadata-default", "auth/scope-step-up"] {
        assert!(
            stdout.contains(scenario),
            "{scenario} did not run:\n{stdout}"
        );
    }
}

/// On the wasi engine a run that waits on the client's approval is put
/// away while the client answers (a durable run), and the client sees
/// the same as on any engine.
#[test]
fn a_python_client_on_the_wasi_engine_whose_approvals_suspend() {
    client_run(&[], "--engine wasi");
}
