//! Mixture-of-experts MLPs: the shape ([`MoeConfig`]: routed experts, top-k routing, shared
//! experts, leading dense layers), the routing options a run chooses ([`MoeRouting`]: capacity
//! factor, padding to capacity, routing imbalance), and the cost of one MoE layer's MLP on one GPU
//! under expert parallelism ([`moe_blocks`]).
//!
//! An MoE layer's MLP is three workload blocks, Megatron-Core's `MoELayer` with the all-to-all
//! token dispatcher (`megatron/core/transformer/moe/`, core_r0.10): `moe-router` (norm, router
//! GEMM, softmax and top-k, permutation of the routed copies of each token), then the dispatch
//! all-to-all over the expert-parallel group; `experts` (each local expert's fc1, activation and
//! fc2 as one grouped GEMM, plus the shared experts on every token), then the combine all-to-all;
//! `moe-combine` (un-permutation, weighted sum of the k outputs, residual add). The backward pass
//! runs the same all-to-alls in the other direction. Tokens arrive sequence-parallel over the TP
//! group. With expert tensor parallelism 1 (`etp=1`) each expert lives whole on one GPU; with
//! `etp` = tp each local expert's fc1 is split by columns and its fc2 by rows over the TP group,
//! and the dispatcher all-gathers the received token copies over that group after the dispatch
//! all-to-all and reduce-scatters the experts' output before the combine one
//! (`MoEAlltoAllTokenDispatcher`, megatron/core/transformer/moe/token_dispatcher.py @
//! core_r0.12.0: `gather_from_sequence_parallel_region` and `reduce_scatter_to_sequence_parallel_region`
//! over `self.tp_group`, the expert-tensor-parallel group, when its size is above 1).

use super::llm::{BlockCost, CostOptions, Device, OpCost};
use super::synth::LAUNCH_NS;
use super::transformer::TransformerConfig;
use super::{TpCollective, TpComm};
use crate::error::{Error, Result};
use serde::Serialize;

/// The mixture-of-experts part of a model's shape.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MoeConfig {
    /// Routed experts per MoE layer.
    pub experts: u32,
    /// Experts each token is routed to.
    pub top_k: u32,
    /// MLP width of one routed expert (per gate for a gated MLP).
    pub expert_ffn: u64,
    /// MLP width of the shared experts together, which every token passes (DeepSeek's
    /// `n_shared_experts x moe_intermediate_size`, Qwen's `shared_expert_intermediate_size`); 0: none.
    pub shared_ffn: u64,
    /// A sigmoid gate (one `hidden`-vector) scales the shared experts' output (Qwen-MoE).
    pub shared_gate: bool,
    /// Leading layers that keep the dense MLP of `ffn_hidden` (DeepSeek's `first_k_dense_replace`).
    pub dense_layers: u32,
}

impl MoeConfig {
    /// Weights of one routed expert's matrices.
    pub fn expert_matrix_params(&self, cfg: &TransformerConfig) -> u64 {
        mlp_matrices(cfg, self.expert_ffn)
    }

    /// Weights of the shared experts' matrices.
    pub fn shared_matrix_params(&self, cfg: &TransformerConfig) -> u64 {
        mlp_matrices(cfg, self.shared_ffn)
    }

    /// The router's weights (hidden x experts) and the shared-expert gate.
    pub fn router_params(&self, cfg: &TransformerConfig) -> u64 {
        cfg.hidden * self.experts as u64 + if self.shared_gate { cfg.hidden } else { 0 }
    }

    /// Parameters of one MoE layer's MLP block: its norm, router, every expert, shared experts.
    pub fn block_params(&self, cfg: &TransformerConfig, norm: u64) -> u64 {
        norm + self.router_params(cfg)
            + self.experts as u64 * self.expert_matrix_params(cfg)
            + self.shared_matrix_params(cfg)
    }

    /// Parameters of the block a token meets: the router, its top-k experts, the shared ones.
    pub fn active_block_params(&self, cfg: &TransformerConfig, norm: u64) -> u64 {
        norm + self.router_params(cfg)
            + self.top_k as u64 * self.expert_matrix_params(cfg)
            + self.shared_matrix_params(cfg)
    }

    /// Whether layer `i` (from 0) has the MoE MLP.
    pub fn is_moe_layer(&self, i: u32) -> bool {
        i >= self.dense_layers
    }

    pub fn check(&self, at: &str, layers: u32) -> Result<()> {
        let bad = |field: &str, msg: String| Err(Error::invalid(format!("{at} `{field}`"), msg));
        if self.experts == 0 || self.expert_ffn == 0 {
            return bad("experts", "an MoE config needs at least one expert of positive width".into());
        }
        if self.top_k == 0 || self.top_k > self.experts {
            return bad("top_k", format!("{} is not between 1 and the {} experts", self.top_k, self.experts));
        }
        if self.dense_layers > layers {
            return bad("dense_layers", format!("{} dense layers but the model has {layers}", self.dense_layers));
        }
        Ok(())
    }
}

fn mlp_matrices(cfg: &TransformerConfig, width: u64) -> u64 {
    (if cfg.gated_mlp { 3 } else { 2 }) * cfg.hidden * width
}

/// How a run routes tokens: Megatron's `--moe-expert-capacity-factor`,
/// `--moe-pad-expert-input-to-capacity`, and the load of the busiest expert over the mean.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct MoeRouting {
    /// Each expert takes at most this multiple of its even share of the routed tokens and drops
    /// the rest (None: dropless).
    pub capacity_factor: Option<f64>,
    /// Experts' inputs are padded to the capacity (every expert computes and exchanges it).
    pub pad_to_capacity: bool,
    /// Tokens routed to the busiest expert over the even share (1: perfectly balanced). Routing is
    /// a run-time outcome: the auxiliary load-balancing loss keeps it near 1 but not at it.
    pub imbalance: f64,
    /// How the routed tokens travel between the expert-parallel ranks.
    pub dispatcher: Dispatcher,
}

/// Megatron-Core's token dispatcher (`--moe-token-dispatcher-type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Dispatcher {
    /// `alltoall`: the tokens are permuted into one copy per routed expert before the all-to-all
    /// (`MoEAlltoAllTokenDispatcher`), so a token routed to two experts of one GPU is sent twice.
    AllToAll,
    /// `flex` with the DeepEP backend: each token is sent once to every GPU that holds any of its
    /// experts and permuted there (`buffer.get_dispatch_layout` gives `is_token_in_rank`, then
    /// `buffer.dispatch`: megatron/core/transformer/moe/fused_a2a.py @ core_v0.15.3 l.86-121);
    /// the combine returns one partial sum per GPU. The exchange runs as one flat all-to-all of
    /// the deduplicated bytes.
    Flex,
    /// `flex` with the HybridEP backend (`--moe-flex-dispatcher-backend hybridep`, DeepEP's
    /// hybrid-ep branch): a token crosses once to each other node that holds any of its experts
    /// and fans out over NVLink there ([`crate::collective::CollectiveOp::HybridAllToAll`]). The
    /// dispatch permutes the tokens by expert and pads each expert's rows to the FP8 alignment in
    /// the same kernel, the combine un-permutes (`_HybridEPManager.dispatch`/`combine`,
    /// `get_permuted_hidden_states_by_experts` returns its input: megatron/core/transformer/moe/
    /// token_dispatcher.py @ core_v0.16.0 l.942-1082), so no permute, un-permute or padding
    /// kernel runs beside it.
    HybridEp,
}

impl Default for MoeRouting {
    fn default() -> Self {
        MoeRouting { capacity_factor: None, pad_to_capacity: false, imbalance: 1.0, dispatcher: Dispatcher::AllToAll }
    }
}

/// Expected GPUs of `ep` (each holding `experts / ep`) that a token routed to `top_k` distinct
/// experts drawn uniformly reaches: `ep (1 - C(E - E/ep, k) / C(E, k))`. Uniform routing is what
/// the Megatron-Bridge benchmarks run (`moe_router_force_load_balancing`, performance summary:
/// "we force-balance the token distribution among experts").
pub fn expected_ranks_per_token(experts: u32, top_k: u32, ep: u32) -> f64 {
    let (e, local) = (experts as f64, (experts / ep.max(1)) as f64);
    let miss = (0..top_k).map(|i| ((e - local - i as f64) / (e - i as f64)).max(0.0)).product::<f64>();
    ep as f64 * (1.0 - miss)
}

impl MoeRouting {
    /// Tokens the busiest expert (and its GPU) handles over the even share: the imbalance, cut at
    /// the capacity when tokens are dropped, or the capacity itself when padded to it.
    pub fn load_factor(&self) -> f64 {
        match (self.capacity_factor, self.pad_to_capacity) {
            (Some(c), true) => c,
            (Some(c), false) => self.imbalance.min(c),
            (None, _) => self.imbalance,
        }
    }

    pub fn check(&self) -> Result<()> {
        let err = |msg: &str| Err(Error::invalid("--parallel", msg.to_string()));
        if !(self.imbalance.is_finite() && self.imbalance >= 1.0) {
            return err("moe-imbalance must be a number of at least 1 (tokens of the busiest expert over the mean)");
        }
        if self.capacity_factor.is_some_and(|c| !(c.is_finite() && c > 0.0)) {
            return err("moe-capacity must be a positive number (Megatron's --moe-expert-capacity-factor)");
        }
        if self.pad_to_capacity && self.capacity_factor.is_none() {
            return err("moe-pad=on needs moe-capacity=F (padding is to the capacity)");
        }
        if self.capacity_factor.is_some() && self.dispatcher != Dispatcher::AllToAll {
            // Megatron-Bridge's apply_moe_token_drop asserts the alltoall dispatcher (v0.2.0).
            return err("moe-capacity (token drop) needs moe-dispatcher=alltoall, as Megatron's capacity factor does");
        }
        Ok(())
    }
}

/// How a cost is split beyond tensor parallelism: the expert-parallel degree and routing of MoE
/// layers, and the context-parallel degree (the micro-batch's sequences are `cp` times the
/// options' `seq_len`, which is this GPU's share; attention runs against all of it).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MoeOptions {
    pub ep: u32,
    /// Expert tensor parallelism: 1, or the TP degree (each expert split over the TP group).
    pub etp: u32,
    pub routing: MoeRouting,
    pub cp: u32,
    /// How the CP group exchanges keys and values.
    pub cp_comm: super::llm::CpComm,
}

impl Default for MoeOptions {
    fn default() -> Self {
        MoeOptions { ep: 1, etp: 1, routing: MoeRouting::default(), cp: 1, cp_comm: super::llm::CpComm::AllGather }
    }
}

/// One MoE layer's MLP on one GPU for one micro-batch: the three blocks in forward order.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MoeCost {
    pub router: BlockCost,
    pub experts: BlockCost,
    pub combine: BlockCost,
    /// With etp > 1: the collectives between the blocks that run over another group than their
    /// neighbours' (each layer's collectives run over one group), see [`EtpBlocks`].
    pub etp: Option<EtpBlocks>,
    /// Leading layers with the dense MLP.
    pub dense_layers: u32,
    /// Routed experts on each GPU.
    pub local_experts: u32,
    /// Token copies the busiest GPU's experts process per micro-batch.
    pub routed_tokens: u64,
    /// The routed experts' weight tensors among the `experts` block's (parameters): Megatron-Core
    /// reduces their gradients over the expert-data-parallel group when ep > 1 (`dag::plan`).
    pub expert_tensors: Vec<u64>,
    /// The host waits for the GPU after the router's forward pass, to read how many tokens each
    /// expert got: dropless routing (and token dropping without padding) sizes the permutation,
    /// the all-to-all splits and the grouped GEMM's `m_splits` on the host. Megatron-Core
    /// core_v0.14.0 `MoEAlltoAllTokenDispatcher.preprocess` (megatron/core/transformer/moe/
    /// token_dispatcher.py l.428-549) sets its `cuda_sync_point` to "before_ep_alltoall" (ep or
    /// tp > 1), "before_finish" otherwise, or "before_permutation_1" with a capacity factor but no
    /// padding, and `_maybe_dtoh_and_synchronize` (l.821-860) blocks on `d2h_event.synchronize()`
    /// there; padded to capacity (`drop_and_pad`) the sizes are known on the host and nothing
    /// syncs. The flex dispatcher syncs too: DeepEP's `buffer.dispatch` returns the received
    /// counts as a Python list ("the CPU will wait for GPU's signal to arrive", fused_a2a.py
    /// l.103 @ core_v0.15.3), HybridEP's `dispatch_with_permute` blocks unless
    /// `num_permuted_tokens` is given (fused_a2a.py l.365-367 @ core_v0.16.0).
    #[serde(skip)]
    pub host_sync: bool,
}

/// The compute-free blocks an MoE layer adds under expert tensor parallelism, so that every
/// collective runs in its place: forward, router, dispatch all-to-all, `gather` (ETP all-gather),
/// experts (ETP reduce-scatter), `combine_a2a` (combine all-to-all), combine; backward in reverse,
/// combine (its all-to-all), `gather_grad` (ETP all-gather of the output gradient), experts (ETP
/// reduce-scatter of the input gradient), `dispatch_grad` (the dispatch all-to-all's gradient),
/// router.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EtpBlocks {
    pub dispatch_grad: BlockCost,
    pub gather: BlockCost,
    pub combine_a2a: BlockCost,
    pub gather_grad: BlockCost,
}

impl MoeCost {
    /// The blocks in forward order.
    pub fn blocks(&self) -> Vec<&BlockCost> {
        match &self.etp {
            None => vec![&self.router, &self.experts, &self.combine],
            Some(x) => vec![
                &self.router,
                &x.dispatch_grad,
                &x.gather,
                &self.experts,
                &x.combine_a2a,
                &x.gather_grad,
                &self.combine,
            ],
        }
    }
    pub fn blocks_mut(&mut self) -> Vec<&mut BlockCost> {
        match &mut self.etp {
            None => vec![&mut self.router, &mut self.experts, &mut self.combine],
            Some(x) => vec![
                &mut self.router,
                &mut x.dispatch_grad,
                &mut x.gather,
                &mut self.experts,
                &mut x.combine_a2a,
                &mut x.gather_grad,
                &mut self.combine,
            ],
        }
    }
}

/// Quantisation kernels per tensor under FP8 current scaling, the recipe of the Megatron-Bridge
/// H100 runs (`--fp8_recipe cs`, scripts/performance/README.md @ v0.2.0): Transformer Engine's
/// `Float8CurrentScalingQuantizer::quantize` (pytorch/csrc/quantizer.cpp @ v2.9, l.518-535) runs
/// an amax kernel, a scale kernel and the cast, one tensor at a time. The bytes they move per
/// element are `Device::cs_quantize_bytes` (the amax pass reads the 16-bit input, 2; the cast
/// reads it again, 2, and writes the FP8 data row-wise, 1, and on Hopper transposed too, 1, for
/// the backward GEMMs).
const CS_QUANTIZE_KERNELS: f64 = 3.0;

/// Kernels of Megatron-Core's top-k router beyond its gating GEMM and its fused top-k
/// (megatron/core/transformer/moe/router.py and moe_utils.py @ core_v0.15.0, with
/// `moe_router_fusion`, as every Megatron-Bridge Qwen3 perf config sets it, and the default
/// `aux_loss` load balancing), each over the tokens x experts scores, (forward, backward):
/// forward `fused_compute_score_for_moe_aux_loss`, `routing_map.sum(dim=0)`, `fused_moe_aux_loss`,
/// and `save_to_aux_losses_tracker`'s division and in-place add (`TopKRouter._apply_aux_loss`
/// l.267-293 and l.377-420); backward the score and the loss kernels' gradients, `MoEAuxLossAutoScaler`'s
/// `ones_like(aux_loss) * scale`, and the sum of the logits' two gradients.
const ROUTER_AUX_KERNELS: (u32, u32) = (5, 5);
/// Bytes per (token, expert) those kernels move, (forward, backward): FP32 logits read and
/// scores written (4 + 4) with the routing map (1), the map summed (1), the scores read by the
/// loss (4); backward the scores' gradient written and read (4 + 4), the logits' two gradients
/// summed (4 + 4 + 4).
const ROUTER_AUX_BYTES: (f64, f64) = (14.0, 20.0);
/// Small kernels of the token dispatcher's metadata, forward only, on per-expert counts (no
/// bandwidth to speak of). `MoEAlltoAllTokenDispatcher.preprocess` (token_dispatcher.py @
/// core_v0.15.0 l.429-549): dropless, `routing_map.sum(dim=0).long()` (2) and with ep > 1 the
/// input splits' sum, the EP all-gather of the counts, the local experts' slice, and three sums
/// (6 more); padded to capacity a `torch.full` (1). Transformer Engine's fused permute builds its
/// row-id map in 3 kernels before the permute (`moe_permute_with_probs`, the `permute` op here).
const DISPATCH_METADATA_KERNELS: (u32, u32, u32) = (2, 6, 1);
const PERMUTE_MAP_KERNELS: u32 = 3;
/// `apply_router_token_dropping` (moe_utils.py @ core_v0.15.0 l.656-712), forward: `topk` over
/// the tokens of each expert, `zeros_like`, `scatter`, `.bool()`, the probabilities masked; the
/// mask's gradient backward.
const TOKEN_DROP_KERNELS: (u32, u32) = (5, 1);
/// Rows of an FP8 GEMM's input Transformer Engine aligns each group to (`Fp8Padding`: 16 but
/// for MXFP8, transformer_engine/pytorch/module/fp8_padding.py).
const FP8_ALIGN_ROWS: u64 = 16;

/// What Transformer Engine's `GroupedLinear` (the experts' fc1 and fc2 under Megatron-Core's
/// `TEGroupedMLP`) spends beyond one grouped GEMM of `local` equal groups, as (forward, backward)
/// ns for `copies` routed token copies of `k` -> `n` on this GPU (TE v2.9 to v2.15,
/// pytorch/module/grouped_linear.py):
/// - each GEMM is one cuBLAS call per expert, spread over four streams
///   (`multi_stream_cublas_gemm`, common/gemm/cublaslt_gemm.cu @ v2.9 l.925-975; the CUTLASS
///   grouped kernel only with `NVTE_USE_CUTLASS_GROUPED_GEMM`, off by default @ v2.15 l.1060):
///   `local - 1` launches more than one kernel, in the forward GEMM and in each backward one;
/// - under FP8 the input (forward) and the output gradient (backward) are quantised per expert
///   (`tex.split_quantize`, l.127 and l.316-323 @ v2.9): the fused multi-tensor cast exists for
///   delayed scaling only (csrc/extensions/cast.cpp l.116-148), so current scaling runs
///   [`CS_QUANTIZE_KERNELS`] kernels per expert over `Device::cs_quantize_bytes` per element.
///
/// Each launch costs the workload's per-kernel `LAUNCH_NS`, as every other kernel here.
pub(super) fn te_grouped_linear_overhead(d: &Device, local: u64, copies: u64, n: u64, k: u64, fp8: bool) -> (f64, f64) {
    let extra_gemms = local.saturating_sub(1) as f64 * LAUNCH_NS;
    let (mut forward, mut backward) = (extra_gemms, 2.0 * extra_gemms);
    if fp8 {
        let quantize = |elems: u64| {
            d.stream(d.cs_quantize_bytes() * elems as f64) - LAUNCH_NS + CS_QUANTIZE_KERNELS * local as f64 * LAUNCH_NS
        };
        forward += quantize(copies * k);
        backward += quantize(copies * n);
    }
    (forward, backward)
}

/// Kernels [`te_grouped_linear_overhead`] times beyond the first GEMM of each pass, (forward,
/// backward): the other experts' GEMMs and, under FP8 current scaling, the quantisation kernels.
fn te_grouped_linear_kernels(local: u64, fp8: bool) -> (u32, u32) {
    let extra = local.saturating_sub(1) as u32;
    let quantize = if fp8 { CS_QUANTIZE_KERNELS as u32 * local as u32 } else { 0 };
    (extra + quantize, 2 * extra + quantize)
}

/// Costs one MoE layer's MLP on `d` for options `o` (its TP degree and sequence parallelism give
/// the tokens each GPU routes) under `x` (EP degree and routing).
pub(super) fn moe_blocks(
    d: &Device,
    cfg: &TransformerConfig,
    m: &MoeConfig,
    o: &CostOptions,
    x: &MoeOptions,
) -> Result<MoeCost> {
    m.check(&cfg.name, cfg.layers)?;
    x.routing.check()?;
    let tp = o.tp.max(1) as u64;
    let ep = x.ep.max(1);
    if m.experts % ep != 0 {
        return Err(Error::invalid(
            "--parallel ep",
            format!(
                "ep={ep} does not divide the {} experts of {}; use a divisor of {}",
                m.experts, cfg.name, m.experts
            ),
        ));
    }
    let etp = x.etp.max(1) as u64;
    if etp > 1 && etp != tp {
        return Err(Error::invalid(
            "--parallel etp",
            format!("etp={etp}: only etp=1 or etp=tp (={tp}, Megatron-Core's default) is modelled"),
        ));
    }
    if m.expert_ffn % etp != 0 {
        return Err(Error::invalid(
            "--parallel etp",
            format!("etp={etp} does not divide the experts' MLP width {} of {}", m.expert_ffn, cfg.name),
        ));
    }
    if etp > 1 && x.routing.dispatcher != Dispatcher::AllToAll {
        // Megatron-Core's flex dispatcher exchanges over the TP x EP group instead (not modelled).
        return Err(Error::invalid("--parallel etp", "etp > 1 is modelled with moe-dispatcher=alltoall only"));
    }
    if etp > 1 && o.recompute == super::llm::Recompute::Full {
        return Err(Error::invalid(
            "--parallel etp",
            "etp > 1 with full recomputation is not modelled (the recomputed forward would repeat the ETP \
             all-gather and reduce-scatter)",
        ));
    }
    if tp > 1 && !o.sequence_parallel {
        return Err(Error::invalid(
            "--parallel",
            "an MoE model with tp > 1 needs sp=on (Megatron-LM requires sequence parallelism with MoE and TP)",
        ));
    }
    let h = cfg.hidden;
    let e = d.elem;
    let tokens = o.micro_batch as u64 * o.seq_len as u64 / tp; // this GPU's sequence-parallel share
    let local = (m.experts / ep) as u64;
    let load = x.routing.load_factor();
    // Token copies routed from this GPU (the even share it also receives back), and the busiest
    // GPU's: all-to-all and grouped GEMMs wait for it.
    let routed = tokens * m.top_k as u64;
    let busiest = (routed as f64 * load).ceil() as u64;
    // Under ETP every rank of the group computes every copy the group received, on 1/etp of each
    // expert's width.
    let gathered = etp * busiest;
    let per_expert = gathered.div_ceil(local).max(1);
    let gates = if cfg.gated_mlp { 2 } else { 1 };
    let op = |name, forward_ns: f64, backward_ns: f64, forward_flops: f64| OpCost {
        name,
        forward_ns,
        backward_ns,
        forward_flops,
        backward_flops: 2.0 * forward_flops,
        kernels: (1, 1),
    };
    // A weight GEMM on `tokens` rows, `batch` at once (a grouped GEMM of equal groups: the routed
    // experts', `Device::grouped_gemm`), with its input- and weight-gradient GEMMs; model FLOPs
    // for `flops_tokens` rows.
    let gemms = |batch: u64, rows: u64, n: u64, k: u64, experts: bool| {
        let g = |m, n, k| {
            if experts {
                d.grouped_gemm(batch, m, n, k, d.matmul).0
            } else {
                d.gemm(batch, m, n, k, d.matmul).0
            }
        };
        (g(rows, n, k), g(rows, k, n) + g(k, n, rows))
    };
    let weight_op = |name, batch: u64, rows: u64, n: u64, k: u64, flops_rows: u64, experts: bool| {
        let (f, b) = gemms(batch, rows, n, k, experts);
        op(name, f, b, 2.0 * (flops_rows * n) as f64 * k as f64).with_kernels(1, 2)
    };
    let linear = |name, batch: u64, rows: u64, n: u64, k: u64, flops_rows: u64| {
        weight_op(name, batch, rows, n, k, flops_rows, false)
    };
    let x_bytes = (tokens * h) as f64 * e;
    let copies_bytes = (busiest * h) as f64 * e;
    let gathered_bytes = (gathered * h) as f64 * e;

    let dispatcher = x.routing.dispatcher;
    let padded = x.routing.capacity_factor.is_some() && x.routing.pad_to_capacity;
    // `n` kernels moving `bytes` in all.
    let kernels = |n: u32, bytes: f64| if n == 0 { 0.0 } else { d.stream(bytes) + (n - 1) as f64 * LAUNCH_NS };
    // Router: norm, logits, FP32 softmax and top-k, the load-balancing loss, the dispatcher's
    // metadata, permutation of the token copies (fused into HybridEP's dispatch).
    let norm = op("norm", d.stream(2.0 * x_bytes), d.stream(3.0 * x_bytes), 0.0);
    let scores = (tokens * m.experts as u64) as f64;
    let logits = scores * 4.0;
    let (aux_f, aux_b) = ROUTER_AUX_KERNELS;
    let mut router_ops = vec![
        norm,
        linear("router", 1, tokens, m.experts as u64, h, tokens),
        op("topk", d.stream(2.0 * logits), d.stream(2.0 * logits), 0.0),
        op(
            "router-aux-loss",
            kernels(aux_f, ROUTER_AUX_BYTES.0 * scores),
            kernels(aux_b, ROUTER_AUX_BYTES.1 * scores),
            0.0,
        )
        .with_kernels(aux_f, aux_b),
    ];
    let (dropless_one, dropless_ep, pad_full) = DISPATCH_METADATA_KERNELS;
    let mut metadata = if padded { pad_full } else { dropless_one + if ep > 1 { dropless_ep } else { 0 } };
    let (mut metadata_b, mut metadata_bytes) = (0, 0.0);
    if x.routing.capacity_factor.is_some() {
        metadata += TOKEN_DROP_KERNELS.0;
        metadata_b += TOKEN_DROP_KERNELS.1;
        metadata_bytes = 3.0 * logits; // the probabilities read by topk and by the mask, masked
    }
    if dispatcher != Dispatcher::HybridEp {
        metadata += PERMUTE_MAP_KERNELS;
    }
    router_ops.push(
        op("dispatch-metadata", kernels(metadata, metadata_bytes), kernels(metadata_b, logits), 0.0)
            .with_kernels(metadata, metadata_b),
    );
    if dispatcher != Dispatcher::HybridEp {
        router_ops.push(op("permute", d.stream(x_bytes + copies_bytes), d.stream(x_bytes + copies_bytes), 0.0));
    }
    // Experts: grouped GEMMs over the local experts at the busiest GPU's load; shared experts on
    // every token of this GPU (Megatron splits them over the TP group; with sequence parallelism
    // each rank's share of the work is the same).
    let act = |elems: f64| {
        if cfg.gated_mlp {
            (d.stream(3.0 * elems * e), d.stream(5.0 * elems * e))
        } else {
            (d.stream(2.0 * elems * e), d.stream(3.0 * elems * e))
        }
    };
    let fe = m.expert_ffn / etp;
    let (af, ab) = act((gathered * fe) as f64);
    let fp8 = o.precision == super::Precision::Fp8;
    let grouped = |name, n: u64, k: u64| {
        let mut g = weight_op(name, local, per_expert, n, k, etp * routed, true);
        let (f, b) = te_grouped_linear_overhead(d, local, gathered, n, k, fp8);
        g.forward_ns += f;
        g.backward_ns += b;
        let (kf, kb) = te_grouped_linear_kernels(local, fp8);
        g.with_kernels(1 + kf, 2 + kb)
    };
    // A pass that reads and writes every routed copy on this GPU.
    let copy_pass = |name| op(name, d.stream(2.0 * gathered_bytes), d.stream(2.0 * gathered_bytes), 0.0);
    // The all-to-all dispatcher sorts the received copies by local expert and back ("Permutation
    // 2", `sort_chunks_by_idxs`, or a transpose when padded to capacity: `dispatch_postprocess`
    // and `combine_preprocess`, token_dispatcher.py @ core_v0.15.0 l.635-745); the flex
    // dispatchers receive them by GPU and permute them once (the `permute` op).
    let sorts = dispatcher == Dispatcher::AllToAll && local > 1;
    // Under FP8, `TEGroupedMLP` pads each expert's rows to the FP8 alignment and unpads its
    // output (`fp8_padding`/`fp8_unpadding`, experts.py @ core_v0.15.0 l.859-958; Transformer
    // Engine's `Fp8Padding` copies unless every count is aligned already): dropless counts are
    // not (the Megatron-Bridge Qwen3 recipes leave `moe_router_padding_for_fp8` off), capacity
    // ones are when the capacity is; HybridEP's dispatch pads them itself.
    let pads = fp8 && dispatcher != Dispatcher::HybridEp && !(padded && per_expert % FP8_ALIGN_ROWS == 0);
    let mut expert_ops = Vec::new();
    if sorts {
        expert_ops.push(copy_pass("sort-by-expert"));
    }
    if pads {
        expert_ops.push(copy_pass("fp8-pad").with_kernels(2, 1)); // the inputs and their probabilities
    }
    expert_ops.extend([
        grouped("expert-fc1", gates * fe, h),
        op("expert-activation", af, ab, 0.0),
        grouped("expert-fc2", h, fe),
    ]);
    if pads {
        expert_ops.push(copy_pass("fp8-unpad"));
    }
    if sorts {
        expert_ops.push(copy_pass("unsort-by-expert"));
    }
    if m.shared_ffn > 0 {
        let fs = m.shared_ffn;
        let (sf, sb) = act((tokens * fs) as f64);
        expert_ops.push(linear("shared-fc1", 1, tokens, gates * fs, h, tokens));
        expert_ops.push(op("shared-activation", sf, sb, 0.0));
        expert_ops.push(linear("shared-fc2", 1, tokens, h, fs, tokens));
    }
    // Combine: un-permute and sum the k weighted copies; residual add (no dropout in MoE models).
    let mut combine_ops = vec![op("residual", d.stream(3.0 * x_bytes), d.stream(3.0 * x_bytes), 0.0)];
    if dispatcher != Dispatcher::HybridEp {
        combine_ops.insert(0, op("unpermute", d.stream(copies_bytes + x_bytes), d.stream(copies_bytes + x_bytes), 0.0));
    }

    let recompute = |ops: &[OpCost]| {
        if o.recompute == super::llm::Recompute::Full {
            ops.iter().map(|x| x.forward_ns).sum()
        } else {
            0.0
        }
    };
    // What each GPU sends: its copies; under DeepEP each token once per GPU; under HybridEP its
    // tokens, which the collective sends once per node and fans out.
    let sent = match dispatcher {
        Dispatcher::AllToAll => busiest,
        Dispatcher::Flex => (tokens as f64 * expected_ranks_per_token(m.experts, m.top_k, ep) * load).ceil() as u64,
        Dispatcher::HybridEp => (tokens as f64 * load).ceil() as u64,
    };
    let a2a = |forward: Vec<TpCollective>, backward: Vec<TpCollective>| {
        (ep > 1).then(|| TpComm {
            bytes: sent * h * o.precision.bytes(),
            forward,
            backward,
            group: super::CommGroup::Expert,
            ring: None,
        })
    };
    let all = match dispatcher {
        Dispatcher::HybridEp => TpCollective::HybridAllToAll { experts: m.experts, top_k: m.top_k },
        _ => TpCollective::AllToAll,
    };
    // Full recomputation repeats the layer's forward all-to-alls before its backward ones.
    let combine_bwd = if o.recompute == super::llm::Recompute::Full { vec![all, all, all] } else { vec![all] };
    // The ETP group's collectives, on the copies the group gathers (the all-gather's output, the
    // reduce-scatter's input); a block without compute that only runs `tp`.
    let etp_comm = |forward: Vec<TpCollective>, backward: Vec<TpCollective>| TpComm {
        bytes: gathered * h * o.precision.bytes(),
        forward,
        backward,
        group: super::CommGroup::ExpertTensor,
        ring: None,
    };
    let between =
        |name, tp: Option<TpComm>| BlockCost { name, ops: vec![], recompute_ns: 0.0, params: 0, tensors: vec![], tp };
    let norm_scale = cfg.norm_params();
    let expert_w = local * m.expert_matrix_params(cfg) / etp;
    let shared_w = m.shared_matrix_params(cfg) / tp;
    let gate_w = if m.shared_gate { h } else { 0 };
    Ok(MoeCost {
        router: BlockCost {
            name: "moe-router",
            recompute_ns: recompute(&router_ops),
            ops: router_ops,
            params: norm_scale + h * m.experts as u64,
            tensors: vec![h * m.experts as u64, norm_scale],
            tp: a2a(vec![all], vec![]),
        },
        experts: BlockCost {
            name: "experts",
            recompute_ns: recompute(&expert_ops),
            ops: expert_ops,
            params: expert_w + shared_w + gate_w,
            tensors: vec![local * gates * fe * h, local * fe * h, shared_w, gate_w],
            tp: if etp > 1 {
                Some(etp_comm(vec![TpCollective::ReduceScatter], vec![TpCollective::ReduceScatter]))
            } else {
                a2a(vec![all], vec![all])
            },
        },
        combine: BlockCost {
            name: "moe-combine",
            recompute_ns: recompute(&combine_ops),
            ops: combine_ops,
            params: 0,
            tensors: vec![],
            tp: a2a(vec![], combine_bwd),
        },
        etp: (etp > 1).then(|| EtpBlocks {
            dispatch_grad: between("ep-dispatch-grad", a2a(vec![], vec![all])),
            gather: between("etp-gather", Some(etp_comm(vec![TpCollective::AllGather], vec![]))),
            combine_a2a: between("ep-combine", a2a(vec![all], vec![])),
            gather_grad: between("etp-gather-grad", Some(etp_comm(vec![], vec![TpCollective::AllGather]))),
        }),
        dense_layers: m.dense_layers,
        local_experts: local as u32,
        routed_tokens: busiest,
        expert_tensors: vec![local * gates * fe * h, local * fe * h],
        host_sync: !(x.routing.capacity_factor.is_some() && x.routing.pad_to_capacity),
    })
}
