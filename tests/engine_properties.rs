//! Engine invariants on random DAGs: precedence holds, no serial queue runs two tasks at once, no
//! link carries more than its capacity, fixed tasks take exactly their time, transfers never beat
//! their bottleneck link, and runs are deterministic (across repeats and thread counts).

use dagsim::dag::{DagBuilder, DagMeta, Discipline, Phase, Task, TaskId, Work};
use dagsim::hw::{load_topology, Machine};
use dagsim::sim::fluid::FluidNet;
use dagsim::sim::{simulate, Options};
use proptest::prelude::*;

#[derive(Debug, Clone)]
enum Spec {
    Fixed { ns: u64, queue: Option<u8> },
    Transfer { src: u8, dst: u8, bytes: u64 },
}

fn spec() -> impl Strategy<Value = Spec> {
    prop_oneof![
        (0u64..5_000, prop::option::of(0u8..3)).prop_map(|(ns, queue)| Spec::Fixed { ns, queue }),
        (0u8..255, 0u8..255, 0u64..2_000_000).prop_map(|(src, dst, bytes)| Spec::Transfer { src, dst, bytes }),
    ]
}

fn machine() -> Machine {
    load_topology("k80-cluster").unwrap().instantiate(8).unwrap()
}

/// Builds a DAG from specs and forward edges (i < j keeps it acyclic).
fn build(m: &Machine, specs: &[Spec], edges: &[(usize, usize)]) -> (dagsim::dag::Dag, Vec<(TaskId, TaskId)>) {
    let mut b = DagBuilder::new();
    let queues: Vec<_> = (0..3).map(|q| b.add_queue(format!("q{q}"), Discipline::Fifo, None)).collect();
    let ndev = m.devices.len() as u32;
    for s in specs {
        let (work, queue) = match *s {
            Spec::Fixed { ns, queue } => (Work::Fixed { ns }, queue.map(|q| queues[q as usize])),
            Spec::Transfer { src, dst, bytes } => {
                // Storage devices only send; pick endpoints that have a route.
                let (mut a, mut z) = (src as u32 % ndev, dst as u32 % ndev);
                if m.shortest_path(a, z).is_none() {
                    a = m.gpus[0].device;
                    z = m.gpus[(src as usize) % m.gpus.len()].device;
                }
                if m.shortest_path(a, z).is_none() {
                    z = a;
                }
                (Work::Transfer { src: a, dst: z, bytes }, None)
            }
        };
        b.add_task(Task { work, queue, phase: Phase::Forward, gpu: Some(0), iteration: 0, layer: None, priority: 0 });
    }
    let mut kept = Vec::new();
    for &(i, j) in edges {
        let (i, j) = (i % specs.len(), j % specs.len());
        if i < j {
            b.add_edge(i as TaskId, j as TaskId);
            kept.push((i as TaskId, j as TaskId));
        }
    }
    (b.build(DagMeta { gpus: 1, iterations: 0, iteration_end: vec![] }).unwrap(), kept)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    #[test]
    fn engine_invariants(specs in prop::collection::vec(spec(), 1..40),
                         edges in prop::collection::vec((0usize..40, 0usize..40), 0..80)) {
        let m = machine();
        let (dag, edges) = build(&m, &specs, &edges);
        let run = simulate(&dag, &m, Options { record_flows: true, ..Options::default() }).unwrap();
        // Precedence.
        for &(a, b) in &edges {
            prop_assert!(run.start[b as usize] >= run.end[a as usize], "edge {a}->{b} violated");
        }
        // Fixed tasks take exactly their time; transfers are no faster than their route allows.
        for (t, task) in dag.tasks().iter().enumerate() {
            let took = run.end[t] - run.start[t];
            match task.work {
                Work::Fixed { ns } => prop_assert_eq!(took, ns),
                Work::Transfer { src, dst, bytes } => {
                    let r = m.shortest_path(src, dst).unwrap();
                    let min_cap = r.links.iter().map(|&l| m.links[l as usize].capacity()).fold(f64::INFINITY, f64::min);
                    let floor = r.latency_ns + if r.links.is_empty() { 0 } else { (bytes as f64 / min_cap).floor() as u64 };
                    prop_assert!(took >= floor, "transfer {t} took {took} < {floor}");
                }
                Work::Collective { .. } | Work::Shared { .. } => {}
            }
        }
        // Serial queues: no overlap.
        for q in 0..dag.queues().len() as u32 {
            let mut spans: Vec<(u64, u64)> = dag.tasks().iter().enumerate()
                .filter(|(_, t)| t.queue == Some(q)).map(|(i, _)| (run.start[i], run.end[i])).collect();
            spans.sort();
            for w in spans.windows(2) {
                prop_assert!(w[1].0 >= w[0].1, "queue {q} double-booked: {:?}", w);
            }
        }
        // Links: bytes finished within any window of flow boundaries fit the capacity.
        for (l, link) in m.links.iter().enumerate() {
            let flows: Vec<_> = run.flow_records.iter()
                .filter(|f| run.routes[f.route as usize].links.contains(&(l as u32))).collect();
            for a in &flows {
                for b in &flows {
                    let (t0, t1) = (a.start, b.end);
                    if t1 <= t0 { continue; }
                    let inside: f64 = flows.iter().filter(|f| f.start >= t0 && f.end <= t1).map(|f| f.bytes as f64).sum();
                    // +1 ns per flow for rounding completion times up.
                    let slack = flows.len() as f64 * link.capacity();
                    prop_assert!(inside <= link.capacity() * (t1 - t0) as f64 + slack,
                        "link {l} carried {inside} bytes in {} ns", t1 - t0);
                }
            }
        }
        // Determinism.
        let again = simulate(&dag, &m, Options { record_flows: true, ..Options::default() }).unwrap();
        prop_assert_eq!(&run.start, &again.start);
        prop_assert_eq!(&run.end, &again.end);
    }

    #[test]
    fn max_min_fairness_holds(caps in prop::collection::vec(1u32..20, 1..6),
                              flows in prop::collection::vec((prop::collection::vec(0usize..6, 1..4), prop::option::of(1u32..10)), 1..12)) {
        let mut net = FluidNet::new(caps.iter().map(|&c| c as f64).collect());
        let mut ids = Vec::new();
        for (links, cap) in &flows {
            let mut ls: Vec<u32> = links.iter().map(|&l| (l % caps.len()) as u32).collect();
            ls.sort();
            ls.dedup();
            let id = net.add(&ls, 1e6, cap.map_or(f64::INFINITY, |c| c as f64), 0);
            ids.push((id, ls, cap.map_or(f64::INFINITY, |c| c as f64)));
        }
        let mut out = Vec::new();
        net.solve(0, &mut out);
        let eps = 1e-9;
        let load = |l: u32| ids.iter().filter(|(_, ls, _)| ls.contains(&l)).map(|(id, _, _)| net.rate(*id)).sum::<f64>();
        for (l, &c) in caps.iter().enumerate() {
            prop_assert!(load(l as u32) <= c as f64 * (1.0 + eps), "link {l} over capacity");
        }
        // Each flow is at its cap, or crosses a saturated link where no flow gets more than it.
        for (id, ls, cap) in &ids {
            let r = net.rate(*id);
            let at_cap = (r - cap).abs() <= eps * cap.max(1.0);
            let bottlenecked = ls.iter().any(|&l| {
                let saturated = load(l) >= caps[l as usize] as f64 * (1.0 - eps);
                let max_on_l = ids.iter().filter(|(_, ls2, _)| ls2.contains(&l)).map(|(i, _, _)| net.rate(*i)).fold(0.0, f64::max);
                saturated && r >= max_on_l * (1.0 - eps)
            });
            prop_assert!(at_cap || bottlenecked, "flow {id} at {r} is neither capped nor bottlenecked");
        }
    }
}

#[test]
fn predictions_do_not_depend_on_thread_count() {
    let setup = dagsim::predict::Setup {
        workload: dagsim::bench::alexnet_k80(),
        topology: load_topology("k80-cluster").unwrap(),
        strategy: dagsim::strategy::Strategy::default(),
        iterations: 3,
    };
    let with_threads = |n| {
        let pool = rayon::ThreadPoolBuilder::new().num_threads(n).build().unwrap();
        let preds = pool.install(|| setup.predict_scaling(&[1, 2, 4, 8, 16])).unwrap();
        serde_json::to_string(&preds).unwrap()
    };
    assert_eq!(with_threads(1), with_threads(3));
}
