//! PyTorch profiler (Kineto) Chrome-trace JSON (`prof.export_chrome_trace(...)`): complete events
//! (`"ph": "X"`, `ts` and `dur` in microseconds). Layers come from `record_function` ranges
//! (category `user_annotation`, or `gpu_user_annotation` for their device-side span): a range
//! named `NAME` is that layer's forward, one named `NAME.backward`, `NAME_backward` or
//! `backward:NAME` its backward. Occurrences are summed and divided by the number of
//! `ProfilerStep#N` ranges (1 if none). Layer order is the order of first forward start; the kind
//! is guessed from the name; an `args` entry `"param_bytes"` gives gradient bytes.
//!
//! What real traces hold decides three rules (seen in HolisticTraceAnalysis' DDP trace,
//! traces/profiles/kineto/README.md):
//! - c10d's collective ranges (`nccl:all_reduce`, `gloo:broadcast`, ...) are communication, which
//!   dagsim models itself: never layers.
//! - Device-side spans are used only when every range has one: a range's GPU span covers only the
//!   kernels launched inside it on its own thread, so autograd's backward (launched from another
//!   thread) shows 0.6 ms on the GPU for 100 ms on the host, and mixing the two is wrong.
//! - Only innermost ranges count (per process and thread): `## forward ##` around
//!   `DistributedDataParallel.forward`, or a model range around its layers, would count twice.

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
    // Complete events by category: (index, name, pid, tid, ts, dur) of each range kept.
    let mut ranges: [Vec<Range>; 2] = [Vec::new(), Vec::new()];
    let mut steps = 0u32;
    for (i, e) in events.iter().enumerate() {
        if e.get("ph").and_then(Value::as_str) != Some("X") {
            continue;
        }
        let name = e.get("name").and_then(Value::as_str).unwrap_or("");
        let side = match e.get("cat").and_then(Value::as_str) {
            Some("user_annotation") => 0,
            Some("gpu_user_annotation") => 1,
            _ => continue,
        };
        if name.starts_with("ProfilerStep#") {
            steps += (side == 0) as u32;
            continue;
        }
        if is_collective(name) {
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
        let lane = |k: &str| e.get(k).map(Value::to_string).unwrap_or_default();
        ranges[side].push(Range {
            index: i,
            name,
            lane: (lane("pid"), lane("tid")),
            ts: field("ts")?,
            dur: field("dur")?,
        });
    }
    // Device spans only if every host range's name has one (see the module comment).
    let gpu_names: std::collections::HashSet<&str> = ranges[1].iter().map(|r| r.name).collect();
    let on_gpu = !ranges[1].is_empty() && ranges[0].iter().all(|r| gpu_names.contains(r.name));
    let wanted = if on_gpu { "gpu_user_annotation" } else { "user_annotation" };
    let chosen = innermost(std::mem::take(&mut ranges[on_gpu as usize]));
    let mut layers: HashMap<String, Acc> = HashMap::new();
    for r in chosen {
        let (layer, backward) = split_backward(r.name);
        let acc = layers.entry(layer.to_string()).or_insert_with(|| Acc { first_ts: f64::INFINITY, ..Acc::default() });
        if backward {
            acc.backward_us += r.dur;
        } else {
            acc.first_ts = acc.first_ts.min(r.ts);
            acc.forward_us += r.dur;
        }
        if let Some(b) = events[r.index].pointer("/args/param_bytes").and_then(Value::as_u64) {
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

/// One `record_function` range: its event index, name, (pid, tid) and span in microseconds.
struct Range<'a> {
    index: usize,
    name: &'a str,
    lane: (String, String),
    ts: f64,
    dur: f64,
}

/// c10d's ranges around a collective (`nccl:all_reduce`, `gloo:broadcast`, ...).
fn is_collective(name: &str) -> bool {
    ["nccl:", "gloo:", "mpi:", "ucc:", "hccl:", "c10d::"].iter().any(|p| name.starts_with(p))
}

/// The ranges that enclose no other range of their process and thread, in their original order.
/// Ranges of one thread nest, so sorted by start (the longer first on a tie) a range encloses
/// another exactly when the next one starts before it ends.
fn innermost(mut ranges: Vec<Range>) -> Vec<Range> {
    ranges.sort_by(|a, b| a.lane.cmp(&b.lane).then(a.ts.total_cmp(&b.ts)).then(b.dur.total_cmp(&a.dur)));
    let mut keep = vec![true; ranges.len()];
    for i in 0..ranges.len().saturating_sub(1) {
        let (a, b) = (&ranges[i], &ranges[i + 1]);
        if a.lane == b.lane && b.ts < a.ts + a.dur {
            keep[i] = false;
        }
    }
    let mut kept: Vec<Range> = ranges.into_iter().zip(keep).filter_map(|(r, k)| k.then_some(r)).collect();
    kept.sort_by_key(|r| r.index);
    kept
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
