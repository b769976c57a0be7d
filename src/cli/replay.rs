//! `dagsim replay --gpu`: simulates one setup for one GPU count, runs the same DAG on this
//! machine's GPUs (proxy kernels, real copies and NCCL collectives, the DAG's edges as events) and
//! prints the measured iteration time beside the prediction.

use super::exit;
use super::output::{emit, Format};
use dagsim::error::{Error, Result};
use dagsim::gpu::replay::{execute, plan, ReplayOptions, ReplayPlan};
use dagsim::scenario::Scenario;
use dagsim::sim::Options;
use std::path::PathBuf;

const EXAMPLES: &str = "\
Examples:
  dagsim replay --gpu --trace traces/alexnet_k80.csv --gpus 2 --topology my-node.json
  dagsim replay --gpu --scenario scenarios/alexnet_k80_scaling.toml --gpus 4 --repeat 10
  dagsim replay --gpu --trace traces/alexnet_k80.csv --gpus 2 --dry-run   # plan only, no GPU

Compute and update tasks run as spin kernels of the trace's time (one block per SM, clock
calibrated at start); host-to-device transfers as pinned memcpys; GPU-GPU transfers as peer
copies; collectives as NCCL calls; storage reads and transfers between hosts wait their
simulated time (not measured). One stream per GPU and DAG queue, DAG edges as CUDA events.
For a fair comparison use a trace measured on this GPU and a topology of this machine
(dagsim calibrate --gpu --topology-out).";

#[derive(Debug, clap::Args)]
#[command(about = "Run a simulated DAG on real GPUs and compare with the prediction (needs --features cuda)", after_help = EXAMPLES)]
pub struct Args {
    /// Replay on this machine's GPUs (the only backend).
    #[arg(long, required = true)]
    gpu: bool,
    /// Layer-wise trace (native CSV or the DAG paper's table format).
    #[arg(long, value_name = "FILE")]
    trace: Option<PathBuf>,
    /// Scenario file (TOML); flags given here override its fields.
    #[arg(long, value_name = "FILE")]
    scenario: Option<PathBuf>,
    /// GPU count to replay (one; default: the scenario's first count, else 1).
    #[arg(long, value_name = "N")]
    gpus: Option<u32>,
    /// Topology preset or file.
    #[arg(long, value_name = "NAME|FILE")]
    topology: Option<String>,
    /// Strategy spec, as for `predict`.
    #[arg(long, value_name = "SPEC")]
    strategy: Option<String>,
    /// Samples per GPU per iteration (overrides the trace).
    #[arg(long, value_name = "N")]
    batch: Option<u32>,
    /// Iterations in the DAG (the first is warm-up; at least 2).
    #[arg(long, value_name = "N")]
    iterations: Option<u32>,
    /// CUDA device ordinals in rank order (default: the first N).
    #[arg(long, value_delimiter = ',', value_name = "N,...")]
    devices: Vec<u32>,
    /// Untimed replays before the timed ones.
    #[arg(long, default_value_t = 1, value_name = "N")]
    warmup: u32,
    /// Timed replays (the median is reported).
    #[arg(long, default_value_t = 5, value_name = "N")]
    repeat: u32,
    /// Build and print the replay plan and the prediction without touching a GPU.
    #[arg(long)]
    dry_run: bool,
    /// Output format (text or json).
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
    if let Some(t) = &args.trace {
        scenario.workload.trace = Some(std::path::absolute(t).unwrap_or(t.clone()));
    }
    if let Some(t) = &args.topology {
        let path = std::path::Path::new(t);
        scenario.machine.topology =
            Some(if path.exists() { std::path::absolute(path).unwrap_or(path.into()) } else { path.into() })
                .map(|p| p.to_string_lossy().into_owned());
    }
    scenario.strategy = args.strategy.clone().or(scenario.strategy);
    scenario.workload.batch_per_gpu = args.batch.or(scenario.workload.batch_per_gpu);
    scenario.iterations = args.iterations.or(scenario.iterations);
    let gpus = args.gpus.or_else(|| scenario.gpus.as_ref().and_then(|g| g.first().copied())).unwrap_or(1);
    if args.repeat == 0 {
        return Err(Error::invalid("--repeat", "must be at least 1"));
    }
    let setup = scenario.setup()?;
    let sim = setup.simulate(gpus, Options::default())?;
    let plan = plan(&sim.dag, &sim.machine, &sim.run)?;
    let nodes = sim.machine.gpus[..gpus as usize].iter().map(|g| g.node).max().map_or(1, |n| n + 1);
    if nodes > 1 {
        eprintln!(
            "note: on topology `{}` these {gpus} GPUs span {nodes} nodes; the replay runs them all on this \
             machine, so the links between nodes are not reproduced",
            setup.topology.name
        );
    }
    let head = Header { workload: &setup.workload.name, strategy: setup.strategy.name(), gpus, plan: &plan };
    if args.dry_run {
        emit(args.output.as_deref(), |w| match args.format {
            Format::Json => writeln!(w, "{}", serde_json::to_string_pretty(&[head.json(None)])?),
            _ => write!(w, "{}", head.text()),
        })?;
        return Ok(exit::OK);
    }
    let opts = ReplayOptions { devices: args.devices, warmup: args.warmup, repetitions: args.repeat };
    let outcome = super::calibrate_gpu::contain_cuda_panics(|| execute(&plan, &opts))?;
    let m = outcome.measured_iteration_s;
    let names: Vec<String> = outcome.devices.iter().map(|d| format!("{} ({})", d.ordinal, d.name)).collect();
    let measured = serde_json::json!({
        "devices": names,
        "measured_iteration_time_s": m.median,
        "measured": m,
        "error": outcome.relative_error(),
        "host_enqueue_s": outcome.enqueue_s,
    });
    if outcome.enqueue_s > 0.5 * outcome.measured_span_s {
        eprintln!(
            "warning: enqueuing the DAG took {:.3} s of host time against {:.3} s measured; the CPU issuing \
             work may be setting the pace (tasks this short are hard to replay one launch each)",
            outcome.enqueue_s, outcome.measured_span_s
        );
    }
    emit(args.output.as_deref(), |w| match args.format {
        Format::Json => writeln!(w, "{}", serde_json::to_string_pretty(&[head.json(Some(measured.clone()))])?),
        _ => {
            write!(w, "{}", head.text())?;
            writeln!(w, "devices:                   {}", names.join(", "))?;
            writeln!(
                w,
                "measured iteration time:   {:.6} s (median of {}; IQR {:.1}%, min {:.6}, max {:.6})",
                m.median,
                m.samples,
                m.relative_spread() * 100.0,
                m.min,
                m.max
            )?;
            writeln!(w, "error (predicted vs measured): {:+.1}%", outcome.relative_error() * 100.0)
        }
    })?;
    Ok(exit::OK)
}

struct Header<'a> {
    workload: &'a str,
    strategy: String,
    gpus: u32,
    plan: &'a ReplayPlan,
}

impl Header<'_> {
    fn text(&self) -> String {
        let c = self.plan.counts();
        format!(
            "replay of {} on {} GPU(s), strategy {}, {} iterations (the first is warm-up)\n\
             steps: {} kernels, {} host copies, {} peer copies, {} collectives, {} stand-ins\n\
             predicted iteration time:  {:.6} s\n",
            self.workload,
            self.gpus,
            self.strategy,
            self.plan.iterations,
            c.kernels,
            c.host_copies,
            c.peer_copies,
            c.collectives,
            c.stand_ins,
            self.plan.predicted_iteration_s
        )
    }

    fn json(&self, measured: Option<serde_json::Value>) -> serde_json::Value {
        let c = self.plan.counts();
        let mut v = serde_json::json!({
            "workload": self.workload,
            "gpus": self.gpus,
            "strategy": self.strategy,
            "iterations": self.plan.iterations,
            "steps": {
                "kernels": c.kernels, "host_copies": c.host_copies, "peer_copies": c.peer_copies,
                "collectives": c.collectives, "stand_ins": c.stand_ins,
            },
            "predicted_iteration_time_s": self.plan.predicted_iteration_s,
            "dagsim_version": env!("CARGO_PKG_VERSION"),
        });
        if let (Some(obj), Some(serde_json::Value::Object(m))) = (v.as_object_mut(), measured) {
            obj.extend(m);
        }
        v
    }
}
