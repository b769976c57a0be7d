//! `dagsim bench`: times the standard simulation cases and prints events per second.

use super::exit;
use dagsim::bench::{cases, measure};
use dagsim::error::Result;

const EXAMPLES: &str = "\
Examples:
  dagsim bench                 # all cases, 2 iterations each
  dagsim bench --case alexnet  # cases whose name contains `alexnet`";

#[derive(Debug, clap::Args)]
#[command(about = "Time the simulator on standard cases (wall time, events per second)", after_help = EXAMPLES)]
pub struct Args {
    /// Only cases whose name contains this text.
    #[arg(long)]
    case: Option<String>,
    /// Iterations simulated per case.
    #[arg(long, default_value_t = 2)]
    iterations: u32,
    /// Timed repetitions per case (the median is reported).
    #[arg(long, default_value_t = 3)]
    repeat: u32,
}

pub fn run(args: Args) -> Result<u8> {
    println!("{:<28} {:>9} {:>12} {:>12} {:>12} {:>14}", "case", "tasks", "events", "flows", "wall_s", "events/s");
    for case in cases(args.iterations)? {
        if args.case.as_deref().is_some_and(|c| !case.name.contains(c)) {
            continue;
        }
        let mut runs = Vec::new();
        for _ in 0..args.repeat.max(1) {
            runs.push(measure(&case)?);
        }
        runs.sort_by(|a, b| a.wall_s.total_cmp(&b.wall_s));
        let m = &runs[runs.len() / 2];
        println!(
            "{:<28} {:>9} {:>12} {:>12} {:>12.6} {:>14.0}",
            case.name,
            m.tasks,
            m.events,
            m.flows,
            m.wall_s,
            m.events as f64 / m.wall_s
        );
    }
    Ok(exit::OK)
}
