//! Command-line interface: parses arguments (clap), builds a validated setup, calls the library,
//! prints, and maps errors to exit codes. One file per subcommand. Only this module knows clap and
//! exit codes.

mod bench;
mod calibrate;
#[cfg(feature = "cuda")]
mod calibrate_gpu;
mod collective;
mod compare;
mod completions;
mod output;
mod plan;
mod plan_args;
mod plot;
mod predict;
#[cfg(feature = "cuda")]
mod replay;
mod setup_args;
mod sweep;
mod timeline;
mod trace;
mod validate;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

/// Exit codes, documented in README.md.
pub mod exit {
    /// Success.
    pub const OK: u8 = 0;
    /// A validation gate failed (the model drifted past a tolerance).
    #[allow(dead_code)]
    pub const GATE_FAILED: u8 = 1;
    /// Bad usage or bad input.
    pub const BAD_INPUT: u8 = 2;
}

#[derive(Debug, Parser)]
#[command(
    name = "dagsim",
    version,
    about = "Predict distributed DNN training speed by simulating a DAG of compute and communication tasks"
)]
#[command(propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    /// Print only errors (no progress bars or summaries).
    #[arg(short, long, global = true, conflicts_with = "verbose")]
    quiet: bool,
    /// Print more about what is being done (repeat for more).
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    verbose: u8,
    /// Raise or lower a size limit, e.g. `--limit gpus=262144` (repeatable). Limits: gpus (131072),
    /// layers (100000), iterations (10000), tasks (20000000), sweep_runs (1000000),
    /// timeline_events (50000000); docs/limits.md.
    #[arg(long, global = true, value_name = "NAME=N")]
    limit: Vec<String>,
}

static VERBOSITY: std::sync::OnceLock<i8> = std::sync::OnceLock::new();

/// While alive, watches the simulations under way: if they are still running after a few seconds
/// and stderr is a terminal (and not --quiet), says the run is long and shows the share of tasks
/// simulated. Prints nothing into pipes or files, and nothing for runs that end quickly.
pub struct LongRunNotice {
    stop: std::sync::Arc<(std::sync::Mutex<bool>, std::sync::Condvar)>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl LongRunNotice {
    /// How long a run goes before it is called long.
    const AFTER: std::time::Duration = std::time::Duration::from_secs(3);

    /// A bar of its own, "long run: simulating WHAT", once the run has gone on for a few seconds.
    pub fn start(what: String) -> Self {
        Self::watch(Self::AFTER, move || {
            let bar = indicatif::ProgressBar::new(100);
            bar.set_style(
                indicatif::ProgressStyle::with_template("{msg} {bar:30} {pos}% of tasks  {elapsed}")
                    .expect("the template is valid"),
            );
            bar.set_message(format!("long run: simulating {what}"));
            let end = bar.clone();
            (Box::new(move |percent| bar.set_position(percent)), Box::new(move || end.finish_and_clear()))
        })
    }

    /// The share of tasks simulated, as the message of `bar` (a sweep's bar of points, whose
    /// template shows `{msg}`): a point that runs long shows that it moves.
    pub fn beside(bar: &indicatif::ProgressBar) -> Self {
        let bar = bar.clone();
        Self::watch(Self::AFTER, move || {
            let end = bar.clone();
            let show = move |percent| bar.set_message(format!("{percent}% of the tasks of points started"));
            (Box::new(show), Box::new(move || end.set_message("")))
        })
    }

    /// After `after`, makes the display (`setup` gives what shows a percentage and what ends the
    /// display) and updates it four times a second until dropped. Nothing unless stderr is a
    /// terminal and not --quiet.
    fn watch<F>(after: std::time::Duration, setup: F) -> Self
    where
        F: FnOnce() -> (Box<dyn Fn(u64)>, Box<dyn FnOnce()>) + Send + 'static,
    {
        use std::io::IsTerminal;
        let stop = std::sync::Arc::new((std::sync::Mutex::new(false), std::sync::Condvar::new()));
        if verbosity() < 0 || !std::io::stderr().is_terminal() {
            return LongRunNotice { stop, thread: None };
        }
        let (base_done, base_total) = dagsim::sim::progress();
        let watch = stop.clone();
        let thread = std::thread::spawn(move || {
            let (lock, wake) = &*watch;
            let wait = |d| {
                let stopped = lock.lock().unwrap_or_else(|e| e.into_inner());
                *wake.wait_timeout_while(stopped, d, |s| !*s).unwrap_or_else(|e| e.into_inner()).0
            };
            if wait(after) {
                return;
            }
            let (show, end) = setup();
            loop {
                let (done, total) = dagsim::sim::progress();
                let (done, total) = (done.saturating_sub(base_done), total.saturating_sub(base_total));
                show((done * 100).checked_div(total).unwrap_or(0));
                if wait(std::time::Duration::from_millis(250)) {
                    break;
                }
            }
            end();
        });
        LongRunNotice { stop, thread: Some(thread) }
    }
}

impl Drop for LongRunNotice {
    fn drop(&mut self) {
        let (lock, wake) = &*self.stop;
        *lock.lock().unwrap_or_else(|e| e.into_inner()) = true;
        wake.notify_all();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// -1 with --quiet, 0 by default, 1+ with -v; for subcommands deciding what to print on stderr.
pub fn verbosity() -> i8 {
    *VERBOSITY.get().unwrap_or(&0)
}

#[derive(Debug, Subcommand)]
enum Command {
    Predict(predict::Args),
    Plan(plan::Args),
    Bench(bench::Args),
    Validate(validate::Args),
    Trace(trace::Args),
    #[cfg(feature = "cuda")]
    Replay(replay::Args),
    Timeline(timeline::Args),
    Sweep(sweep::Args),
    Completions(completions::Args),
    Compare(compare::Args),
    Calibrate(calibrate::Args),
    Collective(collective::Args),
    Plot(plot::Args),
}

/// Parses the command line, runs the subcommand, returns the exit code.
pub fn run() -> ExitCode {
    let cli = Cli::parse(); // usage errors exit with code 2 inside clap
    let _ = VERBOSITY.set(if cli.quiet { -1 } else { cli.verbose.min(3) as i8 });
    let mut limits = dagsim::limits::Limits::default();
    for spec in &cli.limit {
        if let Err(e) = limits.apply(spec) {
            eprintln!("error: {e}");
            return ExitCode::from(exit::BAD_INPUT);
        }
    }
    dagsim::limits::set(limits);
    output::install_interrupt_cleanup();
    let result = match cli.command {
        Command::Predict(args) => predict::run(args),
        Command::Plan(args) => plan::run(args),
        Command::Bench(args) => bench::run(args),
        Command::Validate(args) => validate::run(args),
        Command::Trace(args) => trace::run(args),
        #[cfg(feature = "cuda")]
        Command::Replay(args) => replay::run(args),
        Command::Timeline(args) => timeline::run(args),
        Command::Sweep(args) => sweep::run(args),
        Command::Completions(args) => completions::run(args),
        Command::Compare(args) => compare::run(args),
        Command::Calibrate(args) => calibrate::run(args),
        Command::Collective(args) => collective::run(args),
        Command::Plot(args) => plot::run(args),
    };
    match result {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(exit::BAD_INPUT)
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn clap_definition_is_consistent() {
        use clap::CommandFactory;
        super::Cli::command().debug_assert();
    }
}
