//! Reading a validation report back (the CSV or JSON that `dagsim validate` writes) and laying its
//! rows out as predicted-versus-measured scatter panels: one panel per metric (their units differ),
//! one series per measurement set (the same colour in every panel). Drawing is `report::plot::scatter_chart`'s job.

use crate::error::{Error, Location, Result};
use crate::report::plot::{ScatterPanel, ScatterPoint};
use std::path::Path;

/// The columns of a report row that a scatter needs (the report has more; they are ignored).
#[derive(Debug, Clone, PartialEq, serde::Deserialize)]
pub struct ReportedRow {
    pub set: String,
    pub id: String,
    pub metric: String,
    pub unit: String,
    pub measured: Option<f64>,
    pub predicted: f64,
    pub status: String,
}

/// A report read back: its rows and, from JSON, the gate it was judged by.
#[derive(Debug, Clone, PartialEq, serde::Deserialize)]
pub struct ReportFile {
    pub rows: Vec<ReportedRow>,
    #[serde(default)]
    pub gate: Option<super::Gate>,
}

/// Reads `dagsim validate --format csv|json` output; the format is told by the first character
/// (`{` is JSON). A text report is refused with a hint.
pub fn read_report(path: &Path) -> Result<ReportFile> {
    let text = std::fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
    parse_report(&text, path)
}

/// [`read_report`] on text already read; `path` names it in errors.
pub fn parse_report(text: &str, path: &Path) -> Result<ReportFile> {
    match text.trim_start().chars().next() {
        Some('{') => serde_json::from_str(text).map_err(|e| {
            Error::parse(Location::line(path, e.line()), format!("not a `dagsim validate --format json` report: {e}"))
        }),
        Some(_) if text.starts_with("set,") => {
            let mut rows = Vec::new();
            let mut reader = csv::Reader::from_reader(text.as_bytes());
            let header = reader.headers().cloned().unwrap_or_default();
            for rec in reader.deserialize() {
                rows.push(rec.map_err(|e: csv::Error| {
                    let line = e.position().map(|p| p.line() as usize);
                    // Name the column a value failed in, not its index.
                    let (field, msg) = match e.kind() {
                        csv::ErrorKind::Deserialize { err, .. } => {
                            (err.field().and_then(|f| header.get(f as usize)).map(String::from), err.kind().to_string())
                        }
                        _ => (None, e.to_string()),
                    };
                    Error::parse(Location { path: path.into(), line, field }, msg)
                })?);
            }
            Ok(ReportFile { rows, gate: None })
        }
        _ => Err(Error::parse(
            Location::line(path, 1),
            "not a validation report: write one with `dagsim validate ... --format csv` (or json)",
        )),
    }
}

/// One panel per metric in order of first appearance, one series per set; rows without a
/// measurement (reference rows) are left out. Rows marked known misses are hollow; an unmarked row
/// whose |error| exceeds `label_beyond` is labelled with its id (known misses are listed where
/// they are marked). Values must be positive (log axes).
pub fn scatter_panels(path: &Path, rows: &[ReportedRow], label_beyond: f64) -> Result<Vec<ScatterPanel>> {
    let mut panels: Vec<ScatterPanel> = Vec::new();
    let mut sets: Vec<&str> = Vec::new();
    for r in rows {
        let Some(measured) = r.measured else { continue };
        for (name, v) in [("measured", measured), ("predicted", r.predicted)] {
            if !(v.is_finite() && v > 0.0) {
                return Err(Error::parse(
                    Location::file(path).with_field(name),
                    format!("row `{}`: {v} cannot be drawn on a log axis (expected a positive number)", r.id),
                ));
            }
        }
        let title = match r.metric.as_str() {
            "iteration_time" => "iteration time".to_string(),
            "tokens_per_s_per_gpu" => "tokens/s per GPU".to_string(),
            m => m.to_string(),
        };
        let k = match panels.iter().position(|p| p.title == title && p.unit == r.unit) {
            Some(k) => k,
            None => {
                panels.push(ScatterPanel { title, unit: r.unit.clone(), series: Vec::new(), points: Vec::new() });
                panels.len() - 1
            }
        };
        let series = sets.iter().position(|s| *s == r.set).unwrap_or_else(|| {
            sets.push(&r.set);
            sets.len() - 1
        });
        let panel = &mut panels[k];
        if !panel.series.iter().any(|s| s.0 == series) {
            panel.series.push((series, r.set.clone()));
        }
        let error = (r.predicted - measured) / measured;
        let hollow = r.status.starts_with("known_miss");
        panel.points.push(ScatterPoint {
            measured,
            predicted: r.predicted,
            series,
            hollow,
            label: (!hollow && error.abs() > label_beyond).then(|| r.id.clone()),
        });
    }
    if panels.is_empty() {
        return Err(Error::parse(Location::file(path), "the report has no row with a measured value to plot"));
    }
    Ok(panels)
}
