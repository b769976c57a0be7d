//! `dagsim bench`: times the standard simulation cases; each case runs in a fresh process so its
//! peak memory is its own.

use super::exit;
use dagsim::bench::{case, measure, CASES, SCALING_CASES};
use dagsim::error::{Error, Result};

const EXAMPLES: &str = "\
Examples:
  dagsim bench                          # every case, 2 iterations each (one warm-up, one measured)
  dagsim bench --case alexnet --repeat 5    # the cases whose name contains `alexnet`
  dagsim bench --case alexnet --compute-contention off
                                            # the same without the SMs NCCL's channels take
  dagsim bench --list
  dagsim bench --scaling --list             # the AlexNet scaling cases (run one with --case 256gpu)
  dagsim bench --scaling --case ring-beside-copy-2 --repeat 1 --csv scaling.csv --plot scaling.png
                                            # CSV and a log-log plot of time and memory vs GPUs

Cases: AlexNet on 16 K80s (the shipped trace); ResNet-50 (model zoo, V100, batch 64) on 128,
1,024 and 8,192 GPUs of the v100-cluster topology with ring or hierarchical all-reduce at
transfer-step fidelity; a sweep of 1,000 ResNet-50 scenarios (16-1,024 GPUs, 10 strategies,
4 batch sizes) on all cores. Wall time includes building the DAG. Symmetric setups (whole
identical nodes, ring or hierarchical all-reduce, local storage) simulate one node's GPUs
standing for all, with the same results; --no-symmetry simulates every GPU. --scaling runs the
default AlexNet setup (16 K80s' trace, k80-cluster with shared NFS, so every GPU is simulated) on
256, 1,024, 4,096 and 16,384 GPUs instead, and a ring all-reduce beside a copy it slows
(ring-beside-copy, 256 to 16,384 GPUs: partly reserved, the transfers sharing the copy's links
as flows), and Llama 3 405B (tp 8, pp 14, dp GPUs/112) and Mixtral 8x22B (tp 2, pp 8, ep 8,
dp GPUs/16) on a rail-optimised three-tier fat-tree of DGX H100 nodes from about 1,000 to
100,000 GPUs. cpu_s is the process's CPU time (all threads) for the median run.";

#[derive(Debug, clap::Args)]
#[command(about = "Time the simulator on standard cases (wall time, events per second, peak memory)", after_help = EXAMPLES)]
pub struct Args {
    /// Only cases whose name contains this text (several texts, comma-separated: any of them).
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
    /// Write the results as CSV to FILE as well (case, gpus, runs, tasks, events, flows, wall_s,
    /// cpu_s, peak_mib, status; a case stopped by --timeout-s or refused has empty figures and
    /// says why).
    #[arg(long, value_name = "FILE")]
    csv: Option<std::path::PathBuf>,
    /// Draw CPU time and peak memory against GPU count, log-log, one line per case family (the
    /// case name without its `-NNNgpu` end), to FILE (.png or .svg).
    #[arg(long, value_name = "FILE")]
    plot: Option<std::path::PathBuf>,
    /// Stop a case that runs longer than this many seconds (all its repetitions) and go on.
    #[arg(long, value_name = "SECONDS")]
    timeout_s: Option<f64>,
    /// Compute contention for every case: sms (the default) or off, to time the model's cost
    /// as a ratio on the same binary (docs/machines.md).
    #[arg(long, value_name = "MODEL")]
    compute_contention: Option<String>,
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
    let chosen: Vec<&str> = cases
        .iter()
        .copied()
        .filter(|c| args.case.as_deref().is_none_or(|f| f.split(',').any(|f| c.contains(f))))
        .collect();
    if chosen.is_empty() {
        return Err(Error::invalid("--case", format!("no case matches (cases: {})", cases.join(", "))));
    }
    if let Some(c) = &args.compute_contention {
        dagsim::hw::ComputeContention::parse(c)?;
    }
    if let Some(t) = args.timeout_s {
        if !(t.is_finite() && t > 0.0) {
            return Err(Error::invalid("--timeout-s", format!("{t} is not a positive number of seconds")));
        }
    }
    println!(
        "{:<36} {:>6} {:>10} {:>12} {:>13} {:>10} {:>10} {:>13} {:>9}",
        "case", "runs", "tasks", "events", "flows", "wall_s", "cpu_s", "events/s", "peak_MiB"
    );
    let exe = std::env::current_exe().map_err(|e| Error::io("<dagsim executable>", e))?;
    let mut rows: Vec<Row> = Vec::new();
    for name in chosen {
        let mut child = std::process::Command::new(&exe)
            .args(["bench", "--child", name, "--iterations", &args.iterations.to_string()])
            .args(["--repeat", &args.repeat.to_string()])
            .args(args.no_symmetry.then_some("--no-symmetry"))
            .args(args.compute_contention.iter().flat_map(|c| ["--compute-contention", c.as_str()]))
            // The limits in force (`--limit`), which the child would otherwise reset to defaults.
            .args(dagsim::limits::get().overrides().into_iter().flat_map(|o| ["--limit".to_string(), o]))
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .map_err(|e| Error::io("<dagsim bench child>", e))?;
        let started = std::time::Instant::now();
        let timed_out = loop {
            if child.try_wait().map_err(|e| Error::io("<dagsim bench child>", e))?.is_some() {
                break false;
            }
            if args.timeout_s.is_some_and(|t| started.elapsed().as_secs_f64() > t) {
                // Only this child, started here, by its own handle.
                let _ = child.kill();
                break true;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        };
        let out = child.wait_with_output().map_err(|e| Error::io("<dagsim bench child>", e))?;
        if timed_out {
            let t = args.timeout_s.unwrap_or_default();
            println!("{name:<36} stopped after {t} s (--timeout-s)");
            rows.push((name, Err(format!("stopped after {t} s"))));
            continue;
        }
        if !out.status.success() {
            // A case the simulator refuses (a size limit, say) is reported and the others go on.
            let why = String::from_utf8_lossy(&out.stderr);
            println!("{name:<36} failed: {}", why.lines().next().unwrap_or("no message").trim());
            rows.push((name, Err(format!("failed: {}", why.lines().next().unwrap_or("no message").trim()))));
            continue;
        }
        let line = String::from_utf8_lossy(&out.stdout).into_owned();
        print!("{line}");
        // What a plan case simulated of its DP replicas (the child's one line on stderr).
        let note = String::from_utf8_lossy(&out.stderr).trim().to_string();
        if !note.is_empty() {
            println!("  {note}");
        }
        rows.push((name, Ok((line.split_whitespace().map(str::to_string).collect(), note))));
    }
    if let Some(path) = &args.csv {
        write_csv(path, &rows)?;
    }
    if let Some(path) = &args.plot {
        plot(path, &rows)?;
    }
    Ok(exit::OK)
}

/// A case and its figures as its process printed them, or why it has none.
/// With the child's note on the DP replicas it simulated (empty for cases that are not plans).
type Row<'a> = (&'a str, std::result::Result<(Vec<String>, String), String>);

/// The GPU count a case's name ends with (`...-4096gpu`), if it does.
fn gpus_of(name: &str) -> Option<u32> {
    let digits = name.strip_suffix("gpu")?;
    digits[digits.rfind('-')? + 1..].parse().ok()
}

/// One row per case: name, GPUs, then the child's figures (runs, tasks, events, flows, wall_s,
/// cpu_s, peak_mib; the events/s column left out), empty where the case was stopped.
fn write_csv(path: &std::path::Path, rows: &[Row]) -> Result<()> {
    let mut text = String::from("case,gpus,runs,tasks,events,flows,wall_s,cpu_s,peak_mib,status,replicas\n");
    let quoted = |t: &str| if t.is_empty() { String::new() } else { format!("\"{}\"", t.replace('"', "'")) };
    for (name, cols) in rows {
        let gpus = gpus_of(name).map_or(String::new(), |g| g.to_string());
        let (figures, status, note) = match cols {
            Ok((c, note)) if c.len() == 9 => ([&c[1..7], &c[8..9]].concat().join(","), "ok".to_string(), quoted(note)),
            Ok(_) => (",,,,,,".into(), "unreadable result line".into(), String::new()),
            Err(why) => (",,,,,,".into(), quoted(why), String::new()),
        };
        text.push_str(&format!("{name},{gpus},{figures},{status},{note}\n"));
    }
    dagsim::atomic_file::write_atomically(path, |w| w.write_all(text.as_bytes()))
}

/// CPU time and peak memory against GPU count, log-log, one series per case family (CPU time, not
/// wall: on a shared machine it is the figure that holds).
fn plot(path: &std::path::Path, rows: &[Row]) -> Result<()> {
    use dagsim::report::plot::{loglog_chart, Panel, Series};
    let mut cpu: Vec<Series> = Vec::new();
    let mut memory: Vec<Series> = Vec::new();
    for (name, cols) in rows {
        let (Some(gpus), Ok((c, _))) = (gpus_of(name), cols) else { continue };
        let family = name[..name.rfind('-').unwrap_or(name.len())].to_string();
        let figure = |i: usize| c.get(i).and_then(|v| v.parse::<f64>().ok());
        for (series, value) in [(&mut cpu, figure(6)), (&mut memory, figure(8))] {
            let Some(v) = value else { continue };
            match series.iter_mut().find(|s| s.label == family) {
                Some(s) => s.points.push((f64::from(gpus), v)),
                None => series.push(Series { label: family.clone(), points: vec![(f64::from(gpus), v)] }),
            }
        }
    }
    if cpu.is_empty() {
        return Err(Error::invalid(
            "--plot",
            "no case named with a GPU count (names end in -NNNgpu) finished with a CPU time above 0",
        ));
    }
    let panels = [
        (Panel { title: "CPU time per case (one warm-up and one measured step)".into(), series: cpu }, "CPU s".into()),
        (Panel { title: "peak resident memory".into(), series: memory }, "MiB".into()),
    ];
    loglog_chart(path, "dagsim bench --scaling: cost against GPU count", &panels)
}

fn run_child(name: &str, args: &Args) -> Result<u8> {
    let mut c = case(name, args.iterations)?;
    if let Some(contention) = &args.compute_contention {
        c.set_compute_contention(dagsim::hw::ComputeContention::parse(contention)?);
    }
    let mut runs = Vec::new();
    for _ in 0..args.repeat.max(1) {
        let cpu0 = cpu_s();
        let m = measure(&c, !args.no_symmetry)?;
        let cpu = cpu_s().zip(cpu0).map(|(b, a)| b - a);
        runs.push((m, cpu));
    }
    runs.sort_by(|a, b| a.0.wall_s.total_cmp(&b.0.wall_s));
    let (m, cpu) = &runs[runs.len() / 2];
    println!(
        "{:<36} {:>6} {:>10} {:>12} {:>13} {:>10.4} {:>10} {:>13.0} {:>9}",
        c.name,
        m.runs,
        m.tasks,
        m.events,
        m.flows,
        m.wall_s,
        cpu.map_or("n/a".into(), |v| format!("{v:.2}")),
        m.events as f64 / m.wall_s,
        peak_rss_mib().map_or("n/a".into(), |v| format!("{v:.0}"))
    );
    if let Some(note) = &m.note {
        eprintln!("{note}");
    }
    Ok(exit::OK)
}

/// CPU time (user + system, all threads) this process has used so far, from `/proc/self/stat`
/// (fields 14 and 15, in the kernel's fixed USER_HZ of 100 ticks a second).
fn cpu_s() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // The command name (field 2) may hold spaces; the fields after it follow its closing paren.
    let rest = &stat[stat.rfind(')')? + 2..];
    let mut fields = rest.split_whitespace().skip(11);
    let utime: f64 = fields.next()?.parse().ok()?;
    let stime: f64 = fields.next()?.parse().ok()?;
    Some((utime + stime) / 100.0)
}

/// Peak resident memory of this process (Linux `VmHWM`), MiB.
fn peak_rss_mib() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024.0)
}
