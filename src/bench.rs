//! Benchmark cases shared by `dagsim bench` and the criterion benches, so the numbers in README
//! come from the same code users can run.

use crate::hw::load_topology;
use crate::predict::Setup;
use crate::sim::Options;
use crate::strategy::Strategy;
use crate::workload::{read_trace_str, Layer, Stat, TraceFormat, Workload};
use crate::Result;
use std::path::Path;
use std::time::Instant;

/// The shipped AlexNet/K80 trace, compiled in so benchmarks run from any directory.
pub const ALEXNET_K80: &str = include_str!("../traces/alexnet_k80.csv");

/// The AlexNet K80 workload.
pub fn alexnet_k80() -> Workload {
    read_trace_str(ALEXNET_K80, Path::new("traces/alexnet_k80.csv"), TraceFormat::Auto).expect("shipped trace parses")
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
    }
}

/// A named benchmark case.
pub struct Case {
    pub name: &'static str,
    pub setup: Setup,
    pub gpus: u32,
}

/// The standard cases: AlexNet on 16 GPUs; a 160-layer trace on 1,024 GPUs (flat ring).
pub fn cases(iterations: u32) -> Result<Vec<Case>> {
    let topo = load_topology("k80-cluster")?;
    let strategy = Strategy::default();
    Ok(vec![
        Case {
            name: "alexnet-k80-16gpu",
            setup: Setup { workload: alexnet_k80(), topology: topo.clone(), strategy: strategy.clone(), iterations },
            gpus: 16,
        },
        Case {
            name: "synthetic160-1024gpu-ring",
            setup: Setup { workload: synthetic(160), topology: load_topology("v100-cluster")?, strategy, iterations },
            gpus: 1024,
        },
    ])
}

/// What one timed run measured.
pub struct Measurement {
    pub wall_s: f64,
    pub events: u64,
    pub flows: u64,
    pub tasks: usize,
}

/// Times one full simulation (DAG build and engine run) of a case.
pub fn measure(case: &Case) -> Result<Measurement> {
    let t0 = Instant::now();
    let sim = case.setup.simulate(case.gpus, Options::default())?;
    let wall_s = t0.elapsed().as_secs_f64();
    Ok(Measurement { wall_s, events: sim.run.events, flows: sim.run.flows, tasks: sim.dag.len() })
}
