//! The plan search's lower bound on a plan's step time (`plan_bound`) is never above the
//! simulated step, and the search that prunes by it ranks the best plans as the exhaustive one.

use dagsim::plan_bound::{step_lower_bound_ns, step_lower_bound_on, GpuPorts, MachineFloors};
use dagsim::plan_search::{search, search_best, Candidate};
use dagsim::predict_plan::{PlanRequest, PlanSetup};
use dagsim::scenario::Scenario;
use dagsim::units::ns_to_s;

/// The base setup `dagsim plan --model MODEL --topology TOPOLOGY --gpus N --global-batch G` builds.
fn base(model: &str, topology: &str, gpus: u32, global_batch: u32) -> PlanSetup {
    let mut s = plan(model, topology, &format!("dp={gpus}"), 1, gpus);
    s.plan.global_batch = global_batch;
    s
}

/// The figures a ranking shows, per plan.
fn ranked(found: &[Candidate], k: usize) -> Vec<(String, f64, u64, f64, f64)> {
    found
        .iter()
        .filter_map(|c| {
            c.report.as_ref().map(|r| (c.plan.clone(), r.step_time_s, c.memory, r.mfu, r.breakdown.dp_comm))
        })
        .take(k)
        .collect()
}

#[test]
fn the_bound_is_below_every_simulated_step_of_the_16_gpu_search_and_pruning_keeps_the_best() {
    // The shipped bench case `llama2-7b-h100-16gpu-plan-search`.
    let b = base("llama2-7b", "dgx-h100", 16, 16);
    let all = search(&b, &|| {}).unwrap();
    let mut simulated = 0;
    let mut ratios = Vec::new();
    for c in &all {
        let Some(r) = &c.report else { continue };
        simulated += 1;
        let bound = c.bound.expect("a plan that fits has a bound");
        assert!(bound <= r.step_time_s, "{}: bound {bound} s above the simulated {} s", c.plan, r.step_time_s);
        assert!(!c.pruned);
        ratios.push(bound / r.step_time_s);
    }
    assert_eq!(simulated, 896, "the plans that fit");
    ratios.sort_by(f64::total_cmp);
    eprintln!(
        "bound / step over {simulated} plans: min {:.3}, median {:.3}, max {:.3}",
        ratios[0],
        ratios[ratios.len() / 2],
        ratios[ratios.len() - 1]
    );
    for k in [1, 10] {
        let best = search_best(&b, Some(k), &|_| {}).unwrap();
        assert_eq!(ranked(&best.candidates, k), ranked(&all, k), "top {k}");
        assert_eq!(best.enumerated, all.len());
        assert_eq!(best.fit, 896);
        assert_eq!(best.simulated + best.pruned, best.fit);
        eprintln!("top {k}: {} simulated, {} pruned", best.simulated, best.pruned);
        // Pruned plans' bounds are above the k-th best step; simulated ones' at most it.
        let kth = ranked(&all, k)[k - 1].1;
        for c in &best.candidates {
            if c.pruned {
                assert!(c.report.is_none() && c.bound.unwrap() > kth, "{}", c.plan);
            } else if c.fits {
                assert!(c.bound.unwrap() <= kth || c.report.is_some(), "{}", c.plan);
            }
        }
    }
}

/// `predict --model MODEL --topology TOPOLOGY --parallel SPEC --micro-batch MB --global-batch G`.
fn plan(model: &str, topology: &str, spec: &str, micro_batch: u32, global_batch: u32) -> PlanSetup {
    let mut scenario = Scenario::default();
    scenario.workload.model = Some(model.into());
    PlanSetup::from_request(PlanRequest {
        scenario: &scenario,
        topology: dagsim::hw::load_topology(topology).unwrap(),
        spec,
        micro_batch: Some(micro_batch),
        global_batch: Some(global_batch),
        seq_len: None,
        layers: None,
        matmul_tflops: None,
        gpus: None,
    })
    .unwrap()
}

#[test]
fn the_bound_is_below_the_step_of_plans_over_several_nodes() {
    // Pipelines across nodes (1F1B, GPipe, interleaved), ZeRO-1 and ZeRO-3 over the network, TP
    // with and without sequence parallelism and overlap, context parallelism, full recomputation.
    let mut tighter = 0;
    for (spec, mb, gbs) in [
        ("tp=8,pp=4,dp=1", 1, 16),
        ("tp=4,pp=4,dp=2,sp=on,zero=1", 2, 32),
        ("tp=2,pp=4,dp=4,vp=2", 1, 32),
        ("tp=2,pp=8,dp=2,schedule=gpipe,recompute=full", 1, 32),
        ("tp=8,pp=1,dp=4,sp=on,tp-overlap=on", 1, 16),
        ("tp=1,pp=1,dp=32,zero=3,recompute=full", 1, 32),
        ("tp=4,pp=2,dp=2,cp=2,sp=on", 1, 8),
    ] {
        let s = plan("llama2-7b", "dgx-h100", spec, mb, gbs);
        let step = s.predict().unwrap().llm.unwrap().step_time_s;
        let machine = s.topology.instantiate(s.plan.gpus()).unwrap();
        let ports = GpuPorts::of(&machine);
        let bound = ns_to_s(step_lower_bound_ns(&s, ports).unwrap() as f64);
        // With the machine: TP (and CP) collectives floored as the engine lowers and routes them,
        // ZeRO-1 parameter gathers and the DP queues.
        let lowered = ns_to_s(step_lower_bound_on(&s, &MachineFloors::new(&machine)).unwrap() as f64);
        eprintln!("{spec}: bound {bound:.4} s, lowered {lowered:.4} s, step {step:.4} s ({:.3})", lowered / step);
        assert!(bound > 0.0 && bound <= step, "{spec}: bound {bound} s above the simulated {step} s");
        assert!(lowered >= bound, "{spec}: the lowered floors only add");
        assert!(lowered <= step, "{spec}: lowered bound {lowered} s above the simulated {step} s");
        tighter += usize::from(lowered > 1.02 * bound);
    }
    // TP groups (tp 2-8, sp on and off) and ZeRO-1 gathers lift it on most of them.
    assert!(tighter >= 5, "the lowered floors bind on {tighter} plans");
}

#[test]
fn the_lowered_bound_is_below_the_step_of_context_parallel_plans_across_nodes() {
    // CP groups that span nodes (tp x cp above a node's 8 GPUs), where the bound floors the CP
    // collectives as the engine lowers and routes them: all-gather (the default) and the p2p
    // ring, with and without pipelining, TP, sequence parallelism, ZeRO-1 and ZeRO-3.
    for (spec, mb, gbs) in [
        ("tp=2,pp=1,dp=2,cp=8", 1, 8),
        ("tp=2,pp=1,dp=2,cp=8,zero=3", 1, 8),
        ("tp=1,pp=2,dp=1,cp=16,zero=1", 1, 8),
        ("tp=4,pp=2,dp=1,cp=4,sp=on", 1, 8),
        ("tp=2,pp=1,dp=2,cp=8,cp-comm=p2p", 1, 8),
        ("tp=1,pp=1,dp=2,cp=16,zero=3,cp-comm=p2p", 1, 8),
        ("tp=2,pp=2,dp=1,cp=8,vp=2,zero=1", 1, 8),
    ] {
        let s = plan("llama2-7b", "dgx-h100", spec, mb, gbs);
        let step = s.predict().unwrap().llm.unwrap().step_time_s;
        let machine = s.topology.instantiate(s.plan.gpus()).unwrap();
        let ports = GpuPorts::of(&machine);
        let own = ns_to_s(step_lower_bound_ns(&s, ports).unwrap() as f64);
        let bound = ns_to_s(step_lower_bound_on(&s, &MachineFloors::new(&machine)).unwrap() as f64);
        eprintln!("{spec}: bound {bound:.4} s (ports only {own:.4} s), step {step:.4} s ({:.3})", bound / step);
        assert!(bound >= own, "{spec}: the lowered floors only add");
        assert!(bound > 0.0 && bound <= step, "{spec}: bound {bound} s above the simulated {step} s");
    }
}

#[test]
fn the_data_parallel_queue_bound_is_below_the_step_of_sharded_plans_across_nodes() {
    // DP groups over 2 to 8 nodes: the reduce-scatters (all-reduces without ZeRO) and, with one
    // stage, the ZeRO-3 parameter gathers floored on their queues, with and without TP, sequence
    // parallelism, CP, pipelines, several micro-batches and full recomputation; short sequences (512 and
    // 1,024 tokens) where the exchange outlasts the compute, the shipped 4,096 where it does not.
    let mut tighter = 0;
    for (spec, mb, gbs, seq) in [
        ("tp=1,pp=1,dp=32,zero=3", 1, 64, 512),
        ("tp=1,pp=1,dp=32,zero=3", 1, 64, 4096),
        ("tp=2,pp=1,dp=16,zero=3", 1, 64, 1024),
        ("tp=2,pp=1,dp=16,sp=on,zero=3", 2, 64, 512),
        ("tp=1,pp=1,dp=32,zero=2", 1, 64, 512),
        ("tp=1,pp=1,dp=64,zero=1", 1, 64, 512),
        ("tp=8,pp=1,dp=4", 1, 16, 512),
        ("tp=1,pp=1,dp=16,cp=2,zero=3", 1, 32, 1024),
        ("tp=4,pp=1,dp=16,zero=3,recompute=full", 2, 64, 512),
        // Pipelined stages: each stage's reduction after its own steps.
        ("tp=1,pp=2,dp=16,zero=1", 1, 64, 512),
        ("tp=2,pp=4,dp=8,vp=2", 1, 64, 512),
        ("tp=1,pp=4,dp=4,cp=4,zero=1", 1, 32, 1024),
    ] {
        let mut s = plan("llama2-7b", "dgx-h100", spec, mb, gbs);
        s.seq_len = seq;
        let step = s.predict().unwrap().llm.unwrap().step_time_s;
        let machine = s.topology.instantiate(s.plan.gpus()).unwrap();
        let ports = GpuPorts::of(&machine);
        let chain = ns_to_s(step_lower_bound_ns(&s, ports).unwrap() as f64);
        let bound = ns_to_s(step_lower_bound_on(&s, &MachineFloors::new(&machine)).unwrap() as f64);
        eprintln!(
            "{spec} mb {mb} seq {seq}: bound {bound:.4} s (chain {chain:.4} s), step {step:.4} s ({:.3})",
            bound / step
        );
        assert!(bound >= chain, "{spec}: the queue floors only add");
        assert!(bound > 0.0 && bound <= step, "{spec}: bound {bound} s above the simulated {step} s");
        tighter += usize::from(bound > 1.2 * chain);
    }
    assert!(tighter >= 4, "the queues bind on {tighter} plans");
}
