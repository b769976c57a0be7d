//! The engine adds the flows that start moving at one instant with the same bytes and cap, and
//! that share links, to the bandwidth solver as one bundle (`Engine::flush_bundles`, a weighted
//! flow of `sim/fluid.rs`), split back into its members when their rates would part. That must
//! never change a result: every run here is made with bundles and with every flow on its own
//! (`Options::unbundled_flows`, the reference path), and every task's start and end, every link's
//! bytes and the flow count must agree bit for bit.

mod common;

use common::assert_same_run;
use common::fat_tree::{setup, tree};
use common::plan::{plan_setup, small_gpt};
use dagsim::predict_plan::{PlanSetup, ReplicaClasses};
use dagsim::sim::{Options, Run};

const REFERENCE: Options = Options {
    record_flows: false,
    stepwise_collectives: false,
    image_flows: false,
    collective_flows: false,
    unbundled_flows: true,
};

/// Runs `s` both ways and checks them equal; returns the bundled run.
fn same_both_ways(s: &PlanSetup, what: &str) -> Run {
    let fast = s.simulate(true, Options::default()).unwrap();
    let slow = s.simulate(true, REFERENCE).unwrap();
    assert_eq!(slow.run.bundles, 0, "{what}: the reference path bundles nothing");
    assert_same_run(&fast.run, &slow.run, what);
    assert_eq!(fast.run.makespan, slow.run.makespan, "{what}");
    assert!(fast.run.events <= slow.run.events, "{what}: bundles add events");
    eprintln!(
        "{what}: {} bundles of {} flows, {} split; events {} vs {}",
        fast.run.bundles, fast.run.bundled_flows, fast.run.bundle_splits, fast.run.events, slow.run.events
    );
    fast.run
}

#[test]
fn plans_on_fat_trees_are_the_same_with_bundles() {
    // Pipelines whose images cross leaves, spines and the core beside their originals (the
    // frontier cases' shape in small), with timeline classes (one that holds, one split) and with
    // every replica; expert parallelism; ECMP by hash, where flows collide on single switches.
    let cases = [
        ("llama2-7b", 8, "tp=8,pp=4,dp=12,sp=on,zero=1", 24, tree(2, 2, "spread"), ReplicaClasses::Exact),
        ("llama2-7b", 8, "tp=8,pp=4,dp=12,sp=on,zero=1", 24, tree(2, 2, "spread"), ReplicaClasses::Off),
        ("llama2-7b", 8, "tp=8,pp=2,dp=12,sp=on,zero=1", 24, tree(4, 2, "spread"), ReplicaClasses::Exact),
        ("llama2-7b", 8, "tp=8,pp=4,dp=8,sp=on,zero=1", 16, tree(2, 2, "hash"), ReplicaClasses::Off),
        ("mixtral-8x7b", 4, "tp=2,pp=2,dp=16,ep=8,sp=on,zero=1", 32, tree(2, 2, "spread"), ReplicaClasses::Exact),
        ("mixtral-8x7b", 4, "tp=2,pp=2,dp=16,ep=8,sp=on,zero=1", 32, tree(2, 2, "spread"), ReplicaClasses::Off),
    ];
    let (mut bundled, mut splits) = (0, 0);
    for (model, layers, spec, gbs, topology, classes) in cases {
        let s = PlanSetup { replica_classes: classes, ..setup(model, layers, spec, gbs, topology) };
        let run = same_both_ways(&s, &format!("{model} {spec} {classes:?}"));
        bundled += run.bundled_flows;
        splits += run.bundle_splits;
    }
    // Both paths ran: bundles that finished whole and bundles split into their members.
    assert!(bundled > 1000, "{bundled} flows bundled");
    assert!(splits > 10, "{splits} bundles split");
}

#[test]
fn plans_on_single_switch_machines_are_the_same_with_bundles() {
    // The image-transfer plans (DP all-reduces, TP across nodes, GPUs sharing a NIC).
    let plans = [
        ("tp=8,pp=4,dp=4,vp=2,sp=on", 2, 64, "dgx-a100"),
        ("tp=4,pp=4,dp=4,zero=1", 1, 64, "dgx-a100"),
        ("tp=4,pp=4,dp=4,vp=2,tp-across-nodes=on", 1, 32, "v100-cluster"),
        ("tp=2,pp=2,dp=8,zero=1,recompute=selective", 2, 32, "v100-cluster"),
        ("tp=2,pp=4,dp=4,tp-across-nodes=on", 1, 16, "k80-cluster"),
    ];
    for (spec, mb, gbs, topology) in plans {
        let s = plan_setup(small_gpt(), spec, mb, gbs, 1024, topology);
        same_both_ways(&s, &format!("{topology} {spec}"));
        let every = PlanSetup { replica_classes: ReplicaClasses::Off, ..s };
        let fast = every.simulate(false, Options::default()).unwrap();
        let slow = every.simulate(false, REFERENCE).unwrap();
        assert_same_run(&fast.run, &slow.run, &format!("{topology} {spec}, every GPU"));
    }
}

/// Random groups of transfers of one size starting together on a small fat-tree (some sharing
/// links, some not, some capped by their routes), beside copies of other sizes and ring
/// all-reduces starting at random instants: bundled equals the reference bit for bit.
#[test]
fn random_traffic_is_the_same_with_bundles() {
    use dagsim::collective::{Algorithm, CollectiveOp};
    use dagsim::dag::{DagBuilder, DagMeta, Phase, Task, Work};
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let mut rand = |n: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % n
    };
    let (mut bundled, mut splits, mut kept) = (0, 0, 0);
    for case in 0..80 {
        let nodes = 4 + rand(12) as u32;
        let gpus = nodes * 8;
        let ecmp = if rand(3) == 0 { "hash" } else { "spread" };
        let m = tree(2, 2, ecmp).instantiate(gpus).unwrap();
        let dev = |g: u64| m.gpus[g as usize].device;
        let task =
            |work, phase| Task { work, queue: None, phase, gpu: Some(0), iteration: 0, layer: None, priority: 0 };
        let mut b = DagBuilder::new();
        for _ in 0..1 + rand(6) {
            let mut prev = None;
            for _ in 0..1 + rand(4) {
                let fixed = b.add_task(task(Work::Fixed { ns: rand(2_000_000) }, Phase::Forward));
                if let Some(p) = prev {
                    b.add_edge(p, fixed);
                }
                let join = b.add_task(task(Work::Fixed { ns: 0 }, Phase::Forward));
                let bytes = 1 + rand(16 << 20);
                for _ in 0..2 + rand(12) {
                    let (src, dst) = (dev(rand(gpus as u64)), dev(rand(gpus as u64)));
                    let t = b.add_task(task(Work::Transfer { src, dst, bytes }, Phase::PipelineTransfer));
                    b.add_edge(fixed, t);
                    b.add_edge(t, join);
                }
                prev = Some(join);
            }
        }
        for _ in 0..rand(6) {
            let delay = b.add_task(task(Work::Fixed { ns: rand(6_000_000) }, Phase::Forward));
            let bytes = 1 + rand(32 << 20);
            let work = if rand(2) == 0 {
                Work::Transfer { src: dev(rand(gpus as u64)), dst: dev(rand(gpus as u64)), bytes }
            } else {
                let g = rand(8) as u32;
                let group = b.add_group((0..nodes).map(|n| n * 8 + g).collect());
                Work::Collective { group, op: CollectiveOp::AllReduce, algorithm: Algorithm::Ring, bytes }
            };
            let t = b.add_task(task(work, Phase::Backward));
            b.add_edge(delay, t);
        }
        let dag = b.build(DagMeta { gpus, iterations: 0, iteration_end: vec![] }).unwrap();
        let fast = dagsim::sim::simulate(&dag, &m, Options::default()).unwrap();
        let slow = dagsim::sim::simulate(&dag, &m, REFERENCE).unwrap();
        assert_same_run(&fast, &slow, &format!("case {case}"));
        assert_eq!(fast.makespan, slow.makespan, "case {case}");
        bundled += fast.bundled_flows;
        splits += fast.bundle_splits;
        kept += fast.bundles - fast.bundle_splits;
    }
    eprintln!("{bundled} flows bundled, {splits} bundles split, {kept} kept whole");
    assert!(bundled > 500, "{bundled} flows bundled");
    assert!(splits > 20 && kept > 20, "{splits} split, {kept} kept whole");
}
