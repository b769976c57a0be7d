//! Readers for layer-wise traces.
//!
//! Two formats, told apart by the first non-comment line:
//!
//! * **Native CSV** (documented in `traces/README.md`): `# key: value` metadata lines, then a header
//!   row naming at least `name,forward_us,backward_us,grad_bytes` (optional `layer`, `comm_us`,
//!   `iteration`, and `forward_util,backward_util`: the fraction of the GPU the layer's kernels
//!   keep busy alone, as synthesis derives it; `forward_memory,backward_memory`: the share of the
//!   layer's time that is memory-bound, in [0, 1], as synthesis derives it; `grad_tensors`: the layer's gradient tensors in bytes
//!   separated by `;`, summing to `grad_bytes`), then one row per layer per iteration. Without
//!   `grad_tensors` each learnable layer counts as one tensor.
//! * **Shi et al. table** (the DAG paper's Table VI and its published trace files): whitespace-,
//!   tab- or comma-separated `id name forward backward comm size`, times in microseconds, sizes in
//!   bytes, optional header line; a file may hold many iterations, each restarting at the first id.
//!
//! Both are summarised per layer as mean and spread over the iterations in the file.

use super::{KernelUtil, Layer, MemoryShare, Stat, Workload};
use crate::error::{Error, Location, Result};
use crate::units::us_to_ns;
use std::path::Path;

/// Which reader to use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TraceFormat {
    /// Pick by content (a header row with `forward_us` means native CSV).
    Auto,
    Native,
    ShiTable,
}

/// One layer of one iteration, before summarising.
struct Row {
    line: usize,
    id: Option<i64>,
    iteration: Option<u32>,
    name: String,
    forward_us: f64,
    backward_us: f64,
    comm_us: f64,
    grad_bytes: u64,
    /// Forward and backward utilisation alone, when the trace has those columns.
    util: Option<(f64, f64)>,
    /// Forward and backward memory-bound shares, when the trace has those columns.
    memory: Option<(f64, f64)>,
    /// The layer's gradient tensors in bytes, when the trace lists them.
    tensors: Vec<u64>,
}

/// Values from `# key: value` lines of a native trace.
#[derive(Default)]
struct Meta {
    name: Option<String>,
    batch_per_gpu: Option<u32>,
    sample_bytes: Option<u64>,
    device_sample_bytes: Option<u64>,
    update_us: Option<f64>,
    fp16: bool,
}

/// Reads a trace file into a [`Workload`]. A field the file does not give (batch size, sample
/// bytes) is left at 0 for the caller to fill in from the command line or scenario.
pub fn read_trace(path: &Path, format: TraceFormat) -> Result<Workload> {
    let text = super::import::read_text(path)?;
    read_trace_str(&text, path, format)
}

/// Same as [`read_trace`] on text already in memory; `path` is used for names and messages.
pub fn read_trace_str(text: &str, path: &Path, format: TraceFormat) -> Result<Workload> {
    // A byte-order mark (spreadsheets write one) is not part of the first header name.
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let format = match format {
        TraceFormat::Auto => detect(text, path)?,
        f => f,
    };
    let (meta, rows) = match format {
        TraceFormat::Native => parse_native(text, path)?,
        _ => (Meta::default(), parse_shi(text, path)?),
    };
    if rows.is_empty() {
        return Err(Error::parse(Location::file(path), "the trace holds no layer rows"));
    }
    summarise(rows, meta, path)
}

/// What the first line that is not a comment must look like, per format (for error messages).
pub const EXPECTED_HEADERS: &str = "a native trace's header names name,forward_us,backward_us,grad_bytes (optional \
     layer, comm_us, iteration, forward_util, backward_util); a Table VI trace starts with a header such as \
     `Id Name Forward Backward Comm Size` or directly with a row `1 conv1 <forward_us> <backward_us> <comm_us> <bytes>`";

/// Picks the format by the first line that is not a comment: a header naming `forward_us` is
/// native; a row starting with a layer id, or a header naming id, forward and backward, is a Table
/// VI trace. Anything else is refused rather than guessed.
fn detect(text: &str, path: &Path) -> Result<TraceFormat> {
    let Some((i, first)) = text.lines().map(str::trim).enumerate().find(|(_, l)| !l.is_empty() && !l.starts_with('#'))
    else {
        return Ok(TraceFormat::ShiTable); // nothing to read: the caller reports "no layer rows"
    };
    let lower = first.to_ascii_lowercase();
    let words: Vec<&str> = lower.split(|c: char| c.is_whitespace() || c == ',').filter(|s| !s.is_empty()).collect();
    if words.contains(&"forward_us") {
        return Ok(TraceFormat::Native);
    }
    let shi_header = words.first().is_some_and(|w| w.trim_end_matches('.') == "id")
        && words.iter().any(|w| w.starts_with("forward"))
        && words.iter().any(|w| w.starts_with("backward"));
    if shi_header || words.first().is_some_and(|w| w.parse::<i64>().is_ok()) {
        return Ok(TraceFormat::ShiTable);
    }
    let shown: String = first.chars().take(80).collect();
    Err(Error::parse(
        Location::line(path, i + 1),
        format!("unknown header `{shown}`: {EXPECTED_HEADERS}; or give --profile-format for a profiler's output"),
    ))
}

fn parse_meta(text: &str, path: &Path) -> Result<Meta> {
    let mut meta = Meta::default();
    for (i, raw) in text.lines().enumerate() {
        let line = raw.trim();
        let Some(body) = line.strip_prefix('#') else { continue };
        let Some((key, value)) = body.split_once(':') else { continue };
        let (key, value) = (key.trim(), value.trim());
        let at = || Location::line(path, i + 1).with_field(key.to_string());
        let bytes = |v: &str| -> Result<u64> { crate::units::parse_bytes(v).map_err(|m| Error::parse(at(), m)) };
        let int = |v: &str| -> Result<u64> {
            parse_count(v).ok_or_else(|| Error::parse(at(), format!("expected a non-negative integer, found `{v}`")))
        };
        match key {
            "model" | "name" => meta.name = Some(value.to_string()),
            "batch_per_gpu" | "batch" => {
                let b = int(value)?;
                meta.batch_per_gpu = Some(u32::try_from(b).map_err(|_| Error::parse(at(), "batch size too large"))?);
            }
            "sample_bytes" => meta.sample_bytes = Some(bytes(value)?),
            "device_sample_bytes" => meta.device_sample_bytes = Some(bytes(value)?),
            "update_us" => meta.update_us = Some(parse_time(value).map_err(|m| Error::parse(at(), m))?),
            "precision" => {
                meta.fp16 = match value {
                    "fp16" => true,
                    "fp32" => false,
                    other => return Err(Error::parse(at(), format!("precision must be fp32 or fp16, not `{other}`"))),
                }
            }
            _ => {} // other comment lines (source, units, notes) are for people
        }
    }
    Ok(meta)
}

fn parse_native(text: &str, path: &Path) -> Result<(Meta, Vec<Row>)> {
    let meta = parse_meta(text, path)?;
    let mut reader =
        csv::ReaderBuilder::new().comment(Some(b'#')).trim(csv::Trim::All).flexible(true).from_reader(text.as_bytes());
    let headers = reader
        .headers()
        .map_err(|e| Error::parse(Location::file(path), format!("cannot read the header row: {e}")))?
        .clone();
    let header_line = reader.position().line() as usize;
    let col = |name: &str| headers.iter().position(|h| h.eq_ignore_ascii_case(name));
    let need = |name: &str| {
        col(name).ok_or_else(|| {
            Error::parse(
                Location::line(path, header_line.max(1)),
                format!(
                    "missing column `{name}`; a native trace needs name,forward_us,backward_us,grad_bytes \
                     (found: {})",
                    headers.iter().collect::<Vec<_>>().join(",")
                ),
            )
        })
    };
    let (c_name, c_fwd, c_bwd, c_bytes) =
        (need("name")?, need("forward_us")?, need("backward_us")?, need("grad_bytes")?);
    let (c_id, c_comm, c_iter) = (col("layer"), col("comm_us"), col("iteration"));
    let c_util = col("forward_util").zip(col("backward_util"));
    let c_memory = col("forward_memory").zip(col("backward_memory"));
    let c_tensors = col("grad_tensors");

    let mut rows = Vec::new();
    for record in reader.records() {
        let record = record.map_err(|e| {
            let line = e.position().map(|p| p.line() as usize).unwrap_or(0);
            Error::parse(Location::line(path, line), format!("malformed CSV row: {e}"))
        })?;
        let line = record.position().map(|p| p.line() as usize).unwrap_or(0);
        if record.iter().all(|f| f.is_empty()) {
            continue;
        }
        if record.len() != headers.len() {
            return Err(Error::parse(
                Location::line(path, line),
                format!("expected {} fields as in the header, found {}", headers.len(), record.len()),
            ));
        }
        let field = |c: usize, name: &str| -> (String, Location) {
            (record[c].to_string(), Location::line(path, line).with_field(name.to_string()))
        };
        let time = |c: usize, name: &str| -> Result<f64> {
            let (v, at) = field(c, name);
            parse_time(&v).map_err(|m| Error::parse(at, m))
        };
        let id = match c_id {
            Some(c) => {
                let (v, at) = field(c, "layer");
                Some(
                    v.parse::<i64>()
                        .map_err(|_| Error::parse(at, format!("expected an integer layer id, found `{v}`")))?,
                )
            }
            None => None,
        };
        let iteration = match c_iter {
            Some(c) => {
                let (v, at) = field(c, "iteration");
                Some(
                    v.parse::<u32>()
                        .map_err(|_| Error::parse(at, format!("expected an iteration number, found `{v}`")))?,
                )
            }
            None => None,
        };
        let (bytes, at) = field(c_bytes, "grad_bytes");
        let grad_bytes = crate::units::parse_bytes(&bytes).map_err(|m| Error::parse(at, m))?;
        let fraction = |c: usize, name: &str| -> Result<f64> {
            let (v, at) = field(c, name);
            v.parse::<f64>()
                .ok()
                .filter(|x| *x > 0.0 && *x <= 1.0)
                .ok_or_else(|| Error::parse(at, format!("expected a utilisation in (0, 1], found `{v}`")))
        };
        let util = match c_util {
            Some((f, b)) => Some((fraction(f, "forward_util")?, fraction(b, "backward_util")?)),
            None => None,
        };
        let share = |c: usize, name: &str| -> Result<f64> {
            let (v, at) = field(c, name);
            v.parse::<f64>()
                .ok()
                .filter(|x| (0.0..=1.0).contains(x))
                .ok_or_else(|| Error::parse(at, format!("expected a memory-bound share in [0, 1], found `{v}`")))
        };
        let memory = match c_memory {
            Some((f, b)) => Some((share(f, "forward_memory")?, share(b, "backward_memory")?)),
            None => None,
        };
        let tensors = match c_tensors {
            Some(c) => {
                let (v, at) = field(c, "grad_tensors");
                parse_tensors(&v, grad_bytes).map_err(|m| Error::parse(at, m))?
            }
            None => Vec::new(),
        };
        rows.push(Row {
            line,
            id,
            iteration,
            name: record[c_name].to_string(),
            forward_us: time(c_fwd, "forward_us")?,
            backward_us: time(c_bwd, "backward_us")?,
            comm_us: match c_comm {
                Some(c) if !record[c].is_empty() => time(c, "comm_us")?,
                _ => 0.0,
            },
            grad_bytes,
            util,
            memory,
            tensors,
        });
    }
    Ok((meta, rows))
}

fn parse_shi(text: &str, path: &Path) -> Result<Vec<Row>> {
    const FIELDS: [&str; 6] = ["id", "name", "forward", "backward", "comm", "size"];
    let mut rows = Vec::new();
    let mut seen_header = false;
    for (i, raw) in text.lines().enumerate() {
        let line = i + 1;
        let trimmed = raw.trim();
        if trimmed.is_empty() || trimmed.starts_with('#') {
            continue;
        }
        let parts: Vec<&str> =
            trimmed.split(|c: char| c.is_whitespace() || c == ',').filter(|s| !s.is_empty()).collect();
        // A header line (e.g. "Id Name Forward Backward Comm. Size") starts with a non-number; only
        // the first line that is not a comment may be one.
        if rows.is_empty() && !seen_header && parts.first().is_some_and(|p| p.parse::<i64>().is_err()) {
            seen_header = true;
            continue;
        }
        if parts.len() != FIELDS.len() {
            return Err(Error::parse(
                Location::line(path, line),
                format!("expected 6 fields (id name forward_us backward_us comm_us size_bytes), found {}", parts.len()),
            ));
        }
        let at = |k: usize| Location::line(path, line).with_field(FIELDS[k]);
        let id = parts[0]
            .parse::<i64>()
            .map_err(|_| Error::parse(at(0), format!("expected an integer layer id, found `{}`", parts[0])))?;
        let time = |k: usize| parse_time(parts[k]).map_err(|m| Error::parse(at(k), m));
        let grad_bytes = crate::units::parse_bytes(parts[5]).map_err(|m| Error::parse(at(5), m))?;
        rows.push(Row {
            line,
            id: Some(id),
            iteration: None,
            name: parts[1].to_string(),
            forward_us: time(2)?,
            backward_us: time(3)?,
            comm_us: time(4)?,
            grad_bytes,
            util: None,
            memory: None,
            tensors: Vec::new(),
        });
    }
    Ok(rows)
}

/// A time in microseconds: finite, non-negative, within the range of `units`.
fn parse_time(v: &str) -> std::result::Result<f64, String> {
    crate::units::parse_duration_us(v)
}

/// A `grad_tensors` cell: positive byte counts separated by `;` that sum to the layer's
/// `grad_bytes` (an empty cell for a layer without parameters).
fn parse_tensors(v: &str, grad_bytes: u64) -> std::result::Result<Vec<u64>, String> {
    if v.is_empty() {
        return match grad_bytes {
            0 => Ok(Vec::new()),
            _ => Err(format!("empty, but the layer has {grad_bytes} gradient bytes")),
        };
    }
    let tensors = v
        .split(';')
        .map(|t| parse_count(t.trim()).filter(|&b| b > 0))
        .collect::<Option<Vec<u64>>>()
        .ok_or_else(|| format!("expected positive byte counts separated by `;`, found `{v}`"))?;
    let sum: u64 = tensors.iter().sum();
    if sum != grad_bytes {
        return Err(format!("the tensors sum to {sum} bytes, but grad_bytes is {grad_bytes}"));
    }
    Ok(tensors)
}

/// A byte or sample count: a non-negative integer, also written in float notation (`1.5e+07`).
fn parse_count(v: &str) -> Option<u64> {
    if let Ok(n) = v.parse::<u64>() {
        return Some(n);
    }
    let x: f64 = v.parse().ok()?;
    (x.is_finite() && x >= 0.0 && x.fract() == 0.0 && x < 2f64.powi(63)).then_some(x as u64)
}

/// Splits rows into iterations and summarises each layer across them.
fn summarise(rows: Vec<Row>, meta: Meta, path: &Path) -> Result<Workload> {
    let iterations = split_iterations(&rows);
    let first = &iterations[0];
    for iter in &iterations[1..] {
        if iter.len() != first.len() || iter.iter().zip(first.iter()).any(|(a, b)| a.name != b.name) {
            let bad = iter.iter().zip(first.iter()).find(|(a, b)| a.name != b.name).map(|(a, _)| a);
            let line = bad.or(iter.first()).map(|r| r.line).unwrap_or(0);
            return Err(Error::parse(
                Location::line(path, line),
                format!(
                    "iterations differ: the first has {} layers, this one {}; every iteration must list the same layers in the same order",
                    first.len(),
                    iter.len()
                ),
            ));
        }
    }
    let n_layers = first.len();
    crate::limits::check("layers", n_layers as u64)?;
    let mut layers = Vec::with_capacity(n_layers);
    for k in 0..n_layers {
        let samples = |f: &dyn Fn(&Row) -> f64| -> Vec<f64> { iterations.iter().map(|it| f(it[k]) * 1e3).collect() };
        let bytes = first[k].grad_bytes;
        if let Some(r) = iterations.iter().map(|it| it[k]).find(|r| r.grad_bytes != bytes) {
            return Err(Error::parse(
                Location::line(path, r.line).with_field("grad_bytes"),
                format!("layer `{}` changes gradient size between iterations ({} vs {})", r.name, bytes, r.grad_bytes),
            ));
        }
        let comm = Stat::from_samples(&samples(&|r| r.comm_us));
        let mean = |pair: &dyn Fn(&Row) -> Option<(f64, f64)>, f: &dyn Fn((f64, f64)) -> f64| {
            iterations.iter().filter_map(|it| pair(it[k])).map(f).sum::<f64>() / iterations.len() as f64
        };
        let (util_of, memory_of) = (|r: &Row| r.util, |r: &Row| r.memory);
        let util =
            first[k].util.map(|_| KernelUtil { forward: mean(&util_of, &|u| u.0), backward: mean(&util_of, &|u| u.1) });
        let memory = first[k]
            .memory
            .map(|_| MemoryShare { forward: mean(&memory_of, &|u| u.0), backward: mean(&memory_of, &|u| u.1) });
        layers.push(Layer {
            name: first[k].name.clone(),
            forward: Stat::from_samples(&samples(&|r| r.forward_us)),
            backward: Stat::from_samples(&samples(&|r| r.backward_us)),
            comm: (comm.mean_ns > 0).then_some(comm),
            grad_bytes: bytes,
            grad_tensors: first[k].tensors.clone(),
            util,
            memory,
            tp: None,
        });
    }
    // The data layer (Caffe's input layer) is the per-iteration batch load, not network compute.
    let data_load = match layers.first() {
        Some(l) if l.name.eq_ignore_ascii_case("data") && l.grad_bytes == 0 && l.backward.mean_ns == 0 => {
            Some(layers.remove(0).forward)
        }
        _ => None,
    };
    if layers.is_empty() {
        return Err(Error::parse(Location::file(path), "the trace has no network layers besides the data layer"));
    }
    let name = meta.name.unwrap_or_else(|| {
        path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_else(|| "trace".into())
    });
    let sample_bytes = meta.sample_bytes.unwrap_or(0);
    Ok(Workload {
        name,
        batch_per_gpu: meta.batch_per_gpu.unwrap_or(0),
        sample_bytes,
        device_sample_bytes: meta.device_sample_bytes.unwrap_or(sample_bytes),
        layers,
        update: Stat::exact(us_to_ns(meta.update_us.unwrap_or(0.0))),
        data_load,
        trace_iterations: iterations.len() as u32,
        fp16: meta.fp16,
    })
}

/// An iteration ends where the `iteration` column changes, or where the layer id stops increasing,
/// or (without ids) where the first layer's name comes round again.
fn split_iterations(rows: &[Row]) -> Vec<Vec<&Row>> {
    let mut out: Vec<Vec<&Row>> = vec![Vec::new()];
    for (i, row) in rows.iter().enumerate() {
        let new_iter = i > 0 && {
            let prev = &rows[i - 1];
            match (row.iteration, prev.iteration, row.id, prev.id) {
                (Some(a), Some(b), _, _) => a != b,
                (_, _, Some(a), Some(b)) => a <= b,
                _ => row.name == rows[0].name,
            }
        };
        if new_iter {
            out.push(Vec::new());
        }
        out.last_mut().expect("one iteration exists").push(row);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p() -> &'static Path {
        Path::new("t.csv")
    }

    #[test]
    fn shi_table_with_two_iterations_is_averaged() {
        let text = "Id Name Forward Backward Comm. Size\n\
                    0 data 100 0 0 0\n1 conv1 10 20 5 400\n2 fc 30 40 7 800\n\
                    0 data 300 0 0 0\n1 conv1 20 30 5 400\n2 fc 30 40 9 800\n";
        let w = read_trace_str(text, p(), TraceFormat::Auto).unwrap();
        assert_eq!(w.trace_iterations, 2);
        assert_eq!(w.layers.len(), 2);
        assert_eq!(w.data_load.unwrap().mean_ns, 200_000);
        assert_eq!(w.layers[0].forward.mean_ns, 15_000);
        assert_eq!(w.layers[0].backward.mean_ns, 25_000);
        assert_eq!(w.layers[1].comm.unwrap().mean_ns, 8_000);
        assert!((w.layers[0].forward.std_ns - 7071.07).abs() < 0.01);
        assert_eq!(w.grad_bytes(), 1200);
    }

    #[test]
    fn native_csv_reads_metadata() {
        let text = "# model: tiny\n# batch_per_gpu: 32\n# sample_bytes: 1000\n# update_us: 7\n\
                    layer,name,forward_us,backward_us,comm_us,grad_bytes\n1,a,1,2,0,0\n2,b,3,4,1.5,4e3\n";
        let w = read_trace_str(text, p(), TraceFormat::Auto).unwrap();
        assert_eq!(w.name, "tiny");
        assert_eq!(w.batch_per_gpu, 32);
        assert_eq!(w.sample_bytes, 1000);
        assert_eq!(w.device_sample_bytes, 1000);
        assert_eq!(w.update.mean_ns, 7000);
        assert_eq!(w.layers[1].grad_bytes, 4000);
        assert_eq!(w.layers[1].comm.unwrap().mean_ns, 1500);
        assert!(w.layers[0].comm.is_none());
    }

    #[test]
    fn native_csv_reads_utilisation_columns() {
        let text = "name,forward_us,backward_us,grad_bytes,forward_util,backward_util\na,1,2,0,0.25,0.5\n\
                    a,1,2,0,0.75,1\n";
        let w = read_trace_str(text, p(), TraceFormat::Auto).unwrap();
        let u = w.layers[0].util.unwrap();
        assert_eq!((u.forward, u.backward), (0.5, 0.75), "averaged over the two iterations");
        let e = read_trace_str(&text.replace("0.75", "1.5"), p(), TraceFormat::Auto).unwrap_err().to_string();
        assert!(e.contains("t.csv:3") && e.contains("forward_util") && e.contains("(0, 1]"), "{e}");
        let plain = read_trace_str("name,forward_us,backward_us,grad_bytes\na,1,2,0\n", p(), TraceFormat::Auto);
        assert!(plain.unwrap().layers[0].util.is_none());
    }

    #[test]
    fn native_csv_reads_memory_share_columns() {
        let text = "name,forward_us,backward_us,grad_bytes,forward_memory,backward_memory\na,1,2,0,0,0.5\n\
                    a,1,2,0,0.5,1\n";
        let w = read_trace_str(text, p(), TraceFormat::Auto).unwrap();
        let m = w.layers[0].memory.unwrap();
        assert_eq!((m.forward, m.backward), (0.25, 0.75), "averaged over the two iterations");
        let e = read_trace_str(&text.replace("0.5,1", "0.5,1.5"), p(), TraceFormat::Auto).unwrap_err().to_string();
        assert!(e.contains("t.csv:3") && e.contains("backward_memory") && e.contains("[0, 1]"), "{e}");
        let plain = read_trace_str("name,forward_us,backward_us,grad_bytes\na,1,2,0\n", p(), TraceFormat::Auto);
        assert!(plain.unwrap().layers[0].memory.is_none());
    }

    #[test]
    fn native_csv_reads_gradient_tensors() {
        let text = "name,forward_us,backward_us,grad_bytes,grad_tensors\na,1,2,0,\nb,1,2,1000,996;4\n";
        let w = read_trace_str(text, p(), TraceFormat::Auto).unwrap();
        assert_eq!(w.layers[1].tensors(), [996, 4]);
        assert_eq!(w.tensor_source(), crate::workload::TensorSource::Listed);
        assert_eq!(w.tensor_count(), 2);
        let e = read_trace_str(&text.replace("996;4", "996;5"), p(), TraceFormat::Auto).unwrap_err().to_string();
        assert!(e.contains("t.csv:3") && e.contains("grad_tensors") && e.contains("sum to 1001"), "{e}");
        let e = read_trace_str(&text.replace("996;4", "996;x"), p(), TraceFormat::Auto).unwrap_err().to_string();
        assert!(e.contains("grad_tensors") && e.contains("separated by `;`"), "{e}");
        // Without the column every learnable layer is one tensor, and the workload says so.
        let plain =
            read_trace_str("name,forward_us,backward_us,grad_bytes\na,1,2,0\nb,1,2,8\n", p(), TraceFormat::Auto);
        let plain = plain.unwrap();
        assert_eq!((plain.tensor_count(), plain.tensor_source()), (1, crate::workload::TensorSource::PerLayer));
    }

    #[test]
    fn errors_name_line_and_field() {
        let text = "layer,name,forward_us,backward_us,grad_bytes\n1,a,1,-2,0\n";
        let e = read_trace_str(text, p(), TraceFormat::Auto).unwrap_err().to_string();
        assert!(e.contains("t.csv:2") && e.contains("backward_us") && e.contains("negative"), "{e}");

        let text = "layer,name,forward_us,backward_us,grad_bytes\n1,a,x,2,0\n";
        let e = read_trace_str(text, p(), TraceFormat::Auto).unwrap_err().to_string();
        assert!(e.contains("t.csv:2") && e.contains("forward_us"), "{e}");

        let text = "layer,name,forward_us,grad_bytes\n1,a,1,0\n";
        let e = read_trace_str(text, p(), TraceFormat::Auto).unwrap_err().to_string();
        assert!(e.contains("missing column `backward_us`"), "{e}");

        let text = "0 data 1 0 0 0\n1 conv 1 2 3\n";
        let e = read_trace_str(text, p(), TraceFormat::Auto).unwrap_err().to_string();
        assert!(e.contains("t.csv:2") && e.contains("expected 6 fields"), "{e}");

        let text = "1 conv 1 2 3 1.5\n";
        let e = read_trace_str(text, p(), TraceFormat::Auto).unwrap_err().to_string();
        assert!(e.contains("size"), "{e}");

        let e = read_trace_str("# nothing\n", p(), TraceFormat::Auto).unwrap_err().to_string();
        assert!(e.contains("no layer rows"), "{e}");
    }

    #[test]
    fn iterations_must_match() {
        let text = "1 a 1 1 0 0\n2 b 1 1 0 8\n1 a 1 1 0 0\n2 c 1 1 0 8\n";
        let e = read_trace_str(text, p(), TraceFormat::Auto).unwrap_err().to_string();
        assert!(e.contains("t.csv:4") && e.contains("iterations differ"), "{e}");
    }
}
