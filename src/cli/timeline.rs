//! `dagsim timeline`: simulate one configuration and write its timeline as a Chrome/Perfetto trace
//! (or the task spans as CSV, or a text summary), optionally with a Gantt chart of one iteration.

use super::exit;
use super::output::{emit, Format};
use super::setup_args::SetupArgs;
use dagsim::error::{Error, Result};
use dagsim::report::critical::critical_path;
use dagsim::report::perfetto::{trace_stats, write_trace, Arrows, Detail, TraceOptions, TraceStats};
use dagsim::report::plot::{gantt_chart, gantt_rows};
use dagsim::sim::Options;
use std::path::PathBuf;

const EXAMPLES: &str = "\
Examples:
  dagsim timeline --trace traces/alexnet_k80.csv --gpus 4 -o run.json
      then open run.json in https://ui.perfetto.dev or Chrome DevTools' Performance panel
  dagsim timeline --trace traces/alexnet_k80.csv --gpus 8 --topology v100-cluster --gantt gantt.png -o run.json
  dagsim timeline --scenario scenarios/alexnet_k80_scaling.toml --gpus 4 --format csv -o spans.csv
  dagsim timeline --trace traces/alexnet_k80.csv --gpus 4 --format text
  dagsim timeline --model resnet50 --gpu v100-sxm2 --batch 64 --topology v100-cluster --gpus 1024 \\
      --iterations 2 --ranks 0-7 -o r50-1024-node0.json     # one node of a 1,024-GPU run
  dagsim timeline --model resnet50 --gpu v100-sxm2 --batch 64 --topology v100-cluster --gpus 32 \\
      --iterations 2 --ranks 0-3 --detail links -o r50-32-node0.json

Large runs: --iterations N simulates (and shows) fewer iterations (the first is warm-up), --ranks
shows some GPUs (and their hosts and links) of a run that still simulates all, and --detail drops
the per-transfer events (links: keep link utilisation; tasks: spans only, which also lets the
engine time collectives without recording each transfer). Above 64 GPUs --detail defaults to
tasks and --arrows to critical. The size is estimated before anything is written; past --max-size
the command stops and says what to cut.

The trace has one process per GPU (tracks: compute stream, communicator, storage read, H2D copy
engine), one per host (the transfers leaving it, with a utilisation counter per link), one for the
network and shared storage, and a `Critical path` process repeating the tasks that decided the run's
end. Arrows follow DAG dependencies (--arrows). Link utilisation counters use each transfer's mean
rate, so short bursts of contention are smoothed.";

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum DetailChoice {
    /// Task spans, the critical path, every transfer and link utilisation.
    Full,
    /// Task spans, the critical path and link utilisation, without the transfers.
    Links,
    /// Task spans and the critical path.
    Tasks,
}

/// Above this many GPUs the default detail is `tasks`: recording every transfer of a ring
/// all-reduce grows with the square of the GPU count.
const FULL_DETAIL_UP_TO_GPUS: u32 = 64;

/// Most flows a run may record for a trace: each record takes 48 bytes of memory (about 5 GB
/// here), and recording turns off the reserved-link fast path, so such a run is also slow.
const MAX_RECORDED_FLOWS: u64 = 100_000_000;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum ArrowChoice {
    All,
    Critical,
    None,
}

#[derive(Debug, clap::Args)]
#[command(about = "Write the simulated timeline as a Perfetto/Chrome trace (and a Gantt chart)", after_help = EXAMPLES)]
pub struct Args {
    #[command(flatten)]
    setup: SetupArgs,
    /// Strategy: features joined by `+` (as for `predict`).
    #[arg(long, value_name = "SPEC")]
    strategy: Option<String>,
    /// GPU count to simulate.
    #[arg(long, value_name = "N", default_value_t = 4)]
    gpus: u32,
    /// json: Chrome/Perfetto trace; csv: one row per task span; text: a summary.
    #[arg(long, value_enum, default_value_t = Format::Json)]
    format: Format,
    /// Write to FILE instead of stdout (written atomically).
    #[arg(short, long, value_name = "FILE")]
    output: Option<PathBuf>,
    /// Which dependencies get flow arrows in the trace (default: all up to 64 GPUs, critical above).
    #[arg(long, value_enum)]
    arrows: Option<ArrowChoice>,
    /// Also draw a Gantt chart of one iteration (.png or .svg).
    #[arg(long, value_name = "FILE")]
    gantt: Option<PathBuf>,
    /// Iteration shown in the Gantt chart (0 is the warm-up; `--iterations` is how many run).
    /// `--iteration` is its old name.
    #[arg(long = "gantt-iteration", alias = "iteration", value_name = "I", default_value_t = 1)]
    iteration: u32,
    /// GPU ranks shown, e.g. `0-7` or `0,1,64-71` (default: all); the run still simulates every
    /// GPU. Their hosts, transfers and links are shown with them.
    #[arg(long, visible_alias = "gpus-shown", value_name = "LIST")]
    ranks: Option<String>,
    /// What the Perfetto trace carries (default: full up to 64 GPUs, tasks above).
    #[arg(long, value_enum, value_name = "LEVEL")]
    detail: Option<DetailChoice>,
    /// Largest trace to write, e.g. 500M or 2G (0: no limit). Larger ones stop before writing,
    /// with the estimate and what to cut.
    #[arg(long, value_name = "SIZE", default_value = "2G")]
    max_size: String,
}

/// `0-7,64,70-71` as a per-rank mask over `gpus` ranks.
fn parse_ranks(list: &str, gpus: u32) -> Result<Vec<bool>> {
    let mut mask = vec![false; gpus as usize];
    for part in list.split(',').map(str::trim) {
        let bad = || Error::invalid("--ranks", format!("`{part}` is not a rank or a range like 0-7"));
        let (a, b) = match part.split_once('-') {
            Some((a, b)) => (a.trim().parse::<u32>().map_err(|_| bad())?, b.trim().parse::<u32>().map_err(|_| bad())?),
            None => {
                let r = part.parse::<u32>().map_err(|_| bad())?;
                (r, r)
            }
        };
        if a > b || b >= gpus {
            return Err(Error::invalid("--ranks", format!("`{part}` is outside ranks 0-{} of this run", gpus - 1)));
        }
        mask[a as usize..=b as usize].iter_mut().for_each(|m| *m = true);
    }
    Ok(mask)
}

/// `500M`, `2G`, `1.5G`, `100000` (bytes; K, M, G, T are powers of 1000) as bytes.
fn parse_size(s: &str) -> Result<u64> {
    let t = s.trim();
    let (num, mult) = match t.char_indices().last() {
        Some((i, c)) if c.is_ascii_alphabetic() => {
            let m = match c.to_ascii_uppercase() {
                'K' => 1e3,
                'M' => 1e6,
                'G' => 1e9,
                'T' => 1e12,
                _ => return Err(Error::invalid("--max-size", format!("`{s}`: use a number with K, M, G or T"))),
            };
            (&t[..i], m)
        }
        _ => (t, 1.0),
    };
    match num.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && v >= 0.0 => Ok((v * mult) as u64),
        _ => Err(Error::invalid("--max-size", format!("`{s}` is not a size like 500M or 2G"))),
    }
}

fn human_bytes(b: u64) -> String {
    match b {
        b if b >= 1_000_000_000 => format!("{:.1} GB", b as f64 / 1e9),
        b if b >= 1_000_000 => format!("{:.1} MB", b as f64 / 1e6),
        b => format!("{:.1} kB", b as f64 / 1e3),
    }
}

pub fn run(args: Args) -> Result<u8> {
    if args.gpus == 0 {
        return Err(Error::invalid("--gpus", "the GPU count must be at least 1"));
    }
    let (_, setup) = args.setup.setup(args.strategy.as_deref())?;
    if args.iteration >= setup.iterations {
        return Err(Error::invalid(
            "--gantt-iteration",
            format!("{} is past the last simulated iteration ({})", args.iteration, setup.iterations - 1),
        ));
    }
    let detail = match args.detail {
        Some(DetailChoice::Full) => Detail::Full,
        Some(DetailChoice::Links) => Detail::Links,
        Some(DetailChoice::Tasks) => Detail::Tasks,
        None if args.gpus > FULL_DETAIL_UP_TO_GPUS && args.format == Format::Json => {
            eprintln!(
                "note: {} GPUs: the trace shows tasks only (--detail tasks) and arrows along the critical path \
                 (--arrows critical); ask for --detail links or full with --ranks to see transfers of a few GPUs",
                args.gpus
            );
            Detail::Tasks
        }
        None => Detail::Full,
    };
    let ranks = args.ranks.as_deref().map(|r| parse_ranks(r, args.gpus)).transpose()?;
    let max_size = parse_size(&args.max_size)?;
    let (machine, dag) = setup.build(args.gpus, false)?;
    let record_flows = args.format != Format::Json || detail.needs_flows();
    if record_flows && args.format == Format::Json && max_size > 0 {
        // Recording every flow costs memory before anything is written: refuse early.
        let flows = dagsim::sim::flow_count(&dag, &machine)?;
        if flows > MAX_RECORDED_FLOWS {
            return Err(Error::invalid(
                "--detail",
                format!(
                    "{} GPUs move {flows} transfers in {} iterations; recording them for --detail {} needs about \
                     {} of memory: use --detail tasks (or fewer GPUs or --iterations)",
                    args.gpus,
                    setup.iterations,
                    if detail == Detail::Full { "full" } else { "links" },
                    human_bytes(flows * 48)
                ),
            ));
        }
        let floor = TraceStats { transfers: flows as usize, ..TraceStats::default() }.estimated_bytes();
        if detail == Detail::Full && ranks.is_none() && floor > max_size {
            return Err(too_large(floor, max_size, args.gpus, flows));
        }
    }
    let options = Options { record_flows, ..Options::default() };
    let run = {
        let _notice = super::LongRunNotice::start(format!("{} on {} GPUs", setup.workload.name, args.gpus));
        dagsim::sim::simulate(&dag, &machine, options)?
    };
    let sim = dagsim::predict::Simulated { machine, dag, run };
    let about = [
        ("workload", setup.workload.name.clone()),
        ("topology", setup.topology.name.clone()),
        ("strategy", setup.strategy.name()),
        ("gpus", args.gpus.to_string()),
        ("collective_model", sim.machine.collectives.name()),
        ("collectives", dagsim::collective::model::describe(&sim.machine.collectives.name(), &sim.run.collectives)),
        ("dagsim_version", env!("CARGO_PKG_VERSION").to_string()),
    ];
    let arrows = match args.arrows {
        Some(ArrowChoice::All) => Arrows::All,
        Some(ArrowChoice::Critical) => Arrows::Critical,
        Some(ArrowChoice::None) => Arrows::None,
        None if args.gpus > FULL_DETAIL_UP_TO_GPUS => Arrows::Critical,
        None => Arrows::All,
    };
    let (dag, run) = (&sim.dag, &sim.run);
    let critical = critical_path(dag, run);
    let trace_options = TraceOptions { arrows, detail, ranks };
    if args.format == Format::Json {
        let stats = trace_stats(&sim.machine, dag, run, &trace_options);
        let estimate = stats.estimated_bytes();
        if max_size > 0 && estimate > max_size {
            return Err(too_large(estimate, max_size, args.gpus, stats.transfers as u64));
        }
        if estimate >= 100_000_000 || super::verbosity() > 0 {
            eprintln!(
                "writing about {} ({} spans, {} transfers, {} counter samples, {} arrows)",
                human_bytes(estimate),
                stats.spans + stats.critical_tasks,
                stats.transfers,
                stats.counter_samples,
                stats.arrows
            );
        }
    }
    emit(args.output.as_deref(), |w| match args.format {
        Format::Json => write_trace(w, &sim.machine, dag, run, &trace_options, &about).map(|_| ()),
        Format::Csv => {
            let mut on_path = vec![false; dag.len()];
            critical.iter().for_each(|&t| on_path[t as usize] = true);
            let mut c = csv::Writer::from_writer(w);
            c.write_record([
                "task",
                "label",
                "phase",
                "gpu_rank",
                "iteration",
                "layer",
                "queue",
                "start_ns",
                "end_ns",
                "critical",
                "collective",
            ])?;
            let how: std::collections::HashMap<u32, &str> =
                run.collective_labels.iter().map(|(t, l)| (*t, l.as_str())).collect();
            for (t, task) in dag.tasks().iter().enumerate() {
                let opt = |v: Option<u32>| v.map(|x| x.to_string()).unwrap_or_default();
                let queue = task.queue.map(|q| dag.queues()[q as usize].name.clone()).unwrap_or_default();
                c.write_record([
                    t.to_string(),
                    task.label(),
                    task.phase.name().to_string(),
                    opt(task.gpu),
                    task.iteration.to_string(),
                    opt(task.layer),
                    queue,
                    run.start[t].to_string(),
                    run.end[t].to_string(),
                    on_path[t].to_string(),
                    how.get(&(t as u32)).map(|l| format!("{} {l}", sim.machine.collectives.name())).unwrap_or_default(),
                ])?;
            }
            c.flush()
        }
        Format::Text => {
            writeln!(
                w,
                "{} tasks, {} flows, makespan {:.6} s",
                dag.len(),
                run.flow_records.len(),
                run.makespan as f64 / 1e9
            )?;
            writeln!(
                w,
                "collectives: {}",
                dagsim::collective::model::describe(&sim.machine.collectives.name(), &run.collectives)
            )?;
            writeln!(w, "critical path: {} tasks; time on it by phase:", critical.len())?;
            let mut by_phase: std::collections::BTreeMap<&str, u64> = Default::default();
            for &t in &critical {
                *by_phase.entry(dag.task(t).phase.name()).or_default() += run.end[t as usize] - run.start[t as usize];
            }
            for (phase, ns) in by_phase {
                writeln!(
                    w,
                    "  {phase:<10} {:>12.6} s  {:>5.1}%",
                    ns as f64 / 1e9,
                    100.0 * ns as f64 / run.makespan.max(1) as f64
                )?;
            }
            Ok(())
        }
    })?;
    if let Some(path) = &args.gantt {
        let (window, rows) = gantt_rows(dag, run, args.iteration);
        let title = format!(
            "{} on {} GPUs ({}), {}: iteration {}",
            setup.workload.name,
            args.gpus,
            setup.topology.name,
            setup.strategy.name(),
            args.iteration
        );
        gantt_chart(path, &title, window, &rows)?;
    }
    if super::verbosity() > 0 {
        eprintln!("simulated {} tasks, {} events; critical path {} tasks", dag.len(), run.events, critical.len());
    }
    Ok(exit::OK)
}

fn too_large(estimate: u64, max_size: u64, gpus: u32, transfers: u64) -> Error {
    Error::invalid(
        "--max-size",
        format!(
            "the trace would be about {} ({transfers} transfers on {gpus} GPUs), over --max-size {}; \
             cut it with --iterations 2, --ranks 0-7, --detail links or tasks, --arrows critical, \
             or raise --max-size (0: no limit)",
            human_bytes(estimate),
            human_bytes(max_size)
        ),
    )
}
