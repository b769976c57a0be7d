//! Caffe `caffe time` logs (as convnet-benchmarks publishes them). A log holds one or more nets;
//! for each: the printed net definition (`layer { name type ... }` blocks, read for layer types
//! and convolution/inner-product settings), the set-up lines (`X <- bottom`, `Setting up X`,
//! `Top shape: N C H W`, read for batch size and shapes, from which parameter counts follow), and
//! the `Average time per layer` table (`NAME forward: T ms.` / `backward: T ms.`).

use super::{kind_of, number, Profile, ProfiledLayer};
use crate::error::{Error, Location, Result};
use std::collections::HashMap;
use std::path::Path;

/// Settings of one layer from the printed net definition.
#[derive(Default, Clone)]
struct Def {
    kind: String,
    num_output: Option<u64>,
    kernel: Option<(u64, u64)>,
    group: u64,
    bias: bool,
}

/// Parses every net in a Caffe time log.
pub fn read_caffe_time_log(text: &str, path: &Path) -> Result<Vec<Profile>> {
    let lines: Vec<&str> = text.lines().collect();
    let starts: Vec<usize> = lines
        .iter()
        .enumerate()
        .filter(|(_, l)| l.contains("Initializing net from parameters"))
        .map(|(i, _)| i)
        .collect();
    if starts.is_empty() {
        return Err(Error::parse(
            Location::file(path),
            "no `Initializing net from parameters` line: is this a Caffe time log?",
        ));
    }
    let mut nets = Vec::new();
    for (k, &s) in starts.iter().enumerate() {
        let end = starts.get(k + 1).copied().unwrap_or(lines.len());
        nets.push(parse_net(&lines[s..end], s, path)?);
    }
    Ok(nets)
}

/// The text after the glog prefix (`I0228 23:01:58.835140 24487 caffe.cpp:308] `), if any.
fn message(line: &str) -> Option<&str> {
    let first = line.chars().next()?;
    if !matches!(first, 'I' | 'W' | 'E' | 'F') {
        return None;
    }
    line.split_once("] ").map(|(_, m)| m)
}

fn parse_net(lines: &[&str], offset: usize, path: &Path) -> Result<Profile> {
    let at = |i: usize| Location::line(path, offset + i + 1);
    // 1. Net definition: plain lines (no glog prefix) after the "Initializing" line.
    let mut defs: HashMap<String, Def> = HashMap::new();
    let mut name = String::new();
    let (mut depth, mut current): (i32, Option<(String, Def)>) = (0, None);
    for raw in lines.iter().skip(1).take_while(|l| message(l).is_none()) {
        let l = raw.trim();
        if l.ends_with('{') {
            if depth == 0 && l.starts_with("layer") {
                current = Some((String::new(), Def { group: 1, bias: true, ..Def::default() }));
            }
            depth += 1;
            continue;
        }
        if l == "}" {
            depth -= 1;
            if depth == 0 {
                if let Some((n, d)) = current.take() {
                    defs.insert(n, d);
                }
            }
            continue;
        }
        let Some((key, value)) = l.split_once(':') else { continue };
        let value = value.trim().trim_matches('"');
        if depth == 0 && key == "name" {
            name = value.to_string();
        }
        let Some((lname, def)) = current.as_mut() else { continue };
        let int = value.parse::<u64>().ok();
        match (depth, key) {
            (1, "name") => *lname = value.to_string(),
            (1, "type") => def.kind = value.to_string(),
            (_, "num_output") => def.num_output = int,
            (_, "kernel_size") if def.kernel.is_none() => def.kernel = int.map(|k| (k, k)),
            (_, "kernel_h") => def.kernel = Some((int.unwrap_or(1), def.kernel.map_or(1, |k| k.1))),
            (_, "kernel_w") => def.kernel = Some((def.kernel.map_or(1, |k| k.0), int.unwrap_or(1))),
            (_, "group") => def.group = int.unwrap_or(1).max(1),
            (_, "bias_term") => def.bias = value != "false",
            _ => {}
        }
    }

    // 2. Set-up lines: bottoms of each layer and the shape of each top.
    let mut bottoms: HashMap<String, Vec<String>> = HashMap::new();
    let mut tops: HashMap<String, String> = HashMap::new();
    let mut shapes: HashMap<String, Vec<u64>> = HashMap::new(); // blob -> shape
    let mut setting_up: Option<String> = None;
    let mut batch = None;
    // 3. The timing table.
    let mut times: Vec<(String, f64, f64, usize)> = Vec::new();
    let mut iteration_ms = None;
    for (i, raw) in lines.iter().enumerate() {
        let Some(m) = message(raw) else { continue };
        if let Some((layer, bottom)) = m.split_once(" <- ") {
            bottoms.entry(layer.trim().to_string()).or_default().push(bottom.trim().to_string());
        } else if let Some((layer, top)) = m.split_once(" -> ") {
            tops.insert(layer.trim().to_string(), top.trim_end_matches(" (in-place)").trim().to_string());
        } else if let Some(layer) = m.strip_prefix("Setting up ") {
            setting_up = Some(layer.trim().to_string());
        } else if let Some(shape) = m.strip_prefix("Top shape: ") {
            let dims: Vec<u64> =
                shape.split_whitespace().take_while(|d| !d.starts_with('(')).filter_map(|d| d.parse().ok()).collect();
            if let Some(layer) = &setting_up {
                if let Some(top) = tops.get(layer) {
                    if batch.is_none() {
                        batch = dims.first().map(|&b| b as u32);
                    }
                    shapes.insert(top.clone(), dims);
                }
            }
        } else if let Some(v) = m.strip_prefix("Average Forward-Backward:") {
            iteration_ms = Some(number(v.trim().trim_end_matches("ms."), || at(i))?);
        } else if let Some((layer, rest)) = m.split_once("\tforward:").or_else(|| m.split_once(" forward:")) {
            if m.starts_with("Average") {
                continue;
            }
            let ms = number(rest.trim().trim_end_matches("ms."), || at(i).with_field("forward"))?;
            times.push((layer.trim().to_string(), ms, 0.0, i));
        } else if let Some((layer, rest)) = m.split_once("\tbackward:").or_else(|| m.split_once(" backward:")) {
            if m.starts_with("Average") {
                continue;
            }
            let ms = number(rest.trim().trim_end_matches("ms."), || at(i).with_field("backward"))?;
            match times.last_mut() {
                Some(t) if t.0 == layer.trim() => t.2 = ms,
                _ => {
                    return Err(Error::parse(
                        at(i),
                        format!("backward time of `{}` without its forward line", layer.trim()),
                    ))
                }
            }
        }
    }
    if times.is_empty() {
        return Err(Error::parse(at(0), "the net has no `Average time per layer` table"));
    }
    // Caffe closes the table with `Average Forward-Backward`; a log cut short (a killed job, a
    // partial copy) would otherwise lose its last layers without a word.
    let last_time_line = times.last().map_or(0, |t| t.3);
    if iteration_ms.is_none() || lines.iter().skip(last_time_line).all(|l| !l.contains("Average Forward-Backward")) {
        let last = lines.len().saturating_sub(1);
        return Err(Error::parse(
            at(last),
            format!(
                "the log ends inside the per-layer time table (last layer read: `{}`, no `Average \
                 Forward-Backward` line after it): the file looks truncated",
                times.last().map_or("", |t| t.0.as_str())
            ),
        ));
    }
    let mut profile = Profile {
        name,
        batch,
        layers: Vec::new(),
        input_us: None,
        iteration_us: iteration_ms.map(|ms| ms * 1e3),
        iterations: 1,
    };
    for (layer, fwd, bwd, _line) in times {
        let def = defs.get(&layer).cloned().unwrap_or_default();
        if matches!(def.kind.as_str(), "Input" | "Data" | "DummyData") {
            profile.input_us = Some(fwd * 1e3);
            continue;
        }
        let in_shape = bottoms.get(&layer).and_then(|b| b.first()).and_then(|b| shapes.get(b));
        let params = param_count(&def, in_shape);
        let mut kind = kind_of(&def.kind);
        if kind == crate::workload::zoo::LayerKind::Conv && def.group > 1 {
            let cin = in_shape.and_then(|s| s.get(1)).copied().unwrap_or(0);
            if cin / def.group <= 8 {
                kind = crate::workload::zoo::LayerKind::DepthwiseConv;
            }
        }
        profile.layers.push(ProfiledLayer {
            name: layer,
            kind,
            forward_us: fwd * 1e3,
            backward_us: bwd * 1e3,
            comm_us: None,
            param_bytes: params * 4,
            tensors: Vec::new(),
        });
    }
    Ok(profile)
}

/// Learnable parameters of a convolution or inner-product layer from its settings and input shape.
fn param_count(def: &Def, in_shape: Option<&Vec<u64>>) -> u64 {
    let (Some(out), Some(shape)) = (def.num_output, in_shape) else { return 0 };
    let bias = if def.bias { out } else { 0 };
    match def.kind.as_str() {
        "Convolution" => {
            let (kh, kw) = def.kernel.unwrap_or((1, 1));
            let cin = shape.get(1).copied().unwrap_or(0);
            out * (cin / def.group) * kh * kw + bias
        }
        "InnerProduct" => out * shape.iter().skip(1).product::<u64>() + bias,
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LOG: &str = "I0228 23:01:58.1 1 caffe.cpp:1] Initializing net from parameters: \n\
name: \"tiny\"\n\
layer {\n  name: \"input\"\n  type: \"Input\"\n}\n\
layer {\n  name: \"conv1\"\n  type: \"Convolution\"\n  convolution_param {\n    num_output: 8\n    kernel_size: 3\n  }\n}\n\
layer {\n  name: \"fc\"\n  type: \"InnerProduct\"\n  inner_product_param {\n    num_output: 10\n  }\n}\n\
I0228 1 net.cpp:399] input -> data\n\
I0228 1 net.cpp:141] Setting up input\n\
I0228 1 net.cpp:148] Top shape: 16 3 8 8 (3072)\n\
I0228 1 net.cpp:425] conv1 <- data\n\
I0228 1 net.cpp:399] conv1 -> c1\n\
I0228 1 net.cpp:141] Setting up conv1\n\
I0228 1 net.cpp:148] Top shape: 16 8 6 6 (4608)\n\
I0228 1 net.cpp:425] fc <- c1\n\
I0228 1 net.cpp:399] fc -> out\n\
I0228 1 net.cpp:141] Setting up fc\n\
I0228 1 net.cpp:148] Top shape: 16 10 (160)\n\
I0228 1 caffe.cpp:366] Average time per layer: \n\
I0228 1 caffe.cpp:369]      input\tforward: 0.002 ms.\n\
I0228 1 caffe.cpp:372]      input\tbackward: 0.001 ms.\n\
I0228 1 caffe.cpp:369]      conv1\tforward: 1.5 ms.\n\
I0228 1 caffe.cpp:372]      conv1\tbackward: 3 ms.\n\
I0228 1 caffe.cpp:369]         fc\tforward: 0.5 ms.\n\
I0228 1 caffe.cpp:372]         fc\tbackward: 0.25 ms.\n\
I0228 1 caffe.cpp:381] Average Forward-Backward: 5.3 ms.\n";

    #[test]
    fn reads_types_shapes_parameters_and_times() {
        let nets = read_caffe_time_log(LOG, Path::new("t.log")).unwrap();
        let p = &nets[0];
        assert_eq!(p.name, "tiny");
        assert_eq!(p.batch, Some(16));
        assert_eq!(p.input_us, Some(2.0));
        assert_eq!(p.iteration_us, Some(5300.0));
        assert_eq!(p.layers.len(), 2);
        assert_eq!(p.layers[0].param_bytes, (8 * 3 * 9 + 8) * 4);
        assert_eq!(p.layers[1].param_bytes, (10 * 8 * 36 + 10) * 4);
        assert_eq!(p.layers[0].backward_us, 3000.0);
        assert_eq!(p.layers[1].kind, crate::workload::zoo::LayerKind::Linear);
    }

    #[test]
    fn bad_numbers_and_other_files_are_reported() {
        let bad = LOG.replace("forward: 1.5 ms.", "forward: abc ms.");
        let e = read_caffe_time_log(&bad, Path::new("t.log")).unwrap_err().to_string();
        assert!(e.contains("t.log:") && e.contains("forward") && e.contains("abc"), "{e}");
        let e = read_caffe_time_log("hello\n", Path::new("t.log")).unwrap_err().to_string();
        assert!(e.contains("Caffe time log"), "{e}");
    }
}
