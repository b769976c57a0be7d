//! `dagsim bench`: times the standard simulation cases; each case runs in a fresh process so its
//! peak memory is its own.

use super::exit;
use dagsim::bench::{case, measure, CASES, SCALING_CASES};
use dagsim::error::{Error, Result};

const EXAMPLES: &str = "\
Examples:
  dagsim bench                          # every case, 2 iterations each (one warm-up, one measured)
  dagsim bench --case alexnet --repeat 5    # the cases whose name contains `alexnet`
  dagsim bench --list
  dagsim bench --scaling --list             # the AlexNet scaling cases (run one with --case 256gpu)

Cases: AlexNet on 16 K80s (the shipped trace); ResNet-50 (model zoo, V100, batch 64) on 128,
1,024 and 8,192 GPUs of the v100-cluster topology with ring or hierarchical all-reduce at
transfer-step fidelity; a sweep of 1,000 ResNet-50 scenarios (16-1,024 GPUs, 10 strategies,
4 batch sizes) on all cores. Wall time includes building the DAG. Symmetric setups (whole
identical nodes, ring or hierarchical all-reduce, local storage) simulate one node's GPUs
standing for all, with the same results; --no-symmetry simulates every GPU. --scaling runs the
default AlexNet setup (16 K80s' trace, k80-cluster with shared NFS, so every GPU is simulated) on
256, 1,024, 4,096 and 16,384 GPUs instead, and a ring all-reduce beside a copy it slows
(ring-beside-copy, 256 to 16,384 GPUs: partly reserved, the transfers sharing the copy's links
as flows).";

#[derive(Debug, clap::Args)]
#[command(about = "Time the simulator on standard cases (wall time, events per second, peak memory)", after_help = EXAMPLES)]
pub struct Args {
    /// Only cases whose name contains this text.
    #[arg(long)]
    case: Option<String>,
    /// Iterations simulated per case (at least 2).
    #[arg(long, default_value_t = 2)]
    iterations: u32,
    /// Timed repetitions per case (the median is reported).
    #[arg(long, default_value_t = 3)]
    repeat: u32,
    /// List the cases and exit.
    #[arg(long)]
    list: bool,
    /// Simulate every GPU even where one node could stand for all (the reference path).
    #[arg(long)]
    no_symmetry: bool,
    /// Run the scaling cases (AlexNet on 256 to 16,384 GPUs, every GPU simulated; a ring beside a
    /// copy it slows) instead of the standard ones.
    #[arg(long)]
    scaling: bool,
    /// Run exactly this case in this process and print one result line (used internally).
    #[arg(long, hide = true)]
    child: Option<String>,
}

pub fn run(args: Args) -> Result<u8> {
    let cases = if args.scaling { SCALING_CASES } else { CASES };
    if args.list {
        cases.iter().for_each(|c| println!("{c}"));
        return Ok(exit::OK);
    }
    if let Some(name) = &args.child {
        return run_child(name, &args);
    }
    let chosen: Vec<&str> =
        cases.iter().copied().filter(|c| args.case.as_deref().is_none_or(|f| c.contains(f))).collect();
    if chosen.is_empty() {
        return Err(Error::invalid("--case", format!("no case matches (cases: {})", cases.join(", "))));
    }
    println!(
        "{:<36} {:>6} {:>10} {:>12} {:>13} {:>10} {:>13} {:>9}",
        "case", "runs", "tasks", "events", "flows", "wall_s", "events/s", "peak_MiB"
    );
    let exe = std::env::current_exe().map_err(|e| Error::io("<dagsim executable>", e))?;
    for name in chosen {
        let out = std::process::Command::new(&exe)
            .args(["bench", "--child", name, "--iterations", &args.iterations.to_string()])
            .args(["--repeat", &args.repeat.to_string()])
            .args(args.no_symmetry.then_some("--no-symmetry"))
            .output()
            .map_err(|e| Error::io("<dagsim bench child>", e))?;
        if !out.status.success() {
            return Err(Error::invalid(
                "bench",
                format!("case {name} failed: {}", String::from_utf8_lossy(&out.stderr)),
            ));
        }
        print!("{}", String::from_utf8_lossy(&out.stdout));
    }
    Ok(exit::OK)
}

fn run_child(name: &str, args: &Args) -> Result<u8> {
    let c = case(name, args.iterations)?;
    let mut runs = Vec::new();
    for _ in 0..args.repeat.max(1) {
        runs.push(measure(&c, !args.no_symmetry)?);
    }
    runs.sort_by(|a, b| a.wall_s.total_cmp(&b.wall_s));
    let m = &runs[runs.len() / 2];
    println!(
        "{:<36} {:>6} {:>10} {:>12} {:>13} {:>10.4} {:>13.0} {:>9}",
        c.name,
        m.runs,
        m.tasks,
        m.events,
        m.flows,
        m.wall_s,
        m.events as f64 / m.wall_s,
        peak_rss_mib().map_or("n/a".into(), |v| format!("{v:.0}"))
    );
    Ok(exit::OK)
}

/// Peak resident memory of this process (Linux `VmHWM`), MiB.
fn peak_rss_mib() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024.0)
}
