//! ZeRO-3/FSDP modules: with `fsdp-wrap=layer` each transformer layer's parameters are gathered
//! in one all-gather per use and its gradients reduce-scattered in one go after its backward, as
//! PyTorch FSDP does for a wrapped module; with the default `block` each block is a module.

mod common;

use common::plan::plan_setup;
use dagsim::collective::nccl::NcclConfig;
use dagsim::collective::CollectiveModel;
use dagsim::dag::{Phase, Work};
use dagsim::parallel::ParallelPlan;
use dagsim::predict_plan::{PlanSetup, SimulatedPlan};
use dagsim::sim::Options;
use dagsim::strategy::Strategy;
use dagsim::workload::transformer::TransformerConfig;

/// A small GPT (4 layers) so every GPU can be simulated.
fn small_gpt() -> TransformerConfig {
    TransformerConfig {
        name: "gpt-small".into(),
        layers: 4,
        hidden: 1024,
        heads: 8,
        kv_heads: 8,
        ffn_hidden: 4096,
        vocab: 8192,
        ..TransformerConfig::named("gpt3-175b").unwrap()
    }
}

fn setup(spec: &str) -> PlanSetup {
    // 2 micro-batches per iteration.
    plan_setup(small_gpt(), spec, 1, 32, 2048, "dgx-a100")
}

/// Bytes of iteration 0's tasks of `phase` (collectives of DP group 0), in task order.
fn collectives(sim: &SimulatedPlan, phase: Phase) -> Vec<u64> {
    sim.dag
        .tasks()
        .iter()
        .filter(|t| t.phase == phase && t.iteration == 0)
        .filter_map(|t| match t.work {
            Work::Collective { bytes, group, .. } if sim.dag.group(group).contains(&0) => Some(bytes),
            _ => None,
        })
        .collect()
}

#[test]
fn fsdp_gathers_and_reduces_each_wrapped_layer_as_one() {
    let block = setup("tp=1,pp=1,dp=16,fsdp=full").simulate(false, Options::default()).unwrap();
    let layer = setup("tp=1,pp=1,dp=16,fsdp=full,fsdp-wrap=layer").simulate(false, Options::default()).unwrap();
    let w = &layer.workload;
    let bytes = |name: &str| w.layers.iter().find(|l| l.name == name).unwrap().grad_bytes;
    let (emb, attn, mlp, head) = (bytes("embedding"), bytes("L0.attn"), bytes("L0.mlp"), bytes("head"));
    let half = |b: u64| b / 2; // BF16 parameters gathered, FP32 gradients reduced
                               // Per micro-batch and pass, in running order: the embedding, each layer whole, the head (a
                               // pass gathers each module once); blocks apart under the default.
    let forward_layer = [vec![half(emb)], vec![half(attn + mlp); 4], vec![half(head)]].concat();
    let backward_layer = [vec![half(head)], vec![half(attn + mlp); 4], vec![half(emb)]].concat();
    let step_layer = [forward_layer, backward_layer].concat();
    assert_eq!(collectives(&layer, Phase::ParamGather), [step_layer.clone(), step_layer].concat());
    let forward_block = [vec![half(emb)], [half(attn), half(mlp)].repeat(4), vec![half(head)]].concat();
    let backward_block = [vec![half(head)], [half(mlp), half(attn)].repeat(4), vec![half(emb)]].concat();
    let step_block = [forward_block, backward_block].concat();
    assert_eq!(collectives(&block, Phase::ParamGather), [step_block.clone(), step_block].concat());
    // One reduce-scatter per module and micro-batch, after its backward (the runtime's 40 M
    // parameter buckets fuse the default's blocks instead).
    let reduce_layer = [vec![head], vec![attn + mlp; 4], vec![emb]].concat();
    assert_eq!(collectives(&layer, Phase::GradientAggregation), [reduce_layer.clone(), reduce_layer].concat());
    let total: u64 = collectives(&block, Phase::GradientAggregation).iter().sum();
    assert_eq!(total, 2 * w.grad_bytes());
    // Whole layers: fewer, larger gathers, the same bytes.
    let sum = |v: Vec<u64>| v.iter().sum::<u64>();
    assert_eq!(sum(collectives(&layer, Phase::ParamGather)), sum(collectives(&block, Phase::ParamGather)));
}

#[test]
fn fsdp_wrapped_layers_reduce_to_the_full_simulation() {
    for spec in ["tp=1,pp=1,dp=16,fsdp=full,fsdp-wrap=layer", "tp=2,pp=1,dp=8,zero=3,fsdp-wrap=layer"] {
        let s = setup(spec);
        let (fast, full) = (s.predict_with(true).unwrap().llm.unwrap(), s.predict_with(false).unwrap().llm.unwrap());
        assert!(fast.gpus_simulated < full.gpus_simulated, "{spec}: nothing reduced");
        assert_eq!(fast.step_time_s, full.step_time_s, "{spec}");
    }
}

#[test]
fn fsdp_wrap_is_named_and_checked() {
    let p = ParallelPlan::parse("dp=8,fsdp=full,fsdp-wrap=layer").unwrap();
    assert!(p.fsdp_wrap_layer && p.name().contains("fsdp-wrap=layer"), "{}", p.name());
    // Ignored (and not named) where parameters are not sharded.
    let p = ParallelPlan::parse("dp=8,zero=1,fsdp-wrap=layer").unwrap();
    assert!(!p.name().contains("fsdp-wrap"), "{}", p.name());
    let e = ParallelPlan::parse("dp=8,fsdp=full,fsdp-wrap=module").unwrap_err().to_string();
    assert!(e.contains("fsdp-wrap=module") && e.contains("layer or block"), "{e}");
}

/// DP group 0's collectives (rank 0 and those 16 / dp apart, whatever the TP width) of `sim`:
/// (start, end, phase) and queue of each, in task order.
fn dp0_collectives(sim: &SimulatedPlan) -> Vec<(u64, u64, Phase, Option<u32>)> {
    let mut out = Vec::new();
    for (id, t) in sim.dag.tasks().iter().enumerate() {
        if let Work::Collective { group, .. } = t.work {
            let members = sim.dag.group(group);
            if members.contains(&0) && members.len() > 2 {
                out.push((sim.run.start[id], sim.run.end[id], t.phase, t.queue));
            }
        }
    }
    out
}

/// A DP group's parameter all-gathers and gradient reduce-scatters share one process group, so one
/// NCCL communicator, which runs its operations one at a time in launch order (NCCL v2.21.5-1
/// src/enqueue.cc l.1285-1303): under the NCCL collective model or an NCCL runtime, with ZeRO-1,
/// ZeRO-3 and FSDP, with or without whole-layer modules, no two collectives of one DP group are
/// ever in flight together. Under the ideal model with no runtime named, the gathers keep a queue
/// of their own.
#[test]
fn a_dp_groups_collectives_run_one_at_a_time_under_nccl() {
    let nccl = CollectiveModel::Nccl(NcclConfig::default());
    for (spec, model, runtime) in [
        ("tp=1,pp=1,dp=16,fsdp=full", nccl, None),
        ("tp=1,pp=1,dp=16,fsdp=full", CollectiveModel::Ideal, Some("io+wfbp+runtime=ddp")),
        ("tp=1,pp=1,dp=16,fsdp=full,fsdp-wrap=layer", CollectiveModel::Ideal, None),
        ("tp=2,pp=1,dp=8,zero=3", nccl, None),
        ("tp=1,pp=1,dp=16,zero=1", nccl, None),
    ] {
        let mut s = setup(spec);
        s.topology.collectives = model;
        if let Some(r) = runtime {
            s.strategy = Strategy::parse(r).unwrap();
        }
        let mut spans = dp0_collectives(&s.simulate(false, Options::default()).unwrap());
        let gathers = spans.iter().filter(|s| s.2 == Phase::ParamGather).count();
        let reduces = spans.iter().filter(|s| s.2 == Phase::GradientAggregation).count();
        assert!(gathers > 0 && reduces > 0, "{spec}: {gathers} gathers, {reduces} reduce-scatters");
        let mut queues: Vec<_> = spans.iter().map(|s| s.3).collect();
        queues.sort();
        queues.dedup();
        assert!(queues.len() == 1 && queues[0].is_some(), "{spec}: DP group 0's collectives on queues {queues:?}");
        spans.sort();
        for w in spans.windows(2) {
            assert!(w[1].0 >= w[0].1, "{spec}: {:?} starts before {:?} ends", w[1], w[0]);
        }
    }
    let spans = dp0_collectives(&setup("tp=1,pp=1,dp=16,fsdp=full").simulate(false, Options::default()).unwrap());
    let queue_of = |p: Phase| spans.iter().find(|s| s.2 == p).unwrap().3;
    assert_ne!(queue_of(Phase::ParamGather), queue_of(Phase::GradientAggregation));
}

/// Whether task `to` is reachable from task `from` along the DAG's edges.
fn reaches(sim: &SimulatedPlan, from: usize, to: usize) -> bool {
    let mut seen = vec![false; sim.dag.len()];
    let mut stack = vec![from as dagsim::dag::TaskId];
    while let Some(t) = stack.pop() {
        if t as usize == to {
            return true;
        }
        for &s in sim.dag.successors(t) {
            if !std::mem::replace(&mut seen[s as usize], true) {
                stack.push(s);
            }
        }
    }
    false
}

/// The next iteration's parameter all-gathers come from its forward, after the optimizer step:
/// PyTorch FSDP's root pre-forward has the unshard stream wait for the compute stream
/// (`_wait_for_computation_stream`), so not even the first two (which no module before them
/// holds back) run inside the previous iteration. Every iteration-1 gather follows an
/// iteration-0 update in the DAG (the first two every member's; a later one its issuing rank's,
/// through the module two before it), and in the run starts after its group's updates end.
#[test]
fn next_iterations_gathers_wait_for_the_optimizer_step() {
    for spec in ["tp=1,pp=1,dp=16,fsdp=full", "tp=1,pp=1,dp=16,fsdp=full,fsdp-wrap=layer", "tp=2,pp=1,dp=8,zero=3"] {
        let sim = setup(spec).simulate(false, Options::default()).unwrap();
        let tasks = sim.dag.tasks();
        let updates: Vec<(usize, u32)> = (0..tasks.len())
            .filter(|&i| tasks[i].phase == Phase::Update && tasks[i].iteration == 0)
            .map(|i| (i, sim.dag.rank_of(tasks[i].gpu.unwrap())))
            .collect();
        let mut checked = 0;
        for (i, t) in tasks.iter().enumerate().filter(|(_, t)| t.phase == Phase::ParamGather && t.iteration == 1) {
            let Work::Collective { group, .. } = t.work else { continue };
            assert!(
                updates.iter().any(|&(u, _)| reaches(&sim, u, i)),
                "{spec}: gather {i} ({:?}) follows no update",
                t.layer
            );
            for &(u, r) in updates.iter().filter(|(_, r)| sim.dag.group(group).contains(r)) {
                assert!(sim.run.start[i] >= sim.run.end[u], "{spec}: gather {i} starts before rank {r}'s update ends");
                checked += 1;
            }
        }
        assert!(checked > 0, "{spec}: no iteration-1 gathers checked");
        // The first two gathers of rank 0's DP group, which no module before them holds back,
        // follow every member's update.
        let first_two = (0..tasks.len()).filter(|&i| {
            tasks[i].phase == Phase::ParamGather
                && tasks[i].iteration == 1
                && matches!(tasks[i].work, Work::Collective { group, .. } if sim.dag.group(group).contains(&0))
        });
        for i in first_two.take(2) {
            let Work::Collective { group, .. } = tasks[i].work else { unreachable!() };
            for &(u, r) in updates.iter().filter(|(_, r)| sim.dag.group(group).contains(r)) {
                assert!(reaches(&sim, u, i), "{spec}: gather {i} does not follow rank {r}'s update");
            }
        }
    }
}

/// PyTorch FSDP syncs on every backward call (Composer skips none between micro-batches): its
/// final callback has the compute stream wait for every reduce-scatter of the pass
/// (`_post_backward_final_callback`), and the next forward's root pre-forward has the gathers
/// wait for the compute stream. So under `mp-optimizer=torch-fsdp` micro-batch 1's first forward
/// compute on GPU 0 and its first gather follow all of micro-batch 0's reduce-scatters of GPU 0's
/// DP group; under a plain `fsdp=full` plan (no such sync named) the last reduce-scatter overlaps
/// the next forward.
#[test]
fn torch_fsdp_waits_for_the_micro_batchs_reduce_scatters() {
    for (spec, synced) in [
        ("tp=1,pp=1,dp=16,fsdp=full,mp-optimizer=torch-fsdp", true),
        ("tp=1,pp=1,dp=16,fsdp=full,fsdp-wrap=layer,mp-optimizer=torch-fsdp", true),
        ("tp=1,pp=1,dp=16,fsdp=full", false),
    ] {
        let sim = setup(spec).simulate(false, Options::default()).unwrap();
        let tasks = sim.dag.tasks();
        let of_group0 = |i: &usize, phase: Phase| {
            tasks[*i].phase == phase
                && tasks[*i].iteration == 0
                && matches!(tasks[*i].work, Work::Collective { group, .. } if sim.dag.group(group).contains(&0))
        };
        let reduces: Vec<usize> = (0..tasks.len()).filter(|i| of_group0(i, Phase::GradientAggregation)).collect();
        // Two micro-batches, as many reduce-scatters each, the first's made first.
        let mb0 = &reduces[..reduces.len() / 2];
        let forwards: Vec<usize> = (0..tasks.len())
            .filter(|&i| tasks[i].phase == Phase::Forward && tasks[i].iteration == 0 && tasks[i].gpu == Some(0))
            .collect();
        let next_forward = forwards[forwards.len() / 2];
        // Each pass gathers every module: micro-batch 1's forward gathers come after two passes'.
        let gathers: Vec<usize> = (0..tasks.len()).filter(|i| of_group0(i, Phase::ParamGather)).collect();
        let next_gather = gathers[gathers.len() / 2];
        for t in [next_forward, next_gather] {
            let waits = mb0.iter().filter(|&&r| reaches(&sim, r, t)).count();
            if synced {
                assert_eq!(waits, mb0.len(), "{spec}: task {t} follows {waits} of {} reduce-scatters", mb0.len());
                assert!(mb0.iter().all(|&r| sim.run.start[t] >= sim.run.end[r]), "{spec}: task {t} starts early");
            } else {
                assert!(waits < mb0.len(), "{spec}: task {t} follows every reduce-scatter unsynced");
            }
        }
    }
}
