//! Turning raw bytes into a script source: UTF-8, BOM, size cap.

use crate::error::{ErrorCode, Phase, ScriptError};

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
