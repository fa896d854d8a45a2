//! Rate-limited sinks for console output and progress events.

use crate::limits::Limits;
use crate::report::{ConsoleEntry, ConsoleLevel, ProgressEvent};
use serde_json::Value;
use std::time::{Duration, Instant};

/// Console lines: a total cap, a per-second rate and a per-line length cap.
#[derive(Debug)]
pub(crate) struct ConsoleSink {
    pub entries: Vec<ConsoleEntry>,
    pub dropped: u32,
    max_lines: u32,
    per_second: u32,
    max_line_bytes: usize,
    window_start: Option<Instant>,
    window_count: u32,
}

impl ConsoleSink {
    pub(crate) fn new(limits: &Limits) -> Self {
        ConsoleSink {
            entries: Vec::new(),
            dropped: 0,
            max_lines: limits.max_console_lines,
            per_second: limits.console_lines_per_second,
            max_line_bytes: limits.max_console_line_bytes as usize,
            window_start: None,
            window_count: 0,
        }
    }

    /// Records a line if the caps allow; returns whether it was kept.
    pub(crate) fn push(&mut self, level: ConsoleLevel, text: &str, now: Instant) -> bool {
        if self.entries.len() as u32 >= self.max_lines {
            self.dropped += 1;
            return false;
        }
        match self.window_start {
            Some(start) if now.duration_since(start) < Duration::from_secs(1) => {
                if self.window_count >= self.per_second {
                    self.dropped += 1;
                    return false;
                }
                self.window_count += 1;
            }
            _ => {
                self.window_start = Some(now);
                self.window_count = 1;
            }
        }
        let text = truncate_with_marker(text, self.max_line_bytes);
        self.entries.push(ConsoleEntry { level, text });
        true
    }
}

/// Progress events: at most one per interval and a total cap.
#[derive(Debug)]
pub(crate) struct ProgressSink {
    pub events: Vec<ProgressEvent>,
    pub dropped: u32,
    max: u32,
    interval: Duration,
    last: Option<Instant>,
}

impl ProgressSink {
    pub(crate) fn new(limits: &Limits) -> Self {
        ProgressSink {
            events: Vec::new(),
            dropped: 0,
            max: limits.max_progress_events,
            interval: limits.progress_interval(),
            last: None,
        }
    }

    /// Records an event if the limits allow; returns whether it was kept.
    pub(crate) fn push(
        &mut self,
        message: &str,
        (data, kind): (Option<Value>, crate::report::ProgressKind),
        now: Instant,
        started: Instant,
    ) -> bool {
        let too_soon = self
            .last
            .is_some_and(|l| now.duration_since(l) < self.interval);
        if too_soon || self.events.len() as u32 >= self.max {
            self.dropped += 1;
            return false;
        }
        self.last = Some(now);
        self.events.push(ProgressEvent {
            message: truncate_with_marker(message, 4096),
            kind,
            data,
            elapsed_ms: ms(now.duration_since(started)),
        });
        true
    }
}

/// Cuts `s` to at most `max` bytes on a char boundary, adding a marker that
/// says how much was cut.
pub(crate) fn truncate_with_marker(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_owned();
    }
    let mut cut = max;
    while !s.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{}…[truncated {} bytes]", &s[..cut], s.len() - cut)
}

/// Cuts every string inside a JSON value to `max` bytes (see [`truncate_with_marker`]).
pub(crate) fn truncate_strings(v: &mut Value, max: usize) {
    match v {
        Value::String(s) if s.len() > max => *s = truncate_with_marker(s, max),
        Value::Array(a) => a.iter_mut().for_each(|x| truncate_strings(x, max)),
        Value::Object(o) => o.values_mut().for_each(|x| truncate_strings(x, max)),
        _ => {}
    }
}

pub(crate) fn ms(d: Duration) -> f64 {
    (d.as_secs_f64() * 1e6).round() / 1e3
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::ProgressKind;

    #[test]
    fn console_rate_and_cap() {
        let limits = Limits::default();
        let mut c = ConsoleSink::new(&limits);
        let t0 = Instant::now();
        for i in 0..25 {
            c.push(ConsoleLevel::Log, &format!("{i}"), t0);
        }
        assert_eq!((c.entries.len(), c.dropped), (20, 5));
        // A new second opens a new window.
        for i in 0..300 {
            c.push(ConsoleLevel::Log, "x", t0 + Duration::from_secs(1 + i / 20));
        }
        assert_eq!(c.entries.len(), 200);
    }

    #[test]
    fn progress_interval_and_cap() {
        let limits = Limits::default();
        let mut p = ProgressSink::new(&limits);
        let t0 = Instant::now();
        assert!(p.push("a", (None, ProgressKind::Info), t0, t0));
        assert!(!p.push(
            "b",
            (None, ProgressKind::Info),
            t0 + Duration::from_millis(100),
            t0
        ));
        assert!(p.push(
            "c",
            (None, ProgressKind::Info),
            t0 + Duration::from_millis(500),
            t0
        ));
        for i in 2..100 {
            p.push(
                "x",
                (None, ProgressKind::Info),
                t0 + Duration::from_millis(500 * i),
                t0,
            );
        }
        assert_eq!(p.events.len(), 50);
    }

    #[test]
    fn truncation_respects_char_boundaries() {
        let s = "é".repeat(10);
        let t = truncate_with_marker(&s, 5);
        assert!(t.starts_with("éé…[truncated 16 bytes]"), "{t}");
        let mut v = serde_json::json!({"a": ["xxxxxxxx", 1], "b": "yy"});
        truncate_strings(&mut v, 4);
        assert_eq!(v["a"][0], "xxxx…[truncated 4 bytes]");
        assert_eq!(v["b"], "yy");
    }
}
