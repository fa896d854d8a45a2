//! A script's source, parsed as what it must be: the body of one async
//! function.
//!
//! Every engine compiles a script as `(async function () {` + source +
//! `})`, because that is what gives top-level `await` and `return`. Text
//! spliced into a wrapper is only safe once it is known to stay inside
//! it: a source such as `}); const x = 1; (async function () {` would
//! otherwise close the function and run at the top level of a reused
//! context, where its declarations outlive the run. So a [`Body`] can be
//! made only by [`Body::parse`], which parses the wrapped text with
//! [oxc](https://oxc.rs) in the goal the engines compile it in (a strict
//! script) and accepts it only when the whole text is one async function
//! expression whose body is exactly the source; an engine's
//! [`Engine::start`](crate::engine::Engine::start) and
//! [`EngineThread::check`](crate::engine::EngineThread::check) take
//! nothing else.
//!
//! HTML-like comments (`<!--`, `-->` at a line's start) are where parsers
//! of the script goal are most likely to disagree, so a source with such
//! a token is parsed in the module goal too, where they are not comments,
//! and must be one function body there as well.

use crate::error::{ErrorCode, Location, Phase, ScriptError};
use crate::source::{location, nesting_depth};
use oxc_allocator::Allocator;
use oxc_ast::ast::{Expression, Statement};
use oxc_parser::{ParseOptions, Parser};
use oxc_span::SourceType;

/// What the engines compile before the source.
const HEAD: &str = "(async function () {\n";
/// What they compile after it.
const TAIL: &str = "\n})";
/// What oxc is given before the engines' text: they compile it strict.
const STRICT: &str = "\"use strict\";";

/// Lines the wrapper adds before the source's first line.
pub(crate) const LINE_OFFSET: u32 = 1;

/// Deepest bracket nesting parsed (oxc's parser recurses).
pub const MAX_NESTING: usize = 1_000;

/// A script source known to be one function body, and the text an engine
/// compiles for it.
///
/// # Examples
/// ```
/// use harness_core::body::Body;
/// let body = Body::parse("return 1 + 1").unwrap();
/// assert_eq!(body.source(), "return 1 + 1");
/// let e = Body::parse("}); (async function () { return 1").unwrap_err();
/// assert_eq!(e.code, harness_core::ErrorCode::ScriptSyntaxError);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Body {
    /// The wrapped text, after `start` bytes of [`STRICT`] where oxc is
    /// given it (one string for both, made once).
    text: String,
    start: usize,
    /// Bytes of the wrapper before the source and after it.
    head: usize,
    tail: usize,
}

/// How a session run's wrapper starts: its head runs to the first line
/// break (the rest of it names only the run's own declarations).
const SESSION_HEAD_START: &str = "(async function (__harness_session) {";
/// What a session run's wrapper ends with.
const SESSION_TAIL: &str = "\n} finally { __harness_session.leave(); } })";

impl Body {
    /// Parses `source` as the body of an async function, in strict mode.
    /// A source that does not parse, or that would close the function it
    /// is compiled in, is a `ScriptSyntaxError` at its first fault; one
    /// nested deeper than [`MAX_NESTING`] a `StackOverflowError`.
    pub fn parse(source: &str) -> Result<Body, ScriptError> {
        if nesting_depth(source) > MAX_NESTING {
            return Err(ScriptError::new(
                ErrorCode::StackOverflowError,
                Phase::Parsing,
                format!("the script is nested more than {MAX_NESTING} levels deep"),
            ));
        }
        let body = Body::wrap(source);
        if accepted_lately(source) {
            return Ok(body);
        }
        // A parser panic must not take the host down: it refuses the script.
        let checked = std::panic::catch_unwind(|| {
            check(&body, SourceType::script())?;
            if has_html_comment_token(source) {
                check(&body, SourceType::mjs())?;
            }
            Ok(())
        });
        match checked {
            Ok(Ok(())) => {
                remember(source);
                Ok(body)
            }
            Ok(Err(e)) => Err(e),
            Err(payload) => Err(ScriptError::internal(format!(
                "the JavaScript parser failed on this script: {}",
                crate::error::panic_message(payload.as_ref())
            ))),
        }
    }

    /// Parses `source` as a run of a session: [`Body::parse`], then the
    /// rewrite of [`crate::session`], which makes the run's top-level
    /// declarations bindings of the session. The rewritten text is parsed
    /// again, in its wrapper, and must be the one function it was made to
    /// be.
    pub fn parse_session(source: &str) -> Result<Body, ScriptError> {
        if let Some(body) = rewritten_lately(source) {
            return Ok(body);
        }
        let body = Body::rewrite_session(source)?;
        remember_rewritten(source, &body);
        Ok(body)
    }

    fn rewrite_session(source: &str) -> Result<Body, ScriptError> {
        let plain = Body::parse(source)?;
        let offset = STRICT.len() + HEAD.len();
        let rewritten =
            std::panic::catch_unwind(|| crate::session::rewrite(source, &plain.text, offset))
                .map_err(|payload| {
                    ScriptError::internal(format!(
                        "the session rewrite failed on this script: {}",
                        crate::error::panic_message(payload.as_ref())
                    ))
                })??;
        let head = format!(
            "{SESSION_HEAD_START} __harness_session.enter([{}]); try {{ {}\n",
            rewritten.names, rewritten.functions
        );
        let mut text = String::with_capacity(
            STRICT.len() + head.len() + rewritten.source.len() + SESSION_TAIL.len(),
        );
        text.push_str(STRICT);
        text.push_str(&head);
        text.push_str(&rewritten.source);
        text.push_str(SESSION_TAIL);
        let body = Body {
            text,
            start: STRICT.len(),
            head: head.len(),
            tail: SESSION_TAIL.len(),
        };
        std::panic::catch_unwind(|| check_session(&body)).map_err(|payload| {
            ScriptError::internal(format!(
                "the JavaScript parser failed on this script: {}",
                crate::error::panic_message(payload.as_ref())
            ))
        })??;
        Ok(body)
    }

    /// Whether this is a session run's body ([`Body::parse_session`]).
    pub fn in_session(&self) -> bool {
        self.wrapped().starts_with(SESSION_HEAD_START)
    }

    /// The wrapped text of a source the host already parsed (a worker
    /// process is sent what its host made with [`Body::parse`] or
    /// [`Body::parse_session`]).
    pub(crate) fn trusted(wrapped: String) -> Body {
        let (head, tail) =
            if wrapped.starts_with(SESSION_HEAD_START) && wrapped.ends_with(SESSION_TAIL) {
                (wrapped.find('\n').map_or(0, |i| i + 1), SESSION_TAIL.len())
            } else {
                (HEAD.len(), TAIL.len())
            };
        Body {
            text: wrapped,
            start: 0,
            head,
            tail,
        }
    }

    /// A body that was never parsed: `source` in the wrapper as it is,
    /// even one that closes it. Only for tests of the walls behind the
    /// parse (the engines' end-of-run check, [`crate::end_check`]); no
    /// entry of the harness makes one.
    #[cfg(feature = "testing")]
    pub fn unchecked(source: &str) -> Body {
        Body::wrap(source)
    }

    fn wrap(source: &str) -> Body {
        let mut text = String::with_capacity(STRICT.len() + HEAD.len() + source.len() + TAIL.len());
        text.push_str(STRICT);
        text.push_str(HEAD);
        text.push_str(source);
        text.push_str(TAIL);
        Body {
            text,
            start: STRICT.len(),
            head: HEAD.len(),
            tail: TAIL.len(),
        }
    }

    /// The text an engine compiles, as `script.js`: an async function
    /// expression whose body is the source.
    pub fn wrapped(&self) -> &str {
        self.text.get(self.start..).unwrap_or("")
    }

    /// The source as written.
    pub fn source(&self) -> &str {
        let wrapped = self.wrapped();
        wrapped
            .get(self.head..wrapped.len().saturating_sub(self.tail))
            .unwrap_or("")
    }
}

thread_local! {
    /// Sources this thread accepted lately, most recent first: a script
    /// run again (a retry, a loop of the same script) is not parsed
    /// again. The check is a pure function of the text, which is compared
    /// whole.
    static ACCEPTED: std::cell::RefCell<Vec<Box<str>>> = const { std::cell::RefCell::new(Vec::new()) };
}

thread_local! {
    /// Session sources this thread rewrote lately, with their bodies, most
    /// recent first: the rewrite is a pure function of the text.
    static REWRITTEN: std::cell::RefCell<Vec<(Box<str>, Body)>> = const { std::cell::RefCell::new(Vec::new()) };
}

fn rewritten_lately(source: &str) -> Option<Body> {
    REWRITTEN.with(|r| {
        let mut r = r.borrow_mut();
        let i = r.iter().position(|(s, _)| &**s == source)?;
        r[..=i].rotate_right(1);
        Some(r[0].1.clone())
    })
}

fn remember_rewritten(source: &str, body: &Body) {
    if source.len() > ACCEPTED_MAX_BYTES {
        return;
    }
    REWRITTEN.with(|r| {
        let mut r = r.borrow_mut();
        r.insert(0, (source.into(), body.clone()));
        r.truncate(ACCEPTED_ENTRIES);
    });
}

/// Sources remembered per thread, and the longest one remembered.
const ACCEPTED_ENTRIES: usize = 16;
const ACCEPTED_MAX_BYTES: usize = 16 << 10;

fn accepted_lately(source: &str) -> bool {
    ACCEPTED.with(|a| {
        let mut a = a.borrow_mut();
        match a.iter().position(|s| &**s == source) {
            Some(i) => {
                a[..=i].rotate_right(1);
                true
            }
            None => false,
        }
    })
}

fn remember(source: &str) {
    if source.len() > ACCEPTED_MAX_BYTES {
        return;
    }
    ACCEPTED.with(|a| {
        let mut a = a.borrow_mut();
        a.insert(0, source.into());
        a.truncate(ACCEPTED_ENTRIES);
    });
}

/// Whether `source` has `<!--` or `-->` anywhere (strings included: it
/// only asks for a second parse).
fn has_html_comment_token(source: &str) -> bool {
    source.contains("<!--") || source.contains("-->")
}

/// Parses `body` in the goal `source_type` and checks that it is exactly
/// one async function expression around the source.
fn check(body: &Body, source_type: SourceType) -> Result<(), ScriptError> {
    // Made by `Body::wrap`: the text starts with STRICT.
    debug_assert_eq!(body.start, STRICT.len());
    let text = &body.text;
    let allocator = Allocator::default();
    let parsed = Parser::new(&allocator, text, source_type)
        .with_options(ParseOptions::default())
        .parse();
    let source = body.source();
    let at = |offset: usize| {
        Some(location(
            source,
            offset.saturating_sub(STRICT.len() + HEAD.len()),
        ))
    };
    if let Some(d) = parsed.diagnostics.errors().next() {
        let offset = d.labels.first().map_or(0, |l| l.offset() as usize);
        let ends_early = offset >= STRICT.len() + HEAD.len() + source.len();
        let detail = if ends_early {
            format!(
                "unexpected end of script: something is not closed or finished ({})",
                d.message
            )
        } else {
            d.message.to_string()
        };
        return Err(syntax(detail, at(offset)));
    }
    if parsed.panicked {
        return Err(syntax("the script could not be parsed".to_owned(), None));
    }
    let program = &parsed.program;
    // The function's closing brace: where the source, if it stays inside,
    // ends (its last character is the brace before `)`).
    let body_end = text.len() - 1;
    let closed_at = match program.body.first() {
        Some(Statement::ExpressionStatement(s)) => match &s.expression {
            Expression::ParenthesizedExpression(p) => match &p.expression {
                Expression::FunctionExpression(f)
                    if f.r#async
                        && !f.generator
                        && f.params.items.is_empty()
                        && f.params.rest.is_none() =>
                {
                    Some(f.span.end as usize)
                }
                _ => None,
            },
            _ => None,
        },
        _ => None,
    };
    match closed_at {
        Some(end) if end == body_end && program.body.len() == 1 => Ok(()),
        // The source closed the function early: point at the brace that did.
        Some(end) if end < body_end => Err(syntax(
            "unexpected '}': the script closes the function it runs in".to_owned(),
            at(end - 1),
        )),
        _ => Err(syntax(
            "the script is not the body of one function".to_owned(),
            None,
        )),
    }
}

/// Checks a session run's wrapped text: one async function of the scope
/// parameter, whose body is `enter(…)` and a `try` whose block holds the
/// rewritten source and ends where the session tail starts.
fn check_session(body: &Body) -> Result<(), ScriptError> {
    let text = &body.text;
    let allocator = Allocator::default();
    let parsed = Parser::new(&allocator, text, SourceType::script())
        .with_options(ParseOptions::default())
        .parse();
    let refused = |why: &str| {
        Err(ScriptError::internal(format!(
            "the session rewrite of this script is not one function body: {why}"
        )))
    };
    if let Some(d) = parsed.diagnostics.errors().next() {
        return refused(&d.message);
    }
    if parsed.panicked || parsed.program.body.len() != 1 {
        return refused("it did not parse as one statement");
    }
    let Some(Statement::ExpressionStatement(s)) = parsed.program.body.first() else {
        return refused("no function");
    };
    let Expression::ParenthesizedExpression(p) = &s.expression else {
        return refused("no function");
    };
    let Expression::FunctionExpression(f) = &p.expression else {
        return refused("no function");
    };
    if !f.r#async || f.generator || f.params.items.len() != 1 || f.params.rest.is_some() {
        return refused("not the session's function");
    }
    if f.span.end as usize != text.len() - 1 {
        return refused("the function ends early");
    }
    let statements = f.body.as_ref().map_or(&[][..], |b| b.statements.as_slice());
    let try_block_end = match statements {
        [Statement::ExpressionStatement(_), Statement::TryStatement(t)]
            if t.finalizer.is_some() =>
        {
            t.block.span.end as usize
        }
        _ => return refused("not enter and try"),
    };
    // The block's closing brace is the tail's first after its line break.
    if try_block_end != text.len() - SESSION_TAIL.len() + 2 {
        return refused("the source closes its block early");
    }
    Ok(())
}

fn syntax(detail: String, at: Option<Location>) -> ScriptError {
    let message = match at {
        Some(l) => format!("{detail} (script.js:{}:{})", l.line, l.column),
        None => detail,
    };
    ScriptError::new(ErrorCode::ScriptSyntaxError, Phase::Parsing, message)
        .with_name("SyntaxError")
        .with_location(at)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(source: &str) -> ScriptError {
        match Body::parse(source) {
            Ok(_) => panic!("accepted {source:?}"),
            Err(e) => e,
        }
    }

    #[test]
    fn a_body_is_accepted_and_kept_as_written() {
        for s in [
            "return 1",
            "",
            "// only a comment",
            "const x = await tools.a({}); return x",
            "return `}); (async function () {`",
            "return '\\u2028'",
            "return /}\\)/.source",
            "return 'a\0b'",
            "/* }) */ return 1",
            "return 1 <!--x\n",
        ] {
            let b = Body::parse(s).unwrap_or_else(|e| panic!("{s:?}: {e:?}"));
            assert_eq!(b.source(), s);
            assert_eq!(b.wrapped(), format!("{HEAD}{s}{TAIL}"));
        }
    }

    #[test]
    fn a_source_that_closes_the_function_is_a_syntax_error() {
        for s in [
            "}); (async function () { return 'escaped'",
            "}); const stash = []; (async function () {",
            "}) ; (async function () {",
            "}\n)\n(async function () {",
            "}); //",
            "}); /*",
            "}, async function () {",
            "}); class X {}; (async function () {",
            "}\u{2028}); (async function () {",
        ] {
            let e = refused(s);
            assert_eq!(e.code, ErrorCode::ScriptSyntaxError, "{s:?}: {e:?}");
        }
        let e = refused("return 1\n}); (async function () {");
        assert_eq!(e.location, Some(Location::new(2, 1)), "{e:?}");
    }

    #[test]
    fn html_like_comments_cannot_hide_a_breakout() {
        // In the script goal `-->` at a line's start is a comment; in the
        // module goal it is `--` and `>`: either way the text must be one
        // function, so a source that relies on one reading is refused.
        for s in [
            "x = 1\n--> }); (async function () {",
            "let a = 1, b = 2; a <!--b + `\n}); (async function () {\n`",
        ] {
            refused(s);
        }
    }

    #[test]
    fn syntax_errors_name_the_line_in_the_source() {
        let e = refused("let x = 1;\nlet y = ;");
        assert_eq!(e.location.map(|l| l.line), Some(2), "{e:?}");
        let e = refused("if (x) {");
        assert!(e.message.contains("unexpected end of script"), "{e:?}");
    }

    #[test]
    fn a_source_accepted_before_is_accepted_again_and_a_refused_one_refused() {
        for _ in 0..3 {
            assert!(Body::parse("return 42").is_ok());
            refused("}); (async function () {");
        }
    }

    #[test]
    fn deep_nesting_is_refused_before_the_parser_recurses() {
        let s = format!("return {}1{}", "(".repeat(5000), ")".repeat(5000));
        assert_eq!(refused(&s).code, ErrorCode::StackOverflowError);
    }
}
