//! `dagsim plan`: every parallel plan of a transformer on a GPU count and global batch (tp, pp, dp,
//! cp, vp, micro-batch, sequence parallelism, recomputation, ZeRO 1/2/3, GPipe, and ep for MoE models), those that do not fit in the
//! GPU's memory dropped with their figures, the rest simulated in parallel
//! ([`PlanSetup::predict`]) and ranked by step time. Builds no DAG of its own.

use crate::error::Result;
use crate::parallel::memory::PlanMemory;
use crate::parallel::{ParallelPlan, Sharding};
use crate::plan_bound::{step_lower_bound_on, MachineFloors};
use crate::predict_plan::{default_plan_strategy, gpus_per_node, PlanSetup};
use crate::report::plan::PlanReport;
use crate::units::{ns_to_s, Nanos};
use crate::workload::llm::Recompute;
use rayon::prelude::*;

/// Micro-batch sizes tried (those dividing a DP rank's share of the global batch).
pub const MICRO_BATCHES: [u32; 4] = [1, 2, 4, 8];

/// Plans `dagsim plan` shows by default, and so the k its search prunes for.
pub const DEFAULT_TOP: usize = 10;

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
    /// The plan fits in memory (so it was simulated, unless pruned).
    pub fits: bool,
    /// A lower bound on the plan's step time ([`crate::plan_bound`]); `None` when it does not fit.
    #[serde(rename = "step_time_lower_bound_s")]
    pub bound: Option<f64>,
    /// Not simulated: its bound is above the k-th best step time ([`search_best`]).
    pub pruned: bool,
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

/// What a search found: every candidate (fastest first, then those pruned by their bound, then
/// those that failed or do not fit) and the counts.
#[derive(Debug, Clone)]
pub struct Search {
    /// Plans enumerated.
    pub enumerated: usize,
    /// Plans that fit in memory.
    pub fit: usize,
    /// Plans simulated (those that fit and were not pruned, failed ones included).
    pub simulated: usize,
    /// Plans that fit but were not simulated: their lower bound is above the k-th best step.
    pub pruned: usize,
    pub candidates: Vec<Candidate>,
}

/// Enumerates, checks memory, simulates every plan that fits in parallel (`done` is called after
/// each) and returns every candidate, fastest first, then those that do not fit by memory.
pub fn search(base: &PlanSetup, done: &(dyn Fn() + Sync)) -> Result<Vec<Candidate>> {
    Ok(search_best(base, None, &|p| {
        if p == Progress::Simulated {
            done()
        }
    })?
    .candidates)
}

/// What [`search_best`] tells its caller as it goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Progress {
    /// This many plans fit in memory: at most that many will be simulated.
    Fit(usize),
    /// One more plan simulated.
    Simulated,
}

/// [`search`], or with `top` = Some(k) branch and bound: the plans that fit are simulated in
/// increasing order of their lower bound ([`crate::plan_bound`], never above the simulated step),
/// several at a time, and no plan is started whose bound exceeds the k-th best step simulated
/// so far. Plans whose bound exceeds the final k-th best step T are reported as pruned, with
/// their bound and no figures (also when a worker happened to simulate one before T was known:
/// so the result does not depend on the thread count or timing). Every plan whose step is at
/// most T has a bound at most T, and every such plan is simulated (the k-th best so far never
/// falls below T), so the best k, with their ties and order, are the exhaustive search's.
pub fn search_best(base: &PlanSetup, top: Option<usize>, progress: &(dyn Fn(Progress) + Sync)) -> Result<Search> {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Mutex;
    let machine = base.topology.instantiate(base.plan.gpus())?;
    let per_node = gpus_per_node(&machine);
    let floors = MachineFloors::new(&machine);
    let plans = enumerate(base, per_node);
    // Memory and, for those that fit, the bound (0 where it cannot be computed: such a plan is
    // simulated, and its error reported).
    let checked: Vec<(PlanSetup, PlanMemory, Option<Nanos>)> = plans
        .par_iter()
        .map(|plan| {
            let setup = PlanSetup { strategy: default_plan_strategy(plan), plan: plan.clone(), ..base.clone() };
            let memory = setup.memory(per_node);
            let bound = memory.fits().then(|| step_lower_bound_on(&setup, &floors).unwrap_or(0));
            (setup, memory, bound)
        })
        .collect();
    // The plans that fit, by bound (then enumeration order).
    let mut order: Vec<usize> = (0..plans.len()).filter(|&i| checked[i].2.is_some()).collect();
    order.sort_by_key(|&i| (checked[i].2, i));
    progress(Progress::Fit(order.len()));
    let bound_s = |i: usize| ns_to_s(checked[i].2.unwrap_or(0) as f64);
    let k = top.map(|k| k.max(1));
    // The k best steps so far, ascending.
    let best: Mutex<Vec<f64>> = Mutex::new(Vec::new());
    let reports: Vec<Mutex<Option<Result<Option<PlanReport>>>>> = (0..plans.len()).map(|_| Mutex::new(None)).collect();
    let next = AtomicUsize::new(0);
    (0..rayon::current_num_threads()).into_par_iter().for_each(|_| loop {
        let at = next.fetch_add(1, Ordering::Relaxed);
        let Some(&i) = order.get(at) else { break };
        if let Some(k) = k {
            let best = best.lock().expect("no worker panics");
            // Every later plan's bound is at least this one's: none of them can enter the best k.
            if best.len() >= k && best[k - 1] < bound_s(i) {
                break;
            }
        }
        let report = checked[i].0.predict().map(|p| p.llm);
        progress(Progress::Simulated);
        if let (Some(k), Ok(Some(r))) = (k, &report) {
            let mut best = best.lock().expect("no worker panics");
            let at = best.partition_point(|&x| x <= r.step_time_s);
            best.insert(at, r.step_time_s);
            best.truncate(k);
        }
        *reports[i].lock().expect("no worker panics") = Some(report);
    });
    // T: the k-th best step of all simulated (infinite with fewer than k: nothing was pruned).
    let best = best.into_inner().expect("no worker panics");
    let threshold = match k {
        Some(k) if best.len() >= k => best[k - 1],
        _ => f64::INFINITY,
    };
    let mut out: Vec<Candidate> = plans
        .iter()
        .zip(checked)
        .zip(reports)
        .map(|((plan, (_, memory, bound)), report)| {
            let report = report.into_inner().expect("no worker panics");
            let pruned = bound.is_some() && ns_to_s(bound.unwrap_or(0) as f64) > threshold;
            let (report, error) = match report {
                _ if pruned => (None, None),
                None => (None, None),
                Some(Ok(r)) => (r, None),
                Some(Err(e)) => (None, Some(e.to_string())),
            };
            Candidate {
                plan: plan.name(),
                parallel: plan.clone(),
                memory: memory.peak().total,
                capacity: memory.capacity,
                fits: memory.fits(),
                bound: bound.map(|b| ns_to_s(b as f64)),
                pruned,
                report,
                error,
            }
        })
        .collect();
    // Simulated by step, then pruned by bound, then failed or too big by memory.
    let key = |c: &Candidate| match (&c.report, c.pruned) {
        (Some(r), _) => (0, r.step_time_s),
        (None, true) => (1, c.bound.unwrap_or(0.0)),
        (None, false) => (2, 0.0),
    };
    out.sort_by(|a, b| {
        let (ka, kb) = (key(a), key(b));
        ka.0.cmp(&kb.0).then(ka.1.total_cmp(&kb.1)).then(a.memory.cmp(&b.memory)).then(a.plan.cmp(&b.plan))
    });
    let fit = out.iter().filter(|c| c.fits).count();
    let pruned = out.iter().filter(|c| c.pruned).count();
    Ok(Search { enumerated: out.len(), fit, simulated: fit - pruned, pruned, candidates: out })
}
