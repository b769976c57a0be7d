//! Validation against measurements: reads measurement sets ([`format`]), predicts every row through
//! the normal pipeline ([`run`]), and compares (relative errors, their summary per set and overall,
//! Kendall's tau of strategies measured on the same setup; [`stats`]), then applies the gate
//! (`--tolerance` on the mean absolute error, `--max-error` on any row not marked as a known miss).
//! Produces a [`Report`]; printing and exit codes belong to the CLI. Must not tune anything to the
//! measurements: a row's inputs are its setup columns only, never its measured value.

pub mod baseline;
pub mod format;
mod output;
pub mod run;
pub mod scatter;
pub mod stats;

pub use baseline::Baseline;
pub use format::{read_measurements, MeasurementSet, Metric, Row};
pub use output::{write_csv, write_json, write_text};

use crate::collective::CollectiveModel;
use crate::error::Result;
use serde::Serialize;
use stats::{kendall_tau_b, relative_error, summarize, ErrorSummary};
use std::path::Path;

/// The gate's thresholds, as fractions (0.10 = 10%).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, serde::Deserialize)]
pub struct Gate {
    /// Largest allowed mean absolute relative error over the scored rows not marked `known_miss`.
    pub tolerance: f64,
    /// Largest allowed absolute relative error of any row not marked as a known miss.
    pub max_error: f64,
}

impl Default for Gate {
    fn default() -> Self {
        Gate { tolerance: 0.10, max_error: 0.25 }
    }
}

/// How a row came out against the gate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// Within `max_error`.
    Ok,
    /// Beyond `max_error` and not marked: fails the gate.
    Miss,
    /// Beyond `max_error`, marked `known_miss` with a reason.
    KnownMiss,
    /// Marked `known_miss` but now within `max_error`: the mark could go.
    KnownMissNowOk,
    /// No measured value; simulated as a baseline for other rows.
    Reference,
}

/// One row, predicted and compared.
#[derive(Debug, Clone, Serialize)]
pub struct RowResult {
    pub set: String,
    pub id: String,
    pub line: usize,
    pub workload: String,
    pub topology: String,
    pub gpus: u32,
    pub strategy: String,
    pub metric: Metric,
    pub unit: &'static str,
    pub measured: Option<f64>,
    pub spread: Option<f64>,
    pub predicted: f64,
    /// (predicted - measured) / measured.
    pub error: Option<f64>,
    /// The same metric under the baseline model (`--baseline`), and its error (empty without
    /// one; always present so that CSV rows keep their columns).
    pub baseline: Option<f64>,
    pub baseline_error: Option<f64>,
    /// Why the baseline asked for has no value on this row (empty when it has one, or none was
    /// asked for).
    pub baseline_missing: Option<String>,
    /// The prediction lies within measured +- spread.
    pub within_spread: Option<bool>,
    pub status: Status,
    pub group: Option<String>,
    pub known_miss: Option<String>,
    pub source: String,
    /// How the collectives ran in the row's simulation (model, and per operation what it chose).
    pub collectives: String,
}

/// Error summary of one set (or of all sets together).
#[derive(Debug, Clone, Serialize)]
pub struct SetSummary {
    pub set: String,
    /// Scored rows (reference rows excluded; `scored_rows`: `rows` is the report's list of rows).
    #[serde(rename = "scored_rows")]
    pub rows: usize,
    pub known_misses: usize,
    /// Mean |error| over all scored rows, known misses included.
    pub mean_abs_error: f64,
    /// Mean |error| over the scored rows not marked `known_miss`: what `--tolerance` gates.
    pub mean_abs_error_unmarked: Option<f64>,
    pub median_abs_error: f64,
    pub worst_abs_error: f64,
    pub worst_row: String,
    /// Mean optimism: each row's error signed so that positive means the model predicts faster
    /// training than measured (a rate too high or a time too short), averaged.
    pub mean_signed_error: f64,
    /// With `--baseline`: the baseline's mean |error| over the rows it predicts, and dagsim's
    /// over the same rows.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub baseline_mean_abs_error: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mean_abs_error_baseline_rows: Option<f64>,
}

/// Rank agreement of the rows of one group (same setup, different strategies).
#[derive(Debug, Clone, Serialize)]
pub struct GroupResult {
    pub set: String,
    pub group: String,
    #[serde(rename = "scored_rows")]
    pub rows: usize,
    pub concordant: u64,
    pub discordant: u64,
    pub kendall_tau_b: Option<f64>,
}

/// Everything `dagsim validate` reports.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub dagsim_version: &'static str,
    pub gate: Gate,
    /// The baseline model compared against, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub baseline: Option<Baseline>,
    pub rows: Vec<RowResult>,
    pub sets: Vec<SetSummary>,
    pub overall: Option<SetSummary>,
    pub groups: Vec<GroupResult>,
    /// Concordant and discordant strategy pairs over all groups.
    pub rank_concordant: u64,
    pub rank_discordant: u64,
    pub passed: bool,
    /// Why the gate failed (empty when it passed).
    pub failures: Vec<String>,
}

/// Reads, predicts and compares the given measurement files (and, with `baseline`, the same rows
/// under the baseline model: the gate then also fails where the baseline is closer on a set).
pub fn validate_files(paths: &[&Path], gate: Gate, baseline: Option<Baseline>) -> Result<Report> {
    validate_files_with(paths, gate, baseline, MachineOverrides::default())
}

/// What the command line sets on every row's machine (else each row's own).
#[derive(Debug, Clone, Copy, Default)]
pub struct MachineOverrides {
    /// The collective model (`--collective-model`, `--nccl-*`).
    pub collectives: Option<CollectiveModel>,
    /// How railless transfers between nodes pick their NICs (`--nic-route`).
    pub nic_route: Option<crate::hw::NicRoute>,
    /// Whether collectives in flight slow the compute beside them (`--compute-contention`).
    pub compute_contention: Option<crate::hw::ComputeContention>,
}

/// [`validate_files`] with every row's machine under `overrides`.
pub fn validate_files_with(
    paths: &[&Path],
    gate: Gate,
    baseline: Option<Baseline>,
    overrides: MachineOverrides,
) -> Result<Report> {
    let sets = paths.iter().map(|p| read_measurements(p)).collect::<Result<Vec<_>>>()?;
    validate_sets_with(&sets, gate, baseline, overrides)
}

/// Predicts and compares already-read sets.
pub fn validate_sets(sets: &[MeasurementSet], gate: Gate, baseline: Option<Baseline>) -> Result<Report> {
    validate_sets_with(sets, gate, baseline, MachineOverrides::default())
}

/// [`validate_sets`] with every row's machine under `overrides`.
pub fn validate_sets_with(
    sets: &[MeasurementSet],
    gate: Gate,
    baseline: Option<Baseline>,
    overrides: MachineOverrides,
) -> Result<Report> {
    let predicted = run::predict_rows_with(sets, baseline, overrides)?;
    let mut rows = Vec::new();
    for (set, preds) in sets.iter().zip(predicted) {
        for (row, p) in set.rows.iter().zip(preds) {
            rows.push(compare(&set.name, row, p, gate));
        }
    }
    Ok(assemble(sets, rows, gate, baseline))
}

fn compare(set: &str, row: &Row, p: run::Predicted, gate: Gate) -> RowResult {
    let error = row.measured.map(|m| relative_error(p.value, m));
    let status = match (error, &row.known_miss) {
        (None, _) => Status::Reference,
        (Some(e), None) if e.abs() <= gate.max_error => Status::Ok,
        (Some(_), None) => Status::Miss,
        (Some(e), Some(_)) if e.abs() <= gate.max_error => Status::KnownMissNowOk,
        (Some(_), Some(_)) => Status::KnownMiss,
    };
    let baseline_error = row.measured.zip(p.baseline).map(|(m, b)| relative_error(b, m));
    let within_spread = match (row.measured, row.spread) {
        (Some(m), Some(s)) => Some((p.value - m).abs() <= s),
        _ => None,
    };
    RowResult {
        set: set.to_string(),
        id: row.id.clone(),
        line: row.line,
        workload: p.simulated.workload,
        topology: p.simulated.topology,
        gpus: p.simulated.gpus,
        strategy: p.simulated.strategy,
        metric: row.metric,
        unit: row.metric.unit(),
        measured: row.measured,
        spread: row.spread,
        predicted: p.value,
        error,
        baseline: p.baseline,
        baseline_error,
        baseline_missing: p.baseline_missing,
        within_spread,
        status,
        group: row.group.clone(),
        known_miss: row.known_miss.clone(),
        source: row.source.clone(),
        collectives: p.simulated.collectives,
    }
}

fn summary(name: &str, rows: &[&RowResult]) -> Option<SetSummary> {
    let scored: Vec<&&RowResult> = rows.iter().filter(|r| r.error.is_some()).collect();
    let errors: Vec<f64> = scored.iter().filter_map(|r| r.error).collect();
    let s: ErrorSummary = summarize(&errors)?;
    let unmarked: Vec<f64> = scored.iter().filter(|r| r.known_miss.is_none()).filter_map(|r| r.error).collect();
    let worst = scored[s.worst_index];
    // The bias is reported as optimism whatever the metric: a time predicted too short and a rate
    // predicted too high both count positive, so sets of times and of rates average meaningfully.
    let optimism: Vec<f64> = scored.iter().filter_map(|r| r.error.map(|e| e * r.metric.optimism_sign())).collect();
    let with_baseline: Vec<&RowResult> = scored.iter().map(|r| **r).filter(|r| r.baseline_error.is_some()).collect();
    let mean_abs = |f: &dyn Fn(&RowResult) -> Option<f64>| -> Option<f64> {
        let v: Vec<f64> = with_baseline.iter().filter_map(|r| f(r)).map(f64::abs).collect();
        (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
    };
    Some(SetSummary {
        baseline_mean_abs_error: mean_abs(&|r| r.baseline_error),
        mean_abs_error_baseline_rows: mean_abs(&|r| r.error),
        set: name.to_string(),
        rows: s.rows,
        known_misses: scored.iter().filter(|r| r.known_miss.is_some()).count(),
        mean_abs_error: s.mean_abs,
        mean_abs_error_unmarked: summarize(&unmarked).map(|u| u.mean_abs),
        median_abs_error: s.median_abs,
        worst_abs_error: s.worst_abs,
        worst_row: format!("{}/{}", worst.set, worst.id),
        mean_signed_error: optimism.iter().sum::<f64>() / optimism.len() as f64,
    })
}

fn assemble(sets: &[MeasurementSet], rows: Vec<RowResult>, gate: Gate, baseline: Option<Baseline>) -> Report {
    let mut set_summaries = Vec::new();
    let mut groups = Vec::new();
    for set in sets {
        let mine: Vec<&RowResult> = rows.iter().filter(|r| r.set == set.name).collect();
        set_summaries.extend(summary(&set.name, &mine));
        // Groups in order of first appearance.
        let mut names: Vec<&str> = Vec::new();
        for r in &mine {
            if let Some(g) = r.group.as_deref().filter(|g| !names.contains(g)) {
                names.push(g);
            }
        }
        for g in names {
            let members: Vec<&&RowResult> =
                mine.iter().filter(|r| r.group.as_deref() == Some(g) && r.measured.is_some()).collect();
            if members.len() < 2 {
                continue;
            }
            let measured: Vec<f64> = members.iter().map(|r| r.measured.expect("filtered")).collect();
            let predicted: Vec<f64> = members.iter().map(|r| r.predicted).collect();
            let agreement = kendall_tau_b(&measured, &predicted);
            groups.push(GroupResult {
                set: set.name.clone(),
                group: g.to_string(),
                rows: members.len(),
                concordant: agreement.concordant,
                discordant: agreement.discordant,
                kendall_tau_b: agreement.tau_b,
            });
        }
    }
    let all: Vec<&RowResult> = rows.iter().collect();
    let overall = summary("all", &all);
    let mut failures = Vec::new();
    if let Some(mean) = overall.as_ref().and_then(|o| o.mean_abs_error_unmarked) {
        if mean > gate.tolerance {
            failures.push(format!(
                "mean absolute error {:.1}% of the rows not marked known_miss exceeds the tolerance {:.1}%",
                mean * 100.0,
                gate.tolerance * 100.0
            ));
        }
    }
    if let Some(b) = baseline {
        for s in &set_summaries {
            if let (Some(base), Some(own)) = (s.baseline_mean_abs_error, s.mean_abs_error_baseline_rows) {
                if base < own {
                    failures.push(format!(
                        "set {}: the {} baseline is closer to the measurements (mean |error| {:.1}%) than dagsim ({:.1}%)",
                        s.set,
                        b.name(),
                        base * 100.0,
                        own * 100.0
                    ));
                }
            }
        }
    }
    for r in rows.iter().filter(|r| r.status == Status::Miss) {
        failures.push(format!(
            "{}/{} (line {}): error {:+.1}% exceeds --max-error {:.1}% and is not marked known_miss",
            r.set,
            r.id,
            r.line,
            r.error.unwrap_or(0.0) * 100.0,
            gate.max_error * 100.0
        ));
    }
    Report {
        dagsim_version: env!("CARGO_PKG_VERSION"),
        gate,
        baseline,
        rank_concordant: groups.iter().map(|g| g.concordant).sum(),
        rank_discordant: groups.iter().map(|g| g.discordant).sum(),
        rows,
        sets: set_summaries,
        overall,
        groups,
        passed: failures.is_empty(),
        failures,
    }
}
