//! A session's runs: the rewrite that makes a run's top-level
//! declarations outlive it, and what an engine thread is told when it
//! serves one session.
//!
//! A run is the body of an async function, so its `const x = 1` is a local
//! of that function and gone when it returns. In a session the next run
//! should see `x`. [`Body::parse_session`](crate::body::Body::parse_session)
//! parses the source with oxc and rewrites each declaration that is a
//! statement of the run's top level into a call of the session's scope
//! (the prelude's `sessionScope`, handed to the function as
//! `__harness_session`), which binds the name on the session's global
//! object:
//!
//! | source | becomes |
//! |---|---|
//! | `let x = e` | `__harness_session.d(1,"x",e)` |
//! | `const {a, b: [c]} = e` | `__harness_session.p(2,["a","c"],({a, b: [c]}) => [a, c],e)` |
//! | `class C {}` | `__harness_session.d(1,"C",class C {});` |
//! | `function f() {}` | kept; `__harness_session.f("f", f)` where the run starts |
//!
//! Every name is announced first (`enter`): a `var` not bound yet reads
//! `undefined`, the others are in their dead zone until their declaration
//! runs. `leave` runs last, in a `finally`, and drops the names still in
//! their dead zone, so a declaration that threw leaves its name unbound
//! rather than stuck. The rewritten text keeps every line where it was
//! (a replaced stretch keeps its line breaks), so errors name the line the
//! author wrote.
//!
//! What is kept and what is not (docs/user-guide.md, "Sessions"): only
//! declarations that are statements of the run's top level become the
//! session's; a `var` inside a block or a loop head stays the run's own. A
//! function declaration is also a local name of its own run. A source that
//! mentions `__harness_session` is refused.

use crate::error::{ErrorCode, Phase, ScriptError};
use oxc_allocator::Allocator;
use oxc_ast::ast::{BindingPattern, Expression, Statement, VariableDeclarationKind};
use oxc_parser::{ParseOptions, Parser};
use oxc_span::{GetSpan, SourceType};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

/// The parameter a session run's function takes: the session's scope.
pub(crate) const SCOPE: &str = "__harness_session";

/// What an engine thread that serves one session is told when it starts
/// ([`EngineThread::begin_session`](crate::engine::EngineThread::begin_session)).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct SessionSpec {
    /// The most heap the session's realm may hold, its bindings and one
    /// run's work together.
    pub memory_bytes: u64,
    /// What [`SessionSpec::retained_bytes`] reads: written by the engine
    /// thread when a run ends and again once it collected the garbage.
    retained: Arc<AtomicU64>,
    /// Set by the first thread that takes the session: a second one
    /// ([`SessionSpec::claim`] false) must refuse to serve it.
    claimed: Arc<AtomicBool>,
    /// Heap of the realm as it was made, before any run: not counted in
    /// [`SessionSpec::retained_bytes`].
    baseline: Arc<AtomicU64>,
}

impl SessionSpec {
    /// A session of at most `memory_bytes`.
    pub fn new(memory_bytes: u64) -> Self {
        SessionSpec {
            memory_bytes,
            retained: Arc::new(AtomicU64::new(0)),
            claimed: Arc::new(AtomicBool::new(false)),
            baseline: Arc::new(AtomicU64::new(0)),
        }
    }

    /// Records the heap of the realm as it was made (the first time only).
    pub fn set_baseline_bytes(&self, bytes: u64) {
        let _ = self
            .baseline
            .compare_exchange(0, bytes, Ordering::AcqRel, Ordering::Relaxed);
    }

    /// Takes the session for the calling engine thread: true the first
    /// time only. A thread that is not the first refuses every run, so a
    /// session never starts again from nothing.
    pub fn claim(&self) -> bool {
        !self.claimed.swap(true, Ordering::AcqRel)
    }

    /// Heap the session's runs left in its realm: what the realm held
    /// after the last run, less what it held when it was made.
    pub fn retained_bytes(&self) -> u64 {
        self.retained.load(Ordering::Relaxed)
    }

    /// Records that the realm's runtime holds `used` bytes now (zero:
    /// the session is gone).
    pub fn set_retained_bytes(&self, used: u64) {
        let held = used.saturating_sub(self.baseline.load(Ordering::Acquire));
        self.retained.store(held, Ordering::Relaxed);
    }

    /// The memory limit of a run that starts with `used` bytes held and
    /// may add `run_bytes`: the smaller of the two limits.
    pub fn run_limit(&self, used: u64, run_bytes: u64) -> u64 {
        used.saturating_add(run_bytes).min(self.memory_bytes)
    }
}

/// What an engine thread that serves a session keeps: the spec, the
/// realm between runs (`R`: a context, an instance), and why the session
/// ended once it has. The one place that decides what ends a session and
/// what the later runs are told.
#[derive(Debug)]
pub struct SessionThread<R> {
    /// What the thread was told.
    pub spec: SessionSpec,
    realm: Option<R>,
    ended: Option<&'static str>,
}

impl<R> SessionThread<R> {
    /// A thread's session: ended at once when another thread took it
    /// first ([`SessionSpec::claim`]).
    pub fn begin(spec: SessionSpec) -> Self {
        let ended = (!spec.claim()).then_some(
            "the session ended: its engine thread was replaced after a run that did not stop",
        );
        SessionThread {
            spec,
            realm: None,
            ended,
        }
    }

    /// Why every run is refused once the session ended; `None` while it
    /// lives. [`EngineFault::session_ended`](crate::engine::EngineFault::session_ended)
    /// makes the refusal.
    pub fn ended(&self) -> Option<&'static str> {
        self.ended
    }

    /// The realm for the next run (none before the first).
    pub fn take_realm(&mut self) -> Option<R> {
        self.realm.take()
    }

    /// After a run refused before it loaded (a source that is not one
    /// body): the realm as it was, or still to be made.
    pub fn untouched(&mut self, realm: Option<R>) {
        self.realm = realm;
    }

    /// After a run: `kept` is the realm it handed back clean, or `None`
    /// when the run ended any other way (`tainted`: a fault, a deadline,
    /// memory, a cancel; else something left pending), which ends the
    /// session. Returns whether it ended.
    pub fn after_run(&mut self, kept: Option<R>, tainted: bool) -> bool {
        if kept.is_none() {
            self.ended = Some(if tainted {
                "the session ended: a run in it faulted, timed out, ran out of memory or was cancelled"
            } else {
                "the session ended: a run in it left a tool call, task or job pending"
            });
            self.spec.set_retained_bytes(0);
        }
        self.realm = kept;
        self.ended.is_some()
    }
}

/// A session run's source, rewritten: the text that goes inside the
/// session wrapper, and what its head announces.
#[derive(Debug)]
pub(crate) struct Rewritten {
    pub(crate) source: String,
    /// `enter`'s list, as JavaScript: `0,"x",1,"y"`.
    pub(crate) names: String,
    /// The hoisted function declarations, bound where the run starts.
    pub(crate) functions: String,
}

/// How `enter` and `d` are told a declaration's kind.
fn kind_code(kind: VariableDeclarationKind) -> Option<u8> {
    match kind {
        VariableDeclarationKind::Var => Some(0),
        VariableDeclarationKind::Let => Some(1),
        VariableDeclarationKind::Const => Some(2),
        // `using` disposes at the end of its block: it stays the run's.
        VariableDeclarationKind::Using | VariableDeclarationKind::AwaitUsing => None,
    }
}

/// One replacement of `source[start..end]`.
struct Edit {
    start: usize,
    end: usize,
    text: String,
}

/// Rewrites a source that [`crate::body::Body::parse`] accepted.
pub(crate) fn rewrite(
    source: &str,
    wrapped_for_oxc: &str,
    offset: usize,
) -> Result<Rewritten, ScriptError> {
    if source.contains(SCOPE) {
        return Err(ScriptError::new(
            ErrorCode::ScriptSyntaxError,
            Phase::Parsing,
            format!("`{SCOPE}` is the session's own name: a script in a session cannot use it"),
        )
        .with_name("SyntaxError"));
    }
    let allocator = Allocator::default();
    let parsed = Parser::new(&allocator, wrapped_for_oxc, SourceType::script())
        .with_options(ParseOptions::default())
        .parse();
    let statements = function_body(&parsed.program.body).ok_or_else(|| {
        ScriptError::internal("a session run's source did not parse again as one function body")
    })?;
    let at = |pos: u32| (pos as usize).saturating_sub(offset);
    let text_of = |start: u32, end: u32| &source[at(start)..at(end)];
    let mut edits: Vec<Edit> = Vec::new();
    let mut names = Vec::<String>::new();
    let mut functions = String::new();
    let mut announce = |kind: u8, name: &str| names.push(format!("{kind},{}", js_string(name)));
    for statement in statements {
        match statement {
            Statement::VariableDeclaration(decl) => {
                let Some(kind) = kind_code(decl.kind) else {
                    continue;
                };
                let first = decl
                    .declarations
                    .first()
                    .map_or(decl.span.end, |d| d.span.start);
                // The keyword goes.
                edits.push(Edit::blank(source, at(decl.span.start), at(first)));
                for d in &decl.declarations {
                    let bound = d.id.get_binding_identifiers();
                    for b in &bound {
                        announce(kind, &b.name);
                    }
                    let start = at(d.span.start);
                    match (&d.id, &d.init) {
                        (BindingPattern::BindingIdentifier(id), Some(init)) => {
                            let init_start = at(init.span().start);
                            edits.push(Edit::keeping_lines(
                                source,
                                start,
                                init_start,
                                format!("{SCOPE}.d({kind},{},", js_string(&id.name)),
                            ));
                            edits.push(Edit::insert(at(init.span().end), ")"));
                        }
                        (BindingPattern::BindingIdentifier(id), None) => {
                            let text = if kind == 0 {
                                // `var x;` keeps what `x` holds.
                                "void 0".to_owned()
                            } else {
                                format!("{SCOPE}.d({kind},{})", js_string(&id.name))
                            };
                            edits.push(Edit::keeping_lines(source, start, at(d.span.end), text));
                        }
                        (pattern, Some(init)) => {
                            let list: Vec<String> =
                                bound.iter().map(|b| js_string(&b.name)).collect();
                            let idents: Vec<&str> = bound
                                .iter()
                                .map(|b| text_of(b.span.start, b.span.end))
                                .collect();
                            let p = pattern.span();
                            edits.push(Edit::keeping_lines(
                                source,
                                start,
                                at(p.start),
                                format!("{SCOPE}.p({kind},[{}],(", list.join(",")),
                            ));
                            edits.push(Edit::keeping_lines(
                                source,
                                at(p.end),
                                at(init.span().start),
                                format!(") => [{}],", idents.join(",")),
                            ));
                            edits.push(Edit::insert(at(init.span().end), ")"));
                        }
                        // A pattern needs an initialiser: the parse refused it already.
                        (_, None) => {}
                    }
                }
                if !source[..at(decl.span.end)].ends_with(';') {
                    edits.push(Edit::insert(at(decl.span.end), ";"));
                }
            }
            Statement::FunctionDeclaration(f) => {
                if let Some(id) = &f.id {
                    let ident = text_of(id.span.start, id.span.end);
                    functions.push_str(&format!("{SCOPE}.f({}, {ident}); ", js_string(&id.name)));
                }
            }
            Statement::ClassDeclaration(c) => {
                if let Some(id) = &c.id {
                    announce(1, &id.name);
                    edits.push(Edit::insert(
                        at(c.span.start),
                        &format!("{SCOPE}.d(1,{},", js_string(&id.name)),
                    ));
                    edits.push(Edit::insert(at(c.span.end), ");"));
                }
            }
            _ => {}
        }
    }
    Ok(Rewritten {
        source: apply(source, edits),
        names: names.join(","),
        functions,
    })
}

/// The statements of the one async function the wrapped text holds.
fn function_body<'a, 'b>(program: &'b [Statement<'a>]) -> Option<&'b [Statement<'a>]> {
    let Some(Statement::ExpressionStatement(s)) = program.first() else {
        return None;
    };
    let Expression::ParenthesizedExpression(p) = &s.expression else {
        return None;
    };
    let Expression::FunctionExpression(f) = &p.expression else {
        return None;
    };
    f.body.as_ref().map(|b| b.statements.as_slice())
}

impl Edit {
    fn insert(at: usize, text: &str) -> Edit {
        Edit {
            start: at,
            end: at,
            text: text.to_owned(),
        }
    }

    /// `source[start..end]` removed, its line breaks kept.
    fn blank(source: &str, start: usize, end: usize) -> Edit {
        Edit::keeping_lines(source, start, end, String::new())
    }

    /// `source[start..end]` replaced by `text` and as many line breaks as
    /// it held, so that what follows stays on its line.
    fn keeping_lines(source: &str, start: usize, end: usize, mut text: String) -> Edit {
        let breaks = source
            .get(start..end)
            .map_or(0, |s| s.matches('\n').count());
        for _ in 0..breaks {
            text.push('\n');
        }
        Edit { start, end, text }
    }
}

/// Applies edits in order of position (inserts at one place in the order
/// they were made).
fn apply(source: &str, mut edits: Vec<Edit>) -> String {
    edits.sort_by_key(|e| (e.start, e.end));
    let mut out = String::with_capacity(source.len() + edits.len() * 32);
    let mut at = 0;
    for e in edits {
        if e.start < at {
            // Edits never overlap; one that would is dropped rather than
            // corrupting the text (the wrapped text is parsed again anyway).
            continue;
        }
        out.push_str(&source[at..e.start]);
        out.push_str(&e.text);
        at = e.end;
    }
    out.push_str(&source[at..]);
    out
}

/// `name` as a JavaScript string literal, in ASCII.
pub(crate) fn js_string(name: &str) -> String {
    let mut out = String::with_capacity(name.len() + 2);
    out.push('"');
    for unit in name.encode_utf16() {
        match unit {
            0x22 => out.push_str("\\\""),
            0x5c => out.push_str("\\\\"),
            0x20..=0x7e => out.push(unit as u8 as char),
            _ => out.push_str(&format!("\\u{unit:04x}")),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests;
