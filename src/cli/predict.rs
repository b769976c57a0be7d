//! `dagsim predict`: iteration time, throughput, speedup and breakdown for one or more GPU counts.

use super::exit;
use super::output::{emit, Format};
use dagsim::error::{Error, Result};
use dagsim::hw::builder::{build_parametric, Parametric};
use dagsim::report::{write_csv, write_json, write_text, Prediction};
use dagsim::scenario::Scenario;
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
  dagsim predict --trace traces/alexnet_k80.csv --gpus 8 --topology abci-v --calibration abci-v.cal.json

Defaults: topology `k80-cluster` (4 nodes x 4 K80, PCIe 15 GB/s, 10 GbE, NFS 1.1 GB/s; grows by
whole nodes when more GPUs are asked for), strategy `io+wfbp` (Caffe-MPI: I/O overlap and wait-free
backprop), ring all-reduce with times modelled from gradient bytes, 5 iterations (1 warm-up).

Strategies: none (Eq. 2), io (Eq. 3), wfbp, io+wfbp (Eq. 4-5); add +comm=trace to use the trace's
measured communication and data-layer times instead of the link model.";

#[derive(Debug, clap::Args)]
#[command(about = "Predict iteration time, throughput and speedup", after_help = EXAMPLES)]
pub struct Args {
    /// Layer-wise trace (native CSV or the DAG paper's table format).
    #[arg(long, value_name = "FILE")]
    trace: Option<PathBuf>,
    /// Scenario file (TOML); flags given here override its fields.
    #[arg(long, value_name = "FILE")]
    scenario: Option<PathBuf>,
    /// GPU counts, comma-separated (default 1,2,4,8,16).
    #[arg(long, value_delimiter = ',', value_name = "N,...")]
    gpus: Option<Vec<u32>>,
    /// Topology preset (k80-cluster, v100-cluster) or file.
    #[arg(long, value_name = "NAME|FILE")]
    topology: Option<String>,
    /// Build the machine from parameters instead of --topology: nodes (default 1).
    #[arg(long, value_name = "N", conflicts_with = "topology")]
    nodes: Option<u32>,
    /// GPUs per node for the built machine (default 4).
    #[arg(long, value_name = "N", conflicts_with = "topology")]
    gpus_per_node: Option<u32>,
    /// Interconnect inside a node: pcie3, pcie4, nvlink, nvswitch (default pcie3).
    #[arg(long, value_name = "NAME", conflicts_with = "topology")]
    intra: Option<String>,
    /// Network between nodes: 10gbe, 25gbe, 100gbe, 100gbe-rdma, ib56, ib100, ib200 (default 10gbe).
    #[arg(long, value_name = "NAME", conflicts_with = "topology")]
    inter: Option<String>,
    /// Calibration file (from `dagsim calibrate`) applied to the topology's links.
    #[arg(long, value_name = "FILE")]
    calibration: Option<PathBuf>,
    /// Strategy: features joined by `+` (none, io, wfbp, master, mixed, allreduce=..., ...; see docs/strategies.md).
    #[arg(long, value_name = "SPEC")]
    strategy: Option<String>,
    /// Read --trace with an importer (pipedream, caffe, bcaffe, kineto) instead of the native reader.
    #[arg(long, value_name = "FORMAT")]
    profile_format: Option<dagsim::workload::import::ProfileFormat>,
    /// Synthesise the workload from the model zoo (see `dagsim trace gen --help`); needs --gpu, --batch.
    #[arg(long, value_name = "NAME", conflicts_with = "trace")]
    model: Option<String>,
    /// GPU for --model (v100-sxm2, v100-pcie, k80, a100, ...).
    #[arg(long, value_name = "NAME", requires = "model")]
    gpu: Option<String>,
    /// Training precision for --model: fp32 or fp16 (mixed precision).
    #[arg(long, value_name = "P", requires = "model")]
    precision: Option<dagsim::workload::Precision>,
    /// Measured single-GPU samples/s at --batch: scales --model's layer times to match it.
    #[arg(long, value_name = "SAMPLES_PER_S", requires = "model")]
    calibrate_throughput: Option<f64>,
    /// Samples per GPU per iteration (overrides the trace).
    #[arg(long, value_name = "N")]
    batch: Option<u32>,
    /// Bytes of one input sample as stored (overrides the trace).
    #[arg(long, value_name = "BYTES")]
    sample_bytes: Option<u64>,
    /// Bytes of one input sample as copied to the GPU (overrides the trace).
    #[arg(long, value_name = "BYTES")]
    device_sample_bytes: Option<u64>,
    /// Iterations to simulate (the first is warm-up).
    #[arg(long, value_name = "N")]
    iterations: Option<u32>,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    format: Format,
    /// Write to FILE instead of stdout (written atomically).
    #[arg(short, long, value_name = "FILE")]
    output: Option<PathBuf>,
}

pub fn run(args: Args) -> Result<u8> {
    let mut scenario = match &args.scenario {
        Some(p) => Scenario::load(p)?,
        None => Scenario::default(),
    };
    // Flags override the scenario; paths given on the command line are relative to the cwd.
    if args.trace.is_some() {
        // A trace on the command line replaces a scenario's model and its synthesis settings.
        let w = &mut scenario.workload;
        (w.model, w.gpu, w.precision, w.optimizer, w.seq_len, w.calibrate_throughput) =
            (None, None, None, None, None, None);
    }
    if let Some(t) = args.trace {
        scenario.workload.trace = Some(std::path::absolute(&t).unwrap_or(t));
    }
    if let Some(t) = args.topology {
        scenario.machine.topology = Some(match std::path::Path::new(&t).exists() {
            true => std::path::absolute(&t).map(|p| p.to_string_lossy().into_owned()).unwrap_or(t),
            false => t,
        });
    }
    if args.strategy.is_some() {
        scenario.strategy = args.strategy;
    }
    if args.batch.is_some() {
        scenario.workload.batch_per_gpu = args.batch;
    }
    if args.profile_format.is_some() {
        scenario.workload.profile_format = args.profile_format;
    }
    if args.model.is_some() {
        (scenario.workload.model, scenario.workload.trace) = (args.model, None);
    }
    if args.gpu.is_some() {
        scenario.workload.gpu = args.gpu;
    }
    if args.precision.is_some() {
        scenario.workload.precision = args.precision;
    }
    if args.calibrate_throughput.is_some() {
        scenario.workload.calibrate_throughput = args.calibrate_throughput;
    }
    if args.sample_bytes.is_some() {
        scenario.workload.sample_bytes = args.sample_bytes;
    }
    if args.device_sample_bytes.is_some() {
        scenario.workload.device_sample_bytes = args.device_sample_bytes;
    }
    if args.iterations.is_some() {
        scenario.iterations = args.iterations;
    }
    let gpus = args.gpus.or(scenario.gpus.clone()).unwrap_or_else(|| vec![1, 2, 4, 8, 16]);
    if gpus.is_empty() || gpus.contains(&0) {
        return Err(Error::invalid("--gpus", "GPU counts must be at least 1"));
    }
    let mut setup = scenario.setup()?;
    if args.nodes.is_some() || args.gpus_per_node.is_some() || args.intra.is_some() || args.inter.is_some() {
        let d = Parametric::default();
        setup.topology = build_parametric(&Parametric {
            nodes: args.nodes.unwrap_or(d.nodes),
            gpus_per_node: args.gpus_per_node.unwrap_or(d.gpus_per_node),
            intra: args.intra.unwrap_or(d.intra),
            inter: args.inter.unwrap_or(d.inter),
            gpu: d.gpu,
        })?;
    }
    if let Some(c) = &args.calibration {
        setup.topology.calibrated = Some(dagsim::hw::Calibration::load(c)?);
    }
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
    emit(args.output.as_deref(), |w| match args.format {
        Format::Text => write_text(w, &preds),
        Format::Csv => write_csv(w, &preds),
        Format::Json => write_json_contract(w, &preds),
    })?;
    Ok(exit::OK)
}

/// One object for one configuration, an array for several (DESIGN.md's JSON contract).
fn write_json_contract(w: &mut dyn std::io::Write, preds: &[Prediction]) -> std::io::Result<()> {
    match preds {
        [one] => {
            serde_json::to_writer_pretty(&mut *w, one)?;
            writeln!(w)
        }
        many => write_json(w, many),
    }
}
