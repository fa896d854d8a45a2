//! From a model's response to conversation items: detect script blocks in
//! assistant text ([`detect`](mod@detect)), prepare them with a real parser
//! ([`prepare`](mod@prepare)), run them in order with live events ([`orchestrate`]),
//! and serialise the results as conversation items in the common wire
//! shapes ([`items`]). `detect` and `prepare` never panic, on any input.

pub mod detect;
pub mod items;
pub mod language;
pub mod orchestrate;
pub mod prepare;
pub mod realm;
mod typescript;

pub use detect::{detect, DetectError, Language, Segment, SegmentKind};
pub use items::{CallStatus, Item};
pub use orchestrate::{Event, Options, Orchestrator};
pub use prepare::{prepare, prepare_with, CacheStats, PrepareOptions, Prepared, Preparer};
