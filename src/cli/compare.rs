//! `dagsim compare`: several strategies on one setup, side by side, in ScaleDNN's categories.

use super::exit;
use super::output::{emit, Format};
use super::setup_args::SetupArgs;
use dagsim::compare::{compare, fastest, fusion_candidates, fusion_search, Row, CATEGORIES};
use dagsim::error::{Error, Result};
use dagsim::report::{rate_cell, ratio_cell, seconds_cell};
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

Columns (seconds per iteration, averaged over GPUs, summing to the iteration time): fp_bp_s (forward,
backward, update, codecs), gradient_reduce_s, weight_broadcast_s, ptop_s, htod_s (read +
host-to-device), other_s (waiting, loss exchange); in JSON, the object `breakdown`. Overlapped data movement is hidden under the category to its left.
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
    /// (searched over none, 64 KiB..256 MiB in powers of 4, and inf; the rest of the spec is
    /// kept). Every θ tried is reported with its iteration time; strategies whose runtime groups
    /// gradients itself are left as given, and said so.
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
    // The θ search per strategy: (row, the spec as given, trials), and what was not searched.
    let mut searched = Vec::new();
    let mut not_searched = Vec::new();
    if args.best_fusion {
        for (i, s) in strategies.iter_mut().enumerate() {
            let why_not = match () {
                _ if s.master => Some("reduces to one master GPU"),
                _ if s.mps.is_some() => Some("shares GPUs (mps=)"),
                _ if s.priority_partition.is_some() => Some("partitions by priority (priority=)"),
                _ if s.runtime.is_some() => Some("its runtime groups the gradients itself"),
                _ => None,
            };
            if let Some(why) = why_not {
                not_searched.push(format!("{} ({why})", s.name()));
                continue;
            }
            let given = s.name();
            let with = dagsim::predict::Setup { strategy: s.clone(), ..setup.clone() };
            let trials = fusion_search(&with, gpus, &fusion_candidates())?;
            s.fusion = fastest(&trials).expect("there are always candidates").threshold;
            searched.push((i, given, trials));
        }
    }
    let mut rows = compare(&setup, &strategies, gpus)?;
    let mut notes = Vec::new();
    for (i, given, trials) in searched {
        let tried: Vec<String> = trials.iter().map(|t| format!("{} {:.6}", t.fusion, t.iteration_time_s)).collect();
        notes.push(format!(
            "fusion search for `{given}` -> `{}` (θ, iteration s): {}",
            rows[i].strategy,
            tried.join(", ")
        ));
        rows[i].fusion_search = trials;
    }
    if !not_searched.is_empty() {
        notes.push(format!("fusion not searched: {}", not_searched.join("; ")));
    }
    let title = format!(
        "workload {} (batch {}/GPU) | topology {} | {gpus} GPUs",
        setup.workload.name, setup.workload.batch_per_gpu, setup.topology.name
    );
    emit(args.output.as_deref(), |w| match args.format {
        Format::Text => {
            write_text(w, &title, &rows)?;
            notes.iter().try_for_each(|n| writeln!(w, "{n}"))
        }
        Format::Csv => {
            // The search is in the `fusion_search` column; what was not searched goes to stderr.
            if args.best_fusion && !not_searched.is_empty() && super::verbosity() >= 0 {
                eprintln!("note: fusion not searched: {}", not_searched.join("; "));
            }
            write_csv(w, &rows, args.best_fusion)
        }
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
    write!(w, "{:<width$} {:>16} {:>8}", "strategy", "iteration_time_s", "saving")?;
    for c in CATEGORIES {
        write!(w, " {:>18}", format!("{c}_s"))?;
    }
    writeln!(w, " {:>21}", "extra_gpu_memory_MiB")?;
    for r in rows {
        write!(w, "{:<width$} {:>16.6} {:>7.1}%", r.strategy, r.iteration_time_s, r.saving * 100.0)?;
        for v in r.categories {
            write!(w, " {v:>18.6}")?;
        }
        writeln!(w, " {:>21.1}", r.extra_gpu_memory_bytes as f64 / 1048576.0)?;
    }
    Ok(())
}

/// CSV; with `searched` (`--best-fusion`), a `fusion_search` column lists each θ tried and its
/// iteration seconds (`none:16.8 64K:16.2 ...`), empty for strategies not searched.
fn write_csv(w: &mut dyn Write, rows: &[Row], searched: bool) -> std::io::Result<()> {
    let mut c = csv::Writer::from_writer(w);
    let mut header: Vec<String> =
        ["strategy", "gpus", "iteration_time_s", "throughput_samples_per_s", "saving"].map(String::from).to_vec();
    header.extend(CATEGORIES.iter().map(|k| format!("{k}_s")));
    header.push("extra_gpu_memory_bytes".into());
    if searched {
        header.push("fusion_search".into());
    }
    c.write_record(&header)?;
    for r in rows {
        let mut rec = vec![
            r.strategy.clone(),
            r.gpus.to_string(),
            seconds_cell(r.iteration_time_s),
            rate_cell(r.throughput_samples_per_s),
            ratio_cell(r.saving),
        ];
        rec.extend(r.categories.iter().map(|v| seconds_cell(*v)));
        rec.push(r.extra_gpu_memory_bytes.to_string());
        if searched {
            let tried: Vec<String> =
                r.fusion_search.iter().map(|t| format!("{}:{}", t.fusion, seconds_cell(t.iteration_time_s))).collect();
            rec.push(tried.join(" "));
        }
        c.write_record(&rec)?;
    }
    c.flush()
}
