//! `dagsim sweep`: run a grid of scenarios (all cores, resumable, shardable), `sweep merge` to
//! join shard outputs, `sweep plot` to draw a sweep table.

use super::exit;
use super::output::{emit, Format};
use dagsim::error::{Error, Result};
use dagsim::sweep::run::{
    check_record, inputs_hash, journal_path, pending_points, read_journal, run_points, setups, Journal, Record,
    INPUTS_COLUMN,
};
use dagsim::sweep::table::{describe_table, merge, write_plots, OnConflict, Table};
use dagsim::sweep::{Shard, Sweep};
use std::io::IsTerminal;
use std::path::{Path, PathBuf};

const EXAMPLES: &str = "\
Examples:
  dagsim sweep sweeps/dag_paper_k80_v100.toml -o results.csv --plots plots/
  dagsim sweep sweeps/dag_paper_k80_v100.toml --format text
  dagsim sweep sweeps/dag_paper_k80_v100.toml --shard 0/2 -o part-0.csv     # one slice of two
  dagsim sweep sweeps/dag_paper_k80_v100.toml --shard 1/2 -o part-1.csv
  dagsim sweep merge part-*.csv --sweep sweeps/dag_paper_k80_v100.toml -o merged.csv
  dagsim sweep plot results.csv --dir plots/

A sweep file has a [base] scenario and a [grid] of axes; every combination is one point and one
output row. Axes: gpus, strategy, topology, batch, any scenario field by dotted path
(workload.sample_bytes, iterations, ...), and strategy.KEY (appends +KEY=value to the strategy).
Interrupted sweeps resume: finished points are kept in OUTPUT.partial and in OUTPUT, and are not
run again unless their inputs (scenario, trace, topology, calibration, dagsim version) changed
since; --fresh starts over in a new journal, which a plain rerun resumes if it is interrupted. Outputs are written atomically. See docs/outputs.md.";

#[derive(Debug, clap::Args)]
#[command(
    about = "Run a grid of scenarios; merge or plot sweep results",
    after_help = EXAMPLES,
    args_conflicts_with_subcommands = true,
    subcommand_negates_reqs = true
)]
pub struct Args {
    #[command(subcommand)]
    action: Option<Action>,
    #[command(flatten)]
    run: RunArgs,
}

#[derive(Debug, clap::Subcommand)]
enum Action {
    /// Join shard outputs into one table (each point once, sorted).
    #[command(
        after_help = "Example:\n  dagsim sweep merge part-*.csv --sweep sweeps/dag_paper_k80_v100.toml -o results.csv"
    )]
    Merge(MergeArgs),
    /// Draw speedup and breakdown plots (PNG and SVG) from a sweep table.
    #[command(after_help = "Example:\n  dagsim sweep plot results.csv --dir plots/ --title \"AlexNet\"")]
    Plot(PlotArgs),
}

#[derive(Debug, clap::Args)]
struct RunArgs {
    /// Sweep file (TOML with [base] and [grid]).
    #[arg(value_name = "SWEEP.toml", required = true)]
    file: Option<PathBuf>,
    /// Run only the points whose number is I modulo N (0-based), e.g. 0/4.
    #[arg(long, value_name = "I/N")]
    shard: Option<String>,
    #[command(flatten)]
    out: TableOut,
    /// Ignore results of an earlier, interrupted or finished run of this sweep.
    #[arg(long)]
    fresh: bool,
}

#[derive(Debug, clap::Args)]
struct MergeArgs {
    /// Shard outputs (CSV).
    #[arg(value_name = "CSV", required = true)]
    inputs: Vec<PathBuf>,
    /// Check that every point of this sweep is present and matches it.
    #[arg(long, value_name = "SWEEP.toml")]
    sweep: Option<PathBuf>,
    /// When two files hold different rows for the same scenario: refuse (default), or keep the
    /// row of the file listed first or last.
    #[arg(long, value_name = "WHICH", default_value = "error", value_parser = ["error", "first", "last"])]
    on_conflict: String,
    #[command(flatten)]
    out: TableOut,
}

/// Where a sweep table goes, shared by `sweep` and `sweep merge`.
#[derive(Debug, clap::Args)]
struct TableOut {
    #[arg(long, value_enum, default_value_t = Format::Csv)]
    format: Format,
    /// Write the table to FILE (atomically); a sweep needs it to resume after an interruption.
    #[arg(short, long, value_name = "FILE")]
    output: Option<PathBuf>,
    /// Also write speedup and breakdown plots (PNG and SVG) into DIR.
    #[arg(long, value_name = "DIR")]
    plots: Option<PathBuf>,
}

#[derive(Debug, clap::Args)]
struct PlotArgs {
    /// Sweep table (CSV from `dagsim sweep` or `sweep merge`).
    #[arg(value_name = "CSV")]
    input: PathBuf,
    /// Directory for speedup.{png,svg} and breakdown.{png,svg}.
    #[arg(long, value_name = "DIR")]
    dir: PathBuf,
    /// Title prefix (default: from the table: its workloads and the grid columns varied).
    #[arg(long)]
    title: Option<String>,
}

pub fn run(args: Args) -> Result<u8> {
    match args.action {
        Some(Action::Merge(m)) => run_merge(m),
        Some(Action::Plot(p)) => {
            let table = Table::read_csv(&p.input)?;
            let title = p.title.unwrap_or_else(|| describe_table(&table));
            let files = write_plots(&table, &title, &p.dir)?;
            report_files(&files);
            Ok(exit::OK)
        }
        None => run_sweep(args.run),
    }
}

fn report_files(files: &[PathBuf]) {
    if super::verbosity() >= 0 {
        for f in files {
            eprintln!("wrote {}", f.display());
        }
    }
}

fn write_table(table: &Table, format: Format, output: Option<&Path>) -> Result<()> {
    emit(output, |w| match format {
        Format::Csv => table.write_csv(w),
        Format::Json => table.write_json(w),
        Format::Text => table.write_text(w),
    })
}

/// Results of an earlier run: the finished output (if CSV and the journal was not started by
/// `--fresh`) and the journal.
fn earlier_records(sweep: &Sweep, shard: Shard, output: &Path, format: Format) -> Result<Vec<Record>> {
    let journal = read_journal(&journal_path(output), sweep, shard)?;
    let mut done = Vec::new();
    if format == Format::Csv && output.exists() && !journal.fresh {
        let table = Table::read_csv(output)?;
        for rec in table.records(output)? {
            check_record(&rec, sweep, shard).map_err(|msg| {
                Error::invalid(
                    format!("output {}", output.display()),
                    format!("{msg}; it holds another sweep's results: use --fresh or another -o"),
                )
            })?;
            done.push(rec);
        }
    }
    // Journal records are newer than the output's: they win when both hold a point.
    done.retain(|r| !journal.records.iter().any(|j| j.point == r.point));
    done.extend(journal.records);
    done.sort_by_key(|r| r.point);
    done.dedup_by_key(|r| r.point);
    Ok(done)
}

/// Splits earlier results into those still valid (computed from the inputs as they are now) and
/// the number that are stale: their configuration's inputs hash differs, or they have none.
fn keep_current(done: Vec<Record>, sweep: &Sweep, hashes: &[Option<String>]) -> (Vec<Record>, usize) {
    let before = done.len();
    let kept: Vec<Record> = done
        .into_iter()
        .filter(|r| {
            let config = sweep.point(r.point).config;
            r.get(INPUTS_COLUMN).is_some() && r.get(INPUTS_COLUMN) == hashes[config].as_deref()
        })
        .collect();
    let stale = before - kept.len();
    (kept, stale)
}

fn run_sweep(args: RunArgs) -> Result<u8> {
    let file = args.file.expect("clap requires the sweep file");
    let sweep = Sweep::load(&file)?;
    let shard = match &args.shard {
        Some(s) => Shard::parse(s)?,
        None => Shard::ALL,
    };
    dagsim::limits::check("sweep_runs", sweep.point_count() as u64)?;
    let output = args.out.output.as_deref().filter(|p| *p != Path::new("-"));
    let hashes: Vec<Option<String>> = setups(&sweep, shard)?.iter().map(|s| s.as_ref().map(inputs_hash)).collect();
    let (done, stale) = match output {
        Some(_) if args.fresh => (Vec::new(), 0),
        Some(out) => keep_current(earlier_records(&sweep, shard, out, args.out.format)?, &sweep, &hashes),
        None => (Vec::new(), 0),
    };
    let pending = pending_points(&sweep, shard, &done);
    // A fresh run writes a new journal marked fresh: if it is interrupted, a plain rerun resumes
    // from it and does not fall back on the output from before.
    let journal = match output {
        Some(out) if args.fresh => Some(Journal::start_fresh(&journal_path(out))?),
        Some(out) if !pending.is_empty() => Some(Journal::open(&journal_path(out))?),
        _ => None,
    };
    let total = (done.len() + pending.len()) as u64;
    let bar = if super::verbosity() >= 0 && std::io::stderr().is_terminal() {
        let bar = indicatif::ProgressBar::new(total);
        bar.set_style(
            indicatif::ProgressStyle::with_template("{bar:40} {pos}/{len} points  {elapsed} (eta {eta})  {msg}")
                .expect("the template is valid"),
        );
        bar.set_position(done.len() as u64);
        bar
    } else {
        indicatif::ProgressBar::hidden()
    };
    let verbose = super::verbosity() > 0;
    let on_done = |rec: &Record| {
        bar.inc(1);
        if verbose {
            bar.suspend(|| eprintln!("point {} done", rec.point));
        }
    };
    let fresh = {
        let _notice = super::LongRunNotice::beside(&bar);
        run_points(&sweep, &pending, journal.as_ref(), &on_done)?
    };
    bar.finish_and_clear();
    let resumed = done.len();
    let mut all = done;
    all.extend(fresh);
    let table = Table::from_records(&all);
    write_table(&table, args.out.format, output)?;
    if let Some(out) = output {
        let _ = std::fs::remove_file(journal_path(out));
    }
    if let Some(dir) = &args.out.plots {
        report_files(&write_plots(&table, &sweep.name, dir)?);
    }
    if super::verbosity() >= 0 {
        eprintln!(
            "sweep `{}`: {} points in this run ({} resumed, {} recomputed because their inputs changed), \
             {} configurations x {} GPU counts in the grid",
            sweep.name,
            table.rows.len(),
            resumed,
            stale,
            sweep.config_count(),
            sweep.gpus.len()
        );
    }
    Ok(exit::OK)
}

fn run_merge(args: MergeArgs) -> Result<u8> {
    let on_conflict = match args.on_conflict.as_str() {
        "first" => OnConflict::First,
        "last" => OnConflict::Last,
        _ => OnConflict::Refuse,
    };
    let table = merge(&args.inputs, on_conflict)?;
    if let Some(path) = &args.sweep {
        let sweep = Sweep::load(path)?;
        let records = table.records(Path::new("<merged>"))?;
        for rec in &records {
            check_record(rec, &sweep, Shard::ALL).map_err(|msg| Error::invalid("merged sweep", msg))?;
        }
        let missing: Vec<String> =
            pending_points(&sweep, Shard::ALL, &records).iter().map(|p| p.index.to_string()).collect();
        if !missing.is_empty() {
            let shown = missing.iter().take(10).cloned().collect::<Vec<_>>().join(", ");
            return Err(Error::invalid(
                "merged sweep",
                format!("{} of {} points are missing (e.g. {shown})", missing.len(), sweep.point_count()),
            ));
        }
    }
    write_table(&table, args.out.format, args.out.output.as_deref())?;
    if let Some(dir) = &args.out.plots {
        report_files(&write_plots(&table, &describe_table(&table), dir)?);
    }
    Ok(exit::OK)
}
