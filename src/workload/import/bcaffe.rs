//! B-Caffe per-parameter logs (`logdata/tmp*comm.log` in shyhuai/B-Caffe): each dump lists every
//! learnable blob in forward order as `[index, elements, backward_us, comm_us]` (the `o` variant
//! adds a merged-communication column). Blob pairs (weights, bias) form one layer and share a
//! backward time. Dumps whose times are all zero (written before training) are skipped; the
//! others are averaged. The log has no forward times, so forward is 0.

use super::{number, Profile, ProfiledLayer};
use crate::error::{Error, Location, Result};
use crate::workload::zoo::LayerKind;
use std::path::Path;

struct Blob {
    line: usize,
    elements: u64,
    backward_us: f64,
    comm_us: f64,
}

/// Parses a B-Caffe communication log.
pub fn read_bcaffe_comm_log(text: &str, path: &Path) -> Result<Profile> {
    let mut dumps: Vec<Vec<Blob>> = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line = i + 1;
        let Some(body) = raw.split_once("] [").map(|(_, b)| b) else { continue };
        let body = body.trim_end().trim_end_matches(']');
        let f: Vec<&str> = body.split(',').map(str::trim).collect();
        if f.len() < 4 {
            return Err(Error::parse(
                Location::line(path, line),
                format!("expected [index, elements, backward_us, comm_us], found {} fields", f.len()),
            ));
        }
        let at = |k: &str| Location::line(path, line).with_field(k.to_string());
        let index = f[0]
            .parse::<usize>()
            .map_err(|_| Error::parse(at("index"), format!("expected a blob index, found `{}`", f[0])))?;
        let blob = Blob {
            line,

            elements: number(f[1], || at("elements"))? as u64,
            backward_us: number(f[2], || at("backward_us"))?,
            comm_us: number(f[3], || at("comm_us"))?,
        };
        if index == 0 {
            dumps.push(Vec::new());
        }
        match dumps.last_mut() {
            Some(d) if d.len() == index => d.push(blob),
            _ => {
                return Err(Error::parse(
                    Location::line(path, blob.line),
                    format!("blob index {index} out of sequence (each dump must count up from 0)"),
                ))
            }
        }
    }
    let n = dumps.first().map_or(0, Vec::len);
    if n == 0 {
        return Err(Error::parse(Location::file(path), "no `[index, elements, backward_us, comm_us]` lines found"));
    }
    if let Some(d) = dumps.iter().find(|d| d.len() != n) {
        return Err(Error::parse(
            Location::line(path, d[0].line),
            format!("this dump lists {} blobs, the first one {n}", d.len()),
        ));
    }
    let measured: Vec<&Vec<Blob>> = dumps.iter().filter(|d| d.iter().any(|b| b.backward_us > 0.0)).collect();
    if measured.is_empty() {
        return Err(Error::parse(Location::file(path), "every dump has zero times (the log ends before training)"));
    }
    let k = measured.len() as f64;
    let mean = |f: &dyn Fn(&Blob) -> f64, i: usize| measured.iter().map(|d| f(&d[i])).sum::<f64>() / k;
    let mut layers = Vec::new();
    let mut i = 0;
    while i < n {
        // A bias blob follows its weights and repeats their backward time.
        let pair = i + 1 < n && measured[0][i + 1].backward_us == measured[0][i].backward_us;
        let blobs = if pair { i..i + 2 } else { i..i + 1 };
        layers.push(ProfiledLayer {
            name: format!("param_layer{}", layers.len()),
            kind: LayerKind::Other,
            forward_us: 0.0,
            backward_us: mean(&|b| b.backward_us, i),
            comm_us: Some(blobs.clone().map(|j| mean(&|b| b.comm_us, j)).sum()),
            param_bytes: blobs.clone().map(|j| measured[0][j].elements * 4).sum(),
            tensors: blobs.clone().map(|j| measured[0][j].elements * 4).collect(),
        });
        i = blobs.end;
    }
    Ok(Profile {
        name: path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default(),
        batch: None,
        layers,
        input_us: None,
        iteration_us: None,
        iterations: measured.len() as u32,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pairs_blobs_and_skips_the_empty_dump() {
        let text = "I0 1 distributed.cpp:112] [0, 100, 0, 0]\nI0 1 distributed.cpp:112] [1, 10, 0, 0]\nI0 1 distributed.cpp:112] [2, 50, 0, 0]\n\
                    I0 1 distributed.cpp:112] [0, 100, 20.5, 7]\nI0 1 distributed.cpp:112] [1, 10, 20.5, 3]\nI0 1 distributed.cpp:112] [2, 50, 9, 4, 1]\n";
        let p = read_bcaffe_comm_log(text, Path::new("x.log")).unwrap();
        assert_eq!(p.iterations, 1);
        assert_eq!(p.layers.len(), 2);
        assert_eq!(p.layers[0].param_bytes, 440);
        assert_eq!(p.layers[0].tensors, [400, 40], "weights and bias blobs are the layer's tensors");
        assert_eq!(p.layers[0].comm_us, Some(10.0));
        assert_eq!(p.layers[1].backward_us, 9.0);
    }

    #[test]
    fn out_of_order_blobs_are_named() {
        let e =
            read_bcaffe_comm_log("I0] [0, 1, 1, 1]\nI0] [2, 1, 1, 1]\n", Path::new("x.log")).unwrap_err().to_string();
        assert!(e.contains("x.log:2") && e.contains("out of sequence"), "{e}");
    }
}
