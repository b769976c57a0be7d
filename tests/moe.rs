//! Mixture-of-experts plans end to end: expert parallelism's all-to-alls are in the DAG (one per
//! EP group, MoE layer, micro-batch and direction), the reduced simulation gives the full one's
//! step time bit for bit, and EP, routing imbalance and the fabric move time and memory as they
//! should.

mod common;

use common::plan::{plan_report, plan_setup};
use dagsim::collective::HYBRID_EP_TRAINING_EFFICIENCY;
use dagsim::dag::{Phase, Work};
use dagsim::parallel::ParallelPlan;
use dagsim::predict_plan::{PlanSetup, SimulatedPlan};
use dagsim::report::plan::PlanReport;
use dagsim::sim::Options;
use dagsim::workload::moe::MoeConfig;
use dagsim::workload::transformer::TransformerConfig;
use std::collections::BTreeMap;

/// A small MoE model (4 layers, hidden 1024, 32 experts of 1024, top 2, a shared expert; the
/// first layer dense) so every GPU can be simulated.
fn small_moe() -> TransformerConfig {
    TransformerConfig {
        name: "moe-small".into(),
        layers: 4,
        hidden: 1024,
        heads: 8,
        kv_heads: 8,
        ffn_hidden: 4096,
        vocab: 8192,
        moe: Some(MoeConfig {
            experts: 32,
            top_k: 2,
            expert_ffn: 1024,
            shared_ffn: 1024,
            shared_gate: false,
            dense_layers: 1,
        }),
        ..TransformerConfig::named("mixtral-8x7b").unwrap()
    }
}

fn setup(model: TransformerConfig, spec: &str, mb: u32, gbs: u32, topology: &str) -> PlanSetup {
    plan_setup(model, spec, mb, gbs, 2048, topology)
}

fn report(s: &PlanSetup, symmetric: bool) -> PlanReport {
    plan_report(s, symmetric)
}

#[test]
fn every_moe_layer_dispatches_and_combines_over_its_ep_group() {
    // 16 GPUs, ep=8: 2 EP groups per stage; 3 MoE layers; 2 micro-batches; 2 iterations;
    // forward: dispatch + combine; backward: combine + dispatch.
    let s = setup(small_moe(), "tp=1,pp=1,dp=16,ep=8", 1, 32, "dgx-a100");
    let sim = s.simulate(false, Options::default()).unwrap();
    let a2a: Vec<_> = sim.dag.tasks().iter().filter(|t| t.phase == Phase::ExpertParallel).collect();
    assert_eq!(a2a.len(), 2 * 3 * 2 * 2 * 4);
    // The workload has the router, experts and combine blocks of each MoE layer.
    let names: Vec<&str> = sim.workload.layers.iter().map(|l| l.name.as_str()).collect();
    assert_eq!(&names[1..7], ["L0.attn", "L0.mlp", "L1.attn", "L1.moe-router", "L1.experts", "L1.moe-combine"]);
    // Without EP there is no all-to-all.
    let s1 = setup(small_moe(), "tp=1,pp=1,dp=16", 1, 32, "dgx-a100");
    let sim1 = s1.simulate(false, Options::default()).unwrap();
    assert!(sim1.dag.tasks().iter().all(|t| t.phase != Phase::ExpertParallel));
}

#[test]
fn reduced_moe_simulation_gives_the_full_step_time() {
    for (spec, gbs) in [
        ("tp=1,pp=1,dp=16,ep=8", 16),
        ("tp=2,pp=1,dp=8,sp=on,ep=4", 16),
        ("tp=2,pp=2,dp=8,sp=on,ep=8,zero=1", 16),
        // Expert-DP groups across blocks of replicas (ranks q, q + 8, q + 16, q + 24).
        ("tp=1,pp=1,dp=32,ep=8,zero=1", 32),
        // EP groups wider than a block of replicas: only TP groups are reduced.
        ("tp=2,pp=1,dp=16,sp=on,ep=16", 16),
    ] {
        let s = setup(small_moe(), spec, 1, gbs, "dgx-a100");
        let (fast, full) = (report(&s, true), report(&s, false));
        assert!(fast.gpus_simulated < full.gpus_simulated, "{spec}: nothing reduced");
        assert_eq!(fast.step_time_s, full.step_time_s, "{spec}");
        assert!((fast.breakdown.total() - fast.step_time_s).abs() < 1e-9 * fast.step_time_s, "{spec}");
    }
}

/// Bytes of iteration 0's collectives of `phase`, by the ranks of their group.
fn bytes_by_group(sim: &SimulatedPlan, phase: Phase) -> BTreeMap<Vec<u32>, u64> {
    let mut by: BTreeMap<Vec<u32>, u64> = BTreeMap::new();
    for t in sim.dag.tasks().iter().filter(|t| t.phase == phase && t.iteration == 0) {
        if let Work::Collective { group, bytes, .. } = t.work {
            *by.entry(sim.dag.group(group).to_vec()).or_default() += bytes;
        }
    }
    by
}

#[test]
fn expert_gradients_are_reduced_over_the_expert_data_parallel_group() {
    // Megatron-Core reduces (and shards) the routed experts' gradients over the ranks holding the
    // same experts, tp x dp / ep of them, ep ranks apart; every other gradient over the DP group.
    // (ep = 16: one rank per expert-DP group, so the experts' gradients are not reduced at all.)
    for (spec, tp, dp, ep) in [
        ("tp=1,pp=1,dp=16,ep=8", 1, 16, 8),
        ("tp=2,pp=1,dp=8,sp=on,ep=4,zero=1", 2, 8, 4),
        ("tp=1,pp=1,dp=16,ep=16,zero=1", 1, 16, 16),
    ] {
        let s = setup(small_moe(), spec, 1, 16, "dgx-a100");
        let sim = s.simulate(false, Options::default()).unwrap();
        let experts: u64 = sim.cost.expert_grad_tensors(4).iter().flatten().sum();
        let dense = sim.workload.grad_bytes() - experts;
        assert!(experts > 0 && dense > 0);
        let grads = bytes_by_group(&sim, Phase::GradientAggregation);
        let dp_groups: Vec<Vec<u32>> = (0..tp).map(|t| (0..dp).map(|d| t + tp * d).collect()).collect();
        let edp = tp * dp / ep;
        let expert_groups: Vec<Vec<u32>> =
            if edp > 1 { (0..ep).map(|q| (0..edp).map(|j| q + ep * j).collect()).collect() } else { vec![] };
        let mut expected: BTreeMap<Vec<u32>, u64> = dp_groups.iter().map(|g| (g.clone(), dense)).collect();
        expected.extend(expert_groups.iter().map(|g| (g.clone(), experts)));
        // Full = reduced: every gradient byte of every rank is reduced once, in its own group.
        assert_eq!(grads, expected, "{spec}");
        // The distributed optimizer gathers each group's parameters (BF16: half the FP32 bytes).
        if spec.contains("zero=1") {
            let gathered = bytes_by_group(&sim, Phase::ParamGather);
            let halves: BTreeMap<Vec<u32>, u64> = expected.iter().map(|(g, &b)| (g.clone(), b / 2)).collect();
            assert_eq!(gathered, halves, "{spec}");
        }
    }
}

#[test]
fn expert_parallelism_trades_memory_for_all_to_all_time() {
    let r = |spec: &str| report(&setup(small_moe(), spec, 1, 32, "dgx-a100"), true);
    let ep1 = r("tp=1,pp=1,dp=32");
    let ep8 = r("tp=1,pp=1,dp=32,ep=8");
    let ep32 = r("tp=1,pp=1,dp=32,ep=32");
    // Fewer experts per GPU: less weight, gradient and optimizer memory.
    assert!(ep8.memory.weights < ep1.memory.weights / 3, "{} {}", ep8.memory.weights, ep1.memory.weights);
    assert!(ep32.memory.weights < ep8.memory.weights);
    // All-to-all time appears with EP, more when the EP group leaves the NVLink domain.
    assert_eq!(ep1.breakdown.tp_comm, 0.0);
    assert!(ep8.breakdown.tp_comm > 0.0);
    assert!(
        ep32.breakdown.tp_comm > 2.0 * ep8.breakdown.tp_comm,
        "{} {}",
        ep32.breakdown.tp_comm,
        ep8.breakdown.tp_comm
    );
    // Routing imbalance slows the step; a capacity factor bounds it.
    let skew = r("tp=1,pp=1,dp=32,ep=8,moe-imbalance=1.5");
    let capped = r("tp=1,pp=1,dp=32,ep=8,moe-imbalance=1.5,moe-capacity=1.1");
    assert!(skew.step_time_s > ep8.step_time_s && capped.step_time_s < skew.step_time_s);
    // Model FLOPs do not change with EP or imbalance: the same tokens meet the same experts.
    let (a, b) = (ep1.model_tflops_per_gpu * ep1.step_time_s, ep8.model_tflops_per_gpu * ep8.step_time_s);
    assert!((a - b).abs() < 1e-12 * a, "{a} {b}");
}

#[test]
fn hybrid_ep_crosses_nodes_once_a_token_and_node() {
    // ep 16 over two DGX A100 nodes: HybridEP sends a token once to the other node and fans it
    // out over NVLink there; the flat flex exchange sends it to each GPU it reaches there.
    let r = |d: &str| {
        let s = setup(small_moe(), &format!("tp=1,pp=1,dp=16,ep=16,moe-dispatcher={d}"), 1, 16, "dgx-a100");
        let (fast, full) = (report(&s, true), report(&s, false));
        assert_eq!(fast.step_time_s, full.step_time_s, "{d}");
        let sim = s.simulate(false, Options::default()).unwrap();
        let ops: Vec<_> = sim
            .dag
            .tasks()
            .iter()
            .filter_map(|t| match t.work {
                Work::Collective { op, .. } if t.phase == Phase::ExpertParallel => Some(op.name()),
                _ => None,
            })
            .collect();
        (full, ops)
    };
    let (flex, flex_ops) = r("flex");
    let (hybrid, hybrid_ops) = r("hybridep");
    assert!(flex_ops.iter().all(|&o| o == "all-to-all") && !flex_ops.is_empty());
    assert!(hybrid_ops.iter().all(|&o| o == "hybrid-all-to-all") && hybrid_ops.len() == flex_ops.len());
    // Compared at the flat exchange's ideal rate: across nodes HybridEP runs at its measured
    // in-training fraction of its schedule, which the flex exchange has no measurement of.
    let hybrid_ideal = hybrid.breakdown.tp_comm * HYBRID_EP_TRAINING_EFFICIENCY;
    assert!(hybrid_ideal < 0.8 * flex.breakdown.tp_comm, "{hybrid_ideal} vs {}", flex.breakdown.tp_comm);
    // Inside one node the two send the same tokens to the same GPUs.
    let one = |d: &str| {
        report(&setup(small_moe(), &format!("tp=1,pp=1,dp=8,ep=8,moe-dispatcher={d}"), 1, 8, "dgx-a100"), true)
    };
    let (f8, h8) = (one("flex"), one("hybridep"));
    assert!((f8.breakdown.tp_comm - h8.breakdown.tp_comm).abs() < 0.02 * f8.breakdown.tp_comm);
}

#[test]
fn bad_moe_plans_name_the_flag_and_what_would_be_valid() {
    let err = |spec: &str| setup(small_moe(), spec, 1, 32, "dgx-a100").predict_with(true).unwrap_err().to_string();
    let e = err("tp=1,pp=1,dp=32,ep=3");
    assert!(e.contains("ep=3") && e.contains("divisor of 32"), "{e}");
    let mut p = ParallelPlan::parse("tp=1,pp=1,dp=32,ep=12").unwrap();
    p.global_batch = 32;
    let e = p.check(32, 4).unwrap_err().to_string();
    assert!(e.contains("ep=12") && e.contains("valid: 1, 2, 4, 8, 16, 32"), "{e}");
    let e = err("tp=2,pp=1,dp=16,ep=2");
    assert!(e.contains("sp=on"), "{e}");
    let e = err("tp=4,pp=1,dp=8,sp=on,ep=2");
    assert!(e.contains("multiple of tp=4"), "{e}");
    let e = err("tp=1,pp=1,dp=32,ep=32,etp=2");
    assert!(e.contains("etp=2"), "{e}");
    let e = err("tp=1,pp=1,dp=16,ep=32");
    assert!(e.contains("ep=32") && e.contains("tp x cp x dp = 16"), "{e}");
    let e = err("dp=32,moe-pad=on");
    assert!(e.contains("moe-capacity"), "{e}");
}

#[test]
fn plan_search_tries_every_valid_ep_of_an_moe_model() {
    use dagsim::plan_search::{enumerate, search};
    // 8 GPUs, 32 experts: ep 1, 2, 4, 8 wherever a stage's TP x DP ranks hold it in whole TP
    // groups; under TP only with sequence parallelism (Megatron's rule for MoE).
    let base = setup(small_moe(), "dp=8", 1, 8, "dgx-a100");
    let plans = enumerate(&base, 8);
    let with = |tp: u32, pp: u32| {
        let mut eps: Vec<u32> = plans.iter().filter(|p| p.tp == tp && p.pp == pp).map(|p| p.ep).collect();
        eps.sort();
        eps.dedup();
        eps
    };
    assert_eq!(with(1, 1), [1, 2, 4, 8]);
    assert_eq!(with(2, 1), [1, 2, 4, 8]);
    assert_eq!(with(2, 2), [1, 2, 4]);
    assert_eq!(with(4, 2), [1, 4]);
    assert!(plans.iter().all(|p| p.tp == 1 || p.sp), "MoE under TP needs sp=on");
    for p in &plans {
        assert!(p.check(8, 4).is_ok(), "{}: {:?}", p.name(), p.check(8, 4));
    }
    // Every plan that fits simulates (none is refused by the MoE cost's own checks).
    for c in search(&base, &|| {}).unwrap() {
        assert!(c.error.is_none(), "{}: {:?}", c.plan, c.error);
    }
}

#[test]
fn expert_tensor_parallelism_runs_its_groups_and_reduces_to_the_full_step() {
    // 16 GPUs, tp 2, dp 8, ep 4, etp 2 (Megatron-Core's expert rank order etp-ep-dp): EP groups
    // of 4 ranks 2 apart ({0, 2, 4, 6}, {1, 3, 5, 7}, ...), ETP groups the TP pairs, expert-DP
    // groups of 16 / (4 x 2) = 2 ranks 8 apart.
    let spec = "tp=2,pp=1,dp=8,sp=on,ep=4,etp=2,zero=1";
    let s = setup(small_moe(), spec, 1, 16, "dgx-a100");
    let sim = s.simulate(false, Options::default()).unwrap();
    let ep_groups: Vec<Vec<u32>> = bytes_by_group(&sim, Phase::ExpertParallel).into_keys().collect();
    assert!(ep_groups.contains(&vec![0, 2, 4, 6]) && ep_groups.contains(&vec![9, 11, 13, 15]), "{ep_groups:?}");
    assert!(ep_groups.contains(&vec![0, 1]) && ep_groups.contains(&vec![14, 15]), "{ep_groups:?}");
    // Per MoE layer and micro-batch: 2 all-to-alls and an all-gather and a reduce-scatter each
    // way, for each of 4 EP groups of a block of 8 ranks, and 8 ETP groups.
    let iteration0 = |want: dagsim::collective::CollectiveOp| {
        sim.dag
            .tasks()
            .iter()
            .filter(|t| t.iteration == 0 && matches!(t.work, Work::Collective { op, .. } if op == want))
            .filter(|t| t.phase == Phase::ExpertParallel)
            .count()
    };
    let (moe_layers, micro_batches) = (3, 2);
    assert_eq!(iteration0(dagsim::collective::CollectiveOp::AllToAll), 4 * 4 * moe_layers * micro_batches);
    assert_eq!(iteration0(dagsim::collective::CollectiveOp::AllGather), 2 * 8 * moe_layers * micro_batches);
    // Reduce-scatters: the ETP ones (the expert-DP exchange is its own phase).
    assert_eq!(iteration0(dagsim::collective::CollectiveOp::ReduceScatter), 2 * 8 * moe_layers * micro_batches);
    let edp: Vec<Vec<u32>> =
        bytes_by_group(&sim, Phase::GradientAggregation).into_keys().filter(|g| g.len() == 2).collect();
    assert!(edp.contains(&vec![0, 8]) && edp.contains(&vec![7, 15]), "{edp:?}");
    // Splitting the experts over the TP pair halves their weights on each GPU.
    let whole = setup(small_moe(), "tp=2,pp=1,dp=8,sp=on,ep=4,zero=1", 1, 16, "dgx-a100");
    let expert_bytes = |s: &PlanSetup| -> u64 {
        let sim = s.simulate(false, Options::default()).unwrap();
        sim.cost.expert_grad_tensors(4).iter().flatten().sum()
    };
    assert_eq!(2 * expert_bytes(&s), expert_bytes(&whole));
    // The reduced simulation gives the full one's step time.
    let (fast, full) = (report(&s, true), report(&s, false));
    assert_eq!(fast.step_time_s, full.step_time_s);
}

#[test]
fn expert_tensor_parallelism_other_than_tp_or_not_dividing_the_ranks_is_refused() {
    for (spec, gpus, want) in [
        ("tp=2,pp=1,dp=8,sp=on,ep=4,etp=4", 16, "etp=4"),
        ("tp=2,pp=1,dp=2,sp=on,ep=4,etp=2", 4, "etp=2 x ep=4 must divide"),
    ] {
        let mut p = ParallelPlan::parse(spec).unwrap();
        p.global_batch = 32;
        let e = p.check(gpus, 4).unwrap_err().to_string();
        assert!(e.contains(want) && e.contains("--parallel etp"), "{spec}: {e}");
    }
    // From the command line: exit 2 with the key named.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_dagsim"))
        .args(["predict", "--model", "mixtral-8x7b", "--gpu", "h100", "--topology", "dgx-h100", "--gpus", "8"])
        .args(["--parallel", "tp=4,dp=2,sp=on,ep=2,etp=2", "--global-batch", "16", "--micro-batch", "1"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stderr).contains("etp=2"), "{}", String::from_utf8_lossy(&out.stderr));
}
