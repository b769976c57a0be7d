//! Output plumbing shared by subcommands: `--format`, and `-o FILE` written atomically (a temporary
//! file in the same directory, renamed into place), so an output is never half-written.

use dagsim::error::{Error, Result};
use std::io::Write;
use std::path::Path;

/// Output buffer size: large enough that a multi-gigabyte trace is a few thousand writes.
const BUFFER_BYTES: usize = 1 << 20;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    Text,
    Json,
    Csv,
}

/// Runs `write` against stdout, or against `path` atomically when given (`-` means stdout): see
/// [`dagsim::atomic_file`] (temporary in the same directory, fsync, rename, directory fsync,
/// removed on error or interrupt).
pub fn emit(path: Option<&Path>, write: impl FnOnce(&mut dyn Write) -> std::io::Result<()>) -> Result<()> {
    match path {
        None => emit_stdout(write),
        Some(p) if p == Path::new("-") => emit_stdout(write),
        Some(p) => dagsim::atomic_file::write_atomically(p, write),
    }
}

/// Removes temporaries on SIGINT/SIGTERM before exiting with 128 + the signal's number (130 for
/// an interrupt), so an interrupted run leaves neither a half-written output nor a stray file.
pub fn install_interrupt_cleanup() {
    let _ = ctrlc::set_handler(|| {
        dagsim::atomic_file::remove_live();
        std::process::exit(130);
    });
}

fn emit_stdout(write: impl FnOnce(&mut dyn Write) -> std::io::Result<()>) -> Result<()> {
    let stdout = std::io::stdout();
    let mut lock = std::io::BufWriter::with_capacity(BUFFER_BYTES, stdout.lock());
    match write(&mut lock).and_then(|_| lock.flush()) {
        Ok(()) => Ok(()),
        // A closed pipe (`| head`) is not an error worth reporting.
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        Err(e) => Err(Error::io("<stdout>", e)),
    }
}
