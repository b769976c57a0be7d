//! Synthesis: turns a zoo [`Model`], a [`GpuSpec`], a batch size and a precision into per-layer
//! forward/backward times (a roofline with efficiencies by layer kind and a parallelism factor, so
//! small batches under-use big GPUs), optionally calibrated to one measured number, and then into
//! the ordinary [`Workload`] the DAG builder takes. It knows nothing of machines or strategies.

use super::gpu::{GpuSpec, Precision};
use super::memory::Optimizer;
use super::zoo::{LayerKind, Model};
use super::{KernelUtil, Layer, MemoryShare, Stat, Workload};
use crate::error::{Error, Result};
use serde::Serialize;

/// Fraction of peak math a well-tuned library reaches on a large dense layer (cuDNN/cuBLAS SGEMM
/// class kernels reach 60-80% of FP32 peak; tensor cores sit further from their peak).
pub(crate) const DENSE_EFFICIENCY_FP32: f64 = 0.70;
pub(crate) const DENSE_EFFICIENCY_TENSOR: f64 = 0.35;
/// Fraction of peak math reached by element-wise and depthwise kernels.
const VECTOR_EFFICIENCY: f64 = 0.30;
/// Fraction of peak memory bandwidth streaming kernels reach (STREAM-like, ~75-85%).
pub(crate) const MEMORY_EFFICIENCY: f64 = 0.75;
/// GEMM reduction length at which a dense kernel reaches half its efficiency: a convolution over
/// 3 input channels (reduction 27 for a 3x3 kernel) cannot keep the math pipelines busy.
const HALF_EFFICIENCY_REDUCTION: f64 = 32.0;
/// Arithmetic saved by the fast convolution algorithms cuDNN picks for 3x3 stride-1 layers with
/// many channels (Winograd F(2x2,3x3): 36 multiplies become 16), from cuDNN 5 (2016) on, i.e. on
/// the Pascal generation and later in practice.
const WINOGRAD_SAVING: f64 = 2.25;
const WINOGRAD_MIN_CHANNELS: u64 = 128;
/// Fixed cost per kernel launch and per layer pass (framework + driver), nanoseconds.
pub(crate) const LAUNCH_NS: f64 = 5_000.0;
/// Threads an SM keeps resident; a layer with fewer parallel outputs than `sms * this` cannot fill
/// the GPU (half efficiency at exactly that many).
const THREADS_PER_SM: f64 = 2048.0;

/// Floor of a derived utilisation, so that a pass made almost only of launch gaps still needs
/// some GPU under MPS (a shared task needs a positive rate).
const MIN_UTIL: f64 = 0.001;

/// Bytes of ImageNet storage per image: ~140 GB of JPEGs for 1.28 M training images.
pub const IMAGENET_JPEG_BYTES: u64 = 110_000;

/// What to synthesise.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SynthOptions {
    pub batch: u32,
    pub precision: Precision,
    pub optimizer: Optimizer,
}

/// One layer's modelled cost.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SynthLayer {
    pub name: String,
    pub kind: LayerKind,
    pub params: u64,
    /// Element counts of the layer's parameter tensors (see [`super::zoo::ZooLayer::tensors`]).
    pub tensors: Vec<u64>,
    pub forward_ns: f64,
    pub backward_ns: f64,
    /// Fraction of the GPU the forward and backward kernels keep busy alone (see [`KernelUtil`]).
    pub forward_util: f64,
    pub backward_util: f64,
    /// Share of the forward and backward time that is memory-bound (see [`MemoryShare`]).
    pub forward_memory: f64,
    pub backward_memory: f64,
}

/// A model timed on a GPU: per-layer forward/backward and the update step, in nanoseconds.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Synthetic {
    pub model: String,
    pub gpu: String,
    pub options_batch: u32,
    pub precision: Precision,
    pub layers: Vec<SynthLayer>,
    pub update_ns: f64,
    /// Bytes of one input sample in storage and on the device.
    pub sample_bytes: u64,
    pub device_sample_bytes: u64,
    /// The factor applied by calibration (1 if none).
    pub calibration_factor: f64,
}

impl Synthetic {
    /// Sum of forward and backward times.
    pub fn compute_ns(&self) -> f64 {
        self.layers.iter().map(|l| l.forward_ns + l.backward_ns).sum()
    }

    /// One single-GPU iteration: forward, backward and update.
    pub fn iteration_ns(&self) -> f64 {
        self.compute_ns() + self.update_ns
    }

    /// Multiplies every time by `factor`.
    fn scale(&mut self, factor: f64) {
        for l in &mut self.layers {
            l.forward_ns *= factor;
            l.backward_ns *= factor;
        }
        self.update_ns *= factor;
        self.calibration_factor *= factor;
    }

    /// Scales all times so the forward+backward sum equals `target_ns` (a measured profile's total).
    pub fn calibrate_compute(&mut self, target_ns: f64) -> Result<()> {
        check_target(target_ns)?;
        self.scale(target_ns / self.compute_ns());
        Ok(())
    }

    /// Scales all times so one single-GPU iteration takes `batch / samples_per_s` (a measured
    /// single-GPU throughput at this batch size, data loading assumed hidden).
    pub fn calibrate_throughput(&mut self, samples_per_s: f64) -> Result<()> {
        if !(samples_per_s.is_finite() && samples_per_s > 0.0) {
            return Err(Error::invalid("--calibrate-throughput", "must be a positive number of samples per second"));
        }
        let target = self.options_batch as f64 / samples_per_s * 1e9;
        check_target(target)?;
        self.scale(target / self.iteration_ns());
        Ok(())
    }

    /// The workload the DAG builder takes. Gradients are exchanged at the training precision.
    pub fn to_workload(&self) -> Workload {
        let grad_bytes_per_param = self.precision.bytes();
        let ns = |x: f64| Stat::exact(x.round() as u64);
        Workload {
            name: self.model.clone(),
            batch_per_gpu: self.options_batch,
            sample_bytes: self.sample_bytes,
            device_sample_bytes: self.device_sample_bytes,
            layers: self
                .layers
                .iter()
                .map(|l| Layer {
                    name: l.name.clone(),
                    forward: ns(l.forward_ns),
                    backward: ns(l.backward_ns),
                    comm: None,
                    grad_bytes: l.params * grad_bytes_per_param,
                    grad_tensors: l.tensors.iter().map(|t| t * grad_bytes_per_param).collect(),
                    util: Some(KernelUtil { forward: l.forward_util, backward: l.backward_util }),
                    memory: Some(MemoryShare { forward: l.forward_memory, backward: l.backward_memory }),
                    tp: None,
                })
                .collect(),
            update: ns(self.update_ns),
            data_load: None,
            trace_iterations: 1,
            fp16: self.precision.is_mixed(),
        }
    }
}

fn check_target(target_ns: f64) -> Result<()> {
    if target_ns.is_finite() && target_ns > 0.0 {
        Ok(())
    } else {
        Err(Error::invalid("calibration target", "must be a positive time"))
    }
}

/// Times every layer of `model` on `gpu`.
pub fn synthesize(model: &Model, gpu: &GpuSpec, opts: SynthOptions) -> Result<Synthetic> {
    if opts.batch == 0 {
        return Err(Error::invalid("--batch", "batch size must be at least 1"));
    }
    if opts.precision == Precision::Fp8 {
        return Err(Error::invalid(
            "--precision",
            format!(
                "fp8 applies to transformer models (Transformer Engine), not to `{}`; use fp32, fp16 or bf16",
                model.name
            ),
        ));
    }
    if !gpu.supports(opts.precision) {
        return Err(Error::invalid(
            "--precision",
            format!("{} has no {} tensor cores; use fp32 or fp16", gpu.name, opts.precision.name()),
        ));
    }
    let b = opts.batch as f64;
    let elem = opts.precision.bytes() as f64;
    let mem = gpu.mem_bytes_per_ns() * MEMORY_EFFICIENCY;
    let vector = gpu.vector_flops_per_ns(opts.precision) * VECTOR_EFFICIENCY;
    let dense_eff = match (opts.precision, gpu.tensor_tflops) {
        (Precision::Fp16 | Precision::Bf16 | Precision::Fp8, Some(_)) => DENSE_EFFICIENCY_TENSOR,
        _ => DENSE_EFFICIENCY_FP32,
    };
    let dense = gpu.peak_flops_per_ns(opts.precision) * dense_eff;
    let saturation = gpu.sms as f64 * THREADS_PER_SM;
    let winograd = !matches!(gpu.arch, "Kepler" | "Maxwell");

    let mut layers = Vec::with_capacity(model.layers.len());
    for (i, l) in model.layers.iter().enumerate() {
        let (inp, out) = (l.in_elems as f64 * b, l.out_elems as f64 * b);
        let flops = l.flops * b;
        // A layer with fewer parallel outputs than the GPU has thread slots runs at this fraction
        // of the kernel efficiency (`parallelism`); on a saturated GPU it would run at 1.
        let parallelism = out / (out + saturation);
        let pass_times = |parallelism: f64| match l.kind {
            LayerKind::Conv | LayerKind::Linear | LayerKind::MatMul => {
                let reduction = l.reduction.max(1) as f64;
                let mut flops = flops * (reduction + HALF_EFFICIENCY_REDUCTION) / reduction;
                if winograd
                    && l.kind == LayerKind::Conv
                    && l.kernel == 3
                    && l.stride == 1
                    && l.reduction >= 9 * WINOGRAD_MIN_CHANNELS
                {
                    flops /= WINOGRAD_SAVING;
                }
                let weights = l.params as f64 * elem;
                let f_bytes = (inp + out) * elem + weights;
                // Backward computes the input gradient and the weight gradient (twice the math),
                // except for the first layer, whose input needs no gradient.
                let bwd_mult = if i == 0 { 1.0 } else { 2.0 };
                let f = roofline(flops / (dense * parallelism), f_bytes / mem);
                let bk = roofline(bwd_mult * flops / (dense * parallelism), 2.0 * f_bytes / mem);
                (f, bk)
            }
            LayerKind::DepthwiseConv => {
                let f_bytes = (inp + out) * elem;
                let f = roofline(flops / (vector * parallelism), f_bytes / mem);
                (f, Pass { ns: 2.0 * f.ns, memory_ns: 2.0 * f.memory_ns })
            }
            kind => {
                let (f_passes, b_passes) = streaming_passes(kind);
                let e = inp.max(out) * elem;
                let f = roofline(flops / (vector * parallelism), f_passes * e / mem);
                let bk = roofline(flops / (vector * parallelism), b_passes * e / mem);
                (f, bk)
            }
        };
        let (fwd, bwd) = pass_times(parallelism);
        // The launch gap is neither math nor memory traffic.
        let memory_share =
            |memory_ns: f64, total: f64| if total > 0.0 { (memory_ns / total).clamp(0.0, 1.0) } else { 0.0 };
        let (fwd_memory, bwd_memory) = (fwd.memory_ns, bwd.memory_ns);
        let (fwd, bwd) = (fwd.ns, bwd.ns);
        let (fwd, bwd) = if l.kind == LayerKind::Other { (0.0, 0.0) } else { (fwd + LAUNCH_NS, bwd + LAUNCH_NS) };
        // Utilisation alone: the time the kernels would take on a GPU they filled (full
        // parallelism, and no launch gap, during which the GPU idles) over their time alone.
        let (fwd_full, bwd_full) = pass_times(1.0);
        let (fwd_full, bwd_full) = (fwd_full.ns, bwd_full.ns);
        let busy = |full: f64, alone: f64| if alone > 0.0 { (full / alone).clamp(MIN_UTIL, 1.0) } else { 1.0 };
        layers.push(SynthLayer {
            name: l.name.clone(),
            kind: l.kind,
            params: l.params,
            tensors: l.tensors.clone(),
            forward_ns: fwd,
            backward_ns: bwd,
            forward_util: busy(fwd_full, fwd),
            backward_util: busy(bwd_full, bwd),
            forward_memory: memory_share(fwd_memory, fwd),
            backward_memory: memory_share(bwd_memory, bwd),
        });
    }
    // The update streams weights, gradients and optimizer state once (FP32 master copies).
    let params = model.params() as f64;
    let update_ns = opts.optimizer.update_passes() * params * 4.0 / mem + LAUNCH_NS;
    let is_text = model.layers.first().is_some_and(|l| l.kind == LayerKind::Embedding);
    let (sample_bytes, device_sample_bytes) = if is_text {
        // Token ids, segment ids and attention mask as 64-bit integers.
        (model.input_elems * 3 * 8, model.input_elems * 3 * 8)
    } else {
        (IMAGENET_JPEG_BYTES, model.input_elems * 4)
    };
    Ok(Synthetic {
        model: model.name.to_string(),
        gpu: gpu.name.to_string(),
        options_batch: opts.batch,
        precision: opts.precision,
        layers,
        update_ns,
        sample_bytes,
        device_sample_bytes,
        calibration_factor: 1.0,
    })
}

/// One pass's roofline time and the part of it that is memory-bound (all of it when streaming
/// the bytes takes longer than the math, none otherwise).
#[derive(Debug, Clone, Copy)]
struct Pass {
    ns: f64,
    memory_ns: f64,
}

fn roofline(math_ns: f64, memory_ns: f64) -> Pass {
    if memory_ns > math_ns {
        Pass { ns: memory_ns, memory_ns }
    } else {
        Pass { ns: math_ns, memory_ns: 0.0 }
    }
}

/// Forward and backward memory passes over the layer's larger tensor, by kind.
fn streaming_passes(kind: LayerKind) -> (f64, f64) {
    match kind {
        // read x, write y | read y (or x), read dy, write dx
        LayerKind::Activation => (2.0, 3.0),
        // statistics pass + normalise pass | two reduction reads + read x, dy, write dx
        LayerKind::BatchNorm | LayerKind::LayerNorm => (3.0, 5.0),
        // read input, write output | read dy and indices, zero and write dx
        LayerKind::Pool => (1.5, 2.5),
        LayerKind::Lrn => (3.0, 5.0),
        // read two, write one | gradient passes through to both inputs
        LayerKind::Add => (1.5, 1.0),
        LayerKind::Concat => (2.0, 2.0),
        LayerKind::Dropout => (2.25, 2.25),
        LayerKind::Softmax => (3.0, 3.0),
        LayerKind::Embedding => (2.0, 2.0),
        _ => (0.0, 0.0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn synth(model: &str, gpu: &str, batch: u32, precision: Precision) -> Synthetic {
        let m = Model::by_name(model, None).unwrap();
        let g = GpuSpec::by_name(gpu).unwrap();
        synthesize(&m, g, SynthOptions { batch, precision, optimizer: Optimizer::Momentum }).unwrap()
    }

    /// The roofline's memory-bound share of a pass: a batch-norm streams its tensor (all of its
    /// time but the 5 us launch gap), a large 3x3 convolution is math; calibration keeps shares.
    #[test]
    fn memory_bound_share_is_the_streaming_part_of_a_pass() {
        let mut s = synth("resnet50", "v100", 128, Precision::Fp32);
        let bn = s.layers.iter().find(|l| l.kind == LayerKind::BatchNorm).unwrap().clone();
        assert!((bn.forward_memory - (bn.forward_ns - LAUNCH_NS) / bn.forward_ns).abs() < 1e-12, "{bn:?}");
        assert!(bn.forward_memory > 0.9 && bn.backward_memory > 0.9, "{bn:?}");
        let conv =
            s.layers.iter().filter(|l| l.kind == LayerKind::Conv).max_by(|a, b| a.forward_ns.total_cmp(&b.forward_ns));
        let conv = conv.unwrap().clone();
        assert_eq!((conv.forward_memory, conv.backward_memory), (0.0, 0.0), "{conv:?}");
        s.calibrate_throughput(300.0).unwrap();
        let w = s.to_workload();
        let l = w.layers.iter().find(|l| l.name == bn.name).unwrap();
        assert_eq!(l.memory, Some(MemoryShare { forward: bn.forward_memory, backward: bn.backward_memory }));
    }

    #[test]
    fn faster_gpus_and_fp16_are_faster() {
        let k80 = synth("resnet50", "k80", 32, Precision::Fp32).iteration_ns();
        let v100 = synth("resnet50", "v100", 32, Precision::Fp32).iteration_ns();
        let v100h = synth("resnet50", "v100", 32, Precision::Fp16).iteration_ns();
        assert!(k80 > 2.0 * v100 && v100 > 1.5 * v100h, "{k80} {v100} {v100h}");
    }

    #[test]
    fn small_batches_use_a_big_gpu_less_efficiently() {
        // Per-sample time falls as the batch grows (launch costs amortise, SMs fill up).
        let per_sample = |b| synth("resnet50", "a100", b, Precision::Fp32).iteration_ns() / b as f64;
        assert!(per_sample(1) > 2.0 * per_sample(64));
        assert!(per_sample(8) > 1.1 * per_sample(128));
    }

    #[test]
    fn calibration_hits_the_measured_throughput() {
        let mut s = synth("resnet50", "v100-pcie", 64, Precision::Fp32);
        s.calibrate_throughput(253.0).unwrap();
        let iter_s = s.iteration_ns() * 1e-9;
        assert!((64.0 / iter_s - 253.0).abs() < 1e-6);
        assert!(s.calibration_factor > 0.0);
        assert!(s.calibrate_throughput(0.0).is_err());
        let w = s.to_workload();
        assert_eq!(w.grad_bytes(), Model::by_name("resnet50", None).unwrap().params() * 4);
        assert_eq!(w.batch_per_gpu, 64);
    }
}
