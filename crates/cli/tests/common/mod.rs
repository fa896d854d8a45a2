//! What the command-line test files share: starting `harness` and reading
//! its JSON report.

// Each test file uses its own part of this.
#![allow(dead_code)]

use serde_json::Value;
use std::io::Write;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// `harness ARGS` with `stdin` as its input, in `cwd` (this process's
/// directory when `None`) with `env` added, to its end.
pub fn harness(args: &[&str], stdin: &str, cwd: Option<&Path>, env: &[(&str, &str)]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_harness"));
    command
        .args(args)
        .envs(env.iter().copied())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Some(cwd) = cwd {
        command.current_dir(cwd);
    }
    let mut child = command.spawn().expect("spawn harness");
    // A usage error may end the process before it reads its input.
    let _ = child.stdin.take().unwrap().write_all(stdin.as_bytes());
    child.wait_with_output().unwrap()
}

/// The JSON `harness` printed, or a panic that shows what it printed.
pub fn json(o: &Output) -> Value {
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| {
        panic!(
            "not JSON ({e}): {}\n{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        )
    })
}

/// Asserts that `harness` exited with `code`, showing what it printed if
/// not.
#[track_caller]
pub fn assert_exit(o: &Output, code: i32) {
    assert_eq!(
        o.status.code(),
        Some(code),
        "stdout:\n{}\nstderr:\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
}

/// A tmux server of this test's own, on its own socket.
pub struct Tmux(String);

impl Tmux {
    /// A server running `sh` in `cwd`; `name` keeps test files apart.
    pub fn start(name: &str, cwd: &Path) -> Tmux {
        let t = Tmux(format!("harness-{name}-{}", std::process::id()));
        let ok = Command::new("tmux")
            .args([
                "-L",
                &t.0,
                "new-session",
                "-d",
                "-x",
                "200",
                "-y",
                "50",
                "-c",
            ])
            .arg(cwd)
            .args(["sh"])
            .status()
            .expect("tmux must be installed (scripts/test installs it)");
        assert!(ok.success());
        t
    }

    /// Types `line` and Enter.
    pub fn type_line(&self, line: &str) {
        let ok = Command::new("tmux")
            .args(["-L", &self.0, "send-keys", "-t", "0", line, "Enter"])
            .status()
            .unwrap();
        assert!(ok.success());
    }

    /// Presses `key` (tmux's name for it: `C-c`, `C-d`).
    pub fn press(&self, key: &str) {
        let ok = Command::new("tmux")
            .args(["-L", &self.0, "send-keys", "-t", "0", key])
            .status()
            .unwrap();
        assert!(ok.success());
    }

    /// What the pane shows, its scrollback included.
    pub fn screen(&self) -> String {
        let o = Command::new("tmux")
            .args([
                "-L",
                &self.0,
                "capture-pane",
                "-p",
                "-J",
                "-S",
                "-200",
                "-t",
                "0",
            ])
            .output()
            .unwrap();
        String::from_utf8_lossy(&o.stdout).into_owned()
    }

    /// Waits (two minutes at most) until the screen shows `text`.
    pub fn wait_for(&self, text: &str) -> String {
        let until = Instant::now() + Duration::from_secs(120);
        loop {
            let screen = self.screen();
            if screen.contains(text) {
                return screen;
            }
            assert!(
                Instant::now() < until,
                "no {text:?} on the screen:\n{screen}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = Command::new("tmux")
            .args(["-L", &self.0, "kill-server"])
            .status();
    }
}
