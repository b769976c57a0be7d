//! The `dagsim` binary: a thin shell over the library; all work happens in `dagsim::cli`.

mod cli;

fn main() -> std::process::ExitCode {
    cli::run()
}
