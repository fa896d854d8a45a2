//! The chart `compare --svg FILE` writes: how many times faster each of
//! our rows is than the peer at its best on the same workload.

use std::fmt::Write;

/// One bar: a row of ours on a workload, and the peer's best median there.
#[derive(Debug, Clone)]
pub struct Bar {
    /// The workload (`trivial`, `sequential_10`, …).
    pub workload: String,
    /// Our configuration (`quickjs`, `boa,process`, …).
    pub config: String,
    /// Our median, µs.
    pub ours_us: f64,
    /// The peer's best median on this workload, µs.
    pub peer_us: f64,
}

impl Bar {
    /// Peer ÷ ours: above 1, ours is faster.
    pub fn ratio(&self) -> f64 {
        self.peer_us / self.ours_us
    }
}

const LEFT: f64 = 260.0;
const WIDTH: f64 = 560.0;
const RIGHT: f64 = 150.0;
const BAR: f64 = 14.0;
const GAP: f64 = 4.0;
const GROUP_GAP: f64 = 14.0;
const TOP: f64 = 56.0;

/// The chart as an SVG document: one horizontal bar per row on a
/// logarithmic axis of peer ÷ ours, a line at 1× (as fast as the peer),
/// each bar labelled with both medians. `title` heads it (the machine and
/// the run's settings).
pub fn svg(bars: &[Bar], title: &str) -> String {
    let ratios: Vec<f64> = bars
        .iter()
        .map(Bar::ratio)
        .filter(|r| r.is_finite() && *r > 0.0)
        .collect();
    // Powers of two that hold every ratio and 1×.
    let lo = ratios
        .iter()
        .copied()
        .fold(1.0f64, f64::min)
        .log2()
        .floor()
        .min(-1.0);
    let hi = ratios
        .iter()
        .copied()
        .fold(1.0f64, f64::max)
        .log2()
        .ceil()
        .max(1.0);
    let x = |ratio: f64| LEFT + (ratio.log2() - lo) / (hi - lo) * WIDTH;
    let mut groups: Vec<&str> = Vec::new();
    for b in bars {
        if !groups.contains(&b.workload.as_str()) {
            groups.push(&b.workload);
        }
    }
    let height = TOP + bars.len() as f64 * (BAR + GAP) + groups.len() as f64 * GROUP_GAP + 40.0;
    let total = LEFT + WIDTH + RIGHT;
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{total}" height="{height}" viewBox="0 0 {total} {height}" font-family="sans-serif" font-size="11">"#
    );
    let _ = writeln!(s, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = writeln!(
        s,
        r#"<text x="10" y="18" font-size="13" font-weight="bold">Median run time: quickjs-emscripten at its best ÷ ours (right of 1×: ours is faster)</text>"#
    );
    let _ = writeln!(
        s,
        r##"<text x="10" y="34" fill="#555">{}</text>"##,
        escape(title)
    );
    let axis_bottom = height - 30.0;
    for p in lo as i32..=hi as i32 {
        let ratio = 2f64.powi(p);
        let at = x(ratio);
        let (stroke, width) = if p == 0 { ("#333", 1.5) } else { ("#ddd", 1.0) };
        let _ = writeln!(
            s,
            r#"<line x1="{at:.1}" y1="{TOP}" x2="{at:.1}" y2="{axis_bottom:.1}" stroke="{stroke}" stroke-width="{width}"/>"#
        );
        let _ = writeln!(
            s,
            r#"<text x="{at:.1}" y="{:.1}" text-anchor="middle">{}×</text>"#,
            axis_bottom + 14.0,
            trim(ratio)
        );
    }
    let mut y = TOP;
    for group in groups {
        y += GROUP_GAP / 2.0;
        for b in bars.iter().filter(|b| b.workload == group) {
            let ratio = b.ratio();
            let (from, to) = (x(1.0), x(ratio.clamp(2f64.powf(lo), 2f64.powf(hi))));
            let (left, w) = (from.min(to), (to - from).abs().max(1.0));
            let fill = if ratio >= 1.0 { "#2a7ab9" } else { "#d9822b" };
            let _ = writeln!(
                s,
                r#"<text x="{:.1}" y="{:.1}" text-anchor="end">{} · {}</text>"#,
                LEFT - 8.0,
                y + BAR - 3.0,
                escape(&b.workload),
                escape(&b.config)
            );
            let _ = writeln!(
                s,
                r#"<rect x="{left:.1}" y="{y:.1}" width="{w:.1}" height="{BAR}" fill="{fill}"/>"#
            );
            let _ = writeln!(
                s,
                r#"<text x="{:.1}" y="{:.1}">{:.2}× ({:.0} vs {:.0} µs)</text>"#,
                LEFT + WIDTH + 6.0,
                y + BAR - 3.0,
                ratio,
                b.ours_us,
                b.peer_us
            );
            y += BAR + GAP;
        }
        y += GROUP_GAP / 2.0;
    }
    s.push_str("</svg>\n");
    s
}

/// `1/4`, `1`, `16`: a power of two as a whole number or its inverse.
fn trim(v: f64) -> String {
    if v < 1.0 {
        format!("1/{:.0}", 1.0 / v)
    } else {
        format!("{v:.0}")
    }
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_bar_per_row_with_both_medians_and_a_line_at_one() {
        let bars = [
            Bar {
                workload: "trivial".into(),
                config: "quickjs".into(),
                ours_us: 20.0,
                peer_us: 200.0,
            },
            Bar {
                workload: "trivial".into(),
                config: "boa<process>".into(),
                ours_us: 400.0,
                peer_us: 200.0,
            },
        ];
        let svg = svg(&bars, "a & b");
        assert!(svg.starts_with("<svg "), "{svg}");
        assert!(svg.trim_end().ends_with("</svg>"));
        assert_eq!(svg.matches("<rect x=").count(), 2);
        assert!(svg.contains("10.00× (20 vs 200 µs)"), "{svg}");
        assert!(svg.contains("0.50× (400 vs 200 µs)"), "{svg}");
        assert!(svg.contains(">1×</text>"));
        assert!(svg.contains("boa&lt;process&gt;") && svg.contains("a &amp; b"));
    }
}
