//! Data parallelism is the plan tp=1, pp=1, dp=N of the one parallel-plan builder, and its outputs
//! are those of the S-SGD builder it replaced, bit for bit. `tests/fixtures/dp_baseline.tsv` was
//! written by the S-SGD builder before the plan builder existed (commit 5740131, with
//! `DAGSIM_WRITE_BASELINE=1 cargo test --release --test plan_dp_identity -- --ignored`); this test
//! re-runs every setup and compares every recorded number exactly (f64 bits). It was re-written
//! by main's S-SGD builder at 757e460 (after the runtimes' per-tensor gradient exchange landed,
//! which changed codec launch costs for the resnet50 rows) before the plan builder took its place,
//! and re-written on branch nccl after the engine's collective lowering made `allreduce=auto`
//! run as the ring under the ideal collective model (NCCL's tuner decides under the NCCL model):
//! a change after the DAG, so both builders changed alike; only the multi-node `allreduce=auto`
//! rows moved.

use dagsim::hw::{load_topology, ComputeContention, NicRoute};
use dagsim::predict::Setup;
use dagsim::sim::Options;
use dagsim::strategy::Strategy;

/// (workload, topology, strategy, GPU counts)
fn cases() -> Vec<(&'static str, &'static str, String, Vec<u32>)> {
    let mut out = Vec::new();
    let strategies = [
        "none",
        "io",
        "wfbp",
        "io+wfbp",
        "io+wfbp+fusion=4M",
        "io+wfbp+fusion=inf",
        "io+wfbp+grads=fp16",
        "wfbp+grads=8bit",
        "io+wfbp+sparse=0.15",
        "io+wfbp+fusion=4M+sparse=0.15",
        "io+wfbp+priority=1M",
        "io+wfbp+mixed+fp16_speedup=2",
        "master",
        "master+split+preload",
        "wfbp+mps=3+util=0.3+threads=0.33",
    ];
    for s in strategies {
        for alg in ["ring", "hierarchical", "tree", "halving-doubling", "ps", "auto"] {
            out.push(("alexnet", "v100-cluster", format!("{s}+allreduce={alg}"), vec![1, 4, 8, 12]));
        }
        out.push(("alexnet", "k80-cluster", s.to_string(), vec![2, 16]));
        out.push(("resnet50", "dgx1-v100", s.to_string(), vec![8, 16]));
        out.push(("synthetic", "v100-pcie-10gbe", s.to_string(), vec![4, 8]));
    }
    out.push(("alexnet", "k80-cluster", "io+wfbp+comm=trace".to_string(), vec![4, 16]));
    out.push(("alexnet", "dgx-a100", "io+wfbp".to_string(), vec![8, 16, 24]));
    out
}

fn setup(workload: &str, topology: &str, strategy: &str) -> Setup {
    let mut w = match workload {
        "alexnet" => dagsim::bench::alexnet_k80(),
        "resnet50" => dagsim::bench::resnet50_v100(32).unwrap(),
        _ => dagsim::bench::synthetic(40),
    };
    if workload == "alexnet" {
        // Shorter compute so communication and I/O matter.
        for l in &mut w.layers {
            l.forward.mean_ns /= 40;
            l.backward.mean_ns /= 40;
        }
        w.batch_per_gpu = 64;
    }
    // The baseline was recorded with transfers between nodes on the cheapest route, the default
    // until NCCL's per-GPU NICs (`--nic-route local`) became it: a routing choice after the DAG,
    // which moves both builders alike, so the comparison keeps the route it was recorded with.
    let mut topology = load_topology(topology).unwrap();
    topology.nic_route = NicRoute::Cheapest;
    // Likewise compute contention (the SMs NCCL's channels take from the compute beside them,
    // `--compute-contention sms`, the default since 2026-11-29): it came after both builders, so
    // the baseline has it off. It is an engine mechanism that reads the DAG (which tasks are a
    // GPU's compute, which collectives NCCL runs, their groups) and not a builder's choice: there
    // is one builder (`build_ssgd` is `build_plan` with `PlanLayout::data_parallel`), and under
    // `sms` the same DAGs (same task and edge counts) run longer where an all-reduce overlaps the
    // backward, with more events (each compute end a collective moves): 588 -> 756 events on the
    // 4-GPU `wfbp+allreduce=ring` AlexNet row. `tests/compute_contention.rs` times that mechanism.
    topology.compute_contention = ComputeContention::Off;
    Setup { workload: w, topology, strategy: Strategy::parse(strategy).unwrap(), iterations: 3 }
}

/// Every number recorded for one setup and GPU count, as exact bit patterns or integers.
fn record(s: &Setup, gpus: u32) -> Vec<String> {
    let mut v = Vec::new();
    for symmetric in [true, false] {
        let p = s.predict_with(gpus, symmetric).unwrap();
        let b = p.breakdown;
        v.push(format!(
            "{}:{:x}:{:x}:{:x}:{:x}:{:x}:{:x}",
            symmetric,
            p.iteration_time_s.to_bits(),
            p.throughput_samples_per_s.to_bits(),
            b.compute.to_bits(),
            b.communication.to_bits(),
            b.io.to_bits(),
            b.idle.to_bits()
        ));
        let util: Vec<String> = p.utilisation.iter().map(|(k, x)| format!("{k}={:x}", x.to_bits())).collect();
        v.push(util.join(","));
    }
    // The full run: task count, edges, and every task's start and end.
    // The fixture's event counts were written with one flow per transfer (before engine bundles,
    // which change the event count and nothing else: tests/flow_bundles.rs).
    let sim = s.simulate(gpus, Options { unbundled_flows: true, ..Options::default() }).unwrap();
    let mut h: u64 = 0xcbf29ce484222325;
    for (a, b) in sim.run.start.iter().zip(&sim.run.end) {
        for x in [*a, *b] {
            h = (h ^ x).wrapping_mul(0x100000001b3);
        }
    }
    v.push(format!("{} {} {} {:x}", sim.dag.len(), sim.dag.edge_count(), sim.run.events, h));
    v
}

fn lines() -> Vec<String> {
    let mut out = Vec::new();
    for (w, t, s, counts) in cases() {
        let setup = setup(w, t, &s);
        for g in counts {
            out.push(format!("{w}\t{t}\t{s}\t{g}\t{}", record(&setup, g).join("\t")));
        }
    }
    out
}

const FIXTURE: &str = "tests/fixtures/dp_baseline.tsv";

#[test]
#[ignore = "writes the baseline; run once on the builder being replaced"]
fn write_baseline() {
    if std::env::var("DAGSIM_WRITE_BASELINE").is_ok() {
        std::fs::write(FIXTURE, lines().join("\n") + "\n").unwrap();
    }
}

#[test]
fn data_parallel_plan_reproduces_the_s_sgd_builder_bit_for_bit() {
    let want = std::fs::read_to_string(FIXTURE).unwrap();
    let want: Vec<&str> = want.lines().collect();
    let got = lines();
    assert_eq!(got.len(), want.len());
    for (g, w) in got.iter().zip(want) {
        assert_eq!(g, w);
    }
}
