//! Detection: split an assistant's text into ordered segments (text,
//! thinking, script) with byte offsets, losing and reordering nothing.
//!
//! # Rules
//! - A script block is `<tool-calls>` … `</tool-calls>` (optionally
//!   `<tool-calls lang="ts">`, `ts`/`typescript`/`js`/`javascript`; default
//!   JavaScript), or a fence whose opening line is `` ```ts tool-calls ``
//!   (or `js`, `typescript`, `javascript`) and whose closing line is
//!   `` ``` ``. A `tool-calls` tag counts only at the start of a line
//!   (after optional spaces), so prose that mentions the tag mid-sentence
//!   stays text.
//! - `<thinking>` … `</thinking>` is a thinking segment; whatever it holds
//!   (tags included) is part of the thinking, never run.
//! - Any other fence (`` ``` ``, `` ```js ``, `` ~~~ `` …) is text, and tags
//!   inside it are text: examples of the syntax are not scripts.
//! - Rejected with a [`DetectError`] naming the line: a block or fence that
//!   is never closed, a `<tool-calls>` opened inside another, a closing tag
//!   with no block open, an unclosed `<thinking>`. A model that wrote an
//!   ambiguous block gets an error it can act on instead of a guess.
//!
//! Segment boundaries include the tags and fence lines; a script segment's
//! `body` is the byte range of the code alone.

use serde::{Deserialize, Serialize};
use std::ops::Range;

/// What a segment is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum SegmentKind {
    /// Prose outside any block.
    Text,
    /// A `<thinking>` block: kept in order, never run.
    Thinking,
    /// A script block to run.
    Script,
}

/// The language a script block declares.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Language {
    #[default]
    Javascript,
    Typescript,
}

impl Language {
    fn parse(s: &str) -> Option<Language> {
        match s {
            "js" | "javascript" => Some(Language::Javascript),
            "ts" | "typescript" => Some(Language::Typescript),
            _ => None,
        }
    }

    /// The language's name as the report and the wire spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            Language::Javascript => "javascript",
            Language::Typescript => "typescript",
        }
    }
}

/// How a script block was written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum BlockStyle {
    /// `<tool-calls>` … `</tool-calls>`.
    Tag,
    /// `` ```ts tool-calls `` … `` ``` ``.
    Fence,
}

/// One piece of the input. `range` indexes the input; the segments' ranges
/// tile it exactly, in order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Segment {
    pub kind: SegmentKind,
    pub range: Range<usize>,
    /// Thinking and script segments: the range of the content between the
    /// tags or fence lines.
    pub body: Option<Range<usize>>,
    /// Script segments: the declared language.
    pub language: Option<Language>,
    pub style: Option<BlockStyle>,
}

/// Why a response could not be split.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
#[non_exhaustive]
pub enum DetectError {
    #[error("line {line}: <tool-calls> is never closed with </tool-calls>")]
    UnclosedBlock { offset: usize, line: usize },
    #[error("line {line}: a ```{info} fence is never closed with ```")]
    UnclosedFence {
        offset: usize,
        line: usize,
        info: String,
    },
    #[error("line {line}: <tool-calls> inside another <tool-calls> block (nested blocks are not allowed)")]
    Nested { offset: usize, line: usize },
    #[error("line {line}: </tool-calls> with no <tool-calls> open")]
    UnbalancedClose { offset: usize, line: usize },
    #[error("line {line}: <thinking> is never closed with </thinking>")]
    UnclosedThinking { offset: usize, line: usize },
    #[error("line {line}: unknown language {lang:?} on <tool-calls> (use js or ts)")]
    UnknownLanguage {
        offset: usize,
        line: usize,
        lang: String,
    },
}

impl DetectError {
    /// Byte offset in the input where the problem starts.
    pub fn offset(&self) -> usize {
        match self {
            DetectError::UnclosedBlock { offset, .. }
            | DetectError::UnclosedFence { offset, .. }
            | DetectError::Nested { offset, .. }
            | DetectError::UnbalancedClose { offset, .. }
            | DetectError::UnclosedThinking { offset, .. }
            | DetectError::UnknownLanguage { offset, .. } => *offset,
        }
    }
}

const OPEN: &str = "<tool-calls";
const CLOSE: &str = "</tool-calls>";
const THINK_OPEN: &str = "<thinking>";
const THINK_CLOSE: &str = "</thinking>";

/// 1-based line of byte `offset`.
fn line_of(s: &str, offset: usize) -> usize {
    s.as_bytes()[..offset.min(s.len())]
        .iter()
        .filter(|&&b| b == b'\n')
        .count()
        + 1
}

/// The lines of `s` with their start offsets (each line includes its `\n`).
fn lines(s: &str) -> impl Iterator<Item = (usize, &str)> {
    let mut at = 0;
    s.split_inclusive('\n').map(move |l| {
        let start = at;
        at += l.len();
        (start, l)
    })
}

/// A fence opening line: its marker (``` or ~~~, at least three) and info
/// string.
fn fence_open(line: &str) -> Option<(&str, &str)> {
    let t = line.trim_start_matches(' ');
    if line.len() - t.len() > 3 {
        return None;
    }
    let ch = t.chars().next()?;
    if ch != '`' && ch != '~' {
        return None;
    }
    let n = t.chars().take_while(|&c| c == ch).count();
    if n < 3 {
        return None;
    }
    let info = t[n..].trim();
    if ch == '`' && info.contains('`') {
        return None;
    }
    Some((&t[..n], info))
}

fn closes_fence(line: &str, marker: &str) -> bool {
    let t = line.trim();
    let ch = marker.as_bytes()[0];
    t.len() >= marker.len() && t.bytes().all(|b| b == ch)
}

/// A `tool-calls` fence info string: `ts tool-calls`, `js tool-calls`, …
fn script_fence_language(info: &str) -> Option<Language> {
    let mut words = info.split_whitespace();
    let lang = Language::parse(words.next()?)?;
    (words.next()? == "tool-calls" && words.next().is_none()).then_some(lang)
}

/// Parses an opening tag at the start of `rest`: `<tool-calls>` or
/// `<tool-calls lang="ts">`. Returns the tag's length and language.
fn open_tag(rest: &str) -> Option<Result<(usize, Language), String>> {
    let after = rest.strip_prefix(OPEN)?;
    if let Some(tail) = after.strip_prefix('>') {
        let _ = tail;
        return Some(Ok((OPEN.len() + 1, Language::Javascript)));
    }
    let end = after.find('>')?;
    let attrs = after[..end].trim();
    if !after.starts_with(' ') || after[..end].contains('\n') {
        return None;
    }
    let value = attrs
        .strip_prefix("lang=")
        .or_else(|| attrs.strip_prefix("language="))?
        .trim_matches(|c| c == '"' || c == '\'');
    Some(match Language::parse(value) {
        Some(l) => Ok((OPEN.len() + end + 1, l)),
        None => Err(value.to_owned()),
    })
}

/// Splits `input` into segments. Never panics; on success the segments'
/// ranges tile `input` in order.
///
/// # Examples
/// ```
/// use harness_respond::detect::{detect, SegmentKind};
/// let text = "Let me check.\n<tool-calls>\nreturn 1 + 1\n</tool-calls>\nDone.";
/// let segs = detect(text).unwrap();
/// let kinds: Vec<_> = segs.iter().map(|s| s.kind).collect();
/// assert_eq!(kinds, [SegmentKind::Text, SegmentKind::Script, SegmentKind::Text]);
/// assert_eq!(&text[segs[1].body.clone().unwrap()], "\nreturn 1 + 1\n");
/// ```
pub fn detect(input: &str) -> Result<Vec<Segment>, DetectError> {
    let mut out = Vec::new();
    let mut text_start = 0;
    let mut it = lines(input).peekable();
    while let Some((start, line)) = it.next() {
        let indent = line.len() - line.trim_start_matches([' ', '\t']).len();
        let rest = &line[indent..];
        // Fences: a tool-calls fence is a script; any other is text.
        if let Some((marker, info)) = fence_open(line) {
            let marker = marker.to_owned();
            let info = info.to_owned();
            let body_start = start + line.len();
            let mut end = None;
            for (s, l) in it.by_ref() {
                if closes_fence(l, &marker) {
                    end = Some((s, s + l.len()));
                    break;
                }
            }
            let Some((close_start, close_end)) = end else {
                if script_fence_language(&info).is_some() {
                    return Err(DetectError::UnclosedFence {
                        offset: start,
                        line: line_of(input, start),
                        info,
                    });
                }
                // An unclosed ordinary fence runs to the end: all text.
                break;
            };
            if let Some(lang) = script_fence_language(&info) {
                push_text(&mut out, text_start, start);
                out.push(Segment {
                    kind: SegmentKind::Script,
                    range: start..close_end,
                    body: Some(body_start..close_start),
                    language: Some(lang),
                    style: Some(BlockStyle::Fence),
                });
                text_start = close_end;
            }
            continue;
        }
        if rest.starts_with(CLOSE) {
            return Err(DetectError::UnbalancedClose {
                offset: start + indent,
                line: line_of(input, start),
            });
        }
        let open_at = start + indent;
        let (kind, open_len, lang, close) = if rest.starts_with(THINK_OPEN) {
            (SegmentKind::Thinking, THINK_OPEN.len(), None, THINK_CLOSE)
        } else {
            match open_tag(rest) {
                None => continue,
                Some(Err(lang)) => {
                    return Err(DetectError::UnknownLanguage {
                        offset: open_at,
                        line: line_of(input, start),
                        lang,
                    })
                }
                Some(Ok((len, lang))) => (SegmentKind::Script, len, Some(lang), CLOSE),
            }
        };
        let body_start = open_at + open_len;
        let Some(rel) = input[body_start..].find(close) else {
            return Err(match kind {
                SegmentKind::Thinking => DetectError::UnclosedThinking {
                    offset: open_at,
                    line: line_of(input, open_at),
                },
                _ => DetectError::UnclosedBlock {
                    offset: open_at,
                    line: line_of(input, open_at),
                },
            });
        };
        let body_end = body_start + rel;
        if kind == SegmentKind::Script {
            if let Some(inner) = nested_open(&input[body_start..body_end]) {
                let at = body_start + inner;
                return Err(DetectError::Nested {
                    offset: at,
                    line: line_of(input, at),
                });
            }
        }
        let end = body_end + close.len();
        push_text(&mut out, text_start, open_at);
        out.push(Segment {
            kind,
            range: open_at..end,
            body: Some(body_start..body_end),
            language: lang,
            style: (kind == SegmentKind::Script).then_some(BlockStyle::Tag),
        });
        text_start = end;
        // Continue with the lines after the closing tag.
        while it.peek().is_some_and(|&(s, _)| s < end) {
            let (s, l) = it.next().expect("peeked");
            if s + l.len() > end {
                // The closing tag ends mid-line: the rest of the line is
                // text, and is scanned no further for tags.
                break;
            }
        }
    }
    push_text(&mut out, text_start, input.len());
    Ok(out)
}

/// Offset of an opening `<tool-calls` tag at the start of a line inside a
/// block body.
fn nested_open(body: &str) -> Option<usize> {
    lines(body).find_map(|(s, l)| {
        let t = l.trim_start_matches([' ', '\t']);
        (t.starts_with(OPEN) && open_tag(t).is_some()).then(|| s + (l.len() - t.len()))
    })
}

fn push_text(out: &mut Vec<Segment>, start: usize, end: usize) {
    if end > start {
        out.push(Segment {
            kind: SegmentKind::Text,
            range: start..end,
            body: None,
            language: None,
            style: None,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn kinds(s: &str) -> Vec<SegmentKind> {
        detect(s).unwrap().iter().map(|s| s.kind).collect()
    }

    fn rejoined(s: &str) -> String {
        detect(s)
            .unwrap()
            .iter()
            .map(|g| &s[g.range.clone()])
            .collect()
    }

    use SegmentKind::{Script, Text, Thinking};

    #[test]
    fn text_thinking_and_both_block_styles_in_order() {
        let s = "Intro\n<thinking>\nplan: <tool-calls>\n</thinking>\n<tool-calls>\nreturn 1\n</tool-calls>\nmid\n```ts tool-calls\nconst x: number = 2; return x\n```\nend";
        assert_eq!(kinds(s), [Text, Thinking, Text, Script, Text, Script, Text]);
        let segs = detect(s).unwrap();
        assert_eq!(segs[3].language, Some(Language::Javascript));
        assert_eq!(segs[5].language, Some(Language::Typescript));
        assert_eq!(
            &s[segs[5].body.clone().unwrap()],
            "const x: number = 2; return x\n"
        );
        assert_eq!(rejoined(s), s);
    }

    #[test]
    fn tags_in_other_fences_inline_prose_and_thinking_are_text() {
        let s = "Use it like this:\n```\n<tool-calls>\nreturn 1\n</tool-calls>\n```\nand `<tool-calls>` inline, or say <tool-calls> mid-line.";
        assert_eq!(kinds(s), [Text]);
        let s = "<thinking>\n<tool-calls>\nnot run\n</tool-calls>\n</thinking>";
        assert_eq!(kinds(s), [Thinking]);
    }

    #[test]
    fn languages_on_tags() {
        let s = "<tool-calls lang=\"ts\">\nlet a: string = 'x'\n</tool-calls>";
        assert_eq!(detect(s).unwrap()[0].language, Some(Language::Typescript));
        assert!(matches!(
            detect("<tool-calls lang=\"py\">\nx\n</tool-calls>"),
            Err(DetectError::UnknownLanguage { line: 1, .. })
        ));
    }

    #[test]
    fn malformed_blocks_are_rejected_with_their_line() {
        assert!(matches!(
            detect("a\n<tool-calls>\nreturn 1"),
            Err(DetectError::UnclosedBlock { line: 2, .. })
        ));
        assert!(matches!(
            detect("a\n```ts tool-calls\nreturn 1\n"),
            Err(DetectError::UnclosedFence { line: 2, .. })
        ));
        assert!(matches!(
            detect("<tool-calls>\n<tool-calls>\nx\n</tool-calls>\n</tool-calls>"),
            Err(DetectError::Nested { line: 2, .. })
        ));
        assert!(matches!(
            detect("text\n</tool-calls>\n"),
            Err(DetectError::UnbalancedClose { line: 2, .. })
        ));
        assert!(matches!(
            detect("<thinking>\nhmm"),
            Err(DetectError::UnclosedThinking { line: 1, .. })
        ));
    }

    #[test]
    fn a_string_holding_the_closing_tag_ends_the_block() {
        // The first </tool-calls> ends the block, as a reader would see it:
        // the script is cut short and fails to parse later, visibly.
        let s = "<tool-calls>\nconst s = '</tool-calls>';\n</tool-calls>";
        assert!(matches!(detect(s), Ok(_) | Err(_)));
        let segs = detect("<tool-calls>\nreturn '</tool-calls>'").unwrap();
        assert_eq!(segs[0].kind, Script);
    }

    #[test]
    fn empty_and_plain_inputs() {
        assert!(detect("").unwrap().is_empty());
        assert_eq!(kinds("just words"), [Text]);
        assert_eq!(
            rejoined("é\r\n<tool-calls>x</tool-calls>\r\n"),
            "é\r\n<tool-calls>x</tool-calls>\r\n"
        );
    }

    fn pieces() -> impl Strategy<Value = String> {
        prop::collection::vec(
            prop_oneof![
                Just("<tool-calls>".to_owned()),
                Just("</tool-calls>".to_owned()),
                Just("<tool-calls lang=\"ts\">".to_owned()),
                Just("<thinking>".to_owned()),
                Just("</thinking>".to_owned()),
                Just("```ts tool-calls".to_owned()),
                Just("```".to_owned()),
                Just("~~~".to_owned()),
                Just("\n".to_owned()),
                Just(" ".to_owned()),
                Just("return 1;".to_owned()),
                "[a-z<>/`~ é\n]{0,8}".prop_map(|s| s),
                any::<String>(),
            ],
            0..24,
        )
        .prop_map(|v| v.concat())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]
        #[test]
        fn never_panics_and_segments_rejoin_to_the_input(s in pieces()) {
            match detect(&s) {
                Ok(segs) => {
                    let mut at = 0;
                    for g in &segs {
                        prop_assert_eq!(g.range.start, at);
                        prop_assert!(g.range.end > g.range.start);
                        if let Some(b) = &g.body {
                            prop_assert!(g.range.start <= b.start && b.end <= g.range.end);
                        }
                        at = g.range.end;
                    }
                    prop_assert_eq!(at, s.len());
                    let joined: String = segs.iter().map(|g| &s[g.range.clone()]).collect();
                    prop_assert_eq!(joined, s);
                }
                Err(e) => prop_assert!(e.offset() <= s.len()),
            }
        }
    }
}
