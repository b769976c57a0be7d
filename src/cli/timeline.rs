//! `dagsim timeline`: simulate one configuration and write its timeline as a Chrome/Perfetto trace
//! (or the task spans as CSV, or a text summary), optionally with a Gantt chart of one iteration.

use super::exit;
use super::output::{emit, Format};
use super::setup_args::SetupArgs;
use dagsim::error::{Error, Result};
use dagsim::report::critical::critical_path;
use dagsim::report::perfetto::{write_trace, Arrows};
use dagsim::report::plot::{gantt_chart, gantt_rows};
use dagsim::sim::Options;
use std::path::PathBuf;

const EXAMPLES: &str = "\
Examples:
  dagsim timeline --trace traces/alexnet_k80.csv --gpus 4 -o run.json
      then open run.json in https://ui.perfetto.dev or chrome://tracing
  dagsim timeline --trace traces/alexnet_k80.csv --gpus 8 --topology v100-cluster --gantt gantt.png -o run.json
  dagsim timeline --scenario scenarios/alexnet_k80_scaling.toml --gpus 4 --format csv -o spans.csv
  dagsim timeline --trace traces/alexnet_k80.csv --gpus 4 --format text

The trace has one process per GPU (tracks: compute stream, communicator, storage read, H2D copy
engine), one per host (the transfers leaving it, with a utilisation counter per link), one for the
network and shared storage, and a `Critical path` process repeating the tasks that decided the run's
end. Arrows follow DAG dependencies (--arrows). Link utilisation counters use each transfer's mean
rate, so short bursts of contention are smoothed.";

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
    /// Which dependencies get flow arrows in the trace.
    #[arg(long, value_enum, default_value_t = ArrowChoice::All)]
    arrows: ArrowChoice,
    /// Also draw a Gantt chart of one iteration (.png or .svg).
    #[arg(long, value_name = "FILE")]
    gantt: Option<PathBuf>,
    /// Iteration shown in the Gantt chart (0 is the warm-up).
    #[arg(long, value_name = "I", default_value_t = 1)]
    iteration: u32,
}

pub fn run(args: Args) -> Result<u8> {
    if args.gpus == 0 {
        return Err(Error::invalid("--gpus", "the GPU count must be at least 1"));
    }
    let (_, setup) = args.setup.setup(args.strategy.as_deref())?;
    if args.iteration >= setup.iterations {
        return Err(Error::invalid(
            "--iteration",
            format!("{} is past the last simulated iteration ({})", args.iteration, setup.iterations - 1),
        ));
    }
    let sim = setup.simulate(args.gpus, Options { record_flows: true, ..Options::default() })?;
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
        ArrowChoice::All => Arrows::All,
        ArrowChoice::Critical => Arrows::Critical,
        ArrowChoice::None => Arrows::None,
    };
    let (dag, run) = (&sim.dag, &sim.run);
    let critical = critical_path(dag, run);
    emit(args.output.as_deref(), |w| match args.format {
        Format::Json => write_trace(w, &sim.machine, dag, run, arrows, &about).map(|_| ()),
        Format::Csv => {
            let mut on_path = vec![false; dag.len()];
            critical.iter().for_each(|&t| on_path[t as usize] = true);
            let mut c = csv::Writer::from_writer(w);
            c.write_record([
                "task",
                "label",
                "phase",
                "gpu",
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
