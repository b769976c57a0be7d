//! PyTorch profiler (Kineto) Chrome-trace JSON (`prof.export_chrome_trace(...)`): complete events
//! (`"ph": "X"`, `ts` and `dur` in microseconds). Layers come from `record_function` ranges
//! (category `user_annotation`, or `gpu_user_annotation` for their device-side span, preferred
//! when present): a range named `NAME` is that layer's forward, one named `NAME.backward`,
//! `NAME_backward` or `backward:NAME` its backward. Occurrences are summed and divided by the
//! number of `ProfilerStep#N` ranges (1 if none). Layer order is the order of first forward start;
//! the kind is guessed from the name; an `args` entry `"param_bytes"` gives gradient bytes.

use super::{kind_of, Profile, ProfiledLayer};
use crate::error::{Error, Location, Result};
use serde_json::Value;
use std::collections::HashMap;
use std::path::Path;

#[derive(Default)]
struct Acc {
    first_ts: f64,
    forward_us: f64,
    backward_us: f64,
    param_bytes: u64,
}

/// Parses a Chrome-trace JSON produced by the PyTorch profiler.
pub fn read_kineto_trace(text: &str, path: &Path) -> Result<Profile> {
    let doc: Value = serde_json::from_str(text)
        .map_err(|e| Error::parse(Location::line(path, e.line()), format!("not valid JSON: {e}")))?;
    if doc.get("traceEvents").is_none() && doc.get("nodes").is_some() {
        return Err(Error::parse(
            Location::file(path).with_field("nodes"),
            "an execution trace (`nodes`, no `traceEvents`: PyTorch's ExecutionTraceObserver or Chakra's JSON form), \
             not a Kineto trace; convert it to Chakra's protobuf `.et` (chakra_converter) and read that with \
             `--profile-format chakra`",
        ));
    }
    let events = doc.get("traceEvents").or(Some(&doc)).and_then(Value::as_array).ok_or_else(|| {
        Error::parse(Location::file(path).with_field("traceEvents"), "expected an array of trace events")
    })?;
    let on_gpu = events.iter().any(|e| e.get("cat").and_then(Value::as_str) == Some("gpu_user_annotation"));
    let wanted = if on_gpu { "gpu_user_annotation" } else { "user_annotation" };
    let mut steps = 0u32;
    let mut layers: HashMap<String, Acc> = HashMap::new();
    for (i, e) in events.iter().enumerate() {
        if e.get("ph").and_then(Value::as_str) != Some("X") {
            continue;
        }
        let name = e.get("name").and_then(Value::as_str).unwrap_or("");
        if name.starts_with("ProfilerStep#") {
            steps += 1;
            continue;
        }
        if e.get("cat").and_then(Value::as_str) != Some(wanted) {
            continue;
        }
        let field = |k: &str| -> Result<f64> {
            e.get(k).and_then(Value::as_f64).filter(|x| x.is_finite() && *x >= 0.0).ok_or_else(|| {
                Error::parse(
                    Location::file(path).with_field(format!("traceEvents[{i}].{k}")),
                    format!("event `{name}` needs a non-negative number `{k}`"),
                )
            })
        };
        let (ts, dur) = (field("ts")?, field("dur")?);
        let (layer, backward) = split_backward(name);
        let acc = layers.entry(layer.to_string()).or_insert_with(|| Acc { first_ts: f64::INFINITY, ..Acc::default() });
        if backward {
            acc.backward_us += dur;
        } else {
            acc.first_ts = acc.first_ts.min(ts);
            acc.forward_us += dur;
        }
        if let Some(b) = e.pointer("/args/param_bytes").and_then(Value::as_u64) {
            acc.param_bytes = b;
        }
    }
    if layers.is_empty() {
        return Err(Error::parse(
            Location::file(path),
            format!("no `{wanted}` events: wrap each layer in torch.profiler.record_function(name)"),
        ));
    }
    let steps = steps.max(1);
    let mut list: Vec<(String, Acc)> = layers.into_iter().collect();
    list.sort_by(|a, b| a.1.first_ts.total_cmp(&b.1.first_ts).then_with(|| a.0.cmp(&b.0)));
    Ok(Profile {
        name: path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default(),
        batch: None,
        layers: list
            .into_iter()
            .map(|(name, a)| ProfiledLayer {
                kind: kind_of(&name),
                name,
                forward_us: a.forward_us / steps as f64,
                backward_us: a.backward_us / steps as f64,
                comm_us: None,
                param_bytes: a.param_bytes,
                tensors: Vec::new(),
            })
            .collect(),
        input_us: None,
        iteration_us: None,
        iterations: steps,
    })
}

/// `conv1.backward`, `conv1_backward`, `backward:conv1` -> (`conv1`, true).
fn split_backward(name: &str) -> (&str, bool) {
    if let Some(l) = name.strip_suffix(".backward").or_else(|| name.strip_suffix("_backward")) {
        (l, true)
    } else if let Some(l) = name.strip_prefix("backward:") {
        (l, true)
    } else {
        (name, false)
    }
}
