//! The engine runs a left-out DP replica's pipeline transfer as its simulated original's shadow
//! while nothing else is on their links (`sim/mirror.rs`). That shortcut must never change a result:
//! each plan here is simulated with it and with every image as its own flow (the reference path),
//! and every task's start and end, every link's bytes and the flow count must agree bit for bit.

mod common;

use common::assert_same_run;
use common::plan::{plan_setup, small_gpt};
use dagsim::sim::Options;

#[test]
fn shadowed_image_transfers_match_the_reference_path() {
    // Pipelines with images of 1 to 7 left-out replicas; contention from DP all-reduces at the
    // step's end, TP groups across nodes on the network, and
    // two GPUs sharing a NIC (dgx-a100's default routes).
    let plans = [
        ("tp=8,pp=2,dp=2", 1, 8, "dgx-a100"),
        ("tp=8,pp=4,dp=4,vp=2,sp=on", 1, 32, "dgx-a100"),
        ("tp=8,pp=4,dp=4,vp=2,sp=on", 2, 64, "dgx-a100"),
        ("tp=4,pp=2,dp=4,sp=on,zero=1", 1, 16, "dgx-a100"),
        ("tp=4,pp=4,dp=4,zero=1", 1, 64, "dgx-a100"),
        ("tp=8,pp=4,dp=2,schedule=gpipe", 2, 16, "dgx-a100"),
        ("tp=4,pp=4,dp=4,vp=2,tp-across-nodes=on", 1, 32, "v100-cluster"),
        ("tp=2,pp=2,dp=8,zero=1,recompute=selective", 2, 32, "v100-cluster"),
        ("tp=8,pp=2,dp=4,vp=2,sp=on,zero=1", 1, 32, "dgx-h100"),
        ("tp=2,pp=4,dp=4,tp-across-nodes=on", 1, 16, "k80-cluster"),
    ];
    let (mut shadowed, mut turned) = (0, 0);
    for (spec, mb, gbs, topology) in plans {
        let s = plan_setup(small_gpt(), spec, mb, gbs, 1024, topology);
        let fast = s.simulate(true, Options::default()).unwrap();
        let slow =
            s.simulate(true, Options { image_flows: true, unbundled_flows: true, ..Options::default() }).unwrap();
        let (a, b) = (&fast.run, &slow.run);
        assert_eq!(b.shadowed_transfers, 0, "{spec}: the reference path shadows nothing");
        assert_eq!(a.start, b.start, "{topology} {spec}: task starts");
        assert_eq!(a.end, b.end, "{topology} {spec}: task ends");
        assert_eq!(a.link_bytes, b.link_bytes, "{topology} {spec}: bytes per link");
        assert_eq!((a.flows, a.makespan), (b.flows, b.makespan), "{topology} {spec}");
        assert!(a.events <= b.events, "{topology} {spec}: the shortcut adds events");
        shadowed += a.shadowed_transfers;
        turned += a.shadows_to_flows;
        eprintln!(
            "{topology} {spec}: {} shadowed, {} times turned into flows",
            a.shadowed_transfers, a.shadows_to_flows
        );
    }
    // Both paths of the shortcut ran: shadows finishing with their originals, and shadows turned
    // into flows mid-way when other traffic reached their links.
    assert!(shadowed > 1000, "{shadowed} transfers shadowed");
    assert!(turned >= 5, "shadows turned into flows {turned} times");
}

/// Random pipelines of originals with images on copies of two DGX A100 nodes, with other traffic
/// (copies between GPUs and ring all-reduces over GPUs of every node) starting at random instants
/// on their links: the run with shadows must equal the reference bit for bit.
#[test]
fn shadows_beside_random_traffic_match_the_reference() {
    use dagsim::collective::{Algorithm, CollectiveOp};
    use dagsim::dag::{DagBuilder, DagMeta, Phase, Task, Work};
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut rand = |n: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % n
    };
    let (mut shadowed, mut turned, mut cases) = (0, 0, 0);
    for case in 0..160 {
        let copies = 1 + rand(3) as u32;
        let gpus = 16 * (copies + 1);
        let m = dagsim::hw::load_topology("dgx-a100").unwrap().instantiate(gpus).unwrap();
        let dev = |node: u32, g: u64| m.gpus[(node * 8 + g as u32) as usize].device;
        let task =
            |work, phase| Task { work, queue: None, phase, gpu: Some(0), iteration: 0, layer: None, priority: 0 };
        let mut b = DagBuilder::new();
        // Chains of originals (node 0 <-> node 1) and their images (nodes 2c <-> 2c + 1), each
        // after a compute task of random length; a chain's next transfer waits for all of them.
        for _ in 0..1 + rand(4) {
            let mut prev = None;
            for _ in 0..1 + rand(4) {
                let fixed = b.add_task(task(Work::Fixed { ns: rand(3_000_000) }, Phase::Forward));
                if let Some(p) = prev {
                    b.add_edge(p, fixed);
                }
                let (from, to, up) = (rand(8), rand(8), rand(2) as u32);
                let bytes = 1 + rand(64 << 20);
                let join = b.add_task(task(Work::Fixed { ns: 0 }, Phase::Forward));
                let mut images = Vec::new();
                let mut original = 0;
                for c in 0..=copies {
                    let (src, dst) = (dev(2 * c + up, from), dev(2 * c + 1 - up, to));
                    let t = b.add_task(task(Work::Transfer { src, dst, bytes }, Phase::PipelineTransfer));
                    b.add_edge(fixed, t);
                    b.add_edge(t, join);
                    if c == 0 {
                        original = t;
                    } else {
                        images.push((t, c));
                    }
                }
                b.add_images(original, &images);
                prev = Some(join);
            }
        }
        // Other traffic after random delays: copies between any GPUs, ring all-reduces over the
        // same GPU of every node (a DP group's shape).
        for _ in 0..rand(5) {
            let delay = b.add_task(task(Work::Fixed { ns: rand(8_000_000) }, Phase::Forward));
            let bytes = 1 + rand(32 << 20);
            let work = if rand(2) == 0 {
                let (src, dst) =
                    (dev(rand(gpus as u64 / 8) as u32, rand(8)), dev(rand(gpus as u64 / 8) as u32, rand(8)));
                Work::Transfer { src, dst, bytes }
            } else {
                let g = rand(8) as u32;
                let group = b.add_group((0..gpus / 8).map(|n| n * 8 + g).collect());
                Work::Collective { group, op: CollectiveOp::AllReduce, algorithm: Algorithm::Ring, bytes }
            };
            let t = b.add_task(task(work, Phase::Backward));
            b.add_edge(delay, t);
        }
        let dag = b.build(DagMeta { gpus, iterations: 0, iteration_end: vec![] }).unwrap();
        let fast = dagsim::sim::simulate(&dag, &m, Options::default()).unwrap();
        let slow =
            dagsim::sim::simulate(&dag, &m, Options { image_flows: true, unbundled_flows: true, ..Options::default() })
                .unwrap();
        assert_same_run(&fast, &slow, &format!("case {case}"));
        shadowed += fast.shadowed_transfers;
        turned += fast.shadows_to_flows;
        cases += (fast.shadows_to_flows > 0) as u32;
    }
    eprintln!("{shadowed} shadowed, turned into flows {turned} times in {cases} cases");
    assert!(shadowed > 500, "{shadowed} transfers shadowed");
    assert!(cases > 20, "shadows turned into flows in {cases} cases");
}
