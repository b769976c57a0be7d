//! `dagsim collective`: one collective predicted the way nccl-tests runs it (size, count, time,
//! algbw, busbw, and how the model ran it, per size), or checked against an nccl-tests output.

use super::exit;
use super::output::{emit, Format};
use dagsim::calibrate::nccl_tests::{check, error_summary, predict, sizes, CollectiveRow, Spec};
use dagsim::calibrate::read_measurement;
use dagsim::collective::{Algorithm, CollectiveOp};
use dagsim::error::{Error, Result};
use dagsim::hw::calibration::Calibration;
use dagsim::hw::load_topology;
use dagsim::report::ratio_cell;
use std::io::Write;
use std::path::PathBuf;

const EXAMPLES: &str = "\
Examples:
  dagsim collective --topology dgx-h100 --gpus 16 --op all-reduce --collective-model nccl
  dagsim collective --topology abci-v --gpus 8 --nodes 2 -b 8 -e 128M -f 2 --format csv
  dagsim collective --check topologies/measured/abci/allreduce_inter_vnode_4node.nccl --topology abci-v \\
      --collective-model nccl

Sizes as nccl-tests' -b/-e/-f take them (a byte count, or with K, M, G: powers of 1024). `bytes`
is nccl-tests' size: the buffer per rank for all-reduce, broadcast and reduce, the gathered
buffer for all-gather, the reduced input for reduce-scatter; algbw = bytes / time and busbw =
algbw times nccl-tests' bus factor (all-reduce 2(n-1)/n; all-gather, reduce-scatter, all-to-all
(n-1)/n; broadcast, reduce, send-recv 1; send-recv: each rank's buffer to the next rank). `ran` says what the collective model ran (NCCL: algorithm/protocol
and channels). --check reads an nccl-tests output (the collective, ranks and hosts from its
header and `# Rank` lines), predicts every size in it and prints the error per size.";

#[derive(Debug, clap::Args)]
#[command(about = "Predict one collective as nccl-tests runs it, or check an nccl-tests output", after_help = EXAMPLES)]
pub struct Args {
    /// Topology preset or file.
    #[arg(long, value_name = "NAME|FILE")]
    topology: String,
    /// Collective: all-reduce, all-gather, reduce-scatter, broadcast, reduce, all-to-all.
    #[arg(long, value_name = "OP", default_value = "all-reduce", conflicts_with = "check")]
    op: String,
    /// GPUs (ranks) that run it.
    #[arg(long, value_name = "N", required_unless_present = "check", conflicts_with = "check")]
    gpus: Option<u32>,
    /// Nodes the GPUs must span (checked against the topology).
    #[arg(long, value_name = "N", conflicts_with = "check")]
    nodes: Option<u32>,
    /// Smallest size (nccl-tests -b).
    #[arg(short = 'b', long, value_name = "BYTES", default_value = "8", conflicts_with = "check")]
    min_bytes: String,
    /// Largest size (nccl-tests -e).
    #[arg(short = 'e', long, value_name = "BYTES", default_value = "128M", conflicts_with = "check")]
    max_bytes: String,
    /// Factor between sizes (nccl-tests -f).
    #[arg(short = 'f', long, value_name = "N", default_value_t = 2, conflicts_with = "check")]
    step_factor: u64,
    /// Algorithm dagsim runs it with: auto (the collective model's own choice), ring, tree, ...
    #[arg(long, value_name = "NAME", default_value = "auto")]
    algorithm: String,
    /// nccl-tests output to check the model against (sizes, collective, ranks and hosts from it).
    #[arg(long, value_name = "FILE")]
    check: Option<PathBuf>,
    /// Calibration file applied to the topology's links.
    #[arg(long, value_name = "FILE")]
    calibration: Option<PathBuf>,
    #[command(flatten)]
    collectives: super::setup_args::CollectiveArgs,
    #[arg(long, value_enum, default_value_t = Format::Text)]
    format: Format,
    /// Write the table here instead of stdout (written atomically).
    #[arg(short, long, value_name = "FILE")]
    output: Option<PathBuf>,
}

/// Sizes the check summary covers (as `calibrate`'s): 1 KiB to 32 MiB, and 1 MiB up.
const SUMMARY_RANGES: [(u64, u64, &str); 2] = [(1 << 10, 32 << 20, "1 KiB..32 MiB"), (1 << 20, u64::MAX, ">= 1 MiB")];

pub fn run(args: Args) -> Result<u8> {
    let mut topology = load_topology(&args.topology)?;
    args.collectives.apply(&mut topology, &Default::default())?;
    let algorithm = Algorithm::parse(&args.algorithm)
        .ok_or_else(|| Error::invalid("--algorithm", format!("unknown algorithm `{}`", args.algorithm)))?;
    let base = args.calibration.as_deref().map(Calibration::load).transpose()?;
    let rows = match &args.check {
        Some(path) => check(&topology, base.as_ref(), &read_measurement(path, None)?, algorithm)?,
        None => {
            let op = CollectiveOp::ALL.into_iter().find(|o| o.name() == args.op).ok_or_else(|| {
                let known: Vec<&str> = CollectiveOp::ALL.iter().map(|o| o.name()).collect();
                Error::invalid("--op", format!("unknown collective `{}` (known: {})", args.op, known.join(", ")))
            })?;
            let size = |flag: &str, v: &str| parse_size(v).map_err(|e| Error::invalid(flag, e));
            let (lo, hi) = (size("--min-bytes", &args.min_bytes)?, size("--max-bytes", &args.max_bytes)?);
            let spec = Spec { op, gpus: args.gpus.unwrap_or(0), nodes: args.nodes, algorithm };
            predict(&topology, base.as_ref(), &spec, &sizes(lo, hi, args.step_factor)?)?
        }
    };
    emit(args.output.as_deref(), |w| match args.format {
        Format::Text => write_text(w, &rows),
        Format::Csv => write_csv(w, &rows),
        Format::Json => {
            serde_json::to_writer_pretty(&mut *w, &rows)?;
            writeln!(w)
        }
    })?;
    Ok(exit::OK)
}

/// A byte count, optionally with K, M or G (powers of 1024, as nccl-tests reads -b and -e).
fn parse_size(v: &str) -> std::result::Result<u64, String> {
    let t = v.trim();
    let (digits, scale) = match t.char_indices().last() {
        Some((i, c)) if c.eq_ignore_ascii_case(&'k') => (&t[..i], 1u64 << 10),
        Some((i, c)) if c.eq_ignore_ascii_case(&'m') => (&t[..i], 1 << 20),
        Some((i, c)) if c.eq_ignore_ascii_case(&'g') => (&t[..i], 1 << 30),
        _ => (t, 1),
    };
    let n: u64 = digits.parse().map_err(|_| format!("expected a byte count such as 8, 64K or 128M, found `{v}`"))?;
    let bytes = n.checked_mul(scale).ok_or_else(|| format!("`{v}` is too large"))?;
    dagsim::units::check_bytes(bytes)
}

fn write_text(w: &mut dyn Write, rows: &[CollectiveRow]) -> std::io::Result<()> {
    let Some(first) = rows.first() else { return Ok(()) };
    let checked = first.measured_us.is_some();
    writeln!(
        w,
        "{} on {} GPUs, {} node(s); collective model {}",
        first.op, first.gpus, first.nodes, first.collective_model
    )?;
    write!(
        w,
        "{:>12} {:>12} {:>6} {:>12} {:>9} {:>9}",
        "bytes", "count", "dtype", "predicted_us", "algbw_gbs", "busbw_gbs"
    )?;
    if checked {
        write!(w, " {:>11} {:>18} {:>8}", "measured_us", "measured_busbw_gbs", "error")?;
    }
    writeln!(w, "  ran")?;
    for r in rows {
        write!(
            w,
            "{:>12} {:>12} {:>6} {:>12.2} {:>9.2} {:>9.2}",
            r.bytes, r.count, r.dtype, r.predicted_us, r.algbw_gbs, r.busbw_gbs
        )?;
        if let (Some(m), Some(mb), Some(e)) = (r.measured_us, r.measured_busbw_gbs, r.error) {
            write!(w, " {m:>11.2} {mb:>18.2} {:>7.1}%", 100.0 * e)?;
        }
        writeln!(w, "  {}", r.ran)?;
    }
    if checked {
        for (lo, hi, name) in SUMMARY_RANGES {
            if let Some((median, worst)) = error_summary(rows, lo, hi) {
                writeln!(w, "sizes {name}: median |error| {:.1}%, worst {:.1}%", 100.0 * median, 100.0 * worst)?;
            }
        }
    }
    Ok(())
}

fn write_csv(out: &mut dyn Write, rows: &[CollectiveRow]) -> std::io::Result<()> {
    let checked = rows.first().is_some_and(|r| r.measured_us.is_some());
    let mut header = vec![
        "op",
        "gpus",
        "nodes",
        "bytes",
        "count",
        "dtype",
        "predicted_us",
        "algbw_gbs",
        "busbw_gbs",
        "ran",
        "collective_model",
    ];
    if checked {
        header.extend(["measured_us", "measured_busbw_gbs", "error"]);
    }
    let mut w = csv::Writer::from_writer(out);
    w.write_record(&header)?;
    for r in rows {
        let mut cells = vec![
            r.op.clone(),
            r.gpus.to_string(),
            r.nodes.to_string(),
            r.bytes.to_string(),
            r.count.to_string(),
            r.dtype.to_string(),
            format!("{:.3}", r.predicted_us),
            format!("{:.3}", r.algbw_gbs),
            format!("{:.3}", r.busbw_gbs),
            r.ran.clone(),
            r.collective_model.clone(),
        ];
        if let (Some(m), Some(mb), Some(e)) = (r.measured_us, r.measured_busbw_gbs, r.error) {
            cells.extend([format!("{m:.3}"), format!("{mb:.3}"), ratio_cell(e)]);
        }
        w.write_record(&cells)?;
    }
    w.flush()
}
