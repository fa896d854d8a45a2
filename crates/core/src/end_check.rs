//! The end-of-run check: after a run, the global environment of a context
//! that will serve another run must be what the context was handed over
//! with.
//!
//! The global object is frozen, so what could change is the global
//! lexical environment: `let`, `const` and `class` declarations of global
//! code, which no script can list. A [`Body`] never has global code of its
//! own (it is one function body), and code from strings is blocked, so a
//! run can only have declared a global binding through a fault of a wall
//! before this one: a parser that reads the text otherwise than oxc did.
//! Whatever the engine read, such a binding's name is made of identifier
//! characters of the source. So the check takes every identifier-like
//! word of the text (inside strings and comments too), escapes decoded,
//! and asks, after the run, whether any of them names a binding that is
//! not the global object's: [`EndCheck::Probe`] is a global script,
//! evaluated by the engine, whose value the prelude's `end(list)` judges.
//! A context that fails it is dropped.

use crate::body::Body;
use std::collections::HashSet;
use std::fmt::Write as _;

/// Names probed at most; a source with more distinct words gives
/// [`EndCheck::Drop`] (its context is not reused).
pub const MAX_PROBED_NAMES: usize = 1_024;

/// What an engine does at the end of a run, before it keeps the context.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum EndCheck {
    /// The source names nothing that could be a binding: keep the context
    /// if the prelude's `end()` finds the run clean.
    Nothing,
    /// Evaluate this global script in the context (sloppy mode, any file
    /// name) and pass its value to the prelude's `end(list)`. It is an
    /// array literal of `() => typeof NAME`, `() => NAME`,
    /// `() => delete NAME`, `"NAME"` for each name, and declares nothing.
    Probe(String),
    /// Too many names to probe: drop the context.
    Drop,
}

/// Words that are never an identifier reference, even in sloppy code, and
/// `let`, which no lexical declaration may bind.
const RESERVED: &[&str] = &[
    "let",
    "break",
    "case",
    "catch",
    "class",
    "const",
    "continue",
    "debugger",
    "default",
    "delete",
    "do",
    "else",
    "enum",
    "export",
    "extends",
    "false",
    "finally",
    "for",
    "function",
    "if",
    "import",
    "in",
    "instanceof",
    "new",
    "null",
    "return",
    "super",
    "switch",
    "this",
    "throw",
    "true",
    "try",
    "typeof",
    "var",
    "void",
    "while",
    "with",
];

impl Body {
    /// The end-of-run check for this body (module docs).
    pub fn end_check(&self) -> EndCheck {
        let source = self.source();
        if source.len() > CACHED_MAX_BYTES {
            return end_check(source);
        }
        LAST.with(|last| {
            let mut last = last.borrow_mut();
            if let Some((cached, check)) = &*last {
                if **cached == *source {
                    return check.clone();
                }
            }
            let check = end_check(source);
            *last = Some((source.into(), check.clone()));
            check
        })
    }
}

/// The longest source whose check is remembered.
const CACHED_MAX_BYTES: usize = 16 << 10;

thread_local! {
    /// The last source this thread checked and its check: a script run
    /// again (a loop of the same script, a retry) is not scanned again.
    /// The check is a pure function of the text, which is compared whole.
    static LAST: std::cell::RefCell<Option<(Box<str>, EndCheck)>> =
        const { std::cell::RefCell::new(None) };
}

fn end_check(source: &str) -> EndCheck {
    let mut seen = HashSet::new();
    let mut probe = String::new();
    for name in Words::new(source) {
        if RESERVED.contains(&name.as_str()) || seen.contains(&name) {
            continue;
        }
        if seen.len() == MAX_PROBED_NAMES {
            return EndCheck::Drop;
        }
        probe.push_str(if probe.is_empty() { "[" } else { "," });
        let quoted = serde_json::to_string(&name).unwrap_or_default();
        let _ = write!(
            probe,
            "()=>typeof {name},()=>{name},()=>delete {name},{quoted}"
        );
        seen.insert(name);
    }
    if probe.is_empty() {
        return EndCheck::Nothing;
    }
    probe.push(']');
    EndCheck::Probe(probe)
}

/// The identifier-like words of a text, `\u` escapes decoded: a run of
/// identifier characters that starts with one that may start a name.
/// Every name an engine could read in the text is among them.
struct Words<'a> {
    rest: std::str::Chars<'a>,
}

impl<'a> Words<'a> {
    fn new(text: &'a str) -> Self {
        Words { rest: text.chars() }
    }

    /// The next character of a name, an escape decoded: `None` (nothing
    /// consumed) when the text does not go on with one.
    fn part(&mut self, first: bool) -> Option<char> {
        let mut ahead = self.rest.clone();
        let c = match ahead.next()? {
            '\\' => unescape(&mut ahead)?,
            c => c,
        };
        let ok = if first {
            oxc_syntax::identifier::is_identifier_start(c)
        } else {
            oxc_syntax::identifier::is_identifier_part(c)
        };
        ok.then(|| {
            self.rest = ahead;
            c
        })
    }
}

impl Iterator for Words<'_> {
    type Item = String;

    fn next(&mut self) -> Option<String> {
        loop {
            let Some(first) = self.part(true) else {
                self.rest.next()?;
                continue;
            };
            let mut word = String::from(first);
            while let Some(c) = self.part(false) {
                word.push(c);
            }
            return Some(word);
        }
    }
}

/// Decodes `uXXXX` or `u{X…}` after a backslash.
fn unescape(text: &mut std::str::Chars<'_>) -> Option<char> {
    if text.next()? != 'u' {
        return None;
    }
    let mut digits = String::new();
    if text.clone().next() == Some('{') {
        text.next();
        loop {
            match text.next()? {
                '}' => break,
                c if c.is_ascii_hexdigit() && digits.len() < 8 => digits.push(c),
                _ => return None,
            }
        }
    } else {
        for _ in 0..4 {
            let c = text.next()?;
            if !c.is_ascii_hexdigit() {
                return None;
            }
            digits.push(c);
        }
    }
    char::from_u32(u32::from_str_radix(&digits, 16).ok()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(source: &str) -> Vec<String> {
        Words::new(source).collect()
    }

    #[test]
    fn every_word_is_a_name_strings_and_comments_included() {
        assert_eq!(
            names("const a1 = 'b c' // d\n/* e */ `${f}` 2g $h _i"),
            ["const", "a1", "b", "c", "d", "e", "$", "f", "g", "$h", "_i"]
        );
        assert_eq!(
            names("\\u0061b \\u{63}d x\\u0079 é ℮"),
            ["ab", "cd", "xy", "é", "℮"]
        );
        assert_eq!(names("\\u00 \\u{zz} 12"), ["u00", "u", "zz"]);
    }

    #[test]
    fn the_probe_asks_for_each_name_once_and_skips_reserved_words() {
        assert_eq!(end_check("return 1 + 2"), EndCheck::Nothing);
        assert_eq!(
            end_check("let x = stash; return x + stash"),
            EndCheck::Probe(
                "[()=>typeof x,()=>x,()=>delete x,\"x\",\
                 ()=>typeof stash,()=>stash,()=>delete stash,\"stash\"]"
                    .into()
            )
        );
        let many: String = (0..=MAX_PROBED_NAMES).map(|i| format!("v{i};")).collect();
        assert_eq!(end_check(&many), EndCheck::Drop);
    }
}
