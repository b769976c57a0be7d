//! Command-line interface: parses arguments (clap), builds a validated setup, calls the library,
//! prints, and maps errors to exit codes. One file per subcommand. Only this module knows clap and
//! exit codes.

mod bench;
mod output;
mod predict;
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
}

#[derive(Debug, Subcommand)]
enum Command {
    Predict(predict::Args),
    Bench(bench::Args),
    Validate(validate::Args),
}

/// Parses the command line, runs the subcommand, returns the exit code.
pub fn run() -> ExitCode {
    let cli = Cli::parse(); // usage errors exit with code 2 inside clap
    let result = match cli.command {
        Command::Predict(args) => predict::run(args),
        Command::Bench(args) => bench::run(args),
        Command::Validate(args) => validate::run(args),
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
