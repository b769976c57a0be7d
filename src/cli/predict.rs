//! `dagsim predict`: iteration time, throughput, speedup and breakdown for one or more GPU counts.

use super::exit;
use super::output::{emit, Format};
use super::plan_args::PlanArgs;
use super::setup_args::SetupArgs;
use dagsim::dag::hybrid::Channels;
use dagsim::error::{Error, Result};
use dagsim::hw::load_topology;
use dagsim::predict::DEFAULT_ITERATIONS;
use dagsim::predict_hybrid::{HybridSetup, DEFAULT_HYBRID_TOPOLOGY};
use dagsim::report::{write_csv, write_json, write_text, Prediction};
use dagsim::strategy::hybrid::{HybridTable, Precision};
use std::path::PathBuf;

const EXAMPLES: &str = "\
Examples:
  dagsim predict --trace traces/alexnet_k80.csv --gpus 16
  dagsim predict --trace traces/alexnet_k80.csv --gpus 1,2,4,8,16 --strategy none
  dagsim predict --trace traces/alexnet_k80.csv --gpus 16 --topology v100-cluster --format json
  dagsim predict --scenario scenarios/alexnet_k80_scaling.toml --strategy io -o out.csv --format csv
  dagsim predict --model resnet50 --gpu v100-sxm2 --batch 64 --topology v100-cluster --gpus 1,8
  dagsim predict --trace traces/profiles/pipedream/vgg16/graph.txt --profile-format pipedream --batch 128
  dagsim predict --trace traces/alexnet_k80.csv --gpus 8,16,32 --gpus-per-node 4 --intra pcie3 --inter 10gbe
  dagsim calibrate topologies/measured/abci/allreduce_intra_vnode_4gpu.nccl --topology abci-v -o abci-v.cal.json
  dagsim predict --trace traces/alexnet_k80.csv --gpus 8 --topology abci-v --calibration abci-v.cal.json
  dagsim predict --model gpt3-175b --topology dgx-a100-80gb --parallel tp=8,pp=8,dp=16,vp=3,sp=on,recompute=selective --micro-batch 1 --global-batch 1536

Defaults: topology `k80-cluster` (4 nodes x 4 K80, PCIe 15 GB/s, 10 GbE, NFS 1.1 GB/s; grows by
whole nodes when more GPUs are asked for), strategy `io+wfbp` (Caffe-MPI: I/O overlap and wait-free
backprop), ring all-reduce with times modelled from gradient bytes, 5 iterations (1 warm-up).

Strategies: none (Eq. 2), io (Eq. 3), wfbp, io+wfbp (Eq. 4-5); add +comm=trace to use the trace's
measured communication and data-layer times instead of the link model.

Hybrid data/model parallelism (Krizhevsky's one weird trick, Dettmers Appendix 5) from a hybrid
table instead of a trace or model, on the `dettmers-4gpu` machine unless --topology says otherwise:
  dagsim predict --hybrid traces/dettmers_alexnet_titanx.csv --gpus 1,4
  dagsim predict --hybrid traces/dettmers_alexnet_titanx.csv --gpus 4 --bits 8 --channels per-direction
  dagsim predict --hybrid traces/dettmers_alexnet_titanx.csv --gpus 4 --total-ms 177 --channels shared";

#[derive(Debug, clap::Args)]
#[command(about = "Predict iteration time, throughput and speedup", after_help = EXAMPLES)]
pub struct Args {
    #[command(flatten)]
    setup: SetupArgs,
    /// GPU counts, comma-separated (default 1,2,4,8,16; with --hybrid 1,2,4).
    #[arg(long, value_delimiter = ',', value_name = "N,...")]
    gpus: Option<Vec<u32>>,
    /// Strategy: features joined by `+` (none, io, wfbp, master, mixed, allreduce=..., ...; see docs/strategies.md).
    #[arg(long, value_name = "SPEC")]
    strategy: Option<String>,
    #[command(flatten)]
    hybrid: HybridArgs,
    #[command(flatten)]
    plan: PlanArgs,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    format: Format,
    /// Write to FILE instead of stdout (written atomically).
    #[arg(short, long, value_name = "FILE")]
    output: Option<PathBuf>,
}

/// Flags that describe a workload or a strategy, which a hybrid table replaces. (The hybrid flags
/// conflict with them too, since clap lets a missing `requires` pass when it conflicts with a
/// flag given.)
const NOT_WITH_HYBRID: [&str; 13] = [
    "strategy",
    "trace",
    "model",
    "scenario",
    "nodes",
    "gpus_per_node",
    "intra",
    "inter",
    "calibration",
    "profile_format",
    "batch",
    "sample_bytes",
    "device_sample_bytes",
];

/// The hybrid data/model-parallel scheme, which takes a hybrid table instead of a workload.
#[derive(Debug, clap::Args)]
struct HybridArgs {
    /// Hybrid data/model-parallel scheme from a hybrid table (format in traces/README.md), instead
    /// of a trace or model and a strategy.
    #[arg(long, value_name = "FILE", conflicts_with_all = NOT_WITH_HYBRID)]
    hybrid: Option<PathBuf>,
    /// Word size of the hybrid scheme's exchanged activations and errors (8: Dettmers' 8-bit times).
    #[arg(long, value_name = "BITS", requires = "hybrid", conflicts_with_all = NOT_WITH_HYBRID, value_parser = ["32", "8"])]
    bits: Option<String>,
    /// How the hybrid scheme's exchanges share PCIe: one channel per layer boundary and direction
    /// (Dettmers' accounting; default), one per direction (full duplex), or one shared channel.
    #[arg(long, value_name = "MODEL", requires = "hybrid", conflicts_with_all = NOT_WITH_HYBRID,
          value_parser = ["per-boundary", "per-direction", "shared"])]
    channels: Option<String>,
    /// Replace the table's one-GPU full-pass time (e.g. 177 for the convnet2 kernels).
    #[arg(long, value_name = "MS", requires = "hybrid", conflicts_with_all = NOT_WITH_HYBRID)]
    total_ms: Option<f64>,
}

impl HybridArgs {
    fn setup(&self, path: &std::path::Path, topology: Option<&str>, iterations: Option<u32>) -> Result<HybridSetup> {
        let mut table = HybridTable::read(path)?;
        if let Some(ms) = self.total_ms {
            if !(ms.is_finite() && ms > 0.0) {
                return Err(Error::invalid("--total-ms", format!("`{ms}` is not a positive time")));
            }
            table = table.with_total_ns((ms * 1e6).round() as u64).map_err(|_| {
                Error::invalid("--total-ms", format!("{ms} ms is less than the rows of {} add up to", path.display()))
            })?;
        }
        let precision = match self.bits.as_deref() {
            Some("8") => Precision::Bits8,
            _ => Precision::Bits32,
        };
        let channels = self.channels.as_deref().and_then(Channels::parse).unwrap_or(Channels::PerBoundary);
        let topology = load_topology(topology.unwrap_or(DEFAULT_HYBRID_TOPOLOGY))?;
        let iterations = iterations.unwrap_or(DEFAULT_ITERATIONS);
        Ok(HybridSetup { table, topology, precision, channels, iterations })
    }
}

pub fn run(args: Args) -> Result<u8> {
    if let Some(path) = &args.hybrid.hybrid {
        let setup = args.hybrid.setup(path, args.setup.topology.as_deref(), args.setup.iterations)?;
        // Dettmers' table is measured on 4 GPUs behind one PCIe switch.
        let gpus = gpu_counts(args.gpus.clone(), Some(vec![1, 2, 4]))?;
        let preds = setup.predict_scaling(&gpus)?;
        return write_predictions(&args, &preds);
    }
    if let Some(setup) = args.plan.setup(&args.setup, args.strategy.as_deref(), args.gpus.as_deref())? {
        let pred = setup.predict()?;
        return write_predictions(&args, &[pred]);
    }
    let scenario = args.setup.scenario(args.strategy.as_deref())?;
    let gpus = gpu_counts(args.gpus.clone(), scenario.gpus.clone())?;
    let setup = args.setup.setup_of(&scenario)?;
    if let Some(f) = scenario.workload_source().footprint(0)? {
        if let Some(w) = f.oom_warning(&setup.workload.name) {
            eprintln!("warning: {w}");
        }
    }
    if setup.workload.sample_bytes == 0 {
        eprintln!(
            "note: the trace gives no input sample size, so reading and copying batches costs nothing; \
             pass --sample-bytes to model I/O"
        );
    }
    let preds = setup.predict_scaling(&gpus)?;
    write_predictions(&args, &preds)
}

/// `--gpus`, else `fallback` (the scenario's), else 1,2,4,8,16.
fn gpu_counts(flag: Option<Vec<u32>>, fallback: Option<Vec<u32>>) -> Result<Vec<u32>> {
    let gpus = flag.or(fallback).unwrap_or_else(|| vec![1, 2, 4, 8, 16]);
    if gpus.is_empty() || gpus.contains(&0) {
        return Err(Error::invalid("--gpus", "GPU counts must be at least 1"));
    }
    Ok(gpus)
}

fn write_predictions(args: &Args, preds: &[Prediction]) -> Result<u8> {
    emit(args.output.as_deref(), |w| match args.format {
        Format::Text => write_text(w, preds),
        Format::Csv => write_csv(w, preds),
        Format::Json => write_json(w, preds),
    })?;
    Ok(exit::OK)
}
