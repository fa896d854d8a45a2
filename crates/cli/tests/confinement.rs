//! The confinement suite at the command line: `harness run --root R
//! --approve yes` attacked as a user's terminal session would be. Each
//! case is one of the ways out docs/security.md's tool section closes.

use serde_json::Value;
use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

mod common;
use common::json as report;
use common::Tmux;

fn harness(args: &[&str], script: &str, cwd: &Path, env: &[(&str, &str)]) -> Output {
    common::harness(args, script, Some(cwd), env)
}

/// A temporary directory with a `root` inside, the root the runs get.
fn workspace() -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    std::fs::create_dir(&root).unwrap();
    (dir, root)
}

fn run_in(root: &Path, cwd: &Path, script: &str, env: &[(&str, &str)], more: &[&str]) -> Value {
    let mut args = vec!["run", "--json", "--approve", "yes", "--root"];
    args.push(root.to_str().unwrap());
    args.extend_from_slice(more);
    args.push("-");
    report(&harness(&args, script, cwd, env))
}

/// Types into every terminal it can open (`/dev/tty`, each `/dev/pts/N`)
/// with TIOCSTI: `touch MARKER` and a newline, which the shell reading
/// that terminal would run once `harness` exits.
const INJECT: &str = r#"
import fcntl, glob, os, sys, termios
marker = sys.argv[1]
for path in ['/dev/tty'] + sorted(glob.glob('/dev/pts/[0-9]*')):
    try:
        fd = os.open(path, os.O_RDWR | os.O_NOCTTY)
    except OSError as e:
        print(path, 'open', e.strerror)
        continue
    try:
        for c in ('touch ' + marker + '\n').encode():
            fcntl.ioctl(fd, termios.TIOCSTI, bytes([c]))
        print(path, 'TYPED')
    except OSError as e:
        print(path, 'ioctl', e.strerror)
"#;

/// Under a real terminal, where typing into it works (shown first by the
/// same program run straight from the shell), a program `exec` runs
/// types nothing: it has no controlling terminal, and TIOCSTI fails on
/// any terminal it opens.
#[cfg(target_os = "linux")]
#[test]
fn exec_cannot_type_into_the_terminal_harness_runs_in() {
    let (dir, root) = workspace();
    let inject = dir.path().join("inject.py");
    std::fs::write(&inject, INJECT).unwrap();
    let script = dir.path().join("attack.js");
    std::fs::write(
        &script,
        format!(
            "const r = await tools.exec({{command: ['/usr/bin/python3', {:?}, 'INJECTED']}});\n\
             console.log('EXEC ' + r.stdout.replace(/\\n/g, ' | '));",
            inject.display()
        ),
    )
    .unwrap();
    let tmux = Tmux::start("confinement", dir.path());

    // The control: straight from the shell, TIOCSTI types where the
    // kernel allows it (dev.tty.legacy_tiocsti, or CAP_SYS_ADMIN).
    tmux.type_line(&format!(
        "python3 {} CONTROL; echo CONTROL-DONE",
        inject.display()
    ));
    tmux.wait_for("CONTROL-DONE");
    std::thread::sleep(Duration::from_millis(500));
    if dir.path().join("CONTROL").exists() {
        eprintln!("control: a program run from the shell typed into its terminal");
    } else {
        eprintln!("control: this kernel refuses TIOCSTI to everyone");
    }

    tmux.type_line(&format!(
        "{} run --json --approve yes --root {} {} > out.json 2>&1; echo HARNESS-EXIT $?",
        env!("CARGO_BIN_EXE_harness"),
        root.display(),
        script.display()
    ));
    let screen = tmux.wait_for("HARNESS-EXIT");
    std::thread::sleep(Duration::from_millis(500));
    let out = std::fs::read_to_string(dir.path().join("out.json")).unwrap();
    assert!(out.contains("EXEC "), "exec did not run: {out}\n{screen}");
    assert!(!out.contains("TYPED"), "exec typed into a terminal: {out}");
    assert!(
        !dir.path().join("INJECTED").exists() && !root.join("INJECTED").exists(),
        "the shell ran what exec typed: {out}\n{}",
        tmux.screen()
    );
}

/// Nothing a call starts is left once `harness run` has exited: not a
/// `setsid -f` daemon, not a double-forked child in a new session.
#[cfg(target_os = "linux")]
#[test]
fn nothing_exec_starts_outlives_harness_run() {
    let (dir, root) = workspace();
    let marker = format!("97{:04}", std::process::id() % 10_000);
    let script = format!(
        "for (const command of [['setsid', '-f', 'sleep', '{marker}'], \
           ['/usr/bin/python3', '-c', \"import os, subprocess\\nif os.fork() == 0:\\n    subprocess.Popen(['sleep', '{marker}'], start_new_session=True)\\n    os._exit(0)\\nos.wait()\"], \
           ['sh', '-c', 'sleep {marker} & echo started']]) {{\n\
           await tools.exec({{command}});\n\
         }}\n\
         return 'done';"
    );
    let r = run_in(&root, dir.path(), &script, &[], &[]);
    assert_eq!(r["value"], "done", "{r}");
    std::thread::sleep(Duration::from_millis(300));
    let left = Command::new("pgrep")
        .args(["-f", &format!("sleep {marker}")])
        .output()
        .unwrap();
    assert!(
        left.stdout.is_empty(),
        "a process exec started outlived harness run: {}",
        String::from_utf8_lossy(&left.stdout)
    );
}

/// A FIFO in the root (which exec may make) gets an answer at once from
/// every file tool, and `harness run` exits.
#[cfg(unix)]
#[test]
fn a_fifo_in_the_root_is_refused_at_once_and_harness_exits() {
    let (dir, root) = workspace();
    assert!(Command::new("mkfifo")
        .arg(root.join("f"))
        .status()
        .unwrap()
        .success());
    let script = r#"
        const out = [JSON.stringify(await tools.grepFiles({pattern: "x"}))];
        for (const call of [
            () => tools.read_file({path: "f"}),
            () => tools.readFile({filePath: "f"}),
            () => tools.viewImage({path: "f"}),
            () => tools.applyPatch({patch: "*** Begin Patch\n*** Update File: f\n@@\n-a\n+b\n*** End Patch"}),
            () => tools.write_file({path: "f", content: "x"}),
        ]) {
            try { await call(); out.push("ANSWERED"); } catch (e) { out.push(e.name + ": " + e.message); }
        }
        return out;
    "#;
    let started = Instant::now();
    let r = run_in(&root, dir.path(), script, &[], &["--timeout-ms", "2000"]);
    let took = started.elapsed();
    assert!(took < Duration::from_secs(3), "{took:?}: {r}");
    let out = r["value"].as_array().unwrap_or_else(|| panic!("{r}"));
    // grepFiles skips what is not a regular file.
    assert_eq!(out[0], r#"{"files":[],"truncated":false}"#, "{r}");
    for line in &out[1..5] {
        let line = line.as_str().unwrap();
        assert!(line.contains("not a regular file"), "{line}");
    }
    // write_file replaces the name atomically: the FIFO is not opened.
    assert_eq!(out[5], "ANSWERED", "{r}");
}

/// `exec env` shows the allowed variables and HOME, nothing else, and a
/// configured http secret never, even when `env_allow` names it.
#[test]
fn exec_sees_only_allowed_variables_and_never_a_secret() {
    let (dir, root) = workspace();
    let config = dir.path().join("harness.toml");
    std::fs::write(
        &config,
        "[exec]\nenv_allow = [\"PATH\", \"LANG\", \"GH_TOKEN\"]\n\n\
         [http.secrets.GH]\nenv = \"GH_TOKEN\"\nhosts = [\"api.github.com\"]\n",
    )
    .unwrap();
    let r = run_in(
        &root,
        dir.path(),
        "return (await tools.exec({command: ['env']})).stdout",
        &[
            ("GH_TOKEN", "tok-confinement-1"),
            ("HOST_ONLY", "host-value"),
        ],
        &["--config", config.to_str().unwrap()],
    );
    let out = r["value"].as_str().unwrap_or_else(|| panic!("{r}"));
    assert!(!out.contains("tok-confinement-1"), "{out}");
    assert!(!out.contains("host-value"), "{out}");
    for line in out.lines() {
        let name = line.split('=').next().unwrap();
        assert!(["PATH", "LANG", "HOME"].contains(&name), "{line}");
    }
    assert!(
        out.lines()
            .any(|l| l == format!("HOME={}", root.canonicalize().unwrap().display())),
        "{out}"
    );
}
