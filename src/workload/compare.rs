//! Measured against synthetic: lines up a measured [`Profile`] with a [`Synthetic`] model of the
//! same network (longest common subsequence of layer kinds, so a layer one side lacks, such as
//! Caffe's missing dropout, is skipped rather than shifting everything after it), and reports
//! per-layer and whole-iteration relative errors before and after calibrating the synthetic times
//! to the measured total. Calibration is `measured ~ factor x synthetic + overhead` per layer: the
//! factor makes the whole iteration match; the overhead is the fixed floor a host-timed profiler
//! (PipeDream) adds to every layer, learned from other profiles of the same profiler, never from
//! the one being checked. Also holds the shipped validation suite (`traces/profiles/`). It reads
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
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
pub struct Comparison {
    pub model: String,
    /// The GPU spec the profile ran on (`gpu_model`, as in predictions).
    #[serde(rename = "gpu_model")]
    pub gpu: String,
    /// Samples per GPU of the profiled run (`batch_per_gpu`, as in predictions).
    #[serde(rename = "batch_per_gpu")]
    pub batch: u32,
    /// Layers on each side (ignoring zero-cost reshapes) and how many were matched.
    pub measured_layers: usize,
    pub synthetic_layers: usize,
    pub matched: usize,
    /// Measured and synthetic forward+backward totals over all layers, microseconds.
    pub measured_total_us: f64,
    pub synthetic_total_us: f64,
    /// Measured layers with a positive time: each carries `layer_overhead_us` once.
    pub timed_layers: usize,
    /// Fixed time per measured layer assumed when calibrating (the profiler's floor), microseconds;
    /// 0 for profilers that time layers on the device.
    pub layer_overhead_us: f64,
    /// The factor calibration applies to the synthetic times: (measured total - timed layers x
    /// overhead) / synthetic total, so the calibrated iteration equals the measured one.
    pub calibration_factor: f64,
    /// Median over matched layers of |synthetic - measured| / measured, before and after
    /// calibration (synthetic x `calibration_factor` + `layer_overhead_us`).
    #[serde(rename = "median_layer_abs_error")]
    pub median_layer_error: f64,
    #[serde(rename = "median_layer_abs_error_calibrated")]
    pub median_layer_error_calibrated: f64,
    /// |synthetic total - measured total| / measured total, before and after calibration.
    #[serde(rename = "iteration_abs_error")]
    pub iteration_error: f64,
    #[serde(rename = "iteration_abs_error_calibrated")]
    pub iteration_error_calibrated: f64,
    pub layers: Vec<LayerError>,
}

impl Comparison {
    /// Median per-layer error and iteration error when each synthetic layer time becomes
    /// `factor` x synthetic + `overhead_us` (e.g. a factor calibrated on another model on the same
    /// GPU).
    pub fn errors_with(&self, factor: f64, overhead_us: f64) -> (f64, f64) {
        let layer =
            median(self.layers.iter().map(|l| rel(l.synthetic_us * factor + overhead_us, l.measured_us)).collect());
        let total = self.synthetic_total_us * factor + self.timed_layers as f64 * overhead_us;
        (layer, rel(total, self.measured_total_us))
    }

    /// The factor that makes the calibrated iteration equal the measured one when every timed
    /// layer carries `overhead_us`; `None` if the overhead alone reaches the measured total.
    pub fn factor_for(&self, overhead_us: f64) -> Option<f64> {
        let rest = self.measured_total_us - self.timed_layers as f64 * overhead_us;
        (rest > 0.0 && self.synthetic_total_us > 0.0).then(|| rest / self.synthetic_total_us)
    }

    /// Recalibrates with `overhead_us` per timed layer (falls back to none if it is too large).
    pub fn calibrate_with_overhead(&mut self, overhead_us: f64) {
        let (overhead_us, factor) = match self.factor_for(overhead_us) {
            Some(f) => (overhead_us, f),
            None => (0.0, self.measured_total_us / self.synthetic_total_us),
        };
        self.layer_overhead_us = overhead_us;
        self.calibration_factor = factor;
        (self.median_layer_error_calibrated, self.iteration_error_calibrated) = self.errors_with(factor, overhead_us);
    }
}

/// The per-layer overhead (whole microseconds) that minimises the mean relative per-layer error
/// over `comparisons`, each calibrated to its own measured iteration: the floor a host-timed
/// profiler adds, estimated from profiles other than the one it is then applied to. 0 if none
/// helps.
pub fn fit_layer_overhead(comparisons: &[&Comparison]) -> f64 {
    let mean_error = |c_us: f64| -> Option<f64> {
        let (mut sum, mut n) = (0.0, 0usize);
        for c in comparisons {
            let k = c.factor_for(c_us)?;
            for l in &c.layers {
                sum += rel(l.synthetic_us * k + c_us, l.measured_us);
                n += 1;
            }
        }
        (n > 0).then(|| sum / n as f64)
    };
    // No layer can take less than the floor, so the smallest measured layer bounds the search.
    let ceiling = comparisons.iter().flat_map(|c| c.layers.iter().map(|l| l.measured_us)).fold(f64::INFINITY, f64::min);
    let mut best = (0.0, mean_error(0.0).unwrap_or(f64::INFINITY));
    let mut c_us = 1.0;
    while c_us < ceiling {
        if let Some(e) = mean_error(c_us) {
            if e < best.1 {
                best = (c_us, e);
            }
        }
        c_us += 1.0;
    }
    best.0
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
    let mut c = Comparison {
        model: synth.model.clone(),
        gpu: synth.gpu.clone(),
        batch: synth.options_batch,
        measured_layers: measured.len(),
        synthetic_layers: synthetic.len(),
        matched: layers.len(),
        measured_total_us,
        synthetic_total_us,
        timed_layers: profile.layers.iter().filter(|l| l.forward_us + l.backward_us > 0.0).count(),
        layers,
        ..Default::default()
    };
    (c.median_layer_error, c.iteration_error) = c.errors_with(1.0, 0.0);
    c.calibrate_with_overhead(0.0);
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
    /// The profile's path under the profiles directory (`profile` in CSV and JSON).
    #[serde(rename = "profile")]
    pub file: String,
    pub comparison: Comparison,
    /// Profiles the per-layer overhead was learned from (the other host-timed profiles of the
    /// same profiler); empty when the profiler times layers on the device.
    pub overhead_from: Vec<String>,
    pub transfer_from: String,
    #[serde(rename = "median_layer_abs_error_transfer")]
    pub median_layer_error_transfer: f64,
    #[serde(rename = "iteration_abs_error_transfer")]
    pub iteration_error_transfer: f64,
}

/// Runs every case in `VALIDATION_CASES` against the profiles under `dir`. A host-timed profile's
/// per-layer overhead is learned from the other cases of its profiler (leave one out), then its
/// factor from its own measured iteration.
pub fn run_validation(dir: &Path) -> Result<Vec<ValidationRow>> {
    let mut raw = Vec::with_capacity(VALIDATION_CASES.len());
    for case in VALIDATION_CASES {
        let profile = read_profile(&dir.join(case.file), case.format)?;
        if let Some(b) = profile.batch.filter(|b| *b != case.batch) {
            return Err(Error::invalid(case.file, format!("the log says batch {b}, the case says {}", case.batch)));
        }
        let model = Model::by_name(case.model, None)?;
        let gpu = GpuSpec::by_name(case.gpu)?;
        let opts =
            SynthOptions { batch: case.batch, precision: Precision::Fp32, optimizer: Optimizer::default_for(&model) };
        raw.push(compare(&profile, &synthesize(&model, gpu, opts)?));
    }
    let mut rows: Vec<ValidationRow> = Vec::with_capacity(raw.len());
    for (i, case) in VALIDATION_CASES.iter().enumerate() {
        let peers: Vec<usize> = (0..raw.len())
            .filter(|&j| j != i && case.format.host_timed() && VALIDATION_CASES[j].format == case.format)
            .collect();
        let overhead = if peers.is_empty() {
            0.0
        } else {
            fit_layer_overhead(&peers.iter().map(|&j| &raw[j]).collect::<Vec<_>>())
        };
        let mut c = raw[i].clone();
        c.calibrate_with_overhead(overhead);
        // The first case on this GPU lends its factor, recomputed with this case's overhead.
        let a = VALIDATION_CASES.iter().position(|x| x.gpu == case.gpu).expect("the case itself matches");
        let factor =
            raw[a].factor_for(c.layer_overhead_us).unwrap_or(raw[a].measured_total_us / raw[a].synthetic_total_us);
        let (ml, it) = c.errors_with(factor, c.layer_overhead_us);
        rows.push(ValidationRow {
            file: case.file.to_string(),
            comparison: c,
            overhead_from: peers.iter().map(|&j| VALIDATION_CASES[j].file.to_string()).collect(),
            transfer_from: VALIDATION_CASES[a].file.to_string(),
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

    fn comparison(layers: &[(f64, f64)], timed_layers: usize) -> Comparison {
        let layers: Vec<LayerError> = layers
            .iter()
            .map(|&(measured_us, synthetic_us)| LayerError {
                measured_name: String::new(),
                synthetic_name: String::new(),
                kind: LayerKind::Conv,
                measured_us,
                synthetic_us,
            })
            .collect();
        let mut c = Comparison {
            batch: 1,
            measured_layers: layers.len(),
            synthetic_layers: layers.len(),
            matched: layers.len(),
            measured_total_us: layers.iter().map(|l| l.measured_us).sum(),
            synthetic_total_us: layers.iter().map(|l| l.synthetic_us).sum(),
            timed_layers,
            layers,
            ..Default::default()
        };
        c.calibrate_with_overhead(0.0);
        c
    }

    #[test]
    fn recovers_a_profilers_floor_from_other_profiles() {
        // Two "profiles" measured as 1.5 x synthetic + 300 us per layer.
        let a = comparison(&[(1500.0 + 300.0, 1000.0), (15.0 + 300.0, 10.0), (150.0 + 300.0, 100.0)], 3);
        let b = comparison(&[(30.0 + 300.0, 20.0), (3000.0 + 300.0, 2000.0)], 2);
        assert_eq!(fit_layer_overhead(&[&a, &b]), 300.0);
        let mut c = comparison(&[(60.0 + 300.0, 40.0), (600.0 + 300.0, 400.0), (6.0 + 300.0, 4.0)], 3);
        assert!(c.median_layer_error_calibrated > 0.3, "without the floor, small layers are far off");
        c.calibrate_with_overhead(300.0);
        assert!((c.calibration_factor - 1.5).abs() < 1e-12);
        assert!(c.median_layer_error_calibrated < 1e-12 && c.iteration_error_calibrated < 1e-12);
        // A floor larger than the measured iteration allows is refused (falls back to none).
        c.calibrate_with_overhead(1e6);
        assert_eq!(c.layer_overhead_us, 0.0);
    }

    #[test]
    fn median_of_even_and_odd_lists() {
        assert_eq!(median(vec![3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(vec![4.0, 1.0, 2.0, 3.0]), 2.5);
        assert!(median(vec![]).is_nan());
    }
}
