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
        super::Metric::TokensPerSPerGpu => format!("tokens/s per GPU ({})", x.unit),
        super::Metric::ModelTflopsPerGpu => format!("model TFLOP/s per GPU ({})", x.unit),
    };
    let m_w = r.rows.iter().map(|x| metric(x).len()).max().unwrap_or(6).max(6);
    // With a baseline, two more columns: its prediction and its error.
    let base_head = match r.baseline {
        Some(b) => format!("  {:>10}  {:>8}", b.name(), "error"),
        None => String::new(),
    };
    writeln!(
        w,
        "{:set_w$}  {:id_w$}  {:>5}  {:st_w$}  {:m_w$}  {:>10}  {:>10}  {:>8}{base_head}  status",
        "set", "id", "gpus", "strategy", "metric", "measured", "predicted", "error"
    )?;
    for x in &r.rows {
        let base = match r.baseline {
            Some(_) => format!(
                "  {:>10}  {:>8}",
                x.baseline.map_or("-".to_string(), value),
                x.baseline_error.map_or("-".to_string(), percent)
            ),
            None => String::new(),
        };
        writeln!(
            w,
            "{:set_w$}  {:id_w$}  {:>5}  {:st_w$}  {:m_w$}  {:>10}  {:>10}  {:>8}{base}  {}",
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
    let missing: Vec<_> = r.rows.iter().filter_map(|x| x.baseline_missing.as_ref().map(|why| (x, why))).collect();
    if let (Some(b), false) = (r.baseline, missing.is_empty()) {
        writeln!(w)?;
        writeln!(w, "No {} baseline for {} row(s):", b.name(), missing.len())?;
        for (x, why) in missing {
            writeln!(w, "  {}/{} (line {}): {why}", x.set, x.id, x.line)?;
        }
    }
    writeln!(w)?;
    let (base_head, base_rule) = match r.baseline {
        Some(b) => (format!(" {} baseline mean abs error |", b.name()), "---:|"),
        None => (String::new(), ""),
    };
    writeln!(
        w,
        "| set | rows | known misses | mean abs error | mean abs error, unmarked rows | median abs error | worst abs error (row) | mean signed error (+: too fast) |{base_head}"
    )?;
    writeln!(w, "|---|---:|---:|---:|---:|---:|---|---:|{base_rule}")?;
    for s in r.sets.iter().chain(&r.overall) {
        let base = match r.baseline {
            Some(_) => {
                format!(" {} |", s.baseline_mean_abs_error.map_or("-".to_string(), |m| format!("{:.1}%", m * 100.0)))
            }
            None => String::new(),
        };
        writeln!(
            w,
            "| {} | {} | {} | {:.1}% | {} | {:.1}% | {:.1}% ({}) | {} |{base}",
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

/// A CSV cell at a fixed precision (no `0.30000000000000004`): errors as ratios to 6 decimals, like
/// prediction CSVs; measured and predicted values, whose units differ by metric, to 9 significant
/// digits. Other cells, and blank ones, are kept.
fn fixed_precision(column: &str, cell: &str) -> String {
    let Ok(v) = cell.parse::<f64>() else { return cell.to_string() };
    match column {
        "error" | "baseline_error" => crate::report::ratio_cell(v),
        "measured" | "spread" | "predicted" | "baseline" => significant(v, 9),
        _ => cell.to_string(),
    }
}

/// `v` to `digits` significant digits, in plain decimal notation.
fn significant(v: f64, digits: i32) -> String {
    if v == 0.0 || !v.is_finite() {
        return format!("{v}");
    }
    let decimals = (digits - 1 - v.abs().log10().floor() as i32).max(0) as usize;
    format!("{v:.decimals$}")
}

/// One CSV line per row, with the measured and predicted values and the error. Every line has
/// every column: a field some rows leave out (a baseline's error on a reference row) is blank.
pub fn write_csv(w: &mut dyn Write, r: &Report) -> std::io::Result<()> {
    // Each row as (column, value) pairs, by serialising it alone with its header.
    let mut rows: Vec<Vec<(String, String)>> = Vec::new();
    for row in &r.rows {
        let mut one = csv::Writer::from_writer(Vec::new());
        one.serialize(row).map_err(std::io::Error::other)?;
        let bytes = one.into_inner().map_err(|e| std::io::Error::other(e.to_string()))?;
        let mut back = csv::Reader::from_reader(bytes.as_slice());
        let header = back.headers().map_err(std::io::Error::other)?.clone();
        let values = back.records().next().transpose().map_err(std::io::Error::other)?.unwrap_or_default();
        rows.push(header.iter().zip(values.iter()).map(|(h, v)| (h.to_string(), fixed_precision(h, v))).collect());
    }
    // The columns in order of first appearance, each after the column that precedes it in a row.
    let mut columns: Vec<String> = Vec::new();
    for row in &rows {
        let mut at = 0;
        for (name, _) in row {
            match columns.iter().position(|c| c == name) {
                Some(i) => at = i + 1,
                None => {
                    columns.insert(at, name.clone());
                    at += 1;
                }
            }
        }
    }
    let mut out = csv::Writer::from_writer(w);
    out.write_record(&columns)?;
    for row in &rows {
        let value = |c: &String| row.iter().find(|(n, _)| n == c).map_or("", |(_, v)| v.as_str());
        out.write_record(columns.iter().map(value))?;
    }
    out.flush()
}
