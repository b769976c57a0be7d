//! Compute beside a collective (`--compute-contention sms`): each NCCL channel of a collective in
//! flight holds one SM of every member GPU, and a compute task there runs on the SMs left. Checked
//! on one compute task overlapped by one all-reduce, timed by hand from the collective's span and
//! its channel count.

use dagsim::collective::nccl::NcclConfig;
use dagsim::collective::{Algorithm, CollectiveModel, CollectiveOp};
use dagsim::dag::{DagBuilder, DagMeta, Discipline, Phase, Task, Work};
use dagsim::hw::ComputeContention;
use dagsim::sim::Options;
use std::path::Path;

/// Two nodes of one A100 (108 SMs) each, PCIe to one 100 Gb/s port, no latency.
const TWO_NODES: &str = r#"{ "name": "two-nodes", "source": "a hand-timed test case",
  "graph": { "gpu": "A100-SXM4-80GB", "nodes": 2, "grow": false,
    "devices": [ {"name": "cpu0", "kind": "cpu"}, {"name": "nic0", "kind": "nic"},
                 {"name": "gpu0", "kind": "gpu", "host": "cpu0"} ],
    "links": [ {"from": "cpu0", "to": "gpu0", "kind": "pcie", "latency_us": 0, "bandwidth_gb_s": 25},
               {"from": "cpu0", "to": "nic0", "kind": "pcie", "latency_us": 0, "bandwidth_gb_s": 25} ],
    "network": { "kind": "infiniband", "bandwidth_gbit_s": 100, "latency_us": 0, "protocol": "rdma",
                 "rdma_efficiency": 1.0, "attach": ["nic0"] },
    "storage": { "shared": false, "bandwidth_gb_s": 2, "latency_us": 0, "attach": "cpu0" } } }"#;

const SMS: u64 = 108;
const COMPUTE_NS: u64 = 10_000_000;

struct Outcome {
    compute_end: u64,
    collective_end: u64,
    label: String,
}

/// A 10 ms compute task on GPU 0 and an all-reduce of `bytes` over both GPUs, both from time 0;
/// the all-reduce marked as not NCCL's when `not_nccl`.
fn run(contention: ComputeContention, bytes: u64, not_nccl: bool) -> Outcome {
    let topo = dagsim::hw::topology::parse_topology(TWO_NODES, Path::new("two-nodes.json"), false).unwrap();
    let mut m = topo.instantiate(2).unwrap();
    m.collectives = CollectiveModel::Nccl(NcclConfig::default());
    m.compute_contention = contention;
    let mut b = DagBuilder::new();
    let stream = b.add_queue("gpu0 compute", Discipline::Fifo, Some(0));
    let comm = b.add_queue("comm", Discipline::Fifo, None);
    let group = b.add_group(vec![0, 1]);
    let task =
        |work, queue, phase, gpu| Task { work, queue: Some(queue), phase, gpu, iteration: 0, layer: None, priority: 0 };
    let compute = b.add_task(task(Work::Fixed { ns: COMPUTE_NS }, stream, Phase::Backward, Some(0)));
    let all_reduce = b.add_task(task(
        Work::Collective { group, op: CollectiveOp::AllReduce, algorithm: Algorithm::Ring, bytes },
        comm,
        Phase::GradientAggregation,
        None,
    ));
    if not_nccl {
        b.mark_not_nccl(all_reduce);
    }
    let dag = b.build(DagMeta { gpus: 2, iterations: 0, iteration_end: vec![] }).unwrap();
    let r = dagsim::sim::simulate(&dag, &m, Options { record_flows: true, ..Options::default() }).unwrap();
    let label = r.collective_labels.iter().find(|(t, _)| *t == all_reduce).map(|(_, l)| l.clone()).unwrap();
    Outcome { compute_end: r.end[compute as usize], collective_end: r.end[all_reduce as usize], label }
}

/// The channel count of an NCCL label such as `ring/Simple x2`.
fn channels(label: &str) -> u64 {
    label.rsplit_once(" x").and_then(|(_, k)| k.parse().ok()).unwrap_or_else(|| panic!("no channels in `{label}`"))
}

#[test]
fn compute_runs_on_the_sms_a_collective_leaves() {
    let bytes = 20_000_000;
    let free = run(ComputeContention::Off, bytes, false);
    assert_eq!(free.compute_end, COMPUTE_NS, "without contention the compute keeps its time");
    let slowed = run(ComputeContention::Sms, bytes, false);
    assert_eq!(slowed.collective_end, free.collective_end, "the collective itself is not slowed");
    let k = channels(&slowed.label);
    let d = slowed.collective_end;
    assert!(k >= 1 && d > 0 && d < COMPUTE_NS, "the all-reduce ({}, {d} ns) ends inside the compute", slowed.label);
    // By hand: until the all-reduce ends the task runs on 108 - k SMs, then on all 108.
    let left = COMPUTE_NS * SMS - d * (SMS - k);
    let want = d + left.div_ceil(SMS);
    assert_eq!(slowed.compute_end, want, "{} over {d} ns on {SMS} SMs", slowed.label);
    assert!(slowed.compute_end > COMPUTE_NS);
}

#[test]
fn a_collective_outlasting_the_compute_slows_all_of_it() {
    // 1 GB takes far longer than the 10 ms of compute: the task runs on 108 - k SMs throughout.
    let slowed = run(ComputeContention::Sms, 1_000_000_000, false);
    let k = channels(&slowed.label);
    assert!(slowed.collective_end > slowed.compute_end);
    assert_eq!(slowed.compute_end, (COMPUTE_NS * SMS).div_ceil(SMS - k), "{}", slowed.label);
}

#[test]
fn collectives_outside_nccl_hold_no_sms() {
    let marked = run(ComputeContention::Sms, 20_000_000, true);
    assert_eq!(marked.compute_end, COMPUTE_NS);
}

#[test]
fn the_flag_names_itself_on_bad_input() {
    let e = ComputeContention::parse("wave").unwrap_err().to_string();
    assert!(e.contains("--compute-contention") && e.contains("wave"), "{e}");
    assert_eq!(ComputeContention::parse("SMS").unwrap(), ComputeContention::Sms);
    assert_eq!(ComputeContention::parse("off").unwrap(), ComputeContention::Off);
    assert_eq!(ComputeContention::default(), ComputeContention::Sms);
}
