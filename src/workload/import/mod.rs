//! Importers for real per-layer profiles, so a user's own measurements drive the simulation:
//! PipeDream profiler `graph.txt`, Caffe `time` logs, B-Caffe per-layer communication logs and
//! PyTorch profiler (Kineto) Chrome-trace JSON. Each reader returns a [`Profile`] (layers with a
//! [`LayerKind`], times in microseconds, parameter bytes); [`Profile::to_workload`] turns it into
//! the ordinary [`Workload`]. Readers only parse; they never time or simulate anything.

mod bcaffe;
mod caffe;
pub mod chakra;
mod kineto;
mod pipedream;

pub use bcaffe::read_bcaffe_comm_log;
pub use caffe::read_caffe_time_log;
pub use chakra::{read_chakra_et, write_chakra_et};
pub use kineto::read_kineto_trace;
pub use pipedream::read_pipedream_graph;

use super::zoo::LayerKind;
use super::{Layer, Stat, Workload};
use crate::error::{Error, Location, Result};
use crate::units::us_to_ns;
use serde::Serialize;
use std::path::Path;

/// Profile formats the importers read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ProfileFormat {
    /// PipeDream profiler `graph.txt`.
    Pipedream,
    /// Caffe `caffe time` log (as in convnet-benchmarks).
    Caffe,
    /// B-Caffe per-parameter backward/communication log (`logdata/*comm.log`).
    Bcaffe,
    /// PyTorch profiler (Kineto) Chrome-trace JSON.
    Kineto,
    /// MLCommons Chakra execution trace (protobuf, one rank).
    Chakra,
}

impl ProfileFormat {
    /// Whether the profiler times each layer from the host, waiting for the GPU around it, so every
    /// measured layer carries a fixed floor (hook, synchronise and Python costs) on top of its
    /// kernels. PipeDream's profiler does: its smallest layers (a ReLU over 1 M elements, about 10
    /// us of memory traffic on a V100) measure 0.3-0.5 ms. Caffe's `time` (CUDA events around each
    /// layer) and Kineto (kernel durations recorded on the device) do not.
    pub fn host_timed(self) -> bool {
        matches!(self, ProfileFormat::Pipedream)
    }
}

impl std::str::FromStr for ProfileFormat {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "pipedream" => Ok(ProfileFormat::Pipedream),
            "caffe" => Ok(ProfileFormat::Caffe),
            "bcaffe" | "b-caffe" => Ok(ProfileFormat::Bcaffe),
            "kineto" | "chrome" | "pytorch" => Ok(ProfileFormat::Kineto),
            "chakra" | "et" => Ok(ProfileFormat::Chakra),
            _ => {
                Err(format!("unknown profile format `{s}` (expected one of: pipedream, caffe, bcaffe, kineto, chakra)"))
            }
        }
    }
}

/// One measured layer.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ProfiledLayer {
    pub name: String,
    pub kind: LayerKind,
    pub forward_us: f64,
    pub backward_us: f64,
    /// Measured gradient communication, if the profile has it.
    pub comm_us: Option<f64>,
    /// Bytes of learnable parameters (= gradient bytes in FP32 training).
    pub param_bytes: u64,
    /// The parameter tensors in bytes (summing to `param_bytes`) when the profile lists them
    /// (B-Caffe's per-blob logs); empty otherwise.
    pub tensors: Vec<u64>,
}

/// A measured per-layer profile of one training iteration on one GPU.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Profile {
    pub name: String,
    /// Samples per iteration, if the file states it.
    pub batch: Option<u32>,
    /// Network layers in forward order (the input/data layer is in `input_us`).
    pub layers: Vec<ProfiledLayer>,
    /// Time of the input layer, if the profile has one.
    pub input_us: Option<f64>,
    /// Measured whole forward+backward time, if the file states it separately from the layers.
    pub iteration_us: Option<f64>,
    /// Iterations the profile averaged over (1 if it gives averages only).
    pub iterations: u32,
}

impl Profile {
    /// Sum of forward and backward layer times, microseconds.
    pub fn compute_us(&self) -> f64 {
        self.layers.iter().map(|l| l.forward_us + l.backward_us).sum()
    }

    /// A workload's layers as a profile (times to microseconds; the kind is not known).
    pub fn from_workload(w: &Workload) -> Profile {
        let us = |s: &Stat| s.mean_ns as f64 / 1e3;
        Profile {
            name: w.name.clone(),
            batch: (w.batch_per_gpu > 0).then_some(w.batch_per_gpu),
            layers: w
                .layers
                .iter()
                .map(|l| ProfiledLayer {
                    name: l.name.clone(),
                    kind: kind_of(&l.name),
                    forward_us: us(&l.forward),
                    backward_us: us(&l.backward),
                    comm_us: l.comm.as_ref().map(us),
                    param_bytes: l.grad_bytes,
                    tensors: l.grad_tensors.clone(),
                })
                .collect(),
            input_us: w.data_load.as_ref().map(us),
            iteration_us: None,
            iterations: w.trace_iterations,
        }
    }

    /// The workload the DAG builder takes (batch 0 if unknown: the caller fills it in).
    pub fn to_workload(&self) -> Workload {
        let t = |us: f64| Stat::exact(us_to_ns(us));
        Workload {
            name: self.name.clone(),
            batch_per_gpu: self.batch.unwrap_or(0),
            sample_bytes: 0,
            device_sample_bytes: 0,
            layers: self
                .layers
                .iter()
                .map(|l| Layer {
                    name: l.name.clone(),
                    forward: t(l.forward_us),
                    backward: t(l.backward_us),
                    comm: l.comm_us.filter(|c| *c > 0.0).map(t),
                    grad_bytes: l.param_bytes,
                    grad_tensors: l.tensors.clone(),
                    util: None,
                    memory: None,
                    tp: None,
                })
                .collect(),
            update: Stat::exact(0),
            data_load: self.input_us.map(t),
            trace_iterations: self.iterations,
            fp16: false,
        }
    }
}

/// Reads a text input (trace or profile). A binary file is refused with what it looks like: a
/// Chakra execution trace (`.et`, `.et.gz`, or gzip data) gets the flag that reads it.
pub fn read_text(path: &Path) -> Result<String> {
    let bytes = std::fs::read(path).map_err(|e| Error::io(path, e))?;
    String::from_utf8(bytes).map_err(|e| {
        let name = path.file_name().map(|n| n.to_string_lossy().to_ascii_lowercase()).unwrap_or_default();
        let gzip = e.as_bytes().starts_with(&[0x1f, 0x8b]);
        let what = if name.ends_with(".et") || name.ends_with(".et.gz") {
            "it looks like a Chakra execution trace (protobuf); read it with `--profile-format chakra`".to_string()
        } else if gzip {
            "it is gzip-compressed; if it is a Chakra execution trace, read it with `--profile-format chakra`, \
             otherwise decompress it first"
                .to_string()
        } else {
            format!(
                "byte {} is not UTF-8; if it is a Chakra execution trace (protobuf), read it with `--profile-format chakra`",
                e.utf8_error().valid_up_to()
            )
        };
        Error::parse(Location::file(path), format!("a binary file, not a text trace: {what} (docs/workloads.md)"))
    })
}

/// Reads a profile in `format`.
pub fn read_profile(path: &Path, format: ProfileFormat) -> Result<Profile> {
    let text = || read_text(path);
    let profile = match format {
        ProfileFormat::Pipedream => read_pipedream_graph(&text()?, path)?,
        ProfileFormat::Caffe => read_caffe_time_log(&text()?, path)?.into_iter().next().expect("at least one net"),
        ProfileFormat::Bcaffe => read_bcaffe_comm_log(&text()?, path)?,
        ProfileFormat::Kineto => read_kineto_trace(&text()?, path)?,
        ProfileFormat::Chakra => Profile::from_workload(&read_chakra_et(path)?),
    };
    if profile.layers.is_empty() {
        return Err(Error::parse(Location::file(path), "the profile holds no layers"));
    }
    Ok(profile)
}

/// Maps an operator or layer-type name (PyTorch module, Caffe layer type) to a [`LayerKind`].
pub fn kind_of(op: &str) -> LayerKind {
    let op = op.trim().to_ascii_lowercase();
    let starts = |p: &[&str]| p.iter().any(|x| op.starts_with(x));
    if starts(&["conv"]) {
        LayerKind::Conv
    } else if starts(&["linear", "innerproduct", "addmm"]) {
        LayerKind::Linear
    } else if starts(&["relu", "gelu", "sigmoid", "tanh", "prelu", "elu", "hardswish", "silu"]) {
        LayerKind::Activation
    } else if starts(&["maxpool", "avgpool", "adaptiveavgpool", "adaptivemaxpool", "pooling"]) {
        LayerKind::Pool
    } else if starts(&["batchnorm"]) {
        LayerKind::BatchNorm
    } else if starts(&["layernorm"]) {
        LayerKind::LayerNorm
    } else if starts(&["localresponsenorm", "lrn"]) {
        LayerKind::Lrn
    } else if starts(&["add", "eltwise"]) {
        LayerKind::Add
    } else if starts(&["concat", "cat"]) {
        LayerKind::Concat
    } else if starts(&["dropout"]) {
        LayerKind::Dropout
    } else if starts(&["softmax", "logsoftmax"]) {
        LayerKind::Softmax
    } else if starts(&["embedding"]) {
        LayerKind::Embedding
    } else if starts(&["bmm", "matmul"]) {
        LayerKind::MatMul
    } else {
        LayerKind::Other
    }
}

/// A finite non-negative number or an error at `at`.
fn number(v: &str, at: impl FnOnce() -> Location) -> Result<f64> {
    match v.trim().parse::<f64>() {
        // Times in profiles are us or ms; 1e9 of either is beyond any layer (units::MAX_DURATION_US).
        Ok(x) if x.is_finite() && (0.0..=1e9).contains(&x) => Ok(x),
        Ok(x) if x.is_finite() && x > 1e9 => {
            Err(Error::parse(at(), format!("`{}` is beyond the limit of 1e9 for a time in this profile", v.trim())))
        }
        _ => Err(Error::parse(at(), format!("expected a non-negative number, found `{}`", v.trim()))),
    }
}
