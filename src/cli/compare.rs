//! `dagsim compare`: several strategies on one setup, side by side, in ScaleDNN's categories.

use super::exit;
use super::output::{emit, Format};
use super::setup_args::SetupArgs;
use dagsim::compare::{best_fusion_threshold, compare, fusion_candidates, Row, CATEGORIES};
use dagsim::error::{Error, Result};
use dagsim::strategy::Strategy;
use std::io::Write;
use std::path::PathBuf;

const EXAMPLES: &str = "\
Examples:
  dagsim compare --trace traces/alexnet_k80.csv --gpus 4 --batch 128 \\
      --strategies master,master+split,master+split+preload,master+split+preload+weights=3to1
  dagsim compare --trace traces/alexnet_k80.csv --gpus 16 --topology v100-cluster \\
      --strategies none,wfbp,wfbp+mixed+fp16_speedup=1.12,wfbp+fusion=4M,wfbp+fusion=4M+sparse=0.15
  dagsim compare --scenario scenarios/scaledn_alexnet.toml --strategies master,master+split --format csv
  dagsim compare --trace traces/alexnet_titanx_caffe.csv --gpus 16 --strategies wfbp,wfbp+mixed --best-fusion

Columns (seconds per iteration, averaged over GPUs, summing to the iteration time): fp_bp (forward,
backward, update, codecs), gradient_reduce, weight_broadcast, ptop, htod (read + host-to-device),
other (waiting, loss exchange). Overlapped data movement is hidden under the category to its left.
`saving` is the iteration time saved against the first strategy. Strategy syntax: docs/strategies.md.";

#[derive(Debug, clap::Args)]
#[command(about = "Compare strategies side by side (ScaleDNN breakdown, saving vs the first)", after_help = EXAMPLES)]
pub struct Args {
    /// Strategies, comma-separated; the first is the reference for `saving`.
    #[arg(long, value_delimiter = ',', value_name = "SPEC,...", required = true)]
    strategies: Vec<String>,
    #[command(flatten)]
    setup: SetupArgs,
    /// GPU count (default 4, or the scenario's largest).
    #[arg(long, value_name = "N")]
    gpus: Option<u32>,
    /// Give each all-reduce strategy the lazy all-reduce threshold θ that makes it fastest
    /// (searched over none, 64 KiB..256 MiB in powers of 4, and inf).
    #[arg(long)]
    best_fusion: bool,
    #[arg(long, value_enum, default_value_t = Format::Text)]
    format: Format,
    /// Write to FILE instead of stdout (written atomically).
    #[arg(short, long, value_name = "FILE")]
    output: Option<PathBuf>,
}

pub fn run(args: Args) -> Result<u8> {
    let scenario = args.setup.scenario(None)?;
    let gpus = args.gpus.or(scenario.gpus.as_ref().and_then(|g| g.iter().copied().max())).unwrap_or(4);
    if gpus == 0 {
        return Err(Error::invalid("--gpus", "must be at least 1"));
    }
    let mut strategies = args.strategies.iter().map(|s| Strategy::parse(s)).collect::<Result<Vec<_>>>()?;
    let setup = args.setup.setup_of(&scenario)?;
    if args.best_fusion {
        for s in strategies.iter_mut().filter(|s| !s.master && s.mps.is_none() && s.priority_partition.is_none()) {
            let with = dagsim::predict::Setup { strategy: s.clone(), ..setup.clone() };
            s.fusion = best_fusion_threshold(&with, gpus, &fusion_candidates())?.0;
        }
    }
    let rows = compare(&setup, &strategies, gpus)?;
    let title = format!(
        "workload {} (batch {}/GPU) | topology {} | {gpus} GPUs",
        setup.workload.name, setup.workload.batch_per_gpu, setup.topology.name
    );
    emit(args.output.as_deref(), |w| match args.format {
        Format::Text => write_text(w, &title, &rows),
        Format::Csv => write_csv(w, &rows),
        Format::Json => {
            serde_json::to_writer_pretty(&mut *w, &rows)?;
            writeln!(w)
        }
    })?;
    Ok(exit::OK)
}

fn write_text(w: &mut dyn Write, title: &str, rows: &[Row]) -> std::io::Result<()> {
    writeln!(w, "{title}")?;
    let width = rows.iter().map(|r| r.strategy.len()).max().unwrap_or(8).max(8);
    write!(w, "{:<width$} {:>11} {:>8}", "strategy", "iter_time_s", "saving")?;
    for c in CATEGORIES {
        write!(w, " {c:>16}")?;
    }
    writeln!(w, " {:>12}", "extra_mem_MiB")?;
    for r in rows {
        write!(w, "{:<width$} {:>11.6} {:>7.1}%", r.strategy, r.iteration_time_s, r.saving * 100.0)?;
        for v in r.categories {
            write!(w, " {v:>16.6}")?;
        }
        writeln!(w, " {:>12.1}", r.extra_gpu_memory_bytes as f64 / 1048576.0)?;
    }
    Ok(())
}

fn write_csv(w: &mut dyn Write, rows: &[Row]) -> std::io::Result<()> {
    let mut c = csv::Writer::from_writer(w);
    let mut header = vec!["strategy", "gpus", "iteration_time_s", "throughput_samples_per_s", "saving"];
    header.extend(CATEGORIES);
    header.push("extra_gpu_memory_bytes");
    c.write_record(&header)?;
    for r in rows {
        let mut rec = vec![
            r.strategy.clone(),
            r.gpus.to_string(),
            r.iteration_time_s.to_string(),
            r.throughput_samples_per_s.to_string(),
            r.saving.to_string(),
        ];
        rec.extend(r.categories.iter().map(|v| v.to_string()));
        rec.push(r.extra_gpu_memory_bytes.to_string());
        c.write_record(&rec)?;
    }
    c.flush()
}
