//! `dagsim plan`: every parallel plan of a transformer on a GPU count and global batch (tp, pp, dp,
//! cp, vp, micro-batch, sequence parallelism, recomputation, ZeRO 1/2/3, GPipe, and ep for MoE models), those that do not fit in the
//! GPU's memory dropped with their figures, the rest simulated in parallel
//! ([`PlanSetup::predict`]) and ranked by step time. Builds no DAG of its own.

use crate::error::Result;
use crate::parallel::{ParallelPlan, Sharding};
use crate::predict_plan::{default_plan_strategy, gpus_per_node, PlanSetup};
use crate::report::plan::PlanReport;
use crate::workload::llm::Recompute;
use rayon::prelude::*;

/// Micro-batch sizes tried (those dividing a DP rank's share of the global batch).
pub const MICRO_BATCHES: [u32; 4] = [1, 2, 4, 8];

/// One enumerated plan and what became of it.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Candidate {
    /// The plan, e.g. `tp=8,pp=4,dp=8,mb=1,gbs=512,recompute=selective`.
    pub plan: String,
    /// The same plan, for simulating it again.
    #[serde(skip)]
    pub parallel: ParallelPlan,
    /// Bytes per GPU on the stage that needs the most, and the GPU's capacity (named as in the
    /// CSV, docs/glossary.md).
    #[serde(rename = "memory_per_gpu_bytes")]
    pub memory: u64,
    #[serde(rename = "memory_capacity_bytes")]
    pub capacity: u64,
    /// The plan fits in memory (so it was simulated).
    pub fits: bool,
    /// The simulated figures; `None` when the plan does not fit (or cannot be built: `error`).
    pub report: Option<PlanReport>,
    /// Why a plan that fits could not be simulated (`error_message`: `error` is a relative error
    /// everywhere else).
    #[serde(rename = "error_message")]
    pub error: Option<String>,
}

/// The plans of `base`'s model on `base.plan.gpus()` GPUs at `base.plan.global_batch`, in a fixed
/// order (tp, pp, vp, micro-batch, sp, schedule, recompute, sharding, ep): TP inside a node and
/// dividing the heads, KV heads and FFN width; PP dividing the layers (vp 2 when the layers split
/// that finely); micro-batches dividing a DP rank's share; for an MoE model, EP dividing the
/// experts and a stage's TP x DP ranks in whole TP groups (sp on under TP, as Megatron requires);
/// context parallelism (cp) splitting each sequence over cp of a stage's DP x CP ranks where flash
/// attention runs and 2 x cp divides the sequence (Megatron's load-balanced split); each passing
/// [`ParallelPlan::check`].
///
/// Pruned, because they cannot differ from a plan kept or are not what frameworks run:
/// selective recomputation under flash attention (flash attention already recomputes the
/// attention scores: the same cost and memory as none); ZeRO-2 and ZeRO-3/FSDP with pipeline
/// parallelism (DeepSpeed refuses ZeRO-2/3 with its pipeline engine, Megatron's distributed
/// optimizer is ZeRO-1); GPipe only without interleaving (1F1B with the same bubble is kept too);
/// a CP plan whose micro-batch cp divides, when its twin fits ([`context_dominated`]).
pub fn enumerate(base: &PlanSetup, per_node: u32) -> Vec<ParallelPlan> {
    use crate::dag::schedule::Schedule;
    let gpus = base.plan.gpus();
    let gbs = base.plan.global_batch;
    let m = &base.model;
    let recomputes: &[Recompute] = if base.flash() {
        &[Recompute::None, Recompute::Full]
    } else {
        &[Recompute::None, Recompute::Selective, Recompute::Full]
    };
    let mut out = Vec::new();
    for tp in (1..=per_node.min(gpus)).filter(|t| {
        per_node % t == 0 && gpus % t == 0 && m.heads % t == 0 && m.kv_heads % t == 0 && m.ffn_hidden % *t as u64 == 0
    }) {
        for (pp, cp) in (1..=m.layers)
            .filter(|p| m.layers % p == 0 && (gpus / tp) % p == 0)
            .flat_map(|pp| context_degrees(base, gpus / tp / pp).into_iter().map(move |cp| (pp, cp)))
        {
            let dp = gpus / tp / pp / cp;
            if gbs % dp != 0 {
                continue;
            }
            // Expert parallelism of an MoE model: every ep dividing the experts and the stage's
            // TP x DP ranks in whole TP groups (Megatron's rules, `ParallelPlan::check`).
            let eps: Vec<u32> = match &m.moe {
                Some(moe) => (1..=tp * cp * dp)
                    .filter(|&e| moe.experts % e == 0 && (tp * cp * dp) % e == 0 && (e == 1 || e % tp == 0))
                    .collect(),
                None => vec![1],
            };
            let vps: &[u32] = if pp > 1 && m.layers % (2 * pp) == 0 { &[1, 2] } else { &[1] };
            let shardings: &[Sharding] = match (dp > 1, pp > 1) {
                (false, _) => &[Sharding::None],
                (true, true) => &[Sharding::None, Sharding::Zero1],
                (true, false) => &[Sharding::None, Sharding::Zero1, Sharding::Zero2, Sharding::Zero3],
            };
            for &vp in vps {
                let schedules: &[Schedule] = match (pp > 1, vp > 1) {
                    (_, true) => &[Schedule::Interleaved],
                    (true, false) => &[Schedule::OneFOneB, Schedule::Gpipe],
                    (false, false) => &[Schedule::OneFOneB],
                };
                for mb in MICRO_BATCHES.into_iter().filter(|mb| (gbs / dp) % mb == 0) {
                    // Megatron requires sequence parallelism for MoE layers under TP.
                    let sps: &[bool] = match (tp > 1, m.moe.is_some()) {
                        (false, _) => &[false],
                        (true, false) => &[false, true],
                        (true, true) => &[true],
                    };
                    for &sp in sps {
                        for &schedule in schedules {
                            for &recompute in recomputes {
                                for (&sharding, &ep) in shardings.iter().flat_map(|s| eps.iter().map(move |e| (s, e))) {
                                    let plan = ParallelPlan {
                                        tp,
                                        pp,
                                        dp,
                                        vp,
                                        sp,
                                        micro_batch: mb,
                                        global_batch: gbs,
                                        sharding,
                                        recompute,
                                        schedule,
                                        ep,
                                        cp,
                                        ..base.plan.clone()
                                    };
                                    // The plan's own rules (interleaving needs micro-batches in
                                    // multiples of pp).
                                    if plan.check(gpus, m.layers).is_ok() && !context_dominated(base, &plan, per_node) {
                                        out.push(plan);
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
    }
    out
}

/// Context-parallel degrees to try on `ranks` DP x CP ranks (of one stage's TP rank): 1, and every
/// cp > 1 dividing them where Megatron's CP runs (it needs flash attention: Transformer Engine's
/// fused attention, and the model refuses CP without it) and 2 x cp divides the sequence.
fn context_degrees(base: &PlanSetup, ranks: u32) -> Vec<u32> {
    (1..=ranks).filter(|&cp| ranks % cp == 0 && (cp == 1 || (base.flash() && base.seq_len % (2 * cp) == 0))).collect()
}

/// Whether a CP plan is beaten by its twin without CP: the same plan with its micro-batch of mb
/// sequences split cp ways handed to cp times more DP ranks instead (dp x cp ranks, micro-batch
/// mb / cp; possible when cp divides mb). Both run the same micro-batches of the same tokens per
/// GPU; the twin's attention costs no more (a CP rank's queries attend over the whole sequence),
/// it has no key-value exchange, and its gradients are reduced over the same dp x cp ranks
/// (Megatron reduces over DP x CP). So the CP plan is dropped when the twin is valid and fits.
pub fn context_dominated(base: &PlanSetup, plan: &ParallelPlan, per_node: u32) -> bool {
    if plan.cp <= 1 || plan.micro_batch % plan.cp != 0 {
        return false;
    }
    let twin = ParallelPlan { dp: plan.dp * plan.cp, cp: 1, micro_batch: plan.micro_batch / plan.cp, ..plan.clone() };
    twin.check(plan.gpus(), base.model.layers).is_ok()
        && PlanSetup { plan: twin, ..base.clone() }.memory(per_node).fits()
}

/// Enumerates, checks memory, simulates the plans that fit in parallel (`done` is called after
/// each) and returns every candidate, fastest first, then those that do not fit by memory.
pub fn search(base: &PlanSetup, done: &(dyn Fn() + Sync)) -> Result<Vec<Candidate>> {
    let machine = base.topology.instantiate(base.plan.gpus())?;
    let per_node = gpus_per_node(&machine);
    let plans = enumerate(base, per_node);
    let mut out: Vec<Candidate> = plans
        .par_iter()
        .map(|plan| {
            let setup = PlanSetup { strategy: default_plan_strategy(plan), plan: plan.clone(), ..base.clone() };
            let memory = setup.memory(per_node);
            let peak = memory.peak().total;
            let report = if memory.fits() { Some(setup.predict().map(|p| p.llm)) } else { None };
            done();
            let (report, error) = match report {
                None => (None, None),
                Some(Ok(r)) => (r, None),
                Some(Err(e)) => (None, Some(e.to_string())),
            };
            Candidate {
                plan: plan.name(),
                parallel: plan.clone(),
                memory: peak,
                capacity: memory.capacity,
                fits: memory.fits(),
                report,
                error,
            }
        })
        .collect();
    out.sort_by(|a, b| {
        let key = |c: &Candidate| c.report.as_ref().map_or(f64::INFINITY, |r| r.step_time_s);
        key(a).total_cmp(&key(b)).then(a.memory.cmp(&b.memory)).then(a.plan.cmp(&b.plan))
    });
    Ok(out)
}
