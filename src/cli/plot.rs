//! `dagsim plot`: charts from files other commands wrote. `plot scatter` draws predicted versus
//! measured from a `dagsim validate` report.

use super::exit;
use super::validate::parse_percent;
use dagsim::error::{Error, Result};
use dagsim::report::plot::scatter_chart;
use dagsim::validate::scatter::{read_report, scatter_panels};
use std::path::PathBuf;

const EXAMPLES: &str = "\
Examples:
  dagsim validate validation/tf2017_k80_alexnet.csv --tolerance 15% --format json -o report.json
  dagsim plot scatter report.json -o scatter.png
  dagsim plot scatter report.json -o scatter.svg --bands 5%,20% --title \"AlexNet on K80s\"

The format follows the extension (.png or .svg). Sweep tables are drawn by `dagsim sweep plot`.";

#[derive(Debug, clap::Args)]
#[command(about = "Draw charts from the output of other commands", after_help = EXAMPLES)]
pub struct Args {
    #[command(subcommand)]
    chart: Chart,
}

#[derive(Debug, clap::Subcommand)]
enum Chart {
    /// Predicted vs measured from a `dagsim validate --format csv|json` report: log-2 axes, one
    /// panel per metric, one colour per measurement set, the y = x line and error bands.
    #[command(after_help = EXAMPLES)]
    Scatter(ScatterArgs),
}

#[derive(Debug, clap::Args)]
struct ScatterArgs {
    /// The report (`dagsim validate ... --format csv` or `--format json`).
    #[arg(value_name = "REPORT")]
    input: PathBuf,
    /// Image to write: FILE.png or FILE.svg (written atomically).
    #[arg(short, long, value_name = "FILE")]
    output: PathBuf,
    /// Error bands around y = x, smallest first: the first is shaded, the others dashed, and points
    /// beyond the last are labelled with their row id. Default: the report's gate (JSON), else
    /// validate's defaults 10%,25%.
    #[arg(long, value_name = "PERCENT,...", value_delimiter = ',', value_parser = parse_percent)]
    bands: Vec<f64>,
    /// Chart title (default: the sets plotted).
    #[arg(long)]
    title: Option<String>,
}

pub fn run(args: Args) -> Result<u8> {
    match args.chart {
        Chart::Scatter(a) => scatter(a),
    }
}

fn scatter(a: ScatterArgs) -> Result<u8> {
    let report = read_report(&a.input)?;
    let mut bands = if a.bands.is_empty() {
        let gate = report.gate.unwrap_or_default();
        vec![gate.tolerance, gate.max_error]
    } else {
        a.bands.clone()
    };
    bands.sort_by(f64::total_cmp);
    bands.dedup();
    if bands.iter().any(|b| *b <= 0.0) {
        return Err(Error::invalid("--bands", "every band must be above 0%"));
    }
    let label_beyond = bands.last().copied().unwrap_or(f64::INFINITY);
    let panels = scatter_panels(&a.input, &report.rows, label_beyond)?;
    let title = a.title.unwrap_or_else(|| {
        let mut sets: Vec<&str> = Vec::new();
        for r in &report.rows {
            if !sets.contains(&r.set.as_str()) {
                sets.push(&r.set);
            }
        }
        let shown = if sets.len() > 4 { format!("{} sets", sets.len()) } else { sets.join(", ") };
        format!("Predicted vs measured: {shown}")
    });
    scatter_chart(&a.output, &title, &panels, &bands)?;
    if super::verbosity() >= 0 {
        eprintln!("wrote {}", a.output.display());
    }
    Ok(exit::OK)
}
