//! `dagsim validate`: predicts every row of measurement sets, compares with what was measured, and
//! exits 1 when the model drifts past the tolerances (a CI gate).

use super::exit;
use super::output::{emit, Format};
use dagsim::error::{Error, Result};
use dagsim::validate::{validate_files_with, write_csv, write_json, write_text, Baseline, Gate, MachineOverrides};
use std::path::PathBuf;

const EXAMPLES: &str = "\
Examples:
  dagsim validate validation/tf2017.csv
  dagsim validate validation/tf2017_k80_alexnet.csv --tolerance 15% --max-error 25%
  dagsim validate validation/tf2017.csv --format json -o validation-report.json
  dagsim validate validation/scaledn.csv --baseline alpha-beta
  dagsim validate validation/korthikanti2022.csv --tolerance 14% --collective-model nccl --baseline ideal-ring

Each CSV row is one measurement: its setup (scenario file and/or trace, topology, GPU count,
strategy) and the measured throughput, iteration time or speedup. The format is in
docs/validate.md; the shipped sets and where their numbers come from are in validation/README.md.

Exit codes: 0 the gate passed; 1 the mean absolute error exceeds --tolerance, or a row not marked
known_miss exceeds --max-error; 2 bad usage or a bad file (the message names file, line, column).

The collective flags (--collective-model, --nccl-version, --nccl-algo, --nccl-proto, --nic-route)
apply to every row; each row says which model ran and what it chose.";

#[derive(Debug, clap::Args)]
#[command(about = "Compare predictions with measured results; exit 1 past a tolerance", after_help = EXAMPLES)]
pub struct Args {
    /// Measurement sets (CSV, see docs/validate.md).
    #[arg(required = true, value_name = "FILE")]
    files: Vec<PathBuf>,
    /// Largest allowed mean absolute relative error over all scored rows (`10%` or `10`).
    #[arg(long, value_name = "PERCENT", default_value = "10%", value_parser = parse_percent)]
    tolerance: f64,
    /// Largest allowed absolute relative error of any row not marked known_miss.
    #[arg(long, value_name = "PERCENT", default_value = "25%", value_parser = parse_percent)]
    max_error: f64,
    /// Also predict every row with a simpler model and report its error beside dagsim's:
    /// `alpha-beta` (one-GPU time plus a flat-ring all-reduce at the topology's link rates, no
    /// overlap) or `ideal-ring` (the same simulation with idealised collectives: rings at link
    /// rates, no NCCL protocols, channels or latencies). The gate then also fails on a set where
    /// the baseline is closer.
    #[arg(long, value_name = "NAME")]
    baseline: Option<String>,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    format: Format,
    /// Write to FILE instead of stdout (written atomically).
    #[arg(short, long, value_name = "FILE")]
    output: Option<PathBuf>,
    #[command(flatten)]
    collectives: super::setup_args::CollectiveArgs,
}

/// A percentage with or without the `%` sign: `10%` and `10` both mean 0.10.
pub fn parse_percent(s: &str) -> std::result::Result<f64, String> {
    let v: f64 =
        s.trim().trim_end_matches('%').trim().parse().map_err(|_| format!("`{s}` is not a percentage (e.g. 10%)"))?;
    if !(v.is_finite() && v >= 0.0) {
        return Err(format!("`{s}` must be a non-negative percentage"));
    }
    Ok(v / 100.0)
}

pub fn run(args: Args) -> Result<u8> {
    let paths: Vec<&std::path::Path> = args.files.iter().map(PathBuf::as_path).collect();
    if paths.is_empty() {
        return Err(Error::invalid("FILE", "give at least one measurement set"));
    }
    let baseline = args.baseline.as_deref().map(Baseline::parse).transpose()?;
    let c = &args.collectives;
    let any =
        c.collective_model.is_some() || c.nccl_version.is_some() || c.nccl_algo.is_some() || c.nccl_proto.is_some();
    let overrides = MachineOverrides {
        collectives: if any { Some(c.model()?) } else { None },
        nic_route: c.nic_route()?,
        compute_contention: c.compute_contention()?,
    };
    let gate = Gate { tolerance: args.tolerance, max_error: args.max_error };
    let report = {
        let _notice = super::LongRunNotice::start(format!("the rows of {} measurement set(s)", paths.len()));
        validate_files_with(&paths, gate, baseline, overrides)?
    };
    emit(args.output.as_deref(), |w| match args.format {
        Format::Text => write_text(w, &report),
        Format::Json => write_json(w, &report),
        Format::Csv => write_csv(w, &report),
    })?;
    if report.passed {
        return Ok(exit::OK);
    }
    // The text report already lists the failures; other formats say it on stderr too.
    if args.format != Format::Text || args.output.is_some() {
        for f in &report.failures {
            eprintln!("gate failed: {f}");
        }
    }
    Ok(exit::GATE_FAILED)
}

#[cfg(test)]
mod tests {
    use super::parse_percent;

    #[test]
    fn percentages_with_and_without_sign() {
        assert_eq!(parse_percent("10%"), Ok(0.10));
        assert_eq!(parse_percent("25"), Ok(0.25));
        assert_eq!(parse_percent(" 7.5 % "), Ok(0.075));
        assert!(parse_percent("ten").is_err());
        assert!(parse_percent("-5%").is_err());
    }
}
