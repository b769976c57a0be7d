//! Writers for a validation [`Report`]: a text table (rows, the per-set summary as a markdown
//! table that README.md quotes, rank agreement, the gate's verdict), JSON (the whole report) and
//! CSV (one line per row). They write to any `Write`; choosing stdout or a file is the CLI's job.

use super::{Report, Status};
use std::io::Write;

fn percent(e: f64) -> String {
    format!("{:+.1}%", e * 100.0)
}

/// Four significant figures, whatever the unit's magnitude.
fn value(v: f64) -> String {
    let a = v.abs();
    if a >= 1000.0 {
        format!("{v:.0}")
    } else if a >= 100.0 {
        format!("{v:.1}")
    } else if a >= 10.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.3}")
    }
}

fn status(s: Status) -> &'static str {
    match s {
        Status::Ok => "ok",
        Status::Miss => "MISS",
        Status::KnownMiss => "known miss",
        Status::KnownMissNowOk => "known miss, now ok",
        Status::Reference => "reference",
    }
}

/// Human-readable report.
pub fn write_text(w: &mut dyn Write, r: &Report) -> std::io::Result<()> {
    let set_w = r.rows.iter().map(|x| x.set.len()).max().unwrap_or(3).max(3);
    let id_w = r.rows.iter().map(|x| x.id.len()).max().unwrap_or(2).max(2);
    let st_w = r.rows.iter().map(|x| x.strategy.len()).max().unwrap_or(8).max(8);
    let metric = |x: &super::RowResult| match x.metric {
        super::Metric::Throughput => format!("throughput ({})", x.unit),
        super::Metric::IterationTime => format!("iteration time ({})", x.unit),
        super::Metric::Speedup => format!("speedup ({})", x.unit),
    };
    let m_w = r.rows.iter().map(|x| metric(x).len()).max().unwrap_or(6).max(6);
    // One error column per baseline, headed by its name.
    let b_names: Vec<&str> = r.baselines.iter().map(|b| b.baseline.as_str()).collect();
    let b_head: String = b_names.iter().map(|n| format!("  {:>w$}", n, w = n.len().max(8))).collect();
    writeln!(
        w,
        "{:set_w$}  {:id_w$}  {:>5}  {:st_w$}  {:m_w$}  {:>10}  {:>10}  {:>8}{b_head}  status",
        "set", "id", "gpus", "strategy", "metric", "measured", "predicted", "error"
    )?;
    for x in &r.rows {
        let b_cols: String = b_names
            .iter()
            .zip(&x.baselines)
            .map(|(n, b)| format!("  {:>w$}", b.error.map_or("-".to_string(), percent), w = n.len().max(8)))
            .collect();
        writeln!(
            w,
            "{:set_w$}  {:id_w$}  {:>5}  {:st_w$}  {:m_w$}  {:>10}  {:>10}  {:>8}{b_cols}  {}",
            x.set,
            x.id,
            x.gpus,
            x.strategy,
            metric(x),
            x.measured.map_or("-".to_string(), value),
            value(x.predicted),
            x.error.map_or("-".to_string(), percent),
            status(x.status),
        )?;
    }
    writeln!(w)?;
    writeln!(
        w,
        "| set | rows | known misses | mean abs error | mean abs error, unmarked rows | median abs error | worst abs error (row) | mean signed error |"
    )?;
    writeln!(w, "|---|---:|---:|---:|---:|---:|---|---:|")?;
    for s in r.sets.iter().chain(&r.overall) {
        writeln!(
            w,
            "| {} | {} | {} | {:.1}% | {} | {:.1}% | {:.1}% ({}) | {} |",
            s.set,
            s.rows,
            s.known_misses,
            s.mean_abs_error * 100.0,
            s.mean_abs_error_unmarked.map_or("-".to_string(), |m| format!("{:.1}%", m * 100.0)),
            s.median_abs_error * 100.0,
            s.worst_abs_error * 100.0,
            s.worst_row,
            percent(s.mean_signed_error),
        )?;
    }
    for b in &r.baselines {
        writeln!(w)?;
        writeln!(w, "Baseline {} ({}), the same rows, beside dagsim's:", b.baseline, b.about)?;
        writeln!(
            w,
            "| set | rows | dagsim mean abs error | {0} mean abs error | dagsim median | {0} median | dagsim mean signed | {0} mean signed |",
            b.baseline
        )?;
        writeln!(w, "|---|---:|---:|---:|---:|---:|---:|---:|")?;
        for (ours, theirs) in r.sets.iter().chain(&r.overall).zip(b.sets.iter().chain(&b.overall)) {
            writeln!(
                w,
                "| {} | {} | {:.1}% | {:.1}% | {:.1}% | {:.1}% | {} | {} |",
                ours.set,
                ours.rows,
                ours.mean_abs_error * 100.0,
                theirs.mean_abs_error * 100.0,
                ours.median_abs_error * 100.0,
                theirs.median_abs_error * 100.0,
                percent(ours.mean_signed_error),
                percent(theirs.mean_signed_error),
            )?;
        }
    }
    if !r.groups.is_empty() {
        writeln!(w)?;
        writeln!(w, "Rank agreement of strategies measured on the same setup (Kendall tau-b):")?;
        for g in &r.groups {
            let tau = g.kendall_tau_b.map_or("undefined (ties)".to_string(), |t| format!("{t:+.2}"));
            writeln!(
                w,
                "  {}/{}: {} rows, tau-b {tau} ({} pairs ordered alike, {} reversed)",
                g.set, g.group, g.rows, g.concordant, g.discordant
            )?;
        }
        writeln!(w, "  all groups: {} pairs ordered alike, {} reversed", r.rank_concordant, r.rank_discordant)?;
    }
    writeln!(w)?;
    let limits = format!(
        "tolerance {:.1}% on the mean and max-error {:.1}% on each row, over rows not marked known_miss",
        r.gate.tolerance * 100.0,
        r.gate.max_error * 100.0
    );
    if r.passed {
        writeln!(w, "gate passed ({limits})")?;
    } else {
        writeln!(w, "gate FAILED ({limits}):")?;
        for f in &r.failures {
            writeln!(w, "  {f}")?;
        }
    }
    Ok(())
}

/// The whole report as one JSON object.
pub fn write_json(w: &mut dyn Write, r: &Report) -> std::io::Result<()> {
    serde_json::to_writer_pretty(&mut *w, r)?;
    writeln!(w)
}

/// One CSV line per row, with the measured and predicted values and the error; then, per
/// baseline, `<name>_predicted` and `<name>_error`.
pub fn write_csv(w: &mut dyn Write, r: &Report) -> std::io::Result<()> {
    let mut out = csv::Writer::from_writer(w);
    let mut header: Vec<String> = [
        "set",
        "id",
        "line",
        "workload",
        "topology",
        "gpus",
        "strategy",
        "metric",
        "unit",
        "measured",
        "spread",
        "predicted",
        "error",
        "within_spread",
        "status",
        "group",
        "known_miss",
        "source",
        "collectives",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    for b in &r.baselines {
        header.push(format!("{}_predicted", b.baseline));
        header.push(format!("{}_error", b.baseline));
    }
    out.write_record(&header)?;
    let opt = |v: Option<f64>| v.map_or(String::new(), |v| v.to_string());
    let name = |v: serde_json::Value| v.as_str().unwrap_or_default().to_string();
    for x in &r.rows {
        let mut rec = vec![
            x.set.clone(),
            x.id.clone(),
            x.line.to_string(),
            x.workload.clone(),
            x.topology.clone(),
            x.gpus.to_string(),
            x.strategy.clone(),
            name(serde_json::to_value(x.metric).map_err(std::io::Error::other)?),
            x.unit.to_string(),
            opt(x.measured),
            opt(x.spread),
            x.predicted.to_string(),
            opt(x.error),
            x.within_spread.map_or(String::new(), |b| b.to_string()),
            name(serde_json::to_value(x.status).map_err(std::io::Error::other)?),
            x.group.clone().unwrap_or_default(),
            x.known_miss.clone().unwrap_or_default(),
            x.source.clone(),
            x.collectives.clone(),
        ];
        for b in &x.baselines {
            rec.push(b.predicted.to_string());
            rec.push(opt(b.error));
        }
        out.write_record(&rec)?;
    }
    out.flush()
}
