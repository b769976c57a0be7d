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

/// Runs `write` against stdout, or against `path` atomically when given (`-` means stdout).
pub fn emit(path: Option<&Path>, write: impl FnOnce(&mut dyn Write) -> std::io::Result<()>) -> Result<()> {
    match path {
        None => emit_stdout(write),
        Some(p) if p == Path::new("-") => emit_stdout(write),
        Some(p) => {
            let dir = p.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
            let mut tmp = tempfile::NamedTempFile::new_in(dir).map_err(|e| Error::io(p, e))?;
            // Writers make many small writes (a timeline has millions of events): buffer them.
            let mut buffered = std::io::BufWriter::with_capacity(BUFFER_BYTES, &mut tmp);
            write(&mut buffered).and_then(|_| buffered.flush()).map_err(|e| Error::io(p, e))?;
            drop(buffered);
            tmp.as_file_mut().flush().map_err(|e| Error::io(p, e))?;
            // Temporary files are created private; an output should be readable like any other file.
            #[cfg(unix)]
            {
                use std::os::unix::fs::PermissionsExt;
                let mode = std::fs::Permissions::from_mode(0o644);
                tmp.as_file().set_permissions(mode).map_err(|e| Error::io(p, e))?;
            }
            tmp.persist(p).map_err(|e| Error::io(p, e.error))?;
            Ok(())
        }
    }
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
