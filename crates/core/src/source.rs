//! Turning raw bytes into a script source: UTF-8, BOM, size cap.

use crate::error::{ErrorCode, Location, Phase, ScriptError};

/// The 1-based line and column of byte `offset` in `source` (clamped to
/// its end, and back to a character boundary), columns counted in
/// characters: where parsers' byte offsets point in the user's script.
///
/// # Examples
/// ```
/// use harness_core::source::location;
/// let l = location("let a = 1;\nlet é = ;", 20);
/// assert_eq!((l.line, l.column), (2, 9));
/// ```
pub fn location(source: &str, offset: usize) -> Location {
    let mut offset = offset.min(source.len());
    while !source.is_char_boundary(offset) {
        offset -= 1;
    }
    let before = &source[..offset];
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    let column = source[line_start..offset].chars().count() + 1;
    Location::new(line as u32, column as u32)
}

/// ScriptTooLargeError when a source of `len` bytes is over `max_bytes`.
pub fn check_size(len: usize, max_bytes: u64) -> Result<(), ScriptError> {
    if len as u64 > max_bytes {
        return Err(ScriptError::new(
            ErrorCode::ScriptTooLargeError,
            Phase::Parsing,
            format!("script is {len} bytes; the limit is {max_bytes} bytes"),
        ));
    }
    Ok(())
}

/// Decodes script bytes: strips a UTF-8 byte-order mark, rejects invalid
/// UTF-8 (naming the byte offset) and sources over `max_bytes`.
///
/// # Examples
/// ```
/// use harness_core::source::decode_source;
/// assert_eq!(decode_source(b"\xEF\xBB\xBFreturn 1", 100).unwrap(), "return 1");
/// assert!(decode_source(b"return \xFF", 100).is_err());
/// ```
pub fn decode_source(bytes: &[u8], max_bytes: u64) -> Result<String, ScriptError> {
    let bytes = bytes.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(bytes);
    if bytes.len() as u64 > max_bytes {
        return Err(ScriptError::new(
            ErrorCode::ScriptTooLargeError,
            Phase::Parsing,
            format!(
                "script is {} bytes; the limit is {max_bytes} bytes",
                bytes.len()
            ),
        ));
    }
    match std::str::from_utf8(bytes) {
        Ok(s) => Ok(s.to_owned()),
        Err(e) => Err(ScriptError::new(
            ErrorCode::ScriptSyntaxError,
            Phase::Parsing,
            format!(
                "script is not valid UTF-8 (invalid byte at offset {})",
                e.valid_up_to()
            ),
        )),
    }
}

/// The deepest nesting of brackets outside strings and comments: a cheap,
/// conservative guard in front of recursive-descent parsers
/// (Boa's, oxc's), which would otherwise overflow the native stack on
/// hostile input.
///
/// # Examples
/// ```
/// use harness_core::source::nesting_depth;
/// assert_eq!(nesting_depth("f([{}])"), 3);
/// assert_eq!(nesting_depth("'(((' // {{{\n (1)"), 1);
/// assert_eq!(nesting_depth(&"[".repeat(5000)), 5000);
/// ```
pub fn nesting_depth(source: &str) -> usize {
    let b = source.as_bytes();
    let (mut depth, mut max, mut i) = (0usize, 0usize, 0usize);
    while i < b.len() {
        match b[i] {
            b'(' | b'[' | b'{' => {
                depth += 1;
                max = max.max(depth);
            }
            b')' | b']' | b'}' => depth = depth.saturating_sub(1),
            q @ (b'"' | b'\'') => {
                i += 1;
                while i < b.len() && b[i] != q && b[i] != b'\n' {
                    i += if b[i] == b'\\' { 2 } else { 1 };
                }
            }
            b'/' if b.get(i + 1) == Some(&b'/') => {
                while i < b.len() && b[i] != b'\n' {
                    i += 1;
                }
            }
            b'/' if b.get(i + 1) == Some(&b'*') => {
                i += 2;
                while i + 1 < b.len() && !(b[i] == b'*' && b[i + 1] == b'/') {
                    i += 1;
                }
                i += 1;
            }
            _ => {}
        }
        i += 1;
    }
    max
}
