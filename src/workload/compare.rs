//! Measured against synthetic: lines up a measured [`Profile`] with a [`Synthetic`] model of the
//! same network (longest common subsequence of layer kinds, so a layer one side lacks, such as
//! Caffe's missing dropout, is skipped rather than shifting everything after it), and reports
//! per-layer and whole-iteration relative errors before and after calibrating the synthetic times
//! to the measured total. Also holds the shipped validation suite (`traces/profiles/`). It reads
//! profiles and synthetic workloads; it never simulates.

use super::gpu::{GpuSpec, Precision};
use super::import::{read_profile, Profile, ProfileFormat};
use super::memory::Optimizer;
use super::synth::{synthesize, SynthOptions, Synthetic};
use super::zoo::{LayerKind, Model};
use crate::error::{Error, Result};
use serde::Serialize;
use std::path::Path;

/// One matched layer (forward + backward), times in microseconds.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LayerError {
    pub measured_name: String,
    pub synthetic_name: String,
    pub kind: LayerKind,
    pub measured_us: f64,
    /// Synthetic time before calibration.
    pub synthetic_us: f64,
}

/// The result of comparing one profile with its synthetic counterpart.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Comparison {
    pub model: String,
    pub gpu: String,
    pub batch: u32,
    /// Layers on each side (ignoring zero-cost reshapes) and how many were matched.
    pub measured_layers: usize,
    pub synthetic_layers: usize,
    pub matched: usize,
    /// Measured and synthetic forward+backward totals over all layers, microseconds.
    pub measured_total_us: f64,
    pub synthetic_total_us: f64,
    /// Measured total / synthetic total: the factor calibration applies.
    pub calibration_factor: f64,
    /// Median over matched layers of |synthetic - measured| / measured, before and after scaling
    /// the synthetic times by `calibration_factor`.
    pub median_layer_error: f64,
    pub median_layer_error_calibrated: f64,
    /// |synthetic total - measured total| / measured total, before and after calibration.
    pub iteration_error: f64,
    pub iteration_error_calibrated: f64,
    pub layers: Vec<LayerError>,
}

impl Comparison {
    /// Median per-layer error and iteration error when the synthetic times are scaled by `factor`
    /// (e.g. a factor calibrated on another model on the same GPU).
    pub fn errors_with_factor(&self, factor: f64) -> (f64, f64) {
        let layer = median(self.layers.iter().map(|l| rel(l.synthetic_us * factor, l.measured_us)).collect());
        (layer, rel(self.synthetic_total_us * factor, self.measured_total_us))
    }
}

fn rel(model: f64, measured: f64) -> f64 {
    (model - measured).abs() / measured
}

fn median(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// Compares a measured profile with a synthetic model of the same network, batch and GPU.
pub fn compare(profile: &Profile, synth: &Synthetic) -> Comparison {
    let measured: Vec<_> = profile.layers.iter().filter(|l| l.kind != LayerKind::Other).collect();
    let synthetic: Vec<_> = synth.layers.iter().filter(|l| l.kind != LayerKind::Other).collect();
    let pairs = lcs(
        &measured.iter().map(|l| l.kind).collect::<Vec<_>>(),
        &synthetic.iter().map(|l| l.kind).collect::<Vec<_>>(),
    );
    let layers: Vec<LayerError> = pairs
        .into_iter()
        .map(|(i, j)| (measured[i], synthetic[j]))
        .filter(|(m, _)| m.forward_us + m.backward_us > 0.0)
        .map(|(m, s)| LayerError {
            measured_name: m.name.clone(),
            synthetic_name: s.name.clone(),
            kind: m.kind,
            measured_us: m.forward_us + m.backward_us,
            synthetic_us: (s.forward_ns + s.backward_ns) / 1e3,
        })
        .collect();
    let measured_total_us = profile.compute_us();
    let synthetic_total_us = synth.compute_ns() / 1e3;
    let factor = measured_total_us / synthetic_total_us;
    let mut c = Comparison {
        model: synth.model.clone(),
        gpu: synth.gpu.clone(),
        batch: synth.options_batch,
        measured_layers: measured.len(),
        synthetic_layers: synthetic.len(),
        matched: layers.len(),
        measured_total_us,
        synthetic_total_us,
        calibration_factor: factor,
        median_layer_error: 0.0,
        median_layer_error_calibrated: 0.0,
        iteration_error: 0.0,
        iteration_error_calibrated: 0.0,
        layers,
    };
    (c.median_layer_error, c.iteration_error) = c.errors_with_factor(1.0);
    (c.median_layer_error_calibrated, c.iteration_error_calibrated) = c.errors_with_factor(factor);
    c
}

/// Longest common subsequence of two kind sequences, as index pairs in order.
fn lcs(a: &[LayerKind], b: &[LayerKind]) -> Vec<(usize, usize)> {
    let (n, m) = (a.len(), b.len());
    let mut t = vec![0u32; (n + 1) * (m + 1)];
    let at = |i: usize, j: usize| i * (m + 1) + j;
    for i in (0..n).rev() {
        for j in (0..m).rev() {
            t[at(i, j)] = if a[i] == b[j] { t[at(i + 1, j + 1)] + 1 } else { t[at(i + 1, j)].max(t[at(i, j + 1)]) };
        }
    }
    let (mut i, mut j, mut out) = (0, 0, Vec::new());
    while i < n && j < m {
        if a[i] == b[j] {
            out.push((i, j));
            i += 1;
            j += 1;
        } else if t[at(i + 1, j)] >= t[at(i, j + 1)] {
            i += 1;
        } else {
            j += 1;
        }
    }
    out
}

/// One shipped measured profile and the zoo model, batch and GPU it is compared with.
pub struct ValidationCase {
    pub file: &'static str,
    pub format: ProfileFormat,
    pub model: &'static str,
    pub batch: u32,
    pub gpu: &'static str,
}

/// The shipped cases (files under `traces/profiles/`). Cases sharing a GPU are listed together;
/// the first of each group is the one whose calibration factor is carried over to the others.
pub const VALIDATION_CASES: &[ValidationCase] = &[
    ValidationCase {
        file: "pipedream/resnet50/graph.txt",
        format: ProfileFormat::Pipedream,
        model: "resnet50",
        batch: 128,
        gpu: "v100-sxm2",
    },
    ValidationCase {
        file: "pipedream/resnet18/graph.txt",
        format: ProfileFormat::Pipedream,
        model: "resnet18",
        batch: 256,
        gpu: "v100-sxm2",
    },
    ValidationCase {
        file: "pipedream/vgg16/graph.txt",
        format: ProfileFormat::Pipedream,
        model: "vgg16",
        batch: 128,
        gpu: "v100-sxm2",
    },
    ValidationCase {
        file: "pipedream/alexnet/graph.txt",
        format: ProfileFormat::Pipedream,
        model: "alexnet-owt",
        batch: 256,
        gpu: "v100-sxm2",
    },
    ValidationCase {
        file: "caffe/output_alexnet.log",
        format: ProfileFormat::Caffe,
        model: "alexnet-owt",
        batch: 128,
        gpu: "titan-x-maxwell",
    },
    ValidationCase {
        file: "caffe/output_vgg_a.log",
        format: ProfileFormat::Caffe,
        model: "vgg11",
        batch: 64,
        gpu: "titan-x-maxwell",
    },
    ValidationCase {
        file: "caffe/output_googlenet.log",
        format: ProfileFormat::Caffe,
        model: "googlenet",
        batch: 128,
        gpu: "titan-x-maxwell",
    },
];

/// A validation row: the comparison plus the errors when the factor calibrated on the first case
/// of the same GPU is used instead of this case's own (a genuine out-of-sample check).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ValidationRow {
    pub file: String,
    pub comparison: Comparison,
    pub transfer_from: String,
    pub median_layer_error_transfer: f64,
    pub iteration_error_transfer: f64,
}

/// Runs every case in `VALIDATION_CASES` against the profiles under `dir`.
pub fn run_validation(dir: &Path) -> Result<Vec<ValidationRow>> {
    let mut rows: Vec<ValidationRow> = Vec::new();
    let mut anchor: Option<(&str, String, f64)> = None; // (gpu, file, factor)
    for case in VALIDATION_CASES {
        let profile = read_profile(&dir.join(case.file), case.format)?;
        if let Some(b) = profile.batch.filter(|b| *b != case.batch) {
            return Err(Error::invalid(case.file, format!("the log says batch {b}, the case says {}", case.batch)));
        }
        let model = Model::by_name(case.model, None)?;
        let gpu = GpuSpec::by_name(case.gpu)?;
        let opts =
            SynthOptions { batch: case.batch, precision: Precision::Fp32, optimizer: Optimizer::default_for(&model) };
        let synth = synthesize(&model, gpu, opts)?;
        let c = compare(&profile, &synth);
        let (from, factor) = match &anchor {
            Some((g, f, k)) if *g == case.gpu => (f.clone(), *k),
            _ => {
                anchor = Some((case.gpu, case.file.to_string(), c.calibration_factor));
                (case.file.to_string(), c.calibration_factor)
            }
        };
        let (ml, it) = c.errors_with_factor(factor);
        rows.push(ValidationRow {
            file: case.file.to_string(),
            comparison: c,
            transfer_from: from,
            median_layer_error_transfer: ml,
            iteration_error_transfer: it,
        });
    }
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lcs_skips_layers_one_side_lacks() {
        use LayerKind::*;
        let measured = [Conv, Activation, Pool, Linear, Linear];
        let synthetic = [Conv, Activation, Pool, Dropout, Linear, Activation, Linear];
        assert_eq!(lcs(&measured, &synthetic), [(0, 0), (1, 1), (2, 2), (3, 4), (4, 6)]);
    }

    #[test]
    fn median_of_even_and_odd_lists() {
        assert_eq!(median(vec![3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(vec![4.0, 1.0, 2.0, 3.0]), 2.5);
        assert!(median(vec![]).is_nan());
    }
}
