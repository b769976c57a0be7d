//! The Workload: what one GPU does in one training iteration, layer by layer (forward time,
//! backward time, gradient bytes, optionally a measured gradient-communication time), plus the
//! size of an input sample. Readers for trace formats live in submodules; this module knows
//! nothing of machines, strategies or the engine.

pub mod compare;
mod gemm_table;
pub mod gpu;
pub mod import;
pub mod llm;
pub mod memory;
pub mod moe;
pub mod source;
pub mod synth;
mod trace;
pub mod transformer;
mod write;
pub mod zoo;

pub use gpu::{GpuSpec, Precision};
pub use trace::{read_trace, read_trace_str, TraceFormat};
pub use write::native_trace;

use crate::units::Nanos;
use serde::Serialize;

/// A duration summarised over the iterations a trace holds: rounded mean, spread, sample count.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Stat {
    pub mean_ns: Nanos,
    pub std_ns: f64,
    pub samples: u32,
}

impl Stat {
    /// A single exact value (synthetic workloads, tests).
    pub fn exact(ns: Nanos) -> Self {
        Stat { mean_ns: ns, std_ns: 0.0, samples: 1 }
    }

    /// Mean and sample standard deviation of values in nanoseconds.
    pub fn from_samples(values_ns: &[f64]) -> Self {
        use statrs::statistics::Statistics;
        let n = values_ns.len();
        let mean = values_ns.iter().copied().mean();
        let std = if n > 1 { values_ns.iter().copied().std_dev() } else { 0.0 };
        Stat { mean_ns: mean.round().max(0.0) as Nanos, std_ns: std, samples: n as u32 }
    }
}

/// One layer of the network as the trace gives it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Layer {
    pub name: String,
    pub forward: Stat,
    pub backward: Stat,
    /// Measured gradient-communication time, if the trace has that column and it is non-zero.
    pub comm: Option<Stat>,
    /// Bytes of gradient this layer exchanges (equal to its parameter bytes; 0 if not learnable).
    pub grad_bytes: u64,
    /// The layer's gradient tensors in bytes (weight, bias, ...), summing to `grad_bytes`, when
    /// the source lists them (the zoo, a trace with a `grad_tensors` column, a per-blob profile).
    /// Empty: not listed, and the layer counts as one tensor (see [`Layer::tensors`]).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub grad_tensors: Vec<u64>,
    /// Fraction of the GPU the layer's kernels keep busy when one process runs them alone.
    /// Synthesis derives it from the layer's size; traces and profiles do not carry it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub util: Option<KernelUtil>,
    /// Share of each pass's time its memory-bound kernels take (the rest is math or launch
    /// gaps): the part that slows when a collective takes some of the GPU's memory bandwidth
    /// (`sim/contention.rs`). Synthesis and the transformer model derive it from their roofline;
    /// traces and profiles do not carry it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory: Option<MemoryShare>,
    /// Tensor-parallel collectives the layer runs (transformer workloads split over a TP group).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tp: Option<TpComm>,
}

/// A collective among the GPUs of a tensor-parallel group (or, for MoE blocks, of an
/// expert-parallel group: see [`CommGroup`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum TpCollective {
    AllReduce,
    AllGather,
    ReduceScatter,
    /// MoE token dispatch and combine.
    AllToAll,
    /// MoE token dispatch and combine as HybridEP runs them: the block's `bytes` are this rank's
    /// tokens, once (see [`crate::collective::CollectiveOp::HybridAllToAll`]).
    HybridAllToAll {
        experts: u32,
        top_k: u32,
    },
}

/// The group a layer's collectives run over.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum CommGroup {
    /// The layer's tensor-parallel group.
    #[default]
    Tensor,
    /// The layer's expert-parallel group (MoE all-to-alls).
    Expert,
    /// The layer's expert-tensor-parallel group (the MoE dispatcher's all-gather and
    /// reduce-scatter of token copies when experts are split over GPUs; the TP group's ranks,
    /// since etp is tp). Unlike the TP group's, these never overlap the GEMMs (`tp-overlap`).
    ExpertTensor,
    /// The layer's context-parallel group (keys and values of the whole sequence).
    Context,
}

impl CommGroup {
    pub fn is_tensor(&self) -> bool {
        *self == CommGroup::Tensor
    }
}

/// The tensor-parallel collectives of one layer: those that follow its forward compute and those
/// that follow its backward compute, in order, each on `bytes` (the full activation of the
/// micro-batch, as Megatron's all-reduce, all-gather and reduce-scatter move it).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TpComm {
    pub bytes: u64,
    pub forward: Vec<TpCollective>,
    pub backward: Vec<TpCollective>,
    /// Which group they run over.
    #[serde(skip_serializing_if = "CommGroup::is_tensor")]
    pub group: CommGroup,
    /// A ring exchange interleaved with the layer's compute instead of collectives after it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ring: Option<CpRing>,
}

/// A context-parallel ring as Transformer Engine runs it (`AttnFuncWithCP`, TE v1.3
/// `transformer_engine/pytorch/attention.py` l.423-951): the layer's compute in `steps` equal
/// chunks (one per CP rank's keys and values); beside each chunk every rank sends `bytes[step]`
/// to the next rank of the CP group (and receives as much from the previous one), the send
/// posted when the chunk starts; the next chunk starts once both the chunk and the send are done.
/// So a step's exposed exchange is max(0, send - chunk).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CpRing {
    /// Bytes sent beside each forward chunk (0: no send, the last chunk).
    pub forward: Vec<u64>,
    /// Bytes sent beside each backward chunk.
    pub backward: Vec<u64>,
}

impl CpRing {
    pub fn steps(&self) -> usize {
        self.forward.len()
    }
}

/// A layer's forward and backward utilisation of the GPU, each in (0, 1]: the time its kernels
/// would take on a GPU they filled completely over the time they take alone (AccDP, Sec. III:
/// small layers and batches leave most of a big GPU idle). MPS clients share what is left.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct KernelUtil {
    pub forward: f64,
    pub backward: f64,
}

/// A layer's forward and backward memory-bound share, each in [0, 1]: the time its kernels spend
/// streaming memory at the GPU's achievable bandwidth over the pass's time alone.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct MemoryShare {
    pub forward: f64,
    pub backward: f64,
}

impl Layer {
    pub fn is_learnable(&self) -> bool {
        self.grad_bytes > 0
    }

    /// The layer's gradient tensors in bytes, in registration order: the listed ones, or the
    /// whole gradient as one tensor when none are listed (none for a layer without parameters).
    pub fn tensors(&self) -> &[u64] {
        match (self.grad_tensors.is_empty(), self.grad_bytes) {
            (false, _) => &self.grad_tensors,
            (true, 0) => &[],
            (true, _) => std::slice::from_ref(&self.grad_bytes),
        }
    }
}

/// Where a workload's list of gradient tensors comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TensorSource {
    /// Every learnable layer lists its tensors (zoo models, traces and profiles that carry them).
    Listed,
    /// The source gives one gradient size per layer; each learnable layer counts as one tensor.
    /// Per-tensor mechanics (fusion, buckets, negotiation) then see fewer, larger tensors.
    PerLayer,
}

impl TensorSource {
    /// The value in CSV and JSON output.
    pub fn key(self) -> &'static str {
        match self {
            TensorSource::Listed => "listed",
            TensorSource::PerLayer => "per_layer",
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            TensorSource::Listed => "listed",
            TensorSource::PerLayer => "one per layer (derived: the source lists none)",
        }
    }
}

/// Per-GPU work of one iteration.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Workload {
    /// Short name for reports (model name, or the trace file stem).
    pub name: String,
    /// Samples each GPU processes per iteration (weak scaling: fixed per GPU).
    pub batch_per_gpu: u32,
    /// Bytes of one sample as read from storage (the I/O task reads `batch * sample_bytes`).
    pub sample_bytes: u64,
    /// Bytes of one sample as copied host-to-device (after decoding/conversion on the CPU).
    pub device_sample_bytes: u64,
    /// Network layers in forward order (the data layer, if the trace had one, is not here).
    pub layers: Vec<Layer>,
    /// Time of the model-update step on one GPU per iteration.
    pub update: Stat,
    /// Measured time of the trace's data layer (loading a batch onto the GPU), if it had one.
    pub data_load: Option<Stat>,
    /// How many iterations the trace held (summarised into the stats above).
    pub trace_iterations: u32,
    /// Layer times and gradient bytes are already those of mixed-precision (FP16) training, as
    /// synthesised with `--precision fp16` or read from a trace marked `# precision: fp16`.
    pub fp16: bool,
}

impl Workload {
    /// Runs the workload at `batch` samples per GPU by the stated rule for measured traces: forward,
    /// backward and data-layer times scale linearly with the batch (per-sample cost constant);
    /// the update and the gradients, which depend on the model only, do not. Real GPUs are less
    /// efficient at small batches, so a smaller batch comes out optimistic and a larger one
    /// pessimistic until the GPU is full. Returns the factor (1 when the batch was unknown: then
    /// only the batch changes).
    pub fn scale_batch(&mut self, batch: u32) -> f64 {
        let from = self.batch_per_gpu;
        self.batch_per_gpu = batch;
        if from == 0 || from == batch {
            return 1.0;
        }
        let f = batch as f64 / from as f64;
        let scale = |s: &mut Stat| {
            s.mean_ns = (s.mean_ns as f64 * f).round() as Nanos;
            s.std_ns *= f;
        };
        for l in &mut self.layers {
            scale(&mut l.forward);
            scale(&mut l.backward);
        }
        if let Some(d) = &mut self.data_load {
            scale(d);
        }
        f
    }

    /// Sum of mean forward times.
    pub fn forward_ns(&self) -> Nanos {
        self.layers.iter().map(|l| l.forward.mean_ns).fold(0, u64::saturating_add)
    }
    /// Sum of mean backward times.
    pub fn backward_ns(&self) -> Nanos {
        self.layers.iter().map(|l| l.backward.mean_ns).fold(0, u64::saturating_add)
    }
    /// Total gradient bytes exchanged per iteration.
    pub fn grad_bytes(&self) -> u64 {
        self.layers.iter().map(|l| l.grad_bytes).fold(0, u64::saturating_add)
    }
    /// Number of gradient tensors (see [`Layer::tensors`]).
    pub fn tensor_count(&self) -> usize {
        self.layers.iter().map(|l| l.tensors().len()).sum()
    }

    /// Whether the tensors are listed by the source or derived one per layer.
    pub fn tensor_source(&self) -> TensorSource {
        let listed = self.layers.iter().filter(|l| l.is_learnable()).all(|l| !l.grad_tensors.is_empty());
        if listed && self.layers.iter().any(|l| l.is_learnable()) {
            TensorSource::Listed
        } else {
            TensorSource::PerLayer
        }
    }

    /// Sum of the measured communication column (zero where absent).
    pub fn measured_comm_ns(&self) -> Nanos {
        self.layers.iter().filter_map(|l| l.comm).map(|s| s.mean_ns).fold(0, u64::saturating_add)
    }
}
