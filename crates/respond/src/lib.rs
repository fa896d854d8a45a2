//! From a model's response to the engines and back: detect script blocks
//! in assistant text ([`detect`]), prepare them with a real parser
//! ([`prepare`]). Both entry points never panic, on any input.

pub mod detect;
pub mod prepare;

pub use detect::{detect, DetectError, Language, Segment, SegmentKind};
pub use prepare::{prepare, prepare_with, CacheStats, PrepareOptions, Prepared, Preparer};
