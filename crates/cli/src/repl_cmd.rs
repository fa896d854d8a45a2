//! `harness repl`: a line editor over one session.

use super::*;
use rustyline::error::ReadlineError;
use rustyline::validate::{ValidationContext, ValidationResult, Validator};
use rustyline::{Completer, Helper, Highlighter, Hinter};

const HELP: &str = "\
Each input is the body of an async function, run in one session: what its
top level declares (const, let, var, function, class) stays for the next
input. `return` shows a value; the last expression does not.
An input that is not finished (an open bracket, string or block) goes on
on the next line.

  .help    this text
  .reset   close the session and open a fresh one
  .exit    leave (or Ctrl-D)

Ctrl-C clears the line; during a run it cancels the run, which ends the
session (a fresh one opens).";

/// Asks for another line while the input is an unfinished script: the
/// parser ran off its end.
#[derive(Helper, Completer, Hinter, Highlighter)]
struct Continues;

impl Validator for Continues {
    fn validate(&self, ctx: &mut ValidationContext<'_>) -> rustyline::Result<ValidationResult> {
        let input = ctx.input();
        if input.trim_start().starts_with('.') {
            return Ok(ValidationResult::Valid(None));
        }
        Ok(match harness::core::body::Body::parse(input) {
            Err(e) if e.message.starts_with("unexpected end of script") => {
                ValidationResult::Incomplete
            }
            _ => ValidationResult::Valid(None),
        })
    }
}

/// Where the history is kept unless `--history` says.
fn history_path() -> Option<PathBuf> {
    let state = std::env::var_os("XDG_STATE_HOME")
        .filter(|s| !s.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".local/state")))?;
    Some(state.join("harness").join("repl_history"))
}

/// A report, compactly: console lines, tool calls, then the value or the
/// error, and one line of figures.
fn print_compact(r: &ExecutionReport) {
    for line in &r.console {
        println!("[{}] {}", line.level.as_str(), line.text);
    }
    for c in &r.tool_calls {
        let err = c
            .error
            .as_ref()
            .map(|e| format!(" ({}: {})", e.code, e.message))
            .unwrap_or_default();
        println!("tool {} {:?}{err}", c.tool, c.status);
    }
    match (&r.error, &r.value) {
        (Some(e), _) => println!("{}: {}", e.code, e.message),
        (None, Some(v)) => println!("{}", serde_json::to_string(v).unwrap_or_default()),
        (None, None) => {}
    }
    println!("  ({} ms)", (r.metrics.duration_ms * 100.0).round() / 100.0);
}

fn open(harness: &Harness) -> Result<harness::Session, ExitCode> {
    harness.open_session().map_err(usage_error)
}

pub(super) async fn repl(args: ReplArgs) -> ExitCode {
    let harness = match configured_harness(&args.engine, None, None).await {
        Ok(h) => h,
        Err(code) => return code,
    };
    let mut session = match open(&harness) {
        Ok(s) => s,
        Err(code) => return code,
    };
    let mut editor = match rustyline::Editor::<Continues, rustyline::history::FileHistory>::new() {
        Ok(e) => e,
        Err(e) => return usage_error(format!("cannot start the line editor: {e}")),
    };
    editor.set_helper(Some(Continues));
    let history = args.history.clone().or_else(history_path);
    if let Some(path) = &history {
        let _ = editor.load_history(path);
    }
    println!(
        "harness {} on {}; .help for help, .exit to leave",
        env!("CARGO_PKG_VERSION"),
        harness.engine().name
    );
    loop {
        let line = tokio::task::block_in_place(|| editor.readline("> "));
        let input = match line {
            Ok(l) => l,
            Err(ReadlineError::Interrupted) => continue,
            Err(ReadlineError::Eof) => break,
            Err(e) => {
                eprintln!("harness: cannot read input: {e}");
                break;
            }
        };
        if input.trim().is_empty() {
            continue;
        }
        let _ = editor.add_history_entry(input.as_str());
        match input.trim() {
            ".exit" | ".quit" => break,
            ".help" => {
                println!("{HELP}");
                continue;
            }
            ".reset" => {
                session.close();
                session = match open(&harness) {
                    Ok(s) => s,
                    Err(code) => return code,
                };
                println!("(a fresh session)");
                continue;
            }
            other if other.starts_with('.') => {
                println!("unknown command {other}; .help lists them");
                continue;
            }
            _ => {}
        }
        let request = harness.request(&input);
        let cancel = request.cancel.clone();
        let report = {
            let run = session.execute(request);
            tokio::pin!(run);
            loop {
                tokio::select! {
                    report = &mut run => break report,
                    _ = tokio::signal::ctrl_c() => cancel.cancel(),
                }
            }
        };
        print_compact(&report);
        if harness.session(session.id()).is_err() {
            println!("(the session ended; a fresh one opens)");
            session = match open(&harness) {
                Ok(s) => s,
                Err(code) => return code,
            };
        }
    }
    if let Some(path) = &history {
        if let Some(dir) = path.parent() {
            let _ = std::fs::create_dir_all(dir);
        }
        let _ = editor.save_history(path);
    }
    session.close();
    ExitCode::SUCCESS
}
