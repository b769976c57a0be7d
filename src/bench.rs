//! Benchmark cases shared by `dagsim bench` and the criterion benches, so the numbers in README
//! come from the same code users can run.

use crate::hw::load_topology;
use crate::predict::Setup;
use crate::sim::Options;
use crate::strategy::Strategy;
use crate::workload::memory::Optimizer;
use crate::workload::synth::{synthesize, SynthOptions};
use crate::workload::zoo::Model;
use crate::workload::{read_trace_str, GpuSpec, Layer, Precision, Stat, TraceFormat, Workload};
use crate::Result;
use rayon::prelude::*;
use std::path::Path;
use std::time::Instant;

/// The shipped AlexNet/K80 trace, compiled in so benchmarks run from any directory.
pub const ALEXNET_K80: &str = include_str!("../traces/alexnet_k80.csv");

/// The AlexNet K80 workload.
pub fn alexnet_k80() -> Workload {
    read_trace_str(ALEXNET_K80, Path::new("traces/alexnet_k80.csv"), TraceFormat::Auto).expect("shipped trace parses")
}

/// ResNet-50 from the model zoo on a V100-SXM2, FP32 (about 160 layers, 25.6 M parameters).
pub fn resnet50_v100(batch: u32) -> Result<Workload> {
    let model = Model::by_name("resnet50", None)?;
    let gpu = GpuSpec::by_name("v100-sxm2").expect("the zoo has the V100");
    let opts = SynthOptions { batch, precision: Precision::Fp32, optimizer: Optimizer::default_for(&model) };
    Ok(synthesize(&model, gpu, opts)?.to_workload())
}

/// A synthetic trace shaped like ResNet-50: `layers` learnable layers of equal cost whose
/// gradients add up to about 102 MB (25.6 M FP32 parameters).
pub fn synthetic(layers: usize) -> Workload {
    let total_bytes = 25_600_000u64 * 4;
    let l = Layer {
        name: "layer".into(),
        forward: Stat::exact(300_000),
        backward: Stat::exact(600_000),
        comm: None,
        grad_bytes: total_bytes / layers as u64,
        grad_tensors: Vec::new(),
        util: None,
        memory: None,
        tp: None,
    };
    Workload {
        name: format!("synthetic{layers}"),
        batch_per_gpu: 64,
        sample_bytes: 110_000,
        device_sample_bytes: 602_112,
        layers: vec![l; layers],
        update: Stat::exact(1_000_000),
        data_load: None,
        trace_iterations: 1,
        fp16: false,
    }
}

/// What a case runs: one simulation, or many predictions in parallel.
pub enum Work {
    Single {
        setup: Box<Setup>,
        gpus: u32,
    },
    Sweep(Vec<(Setup, u32)>),
    /// One transformer step under a parallel plan.
    Plan(Box<crate::predict_plan::PlanSetup>),
    /// `dagsim plan` over every plan of a model (enumeration, memory, simulation of those that fit).
    PlanSearch(Box<crate::predict_plan::PlanSetup>),
    /// One ring all-reduce over `gpus` GPUs of `k80-cluster` with a host-to-host copy between the
    /// first two nodes that its steps slow all along: the engine partly reserves it (the transfers
    /// sharing links with the copy run as flows, the rest of each step is timed once per class).
    RingBesideCopy {
        gpus: u32,
    },
}

/// A named benchmark case.
pub struct Case {
    pub name: &'static str,
    pub work: Work,
}

impl Case {
    /// Runs the case's setups under compute contention `c` (`dagsim bench --compute-contention`, so
    /// its cost is timed as a ratio against `off` on the same binary). The ring-beside-copy cases
    /// have no compute and are left alone.
    pub fn set_compute_contention(&mut self, c: crate::hw::ComputeContention) {
        match &mut self.work {
            Work::Single { setup, .. } => setup.topology.compute_contention = c,
            Work::Sweep(points) => points.iter_mut().for_each(|(s, _)| s.topology.compute_contention = c),
            Work::Plan(setup) | Work::PlanSearch(setup) => setup.topology.compute_contention = c,
            Work::RingBesideCopy { .. } => {}
        }
    }
}

/// Names of the standard cases, in order (cheap: builds nothing).
pub const CASES: &[&str] = &[
    "alexnet-k80-16gpu",
    "resnet50-v100-128gpu-ring",
    "resnet50-v100-1024gpu-ring",
    "resnet50-v100-1024gpu-hierarchical",
    "resnet50-v100-8192gpu-hierarchical",
    "sweep-1000-scenarios",
    "gpt3-175b-a100-1024gpu-plan",
    "gpt3-175b-a100-16384gpu-plan",
    "llama2-7b-h100-16gpu-plan-search",
];

/// Cases that scale the default AlexNet run (the shipped trace on the `k80-cluster` preset, whose
/// shared NFS keeps it off the one-node path) to 256, 1,024, 4,096 and 16,384 GPUs: the issue-18
/// scaling target. Not in the default list, so `dagsim bench` runs them only when asked (`--scaling`).
pub const SCALING_CASES: &[&str] = &[
    "alexnet-k80-nfs-256gpu",
    "alexnet-k80-nfs-1024gpu",
    "alexnet-k80-nfs-4096gpu",
    "alexnet-k80-nfs-16384gpu",
    "ring-beside-copy-256gpu",
    "ring-beside-copy-1024gpu",
    "ring-beside-copy-2048gpu",
    "ring-beside-copy-8192gpu",
    "ring-beside-copy-16384gpu",
    "llama3-405b-h100-rail-1008gpu",
    "llama3-405b-h100-rail-4032gpu",
    "llama3-405b-h100-rail-16352gpu",
    "llama3-405b-h100-rail-32704gpu",
    "llama3-405b-h100-rail-65520gpu",
    "llama3-405b-h100-rail-100016gpu",
    "mixtral-8x22b-h100-rail-1024gpu",
    "mixtral-8x22b-h100-rail-4096gpu",
    "mixtral-8x22b-h100-rail-16384gpu",
    "mixtral-8x22b-h100-rail-32768gpu",
    "mixtral-8x22b-h100-rail-65536gpu",
    "mixtral-8x22b-h100-rail-100032gpu",
    // The same with approximate timeline classes (`ReplicaClasses::Approximate`: not checked).
    "llama3-405b-h100-rail-approx-1008gpu",
    "llama3-405b-h100-rail-approx-4032gpu",
    "llama3-405b-h100-rail-approx-16352gpu",
    "llama3-405b-h100-rail-approx-32704gpu",
    "llama3-405b-h100-rail-approx-65520gpu",
    "llama3-405b-h100-rail-approx-100016gpu",
    "mixtral-8x22b-h100-rail-approx-1024gpu",
    "mixtral-8x22b-h100-rail-approx-4096gpu",
    "mixtral-8x22b-h100-rail-approx-16384gpu",
    "mixtral-8x22b-h100-rail-approx-32768gpu",
    "mixtral-8x22b-h100-rail-approx-65536gpu",
    "mixtral-8x22b-h100-rail-approx-100032gpu",
    // Issue 16's plan-search target; about 240 s of CPU with the bound's pruning (80 plans
    // simulated, mostly pipelined context-parallel ones; README.md, Plan search), so only with
    // `--scaling --case plan-search`.
    "llama2-70b-h100-1024gpu-plan-search",
];

/// The rail-optimised three-tier fat-tree of DGX H100 nodes the frontier-scale cases run on
/// (`topologies/examples/h100-fat-tree.json`, compiled in so benchmarks run from any directory).
pub const H100_RAIL_FAT_TREE: &str = include_str!("../topologies/examples/h100-fat-tree.json");

/// The GPU count a case name ends with (`...-1024gpu`).
fn gpus_of(name: &str) -> u32 {
    let digits = name.trim_end_matches("gpu");
    digits[digits.rfind('-').map_or(0, |i| i + 1)..].parse().expect("case names a count")
}

/// Builds the named case with `iterations` simulated iterations (2 is the minimum: one warm-up).
pub fn case(name: &str, iterations: u32) -> Result<Case> {
    let v100 = load_topology("v100-cluster")?;
    let resnet = |alg: &str, gpus: u32| -> Result<Work> {
        let setup = Setup {
            workload: resnet50_v100(64)?,
            topology: v100.clone(),
            strategy: Strategy::parse(&format!("io+wfbp+allreduce={alg}"))?,
            iterations,
        };
        Ok(Work::Single { setup: Box::new(setup), gpus })
    };
    let work = match name {
        "alexnet-k80-16gpu" => Work::Single {
            setup: Box::new(Setup {
                workload: alexnet_k80(),
                topology: load_topology("k80-cluster")?,
                // The engine-speed cases keep the DAG paper's per-layer all-reduces, so their
                // timings stay comparable across releases.
                strategy: Strategy::parse("caffe-mpi").expect("a valid strategy"),
                iterations,
            }),
            gpus: 16,
        },
        "alexnet-k80-nfs-256gpu"
        | "alexnet-k80-nfs-1024gpu"
        | "alexnet-k80-nfs-4096gpu"
        | "alexnet-k80-nfs-16384gpu" => Work::Single {
            setup: Box::new(Setup {
                workload: alexnet_k80(),
                topology: load_topology("k80-cluster")?,
                strategy: Strategy::default(),
                iterations,
            }),
            gpus: name
                .trim_start_matches("alexnet-k80-nfs-")
                .trim_end_matches("gpu")
                .parse()
                .expect("case names a count"),
        },
        "ring-beside-copy-256gpu"
        | "ring-beside-copy-1024gpu"
        | "ring-beside-copy-2048gpu"
        | "ring-beside-copy-8192gpu"
        | "ring-beside-copy-16384gpu" => Work::RingBesideCopy {
            gpus: name
                .trim_start_matches("ring-beside-copy-")
                .trim_end_matches("gpu")
                .parse()
                .expect("case names a count"),
        },
        "resnet50-v100-128gpu-ring" => resnet("ring", 128)?,
        "resnet50-v100-1024gpu-ring" => resnet("ring", 1024)?,
        "resnet50-v100-1024gpu-hierarchical" => resnet("hierarchical", 1024)?,
        "resnet50-v100-8192gpu-hierarchical" => resnet("hierarchical", 8192)?,
        "sweep-1000-scenarios" => Work::Sweep(sweep_1000(iterations)?),
        // Narayanan et al. 2021's shape of plan for GPT-3 175B on 1,024 A100s (Selene's nodes).
        "gpt3-175b-a100-1024gpu-plan" => Work::Plan(Box::new(plan_setup(
            "gpt3-175b",
            "dgx-a100-80gb",
            "tp=8,pp=8,dp=16,vp=3,sp=on,recompute=selective",
            1536,
            iterations,
        )?)),
        // The same plan on 16,384 GPUs (dp 256), 16 micro-batches per DP replica (4,096 sequences
        // of 2,048 tokens, 8.4 M tokens a step).
        "gpt3-175b-a100-16384gpu-plan" => Work::Plan(Box::new(plan_setup(
            "gpt3-175b",
            "dgx-a100-80gb",
            "tp=8,pp=8,dp=256,vp=3,sp=on,recompute=selective",
            4096,
            iterations,
        )?)),
        // Llama 3 405B as Meta trained it (Llama 3 paper, Dubey et al. 2024, Table 4: TP 8,
        // PP 16, DP 128 on 16,384 H100s, 16 sequences of 8,192 tokens per DP replica a step),
        // with pp 14 because dagsim splits the 126 layers evenly only, ZeRO-1 and full
        // recomputation to fit 80 GB; DP fills the GPU count (dp = GPUs / 112).
        n if n.starts_with("llama3-405b-h100-rail-") => {
            let dp = gpus_of(n) / 112;
            Work::Plan(Box::new(rail_plan_setup(
                "llama3-405b",
                &format!("tp=8,pp=14,dp={dp},sp=on,zero=1,recompute=full"),
                16 * dp,
                iterations,
                classes_of(n),
            )?))
        }
        // Mixtral 8x22B with expert parallelism: tp 2, pp 8 (7 layers a stage), ep 8 (each GPU of
        // an EP group holds one of the 8 experts), ZeRO-1; 8 sequences of 4,096 tokens per DP
        // replica (dp = GPUs / 16).
        n if n.starts_with("mixtral-8x22b-h100-rail-") => {
            let dp = gpus_of(n) / 16;
            Work::Plan(Box::new(rail_plan_setup(
                "mixtral-8x22b",
                &format!("tp=2,pp=8,dp={dp},ep=8,sp=on,zero=1"),
                8 * dp,
                iterations,
                classes_of(n),
            )?))
        }
        // `dagsim plan --model llama2-7b --topology dgx-h100 --gpus 16 --global-batch 16`: a plan
        // search small enough to time on every change (as `dagsim plan` runs it: pruned by the
        // bound once its best --top are known; `runs` counts the plans simulated).
        "llama2-7b-h100-16gpu-plan-search" => {
            Work::PlanSearch(Box::new(plan_setup("llama2-7b", "dgx-h100", "dp=16", 16, iterations)?))
        }
        "llama2-70b-h100-1024gpu-plan-search" => {
            Work::PlanSearch(Box::new(plan_setup("llama2-70b", "dgx-h100", "dp=1024", 1024, iterations)?))
        }
        other => return Err(crate::Error::invalid("bench case", format!("unknown case `{other}`"))),
    };
    let name = CASES.iter().chain(SCALING_CASES).find(|&&n| n == name).expect("matched above");
    Ok(Case { name, work })
}

/// A transformer plan as `predict --model .. --topology .. --parallel .. --global-batch ..` builds
/// it (micro-batch 1, the model's sequence length).
fn plan_setup(
    model: &str,
    topology: &str,
    spec: &str,
    global_batch: u32,
    iterations: u32,
) -> Result<crate::predict_plan::PlanSetup> {
    let mut scenario = crate::scenario::Scenario::default();
    scenario.workload.model = Some(model.into());
    scenario.iterations = Some(iterations);
    crate::predict_plan::PlanSetup::from_request(crate::predict_plan::PlanRequest {
        scenario: &scenario,
        topology: load_topology(topology)?,
        spec,
        micro_batch: Some(1),
        global_batch: Some(global_batch),
        seq_len: None,
        layers: None,
        matmul_tflops: None,
        gpus: None,
    })
}

/// A transformer plan on the rail-optimised fat-tree ([`H100_RAIL_FAT_TREE`]), grown to the plan's
/// GPU count (the fabric's contention modelled: rails, leaf, spine and core tiers).
fn rail_plan_setup(
    model: &str,
    spec: &str,
    global_batch: u32,
    iterations: u32,
    classes: crate::predict_plan::ReplicaClasses,
) -> Result<crate::predict_plan::PlanSetup> {
    let path = Path::new("topologies/examples/h100-fat-tree.json");
    let topology = crate::hw::topology::parse_topology(H100_RAIL_FAT_TREE, path, false)?;
    let mut scenario = crate::scenario::Scenario::default();
    scenario.workload.model = Some(model.into());
    scenario.iterations = Some(iterations);
    crate::predict_plan::PlanSetup::from_request(crate::predict_plan::PlanRequest {
        scenario: &scenario,
        topology,
        spec,
        micro_batch: Some(1),
        global_batch: Some(global_batch),
        seq_len: None,
        layers: None,
        matmul_tflops: None,
        gpus: None,
    })
    .map(|setup| crate::predict_plan::PlanSetup { replica_classes: classes, ..setup })
}

/// The timeline classes a rail case asks for: approximate when its name says so.
fn classes_of(name: &str) -> crate::predict_plan::ReplicaClasses {
    if name.contains("-approx-") {
        crate::predict_plan::ReplicaClasses::Approximate
    } else {
        crate::predict_plan::ReplicaClasses::Exact
    }
}

/// 1,000 scenarios: ResNet-50 at 4 batch sizes, 10 strategies, 25 GPU counts from 16 to 1,024
/// (whole 4-GPU nodes, evenly spread).
fn sweep_1000(iterations: u32) -> Result<Vec<(Setup, u32)>> {
    let topology = load_topology("v100-cluster")?;
    let strategies = [
        "none",
        "io",
        "wfbp",
        "io+wfbp",
        "io+wfbp+allreduce=hierarchical",
        "io+wfbp+allreduce=tree",
        "io+wfbp+fusion=25M",
        "io+wfbp+fusion=25M+allreduce=hierarchical",
        "io+wfbp+mixed+fp16_speedup=2",
        "io+wfbp+grads=fp16",
    ];
    let counts: Vec<u32> = (0..25).map(|i| (16 + i * 42) / 4 * 4).collect(); // 16, 56, 100, ..., 1024
    let mut out = Vec::with_capacity(1000);
    for batch in [32, 64, 128, 256] {
        let workload = resnet50_v100(batch)?;
        for s in strategies {
            let setup = Setup {
                workload: workload.clone(),
                topology: topology.clone(),
                strategy: Strategy::parse(s)?,
                iterations,
            };
            out.extend(counts.iter().map(|&g| (setup.clone(), g)));
        }
    }
    Ok(out)
}

/// What one timed run measured.
pub struct Measurement {
    pub wall_s: f64,
    pub events: u64,
    pub flows: u64,
    pub tasks: u64,
    /// Simulations run (1, or the number of scenarios of a sweep).
    pub runs: u64,
    /// What a plan's run simulated of its DP replicas (see [`crate::predict_plan::ReplicaReduction`]).
    pub note: Option<String>,
}

/// Times one case: DAG build, engine run (and, for sweeps, the summary) of everything in it.
/// With `symmetric`, setups where one node stands for all are simulated that way (same results).
pub fn measure(case: &Case, symmetric: bool) -> Result<Measurement> {
    let t0 = Instant::now();
    let mut note = None;
    let (events, flows, tasks, runs) = match &case.work {
        Work::Single { setup, gpus } => {
            let sim = setup.simulate_represented(*gpus, Options::default(), symmetric)?;
            (sim.run.events, sim.run.flows, sim.dag.len() as u64, 1)
        }
        Work::Sweep(points) => {
            let preds: Vec<_> = points.par_iter().map(|(s, g)| s.predict_with(*g, symmetric)).collect::<Result<_>>()?;
            (preds.iter().map(|p| p.events).sum(), 0, 0, preds.len() as u64)
        }
        Work::Plan(setup) => {
            let sim = setup.simulate(symmetric, Options::default())?;
            note = Some(sim.replicas.describe());
            (sim.run.events, sim.run.flows, sim.dag.len() as u64, 1)
        }
        Work::PlanSearch(base) => {
            // As `dagsim plan` runs it: until its best --top are known.
            let found = crate::plan_search::search_best(base, Some(crate::plan_search::DEFAULT_TOP), &|_| {})?;
            let simulated = found.simulated as u64;
            (0, 0, 0, simulated)
        }
        Work::RingBesideCopy { gpus } => {
            let (dag, machine) = ring_beside_copy(*gpus)?;
            let run = crate::sim::simulate(&dag, &machine, Options::default())?;
            (run.events, run.flows, dag.len() as u64, 1)
        }
    };
    Ok(Measurement { wall_s: t0.elapsed().as_secs_f64(), events, flows, tasks, runs, note })
}

/// [`Work::RingBesideCopy`]'s DAG and machine: an 80 MB ring all-reduce and a 20 GB copy from the
/// first node's host to the second's, both from the start.
fn ring_beside_copy(gpus: u32) -> Result<(crate::dag::Dag, crate::hw::Machine)> {
    use crate::collective::{Algorithm, CollectiveOp};
    use crate::dag::{DagBuilder, DagMeta, Phase, Task, Work as W};
    let machine = load_topology("k80-cluster")?.instantiate(gpus)?;
    let task =
        |work| Task { work, queue: None, phase: Phase::Forward, gpu: Some(0), iteration: 0, layer: None, priority: 0 };
    let mut b = DagBuilder::new();
    let group = b.add_group((0..gpus).collect());
    let (op, algorithm) = (CollectiveOp::AllReduce, Algorithm::Ring);
    b.add_task(task(W::Collective { group, op, algorithm, bytes: 80_000_000 }));
    let (from, to) = (machine.gpus[0].host, machine.gpus[(gpus as usize - 1).min(4)].host);
    b.add_task(task(W::Transfer { src: from, dst: to, bytes: 20_000_000_000 }));
    let dag = b.build(DagMeta { gpus, iterations: 0, iteration_end: vec![] })?;
    Ok((dag, machine))
}
