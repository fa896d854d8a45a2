//! What `compare` prints: the table against the peer, the back-to-back
//! twins, and the chart's bars.

use super::{Options, Row, Twin};

pub(crate) fn print_table(ours: &[Row], peer: &[Row], o: &Options) {
    let rule = if o.markdown {
        "|---|---|---:|---:|---:|---|---:|---:|---:|"
    } else {
        ""
    };
    let line = |cells: [String; 9]| print_line(o, &cells);
    line([
        format!("{:<15}", "workload"),
        format!("{:<16}", "ours"),
        format!("{:>11}", "median µs"),
        format!("{:>9}", "p90 µs"),
        format!("{:>9}", "p99 µs"),
        format!("{:<28}", "peer"),
        format!("{:>11}", "median µs"),
        format!("{:>9}", "p90 µs"),
        format!("{:>9}", "peer/ours"),
    ]);
    if !rule.is_empty() {
        println!("{rule}");
    }
    for r in ours {
        let peers: Vec<&Row> = peer.iter().filter(|p| p.workload == r.workload).collect();
        if peers.is_empty() {
            line([
                format!("{:<15}", r.workload),
                format!("{:<16}", r.config),
                format!("{:>11.1}", r.median_us),
                format!("{:>9.1}", r.p90_us),
                format!("{:>9.1}", r.p99_us),
                format!("{:<28}", "-"),
                format!("{:>11}", "-"),
                format!("{:>9}", "-"),
                format!("{:>9}", "-"),
            ]);
        }
        for p in peers {
            line([
                format!("{:<15}", r.workload),
                format!("{:<16}", r.config),
                format!("{:>11.1}", r.median_us),
                format!("{:>9.1}", r.p90_us),
                format!("{:>9.1}", r.p99_us),
                format!("{:<28}", p.config),
                format!("{:>11.1}", p.median_us),
                format!("{:>9.1}", p.p90_us),
                format!("{:>8.2}x", p.median_us / r.median_us),
            ]);
        }
    }
}

/// The chart's bars: each row of ours against the peer's best median on
/// its workload (rows without a peer row are left out, and the sandbox's:
/// the peer has no sandbox, its row there is only its trivial time).
pub(crate) fn bars(ours: &[Row], peer: &[Row]) -> Vec<harness_benches::chart::Bar> {
    ours.iter()
        .filter(|r| r.workload != "sandbox_execute")
        .filter_map(|r| {
            let best = peer
                .iter()
                .filter(|p| p.workload == r.workload)
                .map(|p| p.median_us)
                .min_by(f64::total_cmp)?;
            Some(harness_benches::chart::Bar {
                workload: r.workload.clone(),
                config: r.config.clone(),
                ours_us: r.median_us,
                peer_us: best,
            })
        })
        .collect()
}

/// One line of a table: `| a | b |` with `--markdown`, otherwise the
/// cells two spaces apart.
fn print_line(o: &Options, cells: &[String]) {
    if o.markdown {
        println!("| {} |", cells.join(" | "));
    } else {
        println!("{}", cells.join("  "));
    }
}

/// With `--gap-ms`: each [`TWIN_ROWS`](super::TWIN_ROWS) row spaced beside its twin timed
/// back to back in the same rounds, the ratio of their medians, and the
/// spaced row's p99 against its median.
pub(crate) fn print_twins(twins: &[Twin], o: &Options) {
    if twins.is_empty() {
        return;
    }
    println!(
        "\nThe same rows back to back, timed in the same rounds (spaced ÷ back to back: medians):\n"
    );
    let line = |cells: [String; 7]| print_line(o, &cells);
    line([
        format!("{:<15}", "workload"),
        format!("{:<16}", "ours"),
        format!("{:>14}", "back to back µs"),
        format!("{:>11}", "spaced µs"),
        format!("{:>17}", "spaced ÷ b2b"),
        format!("{:>12}", "spaced p99 µs"),
        format!("{:>11}", "p99 ÷ p50"),
    ]);
    if o.markdown {
        println!("|---|---|---:|---:|---:|---:|---:|");
    }
    for t in twins {
        let (s, b) = (&t.spaced, &t.back_to_back);
        line([
            format!("{:<15}", s.workload),
            format!("{:<16}", s.config),
            format!("{:>14.1}", b.median_us),
            format!("{:>11.1}", s.median_us),
            format!("{:>16.2}x", s.median_us / b.median_us),
            format!("{:>12.1}", s.p99_us),
            format!("{:>10.2}x", s.p99_us / s.median_us),
        ]);
    }
}
