//! The measurement-set format (`docs/validate.md`): a CSV file, one row per measurement, with the
//! setup it was taken under and the measured value. This file reads and checks it; it does not
//! simulate. Every error names the file, the line and the column.

use crate::error::{line_of_offset, Error, Location, Result};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// What a row measured. The unit column must agree with it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Metric {
    /// Samples (images) per second of the whole job.
    Throughput,
    /// Seconds per training iteration.
    IterationTime,
    /// Throughput over a baseline: the same setup on one GPU, or the row named in `relative_to`.
    Speedup,
    /// Tokens per second per GPU of a transformer under a `parallel` plan.
    TokensPerSPerGpu,
    /// Model FLOPs (no recomputation) per second per GPU of a transformer under a `parallel` plan,
    /// in TFLOP/s; the source's own FLOP count must be 6 per parameter per token plus attention.
    ModelTflopsPerGpu,
}

impl Metric {
    fn parse(s: &str) -> Option<Self> {
        match s {
            "throughput" => Some(Metric::Throughput),
            "iteration_time" => Some(Metric::IterationTime),
            "speedup" => Some(Metric::Speedup),
            "tokens_per_s_per_gpu" => Some(Metric::TokensPerSPerGpu),
            "model_tflops_per_gpu" => Some(Metric::ModelTflopsPerGpu),
            _ => None,
        }
    }

    /// Canonical unit the value is stored in.
    pub fn unit(self) -> &'static str {
        match self {
            Metric::Throughput => "samples/s",
            Metric::IterationTime => "s",
            Metric::Speedup => "x",
            Metric::TokensPerSPerGpu => "tokens/s/GPU",
            Metric::ModelTflopsPerGpu => "TFLOP/s",
        }
    }

    /// The sign that turns a row's relative error into optimism (positive: the model predicts
    /// faster training than measured): +1 for rates and speedups, -1 for times.
    pub fn optimism_sign(self) -> f64 {
        match self {
            Metric::IterationTime => -1.0,
            _ => 1.0,
        }
    }

    /// Whether only a transformer under a `parallel` plan has this metric.
    pub fn needs_plan(self) -> bool {
        matches!(self, Metric::TokensPerSPerGpu | Metric::ModelTflopsPerGpu)
    }

    /// Factor that converts `unit` into the canonical unit, if the unit fits this metric.
    fn unit_factor(self, unit: &str) -> Option<f64> {
        match (self, unit) {
            (Metric::Throughput, "samples/s" | "images/s" | "sequences/s") => Some(1.0),
            (Metric::IterationTime, "s") => Some(1.0),
            (Metric::IterationTime, "ms") => Some(1e-3),
            (Metric::Speedup, "x") => Some(1.0),
            (Metric::TokensPerSPerGpu, "tokens/s/GPU") => Some(1.0),
            (Metric::ModelTflopsPerGpu, "TFLOP/s") => Some(1.0),
            _ => None,
        }
    }

    fn units(self) -> &'static str {
        match self {
            Metric::Throughput => "samples/s, images/s, sequences/s",
            Metric::IterationTime => "s, ms",
            Metric::Speedup => "x",
            Metric::TokensPerSPerGpu => "tokens/s/GPU",
            Metric::ModelTflopsPerGpu => "TFLOP/s",
        }
    }
}

/// The setup columns of a row. Each overrides the row's scenario file (if any); paths are already
/// resolved against the directory of the CSV file.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct RowSetup {
    pub scenario: Option<PathBuf>,
    pub trace: Option<PathBuf>,
    pub model: Option<String>,
    pub gpu: Option<String>,
    pub precision: Option<String>,
    pub batch: Option<u32>,
    /// Bytes of one input sample as stored and copied; 0 for synthetic data made on the GPU.
    pub sample_bytes: Option<u64>,
    /// One measured single-GPU throughput (samples/s) that scales the workload's compute.
    pub calibrate_throughput: Option<f64>,
    /// Preset name, or a file path resolved against the CSV's directory.
    pub topology: Option<String>,
    pub gpus: Option<u32>,
    pub strategy: Option<String>,
    /// A parallel plan for a transformer `model` (`--parallel`), with its batches and sequence.
    pub parallel: Option<String>,
    pub micro_batch: Option<u32>,
    pub global_batch: Option<u32>,
    pub seq_len: Option<u32>,
    /// Layers the transformer is built with instead of its config's: a benchmark's proxy of the
    /// model with fewer layers (e.g. NVIDIA's DGX Cloud recipes on fewer GPUs).
    pub layers: Option<u32>,
    /// The NCCL release the measured run used, where its source says so: the NCCL collective
    /// model simulates the row with that version's tuner and constants (the ideal model ignores it).
    pub nccl: Option<crate::collective::nccl::version::NcclVersion>,
    /// `nccl` is `none`: the run's collectives were not NCCL's (Gloo, MPI), so the row keeps the
    /// ideal model whatever model the other rows run.
    pub not_nccl: bool,
}

/// One measurement.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Row {
    pub id: String,
    /// 1-based line in the file, for messages.
    pub line: usize,
    pub setup: RowSetup,
    pub metric: Metric,
    /// Measured value in the metric's canonical unit; `None` for a reference row (simulated so
    /// others can be relative to it, not scored).
    pub measured: Option<f64>,
    /// Spread of the measurement (standard deviation or half-range), canonical unit.
    pub spread: Option<f64>,
    /// Id of the row whose predicted and measured throughputs are the baseline of a speedup.
    pub relative_to: Option<String>,
    /// Rows of one group are the same setup under different strategies (ranked by Kendall tau).
    pub group: Option<String>,
    pub source: String,
    /// Why the model misses this row; present means the row may exceed `--max-error`.
    pub known_miss: Option<String>,
    pub note: Option<String>,
}

/// A measurement set: one CSV file.
#[derive(Debug, Clone)]
pub struct MeasurementSet {
    pub path: PathBuf,
    /// The file stem, used as the set's name in reports.
    pub name: String,
    pub rows: Vec<Row>,
}

/// Columns a measurement set may have. `id`, `metric`, `source` and (for scored rows) `measured`
/// are required.
pub const COLUMNS: &[&str] = &[
    "id",
    "scenario",
    "trace",
    "model",
    "gpu",
    "precision",
    "batch",
    "sample_bytes",
    "calibrate_throughput",
    "topology",
    "gpus",
    "strategy",
    "parallel",
    "micro_batch",
    "global_batch",
    "seq_len",
    "layers",
    "nccl",
    "metric",
    "unit",
    "measured",
    "spread",
    "relative_to",
    "group",
    "source",
    "known_miss",
    "note",
];

/// Reads and checks a measurement set.
pub fn read_measurements(path: &Path) -> Result<MeasurementSet> {
    let text = std::fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
    let base = path.parent().map(Path::to_path_buf).unwrap_or_default();
    let rows = parse_measurements(&text, path, &base)?;
    let name = path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
    Ok(MeasurementSet { path: path.to_path_buf(), name, rows })
}

/// Parses measurement-set text. `path` is only used in messages; relative paths in the rows are
/// resolved against `base`.
pub fn parse_measurements(text: &str, path: &Path, base: &Path) -> Result<Vec<Row>> {
    // Comment lines are dropped here rather than by the csv crate, which would not count them in
    // its positions; `lines` maps a line of `body` back to its line in the file.
    let (body, lines) = strip_comments(text);
    let line_at = |byte: u64| lines[line_of_offset(&body, byte as usize) - 1];
    let mut reader = csv::ReaderBuilder::new().trim(csv::Trim::All).flexible(false).from_reader(body.as_bytes());
    let headers = reader.headers().map_err(|e| csv_error(&line_at, path, &e))?.clone();
    let header_line = lines.first().copied().unwrap_or(1);
    let mut col: HashMap<&str, usize> = HashMap::new();
    for (i, h) in headers.iter().enumerate() {
        let at = || Location::line(path, header_line).with_field(h.to_string());
        if !COLUMNS.contains(&h) {
            return Err(Error::parse(at(), format!("unknown column (known: {})", COLUMNS.join(", "))));
        }
        if col.insert(h, i).is_some() {
            return Err(Error::parse(at(), "column appears twice"));
        }
    }
    for required in ["id", "metric", "measured", "source"] {
        if !col.contains_key(required) {
            return Err(Error::parse(
                Location::line(path, header_line),
                format!("missing required column `{required}`"),
            ));
        }
    }

    let mut rows: Vec<Row> = Vec::new();
    let mut ids: HashMap<String, usize> = HashMap::new();
    for record in reader.records() {
        let record = record.map_err(|e| csv_error(&line_at, path, &e))?;
        let line = record.position().map_or(0, |p| line_at(p.byte()));
        let cell =
            |name: &str| -> Option<&str> { col.get(name).and_then(|&i| record.get(i)).filter(|s| !s.is_empty()) };
        let at = |field: &str| Location::line(path, line).with_field(field);
        let required = |name: &str| cell(name).ok_or_else(|| Error::parse(at(name), "must not be empty"));
        let number = |name: &str| -> Result<Option<f64>> {
            cell(name)
                .map(|s| {
                    s.parse::<f64>()
                        .ok()
                        .filter(|v| v.is_finite() && *v >= 0.0)
                        .ok_or_else(|| Error::parse(at(name), format!("`{s}` is not a non-negative number")))
                })
                .transpose()
        };
        let count = |name: &str| -> Result<Option<u32>> {
            cell(name)
                .map(|s| {
                    s.parse::<u32>()
                        .ok()
                        .filter(|&v| v > 0)
                        .ok_or_else(|| Error::parse(at(name), format!("`{s}` is not a positive whole number")))
                })
                .transpose()
        };
        let file = |name: &str| cell(name).map(|s| resolve(base, s));
        let bytes = |name: &str| -> Result<Option<u64>> {
            cell(name)
                .map(|s| {
                    s.parse::<u64>()
                        .map_err(|_| Error::parse(at(name), format!("`{s}` is not a whole number of bytes")))
                })
                .transpose()
        };

        let id = required("id")?.to_string();
        if let Some(first) = ids.insert(id.clone(), line) {
            return Err(Error::parse(at("id"), format!("id `{id}` is already used on line {first}")));
        }
        let metric_name = required("metric")?;
        let metric = Metric::parse(metric_name).ok_or_else(|| {
            Error::parse(
                at("metric"),
                format!(
                    "unknown metric `{metric_name}` (known: throughput, iteration_time, speedup, \
                     tokens_per_s_per_gpu, model_tflops_per_gpu)"
                ),
            )
        })?;
        let unit = cell("unit").unwrap_or(metric.unit());
        let factor = metric.unit_factor(unit).ok_or_else(|| {
            Error::parse(at("unit"), format!("`{unit}` is not a unit of {metric_name} (use {})", metric.units()))
        })?;
        let measured = number("measured")?.map(|v| v * factor);
        if measured == Some(0.0) {
            return Err(Error::parse(at("measured"), "must be positive (errors are relative to it)"));
        }
        let spread = number("spread")?.map(|v| v * factor);
        if spread.is_some() && measured.is_none() {
            return Err(Error::parse(at("spread"), "given without a measured value"));
        }
        let calibrate_throughput = number("calibrate_throughput")?;
        if calibrate_throughput == Some(0.0) {
            return Err(Error::parse(at("calibrate_throughput"), "must be positive"));
        }
        let topology = cell("topology").map(|t| resolve_topology(base, t));
        let setup = RowSetup {
            scenario: file("scenario"),
            trace: file("trace"),
            // A transformer's config.json sits next to the CSV like the other files.
            model: cell("model").map(|m| match m.ends_with(".json") {
                true => std::path::absolute(resolve(base, m))
                    .unwrap_or_else(|_| resolve(base, m))
                    .to_string_lossy()
                    .into_owned(),
                false => m.to_string(),
            }),
            gpu: cell("gpu").map(str::to_string),
            precision: cell("precision").map(str::to_string),
            batch: count("batch")?,
            sample_bytes: bytes("sample_bytes")?,
            calibrate_throughput,
            topology,
            gpus: count("gpus")?,
            strategy: cell("strategy").map(str::to_string),
            parallel: cell("parallel").map(str::to_string),
            micro_batch: count("micro_batch")?,
            global_batch: count("global_batch")?,
            seq_len: count("seq_len")?,
            layers: count("layers")?,
            not_nccl: cell("nccl") == Some("none"),
            nccl: cell("nccl")
                .filter(|&v| v != "none")
                .map(|v| {
                    crate::collective::nccl::version::NcclVersion::parse(v).ok_or_else(|| {
                        Error::parse(
                            at("nccl"),
                            format!(
                                "NCCL version `{v}` is not known (known: {}; `none` for a run without NCCL)",
                                crate::collective::nccl::version::NcclVersion::names()
                            ),
                        )
                    })
                })
                .transpose()?,
        };
        if setup.parallel.is_none() {
            if metric.needs_plan() {
                return Err(Error::parse(at("metric"), format!("`{metric_name}` needs a `parallel` plan")));
            }
            for c in ["micro_batch", "global_batch", "seq_len", "layers"] {
                if cell(c).is_some() {
                    return Err(Error::parse(at(c), "only a row with a `parallel` plan takes it"));
                }
            }
        } else if metric == Metric::Speedup {
            return Err(Error::parse(at("metric"), "a `parallel` plan runs on one GPU count: no speedup"));
        }
        if setup.scenario.is_none() && setup.trace.is_none() && setup.model.is_none() {
            return Err(Error::parse(
                Location::line(path, line),
                "the row names no workload: give `scenario`, `trace` or `model`",
            ));
        }
        let relative_to = cell("relative_to").map(str::to_string);
        if relative_to.is_some() && metric != Metric::Speedup {
            return Err(Error::parse(at("relative_to"), "only a speedup is relative to another row"));
        }
        let known_miss = cell("known_miss").map(str::to_string);
        if known_miss.is_some() && measured.is_none() {
            return Err(Error::parse(at("known_miss"), "a reference row (no measured value) cannot miss"));
        }
        rows.push(Row {
            id,
            line,
            setup,
            metric,
            measured,
            spread,
            relative_to,
            group: cell("group").map(str::to_string),
            source: required("source")?.to_string(),
            known_miss,
            note: cell("note").map(str::to_string),
        });
    }
    if rows.is_empty() {
        return Err(Error::parse(Location::file(path), "no measurement rows"));
    }
    for row in &rows {
        if let Some(r) = &row.relative_to {
            if r == &row.id {
                return Err(Error::parse(
                    Location::line(path, row.line).with_field("relative_to"),
                    "a row cannot be relative to itself",
                ));
            }
            if !ids.contains_key(r) {
                return Err(Error::parse(
                    Location::line(path, row.line).with_field("relative_to"),
                    format!("no row with id `{r}` in this file"),
                ));
            }
        }
    }
    Ok(rows)
}

fn resolve(base: &Path, p: &str) -> PathBuf {
    let p = Path::new(p);
    if p.is_absolute() {
        p.to_path_buf()
    } else {
        base.join(p)
    }
}

/// A topology cell is a preset name unless a file of that name exists next to the CSV.
fn resolve_topology(base: &Path, t: &str) -> String {
    let candidate = resolve(base, t);
    if candidate.is_file() {
        candidate.to_string_lossy().into_owned()
    } else {
        t.to_string()
    }
}

/// The text without `#` comment lines, and the file line of each line kept.
fn strip_comments(text: &str) -> (String, Vec<usize>) {
    let mut body = String::with_capacity(text.len());
    let mut lines = Vec::new();
    for (i, l) in text.lines().enumerate() {
        if !l.trim_start().starts_with('#') {
            body.push_str(l);
            body.push('\n');
            lines.push(i + 1);
        }
    }
    lines.push(text.lines().count() + 1); // end of input
    (body, lines)
}

fn csv_error(line_at: &dyn Fn(u64) -> usize, path: &Path, e: &csv::Error) -> Error {
    let line = e.position().map(|p| line_at(p.byte()));
    let msg = match e.kind() {
        csv::ErrorKind::UnequalLengths { expected_len, len, .. } => {
            format!("row has {len} fields, the header has {expected_len}")
        }
        _ => e.to_string(),
    };
    Error::parse(Location { path: path.into(), line, field: None }, msg)
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEADER: &str = "id,trace,gpus,strategy,metric,unit,measured,spread,relative_to,group,source,known_miss\n";

    fn parse(body: &str) -> Result<Vec<Row>> {
        parse_measurements(&format!("{HEADER}{body}"), Path::new("set.csv"), Path::new("/data"))
    }

    #[test]
    fn reads_rows_converts_units_and_resolves_paths() {
        let rows = parse(
            "# a comment\n\
             a,t.csv,8,io,iteration_time,ms,250,5,,g,paper,\n\
             b,/abs/t.csv,8,none,speedup,,3.5,,a,g,paper,comm is slower than modelled\n",
        )
        .unwrap();
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[0].line, 3);
        assert_eq!(rows[0].metric, Metric::IterationTime);
        assert_eq!(rows[0].measured, Some(0.25));
        assert_eq!(rows[0].spread, Some(0.005));
        assert_eq!(rows[0].setup.trace.as_deref(), Some(Path::new("/data/t.csv")));
        assert_eq!(rows[1].setup.trace.as_deref(), Some(Path::new("/abs/t.csv")));
        assert_eq!(rows[1].relative_to.as_deref(), Some("a"));
        assert_eq!(rows[1].known_miss.as_deref(), Some("comm is slower than modelled"));
        assert_eq!(rows[0].setup.gpus, Some(8));
    }

    /// A row names the NCCL release its run used; an unknown one is an error naming the field.
    #[test]
    fn nccl_column_takes_a_known_version() {
        let text =
            "id,trace,metric,measured,source,nccl\na,t.csv,throughput,3,paper,2.3.7\nb,t.csv,throughput,3,paper,\n";
        let rows = parse_measurements(text, Path::new("set.csv"), Path::new("")).unwrap();
        assert_eq!(rows[0].setup.nccl, Some(crate::collective::nccl::version::NcclVersion::V2_3_7));
        assert_eq!(rows[1].setup.nccl, None);
        let gloo = "id,trace,metric,measured,source,nccl\na,t.csv,throughput,3,paper,none\n";
        let rows = parse_measurements(gloo, Path::new("set.csv"), Path::new("")).unwrap();
        assert!(rows[0].setup.not_nccl && rows[0].setup.nccl.is_none());
        let bad = "id,trace,metric,measured,source,nccl\na,t.csv,throughput,3,paper,2.2.13\n";
        let e = parse_measurements(bad, Path::new("set.csv"), Path::new("")).unwrap_err().to_string();
        assert!(e.contains("set.csv:2 (field `nccl`)") && e.contains("2.2.13") && e.contains("2.3.7"), "{e}");
    }

    /// A proxy config's layer count is read for plan rows and refused without a plan.
    #[test]
    fn layers_column_builds_a_proxy_of_a_plan_row() {
        let head = "id,model,gpus,parallel,layers,metric,measured,source\n";
        let text = format!("{head}a,llama3-405b,32,\"tp=8,cp=2,dp=2\",7,iteration_time,9,src\n");
        let rows = parse_measurements(&text, Path::new("set.csv"), Path::new("")).unwrap();
        assert_eq!(rows[0].setup.layers, Some(7));
        let no_plan = format!("{head}a,llama3-405b,32,,7,iteration_time,9,src\n");
        let e = parse_measurements(&no_plan, Path::new("set.csv"), Path::new("")).unwrap_err().to_string();
        assert!(e.contains("set.csv:2 (field `layers`)") && e.contains("parallel"), "{e}");
        let zero = format!("{head}a,llama3-405b,32,\"tp=8,cp=2,dp=2\",0,iteration_time,9,src\n");
        let e = parse_measurements(&zero, Path::new("set.csv"), Path::new("")).unwrap_err().to_string();
        assert!(e.contains("(field `layers`)") && e.contains("positive whole number"), "{e}");
    }

    fn err(body: &str) -> String {
        parse(body).unwrap_err().to_string()
    }

    #[test]
    fn errors_name_file_line_and_column() {
        let e = err("a,t.csv,8,io,throughput,s,1,,,,paper,\n");
        assert!(e.starts_with("set.csv:2 (field `unit`)"), "{e}");
        let e = err("a,t.csv,zero,io,throughput,,1,,,,paper,\n");
        assert!(e.contains("set.csv:2 (field `gpus`)") && e.contains("positive whole number"), "{e}");
        let e = err("a,t.csv,8,io,throughput,,-3,,,,paper,\n");
        assert!(e.contains("(field `measured`)"), "{e}");
        let e = err("a,t.csv,8,io,speed,,3,,,,paper,\n");
        assert!(e.contains("unknown metric `speed`"), "{e}");
        let e = err("a,t.csv,8,io,throughput,,3,,,,,\n");
        assert!(e.contains("(field `source`)"), "{e}");
        let e = err("a,t.csv,8,io,throughput,,3,,,,paper,\na,t.csv,8,io,throughput,,3,,,,paper,\n");
        assert!(e.contains("set.csv:3") && e.contains("already used on line 2"), "{e}");
        let e = err("a,t.csv,8,io,speedup,,3,,b,,paper,\n");
        assert!(e.contains("no row with id `b`"), "{e}");
        let e = err("a,,8,io,speedup,,3,,,,paper,\n");
        assert!(e.contains("names no workload"), "{e}");
        let e = err("a,t.csv,8,io,throughput,,3,,,,paper\n");
        assert!(e.contains("set.csv:2") && e.contains("11 fields, the header has 12"), "{e}");
        let e = err("a,t.csv,8,io,throughput,,,,,,paper,too slow\n");
        assert!(e.contains("reference row"), "{e}");
        let e = parse_measurements("id,metric,measured,source,colour\n", Path::new("x.csv"), Path::new(""))
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("x.csv:1 (field `colour`): unknown column"), "{e}");
        let e = parse_measurements("id,metric,source\n", Path::new("x.csv"), Path::new("")).unwrap_err().to_string();
        assert!(e.contains("missing required column `measured`"), "{e}");
        let e = parse_measurements(HEADER, Path::new("x.csv"), Path::new("")).unwrap_err().to_string();
        assert!(e.contains("no measurement rows"), "{e}");
    }
}
