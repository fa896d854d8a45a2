//! The workspace sandbox: DESIGN.md's scenarios, confinement to /app, and
//! every limit. Needs `bin/quickjs.wasm` (`scripts/build-quickjs-wasm`).

use harness_wasi::sandbox::Termination;
use harness_wasi::{Sandbox, SandboxError, SandboxPolicy, SandboxResult};
use std::path::Path;

fn sandbox(root: &Path, session: &str, policy: SandboxPolicy) -> Sandbox {
    Sandbox::new(policy, session, root).expect("valid session")
}

fn run(sb: &Sandbox, code: &str) -> SandboxResult {
    sb.execute(code).expect("the sandbox runs")
}

#[test]
fn a_program_writes_reads_and_reports_its_files() {
    let root = tempfile::tempdir().unwrap();
    let sb = sandbox(root.path(), "s1", SandboxPolicy::default());
    let r = run(
        &sb,
        "const fs = require('fs');\n\
         fs.writeFileSync('notes.txt', 'hello');\n\
         fs.mkdirSync('data/deep', { recursive: true });\n\
         fs.writeFileSync('/app/data/deep/n.json', JSON.stringify({ n: 1 }));\n\
         console.log(fs.readFileSync('notes.txt', 'utf8'));\n\
         console.error('to stderr');",
    );
    assert!(r.success, "{r:?}");
    assert_eq!(r.exit_code, 0);
    assert_eq!(r.stdout, "hello\n");
    assert_eq!(r.stderr, "to stderr\n");
    assert_eq!(r.files_created, vec!["data/deep/n.json", "notes.txt"]);
    assert!(r.files_modified.is_empty());
    assert_eq!(r.metadata.runtime, "javascript");
    assert_eq!(r.metadata.termination, Termination::Exited);
    assert!(r.fuel_consumed > 0 && r.memory_used_bytes > 0 && r.duration_ms > 0.0);
    assert_eq!(
        r.workspace_path,
        root.path().join("s1").canonicalize().unwrap()
    );
    assert_eq!(
        std::fs::read_to_string(root.path().join("s1/notes.txt")).unwrap(),
        "hello"
    );

    // A later run sees the files, and reports what it changed.
    let r = run(
        &sb,
        "const fs = require('fs');\n\
         fs.appendFileSync('notes.txt', ' again');\n\
         fs.writeFileSync('data/deep/n.json', JSON.stringify({ n: 1 }));\n\
         fs.unlinkSync('data/deep/n.json');\n\
         fs.writeFileSync('data/deep/n.json', JSON.stringify({ n: 1 }));\n\
         const st = fs.statSync('notes.txt');\n\
         console.log(fs.readFileSync('notes.txt', 'utf8'), st.size, st.isFile(), st.isDirectory());\n\
         console.log(JSON.stringify(fs.readdirSync('.')), fs.existsSync('nope'));",
    );
    assert!(r.success, "{r:?}");
    assert_eq!(
        r.stdout,
        "hello again 11 true false\n[\".metadata.json\",\"data\",\"notes.txt\",\"user_code.js\"] false\n"
    );
    assert!(r.files_created.is_empty(), "{r:?}");
    // Rewritten with the same bytes: not modified.
    assert_eq!(r.files_modified, vec!["notes.txt"]);

    let meta: serde_json::Value =
        serde_json::from_slice(&std::fs::read(root.path().join("s1/.metadata.json")).unwrap())
            .unwrap();
    assert_eq!(meta["runs"], 2);
    assert!(meta["updated_at"]
        .as_str()
        .is_some_and(|s| s.ends_with('Z')));
    assert!(meta["created_at"].as_str().is_some());
    assert_eq!(meta["last_run"]["files_modified"][0], "notes.txt");
}

#[test]
fn deleted_files_and_uncaught_errors_are_reported() {
    let root = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(root.path().join("s")).unwrap();
    std::fs::write(root.path().join("s/old.txt"), "x").unwrap();
    let sb = sandbox(root.path(), "s", SandboxPolicy::default());
    let r = run(
        &sb,
        "require('fs').unlinkSync('old.txt');\nfunction f() { throw new TypeError('bad thing'); }\nf();",
    );
    assert!(!r.success);
    assert_eq!(r.exit_code, 1);
    assert_eq!(r.files_deleted, vec!["old.txt"]);
    assert!(r.stderr.contains("TypeError: bad thing"), "{}", r.stderr);
    assert!(r.stderr.contains("user_code.js:2"), "{}", r.stderr);
    assert_eq!(r.metadata.termination, Termination::Exited);
}

/// What a file operation threw, as `code message`.
fn fs_error(sb: &Sandbox, call: &str) -> String {
    let r = run(
        sb,
        &format!(
            "const fs = require('fs');\ntry {{ {call}; console.log('NO ERROR'); }} catch (e) {{ console.log(e.code + ' ' + e.message); }}"
        ),
    );
    assert!(r.success, "{r:?}");
    r.stdout
}

#[test]
fn nothing_outside_app_can_be_reached() {
    let root = tempfile::tempdir().unwrap();
    let sb = sandbox(root.path(), "s", SandboxPolicy::default());
    std::fs::create_dir_all(sb.workspace_path()).unwrap();
    std::os::unix::fs::symlink("/etc/passwd", sb.workspace_path().join("passwd")).unwrap();
    std::os::unix::fs::symlink("/etc", sb.workspace_path().join("etc")).unwrap();
    for call in [
        "fs.readFileSync('/etc/passwd', 'utf8')",
        "fs.readFileSync('/app/../etc/passwd', 'utf8')",
        "fs.readFileSync('../../../../etc/passwd', 'utf8')",
        "fs.writeFileSync('/tmp/escape.txt', 'x')",
        "fs.readdirSync('/')",
        "fs.readFileSync('passwd', 'utf8')",
        "fs.readFileSync('etc/passwd', 'utf8')",
        "fs.readdirSync('etc')",
        "fs.writeFileSync('etc/escape.txt', 'x')",
    ] {
        let out = fs_error(&sb, call);
        assert!(out.starts_with("EACCES "), "{call}: {out}");
    }
    assert!(!Path::new("/tmp/escape.txt").exists());

    // The host writes the program and its bookkeeping without following
    // links left in the workspace.
    let outside = root.path().join("outside.txt");
    std::fs::write(&outside, "keep").unwrap();
    std::fs::remove_file(sb.workspace_path().join("user_code.js")).unwrap();
    std::os::unix::fs::symlink(&outside, sb.workspace_path().join("user_code.js")).unwrap();
    std::os::unix::fs::symlink(&outside, sb.workspace_path().join(".metadata.json.tmp")).unwrap();
    let r = run(&sb, "console.log('ran')");
    assert_eq!(r.stdout, "ran\n");
    assert_eq!(std::fs::read_to_string(&outside).unwrap(), "keep");
    assert!(!Path::new("/etc/escape.txt").exists());

    // Nor reads them: a `.metadata.json` linked to a host file is replaced,
    // and none of that file's fields reach the new one (which the next
    // program could read).
    let host_json = root.path().join("host.json");
    let planted = r#"{"created_at":"host secret","runs":41}"#;
    std::fs::write(&host_json, planted).unwrap();
    let meta_path = sb.workspace_path().join(".metadata.json");
    std::fs::remove_file(&meta_path).unwrap();
    std::os::unix::fs::symlink(&host_json, &meta_path).unwrap();
    run(&sb, "console.log('ran')");
    assert_eq!(std::fs::read_to_string(&host_json).unwrap(), planted);
    assert!(!std::fs::symlink_metadata(&meta_path)
        .unwrap()
        .file_type()
        .is_symlink());
    let meta: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&meta_path).unwrap()).unwrap();
    assert_eq!(meta["runs"], 1, "{meta}");
    assert_ne!(meta["created_at"], "host secret");

    // A second name for a workspace file is not written through either:
    // the program's file keeps its bytes.
    let notes = sb.workspace_path().join("notes.txt");
    std::fs::write(&notes, "mine").unwrap();
    for name in ["user_code.js", ".metadata.json"] {
        let link = sb.workspace_path().join(name);
        std::fs::remove_file(&link).unwrap();
        std::fs::hard_link(&notes, &link).unwrap();
    }
    let r = run(&sb, "console.log('ran again')");
    assert_eq!(r.stdout, "ran again\n");
    assert_eq!(std::fs::read_to_string(&notes).unwrap(), "mine");
    assert_eq!(
        std::fs::read_to_string(sb.workspace_path().join("user_code.js")).unwrap(),
        "console.log('ran again')"
    );
}

/// The program file and `.metadata.json` are rewritten in place from the
/// second run on: a shorter program leaves nothing of a longer one, and
/// the metadata counts every run.
#[test]
fn later_runs_rewrite_the_program_and_the_metadata_whole() {
    let root = tempfile::tempdir().unwrap();
    let sb = sandbox(root.path(), "s", SandboxPolicy::default());
    let long = format!("console.log('{}')", "x".repeat(5000));
    assert!(run(&sb, &long).success);
    for (i, code) in ["console.log(1)", "console.log(22)", ""].iter().enumerate() {
        let r = run(&sb, code);
        assert!(r.success, "{r:?}");
        assert_eq!(
            std::fs::read_to_string(sb.workspace_path().join("user_code.js")).unwrap(),
            *code
        );
        let meta: serde_json::Value = serde_json::from_slice(
            &std::fs::read(sb.workspace_path().join(".metadata.json")).unwrap(),
        )
        .unwrap();
        assert_eq!(meta["runs"], i + 2);
    }
}

#[test]
fn sessions_never_see_each_other() {
    let root = tempfile::tempdir().unwrap();
    let a = sandbox(root.path(), "alice", SandboxPolicy::default());
    let b = sandbox(root.path(), "bob", SandboxPolicy::default());
    let r = run(
        &a,
        "require('fs').writeFileSync('secret.txt', 'alice only')",
    );
    assert!(r.success, "{r:?}");
    let r = run(
        &b,
        "const fs = require('fs');\n\
         console.log(fs.existsSync('secret.txt'), fs.existsSync('/app/../alice/secret.txt'), JSON.stringify(fs.readdirSync('/app')));\n\
         try { fs.readFileSync('../alice/secret.txt', 'utf8'); } catch (e) { console.log(e.code); }",
    );
    assert!(r.success, "{r:?}");
    assert_eq!(r.stdout, "false false [\"user_code.js\"]\nEACCES\n");
}

/// The program's runtime, context and globals come from the guest's
/// pre-initialised snapshot: a trivial program costs a fraction of the
/// ~4.9 million fuel units that building them takes (fuel is exact, so
/// this checks which path ran, not how fast).
#[test]
fn a_program_starts_from_its_pre_initialised_runtime() {
    let root = tempfile::tempdir().unwrap();
    let r = run(
        &sandbox(root.path(), "s", SandboxPolicy::default()),
        "console.log(1 + 1)",
    );
    assert!(r.success && r.stdout == "2\n", "{r:?}");
    assert!(r.fuel_consumed < 2_000_000, "{}", r.fuel_consumed);
}

/// Every run starts from the same pre-initialised snapshot of the
/// program's runtime: what one run leaves in its globals is gone in the
/// next, and `Math.random` is seeded per run, not frozen into the snapshot.
#[test]
fn runs_start_from_a_fresh_snapshot_with_their_own_randomness() {
    let root = tempfile::tempdir().unwrap();
    let sb = sandbox(root.path(), "s", SandboxPolicy::default());
    let probe = "console.log(JSON.stringify([typeof globalThis.planted, Object.prototype.planted, \
                 module.exports.planted, Math.random(), Math.random()]));\n\
                 globalThis.planted = 1; Object.prototype.planted = 2; module.exports.planted = 3;\n\
                 Math.random = () => 0.5;";
    let seen: Vec<serde_json::Value> = (0..3)
        .map(|_| {
            let r = run(&sb, probe);
            assert!(r.success, "{r:?}");
            serde_json::from_str(r.stdout.trim()).expect("one JSON line")
        })
        .collect();
    for v in &seen {
        assert_eq!(v[0], "undefined", "{v}");
        assert_eq!(v[1], serde_json::Value::Null, "{v}");
        assert_eq!(v[2], serde_json::Value::Null, "{v}");
        let x = v[3].as_f64().expect("a number");
        assert!((0.0..1.0).contains(&x) && x != 0.5, "{v}");
    }
    let firsts: std::collections::HashSet<String> = seen.iter().map(|v| v[3].to_string()).collect();
    assert_eq!(
        firsts.len(),
        3,
        "Math.random repeated across runs: {seen:?}"
    );
}

#[test]
fn an_endless_loop_runs_out_of_fuel() {
    let root = tempfile::tempdir().unwrap();
    let policy = SandboxPolicy {
        fuel: Some(50_000_000),
        ..SandboxPolicy::default()
    };
    let r = run(&sandbox(root.path(), "s", policy), "while (true) {}");
    assert!(!r.success);
    assert_eq!(r.metadata.termination, Termination::FuelExhausted);
    assert!(r.stderr.contains("out of fuel"), "{}", r.stderr);
    assert_eq!(r.fuel_consumed, 50_000_000);
}

#[test]
fn a_runaway_is_stopped_by_the_deadline_even_with_unlimited_fuel() {
    let root = tempfile::tempdir().unwrap();
    let policy = SandboxPolicy {
        fuel: None,
        timeout_ms: 300,
        ..SandboxPolicy::default()
    };
    let started = std::time::Instant::now();
    let r = run(
        &sandbox(root.path(), "s", policy),
        "for (;;) { try { for (;;) {} } catch (e) {} }",
    );
    assert!(!r.success);
    assert_eq!(r.metadata.termination, Termination::Timeout);
    assert!(r.stderr.contains("timeout"), "{}", r.stderr);
    assert!(started.elapsed().as_secs() < 10, "{:?}", started.elapsed());
}

/// Runaway recursion ends the program with a clear termination (the
/// guest's native wasm stack is capped by the host), never the host; the
/// sandbox stays usable.
#[test]
fn runaway_recursion_ends_the_program_as_a_stack_overflow() {
    let root = tempfile::tempdir().unwrap();
    let sb = sandbox(root.path(), "s", SandboxPolicy::default());
    let r = run(
        &sb,
        "function f(n) { return n === 0 ? 0 : 1 + f(n - 1); }\n\
         console.log(f(1000));\n\
         try { f(1e7); } catch (e) { console.log('caught ' + e.name); }",
    );
    assert!(!r.success, "{r:?}");
    assert_eq!(r.metadata.termination, Termination::StackOverflow, "{r:?}");
    assert_eq!(r.exit_code, 1, "{r:?}");
    assert!(r.stdout.starts_with("1000\n"), "{r:?}");
    assert!(r.stderr.contains("stack overflow"), "{}", r.stderr);
    assert_eq!(run(&sb, "console.log('next')").stdout, "next\n");
}

#[test]
fn a_memory_bomb_fails_safely_under_64_mb() {
    let root = tempfile::tempdir().unwrap();
    let policy = SandboxPolicy {
        memory_bytes: 64 << 20,
        ..SandboxPolicy::default()
    };
    let sb = sandbox(root.path(), "s", policy);
    let r = run(
        &sb,
        "const keep = []; for (let i = 0; ; i++) keep.push('x'.repeat(1 << 20) + i);",
    );
    assert!(!r.success);
    assert!(r.memory_used_bytes <= 64 << 20, "{}", r.memory_used_bytes);
    assert!(
        r.stderr.contains("out of memory"),
        "{:?}: {}",
        r.metadata.termination,
        r.stderr
    );
    // The host is fine, and so is the next run.
    let r = run(&sb, "console.log(1 + 1)");
    assert!(r.success && r.stdout == "2\n", "{r:?}");
}

#[test]
fn output_over_the_cap_is_truncated_and_flagged() {
    let root = tempfile::tempdir().unwrap();
    let policy = SandboxPolicy {
        stdout_max_bytes: 1_000,
        stderr_max_bytes: 100,
        ..SandboxPolicy::default()
    };
    let r = run(
        &sandbox(root.path(), "s", policy),
        "for (let i = 0; i < 100; i++) console.log('x'.repeat(99));\nconsole.error('e'.repeat(500));",
    );
    assert!(r.success, "{r:?}");
    assert_eq!(r.stdout.len(), 1_000);
    assert!(r.metadata.stdout_truncated);
    assert_eq!(r.stderr.len(), 100);
    assert!(r.metadata.stderr_truncated);

    let r = run(
        &sandbox(root.path(), "t", SandboxPolicy::default()),
        "console.log('short')",
    );
    assert!(!r.metadata.stdout_truncated && !r.metadata.stderr_truncated);
}

#[test]
fn validate_code_parses_without_running() {
    let root = tempfile::tempdir().unwrap();
    let sb = sandbox(root.path(), "s", SandboxPolicy::default());
    assert!(sb.validate_code("require('fs').writeFileSync('ran.txt', 'x')"));
    assert!(
        sb.validate_code("with (Math) { console.log(PI) }"),
        "sloppy global code is a program"
    );
    assert!(!sb.validate_code("let x = ;"));
    assert!(!sb.validate_code("}); require('fs').writeFileSync('ran.txt', 'x'); (function () {"));
    assert!(!sb.workspace_path().join("ran.txt").exists());
}

#[test]
fn bad_sessions_and_missing_binaries_are_clear_errors() {
    let root = tempfile::tempdir().unwrap();
    for bad in ["", "..", "../x", "a/b", ".hidden", "a b"] {
        assert!(
            matches!(
                Sandbox::new(SandboxPolicy::default(), bad, root.path()),
                Err(SandboxError::InvalidSession(_))
            ),
            "{bad:?}"
        );
    }
    let sb = sandbox(root.path(), "s", SandboxPolicy::default())
        .with_wasm_binary_path(root.path().join("nowhere/quickjs.wasm"));
    let err = sb.execute("1").unwrap_err().to_string();
    assert!(err.contains("nowhere/quickjs.wasm"), "{err}");
    assert!(err.contains("scripts/build-quickjs-wasm"), "{err}");
    assert!(!sb.validate_code("1"));
}

/// Calls `caller(0)` … `caller(callers - 1)` at once, on threads of their
/// own.
fn at_once(callers: usize, caller: impl Fn(usize) + Sync) {
    std::thread::scope(|scope| {
        for c in 0..callers {
            let caller = &caller;
            scope.spawn(move || caller(c));
        }
    });
}

/// Runs a program that prints `n`, and checks that this run printed it.
fn prints_its_own(sb: &Sandbox, n: usize) {
    let r = run(sb, &format!("console.log({n})"));
    assert!(r.success, "{r:?}");
    assert_eq!(r.stdout, format!("{n}\n"));
}

/// Runs share a few runner threads: many at once, from many callers, each
/// get their own program's answer, and a run that overflowed its stack
/// (whose thread is let go) does not disturb the next.
#[test]
fn concurrent_runs_each_get_their_own_answer() {
    let root = tempfile::tempdir().unwrap();
    at_once(6, |caller| {
        let sb = sandbox(
            root.path(),
            &format!("caller-{caller}"),
            SandboxPolicy::default(),
        );
        for i in 0..8 {
            if caller == 0 && i == 3 {
                let r = run(&sb, "function f() { return f() + 1 } f()");
                assert_eq!(r.metadata.termination, Termination::StackOverflow);
                continue;
            }
            prints_its_own(&sb, caller * 100 + i);
        }
    });
}

/// Runs of one session from many callers at once take turns: each runs its
/// own program (they share `user_code.js`), and the metadata counts them
/// all (they share `.metadata.json`).
#[test]
fn runs_of_one_session_take_turns() {
    let root = tempfile::tempdir().unwrap();
    at_once(4, |caller| {
        let sb = sandbox(root.path(), "shared", SandboxPolicy::default());
        for i in 0..6 {
            prints_its_own(&sb, caller * 100 + i);
        }
    });
    let meta: serde_json::Value =
        serde_json::from_slice(&std::fs::read(root.path().join("shared/.metadata.json")).unwrap())
            .unwrap();
    assert_eq!(meta["runs"], 24, "{meta}");
}

/// Makes a FIFO at `path`.
#[cfg(unix)]
#[allow(unsafe_code)]
fn mkfifo(path: &Path) {
    let c = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
    // SAFETY: mkfifo reads the NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
}

/// What someone else placed in the session directory cannot hang the
/// sandbox or reach out of it: a FIFO is refused, never waited on; a file
/// with a second name (a hard link, perhaps to a file outside) is not
/// written through.
#[cfg(unix)]
#[test]
#[allow(unsafe_code)]
fn a_fifo_or_a_hard_link_in_the_session_cannot_hang_it_or_reach_out() {
    let root = tempfile::tempdir().unwrap();
    let policy = SandboxPolicy {
        timeout_ms: 2000,
        ..SandboxPolicy::default()
    };
    let sb = sandbox(root.path(), "s", policy);
    assert!(run(&sb, "1").success);
    let dir = root.path().join("s");
    mkfifo(&dir.join("ff"));
    let outside = tempfile::tempdir_in(root.path()).unwrap();
    let target = outside.path().join("target.txt");
    std::fs::write(&target, "original").unwrap();
    std::fs::hard_link(&target, dir.join("linked.txt")).unwrap();

    let started = std::time::Instant::now();
    for call in [
        "fs.readFileSync('ff', 'utf8')",
        "fs.writeFileSync('ff', 'x')",
        "fs.appendFileSync('ff', 'x')",
        "fs.writeFileSync('linked.txt', 'x')",
        "fs.appendFileSync('linked.txt', 'x')",
    ] {
        let out = fs_error(&sb, call);
        assert!(out.starts_with("EPERM"), "{call}: {out}");
    }
    assert!(started.elapsed().as_secs() < 10, "{:?}", started.elapsed());
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "original");
}

/// A file swapped for a FIFO between the sandbox's check and its open
/// (the one window a check cannot close) still cannot hold the run, or
/// the session's lock, much past the deadline.
#[cfg(unix)]
#[test]
#[allow(unsafe_code)]
fn a_fifo_swapped_in_after_the_check_holds_nothing_past_the_deadline() {
    let root = tempfile::tempdir().unwrap();
    let policy = SandboxPolicy {
        timeout_ms: 1000,
        fuel: None,
        ..SandboxPolicy::default()
    };
    let sb = sandbox(root.path(), "s", policy);
    assert!(run(&sb, "1").success);
    let dir = root.path().join("s");
    mkfifo(&dir.join("fifo"));
    std::fs::write(dir.join("plain"), "x").unwrap();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let swapper = {
        let (dir, stop) = (dir.clone(), stop.clone());
        std::thread::spawn(move || {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                for name in ["plain", "fifo"] {
                    let _ = std::fs::rename(dir.join(name), dir.join("swap"));
                    std::thread::sleep(std::time::Duration::from_micros(200));
                    let _ = std::fs::rename(dir.join("swap"), dir.join(name));
                }
            }
        })
    };
    for _ in 0..3 {
        let started = std::time::Instant::now();
        let r = run(
            &sb,
            "const fs = require('fs');\nfor (;;) { try { fs.readFileSync('swap'); } catch (e) {} }",
        );
        let took = started.elapsed();
        assert_eq!(r.metadata.termination, Termination::Timeout, "{r:?}");
        assert!(took < std::time::Duration::from_millis(2000), "{took:?}");
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    swapper.join().unwrap();
    // The session is free for the next run.
    assert!(run(&sb, "console.log('next')").success);
}
