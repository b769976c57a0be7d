//! Per-operation cost of a transformer on one GPU for one micro-batch: every GEMM by its shape
//! (a roofline whose math side runs at the GPU's measured best matmul rate, reduced by wave
//! quantisation, and whose memory side streams the operands), attention with or without a fused
//! flash-attention kernel, norms, activations, dropout and residual adds as memory passes, the
//! embedding, the output layer and the loss. Shapes are those of one tensor-parallel rank
//! (Megatron's column/row split, optionally sequence-parallel). The result is the ordinary
//! [`Workload`] (embedding, then an attention and an MLP block per layer, then the output layer),
//! with each block's tensor-parallel collectives attached, plus the FLOP counts reports need.
//!
//! Every efficiency below cites the public measurement it comes from; none is fitted to the
//! validation sets. Knows nothing of plans beyond the TP degree, nor of machines or the engine.

use super::gemm_table::{GemmTable, GemmType};
use super::gpu::{GpuSpec, Precision};
use super::moe::{moe_blocks, MoeCost, MoeOptions};
use super::synth::{LAUNCH_NS, MEMORY_EFFICIENCY};
use super::transformer::{Family, Position, TransformerConfig};
use super::{CommGroup, Layer, MemoryShare, Stat, TpCollective, TpComm, Workload};
use crate::error::{Error, Result};
use serde::Serialize;

/// Activation recomputation (Korthikanti et al. 2022).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Recompute {
    /// Keep every activation.
    #[default]
    None,
    /// Recompute the attention core (scores, softmax, dropout, context) in the backward pass.
    Selective,
    /// Keep only each layer's input; recompute the whole layer before its backward pass.
    Full,
}

impl Recompute {
    pub fn name(self) -> &'static str {
        match self {
            Recompute::None => "none",
            Recompute::Selective => "selective",
            Recompute::Full => "full",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "none" | "no" => Some(Recompute::None),
            "selective" | "sel" => Some(Recompute::Selective),
            "full" => Some(Recompute::Full),
            _ => None,
        }
    }
}

/// The fused attention kernels a stack runs (`--parallel attn=`): each is timed at its own
/// published H100 rates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AttnKernel {
    /// FlashAttention-2 (flash-attn 2.x; Transformer Engine's `FlashAttention` backend).
    Fa2,
    /// FlashAttention-3 (Hopper only; flash-attn 3, Transformer Engine 1.11 and later).
    Fa3,
    /// cuDNN's fused attention (Transformer Engine's `FusedAttention`, its choice on sm90 from
    /// v1.3 to v1.8 whenever cuDNN's arbitrary-sequence backend takes the shape).
    Cudnn,
}

impl AttnKernel {
    pub fn name(self) -> &'static str {
        match self {
            AttnKernel::Fa2 => "fa2",
            AttnKernel::Fa3 => "fa3",
            AttnKernel::Cudnn => "cudnn",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "fa2" | "flash2" => Some(AttnKernel::Fa2),
            "fa3" | "flash3" => Some(AttnKernel::Fa3),
            "cudnn" => Some(AttnKernel::Cudnn),
            _ => None,
        }
    }
}

/// The cross-entropy over the vocabulary-parallel logits (`--parallel loss=`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum LossKernel {
    /// One fused pass each way: the 16-bit logits read and an FP32 copy written and read for the
    /// softmax forward; the FP32 gradient written and read, the 16-bit one written backward.
    #[default]
    Fused,
    /// Megatron's `_VocabParallelCrossEntropy` run as separate PyTorch kernels, the default of
    /// Megatron-Core r0.8.0 (`--cross-entropy-loss-fusion` off; `megatron/core/tensor_parallel/
    /// cross_entropy.py` @ core_r0.8.0), and of Megatron-LM before it: forward the FP32 copy of
    /// the logits (`.float()`: read 2, write 4 bytes an element), the max (read 4), the max
    /// subtracted in place (read 4, write 4), `exp` in place (4 + 4), the sum (4), the division by
    /// it in place (4 + 4): 38 bytes; backward the gradient scaled in place (`mul_`, 4 + 4) and
    /// cast back to the logits' 16 bits by autograd (4 + 2): 14 bytes. The logits are 16-bit under
    /// FP8 as well (Megatron's output layer is not an FP8 module); FP32 logits skip both casts.
    Unfused,
}

impl LossKernel {
    pub fn name(self) -> &'static str {
        match self {
            LossKernel::Fused => "fused",
            LossKernel::Unfused => "unfused",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "fused" => Some(LossKernel::Fused),
            "unfused" => Some(LossKernel::Unfused),
            _ => None,
        }
    }

    pub fn is_default(&self) -> bool {
        *self == LossKernel::Fused
    }
}

/// Transformer Engine's FP8 scaling recipe for the weight GEMMs of the dense linears
/// (`--parallel fp8-recipe=`; only read under FP8).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Fp8Recipe {
    /// Delayed scaling (`DelayedScaling`, TE's default): each cast uses the scale from the amax
    /// history and records its amax inside the same kernel, so a norm in front of a GEMM writes
    /// FP8 itself (TE v1.8, `Device::te_fp8_casts`).
    #[default]
    Delayed,
    /// Per-tensor current scaling (`Float8CurrentScaling`, Megatron-Bridge's `--fp8_recipe cs`,
    /// the "FP8-CS" of its performance summaries): each tensor's amax is taken before its cast,
    /// so every quantisation is an amax kernel, a scale kernel and the cast
    /// (`Float8CurrentScalingQuantizer::quantize_impl`, pytorch/csrc/quantizer.cpp @ v2.9
    /// l.497-536), and the norm in front of a GEMM writes its 16-bit output with the amax and the
    /// cast follows (`FUSED_NORM_AMAX_FP8`, pytorch/csrc/extensions/normalization.cpp @ v2.9
    /// l.116-121 and l.190-193).
    Current,
}

impl Fp8Recipe {
    pub fn name(self) -> &'static str {
        match self {
            Fp8Recipe::Delayed => "delayed",
            Fp8Recipe::Current => "cs",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "delayed" | "ds" => Some(Fp8Recipe::Delayed),
            "cs" | "current" => Some(Fp8Recipe::Current),
            _ => None,
        }
    }

    pub fn is_default(&self) -> bool {
        *self == Fp8Recipe::Delayed
    }
}

/// The scale-mask-softmax over the attention scores when the attention is not fused
/// (`--parallel softmax=`, with `flash=off`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SoftmaxKernel {
    /// Megatron's fused `FusedScaleMaskSoftmax` kernel: one pass each way.
    #[default]
    Fused,
    /// Megatron's PyTorch fallback (`forward_torch_softmax`) under its defaults (query-key layer
    /// scaling on, which forces the softmax into FP32): forward the FP32 copy of the scores (read
    /// 2, write 4 bytes an element), the scale (4 + 4), `masked_fill_` in place (4 + 4; the
    /// [1, 1, s, s] bool mask broadcast over every head stays in L2), `Softmax` (4 + 4) and the
    /// cast back (4 + 2): 36 bytes in 5 kernels; backward autograd's reverse of each: the cast (2 +
    /// 4), the softmax gradient (read the gradient and the saved output, write: 12), the mask (4 +
    /// 4), the scale (4 + 4), the cast (4 + 2): 40 bytes in 5 kernels (bigscience-workshop/
    /// Megatron-DeepSpeed @ 58d9204 `megatron/model/fused_softmax.py` l.171-185,
    /// `megatron/model/utils.py` l.53, `transformer.py` l.136/176).
    Unfused,
    /// Megatron's own choice between the two as Megatron-DeepSpeed made it from 9f5f5d4
    /// (2021-10-21, "fused softmax layer bug fix sync") to 1cb76a6 (2022-03-06, "sync the whole
    /// Meg-LM fused_kernels sub-tree"), BLOOM's February 2022 benchmarks: fused for 16-bit scores
    /// when 16 < s <= 2048, s % 4 = 0 and b x heads/tp is a multiple of 4 and of the kernel's
    /// batches per block, which `get_batch_per_block` computed with its arguments swapped
    /// (`fused_softmax.py` @ 58d9204 l.146 passes (sq, sk, b, np) to a method declared (b, np, sq,
    /// sk), l.189-192), so from the heads per GPU in place of the key length (see
    /// [`swapped_batches_per_block`]); otherwise [`SoftmaxKernel::Unfused`]. The start-up check
    /// (`initialize.py` l.191-207) tests only the multiple of 4, so the fallback is silent.
    /// NVIDIA/Megatron-LM had the swap only between 40becfc and 0d350c8, both of 2021-08-13.
    SwappedCheck,
}

impl SoftmaxKernel {
    pub fn name(self) -> &'static str {
        match self {
            SoftmaxKernel::Fused => "fused",
            SoftmaxKernel::Unfused => "unfused",
            SoftmaxKernel::SwappedCheck => "swapped-check",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "fused" => Some(SoftmaxKernel::Fused),
            "unfused" => Some(SoftmaxKernel::Unfused),
            "swapped-check" => Some(SoftmaxKernel::SwappedCheck),
            _ => None,
        }
    }

    pub fn is_default(&self) -> bool {
        *self == SoftmaxKernel::Fused
    }

    /// Whether the fused kernel runs for `micro_batch` sequences of `seq_len` tokens with
    /// `heads_per_gpu` heads in `elem`-byte scores (causal mask, as GPT's).
    pub fn fused_for(self, micro_batch: u64, heads_per_gpu: u64, seq_len: u64, elem: f64) -> bool {
        match self {
            SoftmaxKernel::Fused => true,
            SoftmaxKernel::Unfused => false,
            SoftmaxKernel::SwappedCheck => {
                let attn_batches = micro_batch * heads_per_gpu;
                elem == 2.0
                    && 16 < seq_len
                    && seq_len <= 2048
                    && seq_len % 4 == 0
                    && attn_batches % 4 == 0
                    && attn_batches % swapped_batches_per_block(heads_per_gpu) == 0
            }
        }
    }
}

/// The fused softmax's batches per block (`get_batch_per_block`, `scaled_masked_softmax.h` @
/// 58d9204 l.316-329: 128 threads a block, a warp of min(32, next power of two) threads per row,
/// two rows a warp up to 128 elements) computed, as the swapped call did, from the heads per GPU
/// where the key length belongs.
pub fn swapped_batches_per_block(heads_per_gpu: u64) -> u64 {
    let pow2 = heads_per_gpu.max(1).next_power_of_two();
    let warp = pow2.min(32);
    let rows_per_warp = if pow2 <= 128 { 2 } else { 1 };
    (128 / warp) * rows_per_warp
}

/// How context parallelism exchanges keys and values (`--parallel cp-comm=`), named as
/// Transformer Engine's `cp_comm_type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CpComm {
    /// Keys and values of the whole sequence all-gathered over the CP group before the attention
    /// kernel, not overlapped with it; their gradients reduce-scattered after the backward kernel
    /// (TE's `all_gather`, `AttnFuncWithCPAndKVAllGather`, TE 1.10 and later: "KV all-gather
    /// between CP ranks is exposed"; dagsim's model before the ring, and still the default).
    #[default]
    AllGather,
    /// TE's ring (`p2p`, `AttnFuncWithCP`, the only kind before TE 1.10): the attention in cp
    /// steps, each beside a send of keys and values to the next CP rank.
    P2p,
}

impl CpComm {
    pub fn name(self) -> &'static str {
        match self {
            CpComm::AllGather => "all-gather",
            CpComm::P2p => "p2p",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "all-gather" | "all_gather" | "allgather" => Some(CpComm::AllGather),
            "p2p" | "ring" => Some(CpComm::P2p),
            _ => None,
        }
    }

    pub fn is_default(&self) -> bool {
        *self == CpComm::default()
    }
}

/// What to cost.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CostOptions {
    pub micro_batch: u32,
    pub seq_len: u32,
    pub precision: Precision,
    /// Tensor-parallel degree: matrices are split Megatron-style over this many GPUs.
    pub tp: u32,
    /// Sequence parallelism: norms, dropout and residuals on 1/tp of the tokens, and all-gather +
    /// reduce-scatter instead of all-reduce around each block.
    pub sequence_parallel: bool,
    pub recompute: Recompute,
    /// Fused attention (FlashAttention-2 on Ampere, -3 on Hopper and later): no s x s tensors.
    pub flash_attention: bool,
    /// Which fused kernels (None: FlashAttention-2 on Ampere, -3 on Hopper and later).
    pub attention: Option<AttnKernel>,
    /// Measured best matmul rate (TFLOP/s) replacing the table's for this GPU and precision.
    pub matmul_tflops: Option<f64>,
    /// The cross-entropy kernels over the logits.
    pub loss: LossKernel,
    /// The softmax over the attention scores when the attention is not fused.
    pub softmax: SoftmaxKernel,
    /// Transformer Engine's FP8 scaling recipe (under FP8).
    pub fp8_recipe: Fp8Recipe,
}

/// Fraction of the dense tensor-core peak the best-shaped large matmul reaches (Maximum Achievable
/// Matmul FLOPS): torch `matmul` measurements in Stas Bekman's ml-engineering,
/// `compute/accelerator/README.md`, "Maximum Achievable Matmul FLOPS comparison table" (BF16 and
/// FP8 e4m3 tables; torch 2.6-2.10, CUDA 12.6-13.0). BF16 entries also serve FP16.
/// (gpu, BF16 measured TFLOP/s / datasheet, FP8 measured / datasheet)
pub const MATMUL_EFFICIENCY: &[(&str, f64, Option<f64>)] = &[
    ("a100-sxm4-40gb", 271.2 / 312.0, None), // "A100 SXM 271.2 of 312"
    ("a100-sxm4-80gb", 271.2 / 312.0, None),
    ("h100-sxm", 794.5 / 989.0, Some(1402.6 / 1979.0)), // BF16 794.5; FP8 1402.6
    // Not measured there: the H100 SXM fractions are assumed for the PCIe card.
    ("h100-pcie", 794.5 / 989.0, Some(1402.6 / 1979.0)),
    ("h200-sxm", 794.5 / 989.0, Some(1453.4 / 1979.0)), // BF16 "H200 is the same" as H100; FP8 1453.4
    ("b200", 1745.0 / 2250.0, Some(3432.5 / 4500.0)),   // BF16 1745.0; FP8 3432.5
    ("gb200", 1822.0 / 2500.0, Some(3615.6 / 5000.0)),  // BF16 1822.0; FP8 3615.6
];

/// Clock a GPU sustains under training load at its power limit, over the clock the matmul and
/// attention benchmarks above ran at (their best iterations, at the boost clock): tensor-core
/// rates measured in short benchmarks are scaled by it. Matmuls are power-limited (H. He,
/// "Strangely, Matrix Multiplications on GPUs Run Faster When Given 'Predictable' Data",
/// thonking.ai, 2024: an A100 8192^3 cuBLAS matmul at 295 TFLOP/s on zeros, 257 on randn), and a
/// training step keeps the tensor cores and the links busy for seconds, not the milliseconds of a
/// benchmark shape. Memory-bound kernels are not scaled (the power limit lowers the SM clock, not
/// the memory clock). (gpu, sustained MHz / benchmark MHz)
pub const SUSTAINED_CLOCK: &[(&str, f64)] = &[
    // NVIDIA's HPL Rpeak for the A100 used the clock it sustains at its power limit under HPL,
    // 1305 MHz, against the 1410 MHz boost the 312 TFLOP/s peak is computed at (G. Lockwood,
    // "Peak FLOPS", glennklockwood.com/garden/peak-FLOPS). Cross-check: He's randn 8192^3 matmul,
    // 257 TFLOP/s, is 0.948 of the best-shape best-iteration 271.2 (MAMF table above).
    ("a100-sxm4-40gb", 1305.0 / 1410.0),
    ("a100-sxm4-80gb", 1305.0 / 1410.0),
    // H100-class (H800) GEMMs under compute-communication overlap, as in training: the SM clock
    // falls from 1980 MHz (the clock GEMMs run at alone) to 1575 MHz at the power limit
    // (deepseek-ai/DeepGEMM issue #120, 2025-06; the maintainers: expected, power-related).
    ("h100-sxm", 1575.0 / 1980.0),
    // Not measured: the SXM figure assumed for the PCIe card, as for its MAMF above.
    ("h100-pcie", 1575.0 / 1980.0),
    // The same GH100 die at the same 700 W: an H200 cannot hold 1830 MHz under full load at 700 W
    // (tile-ai/TileOPs issue #1587, 2026-06; 1500 MHz is what it holds locked). Its GEMMs run
    // at its measured SUSTAINED_MATMUL_TFLOPS (the sweep's BF16 GEMMs held 1425-1545 MHz), so this
    // scales its attention only.
    ("h200-sxm", 1575.0 / 1980.0),
    // B200 (1000 W): kernels run back to back for longer than ~5 ms draw ~1000 W and the SM clock
    // falls from 1965 to ~1580 MHz (flashinfer-ai/flashinfer PR #2899, 2026-03, measured with
    // FlashAttention-4 BF16 on a B200; its TFLOP/s fall 15% over 100 iterations).
    ("b200", 1580.0 / 1965.0),
    // Not measured: the B200 fraction assumed for the GB200 (the same die; its 1200 W limit pays
    // for the higher clock its 2.5 PFLOP/s datasheet peak assumes, and no public trace of a GB200's
    // clock under load was found).
    ("gb200", 1580.0 / 1965.0),
];

/// Dense 16-bit matmul rate (TFLOP/s) a GPU was measured to sustain over seconds of work, which
/// replaces [`MATMUL_EFFICIENCY`] x [`SUSTAINED_CLOCK`] for FP16/BF16 GEMMs where it is known.
/// A100 SXM4 80GB: 230 TFLOP/s, torch `a @ b` on two 8192 x 8192 FP16 randn matrices, the median
/// over at least 3 s of repeats (mli/transformers-benchmarks, README "Micro-Benchmarking Summary"
/// and micro_bench.ipynb, NGC container pytorch:22.07, i.e. CUDA 11.7 / cuBLAS 11.10). Chosen over
/// the other public long-run figure, He's 257 TFLOP/s on randn inputs (thonking.ai, 2024; card and
/// software not stated), because it is the 80 GB card of every A100 row and the 2022 software
/// generation the A100 runs used (Megatron-LM 2022, BigScience's PyTorch 1.11 / CUDA 11.5), and a
/// median over seconds is what a training step sees; MAMF's 271.2 x 1305/1410 gives 251.
/// A100 SXM4 40GB: not measured; the 80 GB card's rate assumed (the same GA100 at the same 400 W;
/// the matmul is compute-bound, so its slower HBM2 does not enter).
/// H200 SXM: this project's own sweep, docs/gpu_runs/h200-2026-11-28/matmul_sweep.csv (`python3
/// tools/gpu/matmul_sweep.py --seconds 1.0 --preheat 8`: torch 2.11 / CUDA 13.0 cuBLAS, randn
/// operands, the median call over 1 s after 8 s of load, 1425-1545 MHz at the 700 W limit). On
/// Hopper the figure is the rate at [`TILE_REFERENCE_K`], shallower GEMMs paying the per-tile cost
/// ([`DENSE16_TILE_FIXED_NS`] for 16-bit, [`TILE_FIXED_NS`] for FP8): least squares over the 91
/// BF16 shapes (M 4096/16384, N and K 512-49152) of this model's GEMM time gives 690 TFLOP/s with
/// 490 ns; over the 6 FP8 e4m3 `_scaled_mm` shapes with the 2234 ns of [`TILE_FIXED_NS`] held,
/// 1398 (docs/workloads.md, "H200 sweep"). (gpu, 16-bit TFLOP/s, FP8 TFLOP/s)
pub const SUSTAINED_MATMUL_TFLOPS: &[(&str, f64, Option<f64>)] =
    &[("a100-sxm4-80gb", 230.0, None), ("a100-sxm4-40gb", 230.0, None), ("h200-sxm", 690.0, Some(1398.0))];

/// The [`SUSTAINED_MATMUL_TFLOPS`] 16-bit rate of `gpu` in FLOP/ns, if measured.
fn sustained_matmul(gpu: &str) -> Option<f64> {
    SUSTAINED_MATMUL_TFLOPS.iter().find(|r| r.0 == gpu).map(|r| r.1 * 1e3)
}

/// The [`SUSTAINED_MATMUL_TFLOPS`] FP8 rate of `gpu` in FLOP/ns, if measured.
fn sustained_matmul_fp8(gpu: &str) -> Option<f64> {
    SUSTAINED_MATMUL_TFLOPS.iter().find(|r| r.0 == gpu).and_then(|r| r.2).map(|t| t * 1e3)
}

/// The [`SUSTAINED_CLOCK`] factor of `gpu` (1 where none is known).
fn sustained_clock(gpu: &str) -> f64 {
    SUSTAINED_CLOCK.iter().find(|r| r.0 == gpu).map_or(1.0, |r| r.1)
}

/// Output tile of one thread block in the wave-quantisation estimate: a GEMM whose tiles do not
/// fill the last wave of SMs leaves part of the GPU idle (NVIDIA, "Matrix Multiplication
/// Background User's Guide", sections on tile and wave quantisation; 128 x 128 is one of the
/// standard cuBLAS tiles it lists).
const TILE: u64 = 128;

/// Time a thread block spends on one output tile beyond its main loop, ns: filling the
/// load pipeline before the first MMA and writing the tile back after the last, which a tile's
/// K loop does not hide. Fitted to deepseek-ai/DeepGEMM PR #73's H800 FP8 GEMMs with 128 x 128
/// tiles (M = 4096: N 7168 K 16384 at 1404 TFLOP/s, N 7168 K 2048 at 1031, N 24576 K 1536 at
/// 999, N 32768 K 512 at 591): time = FLOPs / (R x wave fill) + waves x this, least squares
/// over the four gives R = 1503 TFLOP/s and 2234 ns, each point within 2.5%.
/// It holds for Hopper's 16-bit GEMMs too: a BF16 MoE expert MLP on one H100 (16 experts x
/// 2,048 rows, hidden 2048, expert width 512, SwiGLU; PyTorch `grouped_mm`) measured 0.495 ms
/// forward and 1.389 ms forward and backward (NVIDIA-NeMo/Megatron-Bridge
/// `skills/nemo-mbridge-perf-moe-optimization-workflow/references/qwen35-h100-campaign.md`, the
/// real-shape H100 primitive probe), where these GEMMs with this overhead give 0.490 and 1.381
/// ms and without it 0.391 and 1.156 (docs/workloads.md). Dense 16-bit GEMMs have their own,
/// smaller cost where measured ([`DENSE16_TILE_FIXED_NS`]); other architectures are unmeasured
/// and keep the roofline (0).
const TILE_FIXED_NS: &[(&str, f64)] = &[("Hopper", 2234.0)];
/// The K at which the measured best-shape matmul rates ([`MATMUL_EFFICIENCY`]) are taken to run:
/// DeepGEMM's K = 16384 GEMM above (1404 TFLOP/s) is where the H100 FP8 MAMF rate (1402.6) is
/// met, so a GEMM of this depth runs at the table's rate and shallower ones slower.
const TILE_REFERENCE_K: u64 = 16384;
/// [`TILE_FIXED_NS`] of dense 16-bit cuBLAS GEMMs, ns per wave of 128 x 128 tiles, fitted with the
/// H200's [`SUSTAINED_MATMUL_TFLOPS`] rate to the 91 BF16 shapes of this project's H200 sweep
/// (docs/gpu_runs/h200-2026-11-28/matmul_sweep.csv). Median error by K, model against measured,
/// K = 512 / 1024 / 2048 / 4096 / 8192: -4.2 / +1.6 / +6.7 / +8.5 / +8.0% with the roofline at
/// MAMF x clock (632 TFLOP/s), +0.2 / -0.2 / +1.0 / +0.9 / -0.6% with this; mean |error| 7.7 ->
/// 2.1%. Four times smaller than the grouped expert GEMMs' cost: it does not explain the H100 BF16
/// `grouped_mm` probe of [`TILE_FIXED_NS`] (which it would leave 22% fast), so it applies only to
/// dense GEMMs, and only on the GPU it was measured on: on the H100 (the same die, cuBLAS 12
/// in its rows) it improves dgxc_h100 3.0 -> 2.8% and llm_foundry_mpt 7.1 -> 6.8% but takes
/// megatron_h100_2024's 32B row from +26.9% to +27.7%, past its gate (docs/workloads.md).
const DENSE16_TILE_FIXED_NS: &[(&str, f64)] = &[("h200-sxm", 490.0)];

/// FlashAttention-3 forward throughput on an H100 SXM, head dim 128, B x S = 16k tokens, 16 heads
/// (pytorch/benchmark PR 2391, "flash_v3-tflops"): (sequence length, TFLOP/s). Used as a fraction
/// of the H100's 989.4 TFLOP/s for Hopper and, for want of a published measurement, Blackwell.
const FA3_FORWARD_TFLOPS: &[(u32, f64)] =
    &[(512, 430.32), (1024, 517.1), (2048, 565.54), (4096, 590.23), (8192, 614.23), (16384, 620.73)];
const FA3_REFERENCE_PEAK: f64 = 989.4;
/// FlashAttention-2 and cuDNN attention on an H100 SXM5, BF16, head dim 128, causal mask,
/// B x S = 16k tokens, hidden 2048 (Shah et al. 2024, "FlashAttention-3", arXiv 2407.08608,
/// Fig. 5(d) forward and Fig. 6 backward, head dim 128; cuDNN as released mid 2024):
/// (sequence length, TFLOP/s), counting causal FLOPs as half and the backward as 2.5 forwards.
const FA2_H100_FORWARD_TFLOPS: &[(u32, f64)] =
    &[(512, 191.0), (1024, 260.0), (2048, 298.0), (4096, 319.0), (8192, 333.0), (16384, 335.0)];
const FA2_H100_BACKWARD_TFLOPS: &[(u32, f64)] =
    &[(512, 214.0), (1024, 260.0), (2048, 291.0), (4096, 310.0), (8192, 318.0), (16384, 322.0)];
const CUDNN_H100_FORWARD_TFLOPS: &[(u32, f64)] =
    &[(512, 315.0), (1024, 410.0), (2048, 484.0), (4096, 518.0), (8192, 529.0), (16384, 539.0)];
const CUDNN_H100_BACKWARD_TFLOPS: &[(u32, f64)] =
    &[(512, 305.0), (1024, 408.0), (2048, 465.0), (4096, 499.0), (8192, 518.0), (16384, 516.0)];
/// The H100 SXM's dense BF16 peak the figures above are fractions of.
const H100_BF16_PEAK_TFLOPS: f64 = 989.4;
/// cuDNN attention on a GB200, BF16, causal (top-left) mask, head dim 128, 64 query and 8 KV
/// heads, batch 2, the backward not deterministic: NVIDIA/cudnn-frontend
/// `benchmark/sdpa_benchmark_training/results/llama3.1/gb200/llama3.1_20260424_100750.csv` @
/// 3929da2 (cuDNN 9.22, the median of 10 calls, so at the benchmark clock): (sequence length,
/// TFLOP/s), counting causal FLOPs as half and the backward as 2.5 forwards, as above
/// (`benchmark_single_sdpa.py`'s `flops`). Used for every Blackwell GPU as fractions of
/// [`GB200_BF16_PEAK_TFLOPS`] (the B200 assumed to reach the same fraction of its own peak).
/// The benchmark starts at 2048 tokens; the 512 and 1024 points are its 2048 rate scaled as cuDNN
/// falls on the H100 ([`CUDNN_H100_FORWARD_TFLOPS`]: 315 and 410 of 484; backward 305 and 408 of
/// 465), not measured.
const CUDNN_GB200_FORWARD_TFLOPS: &[(u32, f64)] = &[
    (512, 1097.0 * 315.0 / 484.0),
    (1024, 1097.0 * 410.0 / 484.0),
    (2048, 1097.0),
    (4096, 1408.0),
    (8192, 1574.0),
    (16384, 1708.0),
    (32768, 1622.0),
];
const CUDNN_GB200_BACKWARD_TFLOPS: &[(u32, f64)] = &[
    (512, 885.0 * 305.0 / 465.0),
    (1024, 885.0 * 408.0 / 465.0),
    (2048, 885.0),
    (4096, 1148.0),
    (8192, 1332.0),
    (16384, 1328.0),
    (32768, 1226.0),
];
/// The GB200's dense BF16 peak (its datasheet's 2.5 PFLOP/s; `gpu.rs`).
const GB200_BF16_PEAK_TFLOPS: f64 = 2500.0;
/// FlashAttention-2 on an A100 (Dao 2023, arXiv 2307.08691, Sec. 4.1): up to 73% of the
/// theoretical peak in the forward pass and up to 63% in the backward pass.
const FA2_FORWARD_FRACTION: f64 = 0.73;
const FA2_BACKWARD_FRACTION: f64 = 0.63;
/// Bytes of one gradient element as exchanged between data-parallel ranks: FP32 (Megatron's
/// `--accumulate-allreduce-grads-in-fp32` default for 16-bit training; FSDP's default reduce type).
pub const GRAD_BYTES: u64 = 4;
/// Bytes per parameter an optimizer step moves besides Adam's own passes
/// ([`super::memory::Optimizer::update_passes`]) and the 16-bit weight write, in Megatron-LM's
/// mixed-precision optimizer (megatron/optimizer/optimizer.py: the step of 2022's
/// `Float16OptimizerWithFloat16Params`, later `MixedPrecisionOptimizer`; clip_grads.py):
/// - the global gradient norm for clipping (`clip_grad_norm_fp32`, `--clip-grad` 1.0 by default):
///   one read of each FP32 gradient (`multi_tensor_l2norm`);
const GRAD_NORM_BYTES: f64 = 4.0;
/// - the copy of the FP32 master weights into the 16-bit model weights
///   (`_copy_main_params_to_model_params`, `multi_tensor_scale`) reads the master copy;
const MASTER_COPY_READ_BYTES: f64 = 4.0;
/// - FP16 only (dynamic loss scaling): unscaling each FP32 gradient and checking it for inf/NaN
///   (`_unscale_main_grads_and_check_for_nan`, `torch._amp_foreach_non_finite_check_and_unscale_`)
///   reads and writes it.
const UNSCALE_BYTES: f64 = 8.0;
/// The backward kernel does 2.5x the forward's matmul FLOPs (it recomputes the scores); both
/// FlashAttention papers count it so when they report backward TFLOP/s.
const FLASH_BACKWARD_FLOPS: f64 = 2.5;

/// How much slower than the best-shape `rate` a GEMM of depth `k` runs on `sms` SMs: each tile's
/// fixed `fixed_ns` ([`TILE_FIXED_NS`], [`DENSE16_TILE_FIXED_NS`]) over its main loop (2 x 128 x
/// 128 x k FLOPs at one SM's share of `rate`), relative to the same at [`TILE_REFERENCE_K`].
/// Short-K GEMMs (an MoE expert's fc2 at k = 768, a weight gradient over few tokens) lose the most.
fn short_k(fixed_ns: f64, k: u64, rate: f64, sms: u64) -> f64 {
    if fixed_ns <= 0.0 {
        return 1.0;
    }
    let main_loop = |k: u64| 2.0 * (TILE * TILE * k.max(1)) as f64 * sms as f64 / rate;
    (1.0 + fixed_ns / main_loop(k)) / (1.0 + fixed_ns / main_loop(TILE_REFERENCE_K))
}

/// The GPU seen by one op: rates in FLOP/ns and bytes/ns.
pub(super) struct Device {
    /// Achievable dense-matmul rate at the GEMM precision.
    pub(super) matmul: f64,
    /// Achievable BF16/FP16 matmul rate (attention stays in 16 bits under FP8 recipes).
    matmul16: f64,
    /// Dense 16-bit tensor peak at the sustained clock ([`SUSTAINED_CLOCK`]), for attention
    /// fractions.
    peak16: f64,
    memory: f64,
    sms: u64,
    /// [`TILE_FIXED_NS`] of this GPU's architecture (0: not measured).
    tile_fixed_ns: f64,
    /// [`DENSE16_TILE_FIXED_NS`] of this GPU (0: not measured).
    dense16_tile_fixed_ns: f64,
    /// Bytes of an activation element, and of a GEMM input element (1 under FP8).
    pub(super) elem: f64,
    gemm_in: f64,
    /// Transformer Engine's FP8 recipe, and whether its FP8 tensors carry a transposed copy for
    /// the backward GEMMs ([`fp8_transposes`]).
    fp8_recipe: Fp8Recipe,
    fp8_transposes: bool,
    flash: Flash,
    /// Dense GEMM efficiency by shape, where a by-shape measurement of this GPU's architecture
    /// exists (Blackwell: [`GemmTable::b200`]); it replaces wave quantisation and the tile cost.
    shape_table: Option<&'static GemmTable>,
}

#[derive(Clone, Copy)]
enum Flash {
    None,
    Ampere,
    Hopper,
    /// Forward and backward (sequence length, TFLOP/s) tables measured on one GPU, and that
    /// GPU's dense 16-bit peak (TFLOP/s) they are fractions of.
    Measured(&'static [(u32, f64)], &'static [(u32, f64)], f64),
}

impl Device {
    fn new(gpu: &GpuSpec, o: &CostOptions) -> Result<Self> {
        if !gpu.supports(o.precision) {
            return Err(Error::invalid(
                "--precision",
                format!(
                    "{} has no {} tensor cores; use {}",
                    gpu.name,
                    o.precision.name(),
                    if gpu.bf16 { "bf16 or fp16" } else { "fp16 or fp32" }
                ),
            ));
        }
        let row = MATMUL_EFFICIENCY.iter().find(|r| r.0 == gpu.name);
        let half = if gpu.bf16 { Precision::Bf16 } else { Precision::Fp16 };
        // GPUs without a measurement: the model zoo's synthesis efficiencies (see synth.rs).
        let eff16 = row.map(|r| r.1).unwrap_or(super::synth::DENSE_EFFICIENCY_TENSOR);
        let eff = match o.precision {
            Precision::Fp32 => super::synth::DENSE_EFFICIENCY_FP32,
            Precision::Fp8 => row.and_then(|r| r.2).unwrap_or(eff16),
            _ => eff16,
        };
        // Tensor-core rates at the clock the GPU sustains in training (FP32 SIMT: the zoo's
        // efficiency, unscaled).
        let sustained = sustained_clock(gpu.name);
        let clock = if o.precision == Precision::Fp32 { 1.0 } else { sustained };
        // A 16-bit rate measured over seconds, where there is one, replaces the best-shape rate at
        // the sustained clock.
        let measured16 = sustained_matmul(gpu.name);
        let mut matmul = match (o.precision, measured16, sustained_matmul_fp8(gpu.name)) {
            (Precision::Fp16 | Precision::Bf16, Some(r), _) => r,
            (Precision::Fp8, _, Some(r)) => r,
            _ => gpu.peak_flops_per_ns(o.precision) * eff * clock,
        };
        let matmul16 = if o.precision == Precision::Fp32 {
            matmul
        } else {
            measured16.unwrap_or(gpu.peak_flops_per_ns(half) * eff16 * clock)
        };
        if let Some(t) = o.matmul_tflops {
            if !(t.is_finite() && t > 0.0) {
                return Err(Error::invalid("--matmul-tflops", "must be a positive number of TFLOP/s"));
            }
            matmul = t * 1e3;
        }
        let attn_err = |msg: String| Err(Error::invalid("--parallel attn", msg));
        let flash = match (o.flash_attention, gpu.arch, o.attention) {
            (false, _, _) => Flash::None,
            (true, "Ampere", None | Some(AttnKernel::Fa2)) => Flash::Ampere,
            (true, "Ampere", Some(k)) => {
                return attn_err(format!(
                    "attn={}: no published {} rates on {} ({}); use attn=fa2",
                    k.name(),
                    if k == AttnKernel::Fa3 { "FlashAttention-3 (a Hopper kernel)" } else { "cuDNN attention" },
                    gpu.name,
                    gpu.arch
                ))
            }
            // Blackwell: cuDNN's rates measured on a GB200; FlashAttention-2 and -3 keep the H100
            // fractions, for want of a published Blackwell measurement. By default cuDNN's:
            // Transformer Engine turns FlashAttention 3 off on any compute capability but sm90 and
            // prefers its cuDNN FusedAttention on sm90 and newer
            // (transformer_engine/pytorch/attention/dot_product_attention/utils.py,
            // get_attention_backend), and FlashAttention-3 is a Hopper kernel.
            (true, "Blackwell", None | Some(AttnKernel::Cudnn)) => {
                Flash::Measured(CUDNN_GB200_FORWARD_TFLOPS, CUDNN_GB200_BACKWARD_TFLOPS, GB200_BF16_PEAK_TFLOPS)
            }
            (true, "Hopper" | "Blackwell", None | Some(AttnKernel::Fa3)) => Flash::Hopper,
            (true, "Hopper" | "Blackwell", Some(AttnKernel::Fa2)) => {
                Flash::Measured(FA2_H100_FORWARD_TFLOPS, FA2_H100_BACKWARD_TFLOPS, H100_BF16_PEAK_TFLOPS)
            }
            (true, "Hopper", Some(AttnKernel::Cudnn)) => {
                Flash::Measured(CUDNN_H100_FORWARD_TFLOPS, CUDNN_H100_BACKWARD_TFLOPS, H100_BF16_PEAK_TFLOPS)
            }
            (true, arch, _) => {
                return Err(Error::invalid(
                    "flash attention",
                    format!("FlashAttention needs an Ampere or newer GPU; {} is {arch} (use flash=off)", gpu.name),
                ))
            }
        };
        Ok(Device {
            matmul,
            matmul16,
            peak16: gpu.peak_flops_per_ns(half) * sustained,
            memory: gpu.mem_bytes_per_ns() * MEMORY_EFFICIENCY,
            sms: gpu.sms as u64,
            tile_fixed_ns: TILE_FIXED_NS.iter().find(|r| r.0 == gpu.arch).map_or(0.0, |r| r.1),
            dense16_tile_fixed_ns: DENSE16_TILE_FIXED_NS.iter().find(|r| r.0 == gpu.name).map_or(0.0, |r| r.1),
            elem: o.precision.bytes() as f64,
            gemm_in: if o.precision == Precision::Fp8 { 1.0 } else { o.precision.bytes() as f64 },
            fp8_recipe: o.fp8_recipe,
            fp8_transposes: fp8_transposes(gpu),
            flash,
            shape_table: if gpu.arch == "Blackwell" { Some(GemmTable::b200()?) } else { None },
        })
    }

    /// A (batched) GEMM C[m x n] = A[m x k] B[k x n], `batch` times: (ns, FLOPs).
    pub(super) fn gemm(&self, batch: u64, m: u64, n: u64, k: u64, rate: f64) -> (f64, f64) {
        self.gemm_in((batch, m, n, k), rate, self.gemm_in, false)
    }

    /// [`Device::gemm`] with beta != 0: the GEMM reads its output matrix before it writes it
    /// (cuBLAS adds beta x C), which a short-K batched GEMM such as the attention scores pays in
    /// memory time.
    pub(super) fn gemm_accumulating(&self, batch: u64, m: u64, n: u64, k: u64, rate: f64) -> (f64, f64) {
        self.gemm_passes((batch, m, n, k), rate, self.gemm_in, false, 2.0)
    }

    /// [`Device::gemm`] for an MoE layer's experts: `batch` equal groups of one grouped GEMM.
    /// Their 16-bit GEMMs pay the tile overhead too, which is measured for them (the BF16 probe
    /// of [`TILE_FIXED_NS`]); dense 16-bit GEMMs pay [`DENSE16_TILE_FIXED_NS`] where it is
    /// measured and keep the roofline elsewhere (docs/workloads.md).
    pub(super) fn grouped_gemm(&self, batch: u64, m: u64, n: u64, k: u64, rate: f64) -> (f64, f64) {
        self.gemm_in((batch, m, n, k), rate, self.gemm_in, true)
    }

    /// [`Device::gemm`] of (batch, m, n, k) with inputs of `in_bytes` per element (a 16-bit GEMM
    /// in an FP8 run); `experts`: the GEMM is a grouped expert GEMM ([`Device::grouped_gemm`]).
    fn gemm_in(&self, shape: (u64, u64, u64, u64), rate: f64, in_bytes: f64, experts: bool) -> (f64, f64) {
        self.gemm_passes(shape, rate, in_bytes, experts, 1.0)
    }

    /// [`Device::gemm_in`] whose output matrix crosses memory `out_passes` times (2 when the GEMM
    /// reads it before writing it).
    fn gemm_passes(
        &self,
        (batch, m, n, k): (u64, u64, u64, u64),
        rate: f64,
        in_bytes: f64,
        experts: bool,
        out_passes: f64,
    ) -> (f64, f64) {
        let flops = 2.0 * (batch * m * n) as f64 * k as f64;
        let tiles = batch * m.div_ceil(TILE) * n.div_ceil(TILE);
        let waves = tiles.div_ceil(self.sms);
        let wave_fill = tiles as f64 / (waves * self.sms) as f64;
        // The tile overhead is measured for FP8 GEMMs and for 16-bit expert GEMMs; dense 16-bit
        // GEMMs have their own (cuBLAS's, smaller) where measured, and FP32 ones run on the CUDA
        // cores.
        let fixed_ns = if in_bytes < 2.0 || (experts && in_bytes <= 2.0) {
            self.tile_fixed_ns
        } else if in_bytes <= 2.0 {
            self.dense16_tile_fixed_ns
        } else {
            0.0
        };
        let short_k = short_k(fixed_ns, k, rate, self.sms);
        let table_type = match in_bytes {
            b if b < 2.0 => Some(GemmType::Fp8),
            b if b <= 2.0 => Some(GemmType::Half),
            _ => None,
        };
        // A measured efficiency by shape holds wave quantisation and the per-tile cost already.
        // Expert GEMMs keep the roofline: the table times one cuBLAS GEMM, and a grouped GEMM
        // runs its groups concurrently.
        let math = match (self.shape_table, table_type, experts) {
            (Some(table), Some(ty), false) => flops / (rate * table.efficiency(ty, batch * m, n, k)),
            _ => flops / (rate * wave_fill) * short_k,
        };
        let bytes = batch as f64 * ((m * k + k * n) as f64 * in_bytes + out_passes * (m * n) as f64 * self.elem);
        (math.max(bytes / self.memory) + LAUNCH_NS, flops)
    }

    /// [`short_k`] with this GPU's FP8 / expert-GEMM tile cost ([`TILE_FIXED_NS`]).
    #[cfg(test)]
    fn short_k(&self, k: u64, rate: f64) -> f64 {
        short_k(self.tile_fixed_ns, k, rate, self.sms)
    }

    /// A kernel that streams `bytes` through memory.
    pub(super) fn stream(&self, bytes: f64) -> f64 {
        bytes / self.memory + LAUNCH_NS
    }

    /// The memory-bound kernels Transformer Engine runs around one FP8 weight GEMM of `tokens` x
    /// `k` -> `n` in training, as (forward, backward) ns and (forward, backward) kernels; `local`
    /// is the tokens a GPU holds before a sequence-parallel all-gather. Below, `t` is the byte of
    /// a transposed copy, written where FP8 GEMMs take both operands K-major ([`fp8_transposes`]:
    /// on Hopper the weight gradient needs the input and the output gradient transposed) and
    /// absent on Blackwell.
    ///
    /// Delayed scaling (TE v1.8, [`Fp8Recipe::Delayed`]):
    /// - `Linear` forward (module/linear.py l.113-143): the BF16 input cast to FP8 together with
    ///   its transpose (`fp8_cast_transpose_fused`: read 2, write 1 + t bytes); under sequence
    ///   parallelism the cast alone, the transpose (`fp8_transpose`: read 1, write 1) in the
    ///   backward pass (l.527-533).
    /// - `LayerNormLinear`: the norm writes FP8 itself (module/_common.py l.59-74, costed in the
    ///   norm); its output transposed in the backward pass (layernorm_linear.py l.584).
    /// - Backward, the output gradient (module/base.py `grad_output_preprocess` l.632-736): cast
    ///   and transpose fused, or, for a row-parallel layer under sequence parallelism, cast on the
    ///   local tokens, all-gathered, then transposed.
    ///
    /// The amax of each cast is reduced inside the same kernel; the amax all-reduce and scale
    /// update after each forward and backward pass (fp8.py `reduce_and_update_fp8_tensors`, l.316)
    /// move a few KiB, tens of microseconds a micro-batch, and are left out.
    ///
    /// Current scaling (TE v2.9, [`Fp8Recipe::Current`]): every quantisation is an amax pass (read
    /// 2), a scale kernel (no bandwidth) and the cast (read 2, write 1 + t, the transposed copy
    /// written with it where the backward GEMM will need it: `set_usage(columnwise=
    /// backward_needs_input)`, module/linear.py l.183 @ v2.9); `LayerNormLinear`'s norm takes the
    /// amax itself (its 16-bit output costed in the norm), so its output needs the scale kernel
    /// and the cast only. Under sequence parallelism the tensors all-gathered in FP8 are cast
    /// row-wise only (linear.py l.202) and the gathered copy transposed in the backward pass, as
    /// under delayed scaling; the amax all-reduce over the TP group before each such cast
    /// (`with_amax_reduction`, quantizer.cpp l.521-528) is left out.
    ///
    /// Weights are cast once per step (`is_first_microbatch`), charged with the update
    /// ([`Device::fp8_weight_cast_bytes`]).
    fn te_fp8_casts(&self, module: TeModule, tokens: u64, local: u64, n: u64, k: u64, sp: bool) -> FpCasts {
        let e = self.elem;
        let t = if self.fp8_transposes { 1.0 } else { 0.0 };
        let (x, dy) = ((tokens * k) as f64, (tokens * n) as f64);
        // The norm's output cast on each GPU: the local tokens under sequence parallelism.
        let x_norm = if sp { (local * k) as f64 } else { x };
        let dy_local = (local * n) as f64;
        // Each kernel as (bytes per element, elements); a scale kernel moves nothing.
        let mut fwd: Vec<(f64, f64)> = Vec::new();
        let mut bwd: Vec<(f64, f64)> = Vec::new();
        let transpose = |v: &mut Vec<(f64, f64)>, elems: f64| {
            if t > 0.0 {
                v.push((2.0, elems));
            }
        };
        let quantize =
            |v: &mut Vec<(f64, f64)>, elems: f64, out: f64| v.extend([(e, elems), (0.0, 0.0), (e + out, elems)]);
        match (self.fp8_recipe, module, sp) {
            (Fp8Recipe::Delayed, TeModule::LayerNormLinear, _) => {
                transpose(&mut bwd, x);
                bwd.push((e + 1.0 + t, dy));
            }
            (Fp8Recipe::Delayed, TeModule::Linear, false) => {
                fwd.push((e + 1.0 + t, x));
                bwd.push((e + 1.0 + t, dy));
            }
            (Fp8Recipe::Delayed, TeModule::Linear, true) => {
                fwd.push((e + 1.0, x));
                transpose(&mut bwd, x);
                bwd.push((e + 1.0, dy_local));
                transpose(&mut bwd, dy);
            }
            (Fp8Recipe::Current, TeModule::LayerNormLinear, false) => {
                fwd.extend([(0.0, 0.0), (e + 1.0 + t, x_norm)]);
                quantize(&mut bwd, dy, 1.0 + t);
            }
            (Fp8Recipe::Current, TeModule::LayerNormLinear, true) => {
                fwd.extend([(0.0, 0.0), (e + 1.0, x_norm)]);
                transpose(&mut bwd, x);
                quantize(&mut bwd, dy, 1.0 + t);
            }
            (Fp8Recipe::Current, TeModule::Linear, false) => {
                quantize(&mut fwd, x, 1.0 + t);
                quantize(&mut bwd, dy, 1.0 + t);
            }
            (Fp8Recipe::Current, TeModule::Linear, true) => {
                quantize(&mut fwd, x, 1.0 + t);
                quantize(&mut bwd, dy_local, 1.0);
                transpose(&mut bwd, dy);
            }
        }
        let time = |v: &[(f64, f64)]| v.iter().map(|&(bytes, elems)| self.stream(bytes * elems)).sum::<f64>();
        FpCasts { ns: (time(&fwd), time(&bwd)), kernels: (fwd.len() as u32, bwd.len() as u32) }
    }

    /// Bytes per parameter of the once-a-step cast of a GEMM weight to FP8: under delayed scaling
    /// one cast (read 2, write 1 and the transposed copy where [`fp8_transposes`]; module/linear.py
    /// l.980-1006 @ v1.8), under current scaling the amax pass before it (read 2).
    fn fp8_weight_cast_bytes(&self) -> f64 {
        let cast = self.elem + 1.0 + if self.fp8_transposes { 1.0 } else { 0.0 };
        match self.fp8_recipe {
            Fp8Recipe::Delayed => cast,
            Fp8Recipe::Current => self.elem + cast,
        }
    }

    /// Bytes per element of one current-scaling quantisation as Transformer Engine's
    /// `GroupedLinear` runs it for each expert (`super::moe`): the amax pass (read 2), then the
    /// cast (read 2, write 1 and the transposed copy where [`fp8_transposes`]).
    pub(super) fn cs_quantize_bytes(&self) -> f64 {
        self.elem + self.elem + 1.0 + if self.fp8_transposes { 1.0 } else { 0.0 }
    }
}

/// What [`Device::te_fp8_casts`] charges around one weight GEMM: (forward, backward) ns and
/// kernels.
struct FpCasts {
    ns: (f64, f64),
    kernels: (u32, u32),
}

/// Whether Transformer Engine keeps a transposed copy of each FP8 tensor for `gpu`'s GEMMs: its
/// per-tensor FP8 GEMMs take only the TN layout before Blackwell, so the backward pass needs the
/// input and the output gradient transposed; on compute capability 10.x (B200, GB200) cuBLAS runs
/// FP8 GEMMs in any layout and TE keeps the row-wise data alone (`nvte_is_non_tn_fp8_gemm_supported`,
/// common/transformer_engine.cpp l.719-727 @ v2.9: sm 100-119 and 130 on; `Float8Quantizer::
/// create_tensor`, pytorch/csrc/quantizer.cpp l.126 and l.137 @ v2.9). Every Blackwell GPU dagsim
/// knows (`gpu.rs`) is a compute capability 10.0 part.
fn fp8_transposes(gpu: &GpuSpec) -> bool {
    gpu.arch != "Blackwell"
}

/// The Transformer Engine module that runs a weight GEMM (Megatron-Core's layer spec,
/// megatron/core/models/gpt/gpt_layer_specs.py l.59-61 and l.119-120 @ core_r0.8.0), which
/// decides the FP8 casts around it.
#[derive(Clone, Copy)]
enum TeModule {
    /// QKV and FC1: column-parallel, the norm fused in front.
    LayerNormLinear,
    /// Attention projection and FC2: row-parallel, a BF16 input.
    Linear,
}

/// A framework's own pass over the weight gradients after each micro-batch's backward, which
/// the cost model's ops do not include (Megatron-LM's gradient-accumulation fusion has the
/// weight-gradient GEMM add into its buffer, at no extra pass): `bytes_per_param` read and
/// written per parameter, `kernels_per_tensor` launches per parameter tensor, on `fraction` of
/// the micro-batches (see `MpOptimizer::grad_accumulation` for DeepSpeed's optimizers).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GradAccumulation {
    pub bytes_per_param: f64,
    pub kernels_per_tensor: u32,
    pub fraction: f64,
}

/// Kernels one workload layer launches per micro-batch (see [`TransformerCost::launches`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Launches {
    pub forward: u32,
    pub backward: u32,
    /// The host waits for the layer's forward pass to end on the GPU before launching on.
    pub sync: bool,
    /// Transformer Engine module calls in the forward pass, each costing the host
    /// [`crate::parallel::TE_MODULE_HOST_EXTRA`] beyond its kernels' launches (see
    /// [`te_module_calls`]).
    pub modules: u32,
}

/// Transformer Engine modules an op of the cost model runs as in Megatron-Core's TE layer spec
/// (`get_gpt_layer_with_transformer_engine_spec`, megatron/core/models/gpt/gpt_layer_specs.py @
/// core_v0.15.0): `linear_qkv` a `TELayerNormColumnParallelLinear` (the norm before it included),
/// `q_layernorm` and `k_layernorm` a `TENorm` each, `core_attention` a `TEDotProductAttention`,
/// `linear_proj` a `TERowParallelLinear`, the dense MLP's `linear_fc1` and `linear_fc2` one each;
/// in an MoE layer the `pre_mlp_layernorm` a `TENorm` (`router_block`: the router's own logits
/// GEMM is a plain `torch` linear, `TopKRouter`), the routed experts' fc1 and fc2 a
/// `TEGroupedLinear` each (`TEGroupedMLP`) and the shared experts' two linears one each. Every
/// other op is PyTorch or a fused kernel called outside a TE module.
pub fn te_module_calls(op: &str, router_block: bool) -> u32 {
    match op {
        "qkv" | "attention" | "flash-attention" | "proj" | "fc1" | "fc2" => 1,
        "expert-fc1" | "expert-fc2" | "shared-fc1" | "shared-fc2" => 1,
        "qk-norm" => 2,
        "norm" if router_block => 1,
        _ => 0,
    }
}

/// One operation's cost for one micro-batch on one GPU.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OpCost {
    pub name: &'static str,
    pub forward_ns: f64,
    pub backward_ns: f64,
    /// Matmul FLOPs as the model defines them (full s x s attention, backward = 2 x forward).
    pub forward_flops: f64,
    pub backward_flops: f64,
    /// Kernels the op launches in the forward and the backward pass: one per kernel this model
    /// times (each charged the GPU-side `LAUNCH_NS`), which the host launches one by one in an
    /// eager framework (`dag::plan`'s host model).
    #[serde(skip)]
    pub kernels: (u32, u32),
}

impl OpCost {
    pub(super) fn with_kernels(mut self, forward: u32, backward: u32) -> Self {
        self.kernels = (forward, backward);
        self
    }
}

/// A block (attention or MLP half of a layer, embedding, output layer) of one TP rank.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BlockCost {
    pub name: &'static str,
    pub ops: Vec<OpCost>,
    /// Forward time recomputed during the backward pass (selective or full recomputation).
    pub recompute_ns: f64,
    /// Parameters held by one TP rank.
    pub params: u64,
    /// Its parameter tensors (weights, then norm scales and biases together), summing to `params`.
    pub tensors: Vec<u64>,
    pub tp: Option<TpComm>,
}

impl BlockCost {
    pub fn forward_ns(&self) -> f64 {
        self.ops.iter().map(|o| o.forward_ns).sum()
    }
    /// Backward time including recomputation.
    pub fn backward_ns(&self) -> f64 {
        self.ops.iter().map(|o| o.backward_ns).sum::<f64>() + self.recompute_ns
    }
    /// Model FLOPs of forward and backward (no recomputation).
    pub fn model_flops(&self) -> f64 {
        self.ops.iter().map(|o| o.forward_flops + o.backward_flops).sum()
    }
    /// The share of each pass spent in the ops this model times as memory passes (no matmul
    /// FLOPs: norms, activations, dropout, residual adds, casts, the embedding's gather), less
    /// their launch gaps. GEMMs count as math even where their roofline is memory-bound, and
    /// recomputation as math: the share is a lower bound.
    pub fn memory_share(&self) -> MemoryShare {
        let streaming = |ns: f64, kernels: u32| (ns - kernels as f64 * LAUNCH_NS).max(0.0);
        let (mut forward, mut backward) = (0.0, 0.0);
        for o in self.ops.iter().filter(|o| o.forward_flops == 0.0 && o.backward_flops == 0.0) {
            forward += streaming(o.forward_ns, o.kernels.0);
            backward += streaming(o.backward_ns, o.kernels.1);
        }
        let share = |memory: f64, total: f64| if total > 0.0 { (memory / total).clamp(0.0, 1.0) } else { 0.0 };
        MemoryShare { forward: share(forward, self.forward_ns()), backward: share(backward, self.backward_ns()) }
    }
}

/// A transformer costed on one GPU for one micro-batch, per TP rank.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TransformerCost {
    pub model: String,
    pub gpu: String,
    pub options_micro_batch: u32,
    pub seq_len: u32,
    pub precision: Precision,
    pub tp: u32,
    pub layers: u32,
    pub embedding: BlockCost,
    pub attention: BlockCost,
    pub mlp: BlockCost,
    pub head: BlockCost,
    /// The MoE layers' MLP (their router, experts and combine blocks), for an MoE model.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub moe: Option<MoeCost>,
    /// Under context parallelism, each layer's key-value exchange over the CP group: by default
    /// (`cp-comm=all-gather`) collectives after the attention block, no compute of its own; with
    /// `cp-comm=p2p` the attention core run as Transformer Engine's ring (its kernels in cp
    /// steps, each beside a send to the next CP rank).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub context: Option<BlockCost>,
    /// Model FLOPs of one micro-batch for the whole model (all TP ranks), forward and backward,
    /// and the same with recomputed work (hardware FLOPs).
    pub model_flops: f64,
    pub hardware_flops: f64,
    /// Optimizer step time per parameter held (Adam with FP32 master weights, memory-bound).
    pub update_ns_per_param: f64,
    /// The factor calibration applied (1 if none).
    pub calibration_factor: f64,
}

/// Costs `cfg` on `gpu` (an MoE model without expert parallelism).
pub fn cost(cfg: &TransformerConfig, gpu: &GpuSpec, o: &CostOptions) -> Result<TransformerCost> {
    cost_moe(cfg, gpu, o, &MoeOptions::default())
}

/// Costs `cfg` on `gpu`, its MoE layers (if any) under expert parallelism and routing `x`.
pub fn cost_moe(
    cfg: &TransformerConfig,
    gpu: &GpuSpec,
    o: &CostOptions,
    moe_opts: &MoeOptions,
) -> Result<TransformerCost> {
    cfg.check(&cfg.name)?;
    if o.micro_batch == 0 {
        return Err(Error::invalid("--micro-batch", "must be at least 1"));
    }
    if o.seq_len == 0 {
        return Err(Error::invalid("--seq-len", "must be at least 1"));
    }
    let tp = o.tp.max(1) as u64;
    for (what, n) in [("attention heads", cfg.heads), ("key-value heads", cfg.kv_heads)] {
        if n as u64 % tp != 0 {
            return Err(Error::invalid(
                "--parallel tp",
                format!("tp={tp} does not divide the {n} {what} of {}; use a divisor of {n}", cfg.name),
            ));
        }
    }
    if cfg.ffn_hidden % tp != 0 {
        return Err(Error::invalid(
            "--parallel tp",
            format!("tp={tp} does not divide the MLP width {} of {}", cfg.ffn_hidden, cfg.name),
        ));
    }
    let d = Device::new(gpu, o)?;
    // Context parallelism: this GPU holds `seq_len` of each sequence's cp x seq_len tokens; its
    // queries attend to the keys of the whole sequence (Megatron's load-balanced split keeps the
    // causal half per GPU).
    let cp = moe_opts.cp.max(1) as u64;
    if cp > 1 && matches!(d.flash, Flash::None) {
        return Err(Error::invalid(
            "--parallel cp",
            "context parallelism needs flash attention (Transformer Engine's fused kernels); drop flash=off",
        ));
    }
    if !o.softmax.is_default() && !matches!(d.flash, Flash::None) {
        return Err(Error::invalid(
            "--parallel softmax",
            format!("softmax={} applies to unfused attention only; add flash=off", o.softmax.name()),
        ));
    }
    let (b, s, h) = (o.micro_batch as u64, o.seq_len as u64, cfg.hidden);
    let s_kv = s * cp;
    let ring = cp > 1 && moe_opts.cp_comm == CpComm::P2p;
    // The sequence length a fused kernel runs over: the whole sequence (all-gathered keys and
    // values under CP), or under the CP ring this GPU's share (each step's kernel takes its
    // queries against one rank's keys).
    let kernel_seq = if ring { s } else { s_kv }.min(u32::MAX as u64) as u32;
    let t = b * s; // tokens of the micro-batch
    let sp = o.sequence_parallel && tp > 1;
    let t_norm = if sp { t.div_ceil(tp) } else { t }; // tokens in the norm/dropout regions
    let e = d.elem;
    let heads_l = cfg.heads as u64 / tp;
    let hd = cfg.head_dim();
    let h_l = heads_l * hd; // attention width per rank
    let kv_l = cfg.kv_width() / tp;
    let f_l = cfg.ffn_hidden / tp;
    let gates = if cfg.gated_mlp { 2 } else { 1 };
    let dropout = cfg.dropout;
    // Bytes of the residual stream through a norm (fused kernels: fwd reads x and writes y; bwd
    // reads x and dy and writes dx), and through a fused bias-dropout-add (reads the branch and the
    // residual, writes the sum and a one-byte mask; bwd reads the gradient and mask, writes two).
    let norm = |tokens: u64| {
        let x = (tokens * h) as f64 * e;
        (d.stream(2.0 * x), d.stream(3.0 * x))
    };
    // The norm in front of a weight GEMM: under FP8 with delayed scaling Transformer Engine's
    // `LayerNormLinear` has the norm kernel write its output in FP8 (one byte) for the GEMM to
    // read; under current scaling it writes 16 bits and the amax, and a cast follows
    // (`Device::te_fp8_casts`).
    let fp8 = o.precision == Precision::Fp8;
    let norm_to_gemm = |tokens: u64| {
        let x = (tokens * h) as f64;
        let out = if fp8 && o.fp8_recipe == Fp8Recipe::Delayed { 1.0 } else { e };
        (d.stream(x * (e + out)), d.stream(3.0 * x * e))
    };
    let residual = |tokens: u64| {
        let x = (tokens * h) as f64;
        let mask = if dropout { x } else { 0.0 };
        (d.stream(3.0 * x * e + mask), d.stream(3.0 * x * e + mask))
    };
    // One memory-bound kernel each way unless said otherwise.
    let op = |name, (forward_ns, backward_ns): (f64, f64), forward_flops: f64| OpCost {
        name,
        forward_ns,
        backward_ns,
        forward_flops,
        backward_flops: 2.0 * forward_flops,
        kernels: (1, 1),
    };
    // A weight GEMM y[t x n] = x[t x k] W[k x n] and its two backward GEMMs (input and weight
    // gradients), each timed by its own shape.
    // Under FP8, plus the casts and transposes Transformer Engine runs around the three GEMMs.
    let linear = |name, module: TeModule, tokens: u64, n: u64, k: u64| {
        let (f, flops) = d.gemm(1, tokens, n, k, d.matmul);
        let (dx, _) = d.gemm(1, tokens, k, n, d.matmul);
        let (dw, _) = d.gemm(1, k, n, tokens, d.matmul);
        let c = if fp8 {
            d.te_fp8_casts(module, tokens, tokens.div_ceil(tp), n, k, sp)
        } else {
            FpCasts { ns: (0.0, 0.0), kernels: (0, 0) }
        };
        op(name, (f + c.ns.0, dx + dw + c.ns.1), flops).with_kernels(1 + c.kernels.0, 2 + c.kernels.1)
    };
    let tp_comm = |forward: Vec<TpCollective>, backward: Vec<TpCollective>| {
        (tp > 1).then(|| TpComm {
            bytes: t * h * o.precision.bytes(),
            forward,
            backward,
            group: CommGroup::Tensor,
            ring: None,
        })
    };
    // Around each block: all-reduce the output (forward) and the input gradient (backward); with
    // sequence parallelism an all-gather before and a reduce-scatter after, in both passes.
    let (block_fwd, block_bwd) = if sp {
        (
            vec![TpCollective::AllGather, TpCollective::ReduceScatter],
            vec![TpCollective::AllGather, TpCollective::ReduceScatter],
        )
    } else {
        (vec![TpCollective::AllReduce], vec![TpCollective::AllReduce])
    };

    // --- attention block ---
    let mut attn_ops =
        vec![op("norm", norm_to_gemm(t_norm), 0.0), linear("qkv", TeModule::LayerNormLinear, t, h_l + kv_l, h)];
    // Qwen3's RMSNorm over each query and key head (Megatron-Core `qk_layernorm`: a TE RMSNorm
    // for the queries and one for the keys, gpt_layer_specs.py @ core_v0.15.0; Megatron-Bridge
    // sets it for Qwen3 and Qwen3-MoE, qwen3_moe_bridge.py @ v0.5.0): each reads and writes its
    // 16-bit heads forward, reads them and their gradient and writes the input gradient backward.
    if cfg.qk_norm {
        let qk = (t * (h_l + kv_l / 2)) as f64 * e;
        attn_ops.push(
            op("qk-norm", (d.stream(2.0 * qk) + LAUNCH_NS, d.stream(3.0 * qk) + LAUNCH_NS), 0.0).with_kernels(2, 2),
        );
    }
    if cfg.position == Position::Rotary {
        let qk = (t * (h_l + kv_l / 2)) as f64 * e;
        attn_ops.push(op("rotary", (d.stream(2.0 * qk), d.stream(2.0 * qk)), 0.0));
    }
    // Model FLOPs of scores and context over the full s x s (Megatron's count).
    let attn_flops = 4.0 * (b * heads_l) as f64 * (s * s_kv * hd) as f64;
    let (core, core_recompute) = match d.flash {
        Flash::None => {
            let n = (b * heads_l * s * s) as f64; // score elements

            // ALiBi without a fused kernel (Megatron-DeepSpeed @ 58d9204 `transformer.py`
            // l.283-326, as HF BLOOM): the scores GEMM is a `baddbmm` into the bias tensor
            // broadcast over the queries, with beta = 1 / layer number (query-key layer scaling,
            // Megatron's default) or 1. PyTorch's `baddbmm_out_cuda_impl` (aten/src/ATen/native/
            // cuda/Blas.cpp, 1.9-1.12) copies the expanded bias into the output when beta != 0
            // (one kernel writing every score) and cuBLAS then reads it back (beta x C).
            let alibi = cfg.position == Position::Alibi;
            let (qk, _) = if alibi {
                d.gemm_accumulating(b * heads_l, s, s, hd, d.matmul16)
            } else {
                d.gemm(b * heads_l, s, s, hd, d.matmul16)
            };
            let alibi_copy = if alibi { d.stream(n * e) } else { 0.0 };
            let (qk_b1, _) = d.gemm(b * heads_l, s, hd, s, d.matmul16);
            let (av, _) = d.gemm(b * heads_l, s, hd, s, d.matmul16);
            let (av_b1, _) = d.gemm(b * heads_l, s, s, hd, d.matmul16);
            // Fused scale-mask-softmax: read scores, write probabilities | read both, write grads.
            // The PyTorch fallback: see `SoftmaxKernel::Unfused` for its bytes and kernels.
            let fused_softmax = o.softmax.fused_for(b, heads_l, s, e);
            let (sm_f, sm_b, sm_kernels) = if fused_softmax {
                (d.stream(2.0 * n * e), d.stream(3.0 * n * e), 1)
            } else {
                let per_elem_f = (e + 4.0) + 8.0 + 8.0 + 8.0 + (4.0 + e);
                let per_elem_b = (e + 4.0) + 12.0 + 8.0 + 8.0 + (4.0 + e);
                (d.stream(per_elem_f * n) + 4.0 * LAUNCH_NS, d.stream(per_elem_b * n) + 4.0 * LAUNCH_NS, 5)
            };
            let (dr_f, dr_b) =
                if dropout { (d.stream(2.0 * n * e + n), d.stream(2.0 * n * e + n)) } else { (0.0, 0.0) };
            let fwd = alibi_copy + qk + sm_f + dr_f + av;
            let bwd = 2.0 * qk_b1 + sm_b + dr_b + 2.0 * av_b1;
            let drop = u32::from(dropout);
            let sm = sm_kernels - 1;
            let fwd_kernels = 3 + drop + sm + u32::from(alibi);
            (op("attention", (fwd, bwd), attn_flops).with_kernels(fwd_kernels, 5 + drop + sm), fwd)
        }
        flash => {
            let causal = if cfg.causal { 0.5 } else { 1.0 };
            let executed = attn_flops * causal;
            let (fwd_frac, bwd_frac) = match flash {
                Flash::Ampere => (FA2_FORWARD_FRACTION, FA2_BACKWARD_FRACTION),
                Flash::Measured(fwd, bwd, peak) => {
                    (interpolate(fwd, kernel_seq) / peak, interpolate(bwd, kernel_seq) / peak)
                }
                _ => {
                    let f = interpolate(FA3_FORWARD_TFLOPS, kernel_seq) / FA3_REFERENCE_PEAK;
                    // Backward over forward as FlashAttention-2 measured it (no FA3 backward table).
                    (f, f * FA2_BACKWARD_FRACTION / FA2_FORWARD_FRACTION)
                }
            };
            // Under the CP ring, one kernel per ring step (TE 1.3 `AttnFuncWithCP`, l.491-589),
            // each an equal share of the work, all timed at the rate of the GPU's share s: under
            // the causal mask step 0 is the causal kernel over s; each later one runs without a
            // mask, all s queries against s/2 keys (ranks at or past the step, l.519-549) or s/2
            // queries against s keys (l.550-589). The tables time causal kernels, whose query
            // tiles loop over L/2 keys on average at length L: a kernel whose tiles loop over s/2
            // or s keys, unmasked, runs at least at the causal rate at s, not at the lower one at s/2.
            let launches = if ring { cp as f64 * LAUNCH_NS } else { LAUNCH_NS };
            let fwd = executed / (d.peak16 * fwd_frac) + launches;
            let bwd = FLASH_BACKWARD_FLOPS * executed / (d.peak16 * bwd_frac) + launches;
            // The kernel recomputes scores itself; selective recomputation has nothing to redo.
            (op("flash-attention", (fwd, bwd), attn_flops), 0.0)
        }
    };
    // Under the CP ring the attention core runs in the ring's layer (below).
    let ring_core = if ring {
        Some(core)
    } else {
        attn_ops.push(core);
        None
    };
    attn_ops.push(linear("proj", TeModule::Linear, t, h, h_l));
    attn_ops.push(op("residual", residual(t_norm), 0.0));

    // --- MLP block ---
    let act_elems = (t * f_l) as f64;
    let act = if cfg.gated_mlp {
        (d.stream(3.0 * act_elems * e), d.stream(5.0 * act_elems * e)) // SwiGLU: silu(gate) * up
    } else {
        (d.stream(2.0 * act_elems * e), d.stream(3.0 * act_elems * e)) // GELU (fused with bias)
    };
    let mlp_ops = vec![
        op("norm", norm_to_gemm(t_norm), 0.0),
        linear("fc1", TeModule::LayerNormLinear, t, gates * f_l, h),
        op("activation", act, 0.0),
        linear("fc2", TeModule::Linear, t, h, f_l),
        op("residual", residual(t_norm), 0.0),
    ];

    let p = cfg.params();
    let attn_fwd: f64 = attn_ops.iter().map(|x| x.forward_ns).sum();
    let mlp_fwd: f64 = mlp_ops.iter().map(|x| x.forward_ns).sum();
    let (attn_recompute, mlp_recompute) = match o.recompute {
        Recompute::None => (0.0, 0.0),
        Recompute::Selective => (core_recompute, 0.0),
        Recompute::Full => (attn_fwd, mlp_fwd),
    };
    // Full recomputation repeats the forward collectives before the backward ones.
    let bwd_colls = |fwd: &[TpCollective]| {
        let mut v = Vec::new();
        if o.recompute == Recompute::Full {
            v.extend_from_slice(fwd);
        }
        v.extend_from_slice(&block_bwd);
        v
    };
    // Norm scales and biases of the output projection are replicated on every TP rank.
    let attn_small = p.attention_block - cfg.attention_matrix_params();
    let attention = BlockCost {
        name: "attention",
        ops: attn_ops,
        recompute_ns: attn_recompute,
        params: attn_small + cfg.attention_matrix_params() / tp,
        tensors: vec![h * (cfg.q_width() + cfg.kv_width()) / tp, cfg.q_width() * h / tp, attn_small],
        tp: tp_comm(block_fwd.clone(), bwd_colls(&block_fwd)),
    };
    let mlp_small = p.mlp_block - cfg.mlp_matrix_params();
    let mlp = BlockCost {
        name: "mlp",
        ops: mlp_ops,
        recompute_ns: mlp_recompute,
        params: mlp_small + cfg.mlp_matrix_params() / tp,
        tensors: vec![gates * f_l * h, f_l * h, mlp_small],
        tp: tp_comm(block_fwd.clone(), bwd_colls(&block_fwd)),
    };

    // --- embedding (first stage): vocabulary-parallel look-up, then all-reduce (or
    // reduce-scatter) of the partial sums; positions added; dropout ---
    let x = (t * h) as f64 * e;
    let mut emb_ops = vec![op("lookup", (d.stream(2.0 * x), d.stream(2.0 * x)), 0.0)];
    if matches!(cfg.position, Position::Learned { .. }) || cfg.token_types > 0 || dropout {
        emb_ops.push(op("add-dropout", residual(t_norm), 0.0));
    }
    if matches!(cfg.family, Family::Bloom | Family::Encoder) {
        emb_ops.push(op("norm", norm(t_norm), 0.0));
    }
    let embedding = BlockCost {
        name: "embedding",
        ops: emb_ops,
        recompute_ns: 0.0,
        params: cfg.vocab * h / tp + (p.embedding - cfg.vocab * h),
        tensors: vec![cfg.vocab * h / tp, p.embedding - cfg.vocab * h],
        tp: tp_comm(
            vec![if sp { TpCollective::ReduceScatter } else { TpCollective::AllReduce }],
            if sp { vec![TpCollective::AllGather] } else { vec![] },
        ),
    };

    // --- output layer (last stage): final norm, vocabulary-parallel logits, cross-entropy in FP32
    // (read logits, write FP32 copy, read for the softmax | write and read the gradient) ---
    let v_l = cfg.vocab.div_ceil(tp);
    let logits = (t * v_l) as f64;
    let mut head_ops = Vec::new();
    if p.final_norm > 0 {
        head_ops.push(op("norm", norm(t_norm), 0.0));
    }
    // Megatron-Core's output layer is its own `ColumnParallelLinear`, not a Transformer Engine
    // module, so it stays in 16 bits under FP8 (megatron/core/models/gpt/gpt_model.py l.119 @
    // core_r0.8.0).
    let logits16 = |tokens: u64, n: u64, k: u64| {
        let rate = if fp8 { d.matmul16 } else { d.matmul };
        let (f, flops) = d.gemm_in((1, tokens, n, k), rate, e, false);
        let (dx, _) = d.gemm_in((1, tokens, k, n), rate, e, false);
        let (dw, _) = d.gemm_in((1, k, n, tokens), rate, e, false);
        op("logits", (f, dx + dw), flops).with_kernels(1, 2)
    };
    head_ops.push(logits16(t, v_l, h));
    head_ops.push(match o.loss {
        LossKernel::Fused => op("loss", (d.stream(logits * (e + 4.0 + 4.0)), d.stream(logits * (4.0 + 4.0 + e))), 0.0),
        // Six kernels over the logits forward (cast, max, subtract, exp, sum, divide), two
        // backward (scale, cast); the per-token gathers and the TP all-reduces of the max and the
        // sums move a few bytes a token and are left out.
        // The logits are 16-bit under FP8 too (the output layer above); FP32 logits need no cast.
        LossKernel::Unfused => {
            let x = if fp8 { 2.0 } else { e };
            let (cast_fwd, cast_bwd, casts) = if x < 4.0 { (x + 4.0, 4.0 + x, 1) } else { (0.0, 0.0, 0) };
            let fwd = d.stream(logits * (cast_fwd + 4.0 + 8.0 + 8.0 + 4.0 + 8.0)) + (4 + casts) as f64 * LAUNCH_NS;
            let bwd = d.stream(logits * (8.0 + cast_bwd)) + casts as f64 * LAUNCH_NS;
            op("loss", (fwd, bwd), 0.0).with_kernels(5 + casts, 1 + casts)
        }
    });
    let head = BlockCost {
        name: "head",
        ops: head_ops,
        recompute_ns: 0.0,
        // Tied weights live with the embedding; a plan whose last stage is not the first adds
        // Megatron's copy of them there.
        params: p.final_norm + p.head / tp,
        tensors: vec![p.head / tp, p.final_norm],
        tp: tp_comm(
            if sp { vec![TpCollective::AllGather] } else { vec![] },
            vec![if sp { TpCollective::ReduceScatter } else { TpCollective::AllReduce }],
        ),
    };

    let moe = match &cfg.moe {
        Some(m) => Some(moe_blocks(&d, cfg, m, o, moe_opts)?),
        None => None,
    };
    // Context parallelism as Transformer Engine's ring (`cp_comm_type` p2p, the only kind in
    // TE v1.3, `AttnFuncWithCP` in transformer_engine/pytorch/attention.py): each sequence in 2 cp
    // chunks, GPU r holding chunks r and 2cp-1-r (l.447 views q, k, v as the two halves), so every
    // step's causal work is alike. Forward (l.472-490): cp steps; at each, once the previous
    // step's keys and values have arrived, send them on to the next CP rank (all but the last
    // step) while the attention of the ones held runs. Backward (l.703-722, l.908): cp steps,
    // each sending the keys and values (not after the last step) and the accumulated key-value
    // gradients (not at the first), and waiting for that exchange before the next step. Keys and
    // values stay 16-bit under FP8 (v1.3's DotProductAttention has no FP8 path, l.2641).
    let ring_context = ring_core.map(|core| {
        let kv = b * s * kv_l * o.precision.bytes().max(2);
        let passes = ring_passes(
            &d,
            cfg.causal,
            cp,
            (b * s * h_l * o.precision.bytes().max(2)) as f64,
            kv as f64,
            b * heads_l * s,
        );
        let steps = cp as usize;
        let forward: Vec<u64> = (0..steps).map(|i| if i + 1 < steps { kv } else { 0 }).collect();
        let mut backward: Vec<u64> = (0..steps).map(|i| if i == 0 || i + 1 == steps { kv } else { 2 * kv }).collect();
        // Full recomputation reruns the forward ring in the backward pass: its sends are charged
        // beside the same steps.
        if o.recompute == Recompute::Full {
            backward.iter_mut().zip(&forward).for_each(|(b, f)| *b += f);
        }
        let recompute_ns = if o.recompute == Recompute::Full { core.forward_ns + passes.forward_ns } else { 0.0 };
        BlockCost {
            name: "context",
            ops: vec![core, passes],
            recompute_ns,
            params: 0,
            tensors: vec![],
            tp: Some(TpComm {
                bytes: kv,
                forward: vec![],
                backward: vec![],
                group: CommGroup::Context,
                ring: Some(super::CpRing { forward, backward }),
            }),
        }
    });
    // Context parallelism with `cp-comm=all-gather` (the default): the keys and values of the
    // whole sequence all-gathered over the CP group (this TP rank's heads) before the attention
    // kernel, their gradients reduce-scattered in the backward pass, which gathers them again
    // first; none of it overlapped with the kernels. The same bytes per GPU as the ring.
    let context = ring_context.or_else(|| {
        (cp > 1).then(|| {
            let all = |fwd: bool| {
                let mut v = Vec::new();
                if !fwd && o.recompute == Recompute::Full {
                    v.push(TpCollective::AllGather);
                }
                v.push(TpCollective::AllGather);
                if !fwd {
                    v.push(TpCollective::ReduceScatter);
                }
                v
            };
            BlockCost {
                name: "context",
                ops: vec![],
                recompute_ns: 0.0,
                params: 0,
                tensors: vec![],
                tp: Some(TpComm {
                    bytes: b * s_kv * kv_l * o.precision.bytes(),
                    forward: all(true),
                    backward: all(false),
                    group: CommGroup::Context,
                    ring: None,
                }),
            }
        })
    });
    let layers = cfg.layers as f64;
    let moe_layers = moe.as_ref().map_or(0.0, |m| (cfg.layers - m.dense_layers) as f64);
    let moe_flops = moe.as_ref().map_or(0.0, |m| m.blocks().iter().map(|b| b.model_flops()).sum());
    let tpf = tp as f64;
    let model_flops = tpf
        * (embedding.model_flops()
            + layers * attention.model_flops()
            + layers * context.as_ref().map_or(0.0, |c| c.model_flops())
            + (layers - moe_layers) * mlp.model_flops()
            + moe_layers * moe_flops
            + head.model_flops());
    let forward_flops = |b: &BlockCost| b.ops.iter().map(|x| x.forward_flops).sum::<f64>();
    let recompute_flops = match o.recompute {
        Recompute::None => 0.0,
        Recompute::Selective if matches!(d.flash, Flash::None) => layers * attn_flops,
        Recompute::Selective => 0.0,
        Recompute::Full => {
            let moe_fwd = moe.as_ref().map_or(0.0, |m| m.blocks().iter().map(|b| forward_flops(b)).sum::<f64>());
            let ring_fwd = context.as_ref().map_or(0.0, forward_flops);
            layers * (forward_flops(&attention) + ring_fwd)
                + (layers - moe_layers) * forward_flops(&mlp)
                + moe_layers * moe_fwd
        }
    };
    let hardware_flops = model_flops + tpf * recompute_flops;
    // Adam with FP32 master weights: read gradient, weight, two moments; write weight and moments
    // (Optimizer::update_passes), plus the 16-bit copy of the weight in mixed precision.
    // Under FP8 Transformer Engine also casts every GEMM weight to FP8 once per step
    // (`Device::fp8_weight_cast_bytes`; cached for the step's later micro-batches by Megatron's
    // `is_first_microbatch`), charged here in proportion to the share of parameters in those
    // GEMMs (not the embedding, output layer, norms or biases).
    let fp8_weights = if fp8 {
        let dense = (cfg.layers - p.moe_layers) as f64;
        let moe = p.moe_layers as f64 * p.moe_block.saturating_sub(cfg.norm_params()) as f64;
        let gemm_params = layers * cfg.attention_matrix_params() as f64 + dense * cfg.mlp_matrix_params() as f64 + moe;
        d.fp8_weight_cast_bytes() * gemm_params / p.total() as f64
    } else {
        0.0
    };
    // Besides Adam: the gradient norm for clipping, the master weights read for the 16-bit copy,
    // and under FP16 the unscale-and-check pass (GRAD_NORM_BYTES and what follows it).
    let update_bytes = 4.0 * super::memory::Optimizer::Adam.update_passes()
        + GRAD_NORM_BYTES
        + if o.precision.is_mixed() { 2.0 + MASTER_COPY_READ_BYTES } else { 0.0 }
        + if o.precision == Precision::Fp16 { UNSCALE_BYTES } else { 0.0 }
        + fp8_weights;
    Ok(TransformerCost {
        model: cfg.name.clone(),
        gpu: gpu.name.to_string(),
        options_micro_batch: o.micro_batch,
        seq_len: o.seq_len,
        precision: o.precision,
        tp: tp as u32,
        layers: cfg.layers,
        embedding,
        attention,
        mlp,
        head,
        moe,
        context,
        model_flops,
        hardware_flops,
        update_ns_per_param: update_bytes / d.memory,
        calibration_factor: 1.0,
    })
}

/// The memory passes Transformer Engine 1.3's CP ring (`AttnFuncWithCP`,
/// transformer_engine/pytorch/attention.py @ v1.3) runs around its attention kernels, for a GPU
/// holding `q` bytes of queries (and as many of output and gradients) and `kv` bytes of keys and
/// values (16-bit), `rows` = micro-batch x heads x tokens of softmax statistics, over `cp` steps;
/// one op, (forward, backward) each a sum of memory-bound kernels at the GPU's stream rate.
/// Forward:
/// - Megatron-Core hands over `sbhd` tensors (`TEDotProductAttention.qkv_format`,
///   custom_layers/transformer_engine.py l.366 @ core_v0.5.0) and under CP `FusedAttention`
///   copies q, k and v into `bshd` and the output back (l.2092-2108): each read and written;
/// - the first send buffer: k and v concatenated (l.469); the output zeroed (l.615);
/// - per step, under the causal mask, the half-chunk the kernel takes made contiguous: the first
///   half of the received keys and values (ranks at or past the step, l.522) or the second half of
///   the queries (the others, l.553); the softmax statistics merged, in FP64 (l.416-421, l.617-627);
/// - after the ring, per step, the output rescaled into the sum (`flash_attn_fwd_out_correction`,
///   l.407-414, l.635-646: read the sum and the step's output, write the sum; a half for the
///   steps of the second half of the queries).
///
/// Backward (l.668-950), on one stream, each step waiting for its exchange:
/// - the output gradient into `bshd` and the q, k and v gradients back (the autograd of l.2093
///   and l.2108); the keys and values copied into the first buffer (l.694);
/// - per step: the half-chunk copies (keys and values, l.773, or the second half of q, output and
///   output gradient, l.811-814), the query gradient added in (l.885-907), the key and value
///   gradients concatenated (`torch.cat`, l.914) and added into the received sum (l.921-944).
///
/// Ranks hold different halves at a step; the ring passes each step on from rank to rank, so each
/// step is charged the larger of the two cases. `torch.compile` fuses each correction into one
/// kernel (`jit_fuser`, jit.py l.11-13, PyTorch 2). The causal split is TE's only layout with
/// halves; without the causal mask every step runs over whole tensors.
fn ring_passes(d: &Device, causal: bool, cp: u64, q: f64, kv: f64, rows: u64) -> OpCost {
    // The steps after the first.
    let n = cp.saturating_sub(1) as u32;
    let later = f64::from(n);
    // FP64 statistics merged: read the sum (8 bytes a row) and the step's (4), write the sum (8).
    let lse = 20.0 * rows as f64;
    // Forward: q, k, v into `bshd` and the output back, the buffer of k and v, the zeroed output,
    // the first step's output correction; 9 kernels with the two casts of the statistics.
    let fixed_f = 2.0 * (q + kv) + 2.0 * q + 2.0 * kv + q + 3.0 * q + 2.0 * 12.0 * rows as f64;
    // Each later step: its half-chunk copy, the statistics, its output correction (whole, or half
    // for the second half of the queries).
    let (step_f, kernels_f) = if causal { ((kv + 3.0 * q).max(q + 1.5 * q) + lse, 3) } else { (3.0 * q + lse, 2) };
    // Backward: the output gradient into `bshd`, the three input gradients back, the buffer copy.
    let fixed_b = 2.0 * q + 2.0 * (q + kv) + 2.0 * kv;
    // A step over whole tensors (the last, causal, step; every step without the mask): dq added
    // (read two, write one), dk and dv concatenated and added into the received sum.
    let whole_b = 3.0 * q + 2.0 * kv + 3.0 * kv;
    // The causal steps before the last: the half of k and v copied, dq added, half of dk and dv
    // concatenated and added; or the second half of q, output and its gradient copied, half of
    // dq added, whole dk and dv concatenated and added.
    let half_kv = kv + 3.0 * q + kv + 1.5 * kv;
    let half_q = 3.0 * q + 1.5 * q + 2.0 * kv + 3.0 * kv;
    let (step_b, kernels_b) = if causal { (half_kv.max(half_q), 6) } else { (whole_b, 3) };
    // Forward: 4 layout copies, the buffer, the zeroed output, the first correction, 2 casts of
    // the statistics. Backward: 4 layout copies, the buffer, the last step's 3.
    let kernels = (4 + 1 + 1 + 1 + 2 + kernels_f * n, 4 + 1 + 3 + kernels_b * n);
    let launches = |k: u32| (k - 1) as f64 * LAUNCH_NS; // `stream` charges one
    OpCost {
        name: "cp-ring-passes",
        forward_ns: d.stream(fixed_f + later * step_f) + launches(kernels.0),
        backward_ns: d.stream(fixed_b + later * step_b + whole_b) + launches(kernels.1),
        forward_flops: 0.0,
        backward_flops: 0.0,
        kernels,
    }
}

/// A kernel's TFLOP/s at a sequence length from its measured (length, TFLOP/s) points,
/// interpolated in log length between them and flat beyond them.
fn interpolate(pts: &[(u32, f64)], seq: u32) -> f64 {
    if seq <= pts[0].0 {
        pts[0].1
    } else if seq >= pts[pts.len() - 1].0 {
        pts[pts.len() - 1].1
    } else {
        let i = pts.iter().position(|p| p.0 >= seq).expect("inside the table");
        let ((x0, y0), (x1, y1)) = (pts[i - 1], pts[i]);
        let w = (seq as f64 / x0 as f64).ln() / (x1 as f64 / x0 as f64).ln();
        y0 + w * (y1 - y0)
    }
}

impl TransformerCost {
    fn blocks_mut(&mut self) -> Vec<&mut BlockCost> {
        let mut v = vec![&mut self.embedding, &mut self.attention, &mut self.mlp, &mut self.head];
        if let Some(m) = &mut self.moe {
            v.extend(m.blocks_mut());
        }
        if let Some(c) = &mut self.context {
            v.push(c);
        }
        v
    }

    /// The MLP blocks of layer `i`: the dense MLP, or the MoE layer's three blocks.
    pub fn mlp_blocks(&self, i: u32) -> Vec<&BlockCost> {
        match &self.moe {
            Some(m) if i >= m.dense_layers => m.blocks().to_vec(),
            _ => vec![&self.mlp],
        }
    }

    /// Forward + backward time of one micro-batch through the whole model on one GPU (tp = 1),
    /// plus the update: what a single-GPU measurement of this micro-batch would time.
    pub fn single_gpu_step_ns(&self) -> f64 {
        let per_layer = |b: &BlockCost| b.forward_ns() + b.backward_ns();
        let mut params = self.embedding.params + self.head.params;
        let mut ns = per_layer(&self.embedding) + per_layer(&self.head);
        for i in 0..self.layers {
            for b in std::iter::once(&self.attention).chain(&self.context).chain(self.mlp_blocks(i)) {
                params += b.params;
                ns += per_layer(b);
            }
        }
        ns + params as f64 * self.update_ns_per_param
    }

    /// Scales every time so one micro-batch step on one GPU runs at `samples_per_s` (a measured
    /// single-GPU throughput at this micro-batch, as `--calibrate-throughput` does for the zoo).
    pub fn calibrate_throughput(&mut self, samples_per_s: f64) -> Result<()> {
        if !(samples_per_s.is_finite() && samples_per_s > 0.0) {
            return Err(Error::invalid("--calibrate-throughput", "must be a positive number of samples per second"));
        }
        let target = self.options_micro_batch as f64 / samples_per_s * 1e9;
        self.scale(target / self.single_gpu_step_ns());
        Ok(())
    }

    /// Multiplies every time by `factor` (a calibration found on another cost of the same model).
    pub fn scale(&mut self, factor: f64) {
        for blk in self.blocks_mut() {
            for o in &mut blk.ops {
                o.forward_ns *= factor;
                o.backward_ns *= factor;
            }
            blk.recompute_ns *= factor;
        }
        self.update_ns_per_param *= factor;
        self.calibration_factor *= factor;
    }

    /// Charges each block's backward pass the framework's pass over its weight gradients after
    /// every micro-batch (see [`GradAccumulation`]): one memory-bound kernel per parameter tensor
    /// (or `kernels_per_tensor`), `bytes_per_param` through HBM per parameter, on `fraction` of
    /// the micro-batches. Not scaled by a calibration (it is memory traffic, not the model's math).
    pub fn add_grad_accumulation(&mut self, gpu: &GpuSpec, acc: GradAccumulation) {
        if acc.fraction <= 0.0 {
            return;
        }
        let memory = gpu.mem_bytes_per_ns() * MEMORY_EFFICIENCY;
        for blk in self.blocks_mut() {
            let tensors = blk.tensors.iter().filter(|&&t| t > 0).count() as u32;
            if blk.params == 0 || tensors == 0 {
                continue;
            }
            let kernels = tensors * acc.kernels_per_tensor;
            let ns = blk.params as f64 * acc.bytes_per_param / memory + kernels as f64 * LAUNCH_NS;
            blk.ops.push(OpCost {
                name: "grad-accumulate",
                forward_ns: 0.0,
                backward_ns: acc.fraction * ns,
                forward_flops: 0.0,
                backward_flops: 0.0,
                kernels: (0, kernels),
            });
        }
    }

    /// The workload of one TP rank for one micro-batch: `embedding`, then `L<i>.attn` and
    /// `L<i>.mlp` for every layer, then `head`; FP32 gradients (Megatron's `main_grad` buffer and
    /// FSDP's default reduce type, whatever the training precision); the update of the whole model
    /// (the plan builder takes each stage's share by parameters).
    pub fn to_workload(&self) -> Workload {
        self.to_workload_with(GRAD_BYTES)
    }

    /// [`Self::to_workload`] with gradients of `grad_bytes` per element (2: reduced in BF16).
    pub fn to_workload_with(&self, grad_bytes: u64) -> Workload {
        let ns = |x: f64| Stat::exact(x.round() as u64);
        let layer = |name: String, blk: &BlockCost| Layer {
            name,
            forward: ns(blk.forward_ns()),
            backward: ns(blk.backward_ns()),
            comm: None,
            grad_bytes: blk.params * grad_bytes,
            grad_tensors: blk.tensors.iter().filter(|&&t| t > 0).map(|t| t * grad_bytes).collect(),
            util: None,
            memory: Some(blk.memory_share()),
            tp: blk.tp.clone(),
        };
        let layers: Vec<Layer> = self.workload_blocks().into_iter().map(|(name, b)| layer(name, b)).collect();
        let params: u64 = layers.iter().map(|l| l.grad_bytes / grad_bytes).sum();
        Workload {
            name: self.model.clone(),
            batch_per_gpu: self.options_micro_batch,
            // Token ids are read and copied as 64-bit integers (and as many labels).
            sample_bytes: 2 * 8 * self.seq_len as u64,
            device_sample_bytes: 2 * 8 * self.seq_len as u64,
            layers,
            update: ns(params as f64 * self.update_ns_per_param),
            data_load: None,
            trace_iterations: 1,
            fp16: self.precision.is_mixed(),
        }
    }

    /// Per layer of [`Self::to_workload`] (same order), the gradient tensors in bytes of the routed
    /// experts' weights among the layer's own; empty for every layer without them. A plan with
    /// ep > 1 reduces these over the expert-data-parallel group (see `dag::plan`).
    pub fn expert_grad_tensors(&self, grad_bytes: u64) -> Vec<Vec<u64>> {
        let experts: Vec<u64> = self
            .moe
            .as_ref()
            .map_or(Vec::new(), |m| m.expert_tensors.iter().filter(|&&t| t > 0).map(|t| t * grad_bytes).collect());
        let is_experts = |b: &BlockCost| self.moe.as_ref().is_some_and(|m| std::ptr::eq(b, &m.experts));
        self.workload_blocks()
            .into_iter()
            .map(|(_, b)| if is_experts(b) { experts.clone() } else { Vec::new() })
            .collect()
    }

    /// The blocks of [`Self::to_workload`]'s layers, in its order, with the layers' names: the
    /// embedding, per transformer layer its attention, CP exchange and MLP (or MoE) blocks, the
    /// head. [`Self::expert_grad_tensors`] and [`Self::launches`] follow the same order.
    fn workload_blocks(&self) -> Vec<(String, &BlockCost)> {
        let mut v = vec![("embedding".to_string(), &self.embedding)];
        for i in 0..self.layers {
            v.push((format!("L{i}.attn"), &self.attention));
            if let Some(c) = &self.context {
                v.push((format!("L{i}.attn-cp"), c));
            }
            v.extend(self.mlp_blocks(i).into_iter().map(|b| (format!("L{i}.{}", b.name), b)));
        }
        v.push(("head".to_string(), &self.head));
        v
    }

    /// Per layer of [`Self::to_workload`] (same order): the kernels its forward and its backward
    /// pass launch, the backward's including what `recompute` runs again, and whether the host
    /// waits for the layer's forward pass to finish on the GPU before it goes on (an MoE
    /// router's token counts, see [`MoeCost::host_sync`]). With `te` the layers run as
    /// Transformer Engine modules ([`te_module_calls`]; the plan's `modules=`), else as PyTorch's.
    pub fn launches(&self, recompute: Recompute, te: bool) -> Vec<Launches> {
        let router = |b: &BlockCost| self.moe.as_ref().is_some_and(|m| std::ptr::eq(b, &m.router));
        let of = |b: &BlockCost, sync: bool| {
            let forward: u32 = b.ops.iter().map(|o| o.kernels.0).sum();
            let modules = if te { b.ops.iter().map(|o| te_module_calls(o.name, router(b))).sum() } else { 0 };
            let again: u32 = match recompute {
                Recompute::None => 0,
                Recompute::Full => forward,
                // Only the unfused attention core is recomputed (flash attention has nothing to redo).
                Recompute::Selective if b.recompute_ns > 0.0 => {
                    b.ops.iter().filter(|o| o.name == "attention").map(|o| o.kernels.0).sum()
                }
                Recompute::Selective => 0,
            };
            Launches { forward, backward: b.ops.iter().map(|o| o.kernels.1).sum::<u32>() + again, sync, modules }
        };
        // The host waits after an MoE router whose token counts it reads.
        let syncs = |b: &BlockCost| self.moe.as_ref().is_some_and(|m| m.host_sync && std::ptr::eq(b, &m.router));
        self.workload_blocks().into_iter().map(|(_, b)| of(b, syncs(b))).collect()
    }

    /// Model FLOPs per token (forward and backward, whole model).
    pub fn model_flops_per_token(&self) -> f64 {
        self.model_flops / (self.options_micro_batch as f64 * self.seq_len as f64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(tp: u32) -> CostOptions {
        CostOptions {
            micro_batch: 1,
            seq_len: 2048,
            precision: Precision::Bf16,
            tp,
            sequence_parallel: false,
            recompute: Recompute::None,
            flash_attention: true,
            attention: None,
            matmul_tflops: None,
            loss: LossKernel::Fused,
            softmax: SoftmaxKernel::Fused,
            fp8_recipe: Fp8Recipe::Delayed,
        }
    }

    fn cost_of(name: &str, gpu: &str, o: CostOptions) -> TransformerCost {
        cost(&TransformerConfig::named(name).unwrap(), GpuSpec::by_name(gpu).unwrap(), &o).unwrap()
    }

    #[test]
    fn grad_accumulation_charges_each_block_backward_its_memory_pass() {
        // BLOOM-176B at tp 4 on an A100: each block's backward grows by its parameters times the
        // bytes over the streaming bandwidth, plus one launch per parameter tensor and kernel;
        // the forward, the FLOPs and the launch counts of the forward do not move.
        let gpu = GpuSpec::by_name("a100").unwrap();
        let base = cost_of("bloom-176b", "a100", opts(4));
        let mut c = base.clone();
        let acc = GradAccumulation { bytes_per_param: 6.0, kernels_per_tensor: 1, fraction: 0.5 };
        c.add_grad_accumulation(gpu, acc);
        let memory = gpu.mem_bytes_per_ns() * MEMORY_EFFICIENCY;
        for (b, a) in [(&base.attention, &c.attention), (&base.mlp, &c.mlp), (&base.embedding, &c.embedding)] {
            let tensors = b.tensors.iter().filter(|&&t| t > 0).count() as f64;
            let want = 0.5 * (b.params as f64 * 6.0 / memory + tensors * LAUNCH_NS);
            assert!((a.backward_ns() - b.backward_ns() - want).abs() < 1e-6, "{}", b.name);
            assert_eq!(a.forward_ns(), b.forward_ns());
            assert_eq!(a.model_flops(), b.model_flops());
        }
        // A 14336-wide layer holds 616 M parameters a TP rank at tp 4: 3.7 GB at 6 bytes, half
        // of it charged here, over an A100's 1.5-2 TB/s x 0.75: 1.2-1.6 ms.
        let layer =
            c.attention.backward_ns() + c.mlp.backward_ns() - base.attention.backward_ns() - base.mlp.backward_ns();
        assert!((1.0e6..2.0e6).contains(&layer), "{layer}");
        let (before, after) = (base.launches(Recompute::Full, false), c.launches(Recompute::Full, false));
        assert_eq!(after[1].forward, before[1].forward);
        assert_eq!(after[1].backward, before[1].backward + 3);
        // Nothing to pass over: no change.
        let mut none = base.clone();
        none.add_grad_accumulation(gpu, GradAccumulation { fraction: 0.0, ..acc });
        assert_eq!(none, base);
    }

    #[test]
    fn flops_per_token_are_six_times_the_parameters_plus_attention() {
        // 6 N for every matrix a token meets (layer matrices, the output layer once) plus 12 L s h
        // for scores and context (Kaplan et al. 2020; Korthikanti et al. 2022, Sec. 6 formula).
        for name in ["gpt3-175b", "llama2-70b", "llama3-8b", "mpt-30b", "bloom-176b"] {
            let cfg = TransformerConfig::named(name).unwrap();
            for tp in [1, 8] {
                let c = cost_of(name, "h100", CostOptions { seq_len: cfg.seq_len, ..opts(tp) });
                let matrices = cfg.layers as f64 * (cfg.attention_matrix_params() + cfg.mlp_matrix_params()) as f64
                    + (cfg.vocab * cfg.hidden) as f64;
                let attention = 12.0 * cfg.layers as f64 * cfg.seq_len as f64 * cfg.hidden as f64;
                let expected = 6.0 * matrices + attention;
                let got = c.model_flops_per_token();
                assert!(((got - expected) / expected).abs() < 1e-9, "{name} tp{tp}: {got} vs {expected}");
            }
        }
        // Narayanan et al. 2021's closed form for GPT-3 175B: 72 B s l h^2 (1 + s/(6h) + V/(12 l h)).
        let cfg = TransformerConfig::named("gpt3-175b").unwrap();
        let (s, l, h, v) = (2048.0, 96.0, 12288.0, 51200.0);
        let narayanan = 72.0 * s * l * h * h * (1.0 + s / (6.0 * h) + v / (12.0 * l * h)) / s;
        let got = cost_of("gpt3-175b", "a100", CostOptions { seq_len: cfg.seq_len, ..opts(8) }).model_flops_per_token();
        assert!(((got - narayanan) / narayanan).abs() < 1e-12);
    }

    #[test]
    fn moe_flops_per_token_follow_the_active_parameters() {
        // 6 N_active (attention, the router, the k experts and the shared ones a token meets, the
        // output layer) plus 12 L s h, whatever the EP degree, the TP degree or the routing load.
        for name in ["mixtral-8x7b", "qwen1.5-moe-a2.7b", "deepseek-moe-16b"] {
            let cfg = TransformerConfig::named(name).unwrap();
            let m = cfg.moe.clone().unwrap();
            let moe_layers = (cfg.layers - m.dense_layers) as f64;
            let dense_layers = m.dense_layers as f64;
            let active_moe =
                m.active_block_params(&cfg, 0) as f64 - if m.shared_gate { cfg.hidden as f64 } else { 0.0 };
            let matrices = cfg.layers as f64 * cfg.attention_matrix_params() as f64
                + dense_layers * cfg.mlp_matrix_params() as f64
                + moe_layers * active_moe
                + (cfg.vocab * cfg.hidden) as f64;
            let expected = 6.0 * matrices + 12.0 * cfg.layers as f64 * 4096.0 * cfg.hidden as f64;
            for (tp, ep, imbalance) in [(1, 1, 1.0), (1, 4, 1.0), (2, 4, 1.3)] {
                let o = CostOptions { seq_len: 4096, sequence_parallel: tp > 1, ..opts(tp) };
                let x = MoeOptions {
                    ep,
                    routing: super::super::moe::MoeRouting { imbalance, ..Default::default() },
                    cp: 1,
                    ..Default::default()
                };
                let c = cost_moe(&cfg, GpuSpec::by_name("h100").unwrap(), &o, &x).unwrap();
                let got = c.model_flops_per_token();
                assert!(((got - expected) / expected).abs() < 1e-9, "{name} tp{tp} ep{ep}: {got} vs {expected}");
                // The dispatch all-to-all carries each GPU's routed token copies at the busiest load.
                let moe = c.moe.as_ref().unwrap();
                let tokens = 4096 / tp as u64 * m.top_k as u64;
                assert_eq!(moe.routed_tokens, (tokens as f64 * imbalance).ceil() as u64);
                match &moe.router.tp {
                    Some(a2a) => assert_eq!(a2a.bytes, moe.routed_tokens * cfg.hidden * 2),
                    None => assert_eq!(ep, 1),
                }
            }
        }
        // Imbalance slows the experts; a capacity factor caps it; EP shrinks the experts held.
        let cfg = TransformerConfig::named("mixtral-8x7b").unwrap();
        let h100 = GpuSpec::by_name("h100").unwrap();
        let run = |imbalance: f64, capacity: Option<f64>, ep: u32| {
            let x = MoeOptions {
                ep,
                routing: super::super::moe::MoeRouting { imbalance, capacity_factor: capacity, ..Default::default() },
                cp: 1,
                ..Default::default()
            };
            cost_moe(&cfg, h100, &opts(1), &x).unwrap().moe.unwrap()
        };
        let even = run(1.0, None, 8);
        assert!(run(1.5, None, 8).experts.forward_ns() > 1.3 * even.experts.forward_ns());
        assert_eq!(run(1.5, Some(1.2), 8).routed_tokens, run(1.2, None, 8).routed_tokens);
        assert_eq!(run(1.0, None, 1).experts.params, 8 * even.experts.params);
        let e = cost_moe(&cfg, h100, &opts(1), &MoeOptions { ep: 3, ..Default::default() }).unwrap_err().to_string();
        assert!(e.contains("ep=3") && e.contains("8 experts"), "{e}");
        let e = cost_moe(&cfg, h100, &opts(2), &MoeOptions { ep: 2, ..Default::default() }).unwrap_err().to_string();
        assert!(e.contains("sp=on"), "{e}");
    }

    #[test]
    fn expert_tensor_parallelism_splits_the_experts_and_gathers_their_tokens() {
        // Grok-1 (8 experts, top 2, hidden 6144, expert width 32768, gated) on tp 4, seq 4096,
        // BF16: each GPU routes 4096 / 4 x 2 = 2048 token copies.
        let cfg = TransformerConfig::named("grok1-314b").unwrap();
        let h100 = GpuSpec::by_name("h100").unwrap();
        let o = CostOptions { seq_len: 4096, sequence_parallel: true, ..opts(4) };
        let at = |ep, etp| cost_moe(&cfg, h100, &o, &MoeOptions { ep, etp, ..Default::default() }).unwrap();
        let (whole, split) = (at(2, 1), at(2, 4));
        let (mw, ms) = (whole.moe.as_ref().unwrap(), split.moe.as_ref().unwrap());
        let (h, fe, copies) = (6144u64, 32768u64, 2048u64);
        // Model FLOPs per GPU: under etp 4 the 4 x 2048 gathered copies meet a quarter of each
        // expert's width, so fc1 is 2 x 8192 x (2 x 8192) x 6144 against 2 x 2048 x (2 x 32768)
        // x 6144 whole: the same.
        let fc1 = |m: &MoeCost| named_op(&m.experts, "expert-fc1").forward_flops;
        let fc2 = |m: &MoeCost| named_op(&m.experts, "expert-fc2").forward_flops;
        assert_eq!(fc1(mw), 2.0 * (copies * 2 * fe * h) as f64);
        assert_eq!(fc1(ms), 2.0 * ((4 * copies) * 2 * (fe / 4) * h) as f64);
        assert_eq!(fc2(ms), 2.0 * ((4 * copies) * h * (fe / 4)) as f64);
        assert_eq!(fc1(ms), fc1(mw));
        assert_eq!(split.model_flops_per_token(), whole.model_flops_per_token());
        // Weights: 4 local experts (8 / ep 2), a quarter of each: 4 x 3 x 6144 x 32768 / 4.
        assert_eq!(ms.expert_tensors, vec![4 * 2 * (fe / 4) * h, 4 * (fe / 4) * h]);
        assert_eq!(ms.expert_tensors.iter().sum::<u64>(), 3 * fe * h);
        assert_eq!(mw.expert_tensors.iter().sum::<u64>(), 4 * 3 * fe * h);
        // Collectives: the EP all-to-alls carry the 2048 copies (2 bytes each element) as with
        // etp 1; the ETP all-gather and reduce-scatter the 4 x 2048 gathered ones.
        let a2a = copies * h * 2;
        assert_eq!(ms.router.tp.as_ref().unwrap().bytes, a2a);
        assert_eq!(mw.router.tp.as_ref().unwrap().bytes, a2a);
        let etp = ms.etp.as_ref().unwrap();
        let gather = etp.gather.tp.as_ref().unwrap();
        assert_eq!((gather.bytes, gather.group), (4 * a2a, CommGroup::ExpertTensor));
        assert_eq!((gather.forward.as_slice(), gather.backward.as_slice()), (&[TpCollective::AllGather][..], &[][..]));
        let rs = ms.experts.tp.as_ref().unwrap();
        assert_eq!((rs.bytes, rs.group), (4 * a2a, CommGroup::ExpertTensor));
        assert_eq!(rs.forward, vec![TpCollective::ReduceScatter]);
        assert_eq!(rs.backward, vec![TpCollective::ReduceScatter]);
        assert_eq!(etp.gather_grad.tp.as_ref().unwrap().backward, vec![TpCollective::AllGather]);
        assert_eq!(etp.combine_a2a.tp.as_ref().unwrap().forward, vec![TpCollective::AllToAll]);
        assert_eq!(etp.dispatch_grad.tp.as_ref().unwrap().backward, vec![TpCollective::AllToAll]);
        assert!(mw.etp.is_none() && mw.experts.tp.as_ref().unwrap().group == CommGroup::Expert);
        // In forward order: router, dispatch gradient, gather, experts, combine all-to-all, gather
        // gradient, combine; the added blocks compute nothing.
        let names: Vec<&str> = ms.blocks().iter().map(|b| b.name).collect();
        assert_eq!(
            names,
            ["moe-router", "ep-dispatch-grad", "etp-gather", "experts", "ep-combine", "etp-gather-grad", "moe-combine"]
        );
        assert!([&etp.dispatch_grad, &etp.gather, &etp.combine_a2a, &etp.gather_grad].iter().all(|b| b.ops.is_empty()));
        assert_eq!(split.to_workload().layers.len(), whole.to_workload().layers.len() + 4 * cfg.layers as usize);
        // Only etp 1 or tp is modelled; the experts' width must split.
        for (etp, recompute, want) in [(2, Recompute::None, "etp=2"), (4, Recompute::Full, "full recomputation")] {
            let o = CostOptions { recompute, ..o };
            let e = cost_moe(&cfg, h100, &o, &MoeOptions { ep: 2, etp, ..Default::default() }).unwrap_err();
            assert!(e.to_string().contains(want) && e.to_string().contains("etp"), "{e}");
        }
        let flex =
            super::super::moe::MoeRouting { dispatcher: super::super::moe::Dispatcher::Flex, ..Default::default() };
        let e =
            cost_moe(&cfg, h100, &o, &MoeOptions { ep: 2, etp: 4, routing: flex, ..Default::default() }).unwrap_err();
        assert!(e.to_string().contains("moe-dispatcher=alltoall"), "{e}");
    }

    /// A block of a GEMM (math: 80 us forward, 160 backward) and a norm (a memory pass: 25 us
    /// forward, 45 backward, one 5 us launch each): 20 of 105 us forward and 40 of 205 backward
    /// are memory-bound; recomputation (10 us) counts as math.
    #[test]
    fn a_block_s_memory_share_is_its_memory_passes_less_their_launches() {
        let fc = OpCost {
            name: "fc",
            forward_ns: 80_000.0,
            backward_ns: 160_000.0,
            forward_flops: 1e9,
            backward_flops: 2e9,
            kernels: (1, 1),
        };
        let norm =
            OpCost { forward_ns: 25_000.0, backward_ns: 45_000.0, forward_flops: 0.0, backward_flops: 0.0, ..fc };
        let blk = BlockCost {
            name: "mlp",
            ops: vec![fc, OpCost { name: "norm", ..norm }],
            recompute_ns: 0.0,
            params: 0,
            tensors: Vec::new(),
            tp: None,
        };
        let m = blk.memory_share();
        assert!((m.forward - 20.0 / 105.0).abs() < 1e-12 && (m.backward - 40.0 / 205.0).abs() < 1e-12, "{m:?}");
        let m = BlockCost { recompute_ns: 10_000.0, ..blk }.memory_share();
        assert!((m.backward - 40.0 / 215.0).abs() < 1e-12, "{m:?}");
    }

    fn named_op<'a>(b: &'a BlockCost, name: &str) -> &'a OpCost {
        b.ops.iter().find(|o| o.name == name).unwrap_or_else(|| panic!("no {name} in {}", b.name))
    }

    #[test]
    fn qwen3_normalises_each_query_and_key_head() {
        // Qwen3-30B-A3B: 32 query heads and 4 key heads of 128 on 4096 tokens, BF16: the two
        // RMSNorms read and write the heads forward, read them and their gradient and write the
        // input gradient backward, one kernel each for the queries and the keys.
        let h100 = GpuSpec::by_name("h100").unwrap();
        let o = CostOptions { seq_len: 4096, ..opts(1) };
        let d = Device::new(h100, &o).unwrap();
        let qwen = cost(&TransformerConfig::named("qwen3-30b-a3b").unwrap(), h100, &o).unwrap();
        let norm = named_op(&qwen.attention, "qk-norm");
        let bytes = (4096 * (32 + 4) * 128 * 2) as f64;
        assert!((norm.forward_ns - (2.0 * bytes / d.memory + 2.0 * LAUNCH_NS)).abs() < 1e-6);
        assert!((norm.backward_ns - (3.0 * bytes / d.memory + 2.0 * LAUNCH_NS)).abs() < 1e-6);
        assert_eq!(norm.kernels, (2, 2));
        // Llama has no such norms.
        let llama = cost(&TransformerConfig::named("llama3-8b").unwrap(), h100, &o).unwrap();
        assert!(!llama.attention.ops.iter().any(|op| op.name == "qk-norm"));
    }

    #[test]
    fn fp8_layers_count_the_transformer_engine_modules_megatron_core_calls() {
        // Qwen3-30B-A3B, ep 8: per layer forward TE's LayerNormLinear (qkv), two RMSNorms (q and
        // k), DotProductAttention and the output Linear; the pre-MLP norm; two GroupedLinears.
        let h100 = GpuSpec::by_name("h100").unwrap();
        let cfg = TransformerConfig::named("qwen3-30b-a3b").unwrap();
        let run = |precision| {
            let o = CostOptions { seq_len: 4096, precision, ..opts(1) };
            let x = MoeOptions { ep: 8, ..Default::default() };
            let c = cost_moe(&cfg, h100, &o, &x).unwrap();
            let names: Vec<String> = c.workload_blocks().into_iter().map(|(n, _)| n).collect();
            names.into_iter().zip(c.launches(Recompute::None, precision == Precision::Fp8)).collect::<Vec<_>>()
        };
        let fp8 = run(Precision::Fp8);
        let modules =
            |suffix: &str| fp8.iter().find(|(n, _)| n.starts_with("L0.") && n.ends_with(suffix)).unwrap().1.modules;
        assert_eq!(modules(".attn"), 5);
        assert_eq!(modules(".moe-router"), 1);
        assert_eq!(modules(".experts"), 2);
        assert_eq!(fp8.iter().map(|(_, l)| l.modules).sum::<u32>(), 48 * 8, "embedding and head have none");
        // BF16 runs PyTorch's modules unless its plan says `modules=te`; then TE's, as FP8.
        assert!(run(Precision::Bf16).iter().all(|(_, l)| l.modules == 0));
        let bf16_te = {
            let o = CostOptions { seq_len: 4096, precision: Precision::Bf16, ..opts(1) };
            let c = cost_moe(&cfg, h100, &o, &MoeOptions { ep: 8, ..Default::default() }).unwrap();
            c.launches(Recompute::None, true)
        };
        assert_eq!(
            bf16_te.iter().map(|l| l.modules).collect::<Vec<_>>(),
            fp8.iter().map(|(_, l)| l.modules).collect::<Vec<_>>()
        );
        // Llama's dense MLP: LayerNormLinear and Linear.
        let o = CostOptions { seq_len: 4096, precision: Precision::Fp8, ..opts(1) };
        let llama = cost(&TransformerConfig::named("llama3-8b").unwrap(), h100, &o).unwrap();
        let l = llama.launches(Recompute::None, true);
        assert_eq!(l.iter().map(|x| x.modules).sum::<u32>(), 32 * (3 + 2));
    }

    #[test]
    fn moe_layers_pay_the_copies_megatron_makes_beyond_the_gemms() {
        // Qwen3-30B-A3B at ep 8 (16 local experts), 4096 tokens of 2048: 32768 routed copies.
        use super::super::moe::MoeRouting;
        let cfg = TransformerConfig::named("qwen3-30b-a3b").unwrap();
        let h100 = GpuSpec::by_name("h100").unwrap();
        let copies_bytes = (4096 * 8 * 2048 * 2) as f64;
        let run = |precision, routing| {
            let o = CostOptions { seq_len: 4096, precision, ..opts(1) };
            let x = MoeOptions { ep: 8, routing, ..Default::default() };
            (Device::new(h100, &o).unwrap(), cost_moe(&cfg, h100, &o, &x).unwrap().moe.unwrap())
        };
        let dropless = MoeRouting::default();
        let (d, c) = run(Precision::Fp8, dropless);
        // The alltoall dispatcher's sort by local expert and back, and FP8's row padding of the
        // dropless counts: each reads and writes every copy, forward and backward.
        let pass = 2.0 * copies_bytes / d.memory + LAUNCH_NS;
        for name in ["sort-by-expert", "unsort-by-expert", "fp8-pad", "fp8-unpad"] {
            let op = named_op(&c.experts, name);
            assert!((op.forward_ns - pass).abs() < 1e-6 && (op.backward_ns - pass).abs() < 1e-6, "{name}");
        }
        // The router's load-balancing loss: 5 kernels each way on the 4096 x 128 scores.
        let aux = named_op(&c.router, "router-aux-loss");
        assert_eq!(aux.kernels, (5, 5));
        assert!((aux.forward_ns - (14.0 * 4096.0 * 128.0 / d.memory + 5.0 * LAUNCH_NS)).abs() < 1e-6);
        // Dropless metadata with ep > 1 (8 kernels) and TE's row-id map (3).
        assert_eq!(named_op(&c.router, "dispatch-metadata").kernels, (11, 0));
        // BF16 needs no padding; padded to a capacity of 16-aligned rows neither does FP8, and
        // the capacity's counts are known without the dropless metadata, but the drop adds masks.
        let (_, bf16) = run(Precision::Bf16, dropless);
        assert!(!bf16.experts.ops.iter().any(|o| o.name == "fp8-pad"));
        let drop = MoeRouting { capacity_factor: Some(1.0), pad_to_capacity: true, ..Default::default() };
        let (_, padded) = run(Precision::Fp8, drop);
        assert!(!padded.experts.ops.iter().any(|o| o.name == "fp8-pad"));
        assert!(padded.experts.ops.iter().any(|o| o.name == "sort-by-expert"));
        assert_eq!(named_op(&padded.router, "dispatch-metadata").kernels, (1 + 5 + 3, 1));
        // One expert a GPU: nothing to sort.
        let o = CostOptions { seq_len: 4096, precision: Precision::Fp8, ..opts(1) };
        let one = cost_moe(&cfg, h100, &o, &MoeOptions { ep: 128, ..Default::default() }).unwrap().moe.unwrap();
        assert!(!one.experts.ops.iter().any(|o| o.name == "sort-by-expert"));
    }

    #[test]
    fn grouped_expert_gemms_pay_one_launch_per_expert_and_fp8_current_scaling_casts() {
        // Qwen3-30B-A3B, ep 8: 16 local experts, 4096 x 8 token copies of 2048 -> 2 x 768 (fc1).
        let cfg = TransformerConfig::named("qwen3-30b-a3b").unwrap();
        let h100 = GpuSpec::by_name("h100").unwrap();
        let x = MoeOptions { ep: 8, ..Default::default() };
        let at = |precision| {
            let o = CostOptions { seq_len: 4096, precision, ..opts(1) };
            let c = cost_moe(&cfg, h100, &o, &x).unwrap().moe.unwrap();
            (Device::new(h100, &o).unwrap(), named_op(&c.experts, "expert-fc1").clone())
        };
        let (local, copies, n, k) = (16u64, 4096 * 8u64, 2 * 768u64, 2048u64);
        let per_expert = copies / local;
        for precision in [Precision::Bf16, Precision::Fp8] {
            let (d, fc1) = at(precision);
            assert_eq!(fc1.name, "expert-fc1");
            let gemm = |m, n, k| d.grouped_gemm(local, m, n, k, d.matmul).0;
            // One cuBLAS call per expert in each of the three GEMMs: 15 launches more than one.
            let mut forward = gemm(per_expert, n, k) + 15.0 * LAUNCH_NS;
            let mut backward = gemm(per_expert, k, n) + gemm(k, n, per_expert) + 30.0 * LAUNCH_NS;
            if precision == Precision::Fp8 {
                // Amax, scale and cast per expert: the input read twice, written row- and
                // column-wise in FP8 (6 bytes an element); the output gradient alike.
                forward += 6.0 * (copies * k) as f64 / d.memory + 3.0 * 16.0 * LAUNCH_NS;
                backward += 6.0 * (copies * n) as f64 / d.memory + 3.0 * 16.0 * LAUNCH_NS;
            }
            assert!((fc1.forward_ns - forward).abs() < 1e-6, "{precision:?}: {} vs {forward}", fc1.forward_ns);
            assert!((fc1.backward_ns - backward).abs() < 1e-6, "{precision:?}: {} vs {backward}", fc1.backward_ns);
        }
        // Without expert parallelism's split (ep 128: one expert a GPU) no extra launch is paid.
        let one = MoeOptions { ep: 128, ..Default::default() };
        let o = CostOptions { seq_len: 4096, ..opts(1) };
        let d = Device::new(h100, &o).unwrap();
        let fc1 = named_op(&cost_moe(&cfg, h100, &o, &one).unwrap().moe.unwrap().experts, "expert-fc1").clone();
        assert!((fc1.forward_ns - d.grouped_gemm(1, copies, n, k, d.matmul).0).abs() < 1e-6);
    }

    #[test]
    fn the_flex_dispatcher_sends_each_token_once_per_gpu_that_holds_its_experts() {
        use super::super::moe::{expected_ranks_per_token, Dispatcher, MoeRouting};
        // Boundaries: one GPU holds every expert; one expert a GPU and top 1: one GPU a token.
        assert!((expected_ranks_per_token(128, 8, 1) - 1.0).abs() < 1e-12);
        assert!((expected_ranks_per_token(64, 1, 64) - 1.0).abs() < 1e-12);
        // Two GPUs of 2 experts each, top 2 of 4: both experts on one GPU in 2 of the 6 pairs
        // (one GPU), on two GPUs in the other 4: (2 x 1 + 4 x 2) / 6.
        assert!((expected_ranks_per_token(4, 2, 2) - 10.0 / 6.0).abs() < 1e-12);
        // Qwen3-30B-A3B (128 experts, top 8) at ep 16: 16 (1 - C(120, 8) / C(128, 8)).
        let miss: f64 = (0..8).map(|i| (120 - i) as f64 / (128 - i) as f64).product();
        let ranks = 16.0 * (1.0 - miss);
        assert!((expected_ranks_per_token(128, 8, 16) - ranks).abs() < 1e-12 && ranks > 6.5 && ranks < 6.7);
        let cfg = TransformerConfig::named("qwen3-30b-a3b").unwrap();
        let h100 = GpuSpec::by_name("h100").unwrap();
        let o = CostOptions { seq_len: 4096, precision: Precision::Fp8, ..opts(1) };
        let run = |dispatcher| {
            let x = MoeOptions {
                ep: 16,
                routing: MoeRouting { dispatcher, ..Default::default() },
                cp: 1,
                ..Default::default()
            };
            cost_moe(&cfg, h100, &o, &x).unwrap().moe.unwrap()
        };
        let (plain, flex, hybrid) = (run(Dispatcher::AllToAll), run(Dispatcher::Flex), run(Dispatcher::HybridEp));
        assert_eq!(plain.router.tp.as_ref().unwrap().bytes, 4096 * 8 * 2048 * 2);
        assert_eq!(flex.router.tp.as_ref().unwrap().bytes, (4096.0 * ranks).ceil() as u64 * 2048 * 2);
        // HybridEP's exchange takes each token once; the collective spreads it (collective::Plan).
        let a2a = hybrid.router.tp.as_ref().unwrap();
        assert_eq!(a2a.bytes, 4096 * 2048 * 2);
        assert_eq!(a2a.forward, vec![TpCollective::HybridAllToAll { experts: 128, top_k: 8 }]);
        // The experts run the same GEMMs either way; the alltoall dispatcher also sorts the copies
        // by local expert and back, and HybridEP's dispatch permutes and pads them itself.
        let names = |b: &BlockCost| b.ops.iter().map(|o| o.name).collect::<Vec<_>>();
        for name in ["expert-fc1", "expert-activation", "expert-fc2"] {
            assert_eq!(named_op(&plain.experts, name), named_op(&flex.experts, name));
            assert_eq!(named_op(&plain.experts, name), named_op(&hybrid.experts, name));
        }
        assert!(names(&plain.experts).contains(&"sort-by-expert") && !names(&flex.experts).contains(&"sort-by-expert"));
        assert!(names(&flex.experts).contains(&"fp8-pad") && !names(&hybrid.experts).contains(&"fp8-pad"));
        assert!(names(&flex.router).contains(&"permute") && !names(&hybrid.router).contains(&"permute"));
        assert!(!names(&hybrid.combine).contains(&"unpermute"));
        // Token drop needs Megatron's alltoall dispatcher.
        let drop = MoeRouting { capacity_factor: Some(1.0), dispatcher: Dispatcher::Flex, ..Default::default() };
        let e = cost_moe(&cfg, h100, &o, &MoeOptions { ep: 16, routing: drop, cp: 1, ..Default::default() })
            .unwrap_err()
            .to_string();
        assert!(e.contains("moe-dispatcher=alltoall"), "{e}");
    }

    #[test]
    fn expert_gradients_are_the_routed_experts_weights_of_each_moe_layer() {
        // DeepSeek-MoE 16B: 1 dense layer, 64 routed experts and shared ones; CP adds a block.
        let cfg = TransformerConfig::named("deepseek-moe-16b").unwrap();
        let m = cfg.moe.clone().unwrap();
        let h100 = GpuSpec::by_name("h100").unwrap();
        for (ep, cp) in [(8, 1), (4, 2)] {
            let o = CostOptions { seq_len: 4096, sequence_parallel: true, ..opts(2) };
            let c = cost_moe(&cfg, h100, &o, &MoeOptions { ep, cp, ..Default::default() }).unwrap();
            let w = c.to_workload();
            let experts = c.expert_grad_tensors(GRAD_BYTES);
            assert_eq!(experts.len(), w.layers.len());
            let local_expert_bytes = (m.experts / ep) as u64 * m.expert_matrix_params(&cfg) * GRAD_BYTES;
            for (layer, e) in w.layers.iter().zip(&experts) {
                if layer.name.ends_with(".experts") {
                    // Whole experts (etp = 1), every tensor one of the layer's; the shared
                    // experts' weights stay with the dense gradients.
                    assert_eq!(e.iter().sum::<u64>(), local_expert_bytes, "{}", layer.name);
                    assert!(e.iter().all(|t| layer.grad_tensors.contains(t)));
                    assert!(layer.grad_bytes > local_expert_bytes);
                } else {
                    assert!(e.is_empty(), "{}", layer.name);
                }
            }
            let moe_layers = w.layers.iter().filter(|l| l.name.ends_with(".experts")).count();
            assert_eq!(moe_layers as u32, cfg.layers - m.dense_layers);
        }
    }

    #[test]
    fn context_parallelism_keeps_flops_per_token_and_runs_the_ring() {
        // Each of cp GPUs holds seq / cp tokens of every sequence: per token, the same model FLOPs
        // as the whole sequence on one GPU; with cp-comm=p2p the attention core runs in the CP
        // ring's layer, which sends this GPU's K and V of its share to the next CP rank at each
        // step.
        let cfg = TransformerConfig::named("llama3-8b").unwrap();
        let h100 = GpuSpec::by_name("h100").unwrap();
        let whole = cost(&cfg, h100, &CostOptions { seq_len: 32768, ..opts(2) }).unwrap();
        for cp in [2u32, 4, 8] {
            let o = CostOptions { seq_len: 32768 / cp, ..opts(2) };
            let x = MoeOptions { cp, cp_comm: CpComm::P2p, ..Default::default() };
            let c = cost_moe(&cfg, h100, &o, &x).unwrap();
            let (a, b) = (c.model_flops_per_token(), whole.model_flops_per_token());
            assert!((a - b).abs() < 1e-9 * b, "cp{cp}: {a} vs {b}");
            let ring = c.context.as_ref().unwrap();
            assert_eq!(ring.ops.iter().map(|o| o.name).collect::<Vec<_>>(), vec!["flash-attention", "cp-ring-passes"]);
            assert!(c.attention.ops.iter().all(|o| o.name != "flash-attention"));
            let comm = ring.tp.as_ref().unwrap();
            // K and V: 2 x 8 KV heads x 128 over tp 2, for 32768 / cp tokens, 2 bytes each.
            let kv = (32768 / cp as u64) * (2 * 8 * 128 / 2) * 2;
            assert_eq!(comm.bytes, kv);
            let r = comm.ring.as_ref().unwrap();
            let n = cp as usize;
            let mut fwd = vec![kv; n - 1];
            fwd.push(0);
            assert_eq!(r.forward, fwd, "cp{cp}");
            let mut bwd = vec![2 * kv; n];
            (bwd[0], bwd[n - 1]) = (kv, kv);
            assert_eq!(r.backward, bwd, "cp{cp}");
            assert!(comm.forward.is_empty() && comm.backward.is_empty());
            // The attention of a GPU's share costs more than 1/cp of the whole (its queries see
            // every key) but its MLP exactly its share of tokens.
            let attn = c.attention.forward_ns() + ring.forward_ns();
            assert!(attn > whole.attention.forward_ns() / cp as f64);
            // The default, cp-comm=all-gather: the attention core stays in the attention block,
            // and the exchange gathers this TP rank's K and V of the whole sequence (2 x 8 KV heads
            // x 128 over tp 2, 32768 tokens, 2 bytes each), gradients reduce-scattered.
            let g = cost_moe(&cfg, h100, &o, &MoeOptions { cp, ..Default::default() }).unwrap();
            let (a, b) = (g.model_flops_per_token(), whole.model_flops_per_token());
            assert!((a - b).abs() < 1e-9 * b, "cp{cp}: {a} vs {b}");
            assert!(g.attention.ops.iter().any(|o| o.name == "flash-attention"));
            let gather = g.context.as_ref().unwrap();
            assert!(gather.ops.is_empty());
            let comm = gather.tp.as_ref().unwrap();
            assert_eq!(comm.bytes, 32768 * (2 * 8 * 128 / 2) * 2);
            assert_eq!(comm.forward, vec![TpCollective::AllGather]);
            assert_eq!(comm.backward, vec![TpCollective::AllGather, TpCollective::ReduceScatter]);
            assert!(comm.ring.is_none());
            assert!(g.attention.forward_ns() > whole.attention.forward_ns() / cp as f64);
        }
        assert!(whole.context.is_none());
        let e = cost_moe(
            &cfg,
            h100,
            &CostOptions { flash_attention: false, ..opts(2) },
            &MoeOptions { cp: 2, ..Default::default() },
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("flash"), "{e}");
    }

    #[test]
    fn the_cp_ring_times_its_steps_at_the_gpu_s_share_and_charges_te_s_memory_passes() {
        // Llama 2 7B (32 heads of 128, MHA), tp 4, cp 4, 16384 tokens per GPU, cuDNN attention
        // on an H100, BF16: four kernels, each a quarter of the causal work, at the rate of the
        // GPU's 16384 tokens (cuDNN 539 / 516 TFLOP/s, FA3 paper Fig. 5(d)/6).
        let cfg = TransformerConfig::named("llama2-7b").unwrap();
        let h100 = GpuSpec::by_name("h100").unwrap();
        let o = CostOptions { seq_len: 16384, attention: Some(AttnKernel::Cudnn), ..opts(4) };
        let c = cost_moe(&cfg, h100, &o, &MoeOptions { cp: 4, cp_comm: CpComm::P2p, ..Default::default() }).unwrap();
        let ring = c.context.as_ref().unwrap();
        let core = &ring.ops[0];
        let peak = h100.peak_flops_per_ns(Precision::Bf16) * sustained_clock("h100-sxm");
        let rate = |tflops: f64| peak * tflops / H100_BF16_PEAK_TFLOPS;
        // Executed: the causal half of 4 x 8 heads x 16384 x 65536 x 128, a quarter per step.
        let step = 0.5 * 4.0 * 8.0 * 16384.0 * 65536.0 * 128.0 / 4.0;
        let fwd = 4.0 * step / rate(539.0) + 4.0 * LAUNCH_NS;
        let bwd = 2.5 * 4.0 * step / rate(516.0) + 4.0 * LAUNCH_NS;
        assert!((core.forward_ns - fwd).abs() < 1e-6 * fwd, "{} vs {fwd}", core.forward_ns);
        assert!((core.backward_ns - bwd).abs() < 1e-6 * bwd, "{} vs {bwd}", core.backward_ns);
        // The passes around them, in units of the queries' bytes (q = k = v here): forward 2 x 3
        // transposes in, 2 out, 4 the buffer of k and v, 1 the zeroed output, 3 the first
        // correction, then per later step 2 (half of k and v) + 3 (correction); backward 2 + 6
        // transposes, 4 the buffer copy, per step before the last 3 + 1.5 + 4 + 6 (half of q,
        // output and gradient copied, half of dq added, dk and dv concatenated and added), 3 + 4
        // + 6 at the last. Softmax statistics: 24 + 20 per later step bytes a row, forward.
        let q = 16384.0 * 8.0 * 128.0 * 2.0;
        let rows = 8.0 * 16384.0;
        let passes = &ring.ops[1];
        let stream = h100.mem_bytes_per_ns() * MEMORY_EFFICIENCY;
        let fwd_bytes = (6.0 + 2.0 + 4.0 + 1.0 + 3.0 + 3.0 * 5.0) * q + (24.0 + 3.0 * 20.0) * rows;
        let bwd_bytes = (2.0 + 6.0 + 4.0 + 3.0 * 14.5 + 13.0) * q;
        assert_eq!(passes.kernels, (9 + 3 * 3, 8 + 6 * 3));
        let fwd = fwd_bytes / stream + 18.0 * LAUNCH_NS;
        let bwd = bwd_bytes / stream + 26.0 * LAUNCH_NS;
        assert!((passes.forward_ns - fwd).abs() < 1e-6 * fwd, "{} vs {fwd}", passes.forward_ns);
        assert!((passes.backward_ns - bwd).abs() < 1e-6 * bwd, "{} vs {bwd}", passes.backward_ns);
    }

    #[test]
    fn attention_kernels_run_at_their_published_rates() {
        // Llama 2 7B at 4096 on an H100: the fused kernels' forward time past the launch is the
        // causal half of 4 s^2 d FLOPs per head at the kernel's TFLOP/s at 4096 (FA3 paper,
        // Fig. 5(d)/6: FlashAttention-2 319 forward, 310 backward; cuDNN 518 and 499).
        let cfg = TransformerConfig::named("llama2-7b").unwrap();
        let h100 = GpuSpec::by_name("h100").unwrap();
        let core = |k: Option<AttnKernel>| {
            let c = cost(&cfg, h100, &CostOptions { seq_len: 4096, attention: k, ..opts(1) }).unwrap();
            let op = c.attention.ops.iter().find(|o| o.name == "flash-attention").unwrap().clone();
            (op.forward_ns - LAUNCH_NS, op.backward_ns - LAUNCH_NS)
        };
        let (fa2, cudnn, fa3) = (core(Some(AttnKernel::Fa2)), core(Some(AttnKernel::Cudnn)), core(None));
        assert_eq!(fa3, core(Some(AttnKernel::Fa3)), "FlashAttention-3 is the Hopper default");
        assert!((fa2.0 / cudnn.0 - 518.0 / 319.0).abs() < 1e-9);
        assert!((fa2.1 / cudnn.1 - 499.0 / 310.0).abs() < 1e-9);
        let executed = 0.5 * 4.0 * 32.0 * 4096.0 * 4096.0 * 128.0;
        // The benchmarks' rates at the clock sustained in training (SUSTAINED_CLOCK).
        let peak = h100.peak_flops_per_ns(Precision::Bf16) * sustained_clock("h100-sxm");
        assert!((cudnn.0 - executed / (peak * 518.0 / H100_BF16_PEAK_TFLOPS)).abs() < 1e-6 * cudnn.0);
        assert!((cudnn.1 - 2.5 * executed / (peak * 499.0 / H100_BF16_PEAK_TFLOPS)).abs() < 1e-6 * cudnn.1);
        assert!(fa3.0 < cudnn.0 && cudnn.0 < fa2.0);
        // No published rates for FlashAttention-3 or cuDNN on an A100: refused, naming the key.
        let a100 = GpuSpec::by_name("a100").unwrap();
        for k in [AttnKernel::Fa3, AttnKernel::Cudnn] {
            let o = CostOptions { seq_len: 4096, attention: Some(k), ..opts(1) };
            let e = cost(&cfg, a100, &o).unwrap_err().to_string();
            assert!(e.contains("attn") && e.contains(k.name()) && e.contains("attn=fa2"), "{e}");
        }
        for k in [AttnKernel::Fa2, AttnKernel::Fa3, AttnKernel::Cudnn] {
            assert_eq!(AttnKernel::parse(k.name()), Some(k));
        }
        assert_eq!(AttnKernel::parse("fa4"), None);
        // Blackwell: cuDNN's rates by default (Transformer Engine's choice there; FA3 is sm90-only).
        let gb200 = GpuSpec::by_name("gb200").unwrap();
        let on = |k: Option<AttnKernel>| {
            let c = cost(&cfg, gb200, &CostOptions { seq_len: 4096, attention: k, ..opts(1) }).unwrap();
            let op = c.attention.ops.iter().find(|o| o.name == "flash-attention").unwrap().clone();
            (op.forward_ns, op.backward_ns)
        };
        assert_eq!(on(None), on(Some(AttnKernel::Cudnn)));
        assert!(on(Some(AttnKernel::Fa3)).0 < on(None).0);
        // ... measured on a GB200 (cudnn-frontend: 1408 forward, 1148 backward TFLOP/s at 4096
        // of its 2500 peak), at the clock sustained in training; 512 tokens from the 2048 rate
        // scaled as on the H100 (315 / 484).
        let peak = gb200.peak_flops_per_ns(Precision::Bf16) * sustained_clock("gb200");
        let (f, b) = on(None);
        assert!((f - LAUNCH_NS - executed / (peak * 1408.0 / 2500.0)).abs() < 1e-6 * f);
        assert!((b - LAUNCH_NS - 2.5 * executed / (peak * 1148.0 / 2500.0)).abs() < 1e-6 * b);
        let c = cost(&cfg, gb200, &CostOptions { seq_len: 512, ..opts(1) }).unwrap();
        let op = c.attention.ops.iter().find(|o| o.name == "flash-attention").unwrap();
        let executed512 = 0.5 * 4.0 * 32.0 * 512.0 * 512.0 * 128.0;
        let want = executed512 / (peak * 1097.0 * 315.0 / 484.0 / 2500.0);
        assert!((op.forward_ns - LAUNCH_NS - want).abs() < 1e-6 * want);
    }

    #[test]
    fn megatrons_softmax_fallback_and_the_swapped_batches_per_block_check() {
        // get_batch_per_block (scaled_masked_softmax.h @ 58d9204 l.316-329) fed the heads per GPU
        // as the key length: 128 threads a block, min(32, next power of two) threads a row, two
        // rows a warp up to 128.
        for (heads, bpb) in
            [(1, 256), (2, 128), (4, 64), (8, 32), (12, 16), (16, 16), (26, 8), (32, 8), (64, 8), (256, 4)]
        {
            assert_eq!(swapped_batches_per_block(heads), bpb, "{heads} heads a GPU");
        }
        let k = SoftmaxKernel::SwappedCheck;
        // BLOOM's 14336 x 72 at tp 8 (8 heads a GPU): fused from micro-batch 4, not at 1 or 2;
        // 112 heads at tp 8 (14 a GPU, 56 attention batches, 16 a block) never.
        assert!(k.fused_for(4, 8, 2048, 2.0) && k.fused_for(8, 8, 2048, 2.0));
        assert!(!k.fused_for(1, 8, 2048, 2.0) && !k.fused_for(2, 8, 2048, 2.0) && !k.fused_for(6, 8, 2048, 2.0));
        assert!(!k.fused_for(4, 14, 2048, 2.0) && k.fused_for(2, 28, 2048, 2.0));
        // FP32 scores, keys beyond 2048 or a batch not a multiple of 4: the fallback.
        assert!(!k.fused_for(4, 8, 2048, 4.0) && !k.fused_for(4, 8, 4096, 2.0) && !k.fused_for(1, 2, 2048, 2.0));
        assert!(SoftmaxKernel::Fused.fused_for(1, 3, 8192, 4.0) && !SoftmaxKernel::Unfused.fused_for(4, 8, 2048, 2.0));
        for s in [SoftmaxKernel::Fused, SoftmaxKernel::Unfused, SoftmaxKernel::SwappedCheck] {
            assert_eq!(SoftmaxKernel::parse(s.name()), Some(s));
        }
        assert_eq!(SoftmaxKernel::parse("torch"), None);

        // The fallback's bytes over the b x heads/tp x s x s scores: 36 forward and 40 backward in
        // BF16 against the fused kernel's 4 and 6, and four more kernels each way.
        let a100 = GpuSpec::by_name("a100").unwrap();
        let mem = a100.mem_bytes_per_ns() * MEMORY_EFFICIENCY;
        let cfg = TransformerConfig::named("llama2-7b").unwrap();
        let attn = |softmax: SoftmaxKernel, micro_batch: u32| {
            let o = CostOptions { flash_attention: false, softmax, micro_batch, ..opts(4) };
            let c = cost(&cfg, a100, &o).unwrap();
            c.attention.ops.iter().find(|o| o.name == "attention").unwrap().clone()
        };
        for mb in [1, 2] {
            let n = (mb as u64 * 8 * 2048 * 2048) as f64; // 32 heads over tp 4
            let (f, u) = (attn(SoftmaxKernel::Fused, mb), attn(SoftmaxKernel::Unfused, mb));
            assert!((u.forward_ns - f.forward_ns - (32.0 * n / mem + 4.0 * LAUNCH_NS)).abs() < 1e-6 * u.forward_ns);
            assert!((u.backward_ns - f.backward_ns - (34.0 * n / mem + 4.0 * LAUNCH_NS)).abs() < 1e-6 * u.backward_ns);
            assert_eq!((u.kernels.0 - f.kernels.0, u.kernels.1 - f.kernels.1), (4, 4));
        }
        // 8 heads a GPU: the swapped check takes the fallback at micro-batch 2, the kernel at 4.
        assert_eq!(attn(SoftmaxKernel::SwappedCheck, 2).forward_ns, attn(SoftmaxKernel::Unfused, 2).forward_ns);
        assert_eq!(attn(SoftmaxKernel::SwappedCheck, 4).forward_ns, attn(SoftmaxKernel::Fused, 4).forward_ns);
        // Flash attention has no separate softmax to choose.
        let o = CostOptions { softmax: SoftmaxKernel::Unfused, ..opts(4) };
        let e = cost(&cfg, a100, &o).unwrap_err().to_string();
        assert!(e.contains("softmax") && e.contains("flash=off"), "{e}");
    }

    #[test]
    fn alibi_without_flash_copies_the_bias_into_the_scores_and_reads_it_back() {
        // BLOOM's shape at tp 8 (8 heads a GPU): Megatron-DeepSpeed's `baddbmm` into the ALiBi
        // bias writes every score once more (the copy of the broadcast bias) and the scores GEMM
        // reads them back (beta != 0); the backward pass is unchanged.
        let a100 = GpuSpec::by_name("a100-sxm4-80gb").unwrap();
        let mem = a100.mem_bytes_per_ns() * MEMORY_EFFICIENCY;
        let bloom = TransformerConfig::named("bloom-176b").unwrap();
        let learned = TransformerConfig { position: Position::Learned { max_positions: 2048 }, ..bloom.clone() };
        let o = CostOptions { flash_attention: false, micro_batch: 2, ..opts(8) };
        let attn = |cfg: &TransformerConfig| {
            let c = cost(cfg, a100, &o).unwrap();
            c.attention.ops.iter().find(|o| o.name == "attention").unwrap().clone()
        };
        let (a, l) = (attn(&bloom), attn(&learned));
        let n = (2 * 14 * 2048 * 2048) as f64; // 112 heads over tp 8, micro-batch 2
        let (hd, e) = (128.0, 2.0);
        // The scores GEMM: math at the sustained rate over its waves of 128 x 128 tiles (28 x 16 x
        // 16 tiles on 108 SMs), or its bytes with the output read back.
        let tiles: u64 = 28 * 16 * 16;
        let fill = tiles as f64 / (tiles.div_ceil(108) * 108) as f64;
        let math = 2.0 * n * hd / (230.0 * 1e3 * fill);
        let bytes = |c_passes: f64| 28.0 * 2.0 * 2048.0 * hd * e + c_passes * n * e;
        let extra_gemm = math.max(bytes(2.0) / mem) - math.max(bytes(1.0) / mem);
        let extra = n * e / mem + LAUNCH_NS + extra_gemm;
        assert!(extra_gemm > 0.0, "the short-K scores GEMM is memory-bound once it reads its output");
        assert!((a.forward_ns - l.forward_ns - extra).abs() < 1e-6 * a.forward_ns, "{} {}", a.forward_ns, l.forward_ns);
        assert_eq!(a.backward_ns, l.backward_ns);
        assert_eq!((a.kernels.0 - l.kernels.0, a.kernels.1), (1, l.kernels.1));
        // Flash attention applies the bias inside its kernel: nothing extra.
        let flash = CostOptions { flash_attention: true, ..o };
        let fa = |cfg: &TransformerConfig| cost(cfg, a100, &flash).unwrap().attention.forward_ns();
        assert_eq!(fa(&bloom), fa(&learned));
    }

    #[test]
    fn megatrons_unfused_cross_entropy_moves_52_bytes_a_logit() {
        // Megatron-Core r0.8.0 cross_entropy.py without --cross-entropy-loss-fusion: forward
        // .float() (2 + 4), max (4), -= (4 + 4), exp (4 + 4), sum (4), div_ (4 + 4); backward
        // mul_ (4 + 4) and the cast back to BF16 (4 + 2). The fused default moves 10 + 10.
        let h100 = GpuSpec::by_name("h100").unwrap();
        let mem = h100.mem_bytes_per_ns() * MEMORY_EFFICIENCY;
        let cfg = TransformerConfig::named("llama2-7b").unwrap();
        let loss = |tp: u32, k: LossKernel| {
            let c = cost_of("llama2-7b", "h100", CostOptions { loss: k, ..opts(tp) });
            let op = c.head.ops.iter().find(|o| o.name == "loss").unwrap().clone();
            (op.forward_ns, op.backward_ns, op.kernels)
        };
        for tp in [1, 2] {
            let logits = (2048 * cfg.vocab.div_ceil(tp as u64)) as f64;
            let (ff, fb, fk) = loss(tp, LossKernel::Fused);
            let (uf, ub, uk) = loss(tp, LossKernel::Unfused);
            assert!((ff - (10.0 * logits / mem + LAUNCH_NS)).abs() < 1e-6);
            assert!((fb - (10.0 * logits / mem + LAUNCH_NS)).abs() < 1e-6);
            assert!((uf - (38.0 * logits / mem + 6.0 * LAUNCH_NS)).abs() < 1e-6);
            assert!((ub - (14.0 * logits / mem + 2.0 * LAUNCH_NS)).abs() < 1e-6);
            assert_eq!((fk, uk), ((1, 1), (6, 2)));
        }
        // Under FP8 the logits stay BF16; FP32 logits are not copied.
        let unfused = |p: Precision| {
            let c = cost_of("llama2-7b", "h100", CostOptions { precision: p, loss: LossKernel::Unfused, ..opts(1) });
            c.head.ops.iter().find(|o| o.name == "loss").unwrap().clone()
        };
        assert_eq!(unfused(Precision::Fp8).forward_ns, unfused(Precision::Bf16).forward_ns);
        assert_eq!(unfused(Precision::Fp8).backward_ns, unfused(Precision::Bf16).backward_ns);
        let a100 = GpuSpec::by_name("a100").unwrap();
        let mem32 = a100.mem_bytes_per_ns() * MEMORY_EFFICIENCY;
        let c = cost_of(
            "llama2-7b",
            "a100",
            CostOptions { precision: Precision::Fp32, loss: LossKernel::Unfused, ..opts(1) },
        );
        let fp32 = c.head.ops.iter().find(|o| o.name == "loss").unwrap().clone();
        let logits = (2048 * cfg.vocab) as f64;
        assert!((fp32.forward_ns - (32.0 * logits / mem32 + 5.0 * LAUNCH_NS)).abs() < 1e-6);
        assert!((fp32.backward_ns - (8.0 * logits / mem32 + LAUNCH_NS)).abs() < 1e-6);
        assert_eq!(fp32.kernels, (5, 1));
        // Nothing else moves.
        let (f, u) = (
            cost_of("llama2-7b", "h100", opts(1)),
            cost_of("llama2-7b", "h100", CostOptions { loss: LossKernel::Unfused, ..opts(1) }),
        );
        assert_eq!(f.attention.ops, u.attention.ops);
        assert_eq!(f.mlp.ops, u.mlp.ops);
        assert_eq!(f.model_flops, u.model_flops);
    }

    #[test]
    fn fp8_adds_transformer_engine_casts_and_keeps_the_output_layer_in_bf16() {
        let h100 = GpuSpec::by_name("h100").unwrap();
        let mem = h100.mem_bytes_per_ns() * MEMORY_EFFICIENCY;
        let fp8 = |tp, sp| {
            cost_of("llama2-7b", "h100", CostOptions { precision: Precision::Fp8, sequence_parallel: sp, ..opts(tp) })
        };
        let bf16 = cost_of("llama2-7b", "h100", opts(1));
        let c = fp8(1, false);
        let op = |b: &BlockCost, name: &str| b.ops.iter().find(|o| o.name == name).unwrap().clone();
        // The output layer is Megatron's own 16-bit GEMM: the same time as in a BF16 run.
        assert_eq!(op(&c.head, "logits"), op(&bf16.head, "logits"));
        // FC2 (a row-parallel `Linear`, t x f -> t x h, BF16 input): its GEMMs at the FP8 rate
        // plus a cast-transpose of its input (2 + 1 + 1 bytes an element) forward, and of its
        // output gradient backward.
        let cfg = TransformerConfig::named("llama2-7b").unwrap();
        let (t, h, f) = (2048u64, cfg.hidden, cfg.ffn_hidden);
        let d = Device::new(h100, &CostOptions { precision: Precision::Fp8, ..opts(1) }).unwrap();
        let gemms = |m, n, k| d.gemm(1, m, n, k, d.matmul).0;
        let fc2 = op(&c.mlp, "fc2");
        let cast_transpose = |elems: u64| 4.0 * elems as f64 / mem + LAUNCH_NS;
        assert!((fc2.forward_ns - gemms(t, h, f) - cast_transpose(t * f)).abs() < 1e-6);
        assert!((fc2.backward_ns - gemms(t, f, h) - gemms(f, h, t) - cast_transpose(t * h)).abs() < 1e-6);
        // FC1 (`LayerNormLinear`): nothing before its GEMM (the norm writes FP8, one byte less an
        // element than in BF16), backward a transpose of the FP8 input (2 bytes) and a
        // cast-transpose of the output gradient.
        let fc1 = op(&c.mlp, "fc1");
        assert!((fc1.forward_ns - gemms(t, 2 * f, h)).abs() < 1e-6);
        let fc1_bwd = gemms(t, h, 2 * f)
            + gemms(h, 2 * f, t)
            + 2.0 * (t * h) as f64 / mem
            + LAUNCH_NS
            + cast_transpose(t * 2 * f);
        assert!((fc1.backward_ns - fc1_bwd).abs() < 1e-6);
        let norm_saving = op(&bf16.mlp, "norm").forward_ns - op(&c.mlp, "norm").forward_ns;
        assert!((norm_saving - (t * h) as f64 / mem).abs() < 1e-6);
        // Under sequence parallelism a row-parallel layer casts its local output-gradient share
        // before the all-gather and transposes the gathered one: more bytes than the fused kernel.
        let (sp, no_sp) = (fp8(4, true), fp8(4, false));
        assert!(op(&sp.mlp, "fc2").backward_ns > op(&no_sp.mlp, "fc2").backward_ns);
        assert!(op(&sp.mlp, "fc2").forward_ns < op(&no_sp.mlp, "fc2").forward_ns);
        // The per-step weight cast: the update costs more per parameter than in BF16, by less
        // than 4 bytes (only the GEMM weights are cast).
        let extra = (c.update_ns_per_param - bf16.update_ns_per_param) * mem;
        assert!(extra > 3.5 && extra < 4.0, "{extra}");
        // Still faster than BF16, slower than the GEMMs at the FP8 rate alone.
        assert!(c.single_gpu_step_ns() < bf16.single_gpu_step_ns());
    }

    #[test]
    fn fp8_current_scaling_adds_amax_passes_and_blackwell_drops_the_transposes() {
        // Llama 2 7B on one GPU, FC2 (a `Linear`, t x f -> t x h) and FC1 (a `LayerNormLinear`).
        let cfg = TransformerConfig::named("llama2-7b").unwrap();
        let (t, h, f) = (2048u64, cfg.hidden, cfg.ffn_hidden);
        let fp8 = |recipe| CostOptions { precision: Precision::Fp8, fp8_recipe: recipe, ..opts(1) };
        let op = |b: &BlockCost, name: &str| b.ops.iter().find(|o| o.name == name).unwrap().clone();
        for (gpu, transposed) in [("h100", 1.0), ("gb200", 0.0)] {
            let spec = GpuSpec::by_name(gpu).unwrap();
            let mem = spec.mem_bytes_per_ns() * MEMORY_EFFICIENCY;
            let pass = |bytes: f64, elems: u64| bytes * elems as f64 / mem + LAUNCH_NS;
            let d = Device::new(spec, &fp8(Fp8Recipe::Delayed)).unwrap();
            let gemms = |m, n, k| d.gemm(1, m, n, k, d.matmul).0;
            let delayed = cost_of("llama2-7b", gpu, fp8(Fp8Recipe::Delayed));
            let current = cost_of("llama2-7b", gpu, fp8(Fp8Recipe::Current));
            // Delayed scaling: one cast each way (read 2, write 1, and 1 more for the transposed
            // copy on Hopper only).
            let fc2 = op(&delayed.mlp, "fc2");
            assert!((fc2.forward_ns - gemms(t, h, f) - pass(3.0 + transposed, t * f)).abs() < 1e-6, "{gpu}");
            assert_eq!(fc2.kernels, (2, 3));
            // Current scaling: amax (read 2), scale (no bytes) and cast, each a kernel, each way.
            let quantize = |elems: u64| pass(2.0, elems) + LAUNCH_NS + pass(3.0 + transposed, elems);
            let fc2 = op(&current.mlp, "fc2");
            assert!((fc2.forward_ns - gemms(t, h, f) - quantize(t * f)).abs() < 1e-6, "{gpu}");
            assert!((fc2.backward_ns - gemms(t, f, h) - gemms(f, h, t) - quantize(t * h)).abs() < 1e-6, "{gpu}");
            assert_eq!(fc2.kernels, (4, 5));
            // FC1: the norm writes 16 bits and the amax, then the scale and the cast; backward
            // the output gradient quantised (and, under delayed scaling on Hopper, the input
            // transposed).
            let fc1 = op(&current.mlp, "fc1");
            assert!((fc1.forward_ns - gemms(t, 2 * f, h) - LAUNCH_NS - pass(3.0 + transposed, t * h)).abs() < 1e-6);
            assert_eq!(fc1.kernels, (3, 5));
            let norm_extra = op(&current.mlp, "norm").forward_ns - op(&delayed.mlp, "norm").forward_ns;
            assert!((norm_extra - (t * h) as f64 / mem).abs() < 1e-6, "{gpu}");
            let fc1_delayed = op(&delayed.mlp, "fc1");
            assert_eq!(fc1_delayed.kernels, (1, 3 + transposed as u32));
            // The weights' once-a-step cast: an amax pass (2 bytes) more per GEMM parameter.
            let extra = (current.update_ns_per_param - delayed.update_ns_per_param) * mem;
            assert!(extra > 1.8 && extra < 2.0, "{gpu} {extra}");
            assert!(current.single_gpu_step_ns() > delayed.single_gpu_step_ns());
        }
        // The recipe is only read under FP8.
        let bf16 = |recipe| cost_of("llama2-7b", "gb200", CostOptions { fp8_recipe: recipe, ..opts(1) });
        assert_eq!(bf16(Fp8Recipe::Current), bf16(Fp8Recipe::Delayed));
    }

    #[test]
    fn recomputation_adds_hardware_flops_and_time() {
        let none = cost_of("gpt3-175b", "a100-80gb", CostOptions { flash_attention: false, ..opts(8) });
        let sel = cost_of(
            "gpt3-175b",
            "a100-80gb",
            CostOptions { flash_attention: false, recompute: Recompute::Selective, ..opts(8) },
        );
        let full = cost_of(
            "gpt3-175b",
            "a100-80gb",
            CostOptions { flash_attention: false, recompute: Recompute::Full, ..opts(8) },
        );
        assert_eq!(none.hardware_flops, none.model_flops);
        assert!(sel.hardware_flops > none.hardware_flops && full.hardware_flops > sel.hardware_flops);
        // Full recomputation repeats the forward: hardware FLOPs are 4/3 of the model's for the layers.
        let layer_model = none.attention.model_flops() + none.mlp.model_flops();
        let layer_hw = (full.hardware_flops - full.model_flops) / (8.0 * 96.0);
        assert!((layer_hw / layer_model - 1.0 / 3.0).abs() < 1e-9);
        assert!(full.attention.backward_ns() > sel.attention.backward_ns());
        assert!(sel.attention.backward_ns() > none.attention.backward_ns());
        assert_eq!(sel.mlp.backward_ns(), none.mlp.backward_ns());
        // Full recomputation repeats the forward all-reduce before the backward one.
        assert_eq!(full.attention.tp.as_ref().unwrap().backward.len(), 2);
    }

    #[test]
    fn gemm_roofline_runs_near_the_measured_matmul_rate_for_big_shapes() {
        let gpu = GpuSpec::by_name("h100").unwrap();
        let d = Device::new(gpu, &opts(1)).unwrap();
        // GPT-3's MLP GEMM on one GPU: 2048 x 49152 x 12288: math-bound, full waves, at the
        // best-shape rate (794.5) scaled to the clock sustained in training (1575 / 1980 MHz).
        let (ns, flops) = d.gemm(1, 2048, 49152, 12288, d.matmul);
        let tflops = flops / ns / 1e3;
        let sustained = 794.5 * 1575.0 / 1980.0;
        assert!((tflops - sustained).abs() / sustained < 0.02, "{tflops}");
        // A thin GEMM (k = 128) is memory-bound: far below the matmul rate.
        let (ns, flops) = d.gemm(1, 4096, 4096, 128, d.matmul);
        assert!(flops / ns / 1e3 < 400.0);
        // One tile more than a full wave costs a whole extra wave: 132 tiles fill the 132 SMs
        // once; 143 take two waves, each tile at the rate of a full wave's (both math-bound).
        let full = d.gemm(1, 128 * 12, 128 * 11, 16384, d.matmul).0 - LAUNCH_NS;
        let over = d.gemm(1, 128 * 12 + 1, 128 * 11, 16384, d.matmul).0 - LAUNCH_NS;
        let two_waves = (1537.0 / 1536.0) * 2.0 * 132.0 / 143.0;
        assert!((over / full - two_waves).abs() < 1e-9, "{}", over / full);
    }

    #[test]
    fn fp8_gemms_pay_a_fixed_tile_overhead_that_short_k_cannot_hide() {
        let h100 = GpuSpec::by_name("h100").unwrap();
        let fp8 = Device::new(h100, &CostOptions { precision: Precision::Fp8, ..opts(1) }).unwrap();
        // DeepGEMM PR #73's H800 FP8 GEMMs (M 4096, 128 x 128 tiles), at the fit's main-loop rate
        // of 1503 TFLOP/s: TFLOP/s against the K = 16384 one, measured 1031, 999 and 591 of 1404.
        let tflops = |n: u64, k: u64| {
            let (ns, flops) = fp8.gemm(1, 4096, n, k, 1503.0e3);
            flops / (ns - LAUNCH_NS) / 1e3
        };
        let deep = tflops(7168, 16384);
        for (n, k, measured) in [(7168u64, 2048u64, 1031.0), (24576, 1536, 999.0), (32768, 512, 591.0)] {
            let (model, data) = (tflops(n, k) / deep, measured / 1404.0);
            assert!((model / data - 1.0).abs() < 0.05, "k {k}: {model} vs {data}");
        }
        // By hand, one full wave (132 tiles of 128 x 128) at the training rate, K = 768
        // (Qwen3-30B-A3B's expert fc2): each tile's main loop, 2 x 128^2 x 768 FLOPs at a 132nd
        // of the rate, plus 2234 ns, over the same at K = 16384.
        let rate = fp8.matmul;
        let main = |k: f64| 2.0 * 128.0 * 128.0 * k * 132.0 / rate;
        let factor = (1.0 + 2234.0 / main(768.0)) / (1.0 + 2234.0 / main(16384.0));
        let (ns, flops) = fp8.gemm(1, 128 * 12, 128 * 11, 768, rate);
        assert!((ns - LAUNCH_NS - flops / rate * factor).abs() < 1e-6, "{ns}");
        assert!(factor > 1.6 && factor < 1.8, "{factor}");
        // At the reference depth the table's best-shape rate holds unchanged.
        let (ns, flops) = fp8.gemm(1, 128 * 12, 128 * 11, 16384, rate);
        assert!((ns - LAUNCH_NS - flops / rate).abs() < 1e-6);
        // 16-bit expert GEMMs pay it too, at their own rate; dense 16-bit GEMMs (unmeasured),
        // FP32 (CUDA cores) and Blackwell (unmeasured) keep the roofline.
        let bf16 = Device::new(h100, &opts(1)).unwrap();
        let main16 = |k: f64| 2.0 * 128.0 * 128.0 * k * 132.0 / bf16.matmul;
        let factor16 = (1.0 + 2234.0 / main16(768.0)) / (1.0 + 2234.0 / main16(16384.0));
        let (ns, flops) = bf16.grouped_gemm(1, 128 * 12, 128 * 11, 768, bf16.matmul);
        assert!((ns - LAUNCH_NS - flops / bf16.matmul * factor16).abs() < 1e-6, "{ns}");
        assert!(factor16 > 1.35 && factor16 < 1.45, "{factor16}");
        let (ns, flops) = bf16.gemm(1, 128 * 12, 128 * 11, 768, bf16.matmul);
        assert!((ns - LAUNCH_NS - flops / bf16.matmul).abs() < 1e-6);
        let fp32 = Device::new(h100, &CostOptions { precision: Precision::Fp32, ..opts(1) }).unwrap();
        let (ns, flops) = fp32.grouped_gemm(1, 128 * 12, 128 * 11, 768, fp32.matmul);
        assert!((ns - LAUNCH_NS - flops / fp32.matmul).abs() < 1e-6);
        let b200 = GpuSpec::by_name("b200").unwrap();
        let bw = Device::new(b200, &CostOptions { precision: Precision::Fp8, ..opts(1) }).unwrap();
        assert_eq!(bw.short_k(768, bw.matmul), 1.0);
    }

    #[test]
    fn blackwell_dense_gemms_run_at_the_b200_table_efficiency_by_shape() {
        let gb200 = GpuSpec::by_name("gb200").unwrap();
        let fp8 = Device::new(gb200, &CostOptions { precision: Precision::Fp8, ..opts(1) }).unwrap();
        let bf16 = Device::new(gb200, &opts(1)).unwrap();
        let ns_at = |d: &Device, batch, m, n, k, eff: f64| {
            let (ns, flops) = d.gemm(batch, m, n, k, d.matmul);
            assert!((ns - LAUNCH_NS - flops / (d.matmul * eff)).abs() < 1e-6, "{ns}");
            ns
        };
        // Llama 3 8B's QKV on 16,384 tokens (16384 x 6144 x 4096): past the grid in rows and n,
        // so at the rows 16384 x 4096 x 4096 entry (b 4 x m 4096), 3279.677 of the B200's 3432.5.
        ns_at(&fp8, 1, 16384, 6144, 4096, 3279.677 / 3432.5);
        // The same rows as a batch of four: the same entry.
        ns_at(&fp8, 4, 4096, 6144, 4096, 3279.677 / 3432.5);
        // A grid point inside: 1024 x 2048 x 1024, BF16 492.542 TFLOP/s in the table.
        let half = 492.542;
        assert_eq!(GemmTable::b200().unwrap().tflops(GemmType::Half, 1024, 2048, 1024), half);
        ns_at(&bf16, 1, 1024, 2048, 1024, half / 1745.0);
        // A 16-bit GEMM inside an FP8 run reads the BF16 column at the 16-bit rate.
        let (ns, flops) = fp8.gemm_in((1, 1024, 2048, 1024), fp8.matmul16, 2.0, false);
        assert!((ns - LAUNCH_NS - flops / (fp8.matmul16 * half / 1745.0)).abs() < 1e-6);
        // Expert GEMMs keep the roofline (148 tiles: one full wave of the 148 SMs), Hopper has no
        // table.
        let (ns, flops) = fp8.grouped_gemm(1, 128 * 4, 128 * 37, 16384, fp8.matmul);
        assert!((ns - LAUNCH_NS - flops / fp8.matmul).abs() < 1e-6);
        let h100 = Device::new(GpuSpec::by_name("h100").unwrap(), &opts(1)).unwrap();
        assert!(h100.shape_table.is_none());
    }

    /// This model's time for every GEMM of the H200 sweep (docs/gpu_runs/h200-2026-11-28), as
    /// (dtype, k, model / measured - 1); printed per K with `--nocapture`.
    fn h200_sweep_errors() -> Vec<(String, u64, f64)> {
        let csv = include_str!("../../docs/gpu_runs/h200-2026-11-28/matmul_sweep.csv");
        let h200 = GpuSpec::by_name("h200").unwrap();
        let bf16 = Device::new(h200, &opts(1)).unwrap();
        let fp8 = Device::new(h200, &CostOptions { precision: Precision::Fp8, ..opts(1) }).unwrap();
        let mut out = Vec::new();
        for line in csv.lines().filter(|l| l.starts_with("matmul,")) {
            let f: Vec<&str> = line.split(',').collect();
            let [m, n, k]: [u64; 3] = [2, 3, 4].map(|i| f[i].parse().unwrap());
            let measured_ns = f[6].parse::<f64>().unwrap() * 1e9;
            let d = if f[1] == "bf16" { &bf16 } else { &fp8 };
            let model_ns = d.gemm(1, m, n, k, d.matmul).0;
            out.push((f[1].to_string(), k, model_ns / measured_ns - 1.0));
        }
        out
    }

    #[test]
    fn h200_gemms_match_the_measured_sweep() {
        let errors = h200_sweep_errors();
        let median = |mut v: Vec<f64>| {
            v.sort_by(f64::total_cmp);
            let h = v.len() / 2;
            if v.len() % 2 == 1 {
                v[h]
            } else {
                (v[h - 1] + v[h]) / 2.0
            }
        };
        let bf16: Vec<_> = errors.iter().filter(|e| e.0 == "bf16").collect();
        assert_eq!(bf16.len(), 91);
        let mut ks: Vec<u64> = bf16.iter().map(|e| e.1).collect();
        ks.sort_unstable();
        ks.dedup();
        for k in ks {
            let at_k: Vec<f64> = bf16.iter().filter(|e| e.1 == k).map(|e| e.2).collect();
            let med = median(at_k.clone());
            eprintln!("bf16 K {k:>5}: {} shapes, median {:+.1}%", at_k.len(), 100.0 * med);
            // The short-K cost keeps every depth's median within 2%: the roofline was 4% fast at
            // K = 512 and 8-11% slow from K = 4096 up.
            assert!(med.abs() < 0.02, "K {k}: {med}");
        }
        let mean = bf16.iter().map(|e| e.2.abs()).sum::<f64>() / bf16.len() as f64;
        let worst = bf16.iter().map(|e| e.2.abs()).fold(0.0, f64::max);
        eprintln!("bf16: mean |error| {:.2}%, worst {:.1}%", 100.0 * mean, 100.0 * worst);
        assert!(mean < 0.025 && worst < 0.12, "{mean} {worst}");
        // FP8 with the DeepGEMM tile cost held: the large shapes within 9%; K = 1024 is 21% slow
        // (cuBLAS's FP8 kernel pays less per tile than DeepGEMM's, docs/workloads.md).
        for (_, k, e) in errors.iter().filter(|e| e.0 == "fp8_e4m3") {
            eprintln!("fp8 K {k:>5}: {:+.1}%", 100.0 * e);
            assert!(if *k >= 4096 { e.abs() < 0.09 } else { *e > 0.0 && *e < 0.25 }, "fp8 K {k}: {e}");
        }
    }

    #[test]
    fn bf16_expert_mlp_matches_the_measured_h100_grouped_gemm_probe() {
        // Megatron-Bridge's Qwen3.5-35B-A3B H100 campaign (qwen35-h100-campaign.md): one H100,
        // BF16 `grouped_mm`, 16 local experts x 2,048 rows, hidden 2048, expert width 512,
        // SwiGLU: 0.495 ms forward, 1.389 ms forward and backward. The same kernels here: fc1
        // (gated, 2 x 512 wide), SwiGLU (read 2 halves, write 1), fc2; backward their input and
        // weight gradients and SwiGLU's (read 3, write 2).
        let h100 = GpuSpec::by_name("h100").unwrap();
        let d = Device::new(h100, &opts(1)).unwrap();
        let (e, rows, h, f) = (16u64, 2048u64, 2048u64, 512u64);
        let elems = (e * rows * f) as f64;
        let g = |m, n, k| d.grouped_gemm(e, m, n, k, d.matmul).0;
        let forward = g(rows, 2 * f, h) + d.stream(3.0 * elems * 2.0) + g(rows, h, f);
        let backward =
            g(rows, f, h) + g(f, h, rows) + d.stream(5.0 * elems * 2.0) + g(rows, h, 2 * f) + g(h, 2 * f, rows);
        let (fwd_ms, all_ms) = (forward / 1e6, (forward + backward) / 1e6);
        assert!((fwd_ms / 0.495 - 1.0).abs() < 0.05, "{fwd_ms}");
        assert!((all_ms / 1.389 - 1.0).abs() < 0.05, "{all_ms}");
    }

    #[test]
    fn tensor_rates_run_at_the_clock_sustained_at_the_power_limit() {
        // The sources' figures: A100 1305 of 1410 MHz (NVIDIA's HPL Rpeak clock), H100-class
        // 1575 of 1980 MHz (DeepGEMM #120), H200 as H100; B200 1580 of 1965 MHz (flashinfer
        // #2899), GB200 as B200.
        assert_eq!(sustained_clock("a100-sxm4-80gb"), 1305.0 / 1410.0);
        assert_eq!(sustained_clock("a100-sxm4-40gb"), 1305.0 / 1410.0);
        assert_eq!(sustained_clock("h100-sxm"), 1575.0 / 1980.0);
        assert_eq!(sustained_clock("h200-sxm"), sustained_clock("h100-sxm"));
        assert_eq!(sustained_clock("b200"), 1580.0 / 1965.0);
        assert_eq!(sustained_clock("gb200"), sustained_clock("b200"));
        // A GB200's FP8 GEMM rate: MAMF's best 3615.6 TFLOP/s at 1580 of 1965 MHz (2907); a
        // B200's BF16: 1745.0 at the same fraction (1403).
        let gb200 = GpuSpec::by_name("gb200").unwrap();
        let d = Device::new(gb200, &CostOptions { precision: Precision::Fp8, ..opts(1) }).unwrap();
        assert!((d.matmul / 1e3 - 3615.6 * 1580.0 / 1965.0).abs() < 0.5, "{}", d.matmul);
        let b200 = GpuSpec::by_name("b200").unwrap();
        let d = Device::new(b200, &opts(1)).unwrap();
        assert!((d.matmul / 1e3 - 1745.0 * 1580.0 / 1965.0).abs() < 0.5, "{}", d.matmul);
        // The A100's 16-bit GEMMs run at the rate measured over seconds (230 TFLOP/s, FP16 and
        // BF16 alike, both cards), not MAMF's best at the HPL clock (271.2 x 1305/1410 = 251);
        // its attention fractions keep the HPL clock.
        for gpu in ["a100-sxm4-80gb", "a100-sxm4-40gb"] {
            let a100 = GpuSpec::by_name(gpu).unwrap();
            for precision in [Precision::Bf16, Precision::Fp16] {
                let d = Device::new(a100, &CostOptions { precision, ..opts(1) }).unwrap();
                assert_eq!((d.matmul, d.matmul16), (230e3, 230e3), "{gpu} {precision:?}");
                assert!((d.peak16 / 1e3 - 312.0 * 1305.0 / 1410.0).abs() < 0.5);
            }
        }
        // GPUs without a long-run measurement keep MAMF x the sustained clock.
        assert!(sustained_matmul("h100-sxm").is_none());
        // The H200's rates are its own sweep's, FP8 included (the table's rates at K = 16384).
        let h200 = GpuSpec::by_name("h200").unwrap();
        let d = Device::new(h200, &CostOptions { precision: Precision::Fp8, ..opts(1) }).unwrap();
        assert_eq!((d.matmul, d.matmul16), (1398e3, 690e3));
        // Every GPU the FLOP table measures at its best has a sustained clock, or is said not to.
        for (gpu, _, _) in MATMUL_EFFICIENCY {
            let f = sustained_clock(gpu);
            assert!(f > 0.5 && f <= 1.0, "{gpu}: {f}");
        }
        // Attention runs at the same clock: its fraction of the sustained peak.
        let h100 = GpuSpec::by_name("h100").unwrap();
        let d = Device::new(h100, &opts(1)).unwrap();
        assert!((d.peak16 / 1e3 - 989.4 * 1575.0 / 1980.0).abs() < 1.0);
        // FP32 (SIMT, the zoo's efficiency) is not scaled.
        let fp32 = Device::new(h100, &CostOptions { precision: Precision::Fp32, ..opts(1) }).unwrap();
        assert_eq!(fp32.matmul, h100.peak_flops_per_ns(Precision::Fp32) * super::super::synth::DENSE_EFFICIENCY_FP32);
    }

    #[test]
    fn flash_attention_is_faster_and_tp_splits_the_work() {
        let flash = cost_of("llama2-70b", "h100", CostOptions { seq_len: 4096, ..opts(8) });
        let plain = cost_of("llama2-70b", "h100", CostOptions { seq_len: 4096, flash_attention: false, ..opts(8) });
        assert!(flash.attention.forward_ns() < plain.attention.forward_ns());
        let tp1 = cost_of("llama2-70b", "h100", CostOptions { seq_len: 4096, ..opts(1) });
        let ratio = tp1.mlp.forward_ns() / flash.mlp.forward_ns();
        assert!(ratio > 6.0 && ratio < 8.5, "{ratio}");
        assert!(tp1.attention.tp.is_none() && flash.attention.tp.is_some());
        // FP8 GEMMs are faster than BF16 ones; B200 faster than H100.
        let fp8 = cost_of("llama2-70b", "h100", CostOptions { seq_len: 4096, precision: Precision::Fp8, ..opts(8) });
        assert!(fp8.mlp.forward_ns() < 0.8 * flash.mlp.forward_ns());
        let b200 = cost_of("llama2-70b", "b200", CostOptions { seq_len: 4096, ..opts(8) });
        assert!(b200.mlp.forward_ns() < 0.6 * flash.mlp.forward_ns());
    }

    #[test]
    fn sequence_parallel_changes_the_collectives_not_the_bytes() {
        let sp = cost_of("gpt3-175b", "a100-80gb", CostOptions { sequence_parallel: true, ..opts(8) });
        let tp = sp.attention.tp.as_ref().unwrap();
        assert_eq!(tp.forward, vec![TpCollective::AllGather, TpCollective::ReduceScatter]);
        assert_eq!(tp.bytes, 2048 * 12288 * 2);
        let ar = cost_of("gpt3-175b", "a100-80gb", opts(8));
        assert_eq!(ar.attention.tp.as_ref().unwrap().forward, vec![TpCollective::AllReduce]);
        assert!(sp.mlp.forward_ns() < ar.mlp.forward_ns()); // norms on 1/8 of the tokens
    }

    #[test]
    fn bad_options_are_refused_with_what_would_be_valid() {
        let cfg = TransformerConfig::named("llama2-70b").unwrap();
        let h100 = GpuSpec::by_name("h100").unwrap();
        let e = cost(&cfg, h100, &opts(16)).unwrap_err().to_string();
        assert!(e.contains("tp=16") && e.contains("8 key-value heads"), "{e}");
        let e = cost(&cfg, GpuSpec::by_name("v100").unwrap(), &opts(8)).unwrap_err().to_string();
        assert!(e.contains("bf16"), "{e}");
        let e = cost(&cfg, GpuSpec::by_name("a100").unwrap(), &CostOptions { precision: Precision::Fp8, ..opts(8) })
            .unwrap_err()
            .to_string();
        assert!(e.contains("fp8"), "{e}");
        let e = cost(&cfg, h100, &CostOptions { micro_batch: 0, ..opts(8) }).unwrap_err().to_string();
        assert!(e.contains("--micro-batch"), "{e}");
    }

    #[test]
    fn calibration_hits_the_single_gpu_number_and_workload_has_every_block() {
        let mut c = cost_of("llama3-8b", "h100", CostOptions { seq_len: 8192, ..opts(1) });
        c.calibrate_throughput(1.5).unwrap();
        assert!((1e9 / c.single_gpu_step_ns() - 1.5).abs() < 1e-9);
        let w = c.to_workload();
        assert_eq!(w.layers.len(), 2 + 2 * 32);
        assert_eq!(w.layers[1].name, "L0.attn");
        assert_eq!(w.layers.last().unwrap().name, "head");
        let params = TransformerConfig::named("llama3-8b").unwrap().params().total();
        assert_eq!(w.grad_bytes(), params * 4);
    }
}
