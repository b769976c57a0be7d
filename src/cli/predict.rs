//! `dagsim predict`: iteration time, throughput, speedup and breakdown for one or more GPU counts.

use super::exit;
use super::output::{emit, Format};
use super::setup_args::SetupArgs;
use dagsim::error::{Error, Result};
use dagsim::report::{write_csv, write_json, write_text, Prediction};
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
    #[command(flatten)]
    setup: SetupArgs,
    /// GPU counts, comma-separated (default 1,2,4,8,16).
    #[arg(long, value_delimiter = ',', value_name = "N,...")]
    gpus: Option<Vec<u32>>,
    /// Strategy: features joined by `+` (none, io, wfbp, master, mixed, allreduce=..., ...; see docs/strategies.md).
    #[arg(long, value_name = "SPEC")]
    strategy: Option<String>,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    format: Format,
    /// Write to FILE instead of stdout (written atomically).
    #[arg(short, long, value_name = "FILE")]
    output: Option<PathBuf>,
}

pub fn run(args: Args) -> Result<u8> {
    let scenario = args.setup.scenario(args.strategy.as_deref())?;
    let gpus = args.gpus.or(scenario.gpus.clone()).unwrap_or_else(|| vec![1, 2, 4, 8, 16]);
    if gpus.is_empty() || gpus.contains(&0) {
        return Err(Error::invalid("--gpus", "GPU counts must be at least 1"));
    }
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
