//! Compute beside a collective (`--compute-contention sms`): each NCCL channel of a collective in
//! flight holds one SM of every member GPU, and a compute task there runs on the SMs left. Checked
//! on one compute task overlapped by one all-reduce, timed by hand from the collective's span and
//! its channel count. Under `sms+hbm` a memory-bound task also loses the memory bandwidth the
//! collective's traffic takes (its bus bytes over NCCL's tuner time, 3 passes under Simple).

use dagsim::collective::nccl::{NcclConfig, TunerOnly};
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

fn machine(contention: ComputeContention) -> dagsim::hw::Machine {
    let topo = dagsim::hw::topology::parse_topology(TWO_NODES, Path::new("two-nodes.json"), false).unwrap();
    let mut m = topo.instantiate(2).unwrap();
    m.collectives = CollectiveModel::Nccl(NcclConfig::default());
    m.compute_contention = contention;
    m
}

/// A 10 ms compute task on GPU 0 and an all-reduce of `bytes` over both GPUs, both from time 0;
/// the all-reduce marked as not NCCL's when `not_nccl`.
fn run(contention: ComputeContention, bytes: u64, not_nccl: bool) -> Outcome {
    run_memory(contention, bytes, not_nccl, 0.0)
}

/// [`run`] with `memory` of the compute task's time memory-bound.
fn run_memory(contention: ComputeContention, bytes: u64, not_nccl: bool, memory: f64) -> Outcome {
    let m = machine(contention);
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
    b.set_memory_share(compute, memory);
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

/// A wholly memory-bound 10 ms task beside a 20 MB all-reduce of two ranks over 12.5 GB/s: each
/// rank receives the 20 MB (bus factor 1) in the time NCCL's tuner gives the call, and each byte
/// crosses memory 3 times under Simple; the A100-80GB streams 2,039 GB/s x 0.75 alone. While the
/// all-reduce runs the task gets the smaller of the SMs' and the memory's shares; by hand it then
/// ends d + (10 ms - d x share) after its start (to within rounding).
#[test]
fn a_memory_bound_task_runs_on_the_memory_bandwidth_a_collective_leaves() {
    let bytes = 20_000_000;
    let sms_only = run_memory(ComputeContention::Sms, bytes, false, 1.0);
    let slowed = run_memory(ComputeContention::SmsHbm, bytes, false, 1.0);
    assert_eq!(slowed.collective_end, sms_only.collective_end, "the collective itself is not slowed");
    let choice = TunerOnly::new(&machine(ComputeContention::SmsHbm), &[0, 1], NcclConfig::default())
        .choose(CollectiveOp::AllReduce, bytes)
        .unwrap();
    assert_eq!(choice.proto.name(), "Simple", "{choice:?}");
    let traffic = 3.0 * bytes as f64 / (choice.model_us * 1e3); // bytes/ns
    let hbm = 2039.0 * 0.75;
    let memory_share = 1.0 - traffic / hbm;
    let k = channels(&slowed.label);
    let sm_share = (SMS - k) as f64 / SMS as f64;
    assert!(memory_share < sm_share, "memory ({memory_share}) is the scarcer share here (SMs {sm_share})");
    let d = slowed.collective_end as f64;
    let want = d + (COMPUTE_NS as f64 - d * memory_share);
    assert!((slowed.compute_end as f64 - want).abs() <= 2.0, "{} vs {want} ({})", slowed.compute_end, slowed.label);
    assert!(slowed.compute_end > sms_only.compute_end);
    // A task with no memory-bound share keeps the SM model.
    assert_eq!(
        run(ComputeContention::SmsHbm, bytes, false).compute_end,
        run(ComputeContention::Sms, bytes, false).compute_end
    );
}

#[test]
fn the_flag_names_itself_on_bad_input() {
    let e = ComputeContention::parse("wave").unwrap_err().to_string();
    assert!(e.contains("--compute-contention") && e.contains("wave"), "{e}");
    assert_eq!(ComputeContention::parse("SMS").unwrap(), ComputeContention::Sms);
    assert_eq!(ComputeContention::parse("sms+hbm").unwrap(), ComputeContention::SmsHbm);
    assert_eq!(ComputeContention::parse("off").unwrap(), ComputeContention::Off);
    assert_eq!(ComputeContention::default(), ComputeContention::Sms);
}
