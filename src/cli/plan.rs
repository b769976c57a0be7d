//! `dagsim plan`: the fastest parallel plans of a transformer on a machine that fit in memory.

use super::output::{emit, Format};
use super::setup_args::SetupArgs;
use super::{exit, plan_args::ClassesArg, plan_args::PlanArgs};
use dagsim::error::{Error, Result};
use dagsim::plan_search::{search_best, Candidate, Progress, Search};
use dagsim::report::{rate_cell, ratio_cell, seconds_cell};
use std::io::{IsTerminal, Write};
use std::path::PathBuf;

const EXAMPLES: &str = "\
Examples:
  dagsim plan --model llama2-7b --topology dgx-a100 --gpus 16 --global-batch 32 --top 5
  dagsim plan --model llama2-7b --topology dgx-a100 --gpus 8 --global-batch 16 --format csv -o plans.csv

Every plan of tp (inside a node, dividing the heads), pp (dividing the layers; vp 2 where it
divides them too), cp (2 cp dividing the sequence), micro-batch 1/2/4/8, sp, recompute
none/selective/full and ZeRO-1/2/3 is checked
for memory; those that fit are simulated in parallel, in increasing order of a lower bound on their
step time, until no plan left can enter the best --top (the rest are pruned by that bound;
--exhaustive simulates them all), and ranked by step time. Text shows the best --top; CSV and JSON
list every plan: simulated, pruned with their bound, or not fitting with their memory.
docs/parallel.md.";

#[derive(Debug, clap::Args)]
#[command(about = "Search the parallel plans of a transformer for the fastest that fit in memory", after_help = EXAMPLES)]
pub struct Args {
    #[command(flatten)]
    setup: SetupArgs,
    /// GPU count.
    #[arg(long, value_name = "N")]
    gpus: u32,
    /// Sequences per iteration over all data-parallel ranks.
    #[arg(long, value_name = "N")]
    global_batch: u32,
    /// Plans shown in text output; the search simulates until no plan left can be among them.
    #[arg(long, value_name = "K", default_value_t = dagsim::plan_search::DEFAULT_TOP)]
    top: usize,
    /// Simulate every plan that fits, not only until the best --top are known.
    #[arg(long)]
    exhaustive: bool,
    /// How DP replicas stand for each other on a fat-tree fabric (as `predict --replica-classes`).
    #[arg(long, value_enum, value_name = "MODE", default_value_t = ClassesArg::Exact)]
    replica_classes: ClassesArg,
    #[arg(long, value_enum, default_value_t = Format::Text)]
    format: Format,
    /// Write to FILE instead of stdout (written atomically).
    #[arg(short, long, value_name = "FILE")]
    output: Option<PathBuf>,
}

pub fn run(args: Args) -> Result<u8> {
    if args.gpus == 0 || args.global_batch == 0 {
        return Err(Error::invalid("--gpus / --global-batch", "must be at least 1"));
    }
    // The base setup: data parallelism over every GPU, only to resolve model, GPU and machine.
    let flags = PlanArgs {
        parallel: Some(format!("dp={}", args.gpus)),
        micro_batch: Some(1),
        global_batch: Some(args.gpus),
        matmul_tflops: None,
        layers: None,
        replica_classes: args.replica_classes,
    };
    let Some(mut base) = flags.setup(&args.setup, None, Some(&[args.gpus]))? else { return Ok(exit::BAD_INPUT) };
    base.plan.global_batch = args.global_batch;
    let bar = if super::verbosity() >= 0 && std::io::stderr().is_terminal() {
        let bar = indicatif::ProgressBar::new(0);
        bar.set_style(
            indicatif::ProgressStyle::with_template("{bar:40} {pos}/{len} plans that fit simulated  {elapsed}")
                .expect("the template is valid"),
        );
        bar
    } else {
        indicatif::ProgressBar::hidden()
    };
    let count = dagsim::plan_search::enumerate(&base, {
        let m = base.topology.instantiate(args.gpus)?;
        dagsim::predict_plan::gpus_per_node(&m)
    })
    .len();
    if count == 0 {
        return Err(Error::invalid(
            "--gpus",
            format!(
                "no plan of {} divides {} GPUs and a global batch of {}",
                base.model.name, args.gpus, args.global_batch
            ),
        ));
    }
    let top = (!args.exhaustive).then_some(args.top);
    let found = search_best(&base, top, &|p| match p {
        Progress::Fit(n) => bar.set_length(n as u64),
        Progress::Simulated => bar.inc(1),
    })?;
    bar.finish_and_clear();
    emit(args.output.as_deref(), |w| match args.format {
        Format::Text => write_text(w, &found, args.top),
        Format::Json => {
            serde_json::to_writer_pretty(&mut *w, &found.candidates)?;
            writeln!(w)
        }
        Format::Csv => write_csv(w, &found.candidates),
    })?;
    Ok(exit::OK)
}

fn write_text(w: &mut dyn Write, search: &Search, top: usize) -> std::io::Result<()> {
    let found = &search.candidates;
    let gib = |b: u64| b as f64 / (1u64 << 30) as f64;
    writeln!(
        w,
        "{} plans: {} fit in memory ({} simulated, {} pruned by bound), {} do not fit",
        search.enumerated,
        search.fit,
        search.simulated,
        search.pruned,
        search.enumerated - search.fit
    )?;
    writeln!(
        w,
        "{:<64} {:>11} {:>20} {:>6} {:>18} {:>15} {:>9} {:>9} {:>9}",
        "plan",
        "step_time_s",
        "tokens_per_s_per_gpu",
        "mfu",
        "memory_per_gpu_GiB",
        "bubble_fraction",
        "tp_comm_s",
        "pp_comm_s",
        "dp_comm_s"
    )?;
    for c in found.iter().filter(|c| c.report.is_some()).take(top) {
        let r = c.report.as_ref().expect("filtered");
        writeln!(
            w,
            "{:<64} {:>11.4} {:>20.1} {:>5.1}% {:>18.1} {:>14.1}% {:>9.3} {:>9.3} {:>9.3}",
            c.plan,
            r.step_time_s,
            r.tokens_per_s_per_gpu,
            100.0 * r.mfu,
            gib(c.memory),
            100.0 * r.bubble_fraction,
            r.breakdown.tp_comm,
            r.breakdown.pp_comm,
            r.breakdown.dp_comm
        )?;
    }
    Ok(())
}

fn write_csv(w: &mut dyn Write, found: &[Candidate]) -> std::io::Result<()> {
    let mut out = csv::Writer::from_writer(w);
    out.write_record([
        "plan",
        "fits",
        "memory_per_gpu_bytes",
        "memory_capacity_bytes",
        "step_time_s",
        "tokens_per_s_per_gpu",
        "mfu",
        "bubble_fraction",
        "tp_comm_s",
        "pp_comm_s",
        "dp_comm_s",
        "error_message",
        "step_time_lower_bound_s",
        "pruned",
    ])?;
    for c in found {
        let f = |v: Option<f64>, cell: fn(f64) -> String| v.map(cell).unwrap_or_default();
        let r = c.report.as_ref();
        out.write_record([
            c.plan.clone(),
            c.fits.to_string(),
            c.memory.to_string(),
            c.capacity.to_string(),
            f(r.map(|r| r.step_time_s), seconds_cell),
            f(r.map(|r| r.tokens_per_s_per_gpu), rate_cell),
            f(r.map(|r| r.mfu), ratio_cell),
            f(r.map(|r| r.bubble_fraction), ratio_cell),
            f(r.map(|r| r.breakdown.tp_comm), seconds_cell),
            f(r.map(|r| r.breakdown.pp_comm), seconds_cell),
            f(r.map(|r| r.breakdown.dp_comm), seconds_cell),
            c.error.clone().unwrap_or_default(),
            f(c.bound, seconds_cell),
            c.pruned.to_string(),
        ])?;
    }
    out.flush()
}
