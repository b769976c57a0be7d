//! MLCommons Chakra execution traces (ET): the protobuf schema of `et_def.proto` (shipped here,
//! from mlcommons/chakra; the Rust types in `et_def.rs` are generated from it by prost-build, see
//! README.md in this folder). A file is a stream of length-delimited messages: one
//! `GlobalMetadata`, then `Node`s.
//!
//! [`read_chakra_et`] turns one rank's trace into a [`Workload`]. A trace that dagsim wrote
//! ([`write_chakra_et`]) carries `dagsim.*` attributes and comes back exactly (same prediction). Any
//! other trace (a PyTorch run converted by Chakra) is read by these rules:
//! - compute: the GPU compute nodes (`is_cpu_op` false) if the trace has any, else every compute
//!   node; each is one layer, in data-dependency order (ties by node id; control dependencies
//!   only say which op a node hangs from), timed by `duration_micros`;
//! - backward: a node is backward if its name, or the name of a node it hangs from by its first
//!   control dependency (the CPU op that launched a kernel), contains `autograd::engine` or
//!   `backward` (any case: `AddmmBackward0`, `aten::nll_loss_backward`); backward nodes run in
//!   reverse layer order after the forward pass, as dagsim's builder runs them, so the first one
//!   executed becomes the backward of the last layer;
//! - gradients: each all-reduce (`COMM_COLL_NODE` with `comm_type` ALL_REDUCE) adds its
//!   `comm_size` bytes to the gradients of the backward node before it (the last layer if none);
//!   dagsim models the all-reduce itself, so its recorded duration is not used. Other node kinds
//!   (memory, point-to-point, other collectives) are skipped.

/// The generated message types (all of `et_def.proto`).
#[allow(clippy::all)]
pub mod et_def;

pub use et_def::{attribute_proto::Value, AttributeProto, GlobalMetadata, Node, NodeType};

use super::super::{Layer, Stat, Workload};
use crate::error::{Error, Location, Result};
use prost::Message;
use rustc_hash::FxHashMap as HashMap;
use std::path::Path;

/// Chakra's `CollectiveCommType::ALL_REDUCE`.
const ALL_REDUCE: i64 = 0;

/// A decoded trace: its metadata and nodes in file order.
#[derive(Debug, Clone, PartialEq)]
pub struct ChakraTrace {
    pub metadata: GlobalMetadata,
    pub nodes: Vec<Node>,
}

/// `GlobalMetadata.version` values this reader knows (Chakra's generator writes 1.0.0, older
/// tools 0.0.4; traces converted from PyTorch leave it empty and name the PyTorch ET schema in a
/// `schema` attribute, 1.0.x or 1.1.x).
fn known_version(meta: &GlobalMetadata) -> std::result::Result<(), String> {
    let v = meta.version.trim();
    if v.is_empty() {
        let schema = meta.attr.iter().find(|a| a.name == "schema").and_then(|a| match &a.value {
            Some(Value::StringVal(s)) => Some(s.as_str()),
            _ => None,
        });
        return match schema {
            None => Ok(()),
            Some(s) if s.starts_with("1.0.") || s.starts_with("1.1.") => Ok(()),
            Some(s) => Err(format!(
                "global metadata attribute `schema` is `{s}`; this reader knows PyTorch ET schemas 1.0.x and 1.1.x"
            )),
        };
    }
    if v == "0.0.4" || v.starts_with("1.0.") {
        Ok(())
    } else {
        Err(format!("global metadata `version` is `{v}`; this reader knows Chakra ET versions 0.0.4 and 1.0.x"))
    }
}

/// Decodes the message stream of a Chakra ET file. Errors name the file and the node (its
/// position in the file and, once read, its id and name).
pub fn decode_chakra_et(bytes: &[u8], path: &Path) -> Result<ChakraTrace> {
    let at = || Location::file(path);
    let mut rest = bytes;
    let mut next = |what: &dyn Fn() -> String| -> Result<Option<&[u8]>> {
        if rest.is_empty() {
            return Ok(None);
        }
        let offset = bytes.len() - rest.len();
        let len = prost::encoding::decode_varint(&mut rest)
            .map_err(|e| Error::parse(at(), format!("{} at byte {offset}: bad length prefix ({e})", what())))?;
        if len > rest.len() as u64 {
            return Err(Error::parse(
                at(),
                format!(
                    "{} at byte {offset}: truncated, it declares {len} bytes but only {} remain",
                    what(),
                    rest.len()
                ),
            ));
        }
        let (msg, tail) = rest.split_at(len as usize);
        rest = tail;
        Ok(Some(msg))
    };
    let msg = next(&|| "global metadata".to_string())?
        .ok_or_else(|| Error::parse(at(), "empty file: a Chakra ET starts with its global metadata"))?;
    let metadata = GlobalMetadata::decode(msg).map_err(|e| Error::parse(at(), format!("global metadata: {e}")))?;
    known_version(&metadata).map_err(|m| Error::parse(at().with_field("version"), m))?;
    let mut nodes: Vec<Node> = Vec::new();
    loop {
        let index = nodes.len();
        let after = nodes.last().map(|n| format!(" (after id {})", n.id)).unwrap_or_default();
        let Some(msg) = next(&|| format!("node #{index}{after}"))? else { break };
        let node = Node::decode(msg).map_err(|e| Error::parse(at(), format!("node #{index}{after}: {e}")))?;
        nodes.push(node);
    }
    if nodes.is_empty() {
        return Err(Error::parse(at(), "the trace holds no nodes"));
    }
    let limit = crate::limits::get().layers;
    if nodes.len() as u64 > limit.saturating_mul(100) {
        return Err(Error::parse(at(), format!("{} nodes: beyond 100 x the layer limit of {limit}", nodes.len())));
    }
    Ok(ChakraTrace { metadata, nodes })
}

/// Encodes a trace as a Chakra ET message stream.
pub fn encode_chakra_et(trace: &ChakraTrace) -> Vec<u8> {
    let mut out = Vec::new();
    trace.metadata.encode_length_delimited(&mut out).expect("a Vec grows");
    for n in &trace.nodes {
        n.encode_length_delimited(&mut out).expect("a Vec grows");
    }
    out
}

/// Reads a Chakra ET file into a workload (see the module documentation).
/// A file ending in `.gz` is decompressed first (Chakra traces of real runs are large).
pub fn read_chakra_et(path: &Path) -> Result<Workload> {
    let mut bytes = std::fs::read(path).map_err(|e| Error::io(path, e))?;
    if path.extension().is_some_and(|e| e == "gz") {
        use std::io::Read;
        let mut plain = Vec::new();
        // Bounded, so a compressed bomb is refused rather than exhausting memory.
        let limit = 4u64 << 30;
        flate2::read::GzDecoder::new(&bytes[..])
            .take(limit + 1)
            .read_to_end(&mut plain)
            .map_err(|e| Error::parse(Location::file(path), format!("not a valid gzip file: {e}")))?;
        if plain.len() as u64 > limit {
            return Err(Error::parse(Location::file(path), "decompresses to more than 4 GiB"));
        }
        bytes = plain;
    }
    chakra_et_to_workload(&bytes, path)
}

/// [`read_chakra_et`] on bytes already read; `path` names them in errors.
pub fn chakra_et_to_workload(bytes: &[u8], path: &Path) -> Result<Workload> {
    let trace = decode_chakra_et(bytes, path)?;
    let name = path.file_stem().and_then(|s| s.to_str()).unwrap_or("chakra").to_string();
    if attr(&trace.metadata.attr, "dagsim.workload").is_some() {
        from_dagsim(&trace, path)
    } else {
        from_foreign(&trace, path, name)
    }
}

fn attr<'a>(attrs: &'a [AttributeProto], name: &str) -> Option<&'a Value> {
    attrs.iter().find(|a| a.name == name).and_then(|a| a.value.as_ref())
}

fn attr_u64(attrs: &[AttributeProto], name: &str) -> Option<u64> {
    match attr(attrs, name)? {
        Value::Uint64Val(v) => Some(*v),
        Value::Int64Val(v) if *v >= 0 => Some(*v as u64),
        Value::Uint32Val(v) => Some(*v as u64),
        Value::Int32Val(v) if *v >= 0 => Some(*v as u64),
        _ => None,
    }
}

fn attr_i64(attrs: &[AttributeProto], name: &str) -> Option<i64> {
    match attr(attrs, name)? {
        Value::Int64Val(v) => Some(*v),
        Value::Int32Val(v) => Some(*v as i64),
        Value::Uint64Val(v) => i64::try_from(*v).ok(),
        Value::Uint32Val(v) => Some(*v as i64),
        _ => None,
    }
}

fn attr_str<'a>(attrs: &'a [AttributeProto], name: &str) -> Option<&'a str> {
    match attr(attrs, name)? {
        Value::StringVal(s) => Some(s),
        _ => None,
    }
}

fn attr_bool(attrs: &[AttributeProto], name: &str) -> Option<bool> {
    match attr(attrs, name)? {
        Value::BoolVal(b) => Some(*b),
        _ => None,
    }
}

fn describe(n: &Node) -> String {
    format!("node id {} (`{}`)", n.id, n.name)
}

/// A node's duration in ns: dagsim's exact `duration_ns` if present, else `duration_micros`.
fn duration_ns(n: &Node, path: &Path) -> Result<u64> {
    if let Some(ns) = attr_u64(&n.attr, "duration_ns") {
        return Ok(ns);
    }
    crate::units::duration_us_to_ns(n.duration_micros as f64)
        .map_err(|m| Error::parse(Location::file(path).with_field("duration_micros"), format!("{}: {m}", describe(n))))
}

/// Node positions in data-dependency order (ties by node id). Errors
/// name a dependency on a missing node, a repeated id, or a node on a cycle.
fn dependency_order(trace: &ChakraTrace, path: &Path) -> Result<Vec<usize>> {
    let at = || Location::file(path);
    let mut index: HashMap<u64, usize> = HashMap::default();
    for (i, n) in trace.nodes.iter().enumerate() {
        if index.insert(n.id, i).is_some() {
            return Err(Error::parse(at().with_field("id"), format!("{} appears twice", describe(n))));
        }
    }
    let mut waiting = vec![0usize; trace.nodes.len()];
    let mut succ: Vec<Vec<usize>> = vec![Vec::new(); trace.nodes.len()];
    for (i, n) in trace.nodes.iter().enumerate() {
        // Chakra's feeder schedules by data dependencies; control dependencies name the op a node
        // hangs from, which converters may have dropped (a trace's root), so they do not order.
        for (field, deps) in [("data_deps", &n.data_deps)] {
            for d in deps {
                let &p = index.get(d).ok_or_else(|| {
                    Error::parse(
                        at().with_field(field),
                        format!("{}: depends on node id {d}, which the trace does not hold", describe(n)),
                    )
                })?;
                succ[p].push(i);
                waiting[i] += 1;
            }
        }
    }
    let mut ready: std::collections::BinaryHeap<std::cmp::Reverse<(u64, usize)>> = trace
        .nodes
        .iter()
        .enumerate()
        .filter(|(i, _)| waiting[*i] == 0)
        .map(|(i, n)| std::cmp::Reverse((n.id, i)))
        .collect();
    let mut order = Vec::with_capacity(trace.nodes.len());
    while let Some(std::cmp::Reverse((_, i))) = ready.pop() {
        order.push(i);
        for &s in &succ[i] {
            waiting[s] -= 1;
            if waiting[s] == 0 {
                ready.push(std::cmp::Reverse((trace.nodes[s].id, s)));
            }
        }
    }
    if order.len() < trace.nodes.len() {
        let stuck =
            (0..trace.nodes.len()).filter(|&i| waiting[i] > 0).min_by_key(|&i| trace.nodes[i].id).expect("some");
        return Err(Error::parse(
            at().with_field("data_deps"),
            format!("{} is on a dependency cycle", describe(&trace.nodes[stuck])),
        ));
    }
    Ok(order)
}

fn is_type(n: &Node, t: NodeType) -> bool {
    n.r#type == t as i32
}

/// A trace from elsewhere (a PyTorch run converted by Chakra): the rules in the module docs.
fn from_foreign(trace: &ChakraTrace, path: &Path, name: String) -> Result<Workload> {
    let order = dependency_order(trace, path)?;
    let nodes = &trace.nodes;
    let index: HashMap<u64, usize> = nodes.iter().enumerate().map(|(i, n)| (n.id, i)).collect();
    let comp = |n: &Node| is_type(n, NodeType::CompNode);
    let gpu_only = nodes.iter().any(|n| comp(n) && attr_bool(&n.attr, "is_cpu_op") == Some(false));
    let counted = |n: &Node| comp(n) && (!gpu_only || attr_bool(&n.attr, "is_cpu_op") == Some(false));
    // Backward if the node or a node it hangs from (first control dependency) says so.
    let backward_name = |s: &str| s.contains("autograd::engine") || s.to_ascii_lowercase().contains("backward");
    let mut backward = vec![None::<bool>; nodes.len()];
    for start in 0..nodes.len() {
        let mut chain = Vec::new();
        let mut at = Some(start);
        let mut found = false;
        while let Some(i) = at {
            if let Some(b) = backward[i] {
                found = b;
                break;
            }
            chain.push(i);
            if backward_name(&nodes[i].name) || chain.len() > nodes.len() {
                found = backward_name(&nodes[i].name);
                break;
            }
            at = nodes[i].ctrl_deps.first().and_then(|d| index.get(d).copied());
        }
        for i in chain {
            backward[i] = Some(found);
        }
    }
    let mut forward_layers: Vec<Layer> = Vec::new();
    let mut backward_layers: Vec<Layer> = Vec::new(); // in execution order
    let mut loose_grad_bytes = 0u64;
    for &i in &order {
        let n = &nodes[i];
        if counted(n) {
            let t = duration_ns(n, path)?;
            if t == 0 {
                continue;
            }
            let layer = |fwd: u64, bwd: u64| Layer {
                name: n.name.clone(),
                forward: Stat::exact(fwd),
                backward: Stat::exact(bwd),
                comm: None,
                grad_bytes: 0,
                grad_tensors: Vec::new(),
                util: None,
                memory: None,
                tp: None,
            };
            if backward[i] == Some(true) {
                backward_layers.push(layer(0, t));
            } else {
                forward_layers.push(layer(t, 0));
            }
        } else if is_type(n, NodeType::CommCollNode) && attr_i64(&n.attr, "comm_type") == Some(ALL_REDUCE) {
            let bytes = attr_i64(&n.attr, "comm_size").filter(|b| *b >= 0).ok_or_else(|| {
                Error::parse(
                    Location::file(path).with_field("comm_size"),
                    format!("{}: an all-reduce needs a non-negative `comm_size`", describe(n)),
                )
            })? as u64;
            crate::units::check_bytes(bytes).map_err(|m| {
                Error::parse(Location::file(path).with_field("comm_size"), format!("{}: {m}", describe(n)))
            })?;
            match backward_layers.last_mut() {
                Some(l) => l.grad_bytes += bytes,
                None => loose_grad_bytes += bytes,
            }
        }
    }
    let mut layers = forward_layers;
    layers.extend(backward_layers.into_iter().rev());
    if layers.is_empty() {
        return Err(Error::parse(Location::file(path), "the trace holds no compute node with a duration"));
    }
    let limit = crate::limits::get().layers;
    if layers.len() as u64 > limit {
        return Err(Error::parse(
            Location::file(path),
            format!(
                "{} compute nodes: beyond the layer limit of {limit} (raise it with --limit layers=N)",
                layers.len()
            ),
        ));
    }
    layers.last_mut().expect("not empty").grad_bytes += loose_grad_bytes;
    Ok(Workload {
        name,
        batch_per_gpu: 0,
        sample_bytes: 0,
        device_sample_bytes: 0,
        layers,
        update: Stat::exact(0),
        data_load: None,
        trace_iterations: 1,
        fp16: false,
    })
}

/// Attribute names of the traces dagsim writes.
const PHASE: &str = "dagsim.phase";
const LAYER: &str = "dagsim.layer";

fn str_attr(name: &str, v: impl Into<String>) -> AttributeProto {
    AttributeProto { name: name.into(), doc_string: String::new(), value: Some(Value::StringVal(v.into())) }
}

fn u64_attr(name: &str, v: u64) -> AttributeProto {
    AttributeProto { name: name.into(), doc_string: String::new(), value: Some(Value::Uint64Val(v)) }
}

/// The DAG dagsim simulates for one data-parallel rank of `w`, as a Chakra ET: the data load, the
/// forward pass layer by layer, the backward pass in reverse, one all-reduce per layer with
/// gradients (after that layer's backward, as wait-free backpropagation runs it) and the update
/// after all of them. Times are in `duration_micros` (rounded) and exactly in a `duration_ns`
/// attribute; `dagsim.*` attributes carry what [`read_chakra_et`] needs to rebuild `w` exactly.
pub fn workload_to_chakra(w: &Workload) -> ChakraTrace {
    let mut nodes: Vec<Node> = Vec::new();
    let mut push = |name: String, ty: NodeType, ns: u64, deps: Vec<u64>, mut attrs: Vec<AttributeProto>| -> u64 {
        let id = nodes.len() as u64;
        attrs.push(u64_attr("duration_ns", ns));
        nodes.push(Node {
            id,
            name,
            r#type: ty as i32,
            ctrl_deps: Vec::new(),
            data_deps: deps,
            start_time_micros: 0,
            duration_micros: ns.div_ceil(1000),
            inputs: None,
            outputs: None,
            attr: attrs,
        });
        id
    };
    let mut last: Vec<u64> = Vec::new();
    if let Some(d) = &w.data_load {
        let id = push("data load".into(), NodeType::MemLoadNode, d.mean_ns, Vec::new(), vec![str_attr(PHASE, "data")]);
        last = vec![id];
    }
    for (i, l) in w.layers.iter().enumerate() {
        let attrs = vec![str_attr(PHASE, "forward"), u64_attr(LAYER, i as u64)];
        last = vec![push(format!("{}.forward", l.name), NodeType::CompNode, l.forward.mean_ns, last, attrs)];
    }
    let mut reduces = Vec::new();
    for (i, l) in w.layers.iter().enumerate().rev() {
        let attrs = vec![str_attr(PHASE, "backward"), u64_attr(LAYER, i as u64)];
        let b = push(format!("{}.backward", l.name), NodeType::CompNode, l.backward.mean_ns, last, attrs);
        last = vec![b];
        if l.grad_bytes > 0 {
            let mut attrs = vec![
                AttributeProto {
                    name: "comm_type".into(),
                    doc_string: String::new(),
                    value: Some(Value::Int64Val(ALL_REDUCE)),
                },
                AttributeProto {
                    name: "comm_size".into(),
                    doc_string: String::new(),
                    value: Some(Value::Int64Val(l.grad_bytes as i64)),
                },
                str_attr(PHASE, "all_reduce"),
                u64_attr(LAYER, i as u64),
            ];
            if !l.grad_tensors.is_empty() {
                attrs.push(AttributeProto {
                    name: "dagsim.grad_tensors".into(),
                    doc_string: String::new(),
                    value: Some(Value::Uint64List(et_def::Uint64List { values: l.grad_tensors.clone() })),
                });
            }
            let measured = l.comm.as_ref().map_or(0, |c| c.mean_ns);
            if l.comm.is_some() {
                attrs.push(u64_attr("dagsim.measured_comm_ns", measured));
            }
            reduces.push(push(format!("{}.all_reduce", l.name), NodeType::CommCollNode, measured, vec![b], attrs));
        }
    }
    let mut deps = last;
    deps.extend(reduces);
    push("optimizer.step".into(), NodeType::CompNode, w.update.mean_ns, deps, vec![str_attr(PHASE, "update")]);
    let metadata = GlobalMetadata {
        version: "1.0.0".into(),
        attr: vec![
            str_attr("exporter", format!("dagsim {}", env!("CARGO_PKG_VERSION"))),
            str_attr("dagsim.workload", w.name.clone()),
            u64_attr("dagsim.batch_per_gpu", w.batch_per_gpu as u64),
            u64_attr("dagsim.sample_bytes", w.sample_bytes),
            u64_attr("dagsim.device_sample_bytes", w.device_sample_bytes),
            u64_attr("dagsim.trace_iterations", w.trace_iterations as u64),
            AttributeProto {
                name: "dagsim.fp16".into(),
                doc_string: String::new(),
                value: Some(Value::BoolVal(w.fp16)),
            },
        ],
    };
    ChakraTrace { metadata, nodes }
}

/// Writes [`workload_to_chakra`] as Chakra ET bytes.
pub fn write_chakra_et(w: &Workload) -> Vec<u8> {
    encode_chakra_et(&workload_to_chakra(w))
}

/// A trace dagsim wrote: rebuild the workload from its `dagsim.*` attributes.
fn from_dagsim(trace: &ChakraTrace, path: &Path) -> Result<Workload> {
    let meta = &trace.metadata.attr;
    let missing = |field: &str| Error::parse(Location::file(path).with_field(field), "missing or not a number");
    let get = |name: &str| attr_u64(meta, name).ok_or_else(|| missing(name));
    let u32_of = |name: &str| -> Result<u32> {
        u32::try_from(get(name)?).map_err(|_| Error::parse(Location::file(path).with_field(name), "beyond 4294967295"))
    };
    // Validate the graph (ids, dependencies, cycles) as for any trace.
    dependency_order(trace, path)?;
    let mut layers: Vec<Option<Layer>> = Vec::new();
    let (mut update, mut data_load) = (None, None);
    for n in &trace.nodes {
        let phase = attr_str(&n.attr, PHASE)
            .ok_or_else(|| Error::parse(Location::file(path).with_field(PHASE), format!("{}: missing", describe(n))))?;
        let ns = duration_ns(n, path)?;
        let layer_index = || -> Result<usize> {
            let i = attr_u64(&n.attr, LAYER).ok_or_else(|| {
                Error::parse(Location::file(path).with_field(LAYER), format!("{}: missing", describe(n)))
            })?;
            if i >= crate::limits::get().layers {
                return Err(Error::parse(
                    Location::file(path).with_field(LAYER),
                    format!("{}: layer {i} is beyond the layer limit", describe(n)),
                ));
            }
            Ok(i as usize)
        };
        let strip = |suffix: &str| n.name.strip_suffix(suffix).unwrap_or(&n.name).to_string();
        match phase {
            "data" => data_load = Some(Stat::exact(ns)),
            "update" => update = Some(Stat::exact(ns)),
            "forward" | "backward" | "all_reduce" => {
                let i = layer_index()?;
                if layers.len() <= i {
                    layers.resize(i + 1, None);
                }
                let l = layers[i].get_or_insert_with(|| Layer {
                    name: String::new(),
                    forward: Stat::exact(0),
                    backward: Stat::exact(0),
                    comm: None,
                    grad_bytes: 0,
                    grad_tensors: Vec::new(),
                    util: None,
                    memory: None,
                    tp: None,
                });
                match phase {
                    "forward" => {
                        l.name = strip(".forward");
                        l.forward = Stat::exact(ns);
                    }
                    "backward" => l.backward = Stat::exact(ns),
                    _ => {
                        l.grad_bytes = attr_u64(&n.attr, "comm_size").ok_or_else(|| {
                            Error::parse(
                                Location::file(path).with_field("comm_size"),
                                format!("{}: missing", describe(n)),
                            )
                        })?;
                        if let Some(Value::Uint64List(t)) = attr(&n.attr, "dagsim.grad_tensors") {
                            l.grad_tensors = t.values.clone();
                        }
                        l.comm = attr_u64(&n.attr, "dagsim.measured_comm_ns").map(Stat::exact);
                    }
                }
            }
            other => {
                return Err(Error::parse(
                    Location::file(path).with_field(PHASE),
                    format!("{}: unknown phase `{other}` (data, forward, backward, all_reduce, update)", describe(n)),
                ))
            }
        }
    }
    let layers: Vec<Layer> = layers
        .into_iter()
        .enumerate()
        .map(|(i, l)| {
            l.ok_or_else(|| Error::parse(Location::file(path).with_field(LAYER), format!("layer {i} has no node")))
        })
        .collect::<Result<_>>()?;
    if layers.is_empty() {
        return Err(Error::parse(Location::file(path), "the trace holds no layer"));
    }
    Ok(Workload {
        name: attr_str(meta, "dagsim.workload").unwrap_or("chakra").to_string(),
        batch_per_gpu: u32_of("dagsim.batch_per_gpu")?,
        sample_bytes: get("dagsim.sample_bytes")?,
        device_sample_bytes: get("dagsim.device_sample_bytes")?,
        layers,
        update: update.unwrap_or(Stat::exact(0)),
        data_load,
        trace_iterations: u32_of("dagsim.trace_iterations")?.max(1),
        fp16: attr_bool(meta, "dagsim.fp16").unwrap_or(false),
    })
}
