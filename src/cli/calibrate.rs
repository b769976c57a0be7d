//! `dagsim calibrate`: fits link latency and bandwidth curves to benchmark outputs (nccl-tests, OSU)
//! on a topology, prints the model's error at every measured size, and writes a calibration file
//! that `dagsim predict --calibration` and topology files accept.

use super::exit;
use super::output::{emit, Format};
use dagsim::calibrate::collective_fit::{check, fit_efficiency, fit_network, CollectiveFitOptions, ModelFit};
use dagsim::calibrate::nccl_fit::fit_allreduce_nccl;
use dagsim::calibrate::p2p::{fit_p2p, read_p2p};
use dagsim::calibrate::{fit_allreduce, read_measurement, summarize, Fit, FitOptions, Measurement};
use dagsim::collective::{Algorithm, CollectiveModel, CollectiveOp};
use dagsim::error::{Error, Result};
use dagsim::hw::calibration::{Calibration, FitPoint};
use dagsim::hw::{load_topology, LinkKind, Topology};
use dagsim::report::ratio_cell;
use std::io::Write;
use std::path::PathBuf;

const EXAMPLES: &str = "\
Examples:
  dagsim calibrate topologies/measured/abci/allreduce_intra_vnode_4gpu.nccl --topology abci-v -o abci-v.cal.json
  dagsim calibrate topologies/measured/abci/allreduce_intra_vnode_4gpu.nccl --topology abci-v --hold-out
  dagsim calibrate topologies/measured/tartan/dgx1_p2p_ascending.txt --topology dgx1-p100 --kind nvlink \\
      -o dgx1.cal.json
  dagsim predict --trace traces/alexnet_k80.csv --gpus 8 --topology abci-v --calibration abci-v.cal.json

On top of an earlier calibration (--calibration), with the engine in the loop:
  dagsim calibrate topologies/measured/abci/bcast_intra_vnode_4gpu.nccl --topology abci-v \\
      --calibration abci-v.cal.json -o bcast.cal.json
  dagsim calibrate topologies/measured/abci/allreduce_inter_vnode_2node.nccl --topology abci-v \\
      --calibration abci-v.cal.json --algorithm hierarchical -o abci-v-2node.cal.json
  dagsim calibrate topologies/measured/abci/allreduce_inter_vnode_8node.nccl --topology abci-v \\
      --calibration abci-v-2node.cal.json --algorithm hierarchical --check

Reads nccl-tests tables (rank count and hosts from their `# Rank` lines) and OSU latency tables
(give --gpus and --nodes). Fits the links of one kind (default: the slowest kind on the ring's
routes) to the measured ring all-reduce, then simulates every measured size on the calibrated
machine and prints measured vs model time. With --hold-out, only every other size is fitted and
the rest are predictions. The summary gives median and worst |error| for 1 KiB..32 MiB.

Other collectives (broadcast, reduce; or an all-reduce with --efficiency) get an efficiency e:
the operation, run with --algorithm (default auto, the NCCL-like choice) on the links as
--calibration gives them, moves bytes/e; e minimises the squared relative error over the sizes
from --fit-from (default 1 MiB, bandwidth-bound) up. An all-reduce over several hosts fits one
latency and one flat rate to the links between nodes (--kind, default the network's kind) over
sizes from --fit-from (default 1 KiB), keeping the links inside nodes from --calibration.
--check fits nothing: it simulates the measurement on the calibrated machine (a prediction).
The written calibration keeps --calibration's entries and adds or replaces the fitted one.

GPU-to-GPU matrices (CUDA p2pBandwidthLatencyTest output, or Tartan's per-size blocks) calibrate
the links of --kind (default nvlink) between directly joined GPU pairs: per pair from the plain
form, one curve per kind from the per-size form, checked by simulating each pair and size.

With --gpu (a build with `--features cuda`), measures this machine instead:
  dagsim calibrate --gpu -o cal.json
  dagsim calibrate --gpu --devices 0,1 --repeat 50 -o cal.json \\
      --topology-out my-node.json --base-topology v100-cluster
  dagsim calibrate --gpu --from cal.json --topology-out my-node.json --base-topology k80-cluster
  dagsim calibrate --gpu --from cal.json --calibration-out links.cal.json --nccl-table ar.nccl
  dagsim predict --trace traces/alexnet_k80.csv --topology my-node.json --gpus 1,2,4

Measures with CUDA events (warm-up runs, then repetitions summarised by median and IQR):
GEMM time per dtype and square size (cuBLAS), host<->device copies pinned and pageable,
peer copies for every ordered GPU pair, NCCL all-reduce over all chosen GPUs. The file also
holds the fits: TFLOP/s, and latency, bandwidth and bandwidth curve per link.

Outputs for predict: --topology-out takes the GPU-host link from the pinned host-to-device
fit, a direct GPU-GPU link from the peer fit when peers beat the host link by 1.5x, and
network and storage from --base-topology (not measured). --calibration-out writes the link
fits with their curves in the shared calibration format (predict --calibration), and
--nccl-table the all-reduce as an nccl-tests table for `dagsim calibrate`.";

#[derive(Debug, clap::Args)]
#[command(about = "Fit link latency and bandwidth curves to benchmark outputs", after_help = EXAMPLES)]
pub struct Args {
    /// Benchmark output (nccl-tests or OSU collective table, or a GPU-to-GPU matrix).
    #[arg(value_name = "FILE", required_unless_present = "gpu")]
    input: Option<PathBuf>,
    /// Topology preset or file the benchmark ran on.
    #[arg(long, value_name = "NAME|FILE", required_unless_present = "gpu")]
    topology: Option<String>,
    /// Measure this machine's GPUs instead of reading a file (needs a build with `--features cuda`).
    #[arg(long, conflicts_with_all = ["input", "kind", "hold_out", "ranks", "hosts", "calibration", "check"])]
    gpu: bool,
    #[cfg(feature = "cuda")]
    #[command(flatten, next_help_heading = "With --gpu")]
    gpu_args: super::calibrate_gpu::Args,
    /// Link kind to fit (pcie, nvlink, nvswitch, qpi, ethernet, infiniband).
    #[arg(long, value_name = "KIND")]
    kind: Option<String>,
    /// Fit every other size only and predict the others.
    #[arg(long)]
    hold_out: bool,
    /// GPUs (ranks) that ran, when the file does not say (OSU); `--gpus` as in `collective`,
    /// `--ranks` is its old name.
    #[arg(long = "gpus", alias = "ranks", value_name = "N")]
    ranks: Option<u32>,
    /// Nodes (hosts) the GPUs ran on, when the file does not say (OSU); `--hosts` is its old name.
    #[arg(long = "nodes", alias = "hosts", value_name = "N")]
    hosts: Option<u32>,
    /// Calibration to start from (links inside nodes, other efficiencies); kept in the output.
    #[arg(long, value_name = "FILE")]
    calibration: Option<PathBuf>,
    /// Algorithm the model runs the measured collective with (efficiency and multi-node fits).
    #[arg(long, value_name = "NAME", default_value = "auto")]
    algorithm: String,
    /// Fit an all-reduce efficiency instead of links.
    #[arg(long, conflicts_with = "check")]
    efficiency: bool,
    /// Smallest size (bytes) the efficiency or multi-node fit uses [default: 1 MiB for an
    /// efficiency, 1 KiB for links between nodes].
    #[arg(long, value_name = "BYTES")]
    fit_from: Option<u64>,
    /// Fit nothing: simulate the measurement on the calibrated machine and print the errors.
    #[arg(long)]
    check: bool,
    /// Format of the per-point report on stdout.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    format: Format,
    /// Write the calibration file here (written atomically).
    #[arg(short, long, value_name = "FILE")]
    output: Option<PathBuf>,
    #[command(flatten)]
    collectives: super::setup_args::CollectiveArgs,
}

/// Sizes the summary covers: 1 KiB to 32 MiB.
const SUMMARY_RANGE: (u64, u64) = (1 << 10, 32 << 20);

pub fn run(args: Args) -> Result<u8> {
    if args.gpu {
        #[cfg(feature = "cuda")]
        return super::calibrate_gpu::run(args.gpu_args, args.output.as_deref());
        #[cfg(not(feature = "cuda"))]
        return Err(Error::invalid(
            "--gpu",
            "this dagsim was built without GPU support; build it with `cargo build --release --features cuda`",
        ));
    }
    let (Some(input), Some(topology)) = (args.input.clone(), args.topology.clone()) else {
        return Err(Error::invalid("calibrate", "give a benchmark output FILE and --topology (or --gpu)"));
    };
    let kind = match &args.kind {
        Some(k) => {
            Some(LinkKind::parse(k).ok_or_else(|| Error::invalid("--kind", format!("unknown link kind `{k}`")))?)
        }
        None => None,
    };
    let mut topology = load_topology(&topology)?;
    args.collectives.apply(&mut topology, &Default::default())?;
    if is_p2p_matrix(&input)? {
        return run_p2p(&args, &input, &topology, kind.unwrap_or(LinkKind::Nvlink));
    }
    let measurement = read_measurement(&input, None)?;
    if args.calibration.is_some() || args.check || args.efficiency || measurement.op != CollectiveOp::AllReduce {
        return run_on_top(&args, measurement, &topology, kind);
    }
    if measurement.hosts > 1 || args.hosts.is_some_and(|h| h > 1) {
        return Err(Error::invalid(
            "calibrate",
            format!(
                "{}: an all-reduce over several hosts fits the links between nodes on top of the links inside \
                 them: give --calibration with a single-node fit",
                input.display()
            ),
        ));
    }
    let opts = FitOptions { kind, hold_out: args.hold_out, ranks: args.ranks, hosts: args.hosts };
    // Under the NCCL model the fit runs through it (link rate and transport hop latency); the
    // idealised ring's size-by-size inversion stays the fit of the ideal model.
    let fit = match topology.collectives {
        CollectiveModel::Nccl(_) => fit_allreduce_nccl(&topology, &measurement, &opts)?,
        CollectiveModel::Ideal => fit_allreduce(&topology, &measurement, &opts)?,
    };
    report(&args, &fit.points, &fit.calibration, |w| write_text(w, &fit))
}

/// Prints the per-point report (`text` writes the text form) and writes the calibration to `-o`.
fn report(
    args: &Args,
    points: &[FitPoint],
    calibration: &Calibration,
    text: impl FnOnce(&mut dyn Write) -> std::io::Result<()>,
) -> Result<u8> {
    emit(None, |w| match args.format {
        Format::Text => text(w),
        Format::Csv => write_csv(w, points),
        Format::Json => {
            serde_json::to_writer_pretty(&mut *w, points)?;
            writeln!(w)
        }
    })?;
    if let Some(path) = &args.output {
        emit(Some(path), |w| w.write_all(calibration.to_json().as_bytes()))?;
    }
    Ok(exit::OK)
}

/// Efficiency, multi-node and check runs: all on top of `--calibration` (or the topology alone).
fn run_on_top(args: &Args, mut m: Measurement, topology: &Topology, kind: Option<LinkKind>) -> Result<u8> {
    let algorithm = Algorithm::parse(&args.algorithm)
        .ok_or_else(|| Error::invalid("--algorithm", format!("unknown algorithm `{}`", args.algorithm)))?;
    if args.hold_out {
        return Err(Error::invalid("--hold-out", "applies to the link fit of a single-node all-reduce only"));
    }
    m.ranks = args.ranks.unwrap_or(m.ranks);
    m.hosts = args.hosts.unwrap_or(m.hosts.max(1));
    if m.ranks < 2 {
        return Err(Error::invalid(
            "--gpus",
            format!("{}: the file does not say how many ranks ran; give --gpus (at least 2)", m.input),
        ));
    }
    let base = args.calibration.as_deref().map(Calibration::load).transpose()?;
    let efficiency = args.efficiency || m.op != CollectiveOp::AllReduce;
    let from = args.fit_from.unwrap_or(if efficiency { 1 << 20 } else { 1 << 10 });
    let opts = CollectiveFitOptions { algorithm, fit_range: (from, u64::MAX), kind };
    let fit = if args.check {
        check(topology, base.as_ref(), &m, algorithm)?
    } else if efficiency {
        fit_efficiency(topology, base.as_ref(), &m, &opts)?
    } else if m.hosts > 1 {
        fit_network(topology, base.as_ref(), &m, &opts)?
    } else {
        return Err(Error::invalid(
            "--calibration",
            format!(
                "{}: a single-node all-reduce fits links from scratch; drop --calibration, or give --efficiency \
                 or --check",
                m.input
            ),
        ));
    };
    report(args, &fit.points, &fit.calibration, |w| write_model_text(w, &fit))
}

/// One line per size: measured and predicted time and the error; `held_tag` marks held-out points.
fn write_points(w: &mut dyn Write, points: &[FitPoint], held_tag: &str) -> std::io::Result<()> {
    writeln!(w, "{:>12} {:>12} {:>12} {:>8}", "bytes", "measured_us", "predicted_us", "error")?;
    for p in points {
        let tag = if p.held_out { held_tag } else { "" };
        writeln!(
            w,
            "{:>12} {:>12.2} {:>12.2} {:>7.1}%  {tag}",
            p.bytes,
            p.measured_us,
            p.predicted_us,
            100.0 * p.error
        )?;
    }
    Ok(())
}

fn write_model_text(w: &mut dyn Write, fit: &ModelFit) -> std::io::Result<()> {
    writeln!(w, "{}", fit.headline)?;
    let all_held = fit.points.iter().all(|p| p.held_out);
    write_points(w, &fit.points, if all_held { "" } else { "not fitted" })?;
    let (lo, hi) = SUMMARY_RANGE;
    let [fitted, other] = fit.summary(lo, hi);
    let all: Vec<FitPoint> = fit.points.iter().map(|p| FitPoint { held_out: false, ..p.clone() }).collect();
    let [every, _] = summarize(&all, lo, hi);
    let lines = if all_held {
        [("predicted sizes", other), ("", None), ("", None)]
    } else {
        [("fitted sizes", fitted), ("sizes not fitted", other), ("all sizes", every)]
    };
    for (name, s) in lines {
        if let Some((median, worst)) = s {
            writeln!(w, "{name} 1 KiB..32 MiB: median |error| {:.1}%, worst {:.1}%", 100.0 * median, 100.0 * worst)?;
        }
    }
    Ok(())
}

/// GPU-to-GPU matrices: p2pBandwidthLatencyTest output or Tartan's per-size blocks.
fn is_p2p_matrix(path: &std::path::Path) -> Result<bool> {
    let text = std::fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
    Ok(text.contains("P2P=Enabled") || text.lines().any(|l| l.starts_with("===== ")))
}

fn run_p2p(args: &Args, input: &std::path::Path, topology: &dagsim::hw::Topology, kind: LinkKind) -> Result<u8> {
    let table = read_p2p(input, kind)?;
    let (calibration, checks) = fit_p2p(topology, &table, kind)?;
    emit(None, |w| {
        if args.format == Format::Json {
            serde_json::to_writer_pretty(&mut *w, &checks)?;
            return writeln!(w);
        }
        if args.format == Format::Csv {
            writeln!(w, "from,to,bytes,measured_us,predicted_us,error")?;
        } else {
            writeln!(
                w,
                "{:>10} {:>10} {:>12} {:>12} {:>12} {:>8}",
                "from", "to", "bytes", "measured_us", "predicted_us", "error"
            )?;
        }
        for c in &checks {
            if args.format == Format::Csv {
                let (m, o, e) = (c.measured_us, c.predicted_us, ratio_cell(c.error()));
                writeln!(w, "{},{},{},{m:.3},{o:.3},{e}", c.from, c.to, c.bytes)?;
            } else {
                let (f, t, b, m, o, e) = (&c.from, &c.to, c.bytes, c.measured_us, c.predicted_us, 100.0 * c.error());
                writeln!(w, "{f:>10} {t:>10} {b:>12} {m:>12.2} {o:>12.2} {e:>7.1}%")?;
            }
        }
        let mut errors: Vec<f64> = checks
            .iter()
            .filter(|c| (SUMMARY_RANGE.0..=SUMMARY_RANGE.1).contains(&c.bytes))
            .map(|c| c.error().abs())
            .collect();
        errors.sort_by(f64::total_cmp);
        if args.format == Format::Text && !errors.is_empty() {
            let (median, worst) = (errors[errors.len() / 2], errors[errors.len() - 1]);
            writeln!(
                w,
                "pairs x sizes 1 KiB..32 MiB: median |error| {:.1}%, worst {:.1}%",
                100.0 * median,
                100.0 * worst
            )?;
        } else if args.format == Format::Text {
            writeln!(
                w,
                "{} direct {} links calibrated (one size: nothing to check beyond the fit)",
                calibration.links.len(),
                kind.name()
            )?;
        }
        Ok(())
    })?;
    if let Some(path) = &args.output {
        emit(Some(path), |w| w.write_all(calibration.to_json().as_bytes()))?;
    }
    Ok(exit::OK)
}

fn write_text(w: &mut dyn Write, fit: &Fit) -> std::io::Result<()> {
    let link = &fit.calibration.links[0];
    if fit.calibration.nccl.is_empty() {
        writeln!(
            w,
            "fitted {} links: latency {:.3} us, {} curve points",
            fit.kind.name(),
            link.latency_us,
            link.bandwidth.len()
        )?;
    } else {
        let hops: Vec<String> = fit
            .calibration
            .nccl
            .iter()
            .map(|n| format!("{} +{:.3} us/hop", n.transport.key(), n.hop_latency_us))
            .chain(
                fit.calibration
                    .nccl_protocols
                    .iter()
                    .map(|p| format!("{} +{:.3} us/call, rate x{:.4}", p.protocol, p.start_us, p.rate_factor)),
            )
            .chain(fit.calibration.nccl_channel_us.map(|c| format!("+{c:.3} us/call per channel beyond the first")))
            .collect();
        writeln!(
            w,
            "fitted through the NCCL model: {} links {:.3} GB/s (flat); {}",
            fit.kind.name(),
            link.bandwidth[0].gb_s,
            hops.join(", ")
        )?;
    }
    write_points(w, &fit.points, "held out")?;
    let [fitted, held] = fit.summary(SUMMARY_RANGE.0, SUMMARY_RANGE.1);
    for (name, s) in [("fitted", fitted), ("held out", held)] {
        if let Some((median, worst)) = s {
            writeln!(
                w,
                "{name} sizes 1 KiB..32 MiB: median |error| {:.1}%, worst {:.1}%",
                100.0 * median,
                100.0 * worst
            )?;
        }
    }
    Ok(())
}

fn write_csv(w: &mut dyn Write, points: &[FitPoint]) -> std::io::Result<()> {
    writeln!(w, "input,op,gpus,bytes,measured_us,predicted_us,error,held_out")?;
    for p in points {
        writeln!(
            w,
            "{},{},{},{},{:.3},{:.3},{},{}",
            p.input,
            p.op.name(),
            p.ranks,
            p.bytes,
            p.measured_us,
            p.predicted_us,
            ratio_cell(p.error),
            p.held_out
        )?;
    }
    Ok(())
}
