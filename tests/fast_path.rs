//! Collectives on reserved links (the fast path) give bit-identical runs to the step-by-step
//! reference (every collective step by flows, each transfer its own flow), with and without
//! contention from other traffic.

mod common;

use common::assert_same_run;
use dagsim::hw::load_topology;
use dagsim::predict::Setup;
use dagsim::sim::Options;
use dagsim::strategy::Strategy;

fn compare(setup: &Setup, gpus: u32) -> (u64, u64) {
    let fast = setup.simulate(gpus, Options::default()).unwrap();
    let slow = setup
        .simulate(
            gpus,
            Options { stepwise_collectives: true, collective_flows: true, unbundled_flows: true, ..Options::default() },
        )
        .unwrap();
    assert_same_run(&fast.run, &slow.run, &format!("{gpus} GPUs"));
    assert_eq!(slow.run.reserved_collectives, 0);
    (fast.run.reserved_collectives, fast.run.materialized_collectives)
}

fn setup(topology: &str, strategy: &str, sample_bytes: u64) -> Setup {
    let mut workload = dagsim::bench::alexnet_k80();
    workload.sample_bytes = sample_bytes;
    workload.device_sample_bytes = sample_bytes * 3;
    // Shorter compute so gradient traffic and batch loading overlap in time.
    for l in &mut workload.layers {
        l.forward.mean_ns /= 100;
        l.backward.mean_ns /= 100;
    }
    Setup {
        workload,
        topology: load_topology(topology).unwrap(),
        strategy: Strategy::parse(strategy).unwrap(),
        iterations: 4,
    }
}

#[test]
fn reserved_collectives_match_the_stepwise_reference() {
    let mut reserved = 0;
    let mut materialized = 0;
    for topology in ["k80-cluster", "v100-cluster"] {
        for strategy in ["none", "io", "wfbp", "io+wfbp"] {
            for sample_bytes in [0, 200_000] {
                let s = setup(topology, strategy, sample_bytes);
                for gpus in [2, 3, 4, 8, 16] {
                    let (r, m) = compare(&s, gpus);
                    reserved += r;
                    materialized += m;
                }
            }
        }
    }
    assert!(reserved > 0, "no collective ran on reserved links");
    let _ = materialized;
}

/// A ring all-reduce over 4 PCIe GPUs (peer traffic through the host) and a host-to-device copy
/// that starts after a delay, sharing a link with the ring: the copy lands before, inside (at and
/// around step boundaries, during latency phases) and after the collective.
#[test]
fn contention_at_any_instant_is_handled_exactly() {
    use dagsim::collective::{Algorithm, CollectiveOp};
    use dagsim::dag::{DagBuilder, DagMeta, Phase, Task, Work};
    use dagsim::sim::simulate;

    let m = load_topology("k80-cluster").unwrap().instantiate(4).unwrap();
    let task =
        |work| Task { work, queue: None, phase: Phase::Forward, gpu: Some(0), iteration: 0, layer: None, priority: 0 };
    // Ring step: 25 MB over GPU -> host -> GPU at 15 GB/s plus 2 x 5 us latency.
    let step = 10_000 + (25_000_000f64 / 15.0).ceil() as u64;
    let mut delays: Vec<u64> = vec![0, 1, 4_999, 5_000, 9_999, 10_000, 10_001];
    for k in 0..7 {
        for d in [-10_001i64, -1, 0, 1, 3_333, 10_000, 777_777] {
            delays.push((k * step as i64 + d).max(0) as u64);
        }
    }
    let mut materialized = 0;
    for &delay in &delays {
        for (bytes, dst_gpu) in [(3_000_000u64, 1usize), (60_000_000, 2), (0, 3)] {
            let mut b = DagBuilder::new();
            let group = b.add_group(vec![0, 1, 2, 3]);
            let ar =
                Work::Collective { group, op: CollectiveOp::AllReduce, algorithm: Algorithm::Ring, bytes: 100_000_000 };
            b.add_task(task(ar));
            let wait = b.add_task(task(Work::Fixed { ns: delay }));
            let copy = b.add_task(task(Work::Transfer { src: m.gpus[0].host, dst: m.gpus[dst_gpu].device, bytes }));
            b.add_edge(wait, copy);
            let dag = b.build(DagMeta { gpus: 4, iterations: 0, iteration_end: vec![] }).unwrap();
            let fast = simulate(&dag, &m, Options::default()).unwrap();
            let slow = simulate(
                &dag,
                &m,
                Options {
                    stepwise_collectives: true,
                    collective_flows: true,
                    unbundled_flows: true,
                    ..Options::default()
                },
            )
            .unwrap();
            assert_same_run(&fast, &slow, &format!("delay {delay}, {bytes} bytes"));
            assert!(fast.reserved_collectives >= 1);
            materialized += fast.materialized_collectives;
        }
    }
    assert!(materialized > 40, "only {materialized} runs met contention");
}

/// Steps whose transfers share links (hierarchical rings share each node's NIC, trees and
/// butterflies cross switches) are timed as components; results must still match the reference.
#[test]
fn shared_link_steps_match_the_reference() {
    let mut reserved = 0;
    for topology in ["v100-pcie-10gbe", "dgx1-v100", "k80-cluster", "gradientflow-cluster"] {
        for alg in ["ring", "hierarchical", "tree", "halving-doubling", "recursive-doubling", "ps", "auto"] {
            let mut s = setup(topology, &format!("io+wfbp+allreduce={alg}"), 100_000);
            s.iterations = 3;
            for gpus in [4, 8, 12, 16] {
                reserved += compare(&s, gpus).0;
            }
        }
    }
    assert!(reserved > 0);
}

/// A hierarchical all-reduce over 2 nodes x 4 GPUs on 10 GbE (4 transfers share each NIC in the
/// inter-node steps) and a copy landing at many instants, on shared and private links.
#[test]
fn contention_inside_shared_steps_is_handled_exactly() {
    use dagsim::collective::{Algorithm, CollectiveOp};
    use dagsim::dag::{DagBuilder, DagMeta, Phase, Task, Work};
    use dagsim::sim::simulate;

    let m = load_topology("v100-pcie-10gbe").unwrap().instantiate(8).unwrap();
    let task =
        |work| Task { work, queue: None, phase: Phase::Forward, gpu: Some(0), iteration: 0, layer: None, priority: 0 };
    // The all-reduce, and optionally a copy (src, dst, bytes) that starts after `delay`.
    let dag = |copy: Option<(u64, u32, u32, u64)>| {
        let mut b = DagBuilder::new();
        let group = b.add_group((0..8).collect());
        let ar = Work::Collective {
            group,
            op: CollectiveOp::AllReduce,
            algorithm: Algorithm::Hierarchical,
            bytes: 64_000_000,
        };
        b.add_task(task(ar));
        if let Some((delay, src, dst, bytes)) = copy {
            let wait = b.add_task(task(Work::Fixed { ns: delay }));
            let copy = b.add_task(task(Work::Transfer { src, dst, bytes }));
            b.add_edge(wait, copy);
        }
        b.build(DagMeta { gpus: 8, iterations: 0, iteration_end: vec![] }).unwrap()
    };
    let reference = simulate(&dag(None), &m, Options::default()).unwrap().makespan;
    let mut materialized = 0;
    for k in 0..60u64 {
        let delay = reference * k / 50 + k % 7;
        for (src, dst, bytes) in [
            (m.gpus[1].host, m.gpus[5].device, 5_000_000u64), // crosses the network
            (m.gpus[2].device, m.gpus[2].host, 20_000_000),   // a GPU's PCIe uplink
        ] {
            let dag = dag(Some((delay, src, dst, bytes)));
            let fast = simulate(&dag, &m, Options::default()).unwrap();
            let slow = simulate(
                &dag,
                &m,
                Options {
                    stepwise_collectives: true,
                    collective_flows: true,
                    unbundled_flows: true,
                    ..Options::default()
                },
            )
            .unwrap();
            assert_same_run(&fast, &slow, &format!("delay {delay}"));
            assert!(fast.reserved_collectives >= 1, "delay {delay}");
            materialized += fast.materialized_collectives;
        }
    }
    assert!(materialized > 40, "only {materialized} runs met contention");
}

/// A ring all-reduce over 2 nodes x 4 K80s while every GPU reads its batch from the shared NFS
/// (each read limited by the NFS link, so the ring's steps leave the reads' rates alone and run on
/// reserved links next to them), plus a copy between the nodes' hosts that does compete with the
/// ring: reads and copy start and end before, inside and after the collective.
#[test]
fn collectives_next_to_outside_flows_match_the_reference() {
    use dagsim::collective::{Algorithm, CollectiveOp};
    use dagsim::dag::{DagBuilder, DagMeta, Phase, Task, Work};
    use dagsim::sim::simulate;

    let m = load_topology("k80-cluster").unwrap().instantiate(8).unwrap();
    let task =
        |work| Task { work, queue: None, phase: Phase::Forward, gpu: Some(0), iteration: 0, layer: None, priority: 0 };
    // reads: (delay, bytes) per GPU; copy: (delay, bytes) from node 0's host to node 1's.
    let dag = |reads: &[(u64, u64)], copy: Option<(u64, u64)>| {
        let mut b = DagBuilder::new();
        let group = b.add_group((0..8).collect());
        let ar = Work::Collective { group, op: CollectiveOp::AllReduce, algorithm: Algorithm::Ring, bytes: 80_000_000 };
        b.add_task(task(ar));
        for (i, &(delay, bytes)) in reads.iter().enumerate() {
            let wait = b.add_task(task(Work::Fixed { ns: delay }));
            let g = &m.gpus[i];
            let read = b.add_task(task(Work::Transfer { src: g.storage, dst: g.host, bytes }));
            b.add_edge(wait, read);
        }
        if let Some((delay, bytes)) = copy {
            let wait = b.add_task(task(Work::Fixed { ns: delay }));
            let copy = b.add_task(task(Work::Transfer { src: m.gpus[0].host, dst: m.gpus[4].host, bytes }));
            b.add_edge(wait, copy);
        }
        b.build(DagMeta { gpus: 8, iterations: 0, iteration_end: vec![] }).unwrap()
    };
    let reference = simulate(&dag(&[], None), &m, Options::default()).unwrap().makespan;
    // Reads under way from before the collective to after it: it runs on reserved links from its
    // first step to its last, next to them.
    let d = {
        let mut b = DagBuilder::new();
        let group = b.add_group((0..8).collect());
        let wait = b.add_task(task(Work::Fixed { ns: 1_000_000 }));
        let ar = Work::Collective { group, op: CollectiveOp::AllReduce, algorithm: Algorithm::Ring, bytes: 80_000_000 };
        let ar = b.add_task(task(ar));
        b.add_edge(wait, ar);
        for g in &m.gpus {
            b.add_task(task(Work::Transfer { src: g.storage, dst: g.host, bytes: 300_000_000 }));
        }
        b.build(DagMeta { gpus: 8, iterations: 0, iteration_end: vec![] }).unwrap()
    };
    let fast = simulate(&d, &m, Options::default()).unwrap();
    let slow = simulate(
        &d,
        &m,
        Options { stepwise_collectives: true, collective_flows: true, unbundled_flows: true, ..Options::default() },
    )
    .unwrap();
    assert_eq!((fast.start.clone(), fast.end.clone()), (slow.start, slow.end));
    assert!(fast.end[1] < fast.end[2], "the reads outlast the collective");
    assert_eq!((fast.reserved_collectives, fast.materialized_collectives), (1, 0));
    let (mut reserved, mut materialized) = (0, 0);
    for k in 0..40u64 {
        let at = |j: u64| reference * ((k * 7 + j * 3) % 45) / 40 + k % 5;
        // All reads at once (the symmetric case), or staggered; long and short ones.
        let same: Vec<(u64, u64)> = (0..8).map(|_| (at(0), 30_000_000)).collect();
        let staggered: Vec<(u64, u64)> = (0..8).map(|i| (at(i), 2_000_000 + i * 1_000_000)).collect();
        let none = Vec::new();
        for (reads, copy) in
            [(&same, None), (&staggered, None), (&same, Some((at(9), 20_000_000))), (&none, Some((at(2), 5_000_000)))]
        {
            let dag = dag(reads, copy);
            let fast = simulate(&dag, &m, Options::default()).unwrap();
            let slow = simulate(
                &dag,
                &m,
                Options {
                    stepwise_collectives: true,
                    collective_flows: true,
                    unbundled_flows: true,
                    ..Options::default()
                },
            )
            .unwrap();
            assert_same_run(&fast, &slow, &format!("case {k}"));
            reserved += fast.reserved_collectives;
            materialized += fast.materialized_collectives;
        }
    }
    assert!(reserved > 100 && materialized > 20, "{reserved} reserved, {materialized} materialized");
}

/// A collective whose steps slow a copy beside it is partly reserved: the transfers sharing links
/// with the copy run as flows, the rest of each step is reserved. Over 16 K80s (4 nodes) with
/// ring, hierarchical, tree and halving-doubling all-reduces: a long copy between two nodes'
/// hosts (the `bench --case ring-beside-copy` setup), plus copies that land before, inside (at
/// and around step boundaries, during latencies) and after the steps, some on links the reserved
/// part holds (between other nodes, or into a GPU), which turn it back into flows mid-step.
#[test]
fn partly_reserved_collectives_match_the_reference() {
    use dagsim::collective::{Algorithm, CollectiveOp};
    use dagsim::dag::{DagBuilder, DagMeta, Phase, Task, Work};
    use dagsim::sim::simulate;

    let gpus = 16u32;
    let m = load_topology("k80-cluster").unwrap().instantiate(gpus).unwrap();
    let task =
        |work| Task { work, queue: None, phase: Phase::Forward, gpu: Some(0), iteration: 0, layer: None, priority: 0 };
    // copies: (delay, src, dst, bytes), each starting after its delay.
    let dag = |algorithm, copies: &[(u64, u32, u32, u64)]| {
        let mut b = DagBuilder::new();
        let group = b.add_group((0..gpus).collect());
        b.add_task(task(Work::Collective { group, op: CollectiveOp::AllReduce, algorithm, bytes: 40_000_000 }));
        for &(delay, src, dst, bytes) in copies {
            let wait = b.add_task(task(Work::Fixed { ns: delay }));
            let copy = b.add_task(task(Work::Transfer { src, dst, bytes }));
            b.add_edge(wait, copy);
        }
        b.build(DagMeta { gpus, iterations: 0, iteration_end: vec![] }).unwrap()
    };
    let host = |g: usize| m.gpus[g].host;
    let (mut partial, mut materialized, mut runs) = (0, 0, 0);
    for algorithm in [Algorithm::Ring, Algorithm::Hierarchical, Algorithm::Tree, Algorithm::HalvingDoubling] {
        let reference = simulate(&dag(algorithm, &[]), &m, Options::default()).unwrap().makespan;
        for k in 0..24u64 {
            let at = |j: u64| reference * ((k * 5 + j * 7) % 26) / 24 + (k * 3 + j) % 4;
            let long = (0, host(0), host(4), 20_000_000_000);
            let cases: [Vec<(u64, u32, u32, u64)>; 4] = [
                // The long copy from the start, and a short one between nodes 2 and 3.
                vec![long, (at(1), host(8), host(12), 3_000_000)],
                // A copy into a GPU of node 1 (its PCIe links), beside the long copy.
                vec![long, (at(2), host(5), m.gpus[6].device, 8_000_000)],
                // Copies that start and end inside the collective.
                vec![(at(0), host(0), host(4), 2_000_000 + k * 300_000), (at(3), host(12), host(0), 1_000_000)],
                // Many at once, on the contended and on the reserved links.
                vec![long, (at(4), host(4), host(8), 5_000_000), (at(4), host(9), m.gpus[9].device, 4_000_000)],
            ];
            for copies in &cases {
                let dag = dag(algorithm, copies);
                let fast = simulate(&dag, &m, Options::default()).unwrap();
                let slow = simulate(
                    &dag,
                    &m,
                    Options {
                        stepwise_collectives: true,
                        collective_flows: true,
                        unbundled_flows: true,
                        ..Options::default()
                    },
                )
                .unwrap();
                let what = format!("{algorithm:?}, case {k}, copies {copies:?}");
                assert_same_run(&fast, &slow, &what);
                assert_eq!(slow.partial_collectives, 0);
                partial += fast.partial_collectives;
                materialized += fast.materialized_collectives;
                runs += 1;
            }
        }
    }
    assert!(
        partial > runs / 2 && materialized > runs / 4,
        "{partial} partial, {materialized} materialized, {runs} runs"
    );
}

/// The bench's ring beside a long copy runs partly reserved, with a few events per step instead of
/// one per transfer, and matches the reference.
#[test]
fn a_ring_beside_a_long_copy_costs_events_per_step_not_per_transfer() {
    use dagsim::collective::{Algorithm, CollectiveOp};
    use dagsim::dag::{DagBuilder, DagMeta, Phase, Task, Work};
    use dagsim::sim::simulate;

    let gpus = 64u32;
    let channels = load_topology("k80-cluster").unwrap().instantiate(gpus).unwrap();
    // One ring (`--nic-route local`): the default runs a ring across nodes as one ring per GPU of a
    // node (NCCL's channels), checked against the reference at the end.
    let mut m = channels.clone();
    m.nic_route = dagsim::hw::NicRoute::Local;
    let task =
        |work| Task { work, queue: None, phase: Phase::Forward, gpu: Some(0), iteration: 0, layer: None, priority: 0 };
    let mut b = DagBuilder::new();
    let group = b.add_group((0..gpus).collect());
    let ar = Work::Collective { group, op: CollectiveOp::AllReduce, algorithm: Algorithm::Ring, bytes: 80_000_000 };
    b.add_task(task(ar));
    b.add_task(task(Work::Transfer { src: m.gpus[0].host, dst: m.gpus[4].host, bytes: 20_000_000_000 }));
    let dag = b.build(DagMeta { gpus, iterations: 0, iteration_end: vec![] }).unwrap();
    let fast = simulate(&dag, &m, Options::default()).unwrap();
    let slow = simulate(
        &dag,
        &m,
        Options { stepwise_collectives: true, collective_flows: true, unbundled_flows: true, ..Options::default() },
    )
    .unwrap();
    assert_eq!(
        (&fast.start, &fast.end, &fast.link_bytes, fast.flows),
        (&slow.start, &slow.end, &slow.link_bytes, slow.flows)
    );
    assert_eq!(fast.partial_collectives, 1);
    let steps = 2 * (gpus as u64 - 1);
    assert!(fast.events < 6 * steps, "{} events for {steps} steps", fast.events);
    assert!(slow.events > 2 * steps * gpus as u64 - 1);
    let fast = simulate(&dag, &channels, Options::default()).unwrap();
    let slow = simulate(
        &dag,
        &channels,
        Options { stepwise_collectives: true, collective_flows: true, unbundled_flows: true, ..Options::default() },
    )
    .unwrap();
    assert_eq!(
        (&fast.start, &fast.end, &fast.link_bytes, fast.flows),
        (&slow.start, &slow.end, &slow.link_bytes, slow.flows)
    );
}

#[derive(Debug, Clone)]
enum Job {
    /// An all-reduce by algorithm index over ranks `first..first + len` (clipped), after a delay.
    Collective { alg: u8, first: u8, len: u8, bytes: u64, delay: u64 },
    /// A copy between two devices (GPU, host or storage of a GPU index), after a delay.
    Copy { src: u8, dst: u8, bytes: u64, delay: u64 },
}

fn job() -> impl proptest::strategy::Strategy<Value = Job> {
    use proptest::prelude::*;
    prop_oneof![
        (0u8..4, 0u8..16, 2u8..17, 1u64..8_000_000, 0u64..2_000_000)
            .prop_map(|(alg, first, len, bytes, delay)| Job::Collective { alg, first, len, bytes, delay }),
        (0u8..48, 0u8..48, 0u64..30_000_000, 0u64..4_000_000).prop_map(|(src, dst, bytes, delay)| Job::Copy {
            src,
            dst,
            bytes,
            delay
        }),
    ]
}

proptest::proptest! {
    #![proptest_config(proptest::test_runner::Config {
        cases: std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(32),
        ..Default::default()
    })]
    /// Random collectives (ring, hierarchical, tree, halving-doubling over random rank ranges) and
    /// copies between GPUs, hosts and storage of 16 K80s, each after a random delay: the fast paths
    /// (whole, next-to-outside and partial reservations) give the step-by-step reference's run.
    /// 32 cases; `PROPTEST_CASES=N` runs more.
    #[test]
    fn random_collectives_and_copies_match_the_reference(jobs in proptest::collection::vec(job(), 1..12)) {
        use dagsim::collective::{Algorithm, CollectiveOp};
        use dagsim::dag::{DagBuilder, DagMeta, Phase, Task, Work};
        use dagsim::sim::simulate;
        use proptest::prelude::*;

        thread_local! {
            static MACHINE: dagsim::hw::Machine = load_topology("k80-cluster").unwrap().instantiate(16).unwrap();
        }
        MACHINE.with(|m| {
            let task = |work| Task { work, queue: None, phase: Phase::Forward, gpu: Some(0), iteration: 0, layer: None, priority: 0 };
            let device = |i: u8| {
                let g = &m.gpus[i as usize % 16];
                [g.device, g.host, g.storage][i as usize / 16]
            };
            let mut b = DagBuilder::new();
            for j in &jobs {
                let (work, delay) = match *j {
                    Job::Collective { alg, first, len, bytes, delay } => {
                        let first = (first as u32).min(14);
                        let group = b.add_group((first..(first + len as u32).min(16)).collect());
                        let algorithm = [Algorithm::Ring, Algorithm::Hierarchical, Algorithm::Tree, Algorithm::HalvingDoubling][alg as usize];
                        (Work::Collective { group, op: CollectiveOp::AllReduce, algorithm, bytes }, delay)
                    }
                    Job::Copy { src, dst, bytes, delay } => {
                        let (mut a, mut z) = (device(src), device(dst));
                        if m.shortest_path(a, z).is_none() {
                            (a, z) = (m.gpus[src as usize % 16].host, m.gpus[dst as usize % 16].device);
                        }
                        (Work::Transfer { src: a, dst: z, bytes }, delay)
                    }
                };
                let wait = b.add_task(task(Work::Fixed { ns: delay }));
                let t = b.add_task(task(work));
                b.add_edge(wait, t);
            }
            let dag = b.build(DagMeta { gpus: 16, iterations: 0, iteration_end: vec![] }).unwrap();
            let fast = simulate(&dag, m, Options::default()).unwrap();
            let slow = simulate(&dag, m, Options { stepwise_collectives: true, collective_flows: true, unbundled_flows: true, ..Options::default() }).unwrap();
            prop_assert_eq!(&fast.start, &slow.start);
            prop_assert_eq!(&fast.end, &slow.end);
            prop_assert_eq!(&fast.link_bytes, &slow.link_bytes);
            prop_assert_eq!(fast.flows, slow.flows);
            Ok(())
        })?;
    }
}
