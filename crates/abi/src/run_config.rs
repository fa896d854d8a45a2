//! The layout of the prelude's config for one run, which the host writes
//! and the prelude's `install` reads without parsing JSON:
//! `{"run":"<seed><script id>","static":{…}}`. The build writes these
//! values into prelude.js, so the two sides cannot disagree.

/// What the config starts with.
pub const PREFIX: &str = "{\"run\":\"";
/// The `Math.random` seed: 128 bits as hex digits.
pub const SEED_HEX_LEN: usize = 32;
/// Characters in a script id as the host makes it (`scr_` and 16 hex
/// digits); an id of another length takes the prelude's JSON path.
pub const SCRIPT_ID_LEN: usize = 20;
/// What follows the run's part; the static part comes after it.
pub const STATIC_MARK: &str = "\",\"static\":";
/// Where the run's part (seed and script id) lies: the only bytes that
/// differ between the configs of two runs with the same static part.
pub const RUN_PART: core::ops::Range<usize> =
    PREFIX.len()..PREFIX.len() + SEED_HEX_LEN + SCRIPT_ID_LEN;

/// A config in this layout cut in two: everything up to and including
/// [`STATIC_MARK`] (what `install(head, true)` takes, for a context whose
/// last install had the same static part), and the static part's JSON.
/// `None` for a config in another layout.
pub fn split_static(config: &str) -> Option<(&str, &str)> {
    let mark_end = RUN_PART.end + STATIC_MARK.len();
    let fixed = config.starts_with(PREFIX)
        && config.get(RUN_PART.end..mark_end) == Some(STATIC_MARK)
        && config.ends_with('}');
    if !fixed {
        return None;
    }
    Some((
        config.get(..mark_end)?,
        config.get(mark_end..config.len() - 1)?,
    ))
}
