//! A collective step run by flows times one transfer per symmetry class (identical transfers over
//! routes of one shape, sharing no link) and finishes the others with it (`sim/shadow.rs`). That
//! must never change a result: each case here runs with it and with every transfer as its own
//! flow (`Options::collective_flows`, the reference path), and every task's start and end, every
//! link's bytes and the flow count must agree bit for bit.

mod common;

use common::assert_same_run;
use common::plan::{plan_setup, small_gpt};
use dagsim::collective::{Algorithm, CollectiveOp};
use dagsim::dag::{DagBuilder, DagMeta, Phase, Task, Work};
use dagsim::hw::{load_topology, Machine, NicRoute};
use dagsim::sim::{simulate, Options, Run};

fn task(work: Work) -> Task {
    Task { work, queue: None, phase: Phase::Forward, gpu: Some(0), iteration: 0, layer: None, priority: 0 }
}

/// Runs `dag` grouped and flow by flow, in both collective modes (reserved links where possible,
/// and every step by flows), checks they agree and returns the grouped step-by-step run.
fn grouped_equals_flow_by_flow(dag: &dagsim::dag::Dag, m: &Machine, what: &str) -> Run {
    // The reference paths run every transfer as its own flow (no collective shadows, no bundles).
    let reference = Options { collective_flows: true, unbundled_flows: true, ..Options::default() };
    let grouped = simulate(dag, m, Options::default()).unwrap();
    let flows = simulate(dag, m, reference).unwrap();
    assert_same_run(&grouped, &flows, what);
    assert_eq!(flows.collective_shadows, 0, "{what}: the reference path shadows nothing");
    let stepwise = Options { stepwise_collectives: true, ..Options::default() };
    let grouped_steps = simulate(dag, m, stepwise).unwrap();
    let flows_steps = simulate(dag, m, Options { collective_flows: true, unbundled_flows: true, ..stepwise }).unwrap();
    assert_same_run(&grouped_steps, &flows_steps, &format!("{what}, step by step"));
    assert_same_run(&grouped_steps, &flows, &format!("{what}, step by step vs reserved"));
    assert!(grouped_steps.events <= flows_steps.events, "{what}: grouping adds events");
    grouped_steps
}

/// The small case: two rings over the same 16 GPUs of two DGX H100 nodes (an all-gather and a
/// reduce-scatter, as ZeRO-3 runs them side by side), the second starting at a range of offsets
/// into the first (at, before and after step boundaries and latency phases), and a copy that
/// lands on one GPU's links part-way. Each step of a ring moves 14 identical NVLink transfers and
/// 2 identical network ones: two classes, each timed once while the rings share every link.
#[test]
fn two_rings_on_one_group_are_timed_by_class_exactly() {
    // One ring per collective (`--nic-route local`); under the default `channels` a ring across
    // nodes runs as one ring per GPU of a node, where each rank's NVLink share and network share
    // cross the same NVLink hops: groups of two transfers, 16 a step in one class (checked last).
    let channels = load_topology("dgx-h100").unwrap().instantiate(16).unwrap();
    let mut m = channels.clone();
    m.nic_route = NicRoute::Local;
    let (mut shadowed, mut turned, mut striped) = (0, 0, 0);
    for (m, offset) in [0u64, 1, 2_500, 7_000, 13_000, 40_000, 123_457, 1_000_000]
        .into_iter()
        .map(|o| (&m, o))
        .chain([(&channels, 0), (&channels, 40_000)])
    {
        for copy in [None, Some(5_000u64), Some(30_000), Some(77_777)] {
            let mut b = DagBuilder::new();
            let group = b.add_group((0..16).collect());
            let gather =
                Work::Collective { group, op: CollectiveOp::AllGather, algorithm: Algorithm::Ring, bytes: 64 << 20 };
            let reduce = Work::Collective {
                group,
                op: CollectiveOp::ReduceScatter,
                algorithm: Algorithm::Ring,
                bytes: 48 << 20,
            };
            b.add_task(task(gather));
            let wait = b.add_task(task(Work::Fixed { ns: offset }));
            let rs = b.add_task(task(reduce));
            b.add_edge(wait, rs);
            if let Some(at) = copy {
                let wait = b.add_task(task(Work::Fixed { ns: at }));
                let (src, dst) = (m.gpus[3].device, m.gpus[4].device);
                let c = b.add_task(task(Work::Transfer { src, dst, bytes: 8 << 20 }));
                b.add_edge(wait, c);
            }
            let dag = b.build(DagMeta { gpus: 16, iterations: 0, iteration_end: vec![] }).unwrap();
            let what = format!("offset {offset}, copy {copy:?}, {}", m.nic_route.name());
            let run = grouped_equals_flow_by_flow(&dag, m, &what);
            shadowed += run.collective_shadows;
            turned += run.collective_shadows_to_flows;
            if m.nic_route == NicRoute::Channels {
                striped += run.collective_shadows;
            }
        }
    }
    assert!(striped > 1000, "{striped} transfers of striped rings shadowed");
    // Both paths ran: shadows arriving with their representative, and shadows turned into flows
    // when the copy (or the other ring, out of step) reached their links.
    assert!(shadowed > 1000, "{shadowed} transfers shadowed");
    assert!(turned >= 5, "shadows turned into flows {turned} times");
}

#[test]
fn plans_with_shadowed_collectives_match_the_reference_path() {
    // ZeRO-3 and FSDP (gathers beside reduce-scatters on one group), CP, TP across nodes, and
    // two GPUs sharing a NIC (dgx-a100's default routes).
    let plans = [
        ("dp=32,zero=3", 1, 32, "dgx-h100"),
        ("tp=2,dp=8,zero=3,recompute=full", 1, 16, "dgx-h100"),
        ("dp=16,zero=3,fsdp-wrap=layer", 2, 32, "dgx-a100"),
        ("tp=2,dp=4,cp=2,zero=2", 1, 8, "dgx-h100"),
        ("tp=4,dp=8,zero=3,tp-across-nodes=on", 1, 8, "v100-cluster"),
        ("tp=8,pp=2,dp=4,sp=on,zero=1", 1, 16, "dgx-a100"),
    ];
    let (mut shadowed, mut turned) = (0, 0);
    for ((spec, mb, gbs, topology), route) in
        plans.into_iter().flat_map(|p| [(p, NicRoute::Local), (p, NicRoute::Channels)])
    {
        let mut s = plan_setup(small_gpt(), spec, mb, gbs, 1024, topology);
        s.topology.nic_route = route;
        for symmetric in [true, false] {
            let fast = s.simulate(symmetric, Options::default()).unwrap();
            let reference = Options { collective_flows: true, unbundled_flows: true, ..Options::default() };
            let slow = s.simulate(symmetric, reference).unwrap();
            let (a, b) = (&fast.run, &slow.run);
            let what = format!("{topology} {spec} (symmetric {symmetric}, {})", route.name());
            assert_same_run(a, b, &what);
            assert_eq!(a.makespan, b.makespan, "{what}");
            assert!(a.events <= b.events, "{what}: grouping adds events");
            shadowed += a.collective_shadows;
            turned += a.collective_shadows_to_flows;
        }
    }
    assert!(shadowed > 1000, "{shadowed} transfers shadowed");
    assert!(turned >= 1, "shadows turned into flows {turned} times");
}

#[derive(Debug, Clone)]
enum Job {
    /// A collective (operation and algorithm by index) over ranks `first..first + len` (clipped),
    /// after a delay.
    Collective { op: u8, alg: u8, first: u8, len: u8, bytes: u64, delay: u64 },
    /// A copy between two GPUs, after a delay.
    Copy { src: u8, dst: u8, bytes: u64, delay: u64 },
}

fn job() -> impl proptest::strategy::Strategy<Value = Job> {
    use proptest::prelude::*;
    prop_oneof![
        (0u8..3, 0u8..3, 0u8..4, 8u8..17, 1u64..16_000_000, 0u64..200_000)
            .prop_map(|(op, alg, first, len, bytes, delay)| Job::Collective { op, alg, first, len, bytes, delay }),
        (0u8..16, 0u8..16, 0u64..16_000_000, 0u64..300_000).prop_map(|(src, dst, bytes, delay)| Job::Copy {
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
    /// Random collectives (all-gather, reduce-scatter, all-reduce; ring, hierarchical, tree) over
    /// random rank ranges of two DGX H100 nodes, many over the same ranks, and copies between
    /// GPUs, each after a random delay: grouped timing gives the flow-by-flow run, bit for bit.
    /// 32 cases; `PROPTEST_CASES=N` runs more.
    #[test]
    fn random_collectives_and_copies_match_flow_by_flow(jobs in proptest::collection::vec(job(), 1..10)) {
        thread_local! {
            static MACHINE: Machine = load_topology("dgx-h100").unwrap().instantiate(16).unwrap();
        }
        MACHINE.with(|m| {
            let mut b = DagBuilder::new();
            for j in &jobs {
                let (work, delay) = match *j {
                    Job::Collective { op, alg, first, len, bytes, delay } => {
                        let group = b.add_group((first as u32..(first as u32 + len as u32).min(16)).collect());
                        let op = [CollectiveOp::AllGather, CollectiveOp::ReduceScatter, CollectiveOp::AllReduce][op as usize];
                        let algorithm = [Algorithm::Ring, Algorithm::Hierarchical, Algorithm::Tree][alg as usize];
                        (Work::Collective { group, op, algorithm, bytes }, delay)
                    }
                    Job::Copy { src, dst, bytes, delay } => {
                        let (a, z) = (m.gpus[src as usize].device, m.gpus[dst as usize].device);
                        (Work::Transfer { src: a, dst: z, bytes }, delay)
                    }
                };
                let wait = b.add_task(task(Work::Fixed { ns: delay }));
                let t = b.add_task(task(work));
                b.add_edge(wait, t);
            }
            let dag = b.build(DagMeta { gpus: 16, iterations: 0, iteration_end: vec![] }).unwrap();
            grouped_equals_flow_by_flow(&dag, m, &format!("{jobs:?}"));
        });
    }
}

#[derive(Debug, Clone)]
enum StripedJob {
    /// A ring collective (operation by index) over the GPUs `offset, offset + stride, ...` of each
    /// of the first `nodes` nodes (a DP group of a plan with tp = `stride`), after a delay.
    Collective { op: u8, stride: u8, offset: u8, nodes: u8, bytes: u64, delay: u64 },
    /// A copy between two GPUs, after a delay.
    Copy { src: u8, dst: u8, bytes: u64, delay: u64 },
}

fn striped_job() -> impl proptest::strategy::Strategy<Value = StripedJob> {
    use proptest::prelude::*;
    prop_oneof![
        3 => (0u8..3, 0u8..3, 0u8..4, 2u8..5, 1u64..16_000_000, 0u64..200_000).prop_map(
            |(op, s, offset, nodes, bytes, delay)| {
                let stride = [1u8, 2, 4][s as usize];
                StripedJob::Collective { op, stride, offset: offset % stride, nodes, bytes, delay }
            }
        ),
        1 => (0u8..32, 0u8..32, 0u64..16_000_000, 0u64..300_000).prop_map(|(src, dst, bytes, delay)| {
            StripedJob::Copy { src, dst, bytes, delay }
        }),
    ]
}

proptest::proptest! {
    #![proptest_config(proptest::test_runner::Config {
        cases: std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(24),
        ..Default::default()
    })]
    /// Rings across 2 to 4 DGX H100 nodes with 2, 4 or 8 GPUs of each node (under `channels`:
    /// striped rings, a class of groups of two transfers per step), many over the same or
    /// overlapping GPUs, and copies, each after a random delay, under both NIC routes: grouped
    /// timing gives the flow-by-flow run, bit for bit. 24 cases; `PROPTEST_CASES=N` runs more.
    #[test]
    fn random_striped_rings_match_flow_by_flow(jobs in proptest::collection::vec(striped_job(), 1..8)) {
        thread_local! {
            static MACHINE: Machine = load_topology("dgx-h100").unwrap().instantiate(32).unwrap();
        }
        MACHINE.with(|channels| {
            let mut local = channels.clone();
            local.nic_route = NicRoute::Local;
            let mut b = DagBuilder::new();
            for j in &jobs {
                let (work, delay) = match *j {
                    StripedJob::Collective { op, stride, offset, nodes, bytes, delay } => {
                        let ranks = (0..nodes as u32)
                            .flat_map(|n| (offset as u32..8).step_by(stride as usize).map(move |g| n * 8 + g))
                            .collect();
                        let group = b.add_group(ranks);
                        let op = [CollectiveOp::AllGather, CollectiveOp::ReduceScatter, CollectiveOp::AllReduce][op as usize];
                        (Work::Collective { group, op, algorithm: Algorithm::Ring, bytes }, delay)
                    }
                    StripedJob::Copy { src, dst, bytes, delay } => {
                        let (a, z) = (channels.gpus[src as usize].device, channels.gpus[dst as usize].device);
                        (Work::Transfer { src: a, dst: z, bytes }, delay)
                    }
                };
                let wait = b.add_task(task(Work::Fixed { ns: delay }));
                let t = b.add_task(task(work));
                b.add_edge(wait, t);
            }
            let dag = b.build(DagMeta { gpus: 32, iterations: 0, iteration_end: vec![] }).unwrap();
            for m in [channels, &local] {
                grouped_equals_flow_by_flow(&dag, m, &format!("{} {jobs:?}", m.nic_route.name()));
            }
        });
    }
}
