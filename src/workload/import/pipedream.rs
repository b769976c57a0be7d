//! PipeDream profiler `graph.txt`: one line per node
//! `nodeN -- Op(args) -- forward_compute_time=MS, backward_compute_time=MS, activation_size=BYTES,
//! parameter_size=BYTES`, and one tab-indented line per edge `nodeA -- nodeB`. Nodes are put in
//! forward order by a topological sort of the edges (ties by node number); the `Input` node is the
//! data load.

use super::{kind_of, number, Profile, ProfiledLayer};
use crate::error::{Error, Location, Result};
use std::collections::{BTreeMap, BinaryHeap};
use std::path::Path;

struct Node {
    line: usize,
    op: String,
    forward_ms: f64,
    backward_ms: f64,
    param_bytes: f64,
}

/// Parses `graph.txt` text; `path` names the file in errors.
pub fn read_pipedream_graph(text: &str, path: &Path) -> Result<Profile> {
    let mut nodes: BTreeMap<String, Node> = BTreeMap::new();
    let mut edges: Vec<(String, String, usize)> = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line = i + 1;
        if raw.trim().is_empty() {
            continue;
        }
        let parts: Vec<&str> = raw.trim().split(" -- ").collect();
        match parts.len() {
            2 => edges.push((parts[0].to_string(), parts[1].to_string(), line)),
            3 => {
                let mut fields = BTreeMap::new();
                for kv in parts[2].split(',') {
                    let (k, v) = kv.split_once('=').ok_or_else(|| {
                        Error::parse(Location::line(path, line), format!("expected key=value, found `{}`", kv.trim()))
                    })?;
                    fields.insert(k.trim(), v.trim());
                }
                let get = |k: &str| -> Result<f64> {
                    let v = fields
                        .get(k)
                        .ok_or_else(|| Error::parse(Location::line(path, line), format!("missing field `{k}`")))?;
                    number(v, || Location::line(path, line).with_field(k.to_string()))
                };
                let node = Node {
                    line,
                    op: parts[1].to_string(),
                    forward_ms: get("forward_compute_time")?,
                    backward_ms: get("backward_compute_time")?,
                    param_bytes: get("parameter_size")?,
                };
                nodes.insert(parts[0].to_string(), node);
            }
            _ => {
                return Err(Error::parse(
                    Location::line(path, line),
                    "expected `nodeN -- Op -- forward_compute_time=...` or `nodeA -- nodeB`",
                ))
            }
        }
    }
    if nodes.is_empty() {
        return Err(Error::parse(Location::file(path), "no node lines found: is this a PipeDream graph.txt?"));
    }
    let order = topological_order(&nodes, &edges, path)?;
    let mut profile = Profile {
        name: path.parent().and_then(|p| p.file_name()).map(|s| s.to_string_lossy().into_owned()).unwrap_or_default(),
        batch: None,
        layers: Vec::new(),
        input_us: None,
        iteration_us: None,
        iterations: 1,
    };
    for id in order {
        let n = &nodes[id];
        if n.op == "Input" {
            profile.input_us = Some(n.forward_ms * 1e3);
            continue;
        }
        let mut kind = kind_of(&n.op);
        if n.op.starts_with("Conv") && n.op.contains("groups=") {
            kind = crate::workload::zoo::LayerKind::DepthwiseConv;
        }
        profile.layers.push(ProfiledLayer {
            name: format!("{id} {}", n.op.split('(').next().unwrap_or("")),
            kind,
            forward_us: n.forward_ms * 1e3,
            backward_us: n.backward_ms * 1e3,
            comm_us: None,
            param_bytes: n.param_bytes.round() as u64,
            tensors: Vec::new(),
        });
    }
    Ok(profile)
}

/// Kahn's algorithm; among ready nodes the lowest node number goes first.
fn topological_order<'a>(
    nodes: &'a BTreeMap<String, Node>,
    edges: &[(String, String, usize)],
    path: &Path,
) -> Result<Vec<&'a String>> {
    let key = |id: &str| -> (u64, String) {
        (id.trim_start_matches(|c: char| !c.is_ascii_digit()).parse().unwrap_or(u64::MAX), id.to_string())
    };
    let mut indegree: BTreeMap<&String, usize> = nodes.keys().map(|k| (k, 0)).collect();
    let mut succ: BTreeMap<&String, Vec<&String>> = BTreeMap::new();
    for (a, b, line) in edges {
        let (Some((ka, _)), Some((kb, _))) = (nodes.get_key_value(a), nodes.get_key_value(b)) else {
            let missing = if nodes.contains_key(a) { b } else { a };
            return Err(Error::parse(Location::line(path, *line), format!("edge names unknown node `{missing}`")));
        };
        succ.entry(ka).or_default().push(kb);
        *indegree.get_mut(kb).expect("known node") += 1;
    }
    let mut ready: BinaryHeap<std::cmp::Reverse<((u64, String), &String)>> =
        indegree.iter().filter(|(_, d)| **d == 0).map(|(k, _)| std::cmp::Reverse((key(k), *k))).collect();
    let mut order = Vec::with_capacity(nodes.len());
    while let Some(std::cmp::Reverse((_, id))) = ready.pop() {
        order.push(id);
        for s in succ.get(id).into_iter().flatten() {
            let d = indegree.get_mut(s).expect("known node");
            *d -= 1;
            if *d == 0 {
                ready.push(std::cmp::Reverse((key(s), *s)));
            }
        }
    }
    if order.len() != nodes.len() {
        let stuck = indegree.iter().find(|(_, d)| **d > 0).map(|(k, _)| k.as_str()).unwrap_or("?");
        let line = nodes.get(stuck).map(|n| n.line).unwrap_or(0);
        return Err(Error::parse(Location::line(path, line), format!("the graph has a cycle through `{stuck}`")));
    }
    Ok(order)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nodes_are_ordered_by_edges_and_input_is_split_off() {
        let text = "node3 -- ReLU(inplace) -- forward_compute_time=0.5, backward_compute_time=0.25, activation_size=8.0, parameter_size=0.0\n\
                    node1 -- Input -- forward_compute_time=10.0, backward_compute_time=0.0, activation_size=8.0, parameter_size=0.0\n\
                    node2 -- Conv2d(3, 8, kernel_size=(3, 3)) -- forward_compute_time=1.5, backward_compute_time=3.0, activation_size=8.0, parameter_size=896.0\n\
                    \tnode1 -- node2\n\tnode2 -- node3\n";
        let p = read_pipedream_graph(text, Path::new("m/graph.txt")).unwrap();
        assert_eq!(p.name, "m");
        assert_eq!(p.input_us, Some(10_000.0));
        let names: Vec<_> = p.layers.iter().map(|l| l.name.as_str()).collect();
        assert_eq!(names, ["node2 Conv2d", "node3 ReLU"]);
        assert_eq!(p.layers[0].param_bytes, 896);
        assert_eq!(p.layers[0].backward_us, 3000.0);
    }

    #[test]
    fn bad_lines_are_named() {
        let text =
            "node1 -- Input -- forward_compute_time=x, backward_compute_time=0, activation_size=1, parameter_size=0\n";
        let e = read_pipedream_graph(text, Path::new("g.txt")).unwrap_err().to_string();
        assert!(e.contains("g.txt:1") && e.contains("forward_compute_time"), "{e}");
        let text = "node1 -- Input -- forward_compute_time=1, backward_compute_time=0, activation_size=1, parameter_size=0\n\tnode1 -- node9\n";
        let e = read_pipedream_graph(text, Path::new("g.txt")).unwrap_err().to_string();
        assert!(e.contains("g.txt:2") && e.contains("node9"), "{e}");
    }
}
