//! A parallel plan as one small validated value (TorchTitan's `ParallelDims`, Megatron's
//! `parallel_state`): tensor, pipeline and data parallel degrees, virtual stages, sequence
//! parallelism, micro-batch and global batch, ZeRO stage or FSDP sharding, activation
//! recomputation and the pipeline schedule. It answers "which ranks form my group" for the DAG
//! builder and the reports, which never redo rank arithmetic themselves. [`memory`] gives the
//! memory per GPU a plan needs. Knows ranks and layers, not machines or time.
//!
//! Rank order is Megatron's default (`tp` fastest, then `dp`, then `pp`): rank = t + tp (d + dp s),
//! so a TP group is `tp` consecutive ranks and sits inside one NVLink domain whenever `tp` divides
//! the GPUs per node.

pub mod memory;

pub use crate::dag::schedule::Schedule;
pub use crate::workload::llm::{AttnKernel, CpComm, Fp8Recipe, LossKernel, Recompute, SoftmaxKernel};
pub use crate::workload::moe::{Dispatcher, MoeRouting};

use crate::error::{Error, Result};
use serde::Serialize;
use std::ops::Range;

/// How data-parallel ranks share model state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Sharding {
    /// Every DP rank holds everything; gradients are all-reduced.
    #[default]
    None,
    /// ZeRO-1 / Megatron's distributed optimizer: optimizer state sharded; gradients
    /// reduce-scattered, updated parameters all-gathered.
    Zero1,
    /// ZeRO-2: gradients sharded too.
    Zero2,
    /// ZeRO-3 / FSDP full sharding: parameters sharded too, all-gathered before each use.
    Zero3,
    /// FSDP hybrid sharding: ZeRO-3 inside each node, replicas across nodes (gradients all-reduced
    /// between replicas).
    FsdpHybrid,
}

impl Sharding {
    pub fn name(self) -> &'static str {
        match self {
            Sharding::None => "none",
            Sharding::Zero1 => "zero1",
            Sharding::Zero2 => "zero2",
            Sharding::Zero3 => "zero3",
            Sharding::FsdpHybrid => "fsdp-hybrid",
        }
    }

    /// Parameters are sharded and gathered before each use (ZeRO-3, FSDP).
    pub fn shards_params(self) -> bool {
        matches!(self, Sharding::Zero3 | Sharding::FsdpHybrid)
    }
    pub fn shards_grads(self) -> bool {
        matches!(self, Sharding::Zero2 | Sharding::Zero3 | Sharding::FsdpHybrid)
    }
    pub fn shards_optimizer(self) -> bool {
        self != Sharding::None
    }
}

/// A parallel plan. Build with [`ParallelPlan::parse`] or by hand, then [`ParallelPlan::check`].
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ParallelPlan {
    pub tp: u32,
    pub pp: u32,
    pub dp: u32,
    /// Model chunks per pipeline stage (interleaved schedule); 1 otherwise.
    pub vp: u32,
    /// Sequence parallelism over the TP group.
    pub sp: bool,
    /// Megatron's `--tp-comm-overlap` (Transformer Engine userbuffers, needs `sp`): each TP
    /// collective runs under its block's GEMMs, only a reduce-scatter's last split after them.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub tp_overlap: bool,
    pub micro_batch: u32,
    pub global_batch: u32,
    pub sharding: Sharding,
    pub recompute: Recompute,
    pub schedule: Schedule,
    /// Fused flash attention (default on GPUs that run it).
    pub flash: Option<bool>,
    /// Which fused attention kernels the stack runs (default: FlashAttention-2 on Ampere, -3 on
    /// Hopper and later).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub attn: Option<AttnKernel>,
    /// Let a TP group span nodes (otherwise refused when `tp` exceeds the GPUs per node).
    pub tp_across_nodes: bool,
    /// GPUs per FSDP shard group under hybrid sharding (0: the GPUs per node).
    pub shard_group: u32,
    /// ZeRO-3/FSDP wraps each transformer layer as one module (`fsdp-wrap=layer`, as llm-foundry
    /// and TorchTitan do): its parameters are gathered and its gradients reduce-scattered
    /// together. Otherwise (`block`) the attention and MLP blocks are modules of their own.
    /// Plans that do not shard parameters ignore it.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub fsdp_wrap_layer: bool,
    /// Expert parallelism of MoE layers: the experts are shared out over `ep` ranks of a stage's
    /// TP x DP ranks, `etp` apart (Megatron-Core's expert rank order etp-ep-dp-pp).
    pub ep: u32,
    /// Expert tensor parallelism: 1 (experts whole on one GPU) or tp (each expert split over the
    /// TP group, Megatron-Core's default when `expert_tensor_parallel_size` is unset).
    pub etp: u32,
    /// How MoE layers route tokens.
    pub moe: MoeRouting,
    /// Context parallelism: every sequence split over `cp` GPUs, which exchange keys and values
    /// in each attention block (Megatron's rank order tp, cp, dp, pp).
    pub cp: u32,
    /// How the CP group exchanges keys and values: Transformer Engine's `all_gather` (default,
    /// not overlapped) or its `p2p` ring.
    #[serde(skip_serializing_if = "CpComm::is_default")]
    pub cp_comm: CpComm,
    /// Set by [`ParallelPlan::folded`] only: the CP degree folded into `dp` (1 otherwise). Each
    /// rank then takes 1/cp_folded of every sequence of its micro-batch.
    pub cp_folded: u32,
    /// Bytes per gradient element in the data-parallel exchange: 4 (FP32, Megatron's
    /// `--accumulate-allreduce-grads-in-fp32` default) or 2 (`grad-reduce=bf16`: Megatron's
    /// `--grad-reduce-in-bf16`, Apex DistributedFusedAdam's `grad_sync_dtype`).
    #[serde(skip_serializing_if = "fp32_grads")]
    pub grad_bytes: u64,
    /// How each GPU's host thread launches its kernels (`host=eager|graphs|off`).
    pub host: HostLaunch,
    /// Host time per launch, ns, replacing [`eager_launch_ns`]'s (`host-launch-us=`, e.g. one
    /// measured on the user's own host).
    pub host_launch_ns: Option<u64>,
    /// Whose modules the transformer layers run as (`modules=te|torch`): Transformer Engine's,
    /// whose Python costs the host [`TE_MODULE_HOST_EXTRA`] per module call, or PyTorch's. None:
    /// TE's in FP8 (these stacks' only FP8 path), PyTorch's otherwise ([`ModuleImpl::resolve`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub modules: Option<ModuleImpl>,
    /// How the transformer layers are split over the pipeline stages (`pp-partition=`).
    #[serde(skip_serializing_if = "PpPartition::is_even")]
    pub pp_partition: PpPartition,
    /// DeepSpeed's `PipelineEngine` moves the activations between stages (`pipe-engine=deepspeed`):
    /// with tp > 1 it sends each TP rank's 1/tp slice (`PartitionedTensor`) and all-gathers the
    /// whole over the TP group where it is used: the received activation before each forward,
    /// the stage's own output and the received gradient before each backward (DeepSpeed v0.5.10
    /// and v0.6.0 `runtime/pipe/engine.py`: `is_pipe_partitioned = is_grad_partitioned =
    /// is_model_parallel`, `part.full()` in `_exec_forward_pass` and `_exec_backward_pass`;
    /// `runtime/utils.py` `PartitionedTensor.full` is one `dist.all_gather`).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub deepspeed_pipe: bool,
    /// The data-parallel exchange runs as Megatron-Core's `DistributedDataParallel` and
    /// distributed optimizer do with `--overlap-grad-reduce --overlap-param-gather` (`ddp=mcore`,
    /// core_r0.8.0 to core_r0.11.0): gradient buckets only in the first model chunk of the
    /// first stage, one bucket per other chunk; parameter gathers in forward order, each
    /// dispatched when the forward reaches the bucket before it (see `dag::plan`). Off
    /// (`ddp=generic`, the default): buckets on every stage, gathers in bucket order.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub mcore_ddp: bool,
    /// The data-parallel exchange runs as Apex's `DistributedFusedAdam` does under NeMo
    /// (`ddp=apex`, with `overlap_grad_sync` and `overlap_param_sync`): the bucket cap in bytes
    /// (`bucket-mb=`, Apex's `bucket_cap_mb` in MiB; [`APEX_BUCKET_MB`] by default). Each
    /// transformer layer's gradients fill whole buckets of that many bytes of their own (the last
    /// one padded), reduced once the layer's gradients are all there and, under pipeline
    /// parallelism, when Megatron's schedule calls NeMo's grad sync; parameters are gathered
    /// layer by layer in forward order, one in flight (see `dag::plan`). None: not Apex's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub apex_bucket_bytes: Option<u64>,
    /// The mixed-precision optimizer that holds the model state (`mp-optimizer=`): what it keeps
    /// per parameter is in `memory::state_bytes`.
    #[serde(skip_serializing_if = "MpOptimizer::is_megatron")]
    pub mp_optimizer: MpOptimizer,
    /// The cross-entropy kernels over the logits (`loss=fused|unfused`).
    #[serde(skip_serializing_if = "LossKernel::is_default")]
    pub loss: LossKernel,
    /// The softmax over unfused attention scores (`softmax=fused|unfused|swapped-check`).
    #[serde(skip_serializing_if = "SoftmaxKernel::is_default")]
    pub softmax: SoftmaxKernel,
    /// Transformer Engine's FP8 scaling recipe (`fp8-recipe=delayed|cs`), read under FP8.
    #[serde(skip_serializing_if = "Fp8Recipe::is_default")]
    pub fp8_recipe: Fp8Recipe,
}

/// The framework's mixed-precision optimizer, which decides the gradient buffers kept beside the
/// 16-bit weights (memory) and the pass over them after each micro-batch (step time, see
/// [`MpOptimizer::grad_accumulation`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum MpOptimizer {
    /// Megatron-LM's (`Float16OptimizerWithFloat16Params`, the distributed optimizer under
    /// ZeRO-1): one gradient buffer at `grad-reduce`'s bytes.
    #[default]
    Megatron,
    /// DeepSpeed's ZeRO stage 1/2 optimizer (`runtime/zero/stage_1_and_2.py`): gradients in
    /// the parameters' own 16-bit `.grad`, reduced in 16 bits.
    DsZero,
    /// DeepSpeed's `BF16_Optimizer` (`runtime/bf16_optimizer.py`, BigScience's BLOOM runs): the
    /// 16-bit `.grad` plus an unsharded FP32 accumulation buffer, reduced in FP32, its own ZeRO-1.
    DsBf16,
    /// PyTorch FSDP (`FullyShardedDataParallel`, llm-foundry through Composer): the FP32 sharded
    /// gradients ZeRO-3/FSDP keeps, plus the post-backward pass over each wrapped module's
    /// unsharded gradient before its reduce-scatter (see [`MpOptimizer::grad_accumulation`]).
    TorchFsdp,
}

impl MpOptimizer {
    pub fn is_megatron(&self) -> bool {
        *self == MpOptimizer::Megatron
    }
    /// DeepSpeed's optimizers, which reduce after the whole backward pass and gather the updated
    /// parameters in the step (PyTorch FSDP reduces and gathers per wrapped module, as Megatron).
    pub fn is_deepspeed(&self) -> bool {
        matches!(self, MpOptimizer::DsZero | MpOptimizer::DsBf16)
    }

    /// What the optimizer makes the GPU do to the weight gradients after each of a step's
    /// `micro_batches` backward passes, beyond the cost model's GEMMs:
    /// - Megatron: nothing (its gradient-accumulation fusion has the weight-gradient GEMM add
    ///   into `main_grad`);
    /// - ds-zero: autograd's `AccumulateGrad` adds the new gradient into the 16-bit `.grad`
    ///   (`variable.grad += new_grad`: read 2 + 2, write 2 bytes a parameter, one kernel per
    ///   parameter tensor) on every micro-batch but the first, whose gradient is stolen into the
    ///   `.grad` that `zero_grad(set_grads_to_None=True)` left empty (DeepSpeed v0.5.10
    ///   `runtime/zero/stage_1_and_2.py` `zero_grad`; ZeRO-1 without `overlap_comm` adds no hook
    ///   of its own; `runtime/pipe/engine.py` `_exec_backward_pass` calls
    ///   `torch.autograd.backward` once per micro-batch);
    /// - ds-bf16: `BF16_Optimizer.update_hp_grads` after every micro-batch's backward (its
    ///   `.grad` cleared before each): `hp_grad.add_(lp.grad.to(float32))` per parameter tensor,
    ///   a cast (read 2, write 4) and an add (read 4 + 4, write 4), 18 bytes and 2 kernels
    ///   (DeepSpeed 56c5223 `runtime/bf16_optimizer.py` `backward`/`update_hp_grads`, called by
    ///   `runtime/pipe/engine.py` `_exec_backward_pass` on every stage);
    /// - torch-fsdp: on every micro-batch (Composer does not skip FSDP's gradient sync between
    ///   them), each wrapped module's post-backward hook casts its unsharded gradient from the
    ///   parameters' dtype to the reduce dtype when they differ (`flat_param.grad.to(
    ///   handle._reduce_dtype)`: read `param_bytes`, write `grad_bytes`) and the default
    ///   reduce-scatter hook divides it in place by `gradient_predivide_factor`, above 1 for any
    ///   world size from 2 (`grad.div_`: read and write `grad_bytes`): PyTorch
    ///   `torch/distributed/fsdp/_runtime_utils.py` `_post_backward_hook` @ 00ae0bc and
    ///   `torch/distributed/algorithms/_comm_hooks/default_hooks.py` `reduce_scatter_hook`.
    ///   Charged on the compute stream, as the other passes: PyTorch runs it on FSDP's
    ///   post-backward stream beside the backward, so this is the most it can cost.
    pub fn grad_accumulation(
        self,
        micro_batches: u32,
        param_bytes: u64,
        grad_bytes: u64,
    ) -> Option<crate::workload::llm::GradAccumulation> {
        use crate::workload::llm::GradAccumulation;
        match self {
            MpOptimizer::TorchFsdp => {
                let cast = param_bytes != grad_bytes;
                Some(GradAccumulation {
                    bytes_per_param: if cast { (param_bytes + grad_bytes) as f64 } else { 0.0 }
                        + 2.0 * grad_bytes as f64,
                    kernels_per_tensor: if cast { 2 } else { 1 },
                    fraction: 1.0,
                })
            }
            MpOptimizer::Megatron => None,
            MpOptimizer::DsZero => (micro_batches > 1).then(|| GradAccumulation {
                bytes_per_param: 2.0 + 2.0 + 2.0,
                kernels_per_tensor: 1,
                fraction: (micro_batches - 1) as f64 / micro_batches as f64,
            }),
            MpOptimizer::DsBf16 => Some(GradAccumulation {
                bytes_per_param: (2.0 + 4.0) + (4.0 + 4.0 + 4.0),
                kernels_per_tensor: 2,
                fraction: 1.0,
            }),
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            MpOptimizer::Megatron => "megatron",
            MpOptimizer::DsZero => "ds-zero",
            MpOptimizer::DsBf16 => "ds-bf16",
            MpOptimizer::TorchFsdp => "torch-fsdp",
        }
    }
}

/// How the layers are split over pipeline stages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum PpPartition {
    /// Megatron's split: every stage (chunk) the same number of layers, which must divide them.
    #[default]
    Even,
    /// DeepSpeed's `PipelineModule(partition_method='type:transformer')`, the default of
    /// Megatron-DeepSpeed's `GPTModelPipe`: `partition_balanced` over weights 1 per transformer
    /// layer, whose smallest bottleneck puts ceil(L / pp) layers on each stage in order and what
    /// is left on the last (DeepSpeed `runtime/utils.py` `_lprobe`, v0.5-0.6; the BLOOM
    /// chronicles, tr11 prequel l.870: "78/12=6.5 - so the last stage has 1 block, while the
    /// rest have 7"). The embedding stays on the first stage, the tied output layer on the last.
    Transformer,
    /// BigScience's `--pp-partition-method 'type:transformer|embedding'`: the same balance with
    /// the input embedding and the tied output layer each weighing one transformer layer, so the
    /// first and last stages take one layer fewer (tr11-176B-ml README: 70 layers on 12 stages
    /// as [embed | 5], 6 x 10, [5 | embed]).
    TransformerEmbedding,
}

impl PpPartition {
    pub fn is_even(&self) -> bool {
        *self == PpPartition::Even
    }
    pub fn name(self) -> &'static str {
        match self {
            PpPartition::Even => "even",
            PpPartition::Transformer => "type:transformer",
            PpPartition::TransformerEmbedding => "type:transformer|embedding",
        }
    }
}

/// How the framework's host thread feeds a GPU (`dag::plan`'s host model).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum HostLaunch {
    /// PyTorch eager (Megatron-Core, PyTorch FSDP): every kernel is launched by the host thread
    /// in program order at [`eager_launch_ns`] each, and the host blocks where the framework
    /// reads a GPU value (an MoE router's token counts, the gradient norm before the optimizer
    /// step).
    #[default]
    Eager,
    /// CUDA graphs captured per layer and pass: one launch per block and pass; syncs as eager.
    Graphs,
    /// The host always runs ahead of the GPU (no host tasks).
    Off,
    /// PyTorch eager under `CUDA_LAUNCH_BLOCKING=1` (CUDA's environment variable that makes
    /// every launch synchronous, CUDA C++ Programming Guide, "Asynchronous Concurrent
    /// Execution"): each block's launches, then its kernels, then the next block's launches;
    /// BigScience trained BLOOM so (tr11-176B-ml README l.489) to avoid hangs on 40+ nodes.
    Blocking,
}

impl HostLaunch {
    pub fn name(self) -> &'static str {
        match self {
            HostLaunch::Eager => "eager",
            HostLaunch::Graphs => "graphs",
            HostLaunch::Off => "off",
            HostLaunch::Blocking => "blocking",
        }
    }
}

/// Whose modules a plan's transformer layers run as (`modules=`), which decides the host time
/// of each module call beyond its launches ([`TE_MODULE_HOST_EXTRA`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ModuleImpl {
    /// Transformer Engine's (`te`): Megatron-Core's `--transformer-impl transformer_engine`, the
    /// default of Megatron-LM's `megatron/training/arguments.py` from core_r0.6.0 on (l.668 @
    /// core_r0.8.0; `TransformerConfig.transformer_impl` @ d98e8a6, 2026-08), which
    /// `pretrain_gpt.py` turns into `get_gpt_layer_with_transformer_engine_spec` (l.52, l.74);
    /// NeMo's `transformer_engine: true` (with `mcore_gpt: true`), as every recipe of
    /// NVIDIA/dgxc-benchmarking v25.03 sets it in BF16 and FP8 alike.
    Te,
    /// PyTorch's own modules (`torch`, alias `local`: Megatron's `--transformer-impl local`):
    /// stacks without Transformer Engine (Megatron-LM of 2022, Megatron-DeepSpeed, llm-foundry's
    /// MPT in 16 bits: `MPTConfig`'s default `fc_type='torch'`,
    /// `llmfoundry/models/mpt/configuration_mpt.py`).
    Torch,
}

impl ModuleImpl {
    pub fn name(self) -> &'static str {
        match self {
            ModuleImpl::Te => "te",
            ModuleImpl::Torch => "torch",
        }
    }

    /// The modules a plan runs: as it says, else TE's in FP8 (Megatron-Core, NeMo and
    /// llm-foundry run FP8 only through Transformer Engine) and PyTorch's in 16 bits, the
    /// modules [`EAGER_LAUNCH_NS`]'s measurement (`torch.nn.Linear`) timed. A 16-bit row of a
    /// Transformer Engine stack says `modules=te`.
    pub fn resolve(given: Option<ModuleImpl>, precision: crate::workload::gpu::Precision) -> ModuleImpl {
        given.unwrap_or(if precision == crate::workload::gpu::Precision::Fp8 {
            ModuleImpl::Te
        } else {
            ModuleImpl::Torch
        })
    }
}

/// Apex `DistributedFusedAdam`'s default `bucket_cap_mb` (MiB), the cap when `ddp=apex` names none:
/// NVIDIA/apex f3f04924 (April 2024, the Apex of NeMo 24.07's stack)
/// apex/contrib/optimizers/distributed_fused_adam.py l.560 `bucket_cap_mb: float = 100.0`.
pub const APEX_BUCKET_MB: f64 = 100.0;
/// Apex's megabyte (`bucket_size = 1024 * 1024 * bucket_cap_mb / dtype_size`, same file l.712).
const MIB: f64 = 1024.0 * 1024.0;

/// Host time to issue one kernel from PyTorch eager code on an x86 host: 13.48 us, the CPU time
/// of one `torch.nn.Linear` forward (one cuBLAS kernel; BF16, hidden 2048, 8192 tokens) on a DGX
/// H100's Xeon Platinum 8480C (NVIDIA/TransformerEngine issue #2053, 2025-08, the reporter's
/// benchmark table). A floor for a Megatron-Core training op: Transformer Engine's modules cost
/// more host time per kernel (the same table: 99.66 us for a TE `Linear` on GB200 against 37.08
/// for PyTorch's). Before: 7 us, an eager op on CPU tensors (pytorch/pytorch issue #41383),
/// without the `cudaLaunchKernel` call; no validation set moves between the two on x86.
pub const EAGER_LAUNCH_NS: u64 = 13_480;

/// Under `CUDA_LAUNCH_BLOCKING=1`, the wait a launch adds to the host's own launch time: the
/// command's trip to the GPU, the kernel's start, and the host seeing it end. CSCS's ReFrame
/// kernel-latency check (reframe-hpc/reframe `hpctestlib/microbenchmarks/gpu/kernel_latency`,
/// 5,000 launches of an empty kernel) on an A100 node with an AMD host (`ault:amda100`, the
/// references in `cscs-checks/microbenchmarks/gpu/kernel_latency/kernel_latency.py`): 9.65 us a
/// launch with a device synchronise after each, 2.7 us a launch queued (the launch call alone);
/// the difference, 6.95 us, is what each synchronous launch waits beyond issuing it.
pub const BLOCKING_WAIT_NS: u64 = 9_650 - 2_700;

/// [`EAGER_LAUNCH_NS`] on a Grace host (GB200: the GPU shares a superchip with a Grace CPU):
/// the same `torch.nn.Linear` forward takes 37.08 us of CPU time on GB200 (TransformerEngine
/// issue #2053's table; 33.17 on GH200), 2.75 times the Xeon's.
pub const GRACE_LAUNCH_NS: u64 = 37_080;

/// Host time a Transformer Engine module call costs beyond the launches of its kernels, as a
/// multiple of the host's per-launch time: NVIDIA/TransformerEngine issue #2053 (2025-08) timed
/// the CPU time of one `Linear` forward (BF16, hidden 2048, 8192 tokens; one cuBLAS GEMM either
/// way) at 99.66 us for TE's module against 37.08 us for `torch.nn.Linear` on GB200, and 90.53
/// against 33.17 us on GH200: TE's module costs 2.69 (2.73) times PyTorch's, so 1.69 launches
/// more, whatever the host. Charged once per module call in the forward pass (what was measured;
/// TE's backward functions are not measured and not charged) under eager launching; CUDA graphs
/// replay the modules without their Python. The same issue's maintainers reduced this overhead
/// in later TE releases (TE issue #2126, 2026-01: "TELinear is nearly the same with vanilla torch
/// linear" in BF16), which dagsim, knowing no TE version, does not follow.
/// (numerator, denominator) of the extra time over one launch.
pub const TE_MODULE_HOST_EXTRA: (u64, u64) = (99_660 - 37_080, 37_080);

/// [`TE_MODULE_HOST_EXTRA`] in ns on a host whose launch costs `launch_ns`.
pub fn te_module_host_ns(launch_ns: u64) -> u64 {
    launch_ns * TE_MODULE_HOST_EXTRA.0 / TE_MODULE_HOST_EXTRA.1
}

/// The per-launch host time of `gpu`'s host CPU: Grace for the Grace-Blackwell superchip, an x86
/// server CPU for every other GPU.
pub fn eager_launch_ns(gpu: &crate::workload::gpu::GpuSpec) -> u64 {
    if gpu.name == "gb200" {
        GRACE_LAUNCH_NS
    } else {
        EAGER_LAUNCH_NS
    }
}

impl Default for ParallelPlan {
    fn default() -> Self {
        ParallelPlan {
            tp: 1,
            pp: 1,
            dp: 1,
            vp: 1,
            sp: false,
            tp_overlap: false,
            micro_batch: 1,
            global_batch: 1,
            sharding: Sharding::None,
            recompute: Recompute::None,
            schedule: Schedule::OneFOneB,
            flash: None,
            attn: None,
            tp_across_nodes: false,
            shard_group: 0,
            fsdp_wrap_layer: false,
            ep: 1,
            etp: 1,
            moe: MoeRouting::default(),
            cp: 1,
            cp_comm: CpComm::AllGather,
            cp_folded: 1,
            grad_bytes: crate::workload::llm::GRAD_BYTES,
            host: HostLaunch::Eager,
            host_launch_ns: None,
            modules: None,
            pp_partition: PpPartition::Even,
            deepspeed_pipe: false,
            mcore_ddp: false,
            apex_bucket_bytes: None,
            mp_optimizer: MpOptimizer::Megatron,
            loss: LossKernel::Fused,
            softmax: SoftmaxKernel::Fused,
            fp8_recipe: Fp8Recipe::Delayed,
        }
    }
}

fn fp32_grads(bytes: &u64) -> bool {
    *bytes == crate::workload::llm::GRAD_BYTES
}

/// Coordinates of a rank in the plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Coords {
    pub tp: u32,
    pub dp: u32,
    pub stage: u32,
}

impl ParallelPlan {
    /// Plain data parallelism on `gpus` GPUs: the plan today's S-SGD builder follows.
    pub fn data_parallel(gpus: u32, batch_per_gpu: u32) -> Self {
        ParallelPlan { dp: gpus, micro_batch: batch_per_gpu, global_batch: batch_per_gpu * gpus, ..Default::default() }
    }

    /// Parses `tp=8,pp=4,dp=8,vp=2,sp=on,zero=1,fsdp=full|hybrid,recompute=selective,
    /// schedule=1f1b,flash=off,tp-across-nodes=on` (any subset; missing degrees are 1). Micro and
    /// global batch come from their own flags.
    pub fn parse(spec: &str) -> Result<Self> {
        let mut p = ParallelPlan::default();
        let err = |msg: String| Error::invalid("--parallel", msg);
        let mut schedule_given = false;
        let mut grad_reduce_given = false;
        let (mut apex, mut bucket_mb) = (false, None);
        for part in spec.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let (key, value) =
                part.split_once('=').ok_or_else(|| err(format!("`{part}` is not key=value (e.g. tp=8,pp=4,dp=8)")))?;
            let (key, value) = (key.trim().to_ascii_lowercase(), value.trim().to_ascii_lowercase());
            let degree = |v: &str| -> Result<u32> {
                v.parse::<u32>()
                    .ok()
                    .filter(|&n| n >= 1)
                    .ok_or_else(|| err(format!("{key}={v}: expected a whole number of at least 1")))
            };
            let number = |v: &str| -> Result<f64> {
                v.parse::<f64>()
                    .ok()
                    .filter(|x| x.is_finite() && *x > 0.0)
                    .ok_or_else(|| err(format!("{key}={v}: expected a positive number")))
            };
            let on_off = |v: &str| -> Result<bool> {
                match v {
                    "on" | "true" | "1" | "yes" => Ok(true),
                    "off" | "false" | "0" | "no" => Ok(false),
                    _ => Err(err(format!("{key}={v}: expected on or off"))),
                }
            };
            match key.as_str() {
                "tp" => p.tp = degree(&value)?,
                "pp" => p.pp = degree(&value)?,
                "dp" => p.dp = degree(&value)?,
                "vp" => p.vp = degree(&value)?,
                "sp" => p.sp = on_off(&value)?,
                "tp-overlap" | "tp_overlap" => p.tp_overlap = on_off(&value)?,
                "flash" => p.flash = Some(on_off(&value)?),
                "attn" => {
                    p.attn = Some(
                        AttnKernel::parse(&value)
                            .ok_or_else(|| err(format!("attn={value}: expected fa2, fa3 or cudnn")))?,
                    )
                }
                "cp-comm" | "cp_comm" => {
                    p.cp_comm = CpComm::parse(&value)
                        .ok_or_else(|| err(format!("cp-comm={value}: expected p2p or all-gather")))?
                }
                "tp-across-nodes" | "tp_across_nodes" => p.tp_across_nodes = on_off(&value)?,
                "zero" => {
                    p.sharding = match value.as_str() {
                        "0" => Sharding::None,
                        "1" => Sharding::Zero1,
                        "2" => Sharding::Zero2,
                        "3" => Sharding::Zero3,
                        v => return Err(err(format!("zero={v}: expected 0, 1, 2 or 3"))),
                    }
                }
                "fsdp" => {
                    p.sharding = match value.as_str() {
                        "full" => Sharding::Zero3,
                        "hybrid" => Sharding::FsdpHybrid,
                        "off" | "none" => Sharding::None,
                        v => return Err(err(format!("fsdp={v}: expected full or hybrid"))),
                    }
                }
                "shard-group" | "shard_group" => p.shard_group = degree(&value)?,
                "fsdp-wrap" | "fsdp_wrap" => {
                    p.fsdp_wrap_layer = match value.as_str() {
                        "layer" => true,
                        "block" => false,
                        v => return Err(err(format!("fsdp-wrap={v}: expected layer or block"))),
                    }
                }
                "ep" => p.ep = degree(&value)?,
                "cp" => p.cp = degree(&value)?,
                "etp" => p.etp = degree(&value)?,
                "moe-capacity" | "moe_capacity" => p.moe.capacity_factor = Some(number(&value)?),
                "moe-pad" | "moe_pad" => p.moe.pad_to_capacity = on_off(&value)?,
                "moe-imbalance" | "moe_imbalance" => p.moe.imbalance = number(&value)?,
                "moe-dispatcher" | "moe_dispatcher" => {
                    p.moe.dispatcher = match value.as_str() {
                        "alltoall" => Dispatcher::AllToAll,
                        "flex" | "deepep" => Dispatcher::Flex,
                        "hybridep" => Dispatcher::HybridEp,
                        v => return Err(err(format!("moe-dispatcher={v}: expected alltoall, flex (deepep) or hybridep"))),
                    }
                }
                "recompute" => {
                    p.recompute = Recompute::parse(&value)
                        .ok_or_else(|| err(format!("recompute={value}: expected none, selective or full")))?
                }
                "grad-reduce" | "grad_reduce" => {
                    grad_reduce_given = true;
                    p.grad_bytes = match value.as_str() {
                        "fp32" => 4,
                        "bf16" | "fp16" => 2,
                        v => return Err(err(format!("grad-reduce={v}: expected fp32 or bf16 (or fp16)"))),
                    }
                }
                "host" => {
                    p.host = match value.as_str() {
                        "eager" => HostLaunch::Eager,
                        "graphs" | "cuda-graphs" => HostLaunch::Graphs,
                        "off" => HostLaunch::Off,
                        "blocking" => HostLaunch::Blocking,
                        v => return Err(err(format!("host={v}: expected eager, graphs, blocking or off"))),
                    }
                }
                "host-launch-us" | "host_launch_us" => {
                    let us = crate::units::check_duration_us(number(&value)?).map_err(|m| err(format!("{key}={value}: {m}")))?;
                    p.host_launch_ns = Some((us * 1e3).round() as u64)
                }
                "modules" => {
                    p.modules = Some(match value.as_str() {
                        "te" | "transformer-engine" | "transformer_engine" => ModuleImpl::Te,
                        "torch" | "local" => ModuleImpl::Torch,
                        v => return Err(err(format!("modules={v}: expected te or torch"))),
                    })
                }
                "pp-partition" | "pp_partition" => {
                    p.pp_partition = match value.as_str() {
                        "even" => PpPartition::Even,
                        "type:transformer" | "transformer" => PpPartition::Transformer,
                        "type:transformer|embedding" | "transformer+embedding" => PpPartition::TransformerEmbedding,
                        v => {
                            return Err(err(format!(
                                "pp-partition={v}: expected even, type:transformer or type:transformer|embedding"
                            )))
                        }
                    }
                }
                "pipe-engine" | "pipe_engine" => {
                    p.deepspeed_pipe = match value.as_str() {
                        "deepspeed" => true,
                        "megatron" => false,
                        v => return Err(err(format!("pipe-engine={v}: expected megatron or deepspeed"))),
                    }
                }
                "ddp" => {
                    (p.mcore_ddp, apex) = match value.as_str() {
                        "mcore" => (true, false),
                        "generic" => (false, false),
                        "apex" => (false, true),
                        v => return Err(err(format!("ddp={v}: expected mcore, apex or generic"))),
                    }
                }
                "bucket-mb" | "bucket_mb" => {
                    let mb = number(&value)?;
                    if mb > 1e6 {
                        return Err(err(format!("bucket-mb={value}: expected at most 1,000,000 MiB")));
                    }
                    bucket_mb = Some(mb);
                }
                "mp-optimizer" | "mp_optimizer" => {
                    p.mp_optimizer = match value.as_str() {
                        "megatron" => MpOptimizer::Megatron,
                        "ds-zero" | "deepspeed" => MpOptimizer::DsZero,
                        "ds-bf16" | "deepspeed-bf16" => MpOptimizer::DsBf16,
                        "torch-fsdp" => MpOptimizer::TorchFsdp,
                        v => {
                            return Err(err(format!(
                                "mp-optimizer={v}: expected megatron, ds-zero, ds-bf16 or torch-fsdp"
                            )))
                        }
                    }
                }
                "fp8-recipe" | "fp8_recipe" => {
                    p.fp8_recipe = Fp8Recipe::parse(&value)
                        .ok_or_else(|| err(format!("fp8-recipe={value}: expected delayed or cs")))?
                }
                "loss" => {
                    p.loss = LossKernel::parse(&value)
                        .ok_or_else(|| err(format!("loss={value}: expected fused or unfused")))?
                }
                "softmax" => {
                    p.softmax = SoftmaxKernel::parse(&value).ok_or_else(|| {
                        err(format!("softmax={value}: expected fused, unfused or swapped-check"))
                    })?
                }
                "schedule" => {
                    p.schedule = Schedule::parse(&value)
                        .ok_or_else(|| err(format!("schedule={value}: expected gpipe, 1f1b or interleaved")))?;
                    schedule_given = true;
                }
                other => {
                    return Err(err(format!(
                        "unknown key `{other}`; expected tp, pp, dp, cp, vp, sp, tp-overlap, ep, etp, zero, fsdp, shard-group, \
                         fsdp-wrap, recompute, schedule, flash, attn, cp-comm, tp-across-nodes, moe-capacity, moe-pad, moe-imbalance, moe-dispatcher, \
                         grad-reduce, host, host-launch-us, modules, pp-partition, pipe-engine, ddp, bucket-mb, mp-optimizer, loss, softmax, fp8-recipe"
                    )))
                }
            }
        }
        match (apex, bucket_mb) {
            (true, mb) => {
                if !p.mp_optimizer.is_megatron() || p.sharding != Sharding::Zero1 || p.ep > 1 {
                    return Err(err(
                        "ddp=apex is Apex's DistributedFusedAdam as NeMo runs it: it needs zero=1, mp-optimizer=megatron \
                         and no expert parallelism (ep=1)"
                            .into(),
                    ));
                }
                p.apex_bucket_bytes = Some((mb.unwrap_or(APEX_BUCKET_MB) * MIB).round() as u64);
            }
            (false, Some(_)) => return Err(err("bucket-mb= is Apex's bucket_cap_mb: it needs ddp=apex".into())),
            (false, None) => {}
        }
        if p.mcore_ddp && (!p.mp_optimizer.is_megatron() || p.sharding.shards_params()) {
            return Err(err(
                "ddp=mcore is Megatron-Core's DistributedDataParallel: it needs mp-optimizer=megatron and no fsdp or zero=3"
                    .into(),
            ));
        }
        match p.mp_optimizer {
            MpOptimizer::Megatron => {}
            MpOptimizer::TorchFsdp => {
                if !p.sharding.shards_params() {
                    return Err(err(
                        "mp-optimizer=torch-fsdp is PyTorch FSDP's gradient pass: give fsdp=full or fsdp=hybrid".into(),
                    ));
                }
            }
            // stage_1_and_2.py reduces the 16-bit `.grad` (DeepSpeed v0.5.10 `reduce_gradients`,
            // its IPG buffer in `self.dtype`); stage 3 is another optimizer (stage3.py).
            MpOptimizer::DsZero => {
                if grad_reduce_given && p.grad_bytes != 2 {
                    return Err(err(
                        "mp-optimizer=ds-zero reduces 16-bit gradients: grad-reduce=fp32 contradicts it".into()
                    ));
                }
                if !matches!(p.sharding, Sharding::Zero1 | Sharding::Zero2) {
                    return Err(err(
                        "mp-optimizer=ds-zero is DeepSpeed's ZeRO stage 1/2 optimizer: give zero=1 or zero=2".into(),
                    ));
                }
                p.grad_bytes = 2;
            }
            // BF16_Optimizer all-reduces its FP32 buffer (`get_grads_for_reduction`) and shards
            // only the FP32 master weights and moments (pipe/engine.py: "only bf16 + z1 are
            // supported"), DeepSpeed 56c5223 (PR #1801).
            MpOptimizer::DsBf16 => {
                if p.grad_bytes != crate::workload::llm::GRAD_BYTES {
                    return Err(err(
                        "mp-optimizer=ds-bf16 reduces its FP32 gradient buffer: grad-reduce=bf16 contradicts it".into(),
                    ));
                }
                if p.sharding != Sharding::Zero1 {
                    return Err(err("mp-optimizer=ds-bf16 shards its optimizer as ZeRO-1 does: give zero=1".into()));
                }
            }
        }
        if p.vp > 1 && !schedule_given {
            p.schedule = Schedule::Interleaved;
        }
        // Degrees beyond the GPU limit would make their products (GPU count, pp x vp, ranks)
        // wrap around in u32 arithmetic: refuse them here, in u64, naming the limit's flag.
        let gpus = [p.tp, p.cp, p.pp, p.dp].iter().map(|&d| d as u64).product::<u64>();
        crate::limits::check("gpus", gpus).map_err(|e| err(format!("tp x cp x pp x dp = {gpus} GPUs: {e}")))?;
        for (key, v) in [("vp", p.vp), ("shard-group", p.shard_group), ("ep", p.ep), ("etp", p.etp)] {
            crate::limits::check("gpus", v as u64).map_err(|e| err(format!("{key}={v}: {e}")))?;
        }
        if p.pp as u64 * p.vp as u64 > crate::limits::get().layers {
            return Err(err(format!(
                "pp x vp = {} chunks is more than the limit of {} layers",
                p.pp as u64 * p.vp as u64,
                crate::limits::get().layers
            )));
        }
        Ok(p)
    }

    /// A compact description, e.g. `tp=8,pp=4,dp=8,vp=2,sp=on,mb=1,gbs=512,zero=1,recompute=selective`.
    /// A [`ParallelPlan::folded`] plan is named as the user wrote it (its CP unfolded).
    pub fn name(&self) -> String {
        let f = self.cp_folded.max(1);
        let (dp, cp, global_batch) = (self.dp / f, self.cp * f, self.global_batch / f);
        let mut s = format!("tp={},pp={},dp={dp}", self.tp, self.pp);
        if cp > 1 {
            s += &format!(",cp={cp}");
        }
        if self.vp > 1 {
            s += &format!(",vp={}", self.vp);
        }
        if self.sp {
            s += ",sp=on";
        }
        if self.tp_overlap {
            s += ",tp-overlap=on";
        }
        if self.ep > 1 {
            s += &format!(",ep={}", self.ep);
        }
        s += &format!(",mb={},gbs={global_batch}", self.micro_batch);
        match self.sharding {
            Sharding::None => {}
            Sharding::FsdpHybrid => s += ",fsdp=hybrid",
            z => s += &format!(",zero={}", &z.name()[4..]),
        }
        if self.fsdp_wrap_layer && self.sharding.shards_params() {
            s += ",fsdp-wrap=layer";
        }
        if self.recompute != Recompute::None {
            s += &format!(",recompute={}", self.recompute.name());
        }
        if self.pp > 1
            && self.schedule != Schedule::OneFOneB
            && !(self.vp > 1 && self.schedule == Schedule::Interleaved)
        {
            s += &format!(",schedule={}", self.schedule.name());
        }
        if self.flash == Some(false) {
            s += ",flash=off";
        }
        if self.grad_bytes == 2 && self.mp_optimizer != MpOptimizer::DsZero {
            s += ",grad-reduce=bf16";
        }
        if !self.mp_optimizer.is_megatron() {
            s += &format!(",mp-optimizer={}", self.mp_optimizer.name());
        }
        if self.host != HostLaunch::Eager {
            s += &format!(",host={}", self.host.name());
        }
        if self.pp > 1 && !self.pp_partition.is_even() {
            s += &format!(",pp-partition={}", self.pp_partition.name());
        }
        if self.pp > 1 && self.deepspeed_pipe {
            s += ",pipe-engine=deepspeed";
        }
        if self.mcore_ddp {
            s += ",ddp=mcore";
        }
        if let Some(bytes) = self.apex_bucket_bytes {
            s += &format!(",ddp=apex,bucket-mb={}", bytes as f64 / MIB);
        }
        if let (Some(ns), false) = (self.host_launch_ns, self.host == HostLaunch::Off) {
            s += &format!(",host-launch-us={}", ns as f64 / 1e3);
        }
        if let (Some(m), false) = (self.modules, self.host == HostLaunch::Off) {
            s += &format!(",modules={}", m.name());
        }
        if let Some(k) = self.attn {
            s += &format!(",attn={}", k.name());
        }
        if !self.loss.is_default() {
            s += &format!(",loss={}", self.loss.name());
        }
        if !self.softmax.is_default() {
            s += &format!(",softmax={}", self.softmax.name());
        }
        if !self.fp8_recipe.is_default() {
            s += &format!(",fp8-recipe={}", self.fp8_recipe.name());
        }
        if !self.cp_comm.is_default() && (self.cp > 1 || self.cp_folded > 1) {
            s += &format!(",cp-comm={}", self.cp_comm.name());
        }
        s
    }

    pub fn gpus(&self) -> u32 {
        self.tp * self.cp * self.pp * self.dp
    }

    /// The plan as the DAG builder sees it: context parallelism folded into data parallelism
    /// (Megatron's order puts cp between tp and dp, so CP rank c of DP rank d is the builder's DP
    /// rank c + cp d; gradients are reduced over DP x CP as Megatron does), each rank taking
    /// 1/cp of every sequence of a micro-batch. The plan itself when cp is 1.
    pub fn folded(&self) -> ParallelPlan {
        ParallelPlan {
            dp: self.dp * self.cp,
            global_batch: self.global_batch * self.cp,
            cp: 1,
            cp_folded: self.cp * self.cp_folded,
            ..self.clone()
        }
    }

    /// Micro-batches each pipeline runs per iteration (the gradient-accumulation steps).
    pub fn micro_batches(&self) -> u32 {
        self.global_batch / (self.dp * self.micro_batch)
    }

    /// Checks the plan against itself, a GPU count and a model's layer count. Errors name the flag
    /// and say what would be valid.
    pub fn check(&self, gpus: u32, layers: u32) -> Result<()> {
        let bad = |what: &str, msg: String| Err(Error::invalid(what, msg));
        if self.gpus() != gpus && self.cp > 1 {
            return bad(
                "--parallel",
                format!(
                    "tp x cp x pp x dp = {} x {} x {} x {} = {} but {gpus} GPUs are asked for (--gpus); pick degrees \
                     whose product is {gpus}",
                    self.tp,
                    self.cp,
                    self.pp,
                    self.dp,
                    self.gpus()
                ),
            );
        }
        if self.gpus() != gpus {
            return bad(
                "--parallel",
                format!(
                    "tp x pp x dp = {} x {} x {} = {} but {gpus} GPUs are asked for (--gpus); pick degrees whose product is {gpus}",
                    self.tp,
                    self.pp,
                    self.dp,
                    self.gpus()
                ),
            );
        }
        if self.deepspeed_pipe && self.pp > 1 && self.vp > 1 {
            return bad(
                "--parallel",
                format!(
                    "pipe-engine=deepspeed runs one chunk per stage (DeepSpeed's TrainSchedule has no interleaving); \
                     vp={} needs pipe-engine=megatron",
                    self.vp
                ),
            );
        }
        if !self.pp_partition.is_even() && self.pp > 1 {
            if self.vp > 1 {
                return bad(
                    "--parallel",
                    format!(
                        "pp-partition={} takes one chunk per stage (DeepSpeed's pipeline engine); vp={} needs pp-partition=even",
                        self.pp_partition.name(),
                        self.vp
                    ),
                );
            }
            // DeepSpeed needs a transformer layer on every stage (tr11 prequel: "DS breaks if
            // there isn't at least one transformer block per gpu").
            if let Some(empty) = (0..self.pp).find(|&s| self.stage_layers(layers, s)[0].is_empty()) {
                return bad(
                    "--parallel",
                    format!(
                        "pp-partition={} leaves stage {empty} of pp={} without a transformer layer of the model's {layers}; \
                         use fewer stages",
                        self.pp_partition.name(),
                        self.pp
                    ),
                );
            }
        } else if layers % (self.pp * self.vp) != 0 {
            let divisors: Vec<String> = (1..=layers).filter(|d| layers % d == 0).map(|d| d.to_string()).collect();
            return bad(
                "--parallel",
                format!(
                    "pp x vp = {} x {} = {} does not divide the model's {layers} layers; pp x vp must be one of {} \
                     (or split unevenly as DeepSpeed does: pp-partition=type:transformer)",
                    self.pp,
                    self.vp,
                    self.pp * self.vp,
                    divisors.join(", ")
                ),
            );
        }
        if self.vp > 1 && self.schedule != Schedule::Interleaved {
            return bad("--parallel", format!("vp={} needs schedule=interleaved", self.vp));
        }
        if self.schedule == Schedule::Interleaved && self.pp == 1 {
            return bad("--parallel", "the interleaved schedule needs pp of at least 2".into());
        }
        if self.micro_batch == 0 {
            return bad("--micro-batch", "must be at least 1".into());
        }
        if self.global_batch == 0 || self.global_batch % self.dp != 0 {
            return bad(
                "--global-batch",
                format!(
                    "{} is not a multiple of dp={} (each DP rank takes an equal share)",
                    self.global_batch, self.dp
                ),
            );
        }
        let per_rank = self.global_batch / self.dp;
        if per_rank % self.micro_batch != 0 {
            return bad(
                "--micro-batch",
                format!(
                    "{} does not divide the {per_rank} sequences each DP rank gets per iteration (--global-batch {} / dp {}); \
                     use a divisor of {per_rank}",
                    self.micro_batch, self.global_batch, self.dp
                ),
            );
        }
        // Each micro-batch is a forward and a backward step of every stage's chunks: a schedule
        // whose steps alone pass the task limit is refused before it is laid out (2^31 sequences
        // per step would otherwise fill memory with the schedule).
        let steps = 2 * self.micro_batches() as u64 * self.pp as u64 * self.vp as u64;
        crate::limits::check("tasks", steps).map_err(|e| {
            Error::invalid(
                "--global-batch",
                format!("{} micro-batches per pipeline per step: {e}", self.micro_batches()),
            )
        })?;
        if self.schedule == Schedule::Interleaved && self.micro_batches() % self.pp != 0 {
            return bad(
                "--global-batch",
                format!(
                    "the interleaved schedule needs the micro-batches per pipeline ({}) to be a multiple of pp={} (Megatron)",
                    self.micro_batches(),
                    self.pp
                ),
            );
        }
        if self.pp > 1 && matches!(self.sharding, Sharding::Zero2 | Sharding::Zero3 | Sharding::FsdpHybrid) {
            return bad(
                "--parallel",
                format!(
                    "{} with pipeline parallelism is not supported by DeepSpeed or Megatron (gradients and parameters \
                     would be gathered every micro-batch); use zero=1 with pp > 1",
                    self.sharding.name()
                ),
            );
        }
        if self.sp && self.tp == 1 {
            return bad(
                "--parallel",
                "sp=on needs tp of at least 2 (sequence parallelism splits over the TP group)".into(),
            );
        }
        // Megatron-LM core_r0.8.0 megatron/training/arguments.py l.199-200 asserts the same.
        if self.tp_overlap && !self.sp {
            return bad(
                "--parallel",
                "tp-overlap=on needs sp=on (Megatron's --tp-comm-overlap requires sequence parallelism)".into(),
            );
        }
        let width = self.tp * self.cp * self.dp;
        if self.etp != 1 && self.etp != self.tp {
            return bad(
                "--parallel etp",
                format!(
                    "etp={}: only etp=1 (each expert whole on one GPU) or etp=tp={} (each expert split over the TP \
                     group) is modelled",
                    self.etp, self.tp
                ),
            );
        }
        // Megatron-Core's initialize_model_parallel (parallel_state.py @ core_r0.12.0) raises unless
        // the world size is a multiple of etp x ep x pp.
        if self.etp > 1 && width % (self.etp * self.ep) != 0 {
            return bad(
                "--parallel etp",
                format!(
                    "etp={} x ep={} must divide tp x cp x dp = {width} (Megatron-Core: the world size must be a \
                     multiple of etp x ep x pp)",
                    self.etp, self.ep
                ),
            );
        }
        if self.etp == 1 && self.ep > 1 && (width % self.ep != 0 || self.ep % self.tp != 0) {
            let valid: Vec<String> =
                (1..=width).filter(|e| width % e == 0 && e % self.tp == 0).map(|e| e.to_string()).collect();
            return bad(
                "--parallel",
                format!(
                    "ep={} must divide tp x cp x dp = {width} and be a multiple of tp={} (the expert-parallel group is \
                     made of whole TP groups of one stage); valid: {}",
                    self.ep,
                    self.tp,
                    valid.join(", ")
                ),
            );
        }
        self.moe.check()
    }

    /// The expert-parallel group of `rank`: `ep` ranks of its stage, `etp` apart (Megatron-Core's
    /// expert rank order etp-ep-dp-pp).
    pub fn ep_group(&self, rank: u32) -> Vec<u32> {
        let stage_size = self.tp * self.dp;
        let base = rank / stage_size * stage_size;
        let (etp, r) = (self.etp.max(1), rank - base);
        let first = base + r / (etp * self.ep) * etp * self.ep + r % etp;
        (0..self.ep).map(|e| first + e * etp).collect()
    }

    /// A rank's coordinates.
    pub fn coords(&self, rank: u32) -> Coords {
        Coords { tp: rank % self.tp, dp: (rank / self.tp) % self.dp, stage: rank / (self.tp * self.dp) }
    }

    /// The rank at the given coordinates.
    pub fn rank(&self, c: Coords) -> u32 {
        c.tp + self.tp * (c.dp + self.dp * c.stage)
    }

    /// The TP group of `rank`, in TP order.
    pub fn tp_group(&self, rank: u32) -> Vec<u32> {
        let c = self.coords(rank);
        (0..self.tp).map(|t| self.rank(Coords { tp: t, ..c })).collect()
    }

    /// The DP group of `rank`, in DP order.
    pub fn dp_group(&self, rank: u32) -> Vec<u32> {
        let c = self.coords(rank);
        (0..self.dp).map(|d| self.rank(Coords { dp: d, ..c })).collect()
    }

    /// The pipeline `rank` belongs to, stage by stage.
    pub fn pp_group(&self, rank: u32) -> Vec<u32> {
        let c = self.coords(rank);
        (0..self.pp).map(|s| self.rank(Coords { stage: s, ..c })).collect()
    }

    /// Transformer layers of each model chunk of `stage` (Megatron's interleaved assignment:
    /// chunk c of stage s holds the (c pp + s)-th slice of L / (pp vp) layers).
    /// Under a DeepSpeed partition (`vp` 1) stage s holds items [s k, (s + 1) k) of the layers
    /// (with the embedding and the output layer as items at both ends under
    /// `type:transformer|embedding`), k = ceil(items / pp).
    pub fn stage_layers(&self, layers: u32, stage: u32) -> Vec<Range<u32>> {
        if !self.pp_partition.is_even() && self.pp > 1 {
            let ends = u32::from(self.pp_partition == PpPartition::TransformerEmbedding);
            let items = layers + 2 * ends;
            let k = items.div_ceil(self.pp);
            let item = |i: u32| i.saturating_sub(ends).min(layers);
            let range = item((stage * k).min(items))..item(((stage + 1) * k).min(items));
            return vec![range];
        }
        let per = layers / (self.pp * self.vp);
        (0..self.vp)
            .map(|c| {
                let first = (c * self.pp + stage) * per;
                first..first + per
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ddp_apex_takes_a_bucket_cap_and_refuses_what_apex_does_not_run() {
        let p = ParallelPlan::parse("tp=2,pp=2,dp=2,zero=1,ddp=apex").unwrap();
        assert_eq!(p.apex_bucket_bytes, Some(100 << 20), "Apex's default bucket_cap_mb");
        let p = ParallelPlan::parse("bucket-mb=125,dp=4,zero=1,ddp=apex").unwrap();
        assert_eq!(p.apex_bucket_bytes, Some(125 << 20));
        assert!(!p.mcore_ddp);
        let p = ParallelPlan::parse("dp=4,zero=1,ddp=apex,bucket-mb=0.5").unwrap();
        assert_eq!(p.apex_bucket_bytes, Some(1 << 19));
        assert!(p.name().contains(",ddp=apex,bucket-mb=0.5"), "{}", p.name());
        for (spec, says) in [
            ("dp=4,zero=1,bucket-mb=125", "needs ddp=apex"),
            ("dp=4,ddp=apex", "zero=1"),
            ("dp=4,zero=3,ddp=apex", "zero=1"),
            ("dp=4,zero=1,ddp=apex,mp-optimizer=ds-bf16", "mp-optimizer=megatron"),
            ("dp=4,zero=1,ddp=apex,bucket-mb=0", "bucket-mb=0"),
            ("dp=4,zero=1,ddp=apex,bucket-mb=big", "bucket-mb=big"),
            ("dp=4,zero=1,ddp=torch", "mcore, apex or generic"),
        ] {
            let e = ParallelPlan::parse(spec).unwrap_err().to_string();
            assert!(e.contains(says) && e.contains("--parallel"), "{spec}: {e}");
        }
    }

    #[test]
    fn host_launch_cost_follows_the_host_cpu() {
        use crate::workload::gpu::GpuSpec;
        // TransformerEngine #2053: torch.nn.Linear forward CPU time 13.48 us on a DGX H100's Xeon
        // 8480C, 37.08 us on GB200's Grace.
        assert_eq!(eager_launch_ns(GpuSpec::by_name("h100").unwrap()), 13_480);
        assert_eq!(eager_launch_ns(GpuSpec::by_name("a100").unwrap()), 13_480);
        assert_eq!(eager_launch_ns(GpuSpec::by_name("b200").unwrap()), 13_480);
        assert_eq!(eager_launch_ns(GpuSpec::by_name("gb200").unwrap()), 37_080);
    }

    #[test]
    fn parses_and_names_a_plan() {
        let mut p = ParallelPlan::parse("tp=8,pp=4,dp=8,vp=2,sp=on,zero=1,recompute=selective").unwrap();
        assert_eq!((p.tp, p.pp, p.dp, p.vp, p.sp), (8, 4, 8, 2, true));
        assert_eq!(p.schedule, Schedule::Interleaved);
        assert_eq!(p.sharding, Sharding::Zero1);
        (p.micro_batch, p.global_batch) = (1, 512);
        assert_eq!(p.name(), "tp=8,pp=4,dp=8,vp=2,sp=on,mb=1,gbs=512,zero=1,recompute=selective");
        assert_eq!(ParallelPlan::parse("fsdp=hybrid").unwrap().sharding, Sharding::FsdpHybrid);
        let mut unfused = ParallelPlan::parse("tp=2,loss=unfused").unwrap();
        assert_eq!(unfused.loss, LossKernel::Unfused);
        (unfused.micro_batch, unfused.global_batch) = (1, 8);
        assert_eq!(unfused.name(), "tp=2,pp=1,dp=1,mb=1,gbs=8,loss=unfused");
        assert_eq!(ParallelPlan::parse("loss=fused").unwrap().loss, LossKernel::Fused);
        let sm = ParallelPlan::parse("tp=2,flash=off,softmax=swapped-check").unwrap();
        assert_eq!(sm.softmax, SoftmaxKernel::SwappedCheck);
        assert!(sm.name().ends_with(",softmax=swapped-check"), "{}", sm.name());
        assert_eq!(ParallelPlan::parse("tp=2").unwrap().softmax, SoftmaxKernel::Fused);
        let cs = ParallelPlan::parse("tp=1,fp8-recipe=cs").unwrap();
        assert_eq!(cs.fp8_recipe, Fp8Recipe::Current);
        assert!(cs.name().ends_with(",fp8-recipe=cs"), "{}", cs.name());
        assert_eq!(ParallelPlan::parse("fp8-recipe=delayed").unwrap().fp8_recipe, Fp8Recipe::Delayed);
        assert!(!ParallelPlan::parse("tp=1").unwrap().name().contains("fp8-recipe"));
        let bad = ParallelPlan::parse("fp8-recipe=mx").unwrap_err().to_string();
        assert!(bad.contains("fp8-recipe=mx") && bad.contains("delayed or cs"), "{bad}");
        assert_eq!(ParallelPlan::parse("tp=2").unwrap().modules, None);
        assert_eq!(ParallelPlan::parse("tp=2,modules=te").unwrap().modules, Some(ModuleImpl::Te));
        assert_eq!(ParallelPlan::parse("modules=transformer_engine").unwrap().modules, Some(ModuleImpl::Te));
        assert_eq!(ParallelPlan::parse("tp=2,modules=torch").unwrap().modules, Some(ModuleImpl::Torch));
        assert!(ParallelPlan::parse("tp=2,modules=te").unwrap().name().ends_with(",modules=te"));
        {
            use crate::workload::gpu::Precision;
            assert_eq!(ModuleImpl::resolve(None, Precision::Fp8), ModuleImpl::Te);
            assert_eq!(ModuleImpl::resolve(None, Precision::Bf16), ModuleImpl::Torch);
            assert_eq!(ModuleImpl::resolve(Some(ModuleImpl::Te), Precision::Bf16), ModuleImpl::Te);
        }
        assert_eq!(ParallelPlan::parse("ep=8").unwrap().moe.dispatcher, Dispatcher::AllToAll);
        for flex in ["flex", "deepep"] {
            let p = ParallelPlan::parse(&format!("ep=8,moe-dispatcher={flex}")).unwrap();
            assert_eq!(p.moe.dispatcher, Dispatcher::Flex);
        }
        assert_eq!(ParallelPlan::parse("ep=8,moe-dispatcher=hybridep").unwrap().moe.dispatcher, Dispatcher::HybridEp);
        // The builder's folded plan (CP inside DP) still names the user's plan, in messages too.
        let mut cp = ParallelPlan::parse("tp=2,cp=4,dp=2").unwrap();
        (cp.micro_batch, cp.global_batch) = (1, 8);
        assert_eq!(cp.folded().dp, 8);
        assert_eq!(cp.folded().name(), cp.name());
        assert_eq!(cp.name(), "tp=2,pp=1,dp=2,cp=4,mb=1,gbs=8");
        for (bad, says) in [
            ("tp=0", "at least 1"),
            ("tp8", "key=value"),
            ("zero=4", "0, 1, 2 or 3"),
            ("ep2", "key=value"),
            ("moe-imbalance=-1", "positive number"),
            ("moe-dispatcher=nccl", "alltoall, flex (deepep) or hybridep"),
            ("host=jit", "eager, graphs, blocking or off"),
            ("host-launch-us=0", "positive number"),
            ("modules=apex", "modules=apex: expected te or torch"),
            ("host-launch-us=1e30", "beyond the limit"),
            ("expert=2", "unknown key `expert`"),
            ("recompute=some", "none, selective or full"),
            ("sp=maybe", "on or off"),
            ("loss=fast", "loss=fast: expected fused or unfused"),
            ("softmax=torch", "softmax=torch: expected fused, unfused or swapped-check"),
        ] {
            let e = ParallelPlan::parse(bad).unwrap_err().to_string();
            assert!(e.contains("--parallel") && e.contains(says), "{bad}: {e}");
        }
    }

    #[test]
    fn ranks_and_groups_follow_megatron_order() {
        let p = ParallelPlan { tp: 8, pp: 4, dp: 2, ..Default::default() };
        assert_eq!(p.tp_group(13), (8..16).collect::<Vec<_>>());
        assert_eq!(p.dp_group(13), vec![5, 13]);
        assert_eq!(p.pp_group(13), vec![13, 29, 45, 61]);
        for r in 0..64 {
            assert_eq!(p.rank(p.coords(r)), r);
        }
        assert_eq!(p.coords(45), Coords { tp: 5, dp: 1, stage: 2 });
        let i = ParallelPlan { pp: 4, vp: 2, ..Default::default() };
        assert_eq!(i.stage_layers(16, 1), vec![2..4, 10..12]);
    }

    #[test]
    fn deepspeed_optimizers_pass_over_the_gradients_after_each_micro_batch() {
        // Megatron's fused accumulation: nothing. ZeRO-1's AccumulateGrad: 2 + 2 read, 2 written,
        // on all micro-batches but the first. BF16_Optimizer: cast (2 + 4) and add (4 + 4 + 4),
        // two kernels a tensor, on every micro-batch.
        assert_eq!(MpOptimizer::Megatron.grad_accumulation(8, 2, 4), None);
        assert_eq!(MpOptimizer::DsZero.grad_accumulation(1, 2, 2), None);
        let z = MpOptimizer::DsZero.grad_accumulation(4, 2, 2).unwrap();
        assert_eq!((z.bytes_per_param, z.kernels_per_tensor, z.fraction), (6.0, 1, 0.75));
        for m in [1, 64] {
            let b = MpOptimizer::DsBf16.grad_accumulation(m, 2, 4).unwrap();
            assert_eq!((b.bytes_per_param, b.kernels_per_tensor, b.fraction), (18.0, 2, 1.0));
        }
    }

    #[test]
    fn torch_fsdp_casts_to_the_reduce_dtype_and_predivides_on_every_micro_batch() {
        // Composer's DEFAULT (BF16 parameters, FP32 reduce): cast 2 read + 4 written, pre-divide
        // 4 + 4; PURE (BF16 reduce): the pre-divide alone, 2 + 2. Every micro-batch, the first too.
        for m in [1, 16] {
            let d = MpOptimizer::TorchFsdp.grad_accumulation(m, 2, 4).unwrap();
            assert_eq!((d.bytes_per_param, d.kernels_per_tensor, d.fraction), (14.0, 2, 1.0));
            let p = MpOptimizer::TorchFsdp.grad_accumulation(m, 2, 2).unwrap();
            assert_eq!((p.bytes_per_param, p.kernels_per_tensor, p.fraction), (4.0, 1, 1.0));
        }
        let p = ParallelPlan::parse("tp=1,pp=1,dp=8,fsdp=full,mp-optimizer=torch-fsdp").unwrap();
        assert_eq!((p.mp_optimizer, p.grad_bytes), (MpOptimizer::TorchFsdp, 4));
        assert!(p.name().ends_with("mp-optimizer=torch-fsdp"), "{}", p.name());
        let e = ParallelPlan::parse("tp=1,pp=1,dp=8,zero=1,mp-optimizer=torch-fsdp").unwrap_err().to_string();
        assert!(e.contains("mp-optimizer=torch-fsdp") && e.contains("fsdp=full"), "{e}");
        let e = ParallelPlan::parse("dp=8,fsdp=full,mp-optimizer=fsdp2").unwrap_err().to_string();
        assert!(e.contains("torch-fsdp"), "{e}");
    }

    #[test]
    fn mp_optimizer_names_deepspeed_and_refuses_what_it_does_not_do() {
        let p = ParallelPlan::parse("tp=2,dp=4,zero=1,mp-optimizer=ds-zero").unwrap();
        assert_eq!((p.mp_optimizer, p.grad_bytes), (MpOptimizer::DsZero, 2));
        assert!(p.name().ends_with(",zero=1,mp-optimizer=ds-zero"), "{}", p.name());
        let b = ParallelPlan::parse("tp=2,dp=4,zero=1,mp-optimizer=ds-bf16").unwrap();
        assert_eq!((b.mp_optimizer, b.grad_bytes), (MpOptimizer::DsBf16, 4));
        for (spec, needle) in [
            ("dp=4,zero=1,mp-optimizer=ds-zero,grad-reduce=fp32", "grad-reduce=fp32"),
            ("dp=4,zero=3,mp-optimizer=ds-zero", "zero=1 or zero=2"),
            ("dp=4,zero=1,mp-optimizer=ds-bf16,grad-reduce=bf16", "grad-reduce=bf16"),
            ("dp=4,mp-optimizer=ds-bf16", "zero=1"),
            ("dp=4,mp-optimizer=apex", "mp-optimizer=apex"),
        ] {
            let e = ParallelPlan::parse(spec).unwrap_err().to_string();
            assert!(e.contains(needle) && e.contains("--parallel"), "{spec}: {e}");
        }
    }

    #[test]
    fn deepspeed_partitions_split_layers_unevenly() {
        let split = |spec: &str, layers| {
            let p = ParallelPlan::parse(spec).unwrap();
            (0..p.pp).map(|s| p.stage_layers(layers, s)[0].clone()).collect::<Vec<_>>()
        };
        // tr11 prequel l.870: 78 layers on 12 stages, 7 each and 1 on the last.
        let r = split("pp=12,pp-partition=type:transformer", 78);
        assert_eq!(r.iter().map(|r| r.len()).collect::<Vec<_>>(), [7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 1]);
        assert_eq!((r[0].clone(), r[11].clone()), (0..7, 77..78));
        // tr11-176B-ml README: BLOOM's 70 layers as [embed | 5], 6 x 10, [5 | embed].
        let r = split("pp=12,pp-partition=type:transformer|embedding", 70);
        assert_eq!(r.iter().map(|r| r.len()).collect::<Vec<_>>(), [5, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 5]);
        assert_eq!((r[0].clone(), r[1].clone(), r[11].clone()), (0..5, 5..11, 65..70));
        // Divisible layers: the same split as Megatron's.
        assert_eq!(split("pp=12,pp-partition=transformer", 72), split("pp=12", 72));
        let mut p = ParallelPlan::parse("tp=1,pp=12,dp=1,pp-partition=type:transformer").unwrap();
        (p.micro_batch, p.global_batch) = (1, 12);
        assert!(p.check(12, 78).is_ok());
        assert!(p.name().ends_with("pp-partition=type:transformer"), "{}", p.name());
        // 13 layers on 12 stages: ceil gives 2 each, so the last stages would be empty.
        let e = p.check(12, 13).unwrap_err().to_string();
        assert!(e.contains("without a transformer layer"), "{e}");
        let e = ParallelPlan::parse("pp-partition=parameters").unwrap_err().to_string();
        assert!(e.contains("pp-partition=parameters") && e.contains("type:transformer"), "{e}");
        let mut v = ParallelPlan::parse("pp=2,vp=2,pp-partition=type:transformer").unwrap();
        (v.micro_batch, v.global_batch) = (1, 2);
        assert!(v.check(2, 8).unwrap_err().to_string().contains("vp=2 needs pp-partition=even"));
    }

    #[test]
    fn bad_plans_say_what_would_be_valid() {
        let p =
            |s: &str, mb, gbs| ParallelPlan { micro_batch: mb, global_batch: gbs, ..ParallelPlan::parse(s).unwrap() };
        let check = |plan: ParallelPlan, gpus, layers| plan.check(gpus, layers).unwrap_err().to_string();
        let e = check(p("tp=8,pp=4,dp=8", 1, 512), 128, 96);
        assert!(e.contains("8 x 4 x 8 = 256") && e.contains("128 GPUs"), "{e}");
        let e = check(p("tp=8,pp=5,dp=1", 1, 64), 40, 96);
        assert!(e.contains("does not divide") && e.contains("96 layers") && e.contains("32"), "{e}");
        let e = check(p("tp=8,pp=1,dp=2", 3, 16), 16, 96);
        assert!(e.contains("--micro-batch") && e.contains("divisor of 8"), "{e}");
        let e = check(p("tp=8,pp=1,dp=4", 1, 18), 32, 96);
        assert!(e.contains("--global-batch") && e.contains("dp=4"), "{e}");
        let e = check(p("tp=8,pp=4,dp=1,vp=2", 1, 6), 32, 96);
        assert!(e.contains("multiple of pp=4"), "{e}");
        let e = check(p("tp=8,pp=4,dp=2,zero=3", 1, 64), 64, 96);
        assert!(e.contains("zero=1"), "{e}");
        let e = check(p("sp=on,dp=8", 1, 64), 8, 96);
        assert!(e.contains("tp of at least 2"), "{e}");
        assert!(p("tp=8,pp=4,dp=8,vp=3", 1, 512).check(256, 96).is_ok());
    }
}
