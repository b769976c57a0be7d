//! Memory per GPU of a transformer under a parallel plan, stage by stage, at the schedule's peak:
//! weights, gradients and optimizer state (Adam with FP32 master weights, sharded as the plan
//! says), parameters gathered for use under ZeRO-3/FSDP, and activations kept for the backward
//! pass as Korthikanti et al. 2022 (arXiv 2205.05198, Sec. 4) count them, generalised to grouped-
//! query attention, gated MLPs, models without dropout and flash attention. A stage holds the
//! activations of every forward whose backward has not run yet; the schedule module says how many
//! that is at the peak (the first 1F1B stage holds pp micro-batches).

use super::{MpOptimizer, ParallelPlan, Recompute, Sharding};
use crate::dag::schedule::{stage_order, Pass};
use crate::error::{Error, Result};
use crate::workload::transformer::TransformerConfig;
use crate::workload::Precision;
use serde::Serialize;
use std::ops::Range;

/// Bytes per parameter of the model state, Megatron-style mixed precision: 16-bit weights, FP32
/// gradient buffer (`--accumulate-allreduce-grads-in-fp32`), FP32 master weights and two FP32
/// Adam moments: 2 + 4 + 12 = 18 (Megatron-LM `docs/source/distrib_optimizer.md`: "18 bytes").
/// FP32 training: 4 + 4 + 8. ZeRO-3/FSDP keeps FP32 sharded parameters and gradients and the
/// moments (16) and gathers 16-bit copies for use. Under `grad-reduce=bf16` the gradient buffer
/// is 16-bit: Megatron-Core allocates it in `torch.float if grad_reduce_in_fp32 else param.dtype`
/// (`megatron/core/distributed/distributed_data_parallel.py`), Apex DistributedFusedAdam in its
/// `grad_sync_dtype`.
///
/// DeepSpeed (`mp-optimizer=`), at the versions BigScience ran (microsoft/DeepSpeed):
/// - `ds-zero`, ZeRO stage 1/2 (`runtime/zero/stage_1_and_2.py` @ v0.5.10): 16-bit flat weights
///   (2), the gradients left in each parameter's 16-bit `.grad` until `reduce_gradients` (2,
///   unsharded under stage 1), the FP32 master partition (`single_partition_of_fp32_groups`,
///   `.clone().float()`, l.337-339) and Adam's two FP32 moments: 2 + 2 + 12 / dp, as `grad-reduce=
///   bf16` counts. The FP32 gradient partition (`single_grad_partition`, l.1686-1697, 4 / dp) and
///   the reduce bucket (`torch.empty(reduce_bucket_size)`, l.589) exist only after the last
///   backward, when the activations and the other ranks' gradients are freed: not at the peak.
/// - `ds-bf16`, `BF16_Optimizer` (`runtime/bf16_optimizer.py` @ 56c5223, PR #1801, the merged form
///   of the branch BigScience used from 02-28): 16-bit flat weights (2), an unsharded FP32
///   gradient buffer `fp32_groups_gradients_flat = torch.zeros_like(bf16_groups_flat,
///   dtype=torch.float32)` (4, l.164-166), the 16-bit `.grad` kept beside it because the
///   pipeline engine calls `update_hp_grads(clear_lp_grads=False)` and frees them only before the
///   next backward (`runtime/pipe/engine.py` l.748, l.760) (2), the FP32 master partition
///   (`fp32_groups_flat_partition`, l.157-158) and the moments: 2 + 6 + 12 / dp. BigScience: "It
///   doesn't shard the static fp32 buffer it reuses, which consumes `4 bytes * params` of
///   additional memory" (tr11-176B-ml README l.461).
#[derive(Debug, Clone, Copy, PartialEq)]
struct StateBytes {
    weights: f64,
    grads: f64,
    optimizer: f64,
}

fn state_bytes(precision: Precision, plan: &ParallelPlan) -> StateBytes {
    let grads = match plan.mp_optimizer {
        MpOptimizer::DsBf16 => 2.0 + 4.0,
        MpOptimizer::Megatron | MpOptimizer::DsZero | MpOptimizer::TorchFsdp => plan.grad_bytes as f64,
    };
    match (precision, plan.sharding.shards_params()) {
        (Precision::Fp32, _) => StateBytes { weights: 4.0, grads: 4.0, optimizer: 8.0 },
        (_, false) => StateBytes { weights: 2.0, grads, optimizer: 12.0 },
        (_, true) => StateBytes { weights: 4.0, grads: 4.0, optimizer: 8.0 },
    }
}

/// Memory of one pipeline stage's GPUs.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StageMemory {
    pub stage: u32,
    /// Parameters this GPU is responsible for (its TP slice of the stage, before ZeRO sharding).
    pub params: u64,
    pub weights: u64,
    pub gradients: u64,
    pub optimizer: u64,
    /// 16-bit parameters gathered for the layers in use (ZeRO-3/FSDP: the current and the
    /// prefetched layer).
    pub gathered: u64,
    pub activations: u64,
    pub total: u64,
    /// Chunk-micro-batches whose activations are held at the peak.
    pub in_flight: u32,
    /// The transformer layers' share of weights + gradients + optimizer state, and of the
    /// activations (what Korthikanti et al.'s figures count: no embedding or output layer).
    pub layer_state: u64,
    pub layer_activations: u64,
}

/// Memory of every stage; the plan fits when the largest fits.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PlanMemory {
    pub stages: Vec<StageMemory>,
    /// The GPU's memory, bytes.
    pub capacity: u64,
}

impl PlanMemory {
    /// The stage needing the most memory.
    pub fn peak(&self) -> &StageMemory {
        self.stages.iter().max_by_key(|s| (s.total, std::cmp::Reverse(s.stage))).expect("a plan has a stage")
    }

    pub fn fits(&self) -> bool {
        self.peak().total <= self.capacity
    }

    /// An error with the figures when the plan does not fit.
    pub fn check_fits(&self, plan: &str, gpu: &str) -> Result<()> {
        if self.fits() {
            return Ok(());
        }
        let s = self.peak();
        let gib = |b: u64| b as f64 / (1u64 << 30) as f64;
        Err(Error::invalid(
            "--parallel",
            format!(
                "plan {plan} needs {:.1} GiB per GPU on pipeline stage {} (weights {:.1}, gradients {:.1}, optimizer {:.1}, \
                 gathered parameters {:.1}, activations {:.1} for {} micro-batch chunks) but one {gpu} has {:.1} GiB; \
                 try recompute=selective or full, sp=on, a larger tp or pp, zero=1, or a smaller --micro-batch",
                gib(s.total),
                s.stage,
                gib(s.weights),
                gib(s.gradients),
                gib(s.optimizer),
                gib(s.gathered),
                gib(s.activations),
                s.in_flight,
                gib(self.capacity)
            ),
        ))
    }
}

/// What the memory of a plan depends on.
#[derive(Debug, Clone, Copy)]
pub struct MemoryInput<'a> {
    pub model: &'a TransformerConfig,
    pub plan: &'a ParallelPlan,
    pub precision: Precision,
    pub seq_len: u32,
    /// Flash attention in use (no s x s tensors kept).
    pub flash: bool,
    /// GPUs per node (FSDP hybrid shards inside a node).
    pub gpus_per_node: u32,
    /// The GPU's memory, bytes.
    pub capacity: u64,
}

/// Activation bytes one transformer layer keeps for one micro-batch on one TP rank.
pub fn layer_activation_bytes(
    m: &TransformerConfig,
    plan: &ParallelPlan,
    precision: Precision,
    seq: u32,
    flash: bool,
) -> f64 {
    let e = precision.bytes() as f64;
    let t = plan.tp as f64;
    let tokens = plan.micro_batch as f64 * seq as f64;
    let sbh = tokens * m.hidden as f64;
    // Tensors in the norm/dropout regions are split over the TP group only with SP.
    let rep = if plan.sp { 1.0 / t } else { 1.0 };
    let mask = if m.dropout { 1.0 } else { 0.0 }; // one byte per element
    if plan.recompute == Recompute::Full {
        return e * sbh * rep; // only the layer's input
    }
    let qkv_width = (m.q_width() + m.kv_width()) as f64;
    let q_width = m.q_width() as f64;
    let gates = if m.gated_mlp { 2.0 } else { 1.0 };
    let f = m.ffn_hidden as f64;
    // Replicated unless SP: both norms' inputs, the QKV and fc1 inputs (norm outputs), two masks.
    let replicated = sbh * (4.0 * e + 2.0 * mask) * rep;
    // Split over TP: Q, K, V; the projection input; the activation's input(s); fc2's input.
    let split = tokens * (qkv_width * e + q_width * e + gates * f * e + f * e) / t;
    // The s x s tensors: softmax output, dropout mask and output (Korthikanti's 5 a s^2 b), or
    // with flash attention only the softmax statistics (one FP32 value per row and head).
    let heads = m.heads as f64;
    let s = seq as f64;
    let scores = plan.micro_batch as f64 * heads * s * s / t;
    let quadratic = if flash {
        plan.micro_batch as f64 * heads * s * 4.0 / t
    } else if plan.recompute == Recompute::Selective {
        0.0
    } else if plan.softmax.fused_for(plan.micro_batch as u64, m.heads as u64 / plan.tp as u64, seq as u64, e) {
        scores * (e + if m.dropout { e + 1.0 } else { 0.0 })
    } else {
        // Megatron's PyTorch softmax (`softmax=unfused`) saves its FP32 output for the backward;
        // the 16-bit copy it casts back to is what dropout (mask) and the context GEMM keep.
        scores * (4.0 + e + if m.dropout { 1.0 } else { 0.0 })
    };
    replicated + split + quadratic
}

/// Activation bytes one MoE transformer layer keeps for one micro-batch on one GPU: the dense
/// layer's minus its MLP matrices' inputs and outputs, plus the router's FP32 logits and
/// probabilities, the permuted token copies (fc1's input and the combine's input), the experts'
/// activation inputs and fc2 inputs at the busiest GPU's load, and the shared experts' (same
/// tensors as the dense MLP at their width). Tokens arrive sequence-parallel over the TP group.
pub fn moe_activation_bytes(
    m: &TransformerConfig,
    plan: &ParallelPlan,
    precision: Precision,
    seq: u32,
    flash: bool,
) -> f64 {
    let dense = layer_activation_bytes(m, plan, precision, seq, flash);
    let Some(x) = &m.moe else { return dense };
    if plan.recompute == Recompute::Full {
        return dense; // only the layer's input
    }
    let e = precision.bytes() as f64;
    let t = plan.tp as f64;
    let tokens = plan.micro_batch as f64 * seq as f64;
    let gates = if m.gated_mlp { 2.0 } else { 1.0 };
    let f = m.ffn_hidden as f64;
    let mlp = tokens * (gates * f * e + f * e) / t;
    let mine = tokens / t;
    let copies = (mine * x.top_k as f64 * plan.moe.load_factor()).ceil();
    let (h, fe, fs) = (m.hidden as f64, x.expert_ffn as f64, x.shared_ffn as f64);
    let router = mine * x.experts as f64 * 4.0 * 2.0;
    // Under etp = tp each GPU also keeps the copies its ETP group gathered (fc1's input), and runs
    // etp times the copies through 1/etp of each expert's width: the same fc1 and activation outputs.
    let gathered = (plan.etp.max(1) - 1) as f64 * copies * h * e;
    let experts = copies * (2.0 * h + gates * fe + fe) * e + gathered;
    let shared = mine * (gates * fs + fs) * e;
    dense - mlp + router + experts + shared
}

/// Memory per GPU of every stage.
pub fn plan_memory(input: &MemoryInput) -> PlanMemory {
    let MemoryInput { model: m, plan, precision, seq_len, flash, gpus_per_node, capacity } = *input;
    let p = m.params();
    let tp = plan.tp as u64;
    let per_layer_local = (p.attention_block - m.attention_matrix_params())
        + (p.mlp_block - m.mlp_matrix_params())
        + (m.attention_matrix_params() + m.mlp_matrix_params()) / tp;
    let embedding_local = m.vocab * m.hidden / tp + (p.embedding - m.vocab * m.hidden);
    // Tied output weights: the last stage keeps its own copy when it is not the first.
    let head_local = p.final_norm + if m.tied_embeddings && plan.pp == 1 { 0 } else { m.vocab * m.hidden / tp };
    let shard = match plan.sharding {
        Sharding::FsdpHybrid => {
            let g = if plan.shard_group > 0 { plan.shard_group } else { (gpus_per_node / plan.tp).max(1) };
            g.min(plan.dp) as f64
        }
        Sharding::None => 1.0,
        _ => plan.dp as f64,
    };
    let b = state_bytes(precision, plan);
    let grad_div = if plan.sharding.shards_grads() { shard } else { 1.0 };
    let opt_div = if plan.sharding.shards_optimizer() { shard } else { 1.0 };
    let weight_div = if plan.sharding.shards_params() { shard } else { 1.0 };
    let state = |params: u64| {
        let n = params as f64;
        (n * b.weights / weight_div, n * b.grads / grad_div, n * b.optimizer / opt_div)
    };
    let act_layer = layer_activation_bytes(m, plan, precision, seq_len, flash);
    // MoE layers: their own parameters on this GPU (E / ep experts, each split over etp GPUs) and
    // activations.
    let moe_local = m.moe.as_ref().map_or(0, |x| {
        (p.attention_block - m.attention_matrix_params())
            + m.attention_matrix_params() / tp
            + m.norm_params()
            + x.router_params(m)
            + (x.experts / plan.ep.max(1)) as u64 * x.expert_matrix_params(m) / plan.etp.max(1) as u64
            + x.shared_matrix_params(m) / tp
    });
    let act_moe = moe_activation_bytes(m, plan, precision, seq_len, flash);
    let layer_local = |i: u32| if m.is_moe_layer(i) { moe_local } else { per_layer_local };
    let layer_act = |i: u32| if m.is_moe_layer(i) { act_moe } else { act_layer };
    let range_local = |r: &Range<u32>| r.clone().map(layer_local).sum::<u64>();
    let range_act = |r: &Range<u32>| r.clone().map(layer_act).sum::<f64>();
    let e = precision.bytes() as f64;
    let tokens = plan.micro_batch as f64 * seq_len as f64;
    let rep = if plan.sp { 1.0 / plan.tp as f64 } else { 1.0 };
    // The output layer keeps its input and the FP32 softmax over its vocabulary slice; the
    // embedding keeps its dropout mask.
    let head_act = tokens * (m.hidden as f64 * e * rep + (m.vocab.div_ceil(tp)) as f64 * 4.0);
    let emb_act = if m.dropout { tokens * m.hidden as f64 * rep } else { 0.0 };
    let micro_batches = plan.micro_batches();

    let stages = (0..plan.pp)
        .map(|stage| {
            let chunks = plan.stage_layers(m.layers, stage);
            let layers_local: u64 = chunks.iter().map(range_local).sum();
            let first = stage == 0;
            let last = stage == plan.pp - 1;
            let params = layers_local + if first { embedding_local } else { 0 } + if last { head_local } else { 0 };
            let (w, g, o) = state(params);
            let (lw, lg, lo) = state(layers_local);
            // Activations at the peak: walk the schedule, weighting each chunk-micro-batch in
            // flight by what its chunk keeps.
            let per_chunk: Vec<f64> = chunks
                .iter()
                .enumerate()
                .map(|(c, r)| {
                    let mut a = range_act(r);
                    if first && c == 0 {
                        a += emb_act;
                    }
                    if last && c as u32 == plan.vp - 1 {
                        a += head_act;
                    }
                    a
                })
                .collect();
            let order = stage_order(plan.schedule, plan.pp, plan.vp, micro_batches, stage);
            let mut held = vec![0u32; plan.vp as usize];
            let (mut peak, mut peak_layers, mut peak_count) = (0.0f64, 0.0f64, 0u32);
            for step in &order {
                let c = step.chunk as usize;
                if step.pass == Pass::Forward {
                    held[c] += 1;
                    let total: f64 = held.iter().zip(&per_chunk).map(|(&n, &a)| n as f64 * a).sum();
                    if total > peak {
                        peak = total;
                        peak_count = held.iter().sum();
                        peak_layers = held.iter().zip(&chunks).map(|(&n, r)| n as f64 * range_act(r)).sum();
                    }
                } else {
                    held[c] -= 1;
                }
            }
            // ZeRO-3/FSDP gathers one layer's 16-bit parameters and prefetches the next.
            let biggest = chunks.iter().flat_map(|r| r.clone()).map(layer_local).max().unwrap_or(0);
            let gathered = if plan.sharding.shards_params() { 2.0 * biggest as f64 * e } else { 0.0 };
            let (w, g, o, a) = (w as u64, g as u64, o as u64, peak as u64);
            StageMemory {
                stage,
                params,
                weights: w,
                gradients: g,
                optimizer: o,
                gathered: gathered as u64,
                activations: a,
                total: w + g + o + gathered as u64 + a,
                in_flight: peak_count,
                layer_state: (lw + lg + lo) as u64,
                layer_activations: peak_layers as u64,
            }
        })
        .collect();
    PlanMemory { stages, capacity }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dag::schedule::Schedule;

    /// The memory input of a BF16 run at sequence 4096 with flash attention on 8-GPU nodes of
    /// 80 GB, the shape most of these tests share.
    fn bf16_4k_on_80gb<'a>(model: &'a TransformerConfig, plan: &'a ParallelPlan) -> MemoryInput<'a> {
        MemoryInput {
            model,
            plan,
            precision: Precision::Bf16,
            seq_len: 4096,
            flash: true,
            gpus_per_node: 8,
            capacity: 80 << 30,
        }
    }

    fn plan(tp: u32, pp: u32, vp: u32, mb: u32, gbs: u32, sp: bool, recompute: Recompute) -> ParallelPlan {
        ParallelPlan {
            tp,
            pp,
            dp: 1,
            vp,
            sp,
            micro_batch: mb,
            global_batch: gbs,
            recompute,
            schedule: if vp > 1 { Schedule::Interleaved } else { Schedule::OneFOneB },
            ..Default::default()
        }
    }

    #[test]
    fn expert_tensor_parallelism_divides_the_expert_weights_and_keeps_the_gathered_copies() {
        // Grok-1, tp 4, ep 2, seq 4096, BF16: 4 local experts of 3 x 6144 x 32768 weights, whole
        // (etp 1) or a quarter each (etp 4); each GPU's 4096 / 4 x 2 = 2048 copies of 6144, and
        // under etp 4 three more TP ranks' copies gathered (2 bytes each).
        let m = TransformerConfig::named("grok1-314b").unwrap();
        let at = |etp| {
            let p = ParallelPlan { dp: 2, ep: 2, etp, ..plan(4, 1, 1, 1, 2, true, Recompute::None) };
            let input = bf16_4k_on_80gb(&m, &p);
            (plan_memory(&input).stages[0].params, moe_activation_bytes(&m, &p, Precision::Bf16, 4096, true))
        };
        let ((whole, act1), (split, act4)) = (at(1), at(4));
        let expert = 3 * 6144 * 32768u64;
        assert_eq!(whole - split, m.layers as u64 * (4 * expert - expert));
        assert_eq!(act4 - act1, 3.0 * 2048.0 * 6144.0 * 2.0);
    }

    #[test]
    fn korthikanti_per_layer_formulas() {
        // GPT-3 175B, t = 8, b = 1, s = 2048 (Korthikanti et al. 2022, Table 2): per layer
        // sbh (10 + 24/t + 5as/(ht)) without SP, sbh (34/t + 5as/(ht)) with SP, 34 sbh/t with SP and
        // selective recomputation, 2 sbh with full recomputation.
        let m = TransformerConfig::named("gpt3-175b").unwrap();
        let (s, b, h, a, t) = (2048.0, 1.0, 12288.0, 96.0, 8.0);
        let sbh = s * b * h;
        let act = |sp, r| layer_activation_bytes(&m, &plan(8, 1, 1, 1, 1, sp, r), Precision::Fp16, 2048, false);
        let close = |x: f64, y: f64| (x / y - 1.0).abs() < 1e-12;
        assert!(close(act(false, Recompute::None), sbh * (10.0 + 24.0 / t + 5.0 * a * s / (h * t))));
        assert!(close(act(true, Recompute::None), sbh * (34.0 / t + 5.0 * a * s / (h * t))));
        assert!(close(act(true, Recompute::Selective), sbh * 34.0 / t));
        assert!(close(act(false, Recompute::Full), 2.0 * sbh));
    }

    #[test]
    fn megatrons_torch_softmax_keeps_its_fp32_output() {
        // GPT-3 175B at tp 8 (12 heads a GPU), no recomputation: the fused kernel keeps 2 + 2 + 1
        // bytes a score (probabilities, dropout output and mask), the PyTorch fallback 4 + 2 + 1.
        let m = TransformerConfig::named("gpt3-175b").unwrap();
        let act = |mb: u32, softmax: super::super::SoftmaxKernel| {
            let p = ParallelPlan { softmax, ..plan(8, 1, 1, mb, mb, false, Recompute::None) };
            layer_activation_bytes(&m, &p, Precision::Fp16, 2048, false)
        };
        let scores = |mb: u32| mb as f64 * 12.0 * 2048.0 * 2048.0;
        use super::super::SoftmaxKernel::{Fused, SwappedCheck, Unfused};
        assert!((act(1, Unfused) - act(1, Fused) - 2.0 * scores(1)).abs() < 1.0);
        // The swapped check at 12 heads a GPU wants 16 attention batches a block: micro-batch 4
        // (48) takes the kernel, 2 (24) the fallback.
        assert_eq!(act(4, SwappedCheck), act(4, Fused));
        assert_eq!(act(2, SwappedCheck), act(2, Unfused));
        // Full recomputation keeps only the layer's input either way.
        let full = |softmax| {
            let p = ParallelPlan { softmax, ..plan(8, 1, 1, 2, 2, false, Recompute::Full) };
            layer_activation_bytes(&m, &p, Precision::Fp16, 2048, false)
        };
        assert_eq!(full(Unfused), full(Fused));
    }

    #[test]
    fn state_is_eighteen_bytes_per_parameter_and_zero_shards_it() {
        let m = TransformerConfig::named("llama2-70b").unwrap();
        let peak = |p: &ParallelPlan| {
            let input = bf16_4k_on_80gb(&m, p);
            plan_memory(&input).peak().clone()
        };
        let mem_with = |sharding, dp, grad_bytes| {
            let p = ParallelPlan {
                tp: 8,
                dp,
                sharding,
                micro_batch: 1,
                global_batch: dp,
                grad_bytes,
                ..Default::default()
            };
            peak(&p)
        };
        let mem = |sharding, dp| mem_with(sharding, dp, crate::workload::llm::GRAD_BYTES);
        let none = mem(Sharding::None, 4);
        assert_eq!(none.weights + none.gradients + none.optimizer, 18 * none.params);
        let z1 = mem(Sharding::Zero1, 4);
        assert_eq!(z1.optimizer, none.optimizer / 4);
        assert_eq!(z1.gradients, none.gradients);
        // grad-reduce=bf16: a 16-bit gradient buffer (Megatron-Core's param.dtype), 16 bytes a parameter.
        let bf16 = mem_with(Sharding::None, 4, 2);
        assert_eq!(bf16.gradients * 2, none.gradients);
        assert_eq!(bf16.weights + bf16.gradients + bf16.optimizer, 16 * bf16.params);
        // DeepSpeed's BF16_Optimizer: 16-bit weights and .grad, an unsharded FP32 gradient
        // buffer, and the master weights and moments sharded as ZeRO-1: 2 + 2 + 4 + 12 / dp.
        let ds = |spec: &str| peak(&ParallelPlan::parse(spec).unwrap());
        let bf16 = ds("tp=8,dp=4,zero=1,mp-optimizer=ds-bf16");
        assert_eq!((bf16.weights, bf16.gradients, bf16.optimizer), (2 * bf16.params, 6 * bf16.params, 3 * bf16.params));
        // DeepSpeed's ZeRO-1 optimizer: the 16-bit .grad only, 2 + 2 + 12 / dp.
        let dz = ds("tp=8,dp=4,zero=1,mp-optimizer=ds-zero");
        assert_eq!((dz.weights, dz.gradients, dz.optimizer), (2 * dz.params, 2 * dz.params, 3 * dz.params));
        let z3 = mem(Sharding::Zero3, 4);
        assert_eq!(z3.weights + z3.gradients + z3.optimizer, 4 * z3.params); // 16 bytes over dp = 4
        assert!(z3.gathered > 0);
    }

    #[test]
    fn within_five_percent_of_korthikanti_figures() {
        // calculon-ai/calculon's transcription of Korthikanti et al. 2022, Figure 1 and Figure 7
        // (../shared/data/calculon-ai_calculon/korthikanti2022_memory.csv): GiB per GPU.
        let rows = [
            // model, tp, pp, vp, mb, gbs, mode, params+optimizer GiB, activations GiB
            ("megatron-22b", 8, 1, 1, 4, 4, "none", 45.5625, 59.25),
            ("megatron-22b", 8, 1, 1, 4, 4, "seqsel", 45.5625, 9.5625),
            ("gpt3-175b", 8, 8, 3, 1, 64, "none", 45.5625, 66.84375),
            ("gpt3-175b", 8, 8, 3, 1, 64, "seqsel", 45.5625, 12.3515625),
            ("megatron-530b", 8, 35, 3, 1, 280, "none", 31.640625, 114.0234375),
            ("megatron-530b", 8, 35, 3, 1, 280, "seqsel", 31.640625, 23.076171875),
            ("megatron-1t", 8, 64, 1, 1, 512, "none", 32.958984375, 131.25),
            ("megatron-1t", 8, 64, 1, 1, 512, "seqsel", 32.958984375, 26.5625),
        ];
        let gib = |b: u64| b as f64 / (1u64 << 30) as f64;
        for (name, tp, pp, vp, mb, gbs, mode, state, act) in rows {
            let m = TransformerConfig::named(name).unwrap();
            let (sp, r) = if mode == "seqsel" { (true, Recompute::Selective) } else { (false, Recompute::None) };
            let p = plan(tp, pp, vp, mb, gbs, sp, r);
            p.check(tp * pp, m.layers).unwrap();
            let input = MemoryInput {
                model: &m,
                plan: &p,
                precision: Precision::Fp16,
                seq_len: 2048,
                flash: false,
                gpus_per_node: 8,
                capacity: 80 << 30,
            };
            let s0 = plan_memory(&input).stages[0].clone();
            let (gs, ga) = (gib(s0.layer_state), gib(s0.layer_activations));
            assert!((gs / state - 1.0).abs() < 0.05, "{name} {mode}: state {gs:.2} vs {state}");
            assert!((ga / act - 1.0).abs() < 0.05, "{name} {mode}: activations {ga:.2} vs {act}");
        }
        // Figure 7: activations relative to no recomputation and no SP, percent.
        let fig7 = [
            ("megatron-22b", 4, [66.84, 49.42, 16.18, 7.64]),
            ("gpt3-175b", 1, [62.04, 56.53, 18.49, 8.71]),
            ("megatron-530b", 1, [58.31, 62.04, 20.27, 9.42]),
            ("megatron-1t", 1, [58.31, 62.04, 20.27, 9.42]),
        ];
        for (name, mb, pct) in fig7 {
            let m = TransformerConfig::named(name).unwrap();
            let act = |sp, r| layer_activation_bytes(&m, &plan(8, 1, 1, mb, mb, sp, r), Precision::Fp16, 2048, false);
            let none = act(false, Recompute::None);
            let modes = [
                (true, Recompute::None),
                (false, Recompute::Selective),
                (true, Recompute::Selective),
                (false, Recompute::Full),
            ];
            for ((sp, r), want) in modes.into_iter().zip(pct) {
                let got = 100.0 * act(sp, r) / none;
                assert!((got / want - 1.0).abs() < 0.05, "{name} sp={sp} {r:?}: {got:.2}% vs {want}%");
            }
        }
    }

    #[test]
    fn a_plan_that_does_not_fit_is_refused_with_its_figures() {
        let m = TransformerConfig::named("llama2-70b").unwrap();
        let p = ParallelPlan { tp: 2, dp: 4, micro_batch: 4, global_batch: 16, ..Default::default() };
        let input = bf16_4k_on_80gb(&m, &p);
        let mem = plan_memory(&input);
        let e = mem.check_fits(&p.name(), "h100-sxm").unwrap_err().to_string();
        assert!(e.contains("GiB per GPU") && e.contains("optimizer") && e.contains("80.0 GiB"), "{e}");
    }
}
