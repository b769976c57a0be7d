//! Memory footprint of training on one GPU: weights, gradients, optimizer state, activations kept
//! for the backward pass, and pre-load buffers for input batches (ScaleDNN pre-loads batches onto
//! the GPU), compared with the GPU's memory to warn about configurations that would not fit. It
//! reads a zoo model and a GPU spec; it does not time anything.

use super::gpu::{GpuSpec, Precision};
use super::zoo::{LayerKind, Model};
use serde::Serialize;

/// The optimizer, for its per-parameter state and its update traffic.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Optimizer {
    /// Plain SGD: no state.
    Sgd,
    /// SGD with momentum: one FP32 buffer per parameter.
    Momentum,
    /// Adam/AdamW: two FP32 buffers per parameter.
    Adam,
}

impl Optimizer {
    /// FP32 state tensors per parameter.
    pub fn state_per_param(self) -> u64 {
        match self {
            Optimizer::Sgd => 0,
            Optimizer::Momentum => 1,
            Optimizer::Adam => 2,
        }
    }

    /// Memory passes of the update over parameter-sized FP32 tensors: read weights and gradients,
    /// read and write each state tensor, write weights.
    pub fn update_passes(self) -> f64 {
        3.0 + 2.0 * self.state_per_param() as f64
    }

    /// The usual choice for a model: Adam for transformers, momentum SGD for CNNs.
    pub fn default_for(model: &Model) -> Optimizer {
        if model.layers.iter().any(|l| l.kind == LayerKind::Embedding) {
            Optimizer::Adam
        } else {
            Optimizer::Momentum
        }
    }
}

impl std::str::FromStr for Optimizer {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "sgd" => Ok(Optimizer::Sgd),
            "momentum" => Ok(Optimizer::Momentum),
            "adam" | "adamw" => Ok(Optimizer::Adam),
            _ => Err(format!("unknown optimizer `{s}` (expected one of: sgd, momentum, adam)")),
        }
    }
}

/// Bytes per GPU by category.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Footprint {
    pub weights: u64,
    pub gradients: u64,
    pub optimizer_state: u64,
    pub activations: u64,
    pub preload_buffers: u64,
    pub total: u64,
    /// The GPU's memory.
    pub capacity: u64,
}

impl Footprint {
    pub fn fits(&self) -> bool {
        self.total <= self.capacity
    }

    /// A one-line warning when the configuration would run out of memory.
    pub fn oom_warning(&self, what: &str) -> Option<String> {
        (!self.fits()).then(|| {
            let gib = |b: u64| b as f64 / (1u64 << 30) as f64;
            format!(
                "{what} needs about {:.1} GiB per GPU (weights {:.1}, gradients {:.1}, optimizer {:.1}, \
                 activations {:.1}, pre-load {:.1}) but the GPU has {:.1} GiB: it would run out of memory; \
                 use a smaller batch, fp16 or fewer pre-loaded batches",
                gib(self.total),
                gib(self.weights),
                gib(self.gradients),
                gib(self.optimizer_state),
                gib(self.activations),
                gib(self.preload_buffers),
                gib(self.capacity)
            )
        })
    }
}

/// Footprint of training `model` at `batch` samples per GPU. Mixed precision keeps FP32 master
/// weights plus an FP16 copy and FP16 gradients and activations. Activations count every layer's
/// output except in-place ReLUs, which overwrite their input (GELU and dropout keep theirs).
/// `preload_batches` input batches of `device_sample_bytes` each sit on the GPU ahead of use.
pub fn footprint(
    model: &Model,
    gpu: &GpuSpec,
    batch: u32,
    precision: Precision,
    optimizer: Optimizer,
    preload_batches: u32,
    device_sample_bytes: u64,
) -> Footprint {
    let params = model.params();
    let elem = precision.bytes();
    let weights = match precision {
        Precision::Fp32 => params * 4,
        Precision::Fp16 | Precision::Bf16 | Precision::Fp8 => params * (4 + 2),
    };
    let gradients = params * elem;
    let optimizer_state = params * 4 * optimizer.state_per_param();
    let kept: u64 = model
        .layers
        .iter()
        .filter(|l| l.kind != LayerKind::Activation || l.name.contains("gelu"))
        .map(|l| l.out_elems)
        .sum();
    let activations = (kept + model.input_elems) * elem * batch as u64;
    let preload_buffers = preload_batches as u64 * batch as u64 * device_sample_bytes;
    let total = weights + gradients + optimizer_state + activations + preload_buffers;
    Footprint { weights, gradients, optimizer_state, activations, preload_buffers, total, capacity: gpu.mem_bytes() }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fp(model: &str, gpu: &str, batch: u32, precision: Precision) -> Footprint {
        let m = Model::by_name(model, None).unwrap();
        footprint(&m, GpuSpec::by_name(gpu).unwrap(), batch, precision, Optimizer::default_for(&m), 0, 0)
    }

    #[test]
    fn resnet50_batch_sizes_that_fit_and_that_do_not() {
        // ResNet-50 FP32 trains with batch 64 on a 16 GB V100 (the usual per-GPU batch in MLPerf-era
        // runs) but not with 512.
        assert!(fp("resnet50", "v100", 64, Precision::Fp32).fits());
        let big = fp("resnet50", "v100", 512, Precision::Fp32);
        assert!(!big.fits());
        assert!(big.oom_warning("resnet50 at batch 512").unwrap().contains("run out of memory"));
        // Halving the element size roughly halves activations.
        let a32 = fp("resnet50", "v100", 64, Precision::Fp32).activations;
        let a16 = fp("resnet50", "v100", 64, Precision::Fp16).activations;
        assert_eq!(a32, 2 * a16);
    }

    #[test]
    fn resnet18_on_a100_runs_out_of_memory_at_batch_2048_as_accdp_reports() {
        // AccDP (Alnaasan et al.), Sec. V-B: ResNet-18, 224x224, A100 40 GB: utilisation measured
        // up to batch 1024, out of memory at 2048.
        assert!(fp("resnet18", "a100", 1024, Precision::Fp32).fits());
        assert!(!fp("resnet18", "a100", 2048, Precision::Fp32).fits());
    }

    #[test]
    fn bert_large_state_dominates_at_small_batch() {
        let f = fp("bert-large", "v100", 1, Precision::Fp32);
        // weights + gradients + two Adam buffers, all FP32: 16 bytes per parameter.
        assert_eq!(f.weights + f.gradients + f.optimizer_state, 16 * 335_141_888);
        assert!(f.optimizer_state > f.activations);
    }
}
