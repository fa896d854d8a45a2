//! `harness repl` under a real terminal (tmux): declarations stay from one
//! input to the next, unfinished input continues on the next line, the
//! dot commands work, Ctrl-C stops a run (and a fresh session opens), and
//! the history is kept.

use std::time::Duration;

mod common;
use common::Tmux;

#[test]
fn the_repl_keeps_a_session_under_a_real_terminal() {
    let dir = tempfile::tempdir().unwrap();
    let history = dir.path().join("history");
    let tmux = Tmux::start("repl", dir.path());
    tmux.type_line(&format!(
        "{} repl --history {} --timeout-ms 60000; echo REPL-EXITED",
        env!("CARGO_BIN_EXE_harness"),
        history.display()
    ));
    tmux.wait_for(".help for help");
    tmux.type_line("const data = [1, 2, 3]");
    tmux.type_line("return data.map(x => x * 2)");
    tmux.wait_for("[2,4,6]");
    // An unfinished function goes on on the next line.
    tmux.type_line("function twice(a) {");
    tmux.type_line("  return a * 2");
    tmux.type_line("}");
    tmux.type_line("return twice(21) + ':' + typeof twice");
    tmux.wait_for("\"42:function\"");
    tmux.type_line("throw new TypeError('bad')");
    tmux.wait_for("ScriptRuntimeError: Uncaught TypeError: bad");
    tmux.type_line(".help");
    tmux.wait_for(".reset   close the session");
    // Ctrl-C stops a runaway run; the session ends, and a fresh one opens.
    tmux.type_line("while (true) {}");
    std::thread::sleep(Duration::from_millis(500));
    tmux.press("C-c");
    tmux.wait_for("ScriptCancelledError");
    tmux.wait_for("a fresh one opens");
    tmux.type_line("return typeof data");
    tmux.wait_for("\"undefined\"");
    tmux.type_line(".exit");
    tmux.wait_for("REPL-EXITED");
    let kept = std::fs::read_to_string(&history).unwrap();
    assert!(kept.contains("const data = [1, 2, 3]"), "{kept}");
}
